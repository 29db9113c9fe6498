/* ns.h - the namespace and the life of objects (SPEC §3, §4).
 *
 * Everything a node knows by name: the root, .omni and its virtual files,
 * implicit stage and edge directories, and keys.  A key node may hold an
 * object (being written or published); an object lives in the pool and is
 * pinned by handles, so removing or consuming it never pulls bytes from
 * under a reader that already has it open.
 *
 * ns knows nothing of FUSE: a waiting open is a struct ns_waiter that the
 * caller owns, answered through settings.wake once the key is published or
 * its deadline passes.  All functions are thread-safe.
 */
#ifndef OMNI_NS_H
#define OMNI_NS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "names.h"
#include "stats.h"
#include "timerq.h"
#include "htab.h"

struct pool;
struct ns;
struct ns_handle;

#define NS_ROOT_INO 1

enum ns_kind { NK_ROOT, NK_CTL, NK_VFILE, NK_STAGE, NK_EDGE, NK_KEY };

/* Per-edge policy; -1 in a rule means "not set there". */
struct ns_policy { int64_t readers, wait_ms, ttl_s; };
struct ns_rule {
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1];
	struct ns_policy p;
};

struct ns_waiter;
typedef void (*ns_wake_fn)(struct ns_waiter *w, int err, struct ns_handle *h);

/* Published objects are hashed per NS_CHUNK too, so that bytes pulled from
 * another node are checked as they arrive, not only once all are in. */
#define NS_CHUNK (1u << 20)
/* Remote objects larger than this are streamed to their readers through a
 * small window instead of being copied whole into this node's pool: 64 MiB
 * and a chunk, so that a 64 MiB tensor with its header (the connector's
 * frame, a KV payload's JSON) is still copied whole, and handed over
 * while it lands (a stream's reads go through FUSE: 5-10 ms more of a
 * 64 MiB get here). */
#define NS_STREAM_MIN ((64u << 20) + NS_CHUNK)
#define NS_INLINE_MAX (64u << 10)      /* published objects this small and
					  contiguous are offered with their bytes */
/* Requests cleaned up within cleanup_hold_s (ns_settings) that a node
 * keeps, the oldest forgotten first: about 300 B each at most. */
#define NS_ENDED_MAX 65536

/* Who asked this node to remove an object of its own, in the cluster's
 * words, handed back with the object's GONE: a peer index + 1 (0: no
 * one), and how far that peer had heard us when it asked. */
struct ns_asker { int peer; uint64_t conn, heard; };

/* An object as the cluster sees it. */
struct ns_objinfo {
	const char *from, *to, *key;
	uint64_t oid;                   /* the owner's id for it */
	uint64_t size, xxh3, reads, published_ns;
	int64_t readers;
	uint32_t uid, gid;
	int owner;                      /* -1: this node; else a peer index */
	const void *data;               /* the bytes when small (see above), or NULL */
	const void *kvhdr;              /* a KV payload's header (SPEC §6), or NULL */
	uint32_t kvhdr_len;
	int claimed;                    /* published: a peer index + 1 that took it
					   by its claim already; 0: none */
	int excl;                       /* a claim's: an O_EXCL put's, which an
					   object being written refuses too; 0: a
					   writer's close, which wins over one */
	int decided;                    /* an announce's: its publish was decided
					   where the edge's claims meet (claimed
					   there, or made there): one being
					   written here loses to it */
	struct ns_asker asker;          /* gone: who asked for it (ns_remove_name) */
};

/* What a view delivered of a source: units [first, first+n) of `of`
 * (heads, or the ranks a shard is replicated to; of 0: the whole
 * object). */
struct ns_cover { uint32_t first, n, of; };

/* What ns asks of the cluster; all called unlocked, in the order the
 * events happened.  Any may be NULL (a single node). */
