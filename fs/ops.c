/* ops.c - the FUSE low-level operations over ns; their ioctls, fs/direct.h's,
 * are ops_ioctl.c's (ops_internal.h is what the two share).
 *
 * Keys are served with direct_io so every read and write reaches the pool
 * in requests of up to 1 MiB.  The kernel keeps the names and attributes
 * of published objects (they never change) and is told when one leaves;
 * everything else about a key it asks again every time, so it never
 * answers from a stale view of a key that was consumed, removed or
 * rewritten.  Directories are implicit and cached freely.
 */
#define _GNU_SOURCE
#include "ops_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "caller.h"
#include "callwait.h"
#include "cluster.h"
#include "kinit.h"
#include "loop.h"
#include "stats.h"
#include "vfile.h"
#include "view.h"
#include "../transport/clock.h"
#include "../transport/pool.h"

#define DIR_TIMEOUT 3600.0
#define MAX_IOV 256             /* 1 MiB in 4 KiB pieces at worst */
#define PUBLISH_QUICK (64u << 10)       /* hashed and checked in a few us */

/* Virtual-file handles (directories' are ops_internal.h's); key handles
 * are ns handles.  A rendered .omni file: a read holds a reference while
 * it replies, since the reader can close (and RELEASE can free) as soon
 * as the kernel has copied the bytes, before the replying thread is back
 * from writev(). */
struct vbuf { char *data; size_t len; atomic_int refs; };

static void vbuf_put(struct vbuf *v)
{
	if (atomic_fetch_sub(&v->refs, 1) == 1) {
		free(v->data);
		free(v);
	}
}

static void to_stat(const struct ns_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	st->st_mode = a->mode;
	st->st_nlink = S_ISDIR(a->mode) ? 2 : !a->gone;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->size;
	st->st_blksize = 1 << 20;
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	st->st_mtim.tv_sec = (time_t)(a->mtime_ns / 1000000000u);
	st->st_mtim.tv_nsec = (long)(a->mtime_ns % 1000000000u);
	st->st_atim = st->st_ctim = st->st_mtim;
}

/* A published object's name and attributes never change while it
 * exists, so the kernel keeps them (ls -l and rm of a big edge ask
 * nothing per name), and is told when the object leaves (attrs_stale).
 * Everything else about keys goes back to ns every time. */
static double attr_timeout(const struct ns_attr *a)
{
	if (a->kind == NK_KEY || a->kind == NK_VFILE)
		return a->stable ? DIR_TIMEOUT : 0.0;
	return DIR_TIMEOUT;
}

static void fill_entry(const struct ns_attr *a, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = a->ino;
	to_stat(a, &e->attr);
	e->attr_timeout = e->entry_timeout = attr_timeout(a);
}

static void reply_entry(fuse_req_t req, const struct ns_attr *a)
{
	struct fuse_entry_param e;

	fill_entry(a, &e);
	if (fuse_reply_entry(req, &e))
		ns_forget(fs_of(req)->ns, a->ino, 1);   /* the kernel never saw it */
}

/* Protocol 7.44 (Linux 6.16): every entry the kernel keeps is looked up
 * again before its next use.  libfuse has it from 3.18
 * (fuse_lowlevel_notify_increment_epoch); Debian 12's 3.14 has not, and
 * the notification is a bare header, unique 0 and its code as the error. */
#define NOTIFY_INC_EPOCH 8

static int epoch_next(struct fs *fs)
{
#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 18)
	return fuse_lowlevel_notify_increment_epoch(fs->se);
#else
	struct fuse_out_header h = { .len = sizeof(h), .error = NOTIFY_INC_EPOCH };

	return write(fuse_session_fd(fs->se), &h, sizeof(h)) == sizeof(h) ? 0 : -errno;
#endif
}

/* ns's stale hook: the kernel drops what it kept of ino's attributes, so
 * its next stat or open asks, and hears ENOENT or ESTALE (see ns_open).
 * Where a file is still open on the object that left (held), its fstat()
 * would ask the same, without the file: so the kernel is also told to
 * look up every name it keeps before it uses it again, and the stat() of
 * this one then hears ENOENT from the lookup; rare, as files are seldom
 * open on an object another node removes.  (Dropping just this name's
 * entry takes the directory's lock in the kernel, which a request the
 * daemon never answers, as when it is killed, would hold forever.)  Both
 * take no lock in the kernel: safe under ns's lock, and done before
 * whatever consumed or removed the object answers. */
static int attrs_stale(void *arg, uint64_t ino, int held)
{
	struct fs *fs = arg;

	if (!fs->se)
		return 0;
	fuse_lowlevel_notify_inval_inode(fs->se, ino, -1, 0);
	return held && fs->epochs && !epoch_next(fs);
}

static void op_init(void *data, struct fuse_conn_info *conn)
{
	((struct fs *)data)->epochs = conn->proto_major == 7 && conn->proto_minor >= 44;
	conn->max_write = 1u << 20;
	conn->max_read = 1u << 20;     /* must match -o max_read */
	conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
			FUSE_CAP_SPLICE_MOVE | FUSE_CAP_WRITEBACK_CACHE);
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP    /* libfuse 3.16 on; kinit.h otherwise */
	if (conn->capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP)
		conn->want |= FUSE_CAP_DIRECT_IO_ALLOW_MMAP;
#endif
}

/* 1 if a peer had parent/name (it is in ns now).  If learn is set, the
 * shards of a view by that name that the edge holds are brought in too:
 * a reader of a missing key may want a view of shards published
 * elsewhere under other names.  A reader
 * that will wait says so (own_ms: its own wait, or 0 for the edge's), and
 * the peers tell it when the key comes. */
