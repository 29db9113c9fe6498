/* ns.c - the namespace: its tree of names, objects and their handles,
 * and the opens of objects.  A handle's bytes and the close that
 * publishes are beside it in ns_io.c, opens that wait and the deadlines
 * in ns_wait.c, as are the hashing of objects, other nodes' objects and
 * the xattrs, in ns_hash.c, ns_remote.c and ns_xattr.c; ns_internal.h is
 * what they share.
 *
 * One mutex guards the tree, the objects' metadata and the deadline heap.
 * It is never held while bytes move: writes reserve their extents under it
 * and copy after dropping it, reads of published (immutable) objects take
 * only the extent pointers, and publish hashes with the lock dropped.
 */
#define _GNU_SOURCE
#include "ns_internal.h"
#include "../transport/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../kvfmt/kvfmt.h"
#include "../transport/clock.h"

#define GROW_MIN (64u << 10)            /* first reservation of a writer */
#define GROW_MAX (256ull << 20)         /* largest single reservation step */

static const char *const vfile_names[] = { "health", "stats", "metrics", "transfers", "config" };

/* ------------------------------------------------------------------ nodes */

static uint64_t name_hash(uint64_t parent, const char *name)
{
	return XXH3_64bits_withSeed(name, strlen(name), parent);
}

/* The base index's hash of a base (len bytes) under the edge parent. */
static uint64_t hash_of_base(uint64_t parent, const char *base, size_t len)
{
	return XXH3_64bits_withSeed(base, len, parent);
}

/* Keys that are views of each other (<base>, <base>.rank<i>of<N>) share
 * this hash, so a published shard finds the opens waiting for a view. */
uint64_t base_hash(uint64_t parent, const char *name)
{
	size_t bl;
	uint32_t r, t;

	kv_name_split(name, &bl, &r, &t);
	return hash_of_base(parent, name, bl);
}

void node_foreach_shard(struct ns *ns, struct node *edge, const char *base,
			void (*fn)(struct node *k, void *arg), void *arg)
{
	size_t len = strlen(base), bl;
	uint32_t r, t;

	for (struct hlink *l = htab_find(&ns->bybase, hash_of_base(edge->ino, base, len));
	     l; l = htab_next(l)) {
		struct node *k = (struct node *)((char *)l - offsetof(struct node, bybase));
		if (k->parent == edge && kv_name_split(k->name, &bl, &r, &t) && bl == len &&
		    !memcmp(k->name, base, len))
			fn(k, arg);
	}
}

int same_base(const char *a, const char *b)
{
	size_t la, lb;
	uint32_t r, t;

	kv_name_split(a, &la, &r, &t);
	kv_name_split(b, &lb, &r, &t);
	return la == lb && !memcmp(a, b, la);
}

struct node *node_by_ino(struct ns *ns, uint64_t ino)
{
	struct hlink *l = htab_find(&ns->byino, ino);
	return l ? (struct node *)((char *)l - offsetof(struct node, byino)) : NULL;
}

struct node *node_child(struct ns *ns, struct node *p, const char *name)
{
	struct hlink *l = htab_find(&ns->byname, name_hash(p->ino, name));

	for (; l; l = htab_next(l)) {
		struct node *n = (struct node *)((char *)l - offsetof(struct node, byname));
		if (n->parent == p && strcmp(n->name, name) == 0)
			return n;
	}
	return NULL;
}

static uint64_t stem_hash(const char *name)
{
	const char *stem;
	size_t n = name_stem(name, &stem);

	return XXH3_64bits(stem, n);
}

struct node *node_stem_ring(struct ns *ns, const char *name)
{
	struct hlink *l = htab_find(&ns->byreq, stem_hash(name));
	return l ? (struct node *)((char *)l - offsetof(struct node, byreq)) : NULL;
}

static void stem_join(struct ns *ns, struct node *n)
{
	struct node *h = node_stem_ring(ns, n->name);

	if (!h) {
		n->req_next = n->req_prev = n;
		n->req_head = 1;
		htab_add(&ns->byreq, &n->byreq, stem_hash(n->name));
		return;
	}
	n->req_next = h->req_next;
	n->req_prev = h;
	h->req_next->req_prev = n;
	h->req_next = n;
}

static void stem_leave(struct ns *ns, struct node *n)
{
	struct node *next = n->req_next;

	if (n->req_head) {
		htab_del(&ns->byreq, &n->byreq);
		if (next != n) {
			next->req_head = 1;
			htab_add(&ns->byreq, &next->byreq, n->byreq.key);
		}
	}
	next->req_prev = n->req_prev;
	n->req_prev->req_next = next;
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
		if (kind == NK_KEY) {
			htab_add(&ns->bybase, &n->bybase, base_hash(p->ino, name));
			stem_join(ns, n);
		}
		n->next = p->child;
		if (p->child)
			p->child->prev = n;
		p->child = n;
		p->nchild++;
	}
	return n;
}

/* o left key while a file may still map it: mapped, or a reader's not yet
 * done (node_renew). */
static void went_join(struct node *key, struct object *o)
{
	if (!key->nlookup)
		return;         /* the kernel has forgotten it: nothing maps it */
	o->was = key;
	o->was_next = key->went;
	key->went = o;
}

/* No file may map o any more, or its key took a new inode: off its list. */
static void went_leave(struct object *o)
{
	struct object **pp = &o->was->went;

	while (*pp != o)
		pp = &(*pp)->was_next;
	*pp = o->was_next;
	o->was = NULL;
}

/* Frees implicit nodes nobody needs any more, walking up the tree. */
void node_maybe_free(struct ns *ns, struct node *n)
{
	while (n && (n->kind == NK_KEY || n->kind == NK_EDGE || n->kind == NK_STAGE) &&
	       !n->nlookup && !n->nchild && !n->obj && !n->waiters && !n->lost_ns) {
		struct node *p = n->parent;
		htab_del(&ns->byino, &n->byino);
		htab_del(&ns->byname, &n->byname);
		if (n->kind == NK_KEY) {
			htab_del(&ns->bybase, &n->bybase);
			stem_leave(ns, n);
		}
		if (n->prev)
			n->prev->next = n->next;
		else
			p->child = n->next;
		if (n->next)
			n->next->prev = n->prev;
		p->nchild--;
		while (n->went)         /* joined under an ioctl's own lookup, now over */
			went_leave(n->went);
		free(n->left);
		free(n->name);
		free(n);
		n = p;
	}
}