struct ns_hooks {
	void (*published)(void *ctx, const struct ns_objinfo *o);       /* ours */
	void (*gone)(void *ctx, const struct ns_objinfo *o);            /* ours */
	void (*consumed)(void *ctx, int owner, uint64_t oid,            /* a complete read */
			 const struct ns_cover *c);
	/* A publish claimed first (ns_handle_claim): peer takes o unless a
	 * node has an object of its name, as one step, and wakes its readers
	 * at once; o is published here only after.  0: taken; -EEXIST: a node
	 * has one (the writer's close fails, nothing is left); else: o is
	 * published as if never claimed.  Called from the publishing thread. */
	int (*claim)(void *ctx, int peer, const struct ns_objinfo *o);
	/* An object of ours went unpublished (its claim was refused, its
	 * writer was killed, its close failed) after a peer's object of its
	 * name was refused here while ours was being written, or while
	 * readers here wait for the key (they waited for ours, and asked
	 * nobody): the peers are asked for theirs, and told to announce it
	 * if it comes within wait_ms (0: no reader waits), or the readers
	 * would wait for an announce that came and went, or never comes.
	 * Called with ns unlocked, from the thread that dropped ours. */
	void (*reask)(void *ctx, const char *from, const char *to, const char *key,
		      unsigned wait_ms);
	/* Start bringing a remote object's bytes into dst; report through
	 * ns_fetch_progress(token).  0, or -errno (nothing will be reported). */
	int (*fetch)(void *ctx, int owner, uint64_t oid, uint64_t size,
		     const struct iovec *dst, int n, void *token);
	/* rm of a remote object: tell its owner, without waiting for it
	 * (so an rm of many costs no round trip each).  0 once the request
	 * is on its way, -EIO if the owner cannot be reached. */
	int (*remove)(void *ctx, const struct ns_objinfo *o);
	const char *(*peer_name)(void *ctx, int owner);
	/* A stream's window (see ns_stream.c): bring [off, off+len) of a
	 * remote object into dst under lease, calling progress(arg, upto, 0)
	 * as verified bytes land and progress(arg, upto, err) once at the end.
	 * 0, or -errno (then progress is never called). */
	int (*pull)(void *ctx, int owner, uint64_t oid, uint64_t lease, uint64_t off,
		    uint64_t len, void *dst, void (*progress)(void *arg, uint64_t upto, int err),
		    void *arg);
	/* The stream under lease ended: its owner may let go of the object. */
	void (*release)(void *ctx, int owner, uint64_t lease);
	/* Host memory that fetches and pulls may land in where the pool is
	 * not host memory (RDMA READs need it registered); NULL when out of
	 * memory.  Either may be NULL: malloc and free then. */
	void *(*buf_alloc)(void *ctx, size_t size);
	void (*buf_free)(void *ctx, void *buf);
};

struct ns_settings {
	const char *node_name;
	struct ns_policy dflt;
	int64_t max_wait_ms;    /* > 0: no open waits longer (fs_mount says why) */
	unsigned cleanup_hold_s;        /* how long new objects of a request that
					   ns_cleanup removed are refused (0: not) */
	const struct ns_rule *rules;
	size_t nrules;
	ns_wake_fn wake;        /* answers a waiting open; called unlocked */
	const struct ns_hooks *hooks;
	void *hctx;
	/* The kernel keeps a published object's name and attributes
	 * (ns_attr.stable): called, locked, when such an object leaves a
	 * name the kernel knows (ino), so that the kernel asks again.  held:
	 * a file of the kernel's is open on the object; then 1 if the kernel
	 * was also made to look every name it keeps up again before using
	 * it, so that only open files ask for ino's attributes: they get the
	 * object's last ones (ns_attr.gone), and not ENOENT.  Must not wait
	 * for ns.  May be NULL. */
	int (*stale)(void *arg, uint64_t ino, int held);
	void *sarg;
};