int ask_peers(struct fs *fs, fuse_ino_t parent, const char *name, int will_wait,
		     int64_t own_ms, int learn)
{
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1];

	if (ns_dir_names(fs->ns, parent, from, to) != NK_EDGE || cluster_hosts(fs->cl, to) ||
	    name_check_key(name))
		return 0;
	int64_t ms = !will_wait ? 0 : own_ms > 0 ? own_ms : ns_wait_ms(fs->ns, parent);
	char base[NAME_KEY_MAX + 1];

	/* With the key, in the same round trip, only the shards of a view
	 * by that name: the whole edge cost each such lookup 8 ms with 20k
	 * objects on it. */
	if (learn)
		view_base(name, base, sizeof(base));
	/* A round trip: the call steps aside once it is asked (op_waits). */
	return !cluster_ask(fs->cl, from, to, name, ms > 0 ? (unsigned)ms : 0,
			    learn ? base : NULL);
}

/* O_EXCL means "nowhere in the cluster": whether another node knows the
 * key (cluster_exists), unless announces of this edge come here anyway.
 * A put that writes and publishes in one request (a small PUT) is told
 * where its publish is claimed (claim: cluster_claimer's peer, or -1);
 * where that peer hosts <to>, the claim is the question, and none is
 * asked. */
int exists_elsewhere(struct fs *fs, fuse_ino_t parent, const char *name, int *claim)
{
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1];

	if (claim)
		*claim = -1;
	if (!fs->cl || ns_dir_names(fs->ns, parent, from, to) != NK_EDGE ||
	    name_check_key(name))
		return 0;
	if (claim)
		*claim = cluster_claimer(fs->cl, from, to);
	if (cluster_hosts(fs->cl, to) ||
	    (claim && *claim >= 0 && cluster_peer_hosts(fs->cl, *claim, to)))
		return 0;
	return cluster_exists(fs->cl, from, to, name);
}

/* A writer's publish of key name is claimed (ns_handle_claim) at the
 * node where the edge's publishes meet (cluster_claimer), so that of two
 * writers of one key on two nodes the second to get there fails its
 * close with EEXIST, instead of each node keeping its own bytes under the
 * name.  Its readers have the object one message after the close, as an
 * announce would bring it.  Not where that node is this one (claims meet
 * here: a peer's claim of a key written here wins only until its writers
 * close it, ns_remote_claim) or is down (the publish is announced as it
 * is).  Also for a writer that joins one being written: the claim is its
 * object's. */
static void claim_publish(struct fs *fs, fuse_ino_t parent, const char *name,
			  struct ns_handle *h)
{
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1];
	int peer;

	if (fs->cl && ns_dir_names(fs->ns, parent, from, to) == NK_EDGE &&
	    !name_check_key(name) && (peer = cluster_claimer(fs->cl, from, to)) >= 0)
		ns_handle_claim(fs->ns, h, peer, 0);
}

/* A name that is a view of published shards resolves (stat, getfattr)
 * though no object has it.  (Its size is op_getattr's: stat asks for it
 * after this, as a view's attributes are never cached, and an open
 * needs none.) */
static int lookup_view(struct fs *fs, fuse_ino_t parent, const char *name, struct ns_attr *a)
{
	int rc = ns_lookup(fs->ns, parent, name, NS_LOOKUP_WAIT, a);

	if (rc || view_exists(&fs->venv, a->ino))
		return rc;
	ns_forget(fs->ns, a->ino, 1);
	return -ENOENT;
}

static void creating_set(struct fs *fs, pid_t tid, uint64_t ino)
{
	pthread_mutex_lock(&fs->creating.lock);
	fs->creating.tid = tid;
	fs->creating.ino = ino;
	pthread_mutex_unlock(&fs->creating.lock);
}

/* Whether an OPEN for writing comes from an O_CREAT open: the one that
 * op_lookup has just let through is known (the same thread, the same
 * name, its very next request); any other asks /proc. */
static int opens_to_create(struct fs *fs, pid_t tid, uint64_t ino)
{
	int known;

	pthread_mutex_lock(&fs->creating.lock);
	if ((known = tid > 0 && fs->creating.tid == tid && fs->creating.ino == ino))
		fs->creating.tid = 0;
	pthread_mutex_unlock(&fs->creating.lock);
	return known || caller_intent(tid) == CALLER_OPEN_CREATE;
}

/* A thread whose open heard ESTALE, and when (tid << 32 | us, wrapping),
 * in a slot by thread.  The kernel tries that open once more at once,
 * after a lookup, and that try must not hear it again (NS_OPEN_RETRY).  A
 * second try that creates (op_create) takes the slot too; one that never
 * comes leaves it to go stale. */
#define RETRY_US 20000u

static _Atomic uint64_t *retry_slot(struct fs *fs, pid_t tid)
{
	return &fs->retrying[(uint32_t)tid % RETRY_SLOTS];
}

static uint32_t now_us(void)
{
	return (uint32_t)(clock_mono_ns() / 1000);
}

/* An open's error; an ESTALE is remembered. */
static void open_fail(fuse_req_t req, int err)
{
	pid_t tid = fuse_req_ctx(req)->pid;

	if (err == ESTALE && tid > 0)
		atomic_store(retry_slot(fs_of(req), tid), (uint64_t)(uint32_t)tid << 32 | now_us());
	fuse_reply_err(req, err);
}

/* NS_OPEN_RETRY if tid's open is the kernel's second try of one that
 * heard ESTALE, else 0; the slot is taken either way. */
static int retrying(struct fs *fs, pid_t tid)
{
	uint64_t v = tid > 0 ? atomic_load(retry_slot(fs, tid)) : 0;

	if (!v || v >> 32 != (uint32_t)tid ||
	    !atomic_compare_exchange_strong(retry_slot(fs, tid), &v, 0))
		return 0;
	return now_us() - (uint32_t)v < RETRY_US ? NS_OPEN_RETRY : 0;
}

/* Said once, so that what follows from a caller we cannot see is no
 * mystery (README, "Pid namespaces").  FUSE says pid 0 for a task outside
 * the daemon's pid namespace, as one in another container is. */
