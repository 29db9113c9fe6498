/* ops_ioctl.c - the ioctls of fs/direct.h: a process of this node copies
 * an object's bytes itself (WHERE, PLACE, their CUDA twins, a streamed
 * object's WINDOW), hands over a small object in one request (PUT, GET on
 * an edge), or removes a request's objects everywhere (CLEANUP).  Each is
 * a plain open, read, write or close in fewer steps, and answers as they
 * would.
 */
#define _GNU_SOURCE
#include "ops_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "caller.h"
#include "cluster.h"
#include "direct.h"
#include "loop.h"
#include "../transport/pool.h"

/* PLACE's and CUDA_PLACE's flags (fs/direct.h): 1 for a sole writer, 0,
 * or -EINVAL for flags this daemon does not know. */
static int place_sole(const void *in_buf, size_t flags_at)
{
	uint32_t flags;

	memcpy(&flags, (const char *)in_buf + flags_at, sizeof(flags));
	return flags & ~OMNIFS_PLACE_SOLE ? -EINVAL : !!(flags & OMNIFS_PLACE_SOLE);
}

/* The GPU pool's IPC handle and an object's place in it, for a GPU
 * process of this node: OMNIFS_IOC_CUDA, a published object to copy out
 * (its close then counts a complete read); OMNIFS_IOC_CUDA_PLACE, a new
 * one of the size asked, to copy in (its close publishes). */
static void cuda_ioctl(fuse_req_t req, unsigned cmd, struct ns_handle *h, const void *in_buf,
		       size_t in_bufsz, size_t out_bufsz)
{
	struct fs *fs = fs_of(req);
	struct omnifs_cuda c = { .magic = OMNIFS_CUDA_MAGIC };
	struct ns_span sp[OMNIFS_DIRECT_EXT];
	int place = cmd == OMNIFS_IOC_CUDA_PLACE, dev, n = 0, rc;

	if (out_bufsz < sizeof(c) || (place && in_bufsz < sizeof(c)))
		return (void)fuse_reply_err(req, EINVAL);
	if (pool_ipc(fs->vf.pool, &dev, c.handle))
		return (void)fuse_reply_err(req, EOPNOTSUPP);
	if (place) {
		memcpy(&c.size, (const char *)in_buf + offsetof(struct omnifs_cuda, size),
		       sizeof(c.size));
		int sole = place_sole(in_buf, offsetof(struct omnifs_cuda, flags));
		rc = sole < 0 ? sole : ns_direct_place(fs->ns, h, c.size, sp, OMNIFS_DIRECT_EXT,
						       &n, ST_CUDA_PUTS, sole);
	} else {
		rc = ns_direct_spans(fs->ns, h, sp, OMNIFS_DIRECT_EXT, &n, &c.size, &c.xxh3);
	}
	if (rc)
		return (void)fuse_reply_err(req, -rc);
	c.dev = (uint32_t)dev;
	c.n = (uint32_t)n;
	for (int i = 0; i < n; i++) {
		c.ext[i].off = sp[i].off;
		c.ext[i].len = sp[i].len;
	}
	if (!place)
		ns_direct_done(fs->ns, h, ST_CUDA_GETS);
	fuse_reply_ioctl(req, 0, &c, sizeof(c));
}

/* OMNIFS_IOC_PLACE: a new object in host memory, filled by a process of
 * this node with process_vm_writev(2).  Its pieces as our addresses. */
static int host_place(struct fs *fs, struct ns_handle *h, uint64_t size, int sole,
		      struct iovec *iov, int *n)
{
	struct ns_span sp[OMNIFS_DIRECT_EXT];
	uint8_t *base = pool_base(fs->vf.pool);
	int rc;

