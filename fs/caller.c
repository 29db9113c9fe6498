/* caller.c - read a requesting task's syscall and exit state from /proc.
 *
 * Each FUSE thread keeps the /proc files it opened for the last few
 * tasks, and reads them again with pread: a writer's open and close each
 * ask /proc, and opening a /proc file walks its path every time.  After
 * the machine idled 20 ms (requests seconds apart), an open+read+close of
 * /proc/<tid>/syscall took 60 us here and a pread of it kept open 28 us.
 * A kept file whose task has gone fails (ESRCH, or ENOENT for the fd
 * directory), even when its number has gone to a new task: it is then
 * opened afresh.
 */
#define _GNU_SOURCE
#include "caller.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../transport/clock.h"

#define PF_EXITING 0x00000004   /* include/linux/sched.h */
#define SETTLE_NS (20u * 1000 * 1000) /* see caller_syscall() */

enum proc_file { PROC_SYSCALL, PROC_STAT, PROC_FD, PROC_FILES };
static const char *const proc_name[PROC_FILES] = { "syscall", "stat", "fd" };

#define KEPT_TASKS 8
struct kept {
	pid_t tid[KEPT_TASKS];
	int fd[KEPT_TASKS][PROC_FILES];
	unsigned next;                  /* the slot a new task takes */
};
static __thread struct kept *kept;
static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;

static void kept_close(void *arg)
{
	struct kept *k = arg;

	for (int i = 0; i < KEPT_TASKS; i++)
		for (int f = 0; f < PROC_FILES; f++)
			if (k->fd[i][f] >= 0)
				close(k->fd[i][f]);
	free(k);
}

static void kept_key_make(void)
{
	if (pthread_key_create(&kept_key, kept_close))
		abort();        /* only when the process is out of keys */
}

/* This thread's slot for tid's files, a new one (taking the oldest's)
 * when it has none; NULL without memory. */
static int *kept_slot(pid_t tid)
{
	if (!kept) {
		pthread_once(&kept_once, kept_key_make);
		if (!(kept = malloc(sizeof(*kept))))
			return NULL;
		memset(kept->tid, 0, sizeof(kept->tid));
		memset(kept->fd, 0xff, sizeof(kept->fd));       /* -1 each */
		kept->next = 0;
		pthread_setspecific(kept_key, kept);
	}
	for (int i = 0; i < KEPT_TASKS; i++)
		if (kept->tid[i] == tid)
			return kept->fd[i];
	unsigned i = kept->next++ % KEPT_TASKS;
	for (int f = 0; f < PROC_FILES; f++)
		if (kept->fd[i][f] >= 0)
			close(kept->fd[i][f]);
	kept->tid[i] = tid;
	memset(kept->fd[i], 0xff, sizeof(kept->fd[i]));
	return kept->fd[i];
}

/* tid's /proc file what, kept open when it can be; -1 if it cannot be
 * opened.  proc_done() when done with it. */
static int proc_open(pid_t tid, enum proc_file what)
{
	char path[64];
	int *kfd = kept_slot(tid);

	if (kfd && kfd[what] >= 0)
		return kfd[what];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)tid, proc_name[what]);
	int fd = open(path, O_RDONLY | O_CLOEXEC | (what == PROC_FD ? O_DIRECTORY : 0));
	if (kfd)
		kfd[what] = fd;
	return fd;
}

static void proc_done(int fd)
{
	if (!kept)              /* not kept: no memory for it */
		close(fd);
}

/* A kept file that failed: its task has gone, and the next proc_open()
 * opens by the path again (which a new task may hold now). */
static void proc_drop(pid_t tid, enum proc_file what, int fd)
{
	int *kfd = kept ? kept_slot(tid) : NULL;

	if (kfd && kfd[what] == fd)
		kfd[what] = -1;
	close(fd);
}