static void caller_unseen(struct fs *fs, pid_t pid)
{
	if (atomic_exchange(&fs->unseen_said, 1))
		return;
	if (pid <= 0)
		fprintf(stderr, "omnifs: a request came from outside this daemon's pid namespace "
			"(pid 0): opens of missing keys will not wait, and a writer's object is "
			"published when its file is released; run omnifs in its users' pid "
			"namespace (Kubernetes: hostPID: true)\n");
	else
		fprintf(stderr, "omnifs: cannot read /proc/%d of a caller: opens of missing keys "
			"will not wait, and a writer's object is published when its file is "
			"released; run omnifs as root\n", (int)pid);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = fs_of(req);
	struct ns_attr a;
	int rc = ns_lookup(fs->ns, parent, name, NS_LOOKUP_OBJECT, &a);

	stat_add(&fs->st, ST_LOOKUPS, 1);
	/* A missing key: a plain open() waits for it on a placeholder (its
	 * OPEN is deferred, holding no lock); anything else sees ENOENT.
	 * Where announces for it don't come unasked, the peers are asked
	 * first, and told to announce it if it comes later. */
	if (rc == -ENOENT) {
		enum caller_intent in = caller_intent(fuse_req_ctx(req)->pid);
		/* A writer's plain O_CREAT need not know (a published key
		 * elsewhere is found when it publishes), and an O_EXCL one
		 * is asked about by its create: no round trip here. */
		int reads = in == CALLER_OPEN_READ;
		if (fs->cl && in != CALLER_OPEN_CREATE && in != CALLER_OPEN_EXCL &&
		    ask_peers(fs, parent, name, reads,
			      reads ? callwait_peek(&fs->cw, fuse_req_ctx(req)->pid) : 0,
			      reads || in == CALLER_OTHER || in == CALLER_UNKNOWN))
			rc = ns_lookup(fs->ns, parent, name, NS_LOOKUP_OBJECT, &a);
		if (in == CALLER_UNKNOWN)
			caller_unseen(fs, fuse_req_ctx(req)->pid);
		if (rc == -ENOENT && in == CALLER_OPEN_READ)
			rc = ns_lookup(fs->ns, parent, name, NS_LOOKUP_WAIT, &a);
		/* A writer's O_CREAT of a name the kernel keeps because a
		 * reader here waits on it: the kernel asks whether that name
		 * still stands, and a yes saves it a second LOOKUP (the
		 * open then creates, op_open). */
		else if (rc == -ENOENT && in == CALLER_OPEN_CREATE &&
			 !(rc = ns_lookup(fs->ns, parent, name, NS_LOOKUP_KNOWN, &a)))
			creating_set(fs, fuse_req_ctx(req)->pid, a.ino);
		else if (rc == -ENOENT && (in == CALLER_OTHER || in == CALLER_UNKNOWN))
			/* stat, getfattr of a view; or an open we could not tell */
			rc = lookup_view(fs, parent, name, &a);
	}
	if (rc)
		fuse_reply_err(req, -rc);
	else
		reply_entry(req, &a);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	ns_forget(fs_of(req)->ns, ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	for (size_t i = 0; i < count; i++)
		ns_forget(fs_of(req)->ns, f[i].ino, f[i].nlookup);
	fuse_reply_none(req);
}

/* A name the kernel keeps after its object left (ns says ENOENT) may
 * have a new object by now that this node learns of only by asking (it
 * hosts no <to> of the edge).  Its LOOKUP would ask, but the kernel does
 * not look up a name it keeps: a stat or getfattr on such a node said
 * ENOENT on and on after the key was published again (while an open,
 * open_kept, found it).  So these ask too.  1 if a peer had the key. */
static int kept_found(struct fs *fs, fuse_ino_t ino)
{
	char name[NAME_KEY_MAX + 1];
	uint64_t parent;

	return fs->cl && !ns_key_name(fs->ns, ino, &parent, name) &&
	       ask_peers(fs, parent, name, 0, 0, 0);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	struct ns_attr a;
	struct stat st;
	int rc = ns_getattr(fs->ns, ino, &a);

	if (rc == -ENOENT && kept_found(fs, ino))
		rc = ns_getattr(fs->ns, ino, &a);
	if (rc)
		return (void)fuse_reply_err(req, -rc);
	/* A view has no object: an open one says its size (fstat, and
	 * lseek's SEEK_END, which asks first), another what it would read
	 * to, where its shards' headers are here.  A writer's own file sees
	 * what it wrote (SEEK_END gave 0, and the next write went there). */
	if (fi && (fi->fh & FH_VIEW))
		a.size = view_bytes((struct view *)(uintptr_t)(fi->fh & ~(uint64_t)FH_TAGS));
	else if (fi && !(fi->fh & FH_TAGS))
		ns_handle_writing_size(fs->ns, (struct ns_handle *)(uintptr_t)fi->fh, &a.size);
	else if (a.bare)
		view_size(&fs->venv, ino, &a.size);
	to_stat(&a, &st);
	fuse_reply_attr(req, &st, attr_timeout(&a));
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int to_set, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	int rc;

	if ((to_set & FUSE_SET_ATTR_SIZE) &&
	    (rc = ns_truncate(fs->ns, ino, (uint64_t)attr->st_size)))
		return (void)fuse_reply_err(req, -rc);
	/* Modes, owners and times are not kept: objects are transfers. */
	op_getattr(req, ino, fi);
}

/* ---------------------------------------------------------------- dirs */

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ns_attr a;
	struct dir_snap *d;
	int rc = ns_getattr(fs_of(req)->ns, ino, &a);

	if (!rc && !S_ISDIR(a.mode))
		rc = -ENOTDIR;
	if (!rc && !(d = calloc(1, sizeof(*d))))
		rc = -ENOMEM;
	if (rc)
		return (void)fuse_reply_err(req, -rc);
	atomic_init(&d->refs, 1);
	fi->fh = (uintptr_t)d;
	if (fuse_reply_open(req, fi))
		dir_put(d);
}

void dir_put(struct dir_snap *d)
{
	if (atomic_fetch_sub(&d->refs, 1) == 1) {
		free(d->ents);
		free(d);
	}
}