	if (sole < 0)
		return sole;
	if (!pool_cpu(fs->vf.pool))
		return -EOPNOTSUPP;     /* not memory a process can copy to */
	if ((rc = ns_direct_place(fs->ns, h, size, sp, OMNIFS_DIRECT_EXT, n, ST_DIRECT_PUTS,
				  sole)))
		return rc;
	for (int i = 0; i < *n; i++)
		iov[i] = (struct iovec){ base + sp[i].off, sp[i].len };
	return 0;
}

/* PLACED (a writer's bytes so far are final) and LANDED (a reader waits
 * for its first bytes): one 64-bit offset in, LANDED's count out. */
static void upto_ioctl(fuse_req_t req, struct fs *fs, unsigned cmd, struct ns_handle *h,
		       const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	uint64_t upto, have;
	int rc;

	if (in_bufsz != sizeof(upto) || (cmd == OMNIFS_IOC_LANDED && out_bufsz < sizeof(have)))
		return (void)fuse_reply_err(req, EINVAL);
	memcpy(&upto, in_buf, sizeof(upto));
	if (cmd == OMNIFS_IOC_PLACED) {
		rc = ns_direct_placed(fs->ns, h, upto, caller_cpu(fuse_req_ctx(req)->pid));
		return (void)(rc ? fuse_reply_err(req, -rc) : fuse_reply_ioctl(req, 0, NULL, 0));
	}
	rc = ns_direct_landing(fs->ns, h, upto, &have);
	return (void)(rc ? fuse_reply_err(req, -rc) : fuse_reply_ioctl(req, 0, &have, sizeof(have)));
}

/* OMNIFS_IOC_WINDOW: a streamed object's next bytes, in the pool. */
static void window_ioctl(fuse_req_t req, struct fs *fs, struct ns_handle *h, const void *in_buf,
			 size_t in_bufsz, size_t out_bufsz)
{
	struct omnifs_window w;
	int rc;

	if (in_bufsz != sizeof(w) || out_bufsz < sizeof(w))
		return (void)fuse_reply_err(req, EINVAL);
	memcpy(&w, in_buf, sizeof(w));
	rc = ns_direct_window(fs->ns, h, w.off, w.len, &w.pool_off, &w.len, &w.size);
	(void)(rc ? fuse_reply_err(req, -rc) : fuse_reply_ioctl(req, 0, &w, sizeof(w)));
}

/* OMNIFS_IOC_SHARE: the pool's file, for a process to map once. */
static void share_ioctl(fuse_req_t req, struct fs *fs, size_t out_bufsz)
{
	struct omnifs_share s = { .magic = OMNIFS_SHARE_MAGIC, .pid = (uint32_t)getpid(),
				  .cookie = fs->cookie };
	struct pool_usage u;
	void *label;
	int fd;

	if (out_bufsz < sizeof(s))
		return (void)fuse_reply_err(req, EINVAL);
	if (pool_share(fs->vf.pool, &fd, &label))
		return (void)fuse_reply_err(req, EOPNOTSUPP);
	pool_usage(fs->vf.pool, &u);
	s.fd = fd;
	s.base = (uintptr_t)pool_base(fs->vf.pool);
	s.size = u.size;
	fuse_reply_ioctl(req, 0, &s, sizeof(s));
}

/* The same-node hand-over (fs/direct.h): one request instead of one per
 * MiB.  Only for those who could read and write our memory anyway. */