static ssize_t read_proc(pid_t tid, enum proc_file what, char *buf, size_t len)
{
	for (int tries = 0; tries < 2; tries++) {
		int fd = proc_open(tid, what);
		if (fd < 0)
			return -1;
		ssize_t n = pread(fd, buf, len - 1, 0);
		if (n >= 0) {
			buf[n] = 0;
			proc_done(fd);
			return n;
		}
		proc_drop(tid, what, fd);
	}
	return -1;
}

/* openat2 keeps its flags in a struct in the caller's memory. */
static int openat2_flags(pid_t tid, unsigned long how, unsigned long long *flags)
{
	struct iovec local = { flags, sizeof(*flags) };
	struct iovec remote = { (void *)how, sizeof(*flags) };
	return process_vm_readv(tid, &local, 1, &remote, 1, 0) == sizeof(*flags) ? 0 : -1;
}

/* The caller's /proc/<tid>/syscall.  A request can reach us before its
 * caller has gone to sleep waiting for the answer (a polling leader picks
 * requests up within microseconds, and the wake-up may even preempt the
 * caller), and until it sleeps the kernel says "running" instead of the
 * syscall.  We give it up to SETTLE_NS to get there, sleeping so that it
 * can run.  (Without this a waiting open failed at once with ENOENT now
 * and then: 0-14 of 300 opens here.) */
static ssize_t caller_syscall(pid_t tid, char *buf, size_t len)
{
	const struct timespec nap = { 0, 20 * 1000 };
	uint64_t end = clock_mono_ns() + SETTLE_NS;
	ssize_t n;

	while ((n = read_proc(tid, PROC_SYSCALL, buf, len)) > 0 &&
	       !strncmp(buf, "running", 7) && clock_mono_ns() < end)
		nanosleep(&nap, NULL);
	return n;
}

enum caller_intent caller_intent(pid_t tid)
{
	char buf[256];
	unsigned long a[7];
	long nr;

	if (tid <= 0 || caller_syscall(tid, buf, sizeof(buf)) <= 0)
		return CALLER_UNKNOWN;
	if (sscanf(buf, "%ld %lx %lx %lx %lx %lx %lx", &nr, &a[0], &a[1], &a[2],
		   &a[3], &a[4], &a[5]) != 7)
		return CALLER_UNKNOWN;  /* "running": not blocked in a syscall */
	unsigned long long flags;
	if (nr == SYS_openat)
		flags = a[2];
#ifdef SYS_open
	else if (nr == SYS_open)
		flags = a[1];
#endif
	else if (nr == SYS_openat2 && openat2_flags(tid, a[2], &flags) == 0)
		;
	else
		return nr == SYS_openat2 ? CALLER_UNKNOWN : CALLER_OTHER;
	if ((flags & (O_CREAT | O_EXCL)) == O_CREAT)
		return (flags & O_ACCMODE) != O_RDONLY ? CALLER_OPEN_CREATE : CALLER_OPEN_OTHER;
	if (flags & O_CREAT)
		return CALLER_OPEN_EXCL;
	if (flags & (O_CREAT | O_PATH | O_DIRECTORY) || (flags & O_ACCMODE) != O_RDONLY)
		return CALLER_OPEN_OTHER;
	return CALLER_OPEN_READ;
}

/* Field n (3 and on, numbered as in proc_pid_stat(5)) of a
 * /proc/<tid>/stat line, or NULL. */
static const char *stat_field(const char *buf, int n)
{
	const char *p = strrchr(buf, ')');      /* comm may hold spaces and parens */

	for (int field = 2; p && field < n; field++)
		p = strchr(p + 1, ' ');
	return p ? p + 1 : NULL;
}

int caller_cpu(pid_t tid)
{
	char buf[1024];
	const char *f;
	int cpu;

	if (tid <= 0 || read_proc(tid, PROC_STAT, buf, sizeof(buf)) <= 0)
		return -1;
	f = stat_field(buf, 39);
	return f && sscanf(f, "%d", &cpu) == 1 && cpu >= 0 ? cpu : -1;
}