/* A waiting open, owned by the caller until wake() hands it back. */
struct ns_waiter {
	struct timer timer;     /* must stay first: ns finds it from its timer */
	int type;               /* private to ns */
	struct ns_waiter *next, *prev;
	struct hlink byid;
	uint64_t id;            /* from ns_waiter_id(); names it for ns_cancel */
	uint64_t tag;           /* the caller's, for ns_cancel_tag(); 0: none */
	uint64_t ino;
	int flags;
	int64_t wait_ms;        /* > 0: the opener's own wait, not the edge's */
	void *ctx;              /* the caller's: its request */
	/* Asked under ns's lock right after queueing: 1 if the open was
	 * interrupted before it could be cancelled by id. */
	int (*interrupted)(struct ns_waiter *w);
	/* If set, answers this waiter instead of settings.wake. */
	void (*done)(struct ns_waiter *w, int err, struct ns_handle *h);
	int wake_err;           /* private to ns: the answer, while queued */
	struct ns_handle *wake_h;
	int capped;             /* private to ns: its wait is max_wait_ms */
	/* Set by ns with its ENOENT: the wait ended at max_wait_ms, short of
	 * the one asked for (a caller of its own may wait again). */
	int cut;
	int window;             /* private to ns: waits for room for a window */
	/* If set, called under ns's lock when a peer is lost while this
	 * waits: a view waiting for one shard may hold others of it (view.c). */
	void (*peer_lost)(struct ns_waiter *w);
};

/* Waiters a call has answered, told by ns_wake() once the lock is
 * dropped.  They chain through their own links, so waking never
 * allocates.  deliver: the call left its news for the cluster (a
 * reader's CONSUMED) queued, for ns_wake to deliver.  pump: windows of
 * streamed reads (ns_stream.c) whose opens wait for their first pulls,
 * which ns_wake sends. */
struct stream;
struct ns_wakes {
	struct ns_waiter *head;
	int deliver;
	struct stream *pump;
	struct ns_event *asks;          /* hooks->reask, last: each a round trip */
};
void ns_wake(struct ns *ns, struct ns_wakes *wl);
/* Delivers the news for the cluster that calls queued (ns_hooks'
 * published, gone and consumed), waiting for a thread delivering them.
 * Whatever talks to the peers on its own calls this first, so that
 * what it says comes after what this node did before. */
void ns_deliver(struct ns *ns);

struct ns_attr {
	uint64_t ino;
	enum ns_kind kind;
	uint64_t size;
	uint32_t mode;          /* with S_IFDIR or S_IFREG */
	uint32_t uid, gid;
	uint64_t mtime_ns;
	int stable;             /* a published object: nothing above changes */
	int bare;               /* a key with no object at all (a view's name) */
	int gone;               /* an object that left, still open (no links) */
};

struct ns_dirent {
	const char *name;               /* in the same allocation */
	uint64_t ino;
	uint32_t mode;
};

/* One line of .omni/transfers. */
struct ns_xfer {
	char path[2 * NAME_STAGE_MAX + NAME_KEY_MAX + 3];
	char peer[NAME_STAGE_MAX + 8];
	uint64_t done, total, elapsed_ns;
	int writing;
};

int ns_create(struct ns **out, struct pool *pool, struct stats *st,
	      const struct ns_settings *set);
void ns_destroy(struct ns *ns);
/* The deadline thread: waits and TTLs.  ns_stop answers every waiter. */
int ns_start(struct ns *ns);
void ns_stop(struct ns *ns);

/* Looks name up in parent; on success the kernel holds one more lookup
 * reference (drop it with ns_forget if the reply fails).  What a key
 * without an object (none yet, or none any more) resolves to: */
enum {
	NS_LOOKUP_OBJECT,       /* nothing: -ENOENT */
	NS_LOOKUP_WAIT,         /* a pending key node, made if need be, for a
				   reader's open to wait on */
	NS_LOOKUP_KNOWN,        /* the key's node if it has one (a reader waits
				   on it), for an O_CREAT open: ns_create_known */
};
int ns_lookup(struct ns *ns, uint64_t parent, const char *name,
	      int mode, struct ns_attr *out);
void ns_forget(struct ns *ns, uint64_t ino, uint64_t n);
int ns_getattr(struct ns *ns, uint64_t ino, struct ns_attr *out);
/* A key's edge (its ino) and name: 0, or -ENOENT if ino is no key. */
int ns_key_name(struct ns *ns, uint64_t ino, uint64_t *parent, char name[NAME_KEY_MAX + 1]);
int ns_readdir(struct ns *ns, uint64_t ino, struct ns_dirent **ents, size_t *n);

/* Creates key name in edge parent for writing (O_CREAT).  Also counts a
 * lookup reference, as a create reply does. */
