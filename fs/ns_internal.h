/* ns_internal.h - what the parts of the namespace share: its structs and
 * the helpers each part offers the others.  Only fs/ns*.c include it; the
 * rest of omnifs sees ns.h.
 *
 * Locking is ns.c's (see there): unless a prototype's comment says
 * otherwise, a helper is called with ns->lock held.
 */
#ifndef OMNIFS_NS_INTERNAL_H
#define OMNIFS_NS_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/uio.h>
#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t in struct object */
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>      /* libxxhash's AVX2/AVX-512 paths, chosen at run time */
#endif

#include "ended.h"
#include "ns.h"
#include "rangeset.h"
#include "../transport/pool.h"

enum { T_WAITER = 1, T_OBJECT = 2, T_SWEEP = 3 };
enum obj_state { OS_WRITING, OS_PUBLISHING, OS_PUBLISHED, OS_DEAD };

struct ext { uint64_t off, len, lstart; };

struct object {
	struct timer ttl;               /* these two first: see struct timed */
	int type;
	struct node *node;              /* NULL once unlinked */
	enum obj_state state;
	uint64_t size, cap;
	struct ext *ext;
	unsigned next, extcap;
	uint64_t xxh3;
	int64_t readers, ttl_s;
	uint64_t reads, created_ns, published_ns;
	unsigned refs, writers, writers_flushed;
	unsigned opens;                 /* readers' handles a file may fstat() */
	/* Handles whose files are mapped (ns_handle_mapped).  Once it left
	 * its key with some, or with readers' files open (opens), on that
	 * key's went list until no file has it (see node_renew). */
	unsigned maps;
	struct node *was;
	struct object *was_next;
	uint64_t was_ino;               /* its key's inode when it left */
	int error;
	uint32_t uid, gid;
	/* The hash follows a sequential writer (see "hashing" below):
	 * [0, front) is written, [0, hashed) hashed into hs, and the hasher
	 * may be working on [hashed, hash_to). */
	XXH3_state_t *hs;
	uint64_t front, hashed, hash_to;
	int hash_dirty, hashing, queued;
	struct object *hq_next;
	XXH3_state_t *cs;               /* the hasher's current chunk */
	uint64_t *chunks;               /* XXH3 of each NS_CHUNK, kept at publish */
	uint64_t nchunks;
	/* The cluster: oid names the object to peers (ours: in byoid while
	 * published); a remote one's bytes arrive by a fetch, [0, have)
	 * verified so far.  fetch_gen tells handles of a failed fetch. */
	uint64_t oid;
	int owner;                      /* -1: ours */
	uint32_t gen;                   /* its owner's generation when last told */
	uint64_t answered_ns;           /* when its owner's answer last said it (0: never) */
	int claim;                      /* a peer index + 1: its publish is claimed there */
	int claim_excl;                 /* ... as an O_EXCL put's (ns_objinfo's excl) */
	int refused;                    /* a peer's of its name was refused while written */
	struct ns_asker asker;          /* a peer's REMOVE unlinked it: whose */
	struct hlink byoid;
	int fetch;
	int nofit;                      /* its copy did not fit the pool: streamed */
	int lost;                       /* went with its owner (ns_owner_lost) */
	uint64_t have;
	unsigned fetch_gen;
	uint8_t *stage;                 /* a fetch's bytes on their way to a device pool */
	struct object *lru_prev, *lru_next;     /* ns's replicas that hold bytes */
	/* A KV payload's header (SPEC §6), kept for views and user.omni.kv;
	 * cov counts deliveries of each of cov_of head units by views, of
	 * which every unit has had cov_min (already counted in reads). */
	uint8_t *kvhdr;
	uint32_t kvhdr_len, cov_of, cov_min;
	uint32_t *cov;
	/* The peers' reads counted, by their names for them: a CONSUMED
	 * told again (its answer was lost with a connection) counts once.
	 * The last NS_SEEN_MAX of them, the oldest replaced (at seen_at). */
	struct seen_read { int peer; uint64_t rid; } *seen;
	uint32_t nseen, seen_at;
};

enum { F_NONE, F_RUNNING, F_DONE, F_FAILED };

struct timed { struct timer t; int type; };