void npub_add(struct node *n, int64_t d)
{
	for (; n; n = n->parent)
		n->npub += (uint64_t)d;
}

/* The edge policy for a key node: rule fields override the defaults. */
struct ns_policy policy_of(struct ns *ns, const struct node *edge)
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
		a->bare = !n->obj;
		if (!n->obj)
			break;
		a->uid = n->obj->uid;
		a->gid = n->obj->gid;
		if (n->obj->state == OS_PUBLISHED) {
			a->size = n->obj->size;
			a->mtime_ns = n->obj->published_ns;
			a->stable = 1;
		} else {        /* a writer's fstat sees what it wrote */
			a->mode = S_IFREG | 0644;
			if (n->obj->state != OS_DEAD)
				a->size = n->obj->size;
		}
		break;
	}
}

const char *obj_path_esc(const struct object *o, char out[static NAME_ESC_MAX])
{
	char path[2 * NAME_STAGE_MAX + NAME_KEY_MAX + 3];

	snprintf(path, sizeof(path), "%s/%s/%s", o->node->parent->parent->name,
		 o->node->parent->name, o->node->name);
	return name_escape(path, out);
}

static void left_clear(struct node *n)
{
	free(n->left);
	n->left = NULL;
}

static struct ghost *ghost_by_ino(struct ns *ns, uint64_t ino)
{
	struct hlink *l = htab_find(&ns->ghost_byino, ino);
	return l ? (struct ghost *)((char *)l - offsetof(struct ghost, byino)) : NULL;
}

static void ghost_free(struct ns *ns, struct ghost *g)
{
	htab_del(&ns->ghost_byino, &g->byino);
	g->prev->next = g->next;
	g->next->prev = g->prev;
	free(g);
}

/* The key whose inode ino was, if it is still there (a ghost's name may
 * have moved on again since, a few times at most). */
static struct node *ghost_key(struct ns *ns, uint64_t ino)
{
	struct ghost *g;
	struct node *n = NULL;

	for (int i = 0; i < 8 && !n && (g = ghost_by_ino(ns, ino)); i++)
		n = node_by_ino(ns, ino = g->to);
	return n;
}

/* Whether opens wait on n that its inode must answer (node_renew): all
 * but the kernel's second tries of opens, which, rather than fail, may
 * have a file of the old inode whose fstat() says the old object's. */
static int waiters_hold(const struct node *n)
{
	for (const struct ns_waiter *w = n->waiters; w; w = w->next)
		if (!(w->flags & NS_OPEN_RETRY))
			return 1;
	return 0;
}

/* Objects that left n may still be mapped (went): a mapping's, or a file
 * of a reader not done with it, which could map it yet.  Before the name
 * is given out again, or has another object, it takes a new inode, and
 * the old one stays the kernel's as a ghost, with the attributes of the
 * object that left it while a file could still ask (left); so a mapping
 * keeps its pages and its size (a smaller next object made it SIGBUS,
 * and a lookup of the bare name too), as after an rm and a new file of
 * that name on any filesystem.  An open through the old inode, or through
 * the name's inode while it is due a new one, hears ESTALE, and the kernel
 * looks the name up again, which answers the new one.  The kernel's second
 * try (NS_OPEN_RETRY), its last, opens the inode as it is, and, if it
 * waits there, goes to the new one with the name (its file keeps the old:
 * another object came and went between its lookup and its open).  Other
 * opens waiting on the old inode keep it the name's: the name's next
 * object answers them, which that inode must then show. */
static void node_renew(struct ns *ns, struct node *n)
{
	struct ghost *g;

	if (!n->went || waiters_hold(n))
		return;
	/* Where the kernel knows the old inode; out of memory, the name
	 * goes on with it, as the kernel's files on it do. */
	if (n->nlookup && (g = malloc(sizeof(*g)))) {
		g->nlookup = n->nlookup;
		if ((g->has_attr = !!n->left))
			g->attr = *n->left;
		htab_add(&ns->ghost_byino, &g->byino, n->ino);
		g->next = ns->ghosts.next;
		g->prev = &ns->ghosts;
		g->next->prev = g;
		ns->ghosts.next = g;
		htab_del(&ns->byino, &n->byino);
		n->ino = g->to = ++ns->next_ino;
		htab_add(&ns->byino, &n->byino, n->ino);
		n->nlookup = 0;
		n->stale = 0;
		n->long_entry = 0;
		left_clear(n);
		for (struct ns_waiter *w = n->waiters; w; w = w->next)
			w->ino = n->ino;
	}
	while (n->went)
		went_leave(n->went);
}

/* ---------------------------------------------------------------- objects */

void obj_put(struct ns *ns, struct object *o)
{
	if (--o->refs)
		return;
	replica_forget(ns, o);
	for (unsigned i = 0; i < o->next; i++)
		pool_free(ns->pool, o->ext[i].off, o->ext[i].len);
	if (o->next)
		window_room(ns);
	if (o->hs)
		XXH3_freeState(o->hs);
	if (o->cs)
		XXH3_freeState(o->cs);
	free(o->chunks);
	free(o->ext);
	free(o->kvhdr);
	free(o->cov);
	free(o->seen);
	free(o);
}

struct object *obj_new(struct ns *ns, struct node *key, uint32_t uid, uint32_t gid)
{
	struct object *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->type = T_OBJECT;
	o->ttl.idx = TIMER_IDLE;
	o->state = OS_WRITING;
	o->readers = -1;
	o->ttl_s = -1;
	o->created_ns = clock_mono_ns();
	o->uid = uid;
	o->gid = gid;
	o->refs = 1;            /* the key's link */
	o->owner = -1;
	o->oid = ++ns->next_oid;
	o->node = key;
	key->obj = o;
	key->lost_ns = 0;               /* written again: no longer lost */
	node_renew(ns, key);
	while (key->went)               /* not renewed: opens wait on it */
		went_leave(key->went);
	key->stale = 0;
	left_clear(key);
	ns->nobjects++;
	return o;
}

/* Takes the object off its key: consumed, removed, expired or aborted.
 * Handles that have it open keep its bytes until they close.  The key's
 * node is freed too if nothing else holds it. */
void obj_unlink(struct ns *ns, struct object *o, enum stat_id why)
{
	struct node *key = o->node;

	obj_detach(ns, o, why);
	node_maybe_free(ns, key);
}