int ns_create_key(struct ns *ns, uint64_t parent, const char *name, int excl,
		  uint32_t uid, uint32_t gid, struct ns_attr *out,
		  struct ns_handle **h);
/* The O_CREAT open of a key node that ns_lookup(NS_LOOKUP_KNOWN) gave, or
 * of one whose name the kernel kept after its object left (stale):
 * as ns_create_key without O_EXCL, by inode; O_TRUNC in flags empties an
 * object being written; NS_OPEN_RETRY as ns_open's.  No lookup reference
 * is counted (an open's reply adds none). */
int ns_create_known(struct ns *ns, uint64_t ino, uint32_t uid, uint32_t gid, int flags,
		    struct ns_handle **h);
/* Opens a key.  0 with *h, or -EINPROGRESS when the open waits: then w is
 * queued and will be answered through wake().  -EAGAIN: the key is not
 * there but other names of its base are (<base>.rank<i>of<S>): open it as
 * a view; a waiting open is answered so too when one comes.  w NULL:
 * an open that may not wait, -ENOENT where it would.  Other errors:
 * -errno.  Flags beyond open(2)'s: */
#define NS_OPEN_SOURCE (1 << 30)        /* a view's source: answered once published,
					   never fetched whole, never counted */
#define NS_OPEN_EXACT  (1 << 29)        /* this name only, never -EAGAIN */
#define NS_OPEN_HERE   (1 << 28)        /* -EREMOTE for a published object whose
					   bytes are elsewhere: start no pull */
#define NS_OPEN_KEPT   (1 << 27)        /* through a name the kernel kept after
					   its object left: as after a lookup */
#define NS_OPEN_RETRY  (1 << 26)        /* the kernel's second try of an open
					   that heard -ESTALE, its last: none for
					   objects that left it mapped (node_renew) */
int ns_open(struct ns *ns, uint64_t ino, int flags, struct ns_waiter *w,
	    struct ns_handle **h);
/* h's file is mapped (ops.c tells by its reads through the kernel's page
 * cache): the key's next object, while it is, comes under a new inode. */
void ns_handle_mapped(struct ns *ns, struct ns_handle *h);
/* A fresh waiter id, to register for interrupts before ns_open. */
uint64_t ns_waiter_id(struct ns *ns);
int ns_handle_is_writer(const struct ns_handle *h);
/* What ns keeps of a writer's open flags (a reader's are ignored):
 * O_APPEND: each write through h goes at its object's end, whatever offset
 * it comes with.  The kernel appends at its own idea of the size, which for
 * a name it kept after that name's object left is the old object's: `>>`
 * of a consumed name wrote after a hole.  O_RDWR: see ns_handle_mappable. */
void ns_handle_flags(struct ns *ns, struct ns_handle *h, int flags);
/* A writer opened O_RDWR, which alone may map its file (mmap needs read
 * access): a shared mapping's bytes come as writes until it goes, so its
 * close may not be the last one even with no descriptor left. */
int ns_handle_mappable(struct ns *ns, const struct ns_handle *h);
/* The size of the object writer h writes, for h's own file: the kernel
 * asks through it for lseek's SEEK_END, where a C writer finds its end
 * (others' stat says 0 until the publish).  -ENOENT if h writes nothing. */
int ns_handle_writing_size(struct ns *ns, const struct ns_handle *h, uint64_t *size);
/* The publish of h's object is claimed at peer first (hooks->claim): the
 * peer takes it unless a node has an object of its name, so that of two
 * writers of one key on two nodes only one publishes, and the peer's
 * readers have it as an announce would bring it.  excl: an O_EXCL put's,
 * which one only being written refuses too (else that one loses: the
 * first close wins). */
void ns_handle_claim(struct ns *ns, struct ns_handle *h, int peer, int excl);
/* Whether a close or release through h may wait on the peers: for a
 * claim's answer, or to ask for a peer's object of its name that was
 * refused while h's was written (hooks->reask). */
int ns_handle_claims(struct ns *ns, const struct ns_handle *h);
/* A writer whose caller said it never duplicates its descriptor: its
 * close is its last (OMNIFS_PLACE_SOLE). */