/* The first READDIR's snapshot, with what the other nodes own here, so
 * that every node lists it all. */
static int dir_take(struct fs *fs, fuse_ino_t ino, struct dir_snap *d)
{
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1];
	int kind = ns_dir_names(fs->ns, ino, from, to), rc;

	if (fs->cl && (kind == NK_ROOT || kind == NK_STAGE || kind == NK_EDGE)) {
		loop_step_aside();
		cluster_refresh(fs->cl, from, to);
	}
	if (!(rc = ns_readdir(fs->ns, ino, &d->ents, &d->n)))
		d->taken = 1;
	return rc;
}

/* READDIR and READDIRPLUS.  Offsets: 0 ".", 1 "..", 2+i the i-th entry
 * of the snapshot.  Plus, each entry is looked up as it is listed (so
 * ls -l asks nothing more); one gone since the snapshot is left out. */
static void list_dir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi, int plus)
{
	struct fs *fs = fs_of(req);
	struct dir_snap *d = (struct dir_snap *)(uintptr_t)fi->fh;
	char *buf = malloc(size);
	size_t used = 0, n;
	int rc = buf ? 0 : -ENOMEM;

	if (!rc && !d->taken)
		rc = dir_take(fs, ino, d);
	if (rc) {
		free(buf);
		return (void)fuse_reply_err(req, -rc);
	}
	for (size_t i = (size_t)off; i < d->n + 2; i++) {
		struct fuse_entry_param e = { .attr = { .st_ino = ino, .st_mode = S_IFDIR } };
		const char *name = i == 0 ? "." : "..";
		struct ns_attr a;
		if (i >= 2) {
			name = d->ents[i - 2].name;
			e.attr.st_ino = d->ents[i - 2].ino;
			e.attr.st_mode = d->ents[i - 2].mode;
		}
		if (!plus) {
			n = fuse_add_direntry(req, buf + used, size - used, name, &e.attr,
					      (off_t)i + 1);
		} else if (i < 2) {     /* e.ino 0: the kernel makes no entry */
			n = fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
						   (off_t)i + 1);
		} else if (ns_lookup(fs->ns, ino, name, NS_LOOKUP_OBJECT, &a)) {
			continue;
		} else {
			fill_entry(&a, &e);
			n = fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
						   (off_t)i + 1);
			if (n > size - used)
				ns_forget(fs->ns, a.ino, 1);    /* not given */
		}
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	list_dir(req, ino, size, off, fi, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	list_dir(req, ino, size, off, fi, 1);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	dir_put((struct dir_snap *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)parent; (void)name; (void)mode;
	/* Stage and edge directories exist implicitly (the kernel answers
	 * EEXIST for them); nothing else may be a directory. */
	fuse_reply_err(req, EPERM);
}

/* A name changes only by rm and a new write (a reader waits on the key it
 * named, and a published object is immutable), and nothing but keys and
 * the implicit directories exists: rename, symlink and mknod are EPERM,
 * what rename(2), symlink(2) and mknod(2) say of a filesystem that does not
 * do them, and what the kernel makes of a link here. */
static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned flags)
{
	(void)parent; (void)name; (void)newparent; (void)newname; (void)flags;
	fuse_reply_err(req, EPERM);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	(void)link; (void)parent; (void)name;
	fuse_reply_err(req, EPERM);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)parent; (void)name; (void)mode; (void)rdev;
	fuse_reply_err(req, EPERM);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ns_attr a;
	struct fs *fs = fs_of(req);
	struct ns_dirent *ents;
	size_t n;
	int rc = ns_lookup(fs->ns, parent, name, NS_LOOKUP_OBJECT, &a);

	if (rc)
		return (void)fuse_reply_err(req, -rc);
	if (a.kind != NK_STAGE && a.kind != NK_EDGE)
		rc = a.kind == NK_KEY ? -ENOTDIR : -EACCES;
	else if (!(rc = ns_readdir(fs->ns, a.ino, &ents, &n))) {
		rc = n ? -ENOTEMPTY : 0;        /* an empty implicit dir: nothing to do */
		free(ents);
	}
	ns_forget(fs->ns, a.ino, 1);
	fuse_reply_err(req, -rc);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -ns_unlink(fs_of(req)->ns, parent, name));
}

/* ---------------------------------------------------------------- open */

static void view_answer(void *arg, int err, struct view *v);

/* Opens a view (SPEC §5) for a new open (here: on its FUSE thread, which
 * may plan it) or a waiting one (woken by a publish or a peer's message,
 * whose thread may not); w answers it. */
static void open_view(struct fs *fs, struct op_wait *w, int here)
{
	int rc = view_open(&fs->venv, w->ino, w->w.wait_ms, here, view_answer, w);

	if (rc) {
		fuse_reply_err(w->req, -rc);
		free(w);
	}
}

static void wait_answer(struct ns_waiter *nw, int err, struct ns_handle *h)
{
	struct op_wait *w = (struct op_wait *)nw;
	struct fs *fs = fs_of(w->req);

	if (err == -EAGAIN)             /* shards of its name came: a view */
		return open_view(fs, w, 0);
	if (err) {
		fuse_reply_err(w->req, -err);
	} else {
		w->fi.fh = (uintptr_t)h;
		w->fi.direct_io = 1;
		w->fi.noflush = !ns_handle_is_writer(h);        /* ns_read counts */
		if (fuse_reply_open(w->req, &w->fi))     /* the opener is gone */
			ns_release(fs->ns, h);
		else
			loop_expect();
	}
	free(w);
}

void wait_interrupt(fuse_req_t req, void *data)
{
	struct ns_waiter *w = ns_cancel(fs_of(req)->ns, (uint64_t)(uintptr_t)data);

	if (w) {
		fuse_reply_err(req, EINTR);
		free(w);
	}
}

int wait_interrupted(struct ns_waiter *nw)
{
	return fuse_req_interrupted(((struct op_wait *)nw)->req);
}