/* o leaves key: if a file of the kernel's is open on it, under a name
 * the kernel knows, its attributes stay for that file's fstat(), which
 * the kernel asks as a GETATTR without the file (ns_getattr), until the
 * name has an object again; 1 if so. */
static int left_keep(struct ns *ns, struct node *key, struct object *o)
{
	left_clear(key);
	if (o->state != OS_PUBLISHED || !o->opens || !key->nlookup ||
	    !(key->left = malloc(sizeof(*key->left))))
		return 0;       /* (out of memory: as if nobody had it open) */
	node_attr(ns, key, key->left);
	key->left->stable = 0;          /* asked each time: the name may come back */
	key->left->gone = 1;
	return 1;
}

/* obj_detach's work; kernel_rm: an rm through this node's kernel (obj_remove). */
static void detach(struct ns *ns, struct object *o, enum stat_id why, int kernel_rm)
{
	struct node *key = o->node;

	if (!key)
		return;
	hasher_dequeue(ns, o);
	replica_forget(ns, o);          /* its handles may keep the bytes */
	int held = left_keep(ns, key, o);
	if (o->state == OS_PUBLISHED)
		npub_add(key, -1);
	/* A name the kernel keeps: its GETATTR is also what a stat() of
	 * the name sends, which must now say ENOENT, unless the kernel
	 * looks the name up again first (settings.stale). */
	if ((o->state == OS_PUBLISHED || key->long_entry) && key->nlookup && !kernel_rm) {
		key->stale = 1;
		if (!ns->set.stale || !ns->set.stale(ns->set.sarg, key->ino, held))
			left_clear(key);
	}
	if (o->state == OS_PUBLISHED && o->owner < 0) {
		htab_del(&ns->byoid, &o->byoid);
		ev_queue(ns, EV_GONE, o);
	}
	if (o->state != OS_PUBLISHED)
		o->state = OS_DEAD;
	timerq_del(&ns->tq, &o->ttl);
	/* Opens waiting for room for a window of o wait for the key's next
	 * object now, as one made after this would (ENOENT at the deadline). */
	for (struct ns_waiter *w = key->waiters; w; w = w->next)
		w->window = 0;
	o->was_ino = key->ino;
	/* Mapped, or open by a reader not done with it, who may map it yet
	 * (the loser of a race for it). */
	if (o->maps || o->opens)
		went_join(key, o);
	key->obj = NULL;
	o->node = NULL;
	ns->nobjects--;
	if (why != ST_NONE)
		stat_add(ns->st, why, 1);
	obj_put(ns, o);
}

/* rm through this node's kernel, which forgets the name itself and is not
 * told (a notification per name was a system call of every unlink of an
 * rm): so the name is not stale, and only files still open on o can ask
 * for its attributes (left_keep): a later kernel entry of the object-less
 * name is asked again each time. */
void obj_remove(struct ns *ns, struct object *o)
{
	struct node *key = o->node;

	detach(ns, o, ST_REMOVED, 1);
	key->stale = 0;
	node_maybe_free(ns, key);
}

/* obj_unlink, but the key's node stays for the caller: to put another
 * object on it, or to free it with node_maybe_free(). */
void obj_detach(struct ns *ns, struct object *o, enum stat_id why)
{
	detach(ns, o, why, 0);
}