int ns_handle_sole(struct ns *ns, const struct ns_handle *h);
/* Takes a waiter out of the queue if it is still there (an interrupt):
 * returns it, or NULL if it was already answered. */
struct ns_waiter *ns_cancel(struct ns *ns, uint64_t id);
/* Takes every queued waiter with this tag (not 0) out of the queue: a
 * chain through their next links, for the caller to answer; NULL if none. */
struct ns_waiter *ns_cancel_tag(struct ns *ns, uint64_t tag);

ssize_t ns_write(struct ns *ns, struct ns_handle *h, const void *buf,
		 size_t len, uint64_t off);
/* Points iov at the bytes of [off, off+len); returns the byte count.
 * The bytes stay valid until the handle's release; but on a handle that
 * streams (a reader's, of a large remote object), only until ns_read_done(),
 * which must follow every read that returned bytes, once they are copied
 * out: the window moves on then, and the handle's release waits for it.
 * -EBUSY while the handle holds a range of its window for its caller's
 * own copy (ns_direct_window).  The read that completes a reader's
 * counts as its complete read (consumption) at once, not at its close. */
ssize_t ns_read(struct ns *ns, struct ns_handle *h, uint64_t off, size_t len,
		struct iovec *iov, int *niov, int maxiov);
int ns_handle_streams(const struct ns_handle *h);
void ns_read_done(struct ns *ns, struct ns_handle *h);
enum ns_close {
	NS_CLOSE_LAST,          /* a live caller's last descriptor on it */
	NS_CLOSE_DUP,           /* the caller holds another (a dup): not yet */
	NS_CLOSE_EXIT,          /* an exiting task's: forks may share it */
	NS_CLOSE_KILLED,        /* a task dying of a signal */
};
/* A close(2) of the handle.  A live writer's last close publishes, so that
 * close() reports failures.  Closes by exiting tasks leave it to the release
 * (the last reference anywhere): it publishes, unless the last task to
 * close was killed, which discards the object.  The readers that a
 * publish answers go into later (an empty list), for the caller to wake
 * after its own reply (see op_flush), or are woken before it returns if
 * later is NULL.  A reader's news (its complete read, for the owner)
 * waits in later too; a writer's is told before it returns, so that its
 * object is visible everywhere before close() returns. */
int ns_flush(struct ns *ns, struct ns_handle *h, enum ns_close how, struct ns_wakes *later);
/* "/from/to/key" of the handle's object, for caller_holds_fd(). */
void ns_handle_path(struct ns *ns, const struct ns_handle *h, char *buf, size_t len);
void ns_release(struct ns *ns, struct ns_handle *h);
int ns_truncate(struct ns *ns, uint64_t ino, uint64_t size);
/* posix_fallocate(3) by its writer: [off, off+len) reserved in the pool
 * (and the size grown to cover it), or -ENOSPC having taken nothing.
 * Without it, the C library would write a byte a block up to the end. */
int ns_fallocate(struct ns *ns, struct ns_handle *h, uint64_t off, uint64_t len);
int ns_unlink(struct ns *ns, uint64_t parent, const char *name);
/* rm of request id's objects (name_of_request): those this node owns,
 * published or being written (the writer's next write: ENOENT), and the
 * records of other nodes' where told[owner] says that owner removed its
 * own (told may be NULL).  Opens waiting for its keys fail with ENOENT
 * at once: the request is over.  For cleanup_hold_s after it, a create
 * of a new object of its keys fails with ECANCELED, and an open that
 * would wait for one with ENOENT.  How many of its own it removed. */
uint64_t ns_cleanup(struct ns *ns, const char *id, const uint8_t *told);
/* The same-node hand-over (fs/direct.h).  where: a reader's handle of a
 * complete local object, its bytes as at most max iovecs (valid until the
 * handle's release); -EREMOTE when the bytes are not all here, -E2BIG in
 * more pieces than max.  Nothing is counted until done says the caller
 * has them (what: the stat to count it under): the handle's close then
 * counts a complete read.  -EOPNOTSUPP for a pool a process cannot copy. */
int ns_direct_where(struct ns *ns, struct ns_handle *h, struct iovec *iov, int max,
		    int *n, uint64_t *size, uint64_t *xxh3, int *landing);