struct node {
	struct hlink byino, byname, bybase;     /* bybase: keys, by view base */
	uint64_t ino, nlookup, npub;
	enum ns_kind kind;
	struct node *parent, *child, *next, *prev;
	unsigned nchild;
	struct object *obj;
	struct ns_waiter *waiters;
	char *name;
	/* Keys by stem (name_stem()): a ring of those with one stem, of
	 * which one, the ring's head, is in ns->byreq. */
	struct hlink byreq;
	struct node *req_next, *req_prev;
	int req_head;
	uint64_t lost_ns;               /* its object went with its owner then */
	int stale;      /* its object left while the kernel kept the name (a
			 * published one, or any under a kept name: long_entry);
			 * until the next lookup or object (see ns_open) */
	int long_entry; /* the kernel's last entry for it was a published
			 * object's, which it keeps (ops.c's attr_timeout) */
	/* The attributes of the published object that left it while a
	 * file of the kernel's was open on it: what that file's fstat() is
	 * answered (see left_keep), until the name has an object again. */
	struct ns_attr *left;
	struct object *went;            /* objects that left it, maybe mapped */
};

/* An inode the kernel still has after its name took a new one (ns.c's
 * node_renew): only files open on the object that left it use it, and
 * they are answered that object's attributes until the kernel forgets it. */
struct ghost {
	struct hlink byino;
	struct ghost *next, *prev;      /* ns->ghosts, to free them at the end */
	uint64_t nlookup, to;           /* to: the name's inode that took over */
	int has_attr;                   /* else its GETATTR says ESTALE */
	struct ns_attr attr;
};

/* Other nodes' objects that they said are gone, or that an rm here took,
 * lately.  A listing or a lookup answered before that (it came on another
 * connection) may arrive after it, and must not bring the object back
 * (ns_remote_answer).  Those of the last NS_GONE_KEEP_NS, oldest first, at
 * most NS_GONE_MAX (about 10 MiB; an rm of 100k names takes 3 s here, and
 * a fixed ring of 1024 forgot all but its last 35 ms), found by oid in
 * ns->gone_byoid. */
#define NS_GONE_KEEP_NS (30ull * 1000000000u)
#define NS_GONE_MAX (1u << 18)
struct ns_gone { struct hlink byoid; struct ns_gone *next; uint64_t at; int owner; };

/* A key whose object was lost with its owner answers opens with EIO for
 * this long (SPEC §4.7), not with a wait that ends in ENOENT. */
#define NS_LOST_KEEP_NS (60ull * 1000000000u)

struct stream;

struct ns_handle {
	struct object *obj;
	struct stream *stream;          /* a streamed read's window (ns_stream.c) */
	int write, flushed, counted, killed, served, source, placed, sole;
	int append;                     /* writes go at the end (ns_handle_flags) */
	int mappable;                   /* opened O_RDWR (ns_handle_mappable) */
	int mapped;                     /* its file is mapped (ns_handle_mapped) */
	int unseen;                     /* not in its object's opens (handle_unseen) */
	int windowed;                   /* holds its stream's turn between two
					 * OMNIFS_IOC_WINDOW (ns_direct_window) */
	unsigned gen;
	struct rangeset seen;
	uint64_t opened_ns, done;
	struct ns_handle *next, *prev;
};

struct ns {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	int running, stopping;
	struct pool *pool;
	uint64_t pool_size;
	struct timed lost_sweep;        /* forgets lost keys (T_SWEEP) */
	uint8_t *base;                  /* NULL: the pool is device memory (pool_cpu()) */
	struct stats *st;
	struct ns_settings set;
	struct ns_rule *rules;
	struct htab byino, byname, waiters, bybase, byreq;
	struct htab ghost_byino;
	struct ghost ghosts;            /* list head */
	struct ended ended;             /* requests cleaned up lately (ns_cleanup) */
	uint64_t next_ino, next_wid, nobjects;
	struct timerq tq;
	struct node *root;
	struct ns_handle handles;       /* list head */
	uint32_t uid, gid;
	uint64_t start_ns;
	pthread_t hasher;
	int hasher_running;
	pid_t hasher_tid;               /* 0 until it runs; its CPUs: hasher_place() */
	int hasher_narrowed;
	cpu_set_t hasher_cpus;
	pthread_cond_t hcond, hdone;    /* work queued; a hash step finished */
	struct object *hq_head, *hq_tail;
	/* The cluster's side. */
	struct htab byoid;
	uint64_t next_oid;              /* from the start time: unique across restarts */
	struct ns_gone *gone_head, *gone_tail;
	size_t ngone;
	/* Each owner's generation (ns_owner_renew): a record it announced
	 * again on its current connection has its owner's (object.gen); and
	 * when that connection was made, which answers since then outlive. */
	struct ns_owner { uint32_t gen; uint64_t since_ns; } *owners;
	size_t nowners;
	struct htab gone_byoid;
	pthread_cond_t fcond;           /* a fetch moved on */
	struct object *lru_head, *lru_tail;     /* least recently opened first */
	uint64_t outside;               /* streams' windows beside a full pool (ns_stream.c) */
	uint64_t nowindow_said_ns;      /* when the log last said a read had none */
	int window_waiting;             /* opens may wait for room for a window ... */
	int window_retry;               /* ... and room came back: window_retry() */
	_Atomic uint64_t next_lease;    /* ns_lease_id() */
	pthread_mutex_t ev_lock;        /* one thread delivers events at a time */
	struct ns_event *ev_head, *ev_tail;
};