static void open_vfile(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	const char *name = ns_vfile_name(fs->ns, ino);
	struct vbuf *v;

	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return (void)fuse_reply_err(req, EACCES);
	if (!name || !(v = malloc(sizeof(*v))))
		return (void)fuse_reply_err(req, name ? ENOMEM : ENOENT);
	if (!(v->data = vfile_render(&fs->vf, name, &v->len))) {
		free(v);
		return (void)fuse_reply_err(req, errno);
	}
	atomic_init(&v->refs, 1);
	fi->fh = (uintptr_t)v | FH_VFILE;
	fi->direct_io = 1;              /* the size is known only now */
	fi->noflush = 1;                /* its close has nothing to do here */
	if (fuse_reply_open(req, fi))
		vbuf_put(v);
}

static void view_answer(void *arg, int err, struct view *v)
{
	struct op_wait *w = arg;
	struct fs *fs = fs_of(w->req);
	struct ns_handle *h;

	if (err == -EXDEV) {            /* the name is the one shard: wait for it */
		err = ns_open(fs->ns, w->ino, w->fi.flags | NS_OPEN_EXACT | w->oflags, &w->w, &h);
		if (err == -EINPROGRESS)
			return;
		return wait_answer(&w->w, err, err ? NULL : h);
	}
	if (err) {
		fuse_reply_err(w->req, -err);
	} else {
		w->fi.fh = (uintptr_t)v | FH_VIEW;
		w->fi.direct_io = 1;
		w->fi.noflush = 1;      /* its reads count it (op_read) */
		if (fuse_reply_open(w->req, &w->fi))
			view_close(v);
		else
			loop_expect();
	}
	free(w);
}

/* An O_CREAT open that found its name (op_lookup's NS_LOOKUP_KNOWN, or
 * an object being written): it creates as op_create would, but the
 * kernel has the inode already. */
static void open_create(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int oflags)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct ns *ns = fs_of(req)->ns;
	struct ns_handle *h;
	char name[NAME_KEY_MAX + 1];
	uint64_t parent;
	int rc = ns_create_known(ns, ino, ctx->uid, ctx->gid, fi->flags | oflags, &h);

	if (rc)         /* ENOENT: gone meanwhile; the kernel looks again */
		return open_fail(req, rc == -ENOENT ? ESTALE : -rc);
	if (fs_of(req)->cl && !ns_key_name(ns, ino, &parent, name))     /* one node: no claims */
		claim_publish(fs_of(req), parent, name, h);
	ns_handle_flags(ns, h, fi->flags);
	fi->fh = (uintptr_t)h;
	fi->direct_io = 1;
	if (fuse_reply_open(req, fi))
		ns_release(ns, h);
}

/* An open through a name the kernel kept after its object left (ns_getattr
 * says ENOENT).  ESTALE would make the kernel look the name up again, but
 * it does that once, and an rm between that lookup and its open reached
 * the caller as ESTALE (a churn of rm, readers and writers of a few keys).
 * So the open does here what that lookup would have let it do: a writer's
 * O_CREAT creates on the name, a reader asks the peers for the key and
 * waits on the name.  ns keeps one node per name, and the name stays
 * stale to the kernel's other questions (stat: ENOENT) until an object is
 * on it, and is so again if that one leaves unpublished.  1 if answered;
 * else 0 with a filled (a reader's), or -errno. */