void ns_direct_done(struct ns *ns, struct ns_handle *h, enum stat_id what);
/* With landing (OMNIFS_IOC_WHERE_SOON), where also answers for another
 * node's object that h's fetch is still landing in the pool, and sets
 * *landing; the caller then waits for each range with ns_direct_landing:
 * until [0, upto) is here and checked, *have how much is; the open is
 * done (counted as where's done counts, ST_DIRECT_GETS) once all is.
 * -EIO once the fetch has failed, -EINVAL past the end.  Blocks: never
 * from a thread that delivers pulls. */
int ns_direct_landing(struct ns *ns, struct ns_handle *h, uint64_t upto, uint64_t *have);
/* Waits, as a read would, until another node's object that h's open is
 * copying here whole has landed (or its pull has failed); returns at once
 * for any other.  Blocks: never from a thread that delivers pulls. */
void ns_direct_landed(struct ns *ns, struct ns_handle *h);
/* OMNIFS_IOC_WINDOW: for a reader's handle of a streamed object (another
 * node's, larger than NS_STREAM_MIN) in a host pool, where its bytes from
 * off on lie in the pool, waited for until want of them (at least 1,
 * fewer where their 2 MiB piece ends) have landed and been checked: *poff
 * (an offset in the pool), *len bytes in a row (0 at the end), *size the
 * object's.  The caller copies them itself; they stay there, and the
 * handle keeps its read turn (ns_read: -EBUSY), until its next call or its
 * release.  Counted as a read of that range.  -EOPNOTSUPP for any other
 * handle or pool, -EBADF for a writer's, -EIO once a pull of the range
 * failed, -EINVAL past the end. */
int ns_direct_window(struct ns *ns, struct ns_handle *h, uint64_t off, uint64_t want,
		     uint64_t *poff, uint64_t *len, uint64_t *size);
/* As where, the bytes as pool offsets (any pool; for a GPU's, which
 * another process maps by the pool's IPC handle). */
struct ns_span { uint64_t off, len; };
int ns_direct_spans(struct ns *ns, struct ns_handle *h, struct ns_span *sp, int max, int *n,
		    uint64_t *size, uint64_t *xxh3);
/* As where, for an object of at most cap bytes (and NS_BOUNCE) in a pool
 * a process cannot copy from: its bytes copied into the calling thread's
 * buffer, one iovec valid until the thread's next call into ns (a small
 * GET's answer); -E2BIG if larger. */
int ns_direct_bounce(struct ns *ns, struct ns_handle *h, size_t cap, struct iovec *iov,
		     uint64_t *size, uint64_t *xxh3);
/* place: a fresh object's one writer makes it size bytes long, to fill
 * them itself at the pool offsets sp says (any pool: the caller knows
 * how its kind is reached), counted under what; nothing changes on an
 * error (-ENOSPC, -E2BIG, -EBUSY once written to).  sole: the writer's
 * descriptor is never duplicated (ns_handle_sole). */
int ns_direct_place(struct ns *ns, struct ns_handle *h, uint64_t size, struct ns_span *sp,
		    int max, int *n, enum stat_id what, int sole);
/* A placed object's writer has filled [0, upto) for good (OMNIFS_IOC_PLACED):
 * the hasher may go ahead, on another CPU than cpu, the one the writer
 * copies on (-1: unknown).  -EINVAL if h did not place, or upto is past
 * the end. */
int ns_direct_placed(struct ns *ns, struct ns_handle *h, uint64_t upto, int cpu);

int ns_getxattr(struct ns *ns, uint64_t ino, const char *name, char *buf,
		size_t size);
int ns_listxattr(struct ns *ns, uint64_t ino, char *buf, size_t size);
int ns_setxattr(struct ns *ns, uint64_t ino, const char *name,
		const char *val, size_t len);
int ns_removexattr(struct ns *ns, uint64_t ino, const char *name);

/* ---- the cluster's side (fs/cluster.c) ---- */

/* Another node published o, its owner says (in the order it says what it
 * has: after a GONE of o, o is back): it becomes visible here.  0; -EEXIST
 * if this node has published an object of that name, -EBUSY if it is
 * writing one (either way ours stays); -EINVAL for a bad name.  But ours
 * that a writer has not closed loses to o->decided (its writes and close
 * fail with EEXIST).  Bytes given in o->data are checked against o->xxh3. */