static void direct_ioctl(fuse_req_t req, unsigned cmd, struct fuse_file_info *fi,
			 const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct fs *fs = fs_of(req);
	struct omnifs_direct d = { .magic = OMNIFS_DIRECT_MAGIC };
	struct iovec iov[OMNIFS_DIRECT_EXT];
	uid_t uid = fuse_req_ctx(req)->uid;
	int n = 0, rc;

	if (cmd != OMNIFS_IOC_WHERE && cmd != OMNIFS_IOC_PLACE && cmd != OMNIFS_IOC_CUDA &&
	    cmd != OMNIFS_IOC_PLACED && cmd != OMNIFS_IOC_CUDA_PLACE && cmd != OMNIFS_IOC_SHARE &&
	    cmd != OMNIFS_IOC_WHERE_SOON && cmd != OMNIFS_IOC_LANDED && cmd != OMNIFS_IOC_WINDOW)
		return (void)fuse_reply_err(req, ENOTTY);
	if (fi->fh & FH_TAGS)           /* views, .omni files: no one place */
		return (void)fuse_reply_err(req, EOPNOTSUPP);
	if (uid != 0 && uid != geteuid())
		return (void)fuse_reply_err(req, EPERM);
	if (cmd == OMNIFS_IOC_SHARE)
		return share_ioctl(req, fs, out_bufsz);
	struct ns_handle *h = (struct ns_handle *)(uintptr_t)fi->fh;
	if (cmd == OMNIFS_IOC_CUDA || cmd == OMNIFS_IOC_CUDA_PLACE)
		return cuda_ioctl(req, cmd, h, in_buf, in_bufsz, out_bufsz);
	if (cmd == OMNIFS_IOC_PLACED || cmd == OMNIFS_IOC_LANDED)
		return upto_ioctl(req, fs, cmd, h, in_buf, in_bufsz, out_bufsz);
	if (cmd == OMNIFS_IOC_WINDOW)
		return window_ioctl(req, fs, h, in_buf, in_bufsz, out_bufsz);
	if (out_bufsz < sizeof(d))
		return (void)fuse_reply_err(req, EINVAL);
	if (cmd == OMNIFS_IOC_PLACE) {
		if (in_bufsz < sizeof(d))
			return (void)fuse_reply_err(req, EINVAL);
		memcpy(&d.size, (const char *)in_buf + offsetof(struct omnifs_direct, size),
		       sizeof(d.size));
		rc = host_place(fs, h, d.size, place_sole(in_buf, offsetof(struct omnifs_direct, flags)),
				iov, &n);
	} else if (cmd == OMNIFS_IOC_WHERE_SOON) {
		/* Another node's object that lands here whole: copied out
		 * behind its pull, range by range (OMNIFS_IOC_LANDED). */
		int landing = 0;
		rc = ns_direct_where(fs->ns, h, iov, OMNIFS_DIRECT_EXT, &n, &d.size, &d.xxh3,
				     &landing);
		if (!rc && landing)
			d.flags = OMNIFS_WHERE_LANDING;
		else if (!rc)
			ns_direct_done(fs->ns, h, ST_DIRECT_GETS);
	} else {
		/* Another node's object that lands here whole: once it has,
		 * one memmove, not a FUSE request per MiB behind its pull. */
		ns_direct_landed(fs->ns, h);
		rc = ns_direct_where(fs->ns, h, iov, OMNIFS_DIRECT_EXT, &n, &d.size, &d.xxh3, NULL);
		if (!rc)        /* the caller copies after the answer: its close counts */
			ns_direct_done(fs->ns, h, ST_DIRECT_GETS);
	}
	if (rc)
		return (void)fuse_reply_err(req, -rc);
	d.pid = (uint32_t)getpid();
	d.cookie_addr = (uintptr_t)&fs->cookie;
	d.cookie = fs->cookie;
	d.n = (uint32_t)n;
	for (int i = 0; i < n; i++) {
		d.ext[i].addr = (uintptr_t)iov[i].iov_base;
		d.ext[i].len = iov[i].iov_len;
	}
	fuse_reply_ioctl(req, 0, &d, sizeof(d));
}

/* Small objects in one request (fs/direct.h): a create, a write and a
 * close; or an open that may wait, a read to the end and a close. */

/* A waiting GET: an open's wait, and the room the caller gave. */
struct op_get {
	struct op_wait w;       /* first: the wait's interrupt frees it whole */
	size_t cap;             /* the caller's buffer, header included */
};

#define SMALL_IOV 16