static int open_kept(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
		     int oflags, struct ns_attr *a)
{
	struct fs *fs = fs_of(req);
	pid_t pid = fuse_req_ctx(req)->pid;
	char name[NAME_KEY_MAX + 1];
	uint64_t parent;

	if (ns_key_name(fs->ns, ino, &parent, name))
		return -ESTALE;         /* gone: the kernel looks again */
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		if (!opens_to_create(fs, pid, ino))
			return -ESTALE;
		open_create(req, ino, fi, oflags);
		return 1;
	}
	if (fs->cl)
		ask_peers(fs, parent, name, 1, callwait_peek(&fs->cw, pid), 1);
	if (ns_getattr(fs->ns, ino, a))
		*a = (struct ns_attr){ .ino = ino, .kind = NK_KEY };
	return 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	struct ns_attr a;
	struct ns_handle *h;
	struct op_wait *w;
	int rc, oflags = retrying(fs, fuse_req_ctx(req)->pid);

	if ((rc = ns_getattr(fs->ns, ino, &a)) == -ENOENT) {
		if ((rc = open_kept(req, ino, fi, oflags, &a)) > 0)
			return;
		oflags |= NS_OPEN_KEPT;
	} else if (rc == -ESTALE && (oflags & NS_OPEN_RETRY)) {  /* one the name left: ns_open */
		a = (struct ns_attr){ .ino = ino, .kind = NK_KEY };
		rc = 0;
	}
	if (rc)
		return open_fail(req, -rc);
	if (a.kind == NK_VFILE)
		return open_vfile(req, ino, fi);
	if ((fi->flags & O_ACCMODE) != O_RDONLY &&
	    opens_to_create(fs, fuse_req_ctx(req)->pid, ino))
		return open_create(req, ino, fi, oflags);
	if (!(w = calloc(1, sizeof(*w))))
		return (void)fuse_reply_err(req, ENOMEM);
	w->req = req;
	w->fi = *fi;
	w->ino = ino;
	w->oflags = oflags;
	w->w.ctx = w;
	w->w.interrupted = wait_interrupted;
	w->w.wait_ms = callwait_take(&fs->cw, fuse_req_ctx(req)->pid);
	w->w.id = ns_waiter_id(fs->ns);
	/* Registered before queueing; an interrupt that comes first is
	 * seen by wait_interrupted() under ns's lock. */
	fuse_req_interrupt_func(req, wait_interrupt, (void *)(uintptr_t)w->w.id);
	rc = ns_open(fs->ns, ino, fi->flags | oflags, &w->w, &h);
	if (rc == -EINPROGRESS)
		return;                 /* answered by wait_answer() */
	if (rc == -EAGAIN)
		return open_view(fs, w, 1);     /* answered by view_answer() */
	free(w);
	if (rc)
		return open_fail(req, -rc);
	ns_handle_flags(fs->ns, h, fi->flags);     /* a second writer's */
	fi->fh = (uintptr_t)h;
	fi->direct_io = 1;
	/* A reader's close has nothing to tell us: its complete read was
	 * counted by the read that completed it (ns_read).  No FLUSH saves a
	 * cold reader's close a wake-up of ours (24 us on one node, 40
	 * across nodes, on a 2-vCPU VM). */
	fi->noflush = !ns_handle_is_writer(h);
	if (fuse_reply_open(req, fi))
		ns_release(fs->ns, h);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
{
	struct fs *fs = fs_of(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct fuse_entry_param e = { 0 };
	struct ns_attr a;
	struct ns_handle *h;
	int rc, excl = !!(fi->flags & O_EXCL);

	(void)mode;
	(void)retrying(fs, ctx->pid);   /* a second try that creates: no more to come */
	if (excl && exists_elsewhere(fs, parent, name, NULL))
		return (void)fuse_reply_err(req, EEXIST);
	rc = ns_create_key(fs->ns, parent, name, excl, ctx->uid, ctx->gid, &a, &h);
	if (rc)
		return (void)fuse_reply_err(req, -rc);
	claim_publish(fs, parent, name, h);
	ns_handle_flags(fs->ns, h, fi->flags);
	e.ino = a.ino;
	to_stat(&a, &e.attr);
	fi->fh = (uintptr_t)h;
	fi->direct_io = 1;
	if (fuse_reply_create(req, &e, fi)) {
		ns_release(fs->ns, h);
		ns_forget(fs->ns, a.ino, 1);
	}
}

/* ---------------------------------------------------------------- bytes */

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct iovec iov[MAX_IOV];
	int n;

	(void)ino;
	if (fi->fh & FH_VFILE) {
		struct vbuf *v = (struct vbuf *)(uintptr_t)(fi->fh & ~(uint64_t)FH_VFILE);
		size_t o = (size_t)off < v->len ? (size_t)off : v->len;
		atomic_fetch_add(&v->refs, 1);
		fuse_reply_buf(req, v->data + o, size < v->len - o ? size : v->len - o);
		vbuf_put(v);
		return;
	}
	if (fi->fh & FH_VIEW) {
		struct view *v = (struct view *)(uintptr_t)(fi->fh & ~(uint64_t)FH_TAGS);
		ssize_t got = view_read(v, (uint64_t)off, size, iov);
		if (got < 0)
			return (void)fuse_reply_err(req, (int)-got);
		if (got > 0)
			view_flush(v);  /* counts the read that completes it, as ns_read */
		fuse_reply_iov(req, iov, got > 0);
		if (got > 0)
			view_read_done(v);      /* the reply is out: the close may free it */
		return;
	}
	struct ns *ns = fs_of(req)->ns;
	struct ns_handle *h = (struct ns_handle *)(uintptr_t)fi->fh;
	int streams = ns_handle_streams(h);     /* h may go once the reply is out */
	/* A file served with direct_io reads through the page cache only
	 * for a mapping, and the kernel names no lock owner then. */
	if (!fi->lock_owner)
		ns_handle_mapped(ns, h);
	ssize_t got = ns_read(ns, h, (uint64_t)off, size, iov, &n, MAX_IOV);
	if (got < 0)
		return (void)fuse_reply_err(req, (int)-got);
	fuse_reply_iov(req, iov, n);    /* copies the bytes out before it returns */
	if (streams && got > 0)
		ns_read_done(ns, h);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		     off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	if (fi->fh & FH_TAGS)
		return (void)fuse_reply_err(req, EBADF);
	ssize_t rc = ns_write(fs_of(req)->ns, (struct ns_handle *)(uintptr_t)fi->fh,
			      buf, size, (uint64_t)off);
	if (rc < 0)
		fuse_reply_err(req, (int)-rc);
	else
		fuse_reply_write(req, (size_t)rc);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	(void)ino;
	if (fi->fh & FH_TAGS)
		return (void)fuse_reply_err(req, EBADF);
	if (mode)               /* punching holes, keeping the size: not ours */
		return (void)fuse_reply_err(req, EOPNOTSUPP);
	fuse_reply_err(req, -ns_fallocate(fs_of(req)->ns, (struct ns_handle *)(uintptr_t)fi->fh,
					  (uint64_t)off, (uint64_t)len));
}

/* Whether a writer's close is its last one (README, "Publish"): unless
 * the writer said it never duplicates its descriptor, a look through the
 * caller's descriptors for another one. */
static enum ns_close writer_close(fuse_req_t req, fuse_ino_t ino, struct ns_handle *h)
{
	struct ns *ns = fs_of(req)->ns;
	pid_t tid = fuse_req_ctx(req)->pid;
	char path[2 * NAME_STAGE_MAX + NAME_KEY_MAX + 4];
	int held = -1;

	if (!ns_handle_sole(ns, h)) {
		ns_handle_path(ns, h, path, sizeof(path));
		held = caller_holds_fd(tid, path, fs_of(req)->dev, (ino_t)ino);
		/* A shared mapping holds the file as a descriptor does, and
		 * its pages come as writes when it goes (Python's mmap keeps
		 * a dup'd descriptor too; C's mmap-then-close does not). */
		if ((held == 0 || held == -1) && ns_handle_mappable(ns, h) &&
		    caller_maps_shared(tid, fs_of(req)->dev, (ino_t)ino) > 0)
			held = 1;
	}
	/* Whether another descriptor is left we cannot tell: the publish
	 * waits for the release, which comes when the last one anywhere
	 * goes (a shell's redirection closes its first one at once). */
	if (held == -2) {
		caller_unseen(fs_of(req), tid);
		return NS_CLOSE_DUP;
	}
	/* A task closing its files on the way out has no table of them
	 * left: only a task with no descriptors (or a sole writer) can be. */
	enum caller_state cs = held < 0 ? caller_state(tid) : CALLER_ALIVE;
	if (cs == CALLER_KILLED)
		return NS_CLOSE_KILLED;
	if (cs == CALLER_EXITING)
		return NS_CLOSE_EXIT;
	return held > 0 ? NS_CLOSE_DUP : NS_CLOSE_LAST;
}

