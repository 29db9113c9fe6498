/* caller.h - what the process behind a FUSE request is doing.
 *
 * FUSE does not tell a LOOKUP why it happens, yet SPEC §4.3 wants a plain
 * open() of a missing key to wait while stat() and O_CREAT opens must not.
 * The caller's thread is blocked in its system call while we answer, so
 * /proc/<tid>/syscall says which call and with what flags.  Likewise a FLUSH
 * from a task that is dying of a signal is a SIGKILLed writer, whose object
 * must not be published.
 */
#ifndef OMNI_CALLER_H
#define OMNI_CALLER_H

#include <sys/types.h>

enum caller_intent {
	CALLER_UNKNOWN,         /* cannot tell (no /proc access, pid 0) */
	CALLER_OPEN_READ,       /* open/openat/openat2 O_RDONLY without O_CREAT */
	CALLER_OPEN_CREATE,     /* an open for writing with O_CREAT, not O_EXCL */
	CALLER_OPEN_EXCL,       /* an open with O_CREAT and O_EXCL */
	CALLER_OPEN_OTHER,      /* any other open (for writing, O_PATH...) */
	CALLER_OTHER,           /* not an open: stat, getxattr... */
};

enum caller_intent caller_intent(pid_t tid);
/* 1 if the task still has a descriptor open on the file of device dev and
 * inode ino, whose path ends in suffix ("/from/to/key"): a dup()ed writer
 * fd, as a shell's redirection leaves, so this close is not the last one.
 * (The path, as the task's mount namespace names it, picks the few worth
 * a statx; a file elsewhere of that name, as cp's source in `cp
 * /saved/0/1/k <mnt>/0/1/k`, or the same key on another node's mount, is
 * not the object.)  0 if it has others only; -1 if it has none at all, as
 * a task closing its files on the way out has: only then is
 * caller_state() worth asking.  -2 if its descriptors cannot be read (pid
 * 0: a task outside our pid namespace; no access).  dev 0: by the path
 * alone. */
int caller_holds_fd(pid_t tid, const char *suffix, dev_t dev, ino_t ino);
/* 1 if the task has a shared mapping of the file of device dev and inode
 * ino: it holds the file as a descriptor would, and its dirty pages come
 * as writes when it is unmapped.  0 if not, -1 if its maps cannot be read. */
int caller_maps_shared(pid_t tid, dev_t dev, ino_t ino);
enum caller_state { CALLER_ALIVE, CALLER_EXITING, CALLER_KILLED };
/* Whether the task is exiting, and if so whether a signal killed it. */
enum caller_state caller_state(pid_t tid);
/* The CPU the task ran on last (blocked in its request: where it goes on
 * when answered), or -1 when that cannot be read. */
int caller_cpu(pid_t tid);

#endif