int ns_remote_add(struct ns *ns, int owner, const struct ns_objinfo *o);
/* o came in the owner's answer to a lookup or a listing, which may arrive
 * after the owner's GONE of it: ns_remote_add, or -ENOENT for an object
 * said gone lately. */
int ns_remote_answer(struct ns *ns, int owner, const struct ns_objinfo *o);
/* A peer's claim (hooks->claim on its side): ns_remote_add, unless the key
 * holds another node's object, or ours published or being published, or
 * (o->excl: an O_EXCL put) ours being written: -EEXIST, and nothing
 * changes.  Ours that a writer has not closed loses to a writer's close:
 * its writes and close fail with EEXIST. */
int ns_remote_claim(struct ns *ns, int owner, const struct ns_objinfo *o);
/* The owner says its object oid, from/to/key, left (consumed, removed,
 * expired). */
void ns_remote_gone(struct ns *ns, int owner, const char *from, const char *to,
		    const char *key, uint64_t oid);
/* An owner is lost (dead, or cut off): its objects leave, and for
 * NS_LOST_KEEP_NS an open of one of them fails with EIO at once. */
void ns_owner_lost(struct ns *ns, int owner);
/* An owner is about to tell us again all it has (its new connection, made
 * at since_ns): what it says from now on is of its new generation, and
 * once it has said it all, ns_owner_swept takes out the records it did not
 * renew, but those its answers gave us since since_ns: it told us those
 * while it could tell us of their end on its new connection, and it says
 * again only what we host.  Those it renews never leave their keys
 * meanwhile, so a reader or a stat on this node never sees them blink
 * out. */
void ns_owner_renew(struct ns *ns, int owner, uint64_t since_ns);
void ns_owner_swept(struct ns *ns, int owner);
/* A fetch's bytes [0, upto) are here and verified; err ends it (ECANCELED:
 * its lease was released, as asked).  1 if the rest is wanted by nobody
 * (its object left its key, and nothing here holds it but the fetch): the
 * caller may release its lease, and it ends soon. */
int ns_fetch_progress(struct ns *ns, void *token, uint64_t upto, int err);
/* Requests from peers about objects this node owns.  ns_remove_name
 * removes the object named, if it is still oid (0: whichever it is), as
 * asker asked (NULL: no one; its GONE's o->asker says who).
 * ns_consumed counts peer's read rid of oid once, if told again before
 * NS_SEEN_MAX other reads of it; -EINVAL for a cover no view makes. */
#define NS_SEEN_MAX 4096
int ns_consumed(struct ns *ns, uint64_t oid, const struct ns_cover *c, int peer, uint64_t rid);
int ns_remove_name(struct ns *ns, const char *from, const char *to, const char *key,
		   uint64_t oid, const struct ns_asker *asker);
/* Our published object of that name (names point into ns: copy them
 * before the next call; kvhdr and data, a small object's bytes, are
 * malloc'd: the caller frees them). */
int ns_find(struct ns *ns, const char *from, const char *to, const char *key,
	    struct ns_objinfo *out, char names[3][256]);
/* 0 if this node knows an object of that name: ours, published or being
 * written (as a local O_EXCL create sees it), or another node's that it
 * heard of; else -ENOENT. */
int ns_exists(struct ns *ns, const char *from, const char *to, const char *key);
/* Calls fn for each published object this node owns in the scope (from
 * and to may be "" for all; the shards of the view base, or all if base is
 * ""), unlocked, names copied; KV headers too if
 * kvhdr is set (announces carry them, listings don't).  Then, if gone is
 * set, calls it for each of them that was removed meanwhile: its GONE
 * may have gone out before what fn said of it. */
void ns_foreach_own(struct ns *ns, const char *from, const char *to, const char *base,
		    int kvhdr, void (*fn)(void *arg, const struct ns_objinfo *o),
		    void (*gone)(void *arg, const struct ns_objinfo *o), void *arg);