/* Something the cluster must hear, queued under the lock and delivered
 * after it is dropped, in order. */
enum { EV_PUBLISHED, EV_GONE, EV_CONSUMED, EV_REASK };
struct ns_event {
	struct ns_event *next;
	int type;
	struct object *o;               /* EV_PUBLISHED: a reference for data */
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1], key[NAME_KEY_MAX + 1];
	struct ns_objinfo info;
	struct ns_cover cover;          /* EV_CONSUMED */
	unsigned wait_ms;               /* EV_REASK: how long readers here still wait */
	uint8_t copy[];                 /* info.data's bytes, from a pool the CPU cannot address */
};

/* ---------------------------------------------------------------- ns.c */

/* The tree. */
struct node *node_by_ino(struct ns *ns, uint64_t ino);
struct node *node_child(struct ns *ns, struct node *p, const char *name);
/* fn for each key under edge that is a shard of the view base
 * (<base>.rank<i>of<S>), by the base index: the edge is not walked. */
void node_foreach_shard(struct ns *ns, struct node *edge, const char *base,
			void (*fn)(struct node *k, void *arg), void *arg);
/* Keys that are views of each other (<base>, <base>.rank<i>of<N>) share
 * base_hash (their edge's index, ns->bybase) and same_base. */
uint64_t base_hash(uint64_t parent, const char *name);
int same_base(const char *a, const char *b);
/* A ring of the keys whose stem is that of name (NULL if none). */
struct node *node_stem_ring(struct ns *ns, const char *name);
int node_resolve(struct ns *ns, struct node *p, const char *name,
		 int mode, struct node **out);
void node_maybe_free(struct ns *ns, struct node *n);
/* Forget lost keys at when (monotonic ns), unless a sweep is due already. */
void ns_lost_sweep_at(struct ns *ns, uint64_t when);
void npub_add(struct node *n, int64_t d);
struct ns_policy policy_of(struct ns *ns, const struct node *edge);

/* Objects and their extents in the pool. */
struct object *obj_new(struct ns *ns, struct node *key, uint32_t uid, uint32_t gid);
void obj_put(struct ns *ns, struct object *o);
void obj_unlink(struct ns *ns, struct object *o, enum stat_id why);
void obj_detach(struct ns *ns, struct object *o, enum stat_id why);  /* keeps o's key node */
/* o's from/to/key for a log line, its bytes below '!' escaped (a key may
 * hold a newline: the line must stay one); o must be on its key. */
const char *obj_path_esc(const struct object *o, char out[static NAME_ESC_MAX]);
void obj_remove(struct ns *ns, struct object *o);       /* the kernel's rm */
/* o, never published, goes: its writer failed, was killed or got no
 * handle, or another node's object took its name. */
void obj_abort(struct ns *ns, struct object *o);
int obj_reserve(struct ns *ns, struct object *o, uint64_t end);
/* 0 if h may still add bytes to its object; -EBADF (a reader's), -ENOENT
 * (removed meanwhile) or -EACCES (published).  Called locked. */
int handle_writable(const struct ns_handle *h);
void obj_trim(struct ns *ns, struct object *o);
/* [off, off+len) of the object as pool offsets (spans), at most max of
 * them; or, in a pool the CPU addresses, as iovecs.  The bytes covered. */
size_t obj_spans(const struct object *o, uint64_t off, size_t len, struct ns_span *sp, int *n,
		 int max);
size_t obj_iov(struct ns *ns, const struct object *o, uint64_t off,
	       size_t len, struct iovec *iov, int *niov, int maxiov);