/* Whether a claimed publish has long work before its claim goes: the
 * hashing the hasher has not done (all of an object written out of
 * order) and a KV payload's checks.  Its claim's call steps aside once
 * the claim is on its way (cluster.c's op_waits); a large one steps aside
 * first, so that this node's other requests do not wait for its hashing. */
static int publish_long(struct ns *ns, const struct ns_handle *h)
{
	uint64_t size;

	return ns_handle_writing_size(ns, h, &size) || size > PUBLISH_QUICK;
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ns_handle *h = (struct ns_handle *)(uintptr_t)fi->fh;

	if (fi->fh & FH_VIEW)
		view_flush((struct view *)(uintptr_t)(fi->fh & ~(uint64_t)FH_TAGS));
	if (fi->fh & FH_TAGS)
		return (void)fuse_reply_err(req, 0);
	struct ns *ns = fs_of(req)->ns;
	struct ns_wakes readers = { 0 };
	enum ns_close how = ns_handle_is_writer(h) ? writer_close(req, ino, h) : NS_CLOSE_LAST;
	if (how == NS_CLOSE_LAST && ns_handle_claims(ns, h) && publish_long(ns, h))
		loop_step_aside();      /* see publish_long() */
	/* The writer first, then the readers its publish answered: woken
	 * first, a reader's next request would wait for this thread to
	 * answer the writer, and on a small machine it would stand between
	 * the writer and its core (90 us of a 330 us cold hand-off here). */
	fuse_reply_err(req, -ns_flush(ns, h, how, &readers));
	ns_wake(ns, &readers);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	if (fi->fh & FH_VFILE) {
		vbuf_put((struct vbuf *)(uintptr_t)(fi->fh & ~(uint64_t)FH_VFILE));
	} else if (fi->fh & FH_VIEW) {
		view_close((struct view *)(uintptr_t)(fi->fh & ~(uint64_t)FH_TAGS));
	} else {
		struct ns_handle *h = (struct ns_handle *)(uintptr_t)fi->fh;
		if (ns_handle_claims(fs_of(req)->ns, h))
			loop_step_aside();      /* it may publish (a dup'd writer's) */
		ns_release(fs_of(req)->ns, h);
	}
	fuse_reply_err(req, 0);
}

/* ---------------------------------------------------------------- xattrs */

/* size 0 asks for the length only (getxattr(2), listxattr(2)). */
static void reply_xattr(fuse_req_t req, int rc, size_t size, const char *buf)
{
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)rc);
	else
		fuse_reply_buf(req, buf, (size_t)rc);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct fs *fs = fs_of(req);
	char buf[1024];
	size_t cap = size && size < sizeof(buf) ? size : sizeof(buf);
	uid_t uid = fuse_req_ctx(req)->uid;

	/* A GPU pool's IPC handle reaches the whole pool: for those who
	 * could read the daemon's memory anyway (fs/direct.h). */
	if (!strcmp(name, "user.omni.cuda_ipc") && uid != 0 && uid != geteuid())
		return (void)fuse_reply_err(req, EACCES);
	int rc = ns_getxattr(fs->ns, ino, name, buf, cap);

	if (rc == -ENOENT && kept_found(fs, ino))
		rc = ns_getxattr(fs->ns, ino, name, buf, cap);
	/* A view has no object, but a header once its shards are here. */
	if (rc == -ENODATA && !strcmp(name, "user.omni.kv"))
		rc = view_summary(&fs->venv, ino, buf, cap);
	if (rc > 0 && size && (size_t)rc > size)
		rc = -ERANGE;
	reply_xattr(req, rc, size, buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct fs *fs = fs_of(req);
	char buf[512];
	size_t cap = size < sizeof(buf) ? size : sizeof(buf);
	int rc = ns_listxattr(fs->ns, ino, buf, cap);

	if (rc == -ENOENT && kept_found(fs, ino))
		rc = ns_listxattr(fs->ns, ino, buf, cap);
	reply_xattr(req, rc, size, buf);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			const char *value, size_t size, int flags)
{
	(void)flags;
	if (ino == FUSE_ROOT_ID && !strcmp(name, CALLWAIT_XATTR))
		return (void)fuse_reply_err(req, -callwait_arm(&fs_of(req)->cw,
							       fuse_req_ctx(req)->pid, value, size));
	fuse_reply_err(req, -ns_setxattr(fs_of(req)->ns, ino, name, value, size));
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, -ns_removexattr(fs_of(req)->ns, ino, name));
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct pool_usage u;
	struct statvfs sv = { 0 };

	(void)ino;
	pool_usage(fs_of(req)->vf.pool, &u);
	sv.f_bsize = sv.f_frsize = POOL_GRAIN;
	sv.f_blocks = u.size / POOL_GRAIN;
	sv.f_bfree = sv.f_bavail = u.free / POOL_GRAIN;
	sv.f_namemax = NAME_KEY_MAX;
	fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.mkdir = op_mkdir,
	.rmdir = op_rmdir,
	.rename = op_rename,
	.symlink = op_symlink,
	.mknod = op_mknod,
	.unlink = op_unlink,
	.open = op_open,
	.create = op_create,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.fallocate = op_fallocate,
	.release = op_release,
	.ioctl = op_ioctl,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
	.statfs = op_statfs,
};

/* ---------------------------------------------------------------- session */

