/* ops_internal.h - what ops.c (the FUSE operations) and ops_ioctl.c (the
 * ioctls of fs/direct.h) share: the filesystem's state, a waiting open,
 * and the steps of a lookup and a wait that both take.
 */
#ifndef OMNI_OPS_INTERNAL_H
#define OMNI_OPS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "callwait.h"
#include "fs.h"
#include "stats.h"
#include "vfile.h"
#include "view.h"

#define RETRY_SLOTS 64          /* fs.retrying: threads whose open heard ESTALE */

struct fs {
	struct fuse_session *se;
	struct ns *ns;
	struct cluster *cl;             /* NULL: a single node */
	struct stats st;
	struct vfile_ctx vf;
	struct view_env venv;
	struct view_jobs vjobs;
	struct callwait cw;             /* threads' own waits for their next open */
	/* The thread that op_lookup last let through a kept name for an
	 * O_CREAT open (NS_LOOKUP_KNOWN), and that name's inode. */
	struct { pthread_mutex_t lock; pid_t tid; uint64_t ino; } creating;
	/* Threads whose open heard ESTALE (tid << 32 | when, about in us),
	 * in a slot by thread: the kernel tries that open once more (ops.c's
	 * retrying). */
	_Atomic uint64_t retrying[RETRY_SLOTS];
	unsigned max_threads, spin_us;
	int mounted;
	dev_t dev;                      /* the mount's, for caller_holds_fd (0: unknown) */
	atomic_int unseen_said;         /* caller_unseen's line is out */
	int epochs;                     /* the kernel takes FUSE_NOTIFY_INC_EPOCH */
	uint64_t cookie;                /* proves to a direct caller that it reads us */
};

/* A waiting open: the request and its file info, kept until answered. */
struct op_wait {
	struct ns_waiter w;
	fuse_req_t req;
	struct fuse_file_info fi;
	fuse_ino_t ino;
	int oflags;                     /* ns_open's own: NS_OPEN_KEPT, _RETRY */
};

/* An open directory (its fi->fh).  Its entries are taken at its first
 * READDIR, not at its open: a descriptor opened for ioctls (the Python
 * module's of an edge) lists nothing.  unwaited: OMNIFS_IOC_UNWAIT ended
 * the GETs waiting through it, and ends those that come later at once.
 * refs: RELEASEDIR's, and a GET's while it looks at unwaited after its
 * wait is queued (another thread may answer it meanwhile, and its caller
 * close the directory). */
struct dir_snap {
	struct ns_dirent *ents;
	size_t n;
	int taken;
	atomic_int unwaited;
	atomic_int refs;
};

#define FH_VFILE 1u             /* tag bits on fh: a struct vbuf, */
#define FH_VIEW  2u             /* a struct view (else an ns handle) */
#define FH_TAGS  (FH_VFILE | FH_VIEW)

static inline struct fs *fs_of(fuse_req_t req) { return fuse_req_userdata(req); }

/* ops.c */
void dir_put(struct dir_snap *d);
int ask_peers(struct fs *fs, fuse_ino_t parent, const char *name, int will_wait,
	      int64_t own_ms, int learn);
int exists_elsewhere(struct fs *fs, fuse_ino_t parent, const char *name, int *claim);
void wait_interrupt(fuse_req_t req, void *data);        /* a wait's interrupt... */
int wait_interrupted(struct ns_waiter *nw);             /* ... and its check */

/* ops_ioctl.c */
void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned cmd, void *arg,
	      struct fuse_file_info *fi, unsigned flags, const void *in_buf,
	      size_t in_bufsz, size_t out_bufsz);

#endif