void obj_abort(struct ns *ns, struct object *o)
{
	obj_unlink(ns, o, ST_ABORTED);
	o->state = OS_DEAD;
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

static void obj_shrink(struct ns *ns, struct object *o, uint64_t keep);

/* Makes the object's extents cover [0, end).  Each step asks for about as
 * much again as the object holds (up to GROW_MAX), first by growing the last
 * extent in place, so a sequential writer ends with one or a few extents.
 * A pool that is short drops unused copies of other nodes' objects first.
 * A reserve that fails gives back at once all it took: one writer's
 * impossible request (a write at 1 TiB) must not leave the pool full. */
int obj_reserve(struct ns *ns, struct object *o, uint64_t end)
{
	uint64_t cap0 = o->cap;
	int rc = 0;

	if (end > ns->pool_size)
		return -ENOSPC;         /* could never fit: touch nothing */
	while (!rc && o->cap < end) {
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
		if (pool_alloc(ns->pool, POOL_GRAIN, want, &off, &got)) {
			if (!replica_evict(ns, o, need))
				rc = -ENOSPC;   /* else copies of others' objects made room */
		} else if (ext_push(o, off, got)) {
			pool_free(ns->pool, off, got);
			rc = -ENOMEM;
		}
	}
	if (rc)
		obj_shrink(ns, o, cap0);
	return rc;
}

/* Gives back the reserve beyond the object's size: it is immutable now. */
void obj_trim(struct ns *ns, struct object *o)
{
	obj_shrink(ns, o, (o->size + POOL_GRAIN - 1) / POOL_GRAIN * POOL_GRAIN);
}

/* Gives back the extents beyond the first keep bytes (a multiple of
 * POOL_GRAIN) of the object. */
static void obj_shrink(struct ns *ns, struct object *o, uint64_t keep)
{
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
	window_room(ns);
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

size_t obj_spans(const struct object *o, uint64_t off, size_t len, struct ns_span *sp, int *n,
		 int max)
{
	size_t done = 0;
	int k = 0;

	for (unsigned i = ext_find(o, off); i < o->next && done < len && k < max; i++) {
		const struct ext *e = &o->ext[i];
		uint64_t in = off + done - e->lstart;
		uint64_t take = e->len - in;
		if (take > len - done)
			take = len - done;
		sp[k++] = (struct ns_span){ e->off + in, take };
		done += take;
	}
	*n = k;
	return done;
}

/* Points iov at [off, off+len) of the object, at most maxiov pieces, in a
 * pool the CPU addresses.  Returns the bytes covered. */
size_t obj_iov(struct ns *ns, const struct object *o, uint64_t off,
	       size_t len, struct iovec *iov, int *niov, int maxiov)
{
	struct ns_span sp[64];
	size_t done = 0;
	int n = 0, k;

	while (done < len && n < maxiov) {
		size_t got = obj_spans(o, off + done, len - done, sp, &k,
				       maxiov - n < 64 ? maxiov - n : 64);
		for (int i = 0; i < k; i++)
			iov[n++] = (struct iovec){ ns->base + sp[i].off, sp[i].len };
		if (!got)
			break;
		done += got;
	}
	*niov = n;
	return done;
}

/* Copies between [off, off+len) of o and host memory at buf, either way. */
static int obj_copy(struct ns *ns, const struct object *o, uint64_t off, uint8_t *buf,
		    size_t len, int in)
{
	struct ns_span sp[64];
	int n;

	while (len) {
		size_t got = obj_spans(o, off, len, sp, &n, 64);
		if (!got)
			return -EIO;
		for (int i = 0; i < n; i++) {
			if (in ? pool_write(ns->pool, sp[i].off, buf, sp[i].len)
			       : pool_read(ns->pool, sp[i].off, buf, sp[i].len))
				return -EIO;
			buf += sp[i].len;
		}
		off += got;
		len -= got;
	}
	return 0;
}

int obj_copy_out(struct ns *ns, const struct object *o, uint64_t off, void *dst, size_t len)
{
	return obj_copy(ns, o, off, dst, len, 0);
}

int obj_copy_in(struct ns *ns, const struct object *o, uint64_t off, const void *src, size_t len)
{
	return obj_copy(ns, o, off, (uint8_t *)(uintptr_t)src, len, 1);
}

int obj_bounce(struct ns *ns, const struct object *o, uint64_t off, size_t len,
	       struct iovec *iov)
{
	uint8_t *b = ns_bounce(ns);

	if (!b || len > NS_BOUNCE || obj_copy_out(ns, o, off, b, len))
		return -EIO;
	*iov = (struct iovec){ b, len };
	return 0;
}

/* ---------------------------------------------------------------- events */

struct ns_event *ev_new(struct ns *ns, int type, struct object *o)
{
	const struct ns_hooks *hk = ns->set.hooks;
	struct ns_event *e;
	struct node *k = o->node;

	/* A complete read of a record its owner's loss or reconnection took
	 * off its key still counts there: the owner has the object. */
	if (!hk || (!k && type != EV_CONSUMED) || (type == EV_PUBLISHED && !hk->published) ||
	    (type == EV_GONE && !hk->gone) || (type == EV_CONSUMED && !hk->consumed) ||
	    (type == EV_REASK && !hk->reask))
		return NULL;
	int copy = type == EV_PUBLISHED && !ns->base && o->size <= NS_INLINE_MAX;
	if (!(e = calloc(1, sizeof(*e) + (copy ? o->size : 0)))) {
		fprintf(stderr, "omnifs: out of memory: a peer misses news of object %llu\n",
			(unsigned long long)o->oid);
		return NULL;
	}
	e->type = type;
	if (k) {
		snprintf(e->from, sizeof(e->from), "%s", k->parent->parent->name);
		snprintf(e->to, sizeof(e->to), "%s", k->parent->name);
		snprintf(e->key, sizeof(e->key), "%s", k->name);
	}
	e->info = (struct ns_objinfo){
		.from = e->from, .to = e->to, .key = e->key, .oid = o->oid, .size = o->size,
		.xxh3 = o->xxh3, .reads = o->reads, .published_ns = o->published_ns,
		.readers = o->readers, .uid = o->uid, .gid = o->gid, .owner = o->owner,
		.asker = o->asker,
	};
	if (type == EV_PUBLISHED) {
		e->o = o;
		o->refs++;
		if (o->size <= NS_INLINE_MAX && o->size && o->next == 1 && ns->base)
			e->info.data = ns->base + o->ext[0].off;
		else if (o->size && copy && !obj_copy_out(ns, o, 0, e->copy, o->size))
			e->info.data = e->copy;
		e->info.kvhdr = o->kvhdr;       /* o is referenced until delivered */
		e->info.kvhdr_len = o->kvhdr_len;
	}
	return e;
}

struct ns_event *ev_push(struct ns *ns, struct ns_event *e)
{
	if (!e)
		return NULL;
	if (ns->ev_tail)
		ns->ev_tail->next = e;
	else
		ns->ev_head = e;
	ns->ev_tail = e;
	return e;
}

struct ns_event *ev_queue(struct ns *ns, int type, struct object *o)
{
	return ev_push(ns, ev_new(ns, type, o));
}

void ev_free(struct ns *ns, struct ns_event *e)
{
	if (e && e->o)
		obj_put(ns, e->o);
	free(e);
}

/* Delivers queued events; one thread at a time, so they stay in order. */
void ns_deliver(struct ns *ns)
{
	const struct ns_hooks *hk = ns->set.hooks;

	pthread_mutex_lock(&ns->ev_lock);
	pthread_mutex_lock(&ns->lock);
	struct ns_event *e = ns->ev_head;
	ns->ev_head = ns->ev_tail = NULL;
	pthread_mutex_unlock(&ns->lock);
	while (e) {
		struct ns_event *next = e->next;
		if (e->type == EV_PUBLISHED)
			hk->published(ns->set.hctx, &e->info);
		else if (e->type == EV_GONE)
			hk->gone(ns->set.hctx, &e->info);
		else
			hk->consumed(ns->set.hctx, e->info.owner, e->info.oid, &e->cover);
		if (e->o) {
			pthread_mutex_lock(&ns->lock);
			obj_put(ns, e->o);
			pthread_mutex_unlock(&ns->lock);
		}
		free(e);
		e = next;
	}
	pthread_mutex_unlock(&ns->ev_lock);
}

/* Drops the lock and tells the cluster what happened under it. */
void ns_unlock(struct ns *ns)
{
	int pending = ns->ev_head != NULL;

	pthread_mutex_unlock(&ns->lock);
	if (pending)
		ns_deliver(ns);
}

/* ---------------------------------------------------------------- handles */

void handle_unseen(struct ns_handle *h)
{
	if (!h->write && !h->unseen) {
		h->unseen = 1;
		h->obj->opens--;
	}
}

/* h reads for a view, not for a file of the kernel's. */
void handle_source(struct ns_handle *h)
{
	h->source = 1;
	handle_unseen(h);
}

struct ns_handle *handle_new(struct ns *ns, struct object *o, int write)
{
	struct ns_handle *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->obj = o;
	h->write = write;
	h->gen = o->fetch_gen;          /* a remote object's readers belong to this fetch */
	h->opened_ns = clock_mono_ns();
	rangeset_init(&h->seen);
	o->refs++;
	if (write)
		o->writers++;
	else
		o->opens++;
	h->next = ns->handles.next;
	h->prev = &ns->handles;
	ns->handles.next->prev = h;
	ns->handles.next = h;
	return h;
}

void ns_handle_mapped(struct ns *ns, struct ns_handle *h)
{
	pthread_mutex_lock(&ns->lock);
	struct object *o = h->obj;
	struct node *key;

	if (!h->mapped) {
		h->mapped = 1;
		/* First mapped after it left, by a reader whose read counted:
		 * in time while its key has no other object yet. */
		if (!o->maps++ && !o->node && !o->was && (key = node_by_ino(ns, o->was_ino)) &&
		    !key->obj)
			went_join(key, o);
	}
	pthread_mutex_unlock(&ns->lock);
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

void handle_drop(struct ns *ns, struct ns_handle *h, int *owner, uint64_t *lease)
{
	if (h->stream)
		stream_close(h->stream, owner, lease);
	h->prev->next = h->next;
	h->next->prev = h->prev;
	rangeset_fini(&h->seen);
	if (!h->write && !h->unseen)
		h->obj->opens--;
	if (h->mapped)
		h->obj->maps--;
	if (h->obj->was && !h->obj->maps && !h->obj->opens)
		went_leave(h->obj);
	obj_put(ns, h->obj);
	free(h);
}

/* ---------------------------------------------------------------- lifecycle */

/* The hash tables; one that never got its buckets (ns is zeroed) frees nothing. */
static void tables_fini(struct ns *ns)
{
	htab_fini(&ns->byino);
	htab_fini(&ns->ghost_byino);
	htab_fini(&ns->byname);
	htab_fini(&ns->waiters);
	htab_fini(&ns->byoid);
	htab_fini(&ns->bybase);
	htab_fini(&ns->byreq);
	htab_fini(&ns->gone_byoid);
	ended_fini(&ns->ended);
}

int ns_create(struct ns **out, struct pool *pool, struct stats *st,
	      const struct ns_settings *set)
{
	struct ns *ns = calloc(1, sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	struct pool_usage pu;
	pool_usage(pool, &pu);
	ns->pool = pool;
	ns->pool_size = pu.size;
	ns->lost_sweep = (struct timed){ .t.idx = TIMER_IDLE, .type = T_SWEEP };
	ns->base = pool_base(pool);
	ns->st = st;
	ns->set = *set;
	ns->uid = getuid();
	ns->gid = getgid();
	ns->start_ns = clock_wall_ns();
	ns->next_lease = ns->start_ns;  /* so lease ids differ across restarts */
	ns->next_oid = ns->start_ns;    /* and object ids: see ns_gone */
	ns->handles.next = ns->handles.prev = &ns->handles;
	ns->next_ino = NS_ROOT_INO;     /* the root takes 1; the rest count on */
	timerq_init(&ns->tq);
	if (set->nrules) {
		ns->rules = malloc(set->nrules * sizeof(*ns->rules));
		if (!ns->rules)
			goto free_ns;
		memcpy(ns->rules, set->rules, set->nrules * sizeof(*ns->rules));
	}
	ns->ghosts.next = ns->ghosts.prev = &ns->ghosts;
	if (htab_init(&ns->byino, 1024) || htab_init(&ns->ghost_byino, 64) ||
	    htab_init(&ns->byname, 1024) ||
	    htab_init(&ns->waiters, 1024) || htab_init(&ns->byoid, 1024) ||
	    htab_init(&ns->bybase, 1024) || htab_init(&ns->byreq, 1024) ||
	    htab_init(&ns->gone_byoid, 1024) ||
	    ended_init(&ns->ended, set->cleanup_hold_s, NS_ENDED_MAX))
		goto free_tables;
	pthread_mutex_init(&ns->ev_lock, NULL);
	pthread_cond_init(&ns->fcond, NULL);
	pthread_mutex_init(&ns->lock, NULL);
	clock_cond_init(&ns->cond);
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
	tables_fini(ns);
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
	struct ns_wakes wl = { 0 };

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
	ns_wake(ns, &wl);
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
	free(n->left);
	free(n->name);
	free(n);
}

/* The hooks of an ns whose cluster went before it: a landing buffer was
 * the transport's, which unmapped it as it went. */
static void gone_buf_free(void *ctx, void *buf)
{
	(void)ctx;
	(void)buf;
}

static const struct ns_hooks gone_hooks = { .buf_free = gone_buf_free };

void ns_destroy(struct ns *ns)
{
	if (!ns)
		return;
	while (ns->ev_head) {           /* news nobody delivered */
		struct ns_event *e = ns->ev_head;
		ns->ev_head = e->next;
		if (e->o)
			obj_put(ns, e->o);
		free(e);
	}
	/* Handles the kernel never released (a lazy unmount, an abort, a
	 * stop while a writer is mid-write).  What the hooks reached (the
	 * cluster) is gone: nothing is told to it, and a writer that never
	 * closed publishes nothing, as a killed one. */
	ns->set.hooks = &gone_hooks;
	while (ns->handles.next != &ns->handles) {
		struct ns_handle *h = ns->handles.next;
		h->killed = 1;
		ns_release(ns, h);
	}
	if (ns->root)
		node_free_tree(ns, ns->root);
	while (ns->ghosts.next && ns->ghosts.next != &ns->ghosts)
		ghost_free(ns, ns->ghosts.next);
	gone_fini(ns);
	tables_fini(ns);
	timerq_fini(&ns->tq);
	pthread_cond_destroy(&ns->fcond);
	pthread_mutex_destroy(&ns->ev_lock);
	pthread_cond_destroy(&ns->cond);
	pthread_cond_destroy(&ns->hcond);
	pthread_cond_destroy(&ns->hdone);
	pthread_mutex_destroy(&ns->lock);
	free(ns->rules);
	free(ns->owners);
	free(ns);
}

/* ---------------------------------------------------------------- names */

/* The child of parent that name resolves to, created if implicit. */
int node_resolve(struct ns *ns, struct node *p, const char *name,
		 int mode, struct node **out)
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
		if (n && (n->obj || mode != NS_LOOKUP_OBJECT)) {
			*out = n;
			return 0;
		}
		if (mode != NS_LOOKUP_WAIT)
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
	      int mode, struct ns_attr *out)
{
	struct node *p, *n = NULL;
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	if ((p = node_by_ino(ns, parent)) && !(rc = node_resolve(ns, p, name, mode, &n))) {
		node_renew(ns, n);
		n->nlookup++;
		n->stale = 0;
		node_attr(ns, n, out);
		n->long_entry = out->stable;
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

void ns_forget(struct ns *ns, uint64_t ino, uint64_t nl)
{
	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	struct ghost *g = n ? NULL : ghost_by_ino(ns, ino);
	if (n && n->kind != NK_ROOT) {
		n->nlookup = n->nlookup > nl ? n->nlookup - nl : 0;
		node_maybe_free(ns, n);
	} else if (g && (g->nlookup = g->nlookup > nl ? g->nlookup - nl : 0) == 0) {
		ghost_free(ns, g);
	}
	pthread_mutex_unlock(&ns->lock);
}

int ns_getattr(struct ns *ns, uint64_t ino, struct ns_attr *out)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	struct ghost *g = n ? NULL : ghost_by_ino(ns, ino);
	if (n && n->left) {             /* (never beside an object: obj_new) */
		*out = *n->left;        /* only an open file can ask: left_keep */
		rc = 0;
	} else if (n && !n->stale) {    /* stale: see ns_open */
		node_attr(ns, n, out);
		rc = 0;
	} else if (g && g->has_attr) {  /* as left: only open files ask */
		*out = g->attr;
		rc = 0;
	} else if (g) {                 /* the kernel looks the name up again */
		rc = -ESTALE;
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_key_name(struct ns *ns, uint64_t ino, uint64_t *parent, char name[NAME_KEY_MAX + 1])
{
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	if (n && n->kind == NK_KEY) {
		*parent = n->parent->ino;
		snprintf(name, NAME_KEY_MAX + 1, "%s", n->name);
		rc = 0;
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

/* Whether readdir shows c: control files, views, and what holds a
 * published object. */
static int dirent_listed(const struct node *c)
{
	if (c->kind != NK_CTL && c->kind != NK_VFILE && !c->npub)
		return 0;
	return c->kind != NK_KEY || (c->obj && c->obj->state == OS_PUBLISHED);
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
	/* One allocation: the entries, then their names.  An edge of 100k
	 * keys is a few MiB, not a name's maximum for each. */
	size_t n = 0, names = 0;
	for (struct node *c = d->child; c; c = c->next)
		if (dirent_listed(c)) {
			n++;
			names += strlen(c->name) + 1;
		}
	struct ns_dirent *v = malloc((n + 1) * sizeof(*v) + names);
	if (!v) {
		rc = -ENOMEM;
		goto unlock;
	}
	char *name = (char *)(v + n + 1);
	n = 0;
	for (struct node *c = d->child; c; c = c->next) {
		if (!dirent_listed(c))
			continue;
		size_t len = strlen(c->name) + 1;
		v[n].name = memcpy(name, c->name, len);
		name += len;
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

int ns_dir_names(struct ns *ns, uint64_t ino, char from[NAME_STAGE_MAX + 1],
		 char to[NAME_STAGE_MAX + 1])
{
	int kind = -ENOENT;

	from[0] = to[0] = 0;
	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	if (n) {
		kind = (int)n->kind;
		struct node *e = n->kind == NK_KEY ? n->parent : n;
		if (e->kind == NK_EDGE) {
			snprintf(from, NAME_STAGE_MAX + 1, "%s", e->parent->name);
			snprintf(to, NAME_STAGE_MAX + 1, "%s", e->name);
		} else if (e->kind == NK_STAGE) {
			snprintf(from, NAME_STAGE_MAX + 1, "%s", e->name);
		}
	}
	pthread_mutex_unlock(&ns->lock);
	return kind;
}

int64_t ns_wait_ms(struct ns *ns, uint64_t ino)
{
	int64_t ms = ns->set.dflt.wait_ms;

	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	if (n && n->kind == NK_KEY)
		n = n->parent;
	if (n && n->kind == NK_EDGE)
		ms = policy_of(ns, n).wait_ms;
	pthread_mutex_unlock(&ns->lock);
	return ms;
}

/* ---------------------------------------------------------------- open */

/* A writer's handle on key n: a new object, or (unless excl) another
 * writer of the one being written. */
static int key_write(struct ns *ns, struct node *n, int excl, uint32_t uid, uint32_t gid,
		     struct ns_handle **h)
{
	int rc = 0;

	if (n->obj && excl) {
		rc = -EEXIST;
	} else if (n->obj && n->obj->state != OS_WRITING) {
		rc = -EACCES;
	} else if (!n->obj && ended_covers(&ns->ended, n->name, clock_mono_ns())) {
		rc = -ECANCELED;        /* its request was cleaned up: nobody reads it */
		stat_add(ns->st, ST_REFUSED, 1);
	} else if (!n->obj && !obj_new(ns, n, uid, gid)) {
		rc = -ENOMEM;
	} else if (!(*h = handle_new(ns, n->obj, 1))) {
		rc = -ENOMEM;
		if (!n->obj->writers)
			obj_abort(ns, n->obj);
	} else if (n->obj->writers == 1) {
		stat_add(ns->st, ST_PUTS, 1);
	}
	if (rc)
		node_maybe_free(ns, n);
	return rc;
}

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
	if ((rc = node_resolve(ns, p, name, NS_LOOKUP_WAIT, &n)))
		goto unlock;
	if (!(rc = key_write(ns, n, excl, uid, gid, h))) {
		n->nlookup++;
		node_attr(ns, n, out);
	}
unlock:
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_create_known(struct ns *ns, uint64_t ino, uint32_t uid, uint32_t gid, int flags,
		    struct ns_handle **h)
{
	int rc;

	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	if (!n && (flags & NS_OPEN_RETRY))      /* as ns_open */
		n = ghost_key(ns, ino);
	if (!n || n->kind != NK_KEY) {
		rc = !n ? -ENOENT : -EISDIR;
		goto unlock;
	}
	if (n->went && !waiters_hold(n) && !(flags & NS_OPEN_RETRY)) {
		rc = -ESTALE;           /* as ns_open */
		goto unlock;
	}
	if (!(rc = key_write(ns, n, 0, uid, gid, h)) && (flags & O_TRUNC))
		obj_set_size(n->obj, 0);
unlock:
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

/* 1 if a published key shares n's base (n itself aside). */
static int views_possible(struct ns *ns, struct node *n)
{
	for (struct hlink *l = htab_find(&ns->bybase, base_hash(n->parent->ino, n->name)); l;
	     l = htab_next(l)) {
		struct node *m = (struct node *)((char *)l - offsetof(struct node, bybase));
		if (m != n && m->parent == n->parent && m->obj && m->obj->state == OS_PUBLISHED &&
		    same_base(m->name, n->name))
			return 1;
	}
	return 0;
}

/* 1 if a shard n's view needs went with its owner in the last
 * NS_LOST_KEEP_NS and was not written again: with none of n's base
 * published, that view cannot be made, and its open fails with EIO, as
 * the shard's own would (SPEC §4.7), not at the end of a wait. */
static int views_lost(struct ns *ns, struct node *n, uint64_t now)
{
	size_t bl;
	uint32_t r, T, i, S, first, cnt;

	kv_name_split(n->name, &bl, &r, &T);
	for (struct hlink *l = htab_find(&ns->bybase, base_hash(n->parent->ino, n->name)); l;
	     l = htab_next(l)) {
		struct node *m = (struct node *)((char *)l - offsetof(struct node, bybase));
		if (m == n || m->parent != n->parent || m->obj || !m->lost_ns ||
		    now - m->lost_ns >= NS_LOST_KEEP_NS || !same_base(m->name, n->name))
			continue;
		kv_name_split(m->name, &bl, &i, &S);
		if (!kv_view_shards(S, r, T, &first, &cnt) && i >= first && i < first + cnt)
			return 1;
	}
	return 0;
}

int ns_open(struct ns *ns, uint64_t ino, int flags, struct ns_waiter *w,
	    struct ns_handle **h)
{
	struct fetch_start fs;
	struct ns_wakes wl = { 0 };
	int rc = 0, start = 0;

	pthread_mutex_lock(&ns->lock);
	struct node *n = node_by_ino(ns, ino);
	/* The kernel's last try, or a view's source: the name's inode now */
	if (!n && (flags & (NS_OPEN_RETRY | NS_OPEN_SOURCE)))
		n = ghost_key(ns, ino);
	struct object *o = n ? n->obj : NULL;
	if (!n || n->kind != NK_KEY) {
		/* A ghost: through a name the kernel kept since, as below */
		rc = n ? -EISDIR : ghost_by_ino(ns, ino) ? -ESTALE : -ENOENT;
	} else if (n->went && !waiters_hold(n) && !(flags & (NS_OPEN_SOURCE | NS_OPEN_RETRY))) {
		rc = -ESTALE;           /* the lookup takes a new inode: node_renew */
	} else if (n->stale && !(flags & (NS_OPEN_SOURCE | NS_OPEN_KEPT | NS_OPEN_RETRY))) {
		/* Through a name the kernel kept after its object left: the
		 * kernel looks it up again and opens what that says (ops.c's
		 * open_kept does that lookup's work itself: NS_OPEN_KEPT; and
		 * the kernel's second try, after its lookup, another object
		 * came and went: NS_OPEN_RETRY opens what is here now). */
		rc = -ESTALE;
	} else if ((flags & O_ACCMODE) != O_RDONLY) {
		if (!o)
			rc = -ENOENT;
		else if (o->state != OS_WRITING)
			rc = -EACCES;
		else if (!(*h = handle_new(ns, o, 1)))
			rc = -ENOMEM;
		else if (flags & O_TRUNC)
			obj_set_size(o, 0);
	} else if (o && o->state == OS_PUBLISHED && (flags & NS_OPEN_SOURCE)) {
		if (!(*h = handle_new(ns, o, 0)))
			rc = -ENOMEM;
		else
			handle_source(*h);
	} else if (!o && n->lost_ns && clock_mono_ns() - n->lost_ns < NS_LOST_KEEP_NS) {
		rc = -EIO;              /* its owner died with it (SPEC §4.7) */
	} else if (!o && !(flags & NS_OPEN_EXACT) && views_possible(ns, n)) {
		rc = -EAGAIN;           /* a view of published shards: see view.c */
	} else if (!o && !(flags & NS_OPEN_EXACT) && views_lost(ns, n, clock_mono_ns())) {
		rc = -EIO;              /* its shards died with their owner */
	} else if (o && o->state == OS_PUBLISHED && (flags & NS_OPEN_HERE) && o->owner >= 0 &&
		   o->fetch != F_DONE) {
		rc = -EREMOTE;
	} else if (o && o->state == OS_PUBLISHED && obj_streamed(o)) {
		rc = window_open(ns, n, w, flags, NULL, &wl);   /* answered by its window's first pull */
	} else if (o && o->state == OS_PUBLISHED && o->owner >= 0 &&
		   o->fetch != F_DONE && (o->fetch != F_RUNNING || !o->have)) {
		/* Another node's: answered once its first bytes are here,
		 * or its owner says it is gone. */
		rc = waiter_queue(ns, n, w, 1, flags);
		if (rc == -EINPROGRESS && o->fetch != F_RUNNING)
			start = fetch_begin(ns, o, &fs);
	} else if (o && o->state == OS_PUBLISHED) {
		if (!(*h = handle_new(ns, o, 0)))
			rc = -ENOMEM;
		else
			stat_add(ns->st, ST_GETS, 1);
		if (o->owner >= 0 && o->next)   /* a copy, opened now */
			replica_touch(ns, o);
	} else if (!o && ended_covers(&ns->ended, n->name, clock_mono_ns())) {
		rc = -ENOENT;           /* its request was cleaned up: none comes */
	} else {
		rc = waiter_queue(ns, n, w, 0, flags);
	}
	if (rc && rc != -EINPROGRESS && rc != -EINTR && n)
		node_maybe_free(ns, n);
	pthread_mutex_unlock(&ns->lock);
	if (start)
		fetch_go(ns, &fs);
	ns_wake(ns, &wl);
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

void ns_handle_flags(struct ns *ns, struct ns_handle *h, int flags)
{
	if (!h->write || (!(flags & O_APPEND) && (flags & O_ACCMODE) != O_RDWR))
		return;         /* h->write is fixed at open */
	pthread_mutex_lock(&ns->lock);
	h->append = !!(flags & O_APPEND);
	h->mappable = (flags & O_ACCMODE) == O_RDWR;
	pthread_mutex_unlock(&ns->lock);
}

int ns_handle_mappable(struct ns *ns, const struct ns_handle *h)
{
	pthread_mutex_lock(&ns->lock);
	int mappable = h->mappable;
	pthread_mutex_unlock(&ns->lock);
	return mappable;
}

int ns_handle_writing_size(struct ns *ns, const struct ns_handle *h, uint64_t *size)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	if (h->write && h->obj->state == OS_WRITING) {
		*size = h->obj->size;
		rc = 0;
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

void ns_handle_claim(struct ns *ns, struct ns_handle *h, int peer, int excl)
{
	pthread_mutex_lock(&ns->lock);
	if (h->write && ns->set.hooks && ns->set.hooks->claim && ns->set.hooks->published) {
		h->obj->claim = peer + 1;
		h->obj->claim_excl = excl;
	}
	pthread_mutex_unlock(&ns->lock);
}

int ns_handle_claims(struct ns *ns, const struct ns_handle *h)
{
	if (!h->write)          /* fixed at open: a reader's release asks no lock */
		return 0;
	pthread_mutex_lock(&ns->lock);
	int claims = h->obj->claim != 0 || h->obj->refused;
	pthread_mutex_unlock(&ns->lock);
	return claims;
}

int ns_handle_sole(struct ns *ns, const struct ns_handle *h)
{
	pthread_mutex_lock(&ns->lock);
	int sole = h->sole;
	pthread_mutex_unlock(&ns->lock);
	return sole;
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

struct ns_waiter *ns_cancel_tag(struct ns *ns, uint64_t tag)
{
	struct ns_waiter *out = NULL;

	if (!tag)
		return NULL;
	pthread_mutex_lock(&ns->lock);
	for (size_t i = 0; i < ns->waiters.nb; i++) {
		for (struct hlink *l = ns->waiters.b[i], *next; l; l = next) {
			struct ns_waiter *w = (struct ns_waiter *)
				((char *)l - offsetof(struct ns_waiter, byid));
			next = l->next;
			if (w->tag != tag)
				continue;
			waiter_dequeue(ns, w);
			w->next = out;
			out = w;
		}
	}
	pthread_mutex_unlock(&ns->lock);
	return out;
}

int ns_unlink(struct ns *ns, uint64_t parent, const char *name)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	struct node *p = node_by_ino(ns, parent);
	struct node *n = p ? node_child(ns, p, name) : NULL;
	if (p && p->kind != NK_EDGE) {
		rc = p->kind == NK_ROOT || p->kind == NK_STAGE ? -EISDIR : -EACCES;
	} else if (n && n->obj && n->obj->owner >= 0) {
		rc = unlink_remote(ns, n->obj);
	} else if (n && n->obj) {
		obj_remove(ns, n->obj);
		rc = 0;
	}
	ns_unlock(ns);
	return rc;
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
	uint64_t objs, n, now = clock_mono_ns();
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
		snprintf(v[i].peer, sizeof(v[i].peer), "%s", h->served ? "served" :
			 h->obj->owner < 0 ? "local" :
			 ns->set.hooks->peer_name(ns->set.hctx, h->obj->owner));
		v[i].done = h->obj->owner >= 0 && !h->write ? h->obj->have : h->done;
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

/* ---------------------------------------------------------------- views */

int ns_siblings(struct ns *ns, uint64_t ino, char self[NAME_KEY_MAX + 1], uint64_t *edge,
		struct ns_sibling **out, size_t *count)
{
	struct ns_sibling *v = NULL;
	size_t n = 0, cap = 0;
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	struct node *k = node_by_ino(ns, ino);
	if (!k || k->kind != NK_KEY)
		goto unlock;
	rc = 0;
	*edge = k->parent->ino;
	snprintf(self, NAME_KEY_MAX + 1, "%s", k->name);
	for (struct hlink *l = htab_find(&ns->bybase, base_hash(k->parent->ino, k->name)); l;
	     l = htab_next(l)) {
		struct node *m = (struct node *)((char *)l - offsetof(struct node, bybase));
		if (m->parent != k->parent || !m->obj || m->obj->state != OS_PUBLISHED ||
		    !same_base(m->name, k->name))
			continue;
		if (n == cap) {
			struct ns_sibling *nv = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof(*v));
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
		}
		snprintf(v[n].name, sizeof(v[n].name), "%s", m->name);
		v[n++].ino = m->ino;
	}
unlock:
	pthread_mutex_unlock(&ns->lock);
	if (rc) {
		free(v);
		v = NULL;
		n = 0;
	}
	*out = v;
	*count = n;
	return rc;
}

int ns_source_lost(struct ns *ns, struct ns_handle *h)
{
	pthread_mutex_lock(&ns->lock);
	int lost = h->obj->lost;
	pthread_mutex_unlock(&ns->lock);
	return lost;
}

int ns_source_info(struct ns *ns, struct ns_handle *h, struct ns_srcinfo *si)
{
	struct object *o = h->obj;
	int rc = 0;

	pthread_mutex_lock(&ns->lock);
	*si = (struct ns_srcinfo){ .owner = o->owner, .oid = o->oid, .size = o->size };
	if (o->state != OS_PUBLISHED)
		rc = -ENOENT;
	else if (o->kvhdr && !(si->kvhdr = malloc(o->kvhdr_len)))
		rc = -ENOMEM;
	else if (o->kvhdr) {
		memcpy(si->kvhdr, o->kvhdr, o->kvhdr_len);
		si->kvhdr_len = o->kvhdr_len;
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

void ns_source_consumed(struct ns *ns, struct ns_handle *h, const struct ns_cover *c)
{
	struct object *o = h->obj;

	pthread_mutex_lock(&ns->lock);
	if (o->state == OS_PUBLISHED && h->source && !h->counted) {
		h->counted = 1;
		if (o->owner >= 0) {    /* the owner counts for the cluster */
			struct ns_event *e = ev_queue(ns, EV_CONSUMED, o);
			if (e)
				e->cover = *c;
		}
		cover_add(ns, o, c);
	}
	/* The owner's news waits for the next unlock that delivers (at the
	 * latest the view's release): a view's last read counts this before
	 * its reply, which should not wait for a peer. */
	pthread_mutex_unlock(&ns->lock);
}

/* The pool is memory that is in already: a fresh buffer costs a fault and
 * a cleared page every 4 KiB (2 ms a MiB on a VM that hands freed memory
 * back to its host: a 448 MiB view pulled in 1.2 s, 0.13 into the pool)
 * and, over RDMA, a registration. */
void *ns_scratch_get(struct ns *ns, size_t size)
{
	struct pool_usage u;
	uint64_t off, got;

	if (!ns->base || !size)
		return NULL;
	pool_usage(ns->pool, &u);
	if (size > u.free / 2 || pool_alloc(ns->pool, size, size, &off, &got))
		return NULL;
	return ns->base + off;
}

int ns_scratch_put(struct ns *ns, void *p, size_t size)
{
	uint8_t *b = p;

	if (!ns->base || b < ns->base || b >= ns->base + ns->pool_size)
		return 0;
	pool_free(ns->pool, (uint64_t)(b - ns->base), size);
	return 1;
}
