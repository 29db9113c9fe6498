/* ns.c - the namespace, objects, waiting opens and deadlines.
 *
 * One mutex guards the tree, the objects' metadata and the deadline heap.
 * It is never held while bytes move: writes reserve their extents under it
 * and copy after dropping it, reads of published (immutable) objects take
 * only the extent pointers, and publish hashes with the lock dropped.
 */
#define _GNU_SOURCE
#include "ns.h"
#include "../transport/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>      /* libxxhash's AVX2/AVX-512 paths, chosen at run time */
#endif

#include "rangeset.h"

enum { T_WAITER = 1, T_OBJECT = 2 };
enum obj_state { OS_WRITING, OS_PUBLISHING, OS_PUBLISHED, OS_DEAD };
static const char *const state_name[] = { "writing", "publishing", "published", "dead" };

#define GROW_MIN (64u << 10)            /* first reservation of a writer */
#define GROW_MAX (256ull << 20)         /* largest single reservation step */

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
	int error;
	uint32_t uid, gid;
	/* The hash follows a sequential writer (see "hashing" below):
	 * [0, front) is written, [0, hashed) hashed into hs, and the hasher
	 * may be working on [hashed, hash_to). */
	XXH3_state_t *hs;
	uint64_t front, hashed, hash_to;
	int hash_dirty, hashing, queued;
	struct object *hq_next;
};

struct timed { struct timer t; int type; };

struct node {
	struct hlink byino, byname;
	uint64_t ino, nlookup, npub;
	enum ns_kind kind;
	struct node *parent, *child, *next, *prev;
	unsigned nchild;
	struct object *obj;
	struct ns_waiter *waiters;
	char *name;
};

struct ns_handle {
	struct object *obj;
	int write, flushed, counted, killed;
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
	uint8_t *base;
	struct stats *st;
	struct ns_settings set;
	struct ns_rule *rules;
	struct htab byino, byname, waiters;
	uint64_t next_ino, next_wid, nobjects;
	struct timerq tq;
	struct node *root;
	struct ns_handle handles;       /* list head */
	uint32_t uid, gid;
	uint64_t start_ns;
	pthread_t hasher;
	int hasher_running;
	pthread_cond_t hcond, hdone;    /* work queued; a hash step finished */
	struct object *hq_head, *hq_tail;
};

static const char *const vfile_names[] = { "health", "stats", "metrics", "transfers", "config" };

/* Woken waiters are answered after the lock is dropped; they chain through
 * their own links, so waking never allocates. */
struct wakelist { struct ns_waiter *head; };

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ nodes */

static uint64_t name_hash(uint64_t parent, const char *name)
{
	return XXH3_64bits_withSeed(name, strlen(name), parent);
}

static struct node *node_by_ino(struct ns *ns, uint64_t ino)
{
	struct hlink *l = htab_find(&ns->byino, ino);
	return l ? (struct node *)((char *)l - offsetof(struct node, byino)) : NULL;
}

static struct node *node_child(struct ns *ns, struct node *p, const char *name)
{
	struct hlink *l = htab_find(&ns->byname, name_hash(p->ino, name));

	for (; l; l = htab_next(l)) {
		struct node *n = (struct node *)((char *)l - offsetof(struct node, byname));
		if (n->parent == p && strcmp(n->name, name) == 0)
			return n;
	}
	return NULL;
}

static struct node *node_new(struct ns *ns, struct node *p, const char *name,
			     enum ns_kind kind)
{
	struct node *n = calloc(1, sizeof(*n));

	if (!n || !(n->name = strdup(name))) {
		free(n);
		return NULL;
	}
	n->kind = kind;
	n->ino = kind == NK_ROOT ? NS_ROOT_INO : ++ns->next_ino;
	htab_add(&ns->byino, &n->byino, n->ino);
	if (p) {
		n->parent = p;
		htab_add(&ns->byname, &n->byname, name_hash(p->ino, name));
		n->next = p->child;
		if (p->child)
			p->child->prev = n;
		p->child = n;
		p->nchild++;
	}
	return n;
}

/* Frees implicit nodes nobody needs any more, walking up the tree. */
static void node_maybe_free(struct ns *ns, struct node *n)
{
	while (n && (n->kind == NK_KEY || n->kind == NK_EDGE || n->kind == NK_STAGE) &&
	       !n->nlookup && !n->nchild && !n->obj && !n->waiters) {
		struct node *p = n->parent;
		htab_del(&ns->byino, &n->byino);
		htab_del(&ns->byname, &n->byname);
		if (n->prev)
			n->prev->next = n->next;
		else
			p->child = n->next;
		if (n->next)
			n->next->prev = n->prev;
		p->nchild--;
		free(n->name);
		free(n);
		n = p;
	}
}

static void npub_add(struct node *n, int64_t d)
{
	for (; n; n = n->parent)
		n->npub += (uint64_t)d;
}

/* The edge policy for a key node: rule fields override the defaults. */
static struct ns_policy policy_of(struct ns *ns, const struct node *edge)
{
	struct ns_policy p = ns->set.dflt;

	for (size_t i = 0; i < ns->set.nrules; i++) {
		const struct ns_rule *r = &ns->rules[i];
		if (strcmp(r->from, edge->parent->name) || strcmp(r->to, edge->name))
			continue;
		if (r->p.readers >= 0) p.readers = r->p.readers;
		if (r->p.wait_ms >= 0) p.wait_ms = r->p.wait_ms;
		if (r->p.ttl_s >= 0) p.ttl_s = r->p.ttl_s;
	}
	return p;
}