static void get_answer(struct ns_waiter *nw, int err, struct ns_handle *h)
{
	struct op_get *g = (struct op_get *)nw;
	struct ns *ns = fs_of(g->w.req)->ns;
	struct omnifs_small s = { .magic = OMNIFS_SMALL_MAGIC };
	struct iovec iov[1 + SMALL_IOV] = { { &s, sizeof(s) } };
	int n = 0;

	if (err == -EAGAIN)             /* a view: open(2) makes it */
		err = -EOPNOTSUPP;
	if (err == -ENOENT && nw->cut)  /* short of its wait: asks again */
		err = -ETIME;
	if (!err)
		err = ns_direct_where(ns, h, iov + 1, SMALL_IOV, &n, &s.size, &s.xxh3, NULL);
	if (err == -EOPNOTSUPP && h) {  /* a pool the CPU cannot address */
		err = ns_direct_bounce(ns, h, g->cap - sizeof(s), iov + 1, &s.size, &s.xxh3);
		n = 1;
	}
	if (!err && s.size > g->cap - sizeof(s))
		err = -E2BIG;
	if (err)
		fuse_reply_err(g->w.req, -err);
	/* Straight from the pool, which h keeps; counted as read only once
	 * the caller has the bytes. */
	else if (!fuse_reply_ioctl_iov(g->w.req, 0, iov, 1 + n)) {
		ns_direct_done(ns, h, ST_SMALL_GETS);
		ns_flush(ns, h, NS_CLOSE_LAST, NULL);
	}
	if (h)
		ns_release(ns, h);
	free(g);
}

/* A GET that OMNIFS_IOC_UNWAIT took out of the queue. */
static void get_unwaited(struct ns_waiter *nw)
{
	struct op_get *g = (struct op_get *)nw;

	fuse_reply_err(g->w.req, ECANCELED);
	free(g);
}

static void small_get(fuse_req_t req, fuse_ino_t parent, struct fuse_file_info *fi,
		      const struct omnifs_small *s, const char *key, size_t out_bufsz)
{
	struct fs *fs = fs_of(req);
	struct dir_snap *d = (struct dir_snap *)(uintptr_t)fi->fh;
	struct ns_handle *h = NULL;
	struct ns_waiter *late;
	struct ns_attr a;
	struct op_get *g;
	uint64_t id;
	int rc;

	if (s->wait_ms < 0 || out_bufsz < sizeof(*s))
		return (void)fuse_reply_err(req, EINVAL);
	if (atomic_load(&d->unwaited))
		return (void)fuse_reply_err(req, ECANCELED);
	/* As op_lookup does for a plain open of a missing key. */
	rc = ns_lookup(fs->ns, parent, key, NS_LOOKUP_OBJECT, &a);
	if (rc == -ENOENT && fs->cl && ask_peers(fs, parent, key, 1, s->wait_ms, 1))
		rc = ns_lookup(fs->ns, parent, key, NS_LOOKUP_OBJECT, &a);
	if (rc == -ENOENT)
		rc = ns_lookup(fs->ns, parent, key, NS_LOOKUP_WAIT, &a);
	if (rc)
		return (void)fuse_reply_err(req, -rc);
	if (!(g = calloc(1, sizeof(*g)))) {
		ns_forget(fs->ns, a.ino, 1);
		return (void)fuse_reply_err(req, ENOMEM);
	}
	g->cap = out_bufsz;
	g->w.req = req;
	g->w.ino = a.ino;
	g->w.w.ctx = g;
	g->w.w.interrupted = wait_interrupted;
	g->w.w.done = get_answer;
	g->w.w.wait_ms = s->wait_ms;
	g->w.w.id = id = ns_waiter_id(fs->ns);
	g->w.w.tag = fi->fh;
	fuse_req_interrupt_func(req, wait_interrupt, (void *)(uintptr_t)id);
	atomic_fetch_add(&d->refs, 1);
	rc = ns_open(fs->ns, a.ino, O_RDONLY | NS_OPEN_HERE, &g->w.w, &h);
	/* The handle or the queued wait keeps the node now (g may be gone). */
	ns_forget(fs->ns, a.ino, 1);
	if (rc != -EINPROGRESS)
		get_answer(&g->w.w, rc, rc ? NULL : h);
	/* An UNWAIT between the check above and the queueing found no wait
	 * to end; it set the flag before it looked, and queueing and looking
	 * both take ns's lock, so the flag is seen here. */
	else if (atomic_load(&d->unwaited) && (late = ns_cancel(fs->ns, id)))
		get_unwaited(late);
	dir_put(d);
}