/* Copies [off, off+len) of o out of or into the pool, any kind: under
 * ns's lock, or without it once o's extents no longer move (published, or
 * a fetch's).  0 or -EIO. */
int obj_copy_out(struct ns *ns, const struct object *o, uint64_t off, void *dst, size_t len);
int obj_copy_in(struct ns *ns, const struct object *o, uint64_t off, const void *src, size_t len);
/* Host memory a remote object's bytes land in on their way to a pool the
 * CPU cannot address (ns_hooks.buf_alloc).  land_alloc: NULL when out of
 * memory. */
void *land_alloc(struct ns *ns, size_t size);
void land_free(struct ns *ns, void *buf);
/* A pool the CPU cannot address is read through a buffer of the calling
 * thread's (pool_bounce), NS_BOUNCE bytes, valid until its next call. */
#define NS_BOUNCE POOL_BOUNCE
#define ns_bounce(ns) ((uint8_t *)pool_bounce((ns)->pool))
/* [off, off+len) (at most NS_BOUNCE) of o copied into that buffer, as
 * *iov.  0 or -EIO. */
int obj_bounce(struct ns *ns, const struct object *o, uint64_t off, size_t len,
	       struct iovec *iov);
struct ns_handle *handle_new(struct ns *ns, struct object *o, int write);
/* No fstat() can come through h (a peer's pull, a view's source, a reader
 * whose complete read was counted): its object's opens stop counting it. */
void handle_unseen(struct ns_handle *h);
/* h reads for a view, not for a file of the kernel's. */
void handle_source(struct ns_handle *h);
/* Reader h has had [off, end): a complete read counts at once. */
void read_seen(struct ns *ns, struct ns_handle *h, uint64_t off, uint64_t end);
/* Frees h (no reads counted, no writer's publish); a streamed reader's
 * owner and lease, for the owner to be told the lease is over. */
void handle_drop(struct ns *ns, struct ns_handle *h, int *owner, uint64_t *lease);

/* o left its key while opens wait there, or (refused) a peer's object of
 * its name was refused for it: the peers are asked for theirs (wl). */
void waiters_reask(struct ns *ns, struct object *o, int refused, struct ns_wakes *wl);
/* News for the peers (hooks): an event about o, not queued yet (ev_new,
 * NULL if no hook wants it or out of memory); queued, to be delivered in
 * order once the lock is dropped (ev_push, ev_queue: both of NULL is
 * NULL); one never queued, freed (ev_free). */
struct ns_event *ev_new(struct ns *ns, int type, struct object *o);
struct ns_event *ev_push(struct ns *ns, struct ns_event *e);
struct ns_event *ev_queue(struct ns *ns, int type, struct object *o);
void ev_free(struct ns *ns, struct ns_event *e);
/* Drops the lock and delivers queued events. */
void ns_unlock(struct ns *ns);

/* ----------------------------------------------------------- ns_wait.c */

/* Queues open w on key n until it is published or (fetch) until a remote
 * object's first bytes are here: -EINPROGRESS, or -ENOENT where it may
 * not wait, -ENOMEM, -EINTR. */
int waiter_queue(struct ns *ns, struct node *n, struct ns_waiter *w, int fetch, int flags);
/* Takes w out of its key's queue, the id table and the deadline heap. */
void waiter_dequeue(struct ns *ns, struct ns_waiter *w);
/* A reader's open of key's streamed object: its window's first pull
 * answers it, or it waits for room until *deadline (NULL: a first wait,
 * the edge's wait_ms).  -EINPROGRESS or -errno. */
int window_open(struct ns *ns, struct node *key, struct ns_waiter *w, int flags,
		const uint64_t *deadline, struct ns_wakes *wl);
/* Waking waiters: queued under the lock, answered by ns_wake() after it
 * is dropped. */
void wake_push(struct ns_wakes *wl, struct ns_waiter *w, int err, struct ns_handle *h);
void wake_key(struct ns *ns, struct node *key, int err, struct ns_wakes *wl);
void waiters_peer_lost(struct ns *ns);
void wake_readers(struct ns *ns, struct node *key, struct ns_wakes *wl);
void wake_sources(struct ns *ns, struct node *key, struct ns_wakes *wl);
void wake_views(struct ns *ns, struct node *k, struct ns_wakes *wl);
/* The deadline thread (ns_start starts it): ends waits at their deadline,
 * retries opens waiting for a window, expires objects, sweeps lost keys. */