static void node_attr(struct ns *ns, const struct node *n, struct ns_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->ino = n->ino;
	a->kind = n->kind;
	a->uid = ns->uid;
	a->gid = ns->gid;
	a->mtime_ns = ns->start_ns;
	switch (n->kind) {
	case NK_ROOT: case NK_CTL: case NK_STAGE: case NK_EDGE:
		a->mode = S_IFDIR | 0755;
		break;
	case NK_VFILE:
		a->mode = S_IFREG | 0444;
		break;
	case NK_KEY:
		a->mode = S_IFREG | 0444;
		if (!n->obj)
			break;
		a->uid = n->obj->uid;
		a->gid = n->obj->gid;
		if (n->obj->state == OS_PUBLISHED) {
			a->size = n->obj->size;
			a->mtime_ns = n->obj->published_ns;
		} else {        /* no reader sees any of it before publish */
			a->mode = S_IFREG | 0644;
		}
		break;
	}
}

/* ---------------------------------------------------------------- objects */

static void obj_put(struct ns *ns, struct object *o)
{
	if (--o->refs)
		return;
	for (unsigned i = 0; i < o->next; i++)
		pool_free(ns->pool, o->ext[i].off, o->ext[i].len);
	if (o->hs)
		XXH3_freeState(o->hs);
	free(o->ext);
	free(o);
}

static struct object *obj_new(struct ns *ns, struct node *key, uint32_t uid, uint32_t gid)
{
	struct object *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->type = T_OBJECT;
	o->ttl.idx = TIMER_IDLE;
	o->state = OS_WRITING;
	o->readers = -1;
	o->ttl_s = -1;
	o->created_ns = now_ns();
	o->uid = uid;
	o->gid = gid;
	o->refs = 1;            /* the key's link */
	o->node = key;
	key->obj = o;
	ns->nobjects++;
	return o;
}

static void hasher_dequeue(struct ns *ns, struct object *o);

/* Takes the object off its key: consumed, removed, expired or aborted.
 * Handles that have it open keep its bytes until they close. */
static void obj_unlink(struct ns *ns, struct object *o, enum stat_id why)
{
	struct node *key = o->node;

	if (!key)
		return;
	hasher_dequeue(ns, o);
	if (o->state == OS_PUBLISHED)
		npub_add(key, -1);
	if (o->state != OS_PUBLISHED)
		o->state = OS_DEAD;
	timerq_del(&ns->tq, &o->ttl);
	key->obj = NULL;
	o->node = NULL;
	ns->nobjects--;
	stat_add(ns->st, why, 1);
	node_maybe_free(ns, key);
	obj_put(ns, o);
}