static void small_put(fuse_req_t req, fuse_ino_t parent, const struct omnifs_small *s,
		      const char *key, const void *data)
{
	struct fs *fs = fs_of(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct ns_handle *h;
	struct ns_attr a;
	char v[24];
	int rc, frc, claim;

	if (s->readers < -1)
		return (void)fuse_reply_err(req, EINVAL);
	if (exists_elsewhere(fs, parent, key, &claim))  /* as O_EXCL */
		return (void)fuse_reply_err(req, EEXIST);
	if ((rc = ns_create_key(fs->ns, parent, key, 1, ctx->uid, ctx->gid, &a, &h)))
		return (void)fuse_reply_err(req, -rc);
	if (claim >= 0)         /* its publish waits for the host (op_waits) */
		ns_handle_claim(fs->ns, h, claim, 1);
	if (s->readers >= 0)
		rc = ns_setxattr(fs->ns, a.ino, "user.omni.readers", v,
				 (size_t)snprintf(v, sizeof(v), "%lld", (long long)s->readers));
	if (!rc && s->size) {
		ssize_t w = ns_write(fs->ns, h, data, s->size, 0);
		rc = w < 0 ? (int)w : 0;
	}
	/* Failed half way: dropped as a killed writer's would be.  Unlike
	 * op_flush, the readers are woken before the writer is answered:
	 * a small GET has its bytes in its answer, no request of its own
	 * follows to queue behind this one, and on a VM the writer's answer
	 * costs the replying thread a wake-up of another core (30-60 us). */
	frc = ns_flush(fs->ns, h, rc ? NS_CLOSE_KILLED : NS_CLOSE_LAST, NULL);
	ns_release(fs->ns, h);
	ns_forget(fs->ns, a.ino, 1);
	if ((rc = rc ? rc : frc))
		return (void)fuse_reply_err(req, -rc);
	stat_add(&fs->st, ST_SMALL_PUTS, 1);
	fuse_reply_ioctl(req, 0, NULL, 0);
}

/* A key of len (at most NAME_KEY_MAX) bytes from an ioctl's argument,
 * NUL-terminated into key: 0, or -EINVAL if it is not a valid key. */
static int arg_key(const char *src, size_t len, char *key)
{
	memcpy(key, src, len);
	key[len] = 0;
	return strlen(key) != len ? -EINVAL : name_check_key(key);
}

/* The header and key of a small PUT or GET; ENOTTY for other commands. */
static int small_args(unsigned cmd, const void *in, size_t in_bufsz,
		      struct omnifs_small *s, char *key)
{
	unsigned n = _IOC_SIZE(cmd);

	if (cmd != OMNIFS_IOC_PUT(n) && cmd != OMNIFS_IOC_GET(n))
		return -ENOTTY;
	if (in_bufsz < sizeof(*s))
		return -EINVAL;
	memcpy(s, in, sizeof(*s));
	if (s->magic != OMNIFS_SMALL_MAGIC || !s->key_len || s->key_len > NAME_KEY_MAX ||
	    s->key_len > in_bufsz - sizeof(*s))
		return -EINVAL;
	if (arg_key((const char *)in + sizeof(*s), s->key_len, key))
		return -EINVAL;
	if (cmd == OMNIFS_IOC_PUT(n) && s->size != in_bufsz - sizeof(*s) - s->key_len)
		return -EINVAL;
	return 0;
}

static void small_ioctl(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
			unsigned cmd, const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct fs *fs = fs_of(req);
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1], key[NAME_KEY_MAX + 1];
	struct omnifs_small s;
	int rc = small_args(cmd, in_buf, in_bufsz, &s, key);

	if (!rc && ns_dir_names(fs->ns, ino, from, to) != NK_EDGE)
		rc = -ENOTTY;           /* the root, a stage, .omni */
	if (rc)
		return (void)fuse_reply_err(req, -rc);
	if (cmd == OMNIFS_IOC_PUT(_IOC_SIZE(cmd)))
		small_put(req, ino, &s, key, (const char *)in_buf + sizeof(s) + s.key_len);
	else
		small_get(req, ino, fi, &s, key, out_bufsz);
}