void *deadline_thread(void *arg);

/* ----------------------------------------------------------- ns_hash.c */

void obj_set_size(struct object *o, uint64_t size);
void hash_note_write(struct ns *ns, struct object *o, uint64_t off, uint64_t end, int away);
int hash_pass(struct ns *ns, struct object *o, uint64_t off, const void *buf, size_t len);
void hasher_dequeue(struct ns *ns, struct object *o);
void *hasher_thread(void *arg);         /* the thread; takes the lock itself */
int obj_hash(struct ns *ns, struct object *o, uint64_t *h);     /* unlocked */

/* --------------------------------------------------------- ns_remote.c */

/* How long an open of a known remote object waits for its fetch on an
 * edge whose opens do not wait (wait_ms 0), and how often a waiter whose
 * time ran out while its published object's bytes still come looks again
 * (ns_wait.c, waiter_fetching). */
#define FETCH_WAIT_MS 10000

struct fetch_start {
	struct object *o;
	int owner, n;
	uint64_t oid, size;
	struct iovec *iov;
};

int fetch_begin(struct ns *ns, struct object *o, struct fetch_start *fs);
void fetch_go(struct ns *ns, struct fetch_start *fs);          /* unlocked */
int fetch_wait(struct ns *ns, struct ns_handle *h, uint64_t off, size_t len);
int unlink_remote(struct ns *ns, struct object *o);
void gone_fini(struct ns *ns);
int cover_add(struct ns *ns, struct object *o, const struct ns_cover *c);

/* A replica (another node's object with bytes in our pool) is a copy: one
 * that no handle, view or fetch uses can be dropped when the pool is
 * short, and is fetched again by its next open. */
void replica_touch(struct ns *ns, struct object *o);     /* now most recent */
void replica_forget(struct ns *ns, struct object *o);    /* no longer one */
int replica_evict(struct ns *ns, const struct object *keep, uint64_t need);

/* --------------------------------------------------------- ns_stream.c */

/* A reader's handle on an object from another node larger than
 * NS_STREAM_MIN, or whose copy did not fit this node's pool (obj_streamed),
 * reads it through a window (see there). */
int obj_streamed(const struct object *o);
int stream_wanted(const struct ns_handle *h);
/* A reader's handle on streamed o and its window, for the open w, which
 * the window's first pull answers: -EINPROGRESS (ns_wake(wl) pumps it),
 * or -errno (-ENOMEM; -ENOSPC, no room for a window: window_open, in
 * ns_wait.c, waits for some). */
int stream_open(struct ns *ns, struct object *o, struct ns_waiter *w, struct ns_wakes *wl);
/* A reader's open of o is refused ENOSPC: counted, and said in the log. */
void stream_refused(struct ns *ns, const struct object *o);
/* Pool room or a window came back: opens waiting for a window try again
 * (ns_wait.c). */
void window_room(struct ns *ns);
void stream_pump_all(struct ns *ns, struct stream *list);       /* unlocked: ns_wake's */
/* Waits for its turn and for [off, off+len) (len > 0, clipped to a slot)
 * and points iov (2 entries) at it: the byte count, or -EIO.  The bytes
 * stay until stream_done() ends the turn. */
ssize_t stream_read(struct ns *ns, struct stream *s, uint64_t off, size_t len,
		    struct iovec *iov, int *niov);
void stream_done(struct ns *ns, struct stream *s);
/* Whether the window is in the pool, where a process can copy from. */
int stream_in_pool(const struct ns *ns, const struct stream *s);
/* As stream_read, for a process that copies out of the pool itself (a
 * window in the pool only): once want bytes from off (at least 1, fewer
 * where their slot ends) have landed, their pool offset and how many have
 * landed there in a row; the turn stays until stream_done(). */
ssize_t stream_window(struct ns *ns, struct stream *s, uint64_t off, uint64_t want,
		      uint64_t *poff);
/* Under the lock: h's caller is done with the window's range it was last
 * shown (ns_direct_window, in ns_direct.c), and h's turn ends. */
void window_end(struct ns *ns, struct ns_handle *h);
int stream_reading(const struct stream *s);     /* a read's turn is on */
/* The handle lets go; the owner is told (unlocked) that lease is over. */
void stream_close(struct stream *s, int *owner, uint64_t *lease);

#endif