static unsigned sysctl_uint(const char *path)
{
	FILE *f = fopen(path, "r");
	unsigned v = 0;

	if (f) {
		if (fscanf(f, "%u", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

/* Linux 6.14 on aborts a FUSE connection whose daemon leaves a request
 * unanswered past a timeout, where an admin sets one (libfuse 3.14 cannot
 * ask for its own): a waiting open is such a request, and the abort would
 * take the mount and every object in the pool.  So no wait may last that
 * long.  The longest one, in ms, said once; 0: no bound. */
static int64_t kernel_wait_cap_ms(void)
{
	unsigned dflt = sysctl_uint("/proc/sys/fs/fuse/default_request_timeout");
	unsigned max = sysctl_uint("/proc/sys/fs/fuse/max_request_timeout");
	int by_max = max && (!dflt || dflt > max);
	unsigned t = by_max ? max : dflt;

	if (!t)
		return 0;
	if (t < 15)
		t = 15;         /* the kernel's least: it looks each 15 s */
	fprintf(stderr, "omnifs: the kernel aborts this mount if a request waits %u s for its "
		"answer (/proc/sys/fs/fuse/%s_request_timeout): opens wait at most %u s\n",
		t, by_max ? "max" : "default", t - 2);
	return (int64_t)(t - 2) * 1000;
}

/* The device number the kernel gave the mount at path, or 0 if it cannot
 * be read.  AT_STATX_DONT_SYNC: nothing is asked of this daemon, which
 * serves no request yet. */
static dev_t mount_dev(const char *path)
{
	struct statx stx;

	if (statx(AT_FDCWD, path, AT_STATX_DONT_SYNC, STATX_INO, &stx))
		return 0;
	return makedev(stx.stx_dev_major, stx.stx_dev_minor);
}

int fs_mount(struct fs **out, const struct fs_params *p, struct fuse_args *args)
{
	struct fs *fs = calloc(1, sizeof(*fs));
	struct ns_settings set = {
		.node_name = p->node_name, .dflt = p->dflt, .rules = p->rules,
		.nrules = p->nrules, .wake = wait_answer,
		.stale = attrs_stale, .sarg = fs, .max_wait_ms = kernel_wait_cap_ms(),
		.cleanup_hold_s = p->cleanup_hold_s,
	};
	int rc = -ENOMEM;

	if (!fs)
		return -ENOMEM;
	callwait_init(&fs->cw);
	pthread_mutex_init(&fs->creating.lock, NULL);
	while (getrandom(&fs->cookie, sizeof(fs->cookie), 0) != sizeof(fs->cookie) || !fs->cookie)
		;
	char err[256];
	if (p->cluster) {
		if ((rc = cluster_create(&fs->cl, p->cluster, &fs->st, err, sizeof(err)))) {
			fprintf(stderr, "omnifs: %s\n", err);
			goto free_fs;
		}
		set.hooks = cluster_hooks();
		set.hctx = fs->cl;
	}
	if ((rc = ns_create(&fs->ns, p->pool, &fs->st, &set)))
		goto free_cluster;
	int share_fd;
	void *label;
	if (!pool_share(p->pool, &share_fd, &label))   /* OMNIFS_IOC_SHARE's proof */
		memcpy(label, &fs->cookie, sizeof(fs->cookie));
	fs->vf = (struct vfile_ctx){ fs->ns, p->pool, &fs->st, p->node_name,
				     p->transport, p->config_text, fs->cl };
	view_jobs_init(&fs->vjobs);
	fs->venv = (struct view_env){ fs->ns, fs->cl, &fs->st, &fs->vjobs, 0 };
	fs->max_threads = p->max_threads;
	fs->spin_us = p->spin_us;
	fs->se = fuse_session_new(args, &ops, sizeof(ops), fs);
	if (!fs->se) {
		rc = -EINVAL;           /* libfuse printed which option */
		goto free_ns;
	}
	if (fuse_set_signal_handlers(fs->se)) {
		rc = -EIO;
		goto free_session;
	}
	if (fuse_session_mount(fs->se, p->mountpoint)) {
		rc = -EIO;              /* libfuse printed why */
		goto remove_handlers;
	}
	fs->mounted = 1;
	fs->dev = mount_dev(p->mountpoint);
	if ((rc = kinit_allow_mmap(fs->se)))
		goto unmount;           /* libfuse printed why (no memory) */
	if ((rc = ns_start(fs->ns)))
		goto unmount;
	if (fs->cl && (rc = cluster_start(fs->cl, fs->ns)))
		goto stop_ns;
	*out = fs;
	return 0;

stop_ns:
	ns_stop(fs->ns);
unmount:
	fuse_session_unmount(fs->se);
remove_handlers:
	fuse_remove_signal_handlers(fs->se);
free_session:
	fuse_session_destroy(fs->se);
free_ns:
	ns_destroy(fs->ns);
free_cluster:
	cluster_destroy(fs->cl);
free_fs:
	pthread_mutex_destroy(&fs->creating.lock);
	callwait_destroy(&fs->cw);
	free(fs);
	return rc;
}

static void fs_quiet(void *arg, int idle)
{
	cluster_flush(((struct fs *)arg)->cl, idle);
}

int fs_serve(struct fs *fs)
{
	/* Waiting opens hold no thread, so a few threads serve any number
	 * of waiters. */
	int rc = loop_serve(fs->se, fs->max_threads, fs->spin_us, fs_quiet, fs);

	ns_stop(fs->ns);                /* answers every waiting open */
	return rc;
}

void fs_destroy(struct fs *fs)
{
	if (!fs)
		return;
	ns_stop(fs->ns);
	/* View opens wait in ns and pull through the cluster: let them end. */
	if (fs->venv.jobs)
		view_jobs_drain(fs->venv.jobs, fs->cl);
	/* Peers' threads call into ns: they stop before it goes. */
	cluster_destroy(fs->cl);
	if (fs->mounted)
		fuse_session_unmount(fs->se);
	fuse_remove_signal_handlers(fs->se);
	fuse_session_destroy(fs->se);
	ns_destroy(fs->ns);
	pthread_mutex_destroy(&fs->creating.lock);
	callwait_destroy(&fs->cw);
	free(fs);
}