/* OMNIFS_IOC_UNWAIT: the GETs waiting through this open edge directory
 * fail with ECANCELED, now and whenever one comes through it later; the
 * answer is how many it ended. */
static void unwait_ioctl(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	struct dir_snap *d = (struct dir_snap *)(uintptr_t)fi->fh;
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1];
	struct ns_waiter *w, *next;
	int n = 0;

	if (ns_dir_names(fs->ns, ino, from, to) != NK_EDGE)
		return (void)fuse_reply_err(req, ENOTTY);
	atomic_store(&d->unwaited, 1);
	for (w = ns_cancel_tag(fs->ns, fi->fh); w; w = next, n++) {
		next = w->next;
		get_unwaited(w);
	}
	fuse_reply_ioctl(req, n, NULL, 0);
}

/* OMNIFS_IOC_CLEANUP: rm of a request's objects on every node. */
static void cleanup_ioctl(fuse_req_t req, const void *in, size_t in_bufsz, size_t out_bufsz)
{
	struct fs *fs = fs_of(req);
	struct omnifs_cleanup c;
	char id[NAME_KEY_MAX + 1];
	size_t missed = 0;
	int rc = -EINVAL;

	if (in_bufsz < sizeof(c) || out_bufsz < sizeof(c))
		return (void)fuse_reply_err(req, EINVAL);
	memcpy(&c, in, sizeof(c));
	if (c.magic == OMNIFS_CLEANUP_MAGIC && c.id_len <= in_bufsz - sizeof(c))
		rc = c.id_len > NAME_KEY_MAX ? -ENAMETOOLONG : 0;
	if (!rc)
		rc = arg_key((const char *)in + sizeof(c), c.id_len, id);
	if (!rc && fs->cl) {
		loop_step_aside();
		rc = cluster_cleanup(fs->cl, id, &c.removed, &missed);
	} else if (!rc) {
		c.removed = ns_cleanup(fs->ns, id, NULL);
	}
	if (rc)
		return (void)fuse_reply_err(req, -rc);
	c.missed = missed;
	fuse_reply_ioctl(req, 0, &c, sizeof(c));
}

void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		     size_t in_bufsz, size_t out_bufsz)
{
	(void)arg;
	if (flags & FUSE_IOCTL_COMPAT)
		fuse_reply_err(req, ENOTTY);
	else if ((flags & FUSE_IOCTL_DIR) && cmd == OMNIFS_IOC_CLEANUP(_IOC_SIZE(cmd)))
		cleanup_ioctl(req, in_buf, in_bufsz, out_bufsz);
	else if ((flags & FUSE_IOCTL_DIR) && cmd == OMNIFS_IOC_UNWAIT)
		unwait_ioctl(req, ino, fi);
	else if (flags & FUSE_IOCTL_DIR)
		small_ioctl(req, ino, fi, cmd, in_buf, in_bufsz, out_bufsz);
	else
		direct_ioctl(req, cmd, fi, in_buf, in_bufsz, out_bufsz);
}
