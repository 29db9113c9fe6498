/* view.h - rank-shard views (SPEC §5) as open files.
 *
 * Opening <key>.rank<r>of<T> (or <key>) over shards <key>.rank<i>of<S>
 * finds the shards, waits for the missing ones as any open would, plans
 * the view from their headers (kvfmt) and brings exactly the byte ranges
 * it needs: from this node's pool, or pulled from the owners, which hold
 * the shards for the view from its open on.  Each range is verified
 * against its sources' per-head checksums as it lands, before a read
 * sees it.  A complete read of a view counts, at each source's owner, the
 * heads it delivered (consumption by coverage).
 */
#ifndef OMNI_VIEW_H
#define OMNI_VIEW_H

#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

struct ns;
struct cluster;
struct stats;
struct view;

/* The view opens in flight, so that shutdown can wait for them; the views
 * open, so that it can close those the kernel never will; and the
 * large buffers of views that closed, kept for the next (VIEW_KEEP_*):
 * a fresh one costs a page fault and a cleared page every 4 KiB, and
 * over RDMA a registration, more than the gather that fills it. */
#define VIEW_KEEP_BUFS 4
#define VIEW_KEEP_BYTES (256u << 20)
#define VIEW_KEEP_MIN (1u << 20)        /* smaller ones are cheap to make */
struct view_jobs {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned n;
	struct view *open;
	struct { void *p; size_t size; } kept[VIEW_KEEP_BUFS];
	size_t kept_bytes;
};
void view_jobs_init(struct view_jobs *j);
/* Waits until every view open has been answered (call after ns_stop(),
 * which answers their waits, and before the cluster goes), closes the
 * views still open (the FUSE loop is over: nobody else will), then frees
 * the kept buffers (cl: what made them, or NULL). */
void view_jobs_drain(struct view_jobs *j, struct cluster *cl);

struct view_env {
	struct ns *ns; struct cluster *cl; struct stats *st; struct view_jobs *jobs;
	int64_t wait_ms;        /* a job's: the opener's own wait for shards (0: the edge's) */
};

/* Answers a view open: a view, or err (-EXDEV: not a view after all,
 * open the key itself with NS_OPEN_EXACT). */
typedef void (*view_done_fn)(void *arg, int err, struct view *v);
/* Resolves and assembles the view named by key inode ino on a thread of
 * its own (it may wait for shards, wait_ms or the edge's if 0, and pull);
 * done() is called once: on the caller's thread if here (the caller may
 * take the time to plan) and the shards are all published, none of them
 * on another node (or the view is refused); else on the view's thread, or
 * on a peer's when a pull answers it (ENOENT: an owner no longer has its
 * shard).  0, or -errno (then done is not called). */
int view_open(const struct view_env *env, uint64_t ino, int64_t wait_ms, int here,
	      view_done_fn done, void *arg);
/* The bytes of [off, off+len): iov into the view.  When that is more than
 * none it stays valid until view_read_done(), even past the view's close:
 * the reader may close it, and its release be served, while the reply
 * that answered its read is still being sent. */
ssize_t view_read(struct view *v, uint64_t off, size_t len, struct iovec *iov);
void view_read_done(struct view *v);
/* After each read, and at close(2): once the view has had every byte,
 * its complete read counts towards its sources' consumption (once). */
void view_flush(struct view *v);
void view_close(struct view *v);
/* 1 if key inode ino names a view whose shards are all published. */
int view_exists(const struct view_env *env, uint64_t ino);
/* The base of a view named name (what its shards' keys are of: "x" for
 * x, x.rank1of2 and x.rank0of4), into out of size bytes. */
void view_base(const char *name, char *out, size_t size);
/* user.omni.kv of a view whose shards are all here: its length, or -errno. */
int view_summary(const struct view_env *env, uint64_t ino, char *buf, size_t size);
/* The size of that view, as stat says it: 0, or -ENODATA (not a view, or
 * its shards not all here yet), -errno. */
int view_size(const struct view_env *env, uint64_t ino, uint64_t *size);
/* An open view's size. */
uint64_t view_bytes(const struct view *v);

#endif