/* /proc/<tid>/maps, a line a mapping: "start-end perms offset maj:min
 * inode path", perms "rwxs" or "rwxp".  Read by lines: a process with
 * torch loaded maps over a thousand files, but only writers that opened
 * for reading too ask (fs/ops.c). */
int caller_maps_shared(pid_t tid, dev_t dev, ino_t ino)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)tid);
	FILE *f = tid > 0 ? fopen(path, "re") : NULL;
	if (!f)
		return -1;
	while (!found && getline(&line, &cap, f) > 0) {
		char perms[5];
		unsigned maj, min;
		unsigned long long i;

		found = sscanf(line, "%*x-%*x %4s %*x %x:%x %llu", perms, &maj, &min, &i) == 4 &&
			perms[3] == 's' && maj == major(dev) && min == minor(dev) && i == ino;
	}
	free(line);
	fclose(f);
	return found;
}

enum caller_state caller_state(pid_t tid)
{
	char buf[1024];

	if (tid <= 0 || read_proc(tid, PROC_STAT, buf, sizeof(buf)) <= 0)
		return CALLER_ALIVE;
	const char *f = stat_field(buf, 9), *e = stat_field(buf, 52);
	unsigned long flags = f ? strtoul(f, NULL, 10) : 0;
	long exit_code = e ? strtol(e, NULL, 10) : 0;
	if (!(flags & PF_EXITING))
		return CALLER_ALIVE;
	return WIFSIGNALED((int)exit_code) ? CALLER_KILLED : CALLER_EXITING;
}

/* Whether descriptor name of the task's fd directory is the file dev:ino.
 * AT_STATX_DONT_SYNC: a FUSE file's attributes as the kernel has them,
 * without a GETATTR to its daemon, which may be this one, busy here. */
static int fd_is(int dfd, const char *name, dev_t dev, ino_t ino)
{
	struct statx stx;

	if (!dev)
		return 1;
	return !statx(dfd, name, AT_STATX_DONT_SYNC, STATX_INO, &stx) &&
	       makedev(stx.stx_dev_major, stx.stx_dev_minor) == dev && stx.stx_ino == ino;
}

int caller_holds_fd(pid_t tid, const char *suffix, dev_t dev, ino_t ino)
{
	/* The listing goes to the stack.  opendir() mallocs 32 KiB, and in
	 * one close of six that memory was new to the thread's heap, faulted
	 * in afresh: the scan took 120-190 us instead of 45-80 (cold
	 * hand-offs, perf).  Here it takes 44 us at the median. */
	_Alignas(struct dirent64) char ents[4096];
	char link[4096];
	size_t slen = strlen(suffix);
	ssize_t got = -1;
	int found = -1;

	int dfd = tid > 0 ? proc_open(tid, PROC_FD) : -1;
	if (dfd >= 0 && (lseek(dfd, 0, SEEK_SET) < 0 || (got = getdents64(dfd, ents, sizeof(ents))) < 0)) {
		proc_drop(tid, PROC_FD, dfd);   /* kept from a task gone */
		if ((dfd = proc_open(tid, PROC_FD)) >= 0)
			got = getdents64(dfd, ents, sizeof(ents));
	}
	if (dfd < 0)
		return -2;
	/* readlinkat from the open directory: a full path would walk
	 * /proc/<pid> again for every descriptor, on every writer's close. */
	while (found < 1 && got > 0) {
		for (ssize_t at = 0; found < 1 && at < got;) {
			const struct dirent64 *de = (const void *)(ents + at);
			at += de->d_reclen;
			if (de->d_name[0] == '.')
				continue;
			ssize_t n = readlinkat(dfd, de->d_name, link, sizeof(link) - 1);
			found = n >= (ssize_t)slen && !memcmp(link + n - slen, suffix, slen) &&
				fd_is(dfd, de->d_name, dev, ino);
		}
		if (found < 1)
			got = getdents64(dfd, ents, sizeof(ents));
	}
	proc_done(dfd);
	return found;
}