static int ext_push(struct object *o, uint64_t off, uint64_t len)
{
	if (o->next == o->extcap) {
		unsigned cap = o->extcap ? o->extcap * 2 : 4;
		struct ext *e = realloc(o->ext, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		o->ext = e;
		o->extcap = cap;
	}
	o->ext[o->next++] = (struct ext){ off, len, o->cap };
	o->cap += len;
	return 0;
}

/* Makes the object's extents cover [0, end).  Each step asks for about as
 * much again as the object holds (up to GROW_MAX), first by growing the last
 * extent in place, so a sequential writer ends with one or a few extents. */
static int obj_reserve(struct ns *ns, struct object *o, uint64_t end)
{
	while (o->cap < end) {
		uint64_t need = end - o->cap, got, off;
		uint64_t want = o->cap < GROW_MAX ? o->cap : GROW_MAX;
		if (want < need)
			want = need;
		if (want < GROW_MIN)
			want = GROW_MIN;
		if (o->next) {
			struct ext *last = &o->ext[o->next - 1];
			if (!pool_grow(ns->pool, last->off, last->len, POOL_GRAIN, want, &got)) {
				last->len += got;
				o->cap += got;
				continue;
			}
		}
		if (pool_alloc(ns->pool, POOL_GRAIN, want, &off, &got))
			return -ENOSPC;
		if (ext_push(o, off, got)) {
			pool_free(ns->pool, off, got);
			return -ENOMEM;
		}
	}
	return 0;
}

/* Gives back the reserve beyond the object's size: it is immutable now. */
static void obj_trim(struct ns *ns, struct object *o)
{
	uint64_t keep = (o->size + POOL_GRAIN - 1) / POOL_GRAIN * POOL_GRAIN;

	while (o->next && o->ext[o->next - 1].lstart >= keep) {
		struct ext *e = &o->ext[--o->next];
		pool_free(ns->pool, e->off, e->len);
		o->cap -= e->len;
	}
	if (o->next) {
		struct ext *e = &o->ext[o->next - 1];
		uint64_t need = keep - e->lstart;
		if (e->len > need) {
			pool_free(ns->pool, e->off + need, e->len - need);
			o->cap -= e->len - need;
			e->len = need;
		}
	}
}

/* The extent holding logical offset off. */
static unsigned ext_find(const struct object *o, uint64_t off)
{
	unsigned lo = 0, hi = o->next;

	while (hi - lo > 1) {
		unsigned mid = (lo + hi) / 2;
		if (o->ext[mid].lstart <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Points iov at [off, off+len) of the object, at most maxiov pieces.
 * Returns the bytes covered. */
static size_t obj_iov(struct ns *ns, const struct object *o, uint64_t off,
		      size_t len, struct iovec *iov, int *niov, int maxiov)
{
	size_t done = 0;
	int n = 0;

	for (unsigned i = ext_find(o, off); i < o->next && done < len && n < maxiov; i++) {
		const struct ext *e = &o->ext[i];
		uint64_t in = off + done - e->lstart;
		uint64_t take = e->len - in;
		if (take > len - done)
			take = len - done;
		iov[n].iov_base = ns->base + e->off + in;
		iov[n].iov_len = take;
		n++;
		done += take;
	}
	*niov = n;
	return done;
}

static void obj_zero(struct ns *ns, const struct object *o, uint64_t off, uint64_t len)
{
	while (len) {
		struct iovec iov[16];
		int n;
		size_t got = obj_iov(ns, o, off, len, iov, &n, 16);
		for (int i = 0; i < n; i++)
			memset(iov[i].iov_base, 0, iov[i].iov_len);
		off += got;
		len -= got;
	}
}

/* Feeds [from, to) of the object into st.  Called unlocked.  Until every
 * writer is done (final is 0) the extent array may grow under a writer, so
 * pieces of it are taken under the lock; the bytes themselves stay put. */
static void hash_range(struct ns *ns, struct object *o, XXH3_state_t *st,
		       uint64_t from, uint64_t to, int final)
{
	while (from < to) {
		struct iovec iov[16];
		int n;
		if (!final)
			pthread_mutex_lock(&ns->lock);
		from += obj_iov(ns, o, from, to - from, iov, &n, 16);
		if (!final)
			pthread_mutex_unlock(&ns->lock);
		for (int i = 0; i < n; i++)
			XXH3_64bits_update(st, iov[i].iov_base, iov[i].iov_len);
	}
}

/* The object's XXH3-64 at publish: the hasher's prefix (if still valid)
 * plus the rest.  Called unlocked; every writer has closed. */
static uint64_t obj_hash(struct ns *ns, struct object *o)
{
	XXH3_state_t local, *st = &local;
	uint64_t from = 0, h;

	if (o->hs && !o->hash_dirty) {  /* a truncation below it made it dirty */
		st = o->hs;
		from = o->hashed;
	} else {
		XXH3_64bits_reset(&local);
	}
	hash_range(ns, o, st, from, o->size, 1);
	h = XXH3_64bits_digest(st);
	if (o->hs) {
		XXH3_freeState(o->hs);
		o->hs = NULL;
	}
	return h;
}

/* ---------------------------------------------------------------- hashing */

/* A truncation: bytes the hash may cover can change. */
static void obj_set_size(struct object *o, uint64_t size)
{
	if (size < (o->hashing ? o->hash_to : o->hashed))
		o->hash_dirty = 1;
	if (o->front > size)
		o->front = size;
	o->size = size;
}

/* Hashing a large object at publish would cost a pass over its bytes after
 * the last write.  A sequential writer's completed prefix is hashed instead
 * by this thread while the writer goes on; the FUSE thread copying the
 * bytes in keeps its core busy, this one uses another. */
#define HASH_STEP (4u << 20)

static void hasher_queue(struct ns *ns, struct object *o)
{
	if (o->queued || o->hashing || o->hash_dirty || o->front - o->hashed < HASH_STEP)
		return;
	o->queued = 1;
	o->refs++;
	o->hq_next = NULL;
	if (ns->hq_tail)
		ns->hq_tail->hq_next = o;
	else
		ns->hq_head = o;
	ns->hq_tail = o;
	pthread_cond_signal(&ns->hcond);
}

/* An object that leaves its key gives up its place in the queue, so that
 * its space comes back as soon as its handles close. */
static void hasher_dequeue(struct ns *ns, struct object *o)
{
	struct object **pp = &ns->hq_head, *prev = NULL;

	if (!o->queued)
		return;
	for (; *pp && *pp != o; pp = &(*pp)->hq_next)
		prev = *pp;
	if (!*pp)
		return;
	*pp = o->hq_next;
	if (ns->hq_tail == o)
		ns->hq_tail = prev;
	o->queued = 0;
	o->refs--;              /* the queue's; the key's link still holds it */
}

/* One step: hash [hashed, front) of o with the lock dropped. */
static void hasher_step(struct ns *ns, struct object *o)
{
	if (o->state != OS_WRITING || o->hash_dirty || o->front <= o->hashed)
		return;
	if (!o->hs) {
		if (!(o->hs = XXH3_createState()))
			return;
		XXH3_64bits_reset(o->hs);
	}
	o->hashing = 1;
	o->hash_to = o->front;
	uint64_t from = o->hashed, to = o->hash_to;
	pthread_mutex_unlock(&ns->lock);
	hash_range(ns, o, o->hs, from, to, 0);
	pthread_mutex_lock(&ns->lock);
	o->hashing = 0;
	o->hashed = to;
	pthread_cond_broadcast(&ns->hdone);
	hasher_queue(ns, o);
}

static void *hasher_thread(void *arg)
{
	struct ns *ns = arg;

	pthread_mutex_lock(&ns->lock);
	while (!ns->stopping) {
		struct object *o = ns->hq_head;
		if (!o) {
			pthread_cond_wait(&ns->hcond, &ns->lock);
			continue;
		}
		ns->hq_head = o->hq_next;
		if (!ns->hq_head)
			ns->hq_tail = NULL;
		o->queued = 0;
		hasher_step(ns, o);
		obj_put(ns, o);
	}
	pthread_mutex_unlock(&ns->lock);
	return NULL;
}

/* A write of [off, end) finished copying: extend the written prefix, or
 * note that bytes the hash already covers have changed. */
static void hash_note_write(struct ns *ns, struct object *o, uint64_t off, uint64_t end)
{
	if (off < (o->hashing ? o->hash_to : o->hashed))
		o->hash_dirty = 1;
	else if (off <= o->front && end > o->front)
		o->front = end;
	if (ns->hasher_running)
		hasher_queue(ns, o);
}

/* ---------------------------------------------------------------- waiters */

static void wake_push(struct wakelist *wl, struct ns_waiter *w, int err,
		      struct ns_handle *h)
{
	w->wake_err = err;
	w->wake_h = h;
	w->next = wl->head;
	wl->head = w;
}

static void wake_all(struct ns *ns, struct wakelist *wl)
{
	while (wl->head) {
		struct ns_waiter *w = wl->head;
		wl->head = w->next;
		w->next = NULL;
		ns->set.wake(w, w->wake_err, w->wake_h);
	}
}

/* Takes w out of its key's queue, the id table and the heap. */
static void waiter_dequeue(struct ns *ns, struct ns_waiter *w)
{
	struct node *key = node_by_ino(ns, w->ino);

	if (w->prev)
		w->prev->next = w->next;
	else if (key)
		key->waiters = w->next;
	if (w->next)
		w->next->prev = w->prev;
	w->next = w->prev = NULL;
	htab_del(&ns->waiters, &w->byid);
	timerq_del(&ns->tq, &w->timer);
	stat_sub(ns->st, ST_WAITERS, 1);
	if (key)
		node_maybe_free(ns, key);
}

static struct ns_handle *handle_new(struct ns *ns, struct object *o, int write)
{
	struct ns_handle *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->obj = o;
	h->write = write;
	h->opened_ns = now_ns();
	rangeset_init(&h->seen);
	o->refs++;
	if (write)
		o->writers++;
	h->next = ns->handles.next;
	h->prev = &ns->handles;
	ns->handles.next->prev = h;
	ns->handles.next = h;
	return h;
}

/* Answers the opens waiting on a key that was just published. */
static void wake_readers(struct ns *ns, struct node *key, struct wakelist *wl)
{
	while (key->waiters) {
		struct ns_waiter *w = key->waiters;
		struct ns_handle *h = handle_new(ns, key->obj, 0);
		key->waiters = w->next;         /* the key stays: it has an object */
		if (key->waiters)
			key->waiters->prev = NULL;
		htab_del(&ns->waiters, &w->byid);
		timerq_del(&ns->tq, &w->timer);
		stat_sub(ns->st, ST_WAITERS, 1);
		if (h)
			stat_add(ns->st, ST_GETS, 1);
		wake_push(wl, w, h ? 0 : -ENOMEM, h);
	}
}

/* ---------------------------------------------------------------- publish */

static void obj_abort(struct ns *ns, struct object *o)
{
	obj_unlink(ns, o, ST_ABORTED);
	o->state = OS_DEAD;
}

/* Publishes o: trims its reserve, hashes it with the lock dropped (the
 * bytes are final: every writer has closed), then makes it visible and
 * answers its waiters.  Called and returns locked. */
static void obj_publish(struct ns *ns, struct object *o, struct wakelist *wl)
{
	o->state = OS_PUBLISHING;       /* the hasher starts no new step */
	while (o->hashing)
		pthread_cond_wait(&ns->hdone, &ns->lock);
	obj_trim(ns, o);
	o->refs++;
	pthread_mutex_unlock(&ns->lock);
	uint64_t h = obj_hash(ns, o);
	pthread_mutex_lock(&ns->lock);
	if (o->state == OS_PUBLISHING && o->node) {     /* not removed meanwhile */
		struct ns_policy p = policy_of(ns, o->node->parent);
		o->xxh3 = h;
		o->state = OS_PUBLISHED;
		o->published_ns = wall_ns();
		if (o->readers < 0)
			o->readers = p.readers;
		o->ttl_s = p.ttl_s;
		if (p.ttl_s > 0 && !timerq_add(&ns->tq, &o->ttl,
					       now_ns() + (uint64_t)p.ttl_s * 1000000000u) &&
		    timerq_peek(&ns->tq) == &o->ttl)
			pthread_cond_signal(&ns->cond);
		npub_add(o->node, 1);
		stat_add(ns->st, ST_PUBLISHED, 1);
		stats_observe(ns->st, H_PUBLISH, now_ns() - o->created_ns);
		wake_readers(ns, o->node, wl);
	}
	obj_put(ns, o);
}

/* A reader's handle closes: a complete read counts towards consumption. */
static void count_read(struct ns *ns, struct ns_handle *h)
{
	struct object *o = h->obj;

	if (h->write || h->counted || o->state != OS_PUBLISHED ||
	    !rangeset_covers(&h->seen, 0, o->size))
		return;
	h->counted = 1;
	o->reads++;
	stats_observe(ns->st, H_READ, now_ns() - h->opened_ns);
	if (o->node && o->readers > 0 && o->reads >= (uint64_t)o->readers)
		obj_unlink(ns, o, ST_CONSUMED);
}

/* ---------------------------------------------------------------- deadlines */

static void expire_due(struct ns *ns, uint64_t now, struct wakelist *wl)
{
	struct timer *t;

	while ((t = timerq_peek(&ns->tq)) && t->when <= now) {
		struct timed *td = (struct timed *)t;
		if (td->type == T_WAITER) {
			struct ns_waiter *w = (struct ns_waiter *)t;
			waiter_dequeue(ns, w);
			stat_add(ns->st, ST_WAIT_TIMEOUTS, 1);
			stat_add(ns->st, ST_ERRORS, 1);
			wake_push(wl, w, -ENOENT, NULL);
		} else {
			timerq_del(&ns->tq, t);
			obj_unlink(ns, (struct object *)t, ST_EXPIRED);
		}
	}
}

static void *deadline_thread(void *arg)
{
	struct ns *ns = arg;

	pthread_mutex_lock(&ns->lock);
	while (!ns->stopping) {
		struct wakelist wl = { 0 };
		struct timer *t = timerq_peek(&ns->tq);
		uint64_t now = now_ns();
		if (!t) {
			pthread_cond_wait(&ns->cond, &ns->lock);
			continue;
		}
		if (t->when > now) {
			struct timespec ts = { (time_t)(t->when / 1000000000u),
					       (long)(t->when % 1000000000u) };
			pthread_cond_timedwait(&ns->cond, &ns->lock, &ts);
			continue;
		}
		expire_due(ns, now, &wl);
		pthread_mutex_unlock(&ns->lock);
		wake_all(ns, &wl);
		pthread_mutex_lock(&ns->lock);
	}
	pthread_mutex_unlock(&ns->lock);
	return NULL;
}

/* ---------------------------------------------------------------- lifecycle */

int ns_create(struct ns **out, struct pool *pool, struct stats *st,
	      const struct ns_settings *set)
{
	struct ns *ns = calloc(1, sizeof(*ns));
	pthread_condattr_t ca;

	if (!ns)
		return -ENOMEM;
	ns->pool = pool;
	ns->base = pool_base(pool);
	ns->st = st;
	ns->set = *set;
	ns->uid = getuid();
	ns->gid = getgid();
	ns->start_ns = wall_ns();
	ns->handles.next = ns->handles.prev = &ns->handles;
	ns->next_ino = NS_ROOT_INO;     /* the root takes 1; the rest count on */
	timerq_init(&ns->tq);
	if (set->nrules) {
		ns->rules = malloc(set->nrules * sizeof(*ns->rules));
		if (!ns->rules)
			goto free_ns;
		memcpy(ns->rules, set->rules, set->nrules * sizeof(*ns->rules));
	}
	if (htab_init(&ns->byino, 1024) || htab_init(&ns->byname, 1024) ||
	    htab_init(&ns->waiters, 1024))
		goto free_tables;
	pthread_mutex_init(&ns->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ns->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&ns->hcond, NULL);
	pthread_cond_init(&ns->hdone, NULL);
	ns->root = node_new(ns, NULL, "", NK_ROOT);
	struct node *ctl = ns->root ? node_new(ns, ns->root, ".omni", NK_CTL) : NULL;
	for (size_t i = 0; ctl && i < sizeof(vfile_names) / sizeof(*vfile_names); i++)
		if (!node_new(ns, ctl, vfile_names[i], NK_VFILE))
			ctl = NULL;
	if (!ctl) {
		ns_destroy(ns);
		return -ENOMEM;
	}
	*out = ns;
	return 0;

free_tables:
	htab_fini(&ns->byino);
	htab_fini(&ns->byname);
	htab_fini(&ns->waiters);
	free(ns->rules);
free_ns:
	free(ns);
	return -ENOMEM;
}

int ns_start(struct ns *ns)
{
	int rc = pthread_create(&ns->thread, NULL, deadline_thread, ns);

	ns->running = rc == 0;
	if (!rc)
		ns->hasher_running = pthread_create(&ns->hasher, NULL, hasher_thread, ns) == 0;
	return -rc;
}

void ns_stop(struct ns *ns)
{
	struct wakelist wl = { 0 };

	pthread_mutex_lock(&ns->lock);
	ns->stopping = 1;
	pthread_cond_signal(&ns->cond);
	pthread_cond_signal(&ns->hcond);
	pthread_mutex_unlock(&ns->lock);
	if (ns->running)
		pthread_join(ns->thread, NULL);
	if (ns->hasher_running)
		pthread_join(ns->hasher, NULL);
	ns->running = ns->hasher_running = 0;
	pthread_mutex_lock(&ns->lock);
	while (ns->hq_head) {           /* drop what the hasher did not reach */
		struct object *o = ns->hq_head;
		ns->hq_head = o->hq_next;
		o->queued = 0;
		obj_put(ns, o);
	}
	ns->hq_tail = NULL;
	for (size_t i = 0; i < ns->waiters.nb; i++) {
		while (ns->waiters.b[i]) {
			struct ns_waiter *w = (struct ns_waiter *)
				((char *)ns->waiters.b[i] - offsetof(struct ns_waiter, byid));
			waiter_dequeue(ns, w);
			wake_push(&wl, w, -ENOENT, NULL);
		}
	}
	pthread_mutex_unlock(&ns->lock);
	wake_all(ns, &wl);
}

static void node_free_tree(struct ns *ns, struct node *n)
{
	while (n->child) {
		struct node *c = n->child;
		n->child = c->next;
		node_free_tree(ns, c);
	}
	if (n->obj) {
		n->obj->node = NULL;
		obj_put(ns, n->obj);
	}
	free(n->name);
	free(n);
}

void ns_destroy(struct ns *ns)
{
	if (!ns)
		return;
	/* Handles the kernel never released (a lazy unmount, an abort). */
	while (ns->handles.next != &ns->handles)
		ns_release(ns, ns->handles.next);
	if (ns->root)
		node_free_tree(ns, ns->root);
	htab_fini(&ns->byino);
	htab_fini(&ns->byname);
	htab_fini(&ns->waiters);
	timerq_fini(&ns->tq);
	pthread_cond_destroy(&ns->cond);
	pthread_cond_destroy(&ns->hcond);
	pthread_cond_destroy(&ns->hdone);
	pthread_mutex_destroy(&ns->lock);
	free(ns->rules);
	free(ns);
}

/* ---------------------------------------------------------------- names */

/* The child of parent that name resolves to, created if implicit. */
static int resolve(struct ns *ns, struct node *p, const char *name,
		   int placeholder, struct node **out)
{
	struct node *n;
	int rc;

	switch (p->kind) {
	case NK_ROOT:
		if (!strcmp(name, ".omni")) {
			*out = node_child(ns, p, name);
			return 0;
		}
		/* fall through */
	case NK_STAGE:
		if ((rc = name_check_stage(name)))
			return rc;
		n = node_child(ns, p, name);
		if (!n && !(n = node_new(ns, p, name, p->kind == NK_ROOT ? NK_STAGE : NK_EDGE)))
			return -ENOMEM;
		*out = n;
		return 0;
	case NK_CTL:
		*out = node_child(ns, p, name);
		return *out ? 0 : -ENOENT;
	case NK_EDGE:
		if ((rc = name_check_key(name)))
			return rc;
		n = node_child(ns, p, name);
		if (n && (n->obj || placeholder)) {
			*out = n;
			return 0;
		}
		if (!placeholder)
			return -ENOENT;
		if (!(n = node_new(ns, p, name, NK_KEY)))
			return -ENOMEM;
		*out = n;
		return 0;
	default:
		return -ENOTDIR;
	}
}

int ns_lookup(struct ns *ns, uint64_t parent, const char *name,
	      int placeholder, struct ns_attr *out)
{
	struct node *p, *n = NULL;
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	if ((p = node_by_ino(ns, parent)) && !(rc = resolve(ns, p, name, placeholder, &n))) {
		n->nlookup++;
		node_attr(ns, n, out);
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

void ns_forget(struct ns *ns, uint64_t ino, uint64_t nl)
{
	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	if (n && n->kind != NK_ROOT) {
		n->nlookup = n->nlookup > nl ? n->nlookup - nl : 0;
		node_maybe_free(ns, n);
	}
	pthread_mutex_unlock(&ns->lock);
}

int ns_getattr(struct ns *ns, uint64_t ino, struct ns_attr *out)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	if (n) {
		node_attr(ns, n, out);
		rc = 0;
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

/* Lists what holds published objects (and .omni under the root). */
int ns_readdir(struct ns *ns, uint64_t ino, struct ns_dirent **ents, size_t *count)
{
	int rc = 0;

	pthread_mutex_lock(&ns->lock);
	struct node *d = node_by_ino(ns, ino);
	if (!d || d->kind == NK_KEY || d->kind == NK_VFILE) {
		rc = d ? -ENOTDIR : -ENOENT;
		goto unlock;
	}
	struct ns_dirent *v = calloc(d->nchild + 1, sizeof(*v));
	size_t n = 0;
	if (!v) {
		rc = -ENOMEM;
		goto unlock;
	}
	for (struct node *c = d->child; c; c = c->next) {
		if (c->kind != NK_CTL && c->kind != NK_VFILE && !c->npub)
			continue;
		if (c->kind == NK_KEY && (!c->obj || c->obj->state != OS_PUBLISHED))
			continue;
		snprintf(v[n].name, sizeof(v[n].name), "%s", c->name);
		v[n].ino = c->ino;
		v[n].mode = c->kind == NK_KEY || c->kind == NK_VFILE ? S_IFREG : S_IFDIR;
		n++;
	}
	*ents = v;
	*count = n;
unlock:
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

/* ---------------------------------------------------------------- open */

int ns_create_key(struct ns *ns, uint64_t parent, const char *name, int excl,
		  uint32_t uid, uint32_t gid, struct ns_attr *out,
		  struct ns_handle **h)
{
	struct node *p, *n;
	int rc;

	pthread_mutex_lock(&ns->lock);
	p = node_by_ino(ns, parent);
	if (!p || p->kind != NK_EDGE) {
		rc = !p ? -ENOENT : p->kind == NK_CTL ? -EACCES : -EPERM;
		goto unlock;
	}
	if ((rc = resolve(ns, p, name, 1, &n)))
		goto unlock;
	if (n->obj && excl) {
		rc = -EEXIST;
	} else if (n->obj && n->obj->state != OS_WRITING) {
		rc = -EACCES;
	} else if (!n->obj && !obj_new(ns, n, uid, gid)) {
		rc = -ENOMEM;
	} else if (!(*h = handle_new(ns, n->obj, 1))) {
		rc = -ENOMEM;
		if (!n->obj->writers)
			obj_abort(ns, n->obj);
	} else {
		if (n->obj->writers == 1)
			stat_add(ns->st, ST_PUTS, 1);
		n->nlookup++;
		node_attr(ns, n, out);
	}
	if (rc)
		node_maybe_free(ns, n);
unlock:
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

static int waiter_queue(struct ns *ns, struct node *n, struct ns_waiter *w)
{
	struct ns_policy p = policy_of(ns, n->parent);

	if (p.wait_ms <= 0)
		return -ENOENT;
	w->type = T_WAITER;
	w->ino = n->ino;
	w->prev = NULL;
	w->next = n->waiters;
	if (n->waiters)
		n->waiters->prev = w;
	n->waiters = w;
	htab_add(&ns->waiters, &w->byid, w->id);
	w->timer.idx = TIMER_IDLE;
	if (timerq_add(&ns->tq, &w->timer, now_ns() + (uint64_t)p.wait_ms * 1000000u)) {
		n->waiters = w->next;
		if (w->next)
			w->next->prev = NULL;
		htab_del(&ns->waiters, &w->byid);
		return -ENOMEM;
	}
	stat_add(ns->st, ST_WAITERS, 1);
	stat_add(ns->st, ST_WAITS, 1);
	if (w->interrupted && w->interrupted(w)) {
		waiter_dequeue(ns, w);
		return -EINTR;
	}
	if (timerq_peek(&ns->tq) == &w->timer)
		pthread_cond_signal(&ns->cond);
	return -EINPROGRESS;
}

int ns_open(struct ns *ns, uint64_t ino, int flags, struct ns_waiter *w,
	    struct ns_handle **h)
{
	int rc = 0;

	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	struct object *o = n ? n->obj : NULL;
	if (!n || n->kind != NK_KEY) {
		rc = !n ? -ENOENT : -EISDIR;
	} else if ((flags & O_ACCMODE) != O_RDONLY) {
		if (!o)
			rc = -ENOENT;
		else if (o->state != OS_WRITING)
			rc = -EACCES;
		else if (!(*h = handle_new(ns, o, 1)))
			rc = -ENOMEM;
		else if (flags & O_TRUNC)
			obj_set_size(o, 0);
	} else if (o && o->state == OS_PUBLISHED) {
		if (!(*h = handle_new(ns, o, 0)))
			rc = -ENOMEM;
		else
			stat_add(ns->st, ST_GETS, 1);
	} else {
		rc = waiter_queue(ns, n, w);
	}
	if (rc && rc != -EINPROGRESS && rc != -EINTR && n)
		node_maybe_free(ns, n);
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

uint64_t ns_waiter_id(struct ns *ns)
{
	return __atomic_add_fetch(&ns->next_wid, 1, __ATOMIC_RELAXED);
}

int ns_handle_is_writer(const struct ns_handle *h)
{
	return h->write;
}

struct ns_waiter *ns_cancel(struct ns *ns, uint64_t id)
{
	struct ns_waiter *w = NULL;

	pthread_mutex_lock(&ns->lock);
	struct hlink *l = htab_find(&ns->waiters, id);
	if (l) {
		w = (struct ns_waiter *)((char *)l - offsetof(struct ns_waiter, byid));
		waiter_dequeue(ns, w);
	}
	pthread_mutex_unlock(&ns->lock);
	return w;
}

/* ---------------------------------------------------------------- bytes */

ssize_t ns_write(struct ns *ns, struct ns_handle *h, const void *buf,
		 size_t len, uint64_t off)
{
	struct object *o = h->obj;
	struct iovec iov[64];
	int n, rc = 0;

	if (off > UINT64_MAX / 2 || len > UINT64_MAX / 2 - off)
		return -EFBIG;
	pthread_mutex_lock(&ns->lock);
	if (!h->write)
		rc = -EBADF;
	else if (o->error)
		rc = -o->error;
	else if (o->state == OS_DEAD)
		rc = -ENOENT;           /* removed while being written */
	else if (o->state != OS_WRITING)
		rc = -EACCES;
	else if ((rc = obj_reserve(ns, o, off + len)) == -ENOSPC)
		o->error = ENOSPC;      /* this object will not be published */
	if (rc) {
		stat_add(ns->st, ST_ERRORS, 1);
		pthread_mutex_unlock(&ns->lock);
		return rc;
	}
	if (off > o->size)              /* a hole reads as zeros */
		obj_zero(ns, o, o->size, off - o->size);
	if (off + len > o->size)
		o->size = off + len;
	/* Copy with the lock dropped: the extents are reserved, and only the
	 * array that lists them can move (another writer growing it). */
	for (size_t done = 0; done < len;) {
		obj_iov(ns, o, off + done, len - done, iov, &n, 64);
		pthread_mutex_unlock(&ns->lock);
		for (int i = 0; i < n; i++) {
			memcpy(iov[i].iov_base, (const char *)buf + done, iov[i].iov_len);
			done += iov[i].iov_len;
		}
		pthread_mutex_lock(&ns->lock);
	}
	hash_note_write(ns, o, off, off + len);
	h->done += len;
	pthread_mutex_unlock(&ns->lock);
	stat_add(ns->st, ST_BYTES_WRITTEN, len);
	return (ssize_t)len;
}

ssize_t ns_read(struct ns *ns, struct ns_handle *h, uint64_t off, size_t len,
		struct iovec *iov, int *niov, int maxiov)
{
	struct object *o = h->obj;
	size_t got = 0;

	*niov = 0;
	pthread_mutex_lock(&ns->lock);
	if (o->state != OS_PUBLISHED && !h->write) {
		pthread_mutex_unlock(&ns->lock);
		return -EIO;
	}
	if (off < o->size) {
		if (len > o->size - off)
			len = o->size - off;
		got = obj_iov(ns, o, off, len, iov, niov, maxiov);
		rangeset_add(&h->seen, off, off + got);
		h->done += got;
	}
	pthread_mutex_unlock(&ns->lock);
	stat_add(ns->st, ST_BYTES_READ, got);
	return (ssize_t)got;
}

void ns_handle_path(struct ns *ns, const struct ns_handle *h, char *buf, size_t len)
{
	pthread_mutex_lock(&ns->lock);
	struct node *k = h->obj->node;
	if (k)
		snprintf(buf, len, "/%s/%s/%s", k->parent->parent->name, k->parent->name, k->name);
	else
		snprintf(buf, len, "/");
	pthread_mutex_unlock(&ns->lock);
}

int ns_flush(struct ns *ns, struct ns_handle *h, enum ns_close how)
{
	struct object *o = h->obj;
	struct wakelist wl = { 0 };
	int rc = 0;

	pthread_mutex_lock(&ns->lock);
	if (!h->write) {
		count_read(ns, h);
		goto unlock;
	}
	if (how != NS_CLOSE_LAST) {    /* a later close or the release decides */
		h->killed = how == NS_CLOSE_KILLED;
		goto unlock;
	}
	h->killed = 0;
	if (!h->flushed) {
		h->flushed = 1;
		o->writers_flushed++;
	}
	if (o->state != OS_WRITING) {
		rc = o->error ? -o->error : 0;
	} else if (o->error) {
		rc = -o->error;
		obj_abort(ns, o);
	} else if (o->writers_flushed == o->writers) {
		obj_publish(ns, o, &wl);
	}
	if (rc)
		stat_add(ns->st, ST_ERRORS, 1);
unlock:
	pthread_mutex_unlock(&ns->lock);
	wake_all(ns, &wl);
	return rc;
}

void ns_release(struct ns *ns, struct ns_handle *h)
{
	struct object *o = h->obj;
	struct wakelist wl = { 0 };

	pthread_mutex_lock(&ns->lock);
	if (h->write) {
		o->writers--;
		if (h->flushed)
			o->writers_flushed--;
		/* The last reference is gone: a killed writer publishes
		 * nothing; otherwise publish once every writer is done. */
		if (o->state == OS_WRITING && (o->error || h->killed))
			obj_abort(ns, o);
		else if (o->state == OS_WRITING && o->writers_flushed == o->writers)
			obj_publish(ns, o, &wl);
	} else {
		count_read(ns, h);
	}
	h->prev->next = h->next;
	h->next->prev = h->prev;
	rangeset_fini(&h->seen);
	obj_put(ns, o);
	free(h);
	pthread_mutex_unlock(&ns->lock);
	wake_all(ns, &wl);
}

int ns_truncate(struct ns *ns, uint64_t ino, uint64_t size)
{
	int rc = 0;

	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	struct object *o = n ? n->obj : NULL;
	if (!n || n->kind != NK_KEY || !o)
		rc = n && n->kind != NK_KEY ? -EISDIR : -ENOENT;
	else if (o->state != OS_WRITING)
		rc = -EACCES;
	else if (size > o->size && (rc = obj_reserve(ns, o, size)) == 0)
		obj_zero(ns, o, o->size, size - o->size);
	if (!rc)
		obj_set_size(o, size);
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_unlink(struct ns *ns, uint64_t parent, const char *name)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	struct node *p = node_by_ino(ns, parent);
	struct node *n = p ? node_child(ns, p, name) : NULL;
	if (p && p->kind != NK_EDGE)
		rc = p->kind == NK_ROOT || p->kind == NK_STAGE ? -EISDIR : -EACCES;
	else if (n && n->obj) {
		obj_unlink(ns, n->obj, ST_REMOVED);
		rc = 0;
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

/* ---------------------------------------------------------------- xattrs */

#define XA "user.omni."
static const char *const xattr_names[] = {
	XA "owner", XA "state", XA "size", XA "xxh3", XA "readers", XA "reads",
	XA "published_ns",
};

/* The value of one of xattr_names for o, or -ENODATA. */
static int xattr_value(struct ns *ns, const struct object *o, const char *name,
		       char *v, size_t vlen)
{
	int pub = o->state == OS_PUBLISHED;

	if (!strcmp(name, XA "owner"))
		return snprintf(v, vlen, "%s", ns->set.node_name);
	if (!strcmp(name, XA "state"))
		return snprintf(v, vlen, "%s", state_name[o->state]);
	if (!strcmp(name, XA "size"))
		return snprintf(v, vlen, "%" PRIu64, pub ? o->size : 0);
	if (!strcmp(name, XA "readers"))
		return snprintf(v, vlen, "%" PRId64,
				o->readers >= 0 ? o->readers :
				policy_of(ns, o->node->parent).readers);
	if (!strcmp(name, XA "reads"))
		return snprintf(v, vlen, "%" PRIu64, o->reads);
	if (pub && !strcmp(name, XA "xxh3"))
		return snprintf(v, vlen, "%016" PRIx64, o->xxh3);
	if (pub && !strcmp(name, XA "published_ns"))
		return snprintf(v, vlen, "%" PRIu64, o->published_ns);
	return -ENODATA;
}

static struct object *xattr_obj(struct ns *ns, uint64_t ino, int *rc)
{
	struct node *n = node_by_ino(ns, ino);

	*rc = !n ? -ENOENT : -ENODATA;
	return n && n->kind == NK_KEY && n->obj ? n->obj : NULL;
}

int ns_getxattr(struct ns *ns, uint64_t ino, const char *name, char *buf, size_t size)
{
	char v[64];
	int rc;

	pthread_mutex_lock(&ns->lock);
	struct object *o = xattr_obj(ns, ino, &rc);
	if (o && (rc = xattr_value(ns, o, name, v, sizeof(v))) >= 0) {
		if (size && (size_t)rc > size)
			rc = -ERANGE;
		else if (size)
			memcpy(buf, v, (size_t)rc);
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_listxattr(struct ns *ns, uint64_t ino, char *buf, size_t size)
{
	char v[64];
	size_t len = 0;
	int rc;

	pthread_mutex_lock(&ns->lock);
	struct object *o = xattr_obj(ns, ino, &rc);
	for (size_t i = 0; o && i < sizeof(xattr_names) / sizeof(*xattr_names); i++) {
		size_t n = strlen(xattr_names[i]) + 1;
		if (xattr_value(ns, o, xattr_names[i], v, sizeof(v)) < 0)
			continue;
		if (size && len + n <= size)
			memcpy(buf + len, xattr_names[i], n);
		len += n;
	}
	pthread_mutex_unlock(&ns->lock);
	if (!o)
		return rc == -ENODATA ? 0 : rc;
	return size && len > size ? -ERANGE : (int)len;
}

/* Only user.omni.readers is settable, and only before publish. */
int ns_setxattr(struct ns *ns, uint64_t ino, const char *name,
		const char *val, size_t len)
{
	char num[16];
	char *end;
	int rc;

	if (strncmp(name, XA, sizeof(XA) - 1))
		return -ENOTSUP;
	if (strcmp(name, XA "readers"))
		return -EACCES;
	if (len == 0 || len >= sizeof(num))
		return -EINVAL;
	memcpy(num, val, len);
	num[len] = 0;
	if (num[0] < '0' || num[0] > '9')
		return -EINVAL;
	long v = strtol(num, &end, 10);
	if (*end || v > INT32_MAX)
		return -EINVAL;
	pthread_mutex_lock(&ns->lock);
	struct object *o = xattr_obj(ns, ino, &rc);
	if (o && o->state != OS_WRITING)
		rc = -EACCES;
	else if (o) {
		o->readers = v;
		rc = 0;
	} else if (rc == -ENODATA)
		rc = -ENOENT;
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_removexattr(struct ns *ns, uint64_t ino, const char *name)
{
	(void)ns; (void)ino;
	return strncmp(name, XA, sizeof(XA) - 1) ? -ENOTSUP : -EACCES;
}

/* ---------------------------------------------------------------- .omni */

void ns_counts(struct ns *ns, uint64_t *objects, uint64_t *inflight)
{
	uint64_t n = 0;

	pthread_mutex_lock(&ns->lock);
	for (struct ns_handle *h = ns->handles.next; h != &ns->handles; h = h->next)
		n++;
	*objects = ns->nobjects;
	*inflight = n;
	pthread_mutex_unlock(&ns->lock);
}

int ns_transfers(struct ns *ns, struct ns_xfer **out, size_t *count)
{
	uint64_t objs, n, now = now_ns();
	size_t i = 0;

	ns_counts(ns, &objs, &n);
	pthread_mutex_lock(&ns->lock);
	struct ns_xfer *v = calloc(n + 1, sizeof(*v));
	for (struct ns_handle *h = ns->handles.next; v && h != &ns->handles && i < n;
	     h = h->next) {
		struct node *k = h->obj->node;
		if (!k)
			continue;
		snprintf(v[i].path, sizeof(v[i].path), "%s/%s/%s",
			 k->parent->parent->name, k->parent->name, k->name);
		snprintf(v[i].peer, sizeof(v[i].peer), "local");
		v[i].done = h->done;
		v[i].total = h->obj->size;
		v[i].elapsed_ns = now - h->opened_ns;
		v[i].writing = h->write;
		i++;
	}
	pthread_mutex_unlock(&ns->lock);
	*out = v;
	*count = i;
	return v ? 0 : -ENOMEM;
}

const char *ns_vfile_name(struct ns *ns, uint64_t ino)
{
	const char *name = NULL;

	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	if (n && n->kind == NK_VFILE)
		name = n->name;         /* static for the life of ns */
	pthread_mutex_unlock(&ns->lock);
	return name;
}