/* Calls fn, unlocked, for each key that readers wait for (in open, for
 * ms more at most) and no object holds here yet. */
void ns_foreach_waited(struct ns *ns, void (*fn)(void *arg, const char *from, const char *to,
						const char *key, unsigned ms), void *arg);
/* Serving a pull: a handle that never counts as a read, the bytes and
 * the publish-time hash of chunk idx. */
int ns_serve_open(struct ns *ns, uint64_t oid, struct ns_handle **h, uint64_t *size);
int ns_serve_chunk(struct ns *ns, struct ns_handle *h, uint64_t idx,
		   struct iovec *iov, int *n, int max, uint64_t *xxh3);
/* Serving a grant (a peer reads the object straight from the pool): its
 * extents, pool offsets in order and adjacent ones merged (-E2BIG if more
 * than max), and the publish-time hashes of chunks [first, first+n) that
 * it has (*nhash of them). */
struct ns_extent { uint64_t off, len; };
int ns_serve_map(struct ns *ns, struct ns_handle *h, struct ns_extent *ext, uint32_t max,
		 uint32_t *next, uint64_t first, uint32_t n, uint64_t *hash, uint32_t *nhash);
/* A name for one read of another node's object, under which its owner
 * keeps it (lease.h); unlike any this node used before a restart. */
uint64_t ns_lease_id(struct ns *ns);
/* The names along a directory (or key's edge): its kind, with from and to
 * filled as far as they go. */
int ns_dir_names(struct ns *ns, uint64_t ino, char from[NAME_STAGE_MAX + 1],
		 char to[NAME_STAGE_MAX + 1]);

/* The wait_ms of the edge a directory or key is in (or the default). */
int64_t ns_wait_ms(struct ns *ns, uint64_t ino);

/* For .omni: counts and the transfers in flight (malloc'd array). */
void ns_counts(struct ns *ns, uint64_t *objects, uint64_t *inflight);
/* Pool bytes that hold copies of other nodes' objects (dropped when the
 * pool is short and nothing uses them). */
uint64_t ns_copy_bytes(struct ns *ns);
/* Host memory beside a full host pool that streams' windows hold now (up
 * to a quarter of the pool's size). */
uint64_t ns_outside_bytes(struct ns *ns);
int ns_transfers(struct ns *ns, struct ns_xfer **out, size_t *n);
/* ---- rank-shard views (fs/view.c) ---- */

/* The published keys of a key's base in its edge (see ns_open), the
 * key's own name and its edge's inode.  *out is malloc'd. */
struct ns_sibling { char name[NAME_KEY_MAX + 1]; uint64_t ino; };
int ns_siblings(struct ns *ns, uint64_t ino, char self[NAME_KEY_MAX + 1], uint64_t *edge,
		struct ns_sibling **out, size_t *n);
/* A source handle's object: owner (-1: here), oid, size, and its KV
 * header (malloc'd, NULL if it has none or none came with it). */
struct ns_srcinfo { int owner; uint64_t oid, size; uint8_t *kvhdr; uint32_t kvhdr_len; };
int ns_source_info(struct ns *ns, struct ns_handle *h, struct ns_srcinfo *si);
/* 1 if a source handle's object went with its owner (SPEC §4.7): a view
 * of it can no longer be made. */
int ns_source_lost(struct ns *ns, struct ns_handle *h);
/* A view delivered c of the source (once per handle): counted here or
 * by its owner towards consumption (SPEC §5); the owner's news waits for
 * the next unlock that delivers, at the latest the source's release. */
void ns_source_consumed(struct ns *ns, struct ns_handle *h, const struct ns_cover *c);
/* Room in the pool for a view's bytes while it is open, or NULL (make a
 * buffer elsewhere): only where the CPU addresses the pool, and only
 * while as much again stays free for objects.  Its bytes are whatever
 * was there.  ns_scratch_put gives back what ns_scratch_get gave: 1, or
 * 0 for any other memory. */
void *ns_scratch_get(struct ns *ns, size_t size);
int ns_scratch_put(struct ns *ns, void *p, size_t size);

/* Which virtual file an NK_VFILE inode is (its name). */
const char *ns_vfile_name(struct ns *ns, uint64_t ino);

#endif
