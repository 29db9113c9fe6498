/* ns_remote.c - other nodes' objects in this namespace: their records
 * (from announces and listings), the fetch that brings their bytes, and the
 * cluster's questions about ours (find, list, serve, consumed, removed).
 */
#define _GNU_SOURCE
#include "ns_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kvfmt/kvfmt.h"
#include "../transport/clock.h"
#include "../transport/pool.h"

/* ---------------------------------------------------------------- replicas */

/* The pulled bytes of another node's object stay in our pool for its next
 * reader here (readers: 2, or 0 until rm).  They are only a copy: the
 * owner has them.  So a copy must never be what keeps this node from
 * taking a write or another read: when the pool is short, the least
 * recently opened copy that nothing uses goes, and its next open fetches
 * it again. */

void replica_forget(struct ns *ns, struct object *o)
{
	if (!o->lru_prev && ns->lru_head != o)
		return;                 /* not on the list */
	*(o->lru_prev ? &o->lru_prev->lru_next : &ns->lru_head) = o->lru_next;
	*(o->lru_next ? &o->lru_next->lru_prev : &ns->lru_tail) = o->lru_prev;
	o->lru_prev = o->lru_next = NULL;
}

void replica_touch(struct ns *ns, struct object *o)
{
	replica_forget(ns, o);
	o->lru_prev = ns->lru_tail;
	*(ns->lru_tail ? &ns->lru_tail->lru_next : &ns->lru_head) = o;
	ns->lru_tail = o;
}

/* Nothing but its key holds it: no handle, view, fetch or event.  (A
 * copy leaves the list when its key lets go of it: obj_detach.) */
static int replica_idle(const struct object *o, const struct object *keep)
{
	return o != keep && o->refs == 1 && o->fetch != F_RUNNING;
}

/* Its bytes go back to the pool; its record stays, listed as before. */
static void replica_drop(struct ns *ns, struct object *o)
{
	for (unsigned i = 0; i < o->next; i++)
		pool_free(ns->pool, o->ext[i].off, o->ext[i].len);
	window_room(ns);
	o->next = 0;
	o->cap = 0;
	o->have = 0;
	o->fetch = o->size ? F_NONE : F_DONE;
	replica_forget(ns, o);
}

/* The bytes free now plus those of every idle copy but keep's. */
static uint64_t replica_room(struct ns *ns, const struct object *keep)
{
	struct pool_usage u;
	uint64_t room;

	pool_usage(ns->pool, &u);
	room = u.free;
	for (struct object *o = ns->lru_head; o; o = o->lru_next)
		if (replica_idle(o, keep))
			room += o->cap;
	return room;
}

uint64_t ns_copy_bytes(struct ns *ns)
{
	uint64_t n = 0;

	pthread_mutex_lock(&ns->lock);
	for (struct object *o = ns->lru_head; o; o = o->lru_next)
		n += o->cap;
	pthread_mutex_unlock(&ns->lock);
	return n;
}

/* Drops idle copies, least recently opened first, until need bytes are
 * free for keep.  Drops none if all of them would not make room, since a
 * read that fails anyway should not cost the others their copies.
 * 1 if it dropped any. */
int replica_evict(struct ns *ns, const struct object *keep, uint64_t need)
{
	struct pool_usage u;
	int dropped = 0;

	if (!ns->lru_head || replica_room(ns, keep) < need)
		return 0;
	pool_usage(ns->pool, &u);
	for (struct object *o = ns->lru_head, *nx; o && u.free < need; o = nx) {
		nx = o->lru_next;
		if (replica_idle(o, keep)) {
			u.free += o->cap;
			replica_drop(ns, o);
			stat_add(ns->st, ST_EVICTED, 1);
			dropped = 1;
		}
	}
	return dropped;
}

/* ---------------------------------------------------------------- fetch */

/* Another node's object comes into this node's pool by a fetch, started
 * by the first open that needs it (or by an announce that finds readers
 * waiting).  Opens are answered at the first verified bytes; reads wait
 * for the range they ask, so a reader of a large object starts long before
 * the last byte is in.  A fetch that fails fails its readers with EIO; the
 * next open starts another (fetch_gen tells the two apart). */

/* A fetch that cannot start: a copy that did not get all its bytes gives
 * back those it got.  One that does not fit the pool (held by objects and
 * copies in use) is streamed to each of its readers instead, as a large
 * one is: a read is not refused for room that a copy only would take.
 * Otherwise its waiters hear why. */
static void fetch_refused(struct ns *ns, struct object *o, int rc)
{
	struct ns_wakes wl = { 0 };

	if (o->refs == 1)
		replica_drop(ns, o);
	if (rc == -ENOSPC) {
		char esc[NAME_ESC_MAX];
		fprintf(stderr, "omnifs: %s: its %" PRIu64 " bytes do not fit this node's "
			"pool (%" PRIu64 " free, counting unused copies): streamed to its "
			"readers\n", obj_path_esc(o, esc), o->size, replica_room(ns, o));
		o->nofit = 1;
		wake_readers(ns, o->node, &wl);
	} else {
		wake_key(ns, o->node, rc, &wl);
		stat_add(ns->st, ST_ERRORS, 1);
	}
	pthread_mutex_unlock(&ns->lock);
	ns_wake(ns, &wl);      /* answered with the lock dropped */
	pthread_mutex_lock(&ns->lock);
}

void *land_alloc(struct ns *ns, size_t size)
{
	const struct ns_hooks *hk = ns->set.hooks;

	return hk && hk->buf_alloc ? hk->buf_alloc(ns->set.hctx, size) : malloc(size ? size : 1);
}

void land_free(struct ns *ns, void *buf)
{
	const struct ns_hooks *hk = ns->set.hooks;

	if (hk && hk->buf_free)
		hk->buf_free(ns->set.hctx, buf);
	else
		free(buf);
}

/* Under the lock: reserves the bytes and takes the fetch's reference.
 * 1 if fetch_go() must follow, 0 if it failed (waiters answered). */
int fetch_begin(struct ns *ns, struct object *o, struct fetch_start *fs)
{
	int rc = obj_reserve(ns, o, o->size);

	if (!rc)
		obj_trim(ns, o);        /* a writer's first reserve is larger */
	fs->iov = NULL;
	if (!rc && !(fs->iov = malloc(o->next * sizeof(*fs->iov))))
		rc = -ENOMEM;
	/* A pool the CPU cannot address takes the bytes in one copy once
	 * they are all here and checked (ns_fetch_progress). */
	if (!rc && !ns->base && !(o->stage = land_alloc(ns, o->size)))
		rc = -ENOMEM;
	if (rc) {
		free(fs->iov);
		fetch_refused(ns, o, rc);
		return 0;
	}
	fs->n = 0;
	if (o->stage)
		fs->iov[fs->n++] = (struct iovec){ o->stage, o->size };
	for (unsigned i = 0; !o->stage && i < o->next && o->ext[i].lstart < o->size; i++) {
		uint64_t len = o->ext[i].len;
		if (len > o->size - o->ext[i].lstart)
			len = o->size - o->ext[i].lstart;
		fs->iov[fs->n++] = (struct iovec){ ns->base + o->ext[i].off, len };
	}
	fs->o = o;
	fs->owner = o->owner;
	fs->oid = o->oid;
	fs->size = o->size;
	o->fetch = F_RUNNING;
	o->have = 0;
	o->fetch_gen++;
	o->refs++;              /* the fetch's, until its end is reported */
	replica_touch(ns, o);
	return 1;
}

void fetch_go(struct ns *ns, struct fetch_start *fs)
{
	const struct ns_hooks *hk = ns->set.hooks;
	int rc = hk && hk->fetch ? hk->fetch(ns->set.hctx, fs->owner, fs->oid, fs->size,
					     fs->iov, fs->n, fs->o) : -ENOTCONN;

	free(fs->iov);
	if (rc)
		ns_fetch_progress(ns, fs->o, 0, -EIO);
}

/* Under the lock: waits until [off, off+len) of a remote object is here.
 * 0, or 1 if it never will be (the fetch failed). */
int fetch_wait(struct ns *ns, struct ns_handle *h, uint64_t off, size_t len)
{
	struct object *o = h->obj;
	uint64_t end = off < o->size ? (len > o->size - off ? o->size : off + len) : o->size;

	if (h->write)
		return 0;
	while (o->fetch == F_RUNNING && h->gen == o->fetch_gen && o->have < end)
		pthread_cond_wait(&ns->fcond, &ns->lock);
	return h->gen != o->fetch_gen || o->have < end;
}

static void gone_note(struct ns *ns, int owner, uint64_t oid);

/* Under the lock: a fetch that goes on for nothing: its object left its
 * key (removed, consumed or cleaned up; its owner said GONE), and
 * nothing here holds it but the fetch. */
static int fetch_unwanted(const struct object *o)
{
	return !o->node && o->refs == 1;
}

int ns_fetch_progress(struct ns *ns, void *token, uint64_t upto, int err)
{
	struct object *o = token;
	struct ns_wakes wl = { 0 };
	int final = err || upto >= o->size, unwanted;

	if (o->stage) {         /* bound for a device pool: all of it, or none */
		if (!final) {
			pthread_mutex_lock(&ns->lock);
			unwanted = fetch_unwanted(o);
			pthread_mutex_unlock(&ns->lock);
			return unwanted;
		}
		/* In, and done for a GPU process that maps the pool too
		 * (OMNIFS_IOC_CUDA) before anyone is told it is here. */
		if (!err && (obj_copy_in(ns, o, 0, o->stage, o->size) || pool_sync(ns->pool)))
			err = -EIO;
		land_free(ns, o->stage);
		o->stage = NULL;
	}
	pthread_mutex_lock(&ns->lock);
	if (!err && upto > o->have) {
		o->have = upto;
	}
	if (final)
		o->fetch = err ? F_FAILED : F_DONE;
	if (err == -ENOENT && o->node) {
		/* The owner no longer has it: as at its GONE, the opens
		 * waiting for its bytes wait for the key's next object, and
		 * the peers are asked for one (an rm, a consumption or a
		 * stale answer may have put this one here). */
		gone_note(ns, o->owner, o->oid);
		waiters_reask(ns, o, 0, &wl);
		obj_unlink(ns, o, ST_NONE);
	} else if (o->node && o->node->waiters && (err || o->have)) {
		wake_key(ns, o->node, err ? -EIO : 0, &wl);
	}
	if (err && err != -ENOENT && err != -ECANCELED) /* (those fail no open now) */
		stat_add(ns->st, ST_ERRORS, 1);
	pthread_cond_broadcast(&ns->fcond);
	unwanted = !final && fetch_unwanted(o);
	if (final)
		obj_put(ns, o);
	pthread_mutex_unlock(&ns->lock);
	ns_wake(ns, &wl);
	return unwanted;
}

/* ---------------------------------------------------------------- cluster */

/* The oldest of the gone, out of the table and the list. */
static struct ns_gone *gone_pop(struct ns *ns)
{
	struct ns_gone *g = ns->gone_head;

	htab_del(&ns->gone_byoid, &g->byoid);
	if (!(ns->gone_head = g->next))
		ns->gone_tail = NULL;
	ns->ngone--;
	return g;
}

/* Under the lock: those older than NS_GONE_KEEP_NS go, and the oldest
 * makes room when there are NS_GONE_MAX (or no memory for one more). */
static void gone_note(struct ns *ns, int owner, uint64_t oid)
{
	uint64_t now = clock_mono_ns();
	struct ns_gone *g;

	while (ns->gone_head && now - ns->gone_head->at >= NS_GONE_KEEP_NS)
		free(gone_pop(ns));
	if (!(g = ns->ngone < NS_GONE_MAX ? malloc(sizeof(*g)) : NULL)) {
		if (!ns->gone_head)
			return;         /* out of memory: a late listing may show it */
		g = gone_pop(ns);
	}
	*g = (struct ns_gone){ .at = now, .owner = owner };
	if (ns->gone_tail)
		ns->gone_tail->next = g;
	else
		ns->gone_head = g;
	ns->gone_tail = g;
	ns->ngone++;
	htab_add(&ns->gone_byoid, &g->byoid, oid);
}

void gone_fini(struct ns *ns)
{
	while (ns->gone_head)
		free(gone_pop(ns));
}

/* rm of another node's object: its owner removes it, and says so to all.
 * Gone here at once; the request overtakes nothing this node sends the
 * owner later (one ordered connection), so a listing, a lookup or a new
 * object of the same name from here comes after it.  An answer the owner
 * gave before it, heard only now, finds it gone lately, as it would after
 * the owner's GONE: it does not show up again meanwhile. */
int unlink_remote(struct ns *ns, struct object *o)
{
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1], key[NAME_KEY_MAX + 1];
	struct node *k = o->node;
	struct ns_objinfo info = { .from = from, .to = to, .key = key, .oid = o->oid,
				   .owner = o->owner };
	int rc = -EIO;

	snprintf(from, sizeof(from), "%s", k->parent->parent->name);
	snprintf(to, sizeof(to), "%s", k->parent->name);
	snprintf(key, sizeof(key), "%s", k->name);
	o->refs++;
	pthread_mutex_unlock(&ns->lock);
	if (ns->set.hooks && ns->set.hooks->remove)
		rc = ns->set.hooks->remove(ns->set.hctx, &info);
	pthread_mutex_lock(&ns->lock);
	if (!rc)
		gone_note(ns, o->owner, o->oid);
	if (!rc && o->node)
		obj_remove(ns, o);
	else if (!rc)           /* the owner's GONE took it meanwhile: our rm's */
		stat_add(ns->st, ST_REMOVED, 1);
	obj_put(ns, o);
	return rc;
}

/* The key node of from/to/key, if there is one. */
static struct node *key_node(struct ns *ns, const char *from, const char *to, const char *key)
{
	struct node *n = node_child(ns, ns->root, from);

	if (n && n->kind == NK_STAGE)
		n = node_child(ns, n, to);
	if (n && n->kind == NK_EDGE)
		n = node_child(ns, n, key);
	return n && n->kind == NK_KEY ? n : NULL;
}

/* The KV header an owner sent with its object, if we have none yet. */
static void kvhdr_keep(struct object *o, const struct ns_objinfo *ri)
{
	if (!o->kvhdr && ri->kvhdr_len && ri->kvhdr_len <= KV_HDR_MAX &&
	    (o->kvhdr = malloc(ri->kvhdr_len))) {
		memcpy(o->kvhdr, ri->kvhdr, ri->kvhdr_len);
		o->kvhdr_len = ri->kvhdr_len;
	}
}

/* The bytes a small object's announce or lookup answer brought, for an
 * object with none here yet; checked like pulled ones. */
static void inline_take(struct ns *ns, struct object *o, const struct ns_objinfo *ri)
{
	if (!ri->data || o->fetch != F_NONE)
		return;
	if (obj_reserve(ns, o, ri->size)) {
		replica_drop(ns, o);    /* no room now: fetched by its first open */
		return;
	}
	obj_trim(ns, o);                /* a replica holds its size, not 64 KiB */
	replica_touch(ns, o);
	if (XXH3_64bits(ri->data, ri->size) != ri->xxh3) {
		stat_add(ns->st, ST_CHECKSUM_FAILED, 1);
	} else if (!obj_copy_in(ns, o, 0, ri->data, ri->size)) {
		o->fetch = F_DONE;
		o->have = ri->size;
		stat_add(ns->st, ST_BYTES_PULLED, ri->size);
	}
}

/* A remote object's local record, under key k. */
static struct object *remote_new(struct ns *ns, struct node *k, int owner,
				 const struct ns_objinfo *ri)
{
	struct object *o = obj_new(ns, k, ri->uid, ri->gid);

	if (!o)
		return NULL;
	o->owner = owner;
	o->oid = ri->oid;
	o->state = OS_PUBLISHED;
	o->size = o->front = ri->size;
	o->xxh3 = ri->xxh3;
	o->readers = ri->readers;
	o->reads = ri->reads;
	o->published_ns = ri->published_ns;
	o->fetch = ri->size ? F_NONE : F_DONE;
	npub_add(k, 1);
	kvhdr_keep(o, ri);
	inline_take(ns, o, ri);
	return o;
}

static struct ns_owner owner_of(const struct ns *ns, int owner)
{
	return (size_t)owner < ns->nowners ? ns->owners[owner] : (struct ns_owner){ 0, 0 };
}

static uint32_t owner_gen(const struct ns *ns, int owner)
{
	return owner_of(ns, owner).gen;
}

static int gone_lately(const struct ns *ns, int owner, uint64_t oid, uint64_t now)
{
	for (struct hlink *l = htab_find(&ns->gone_byoid, oid); l; l = htab_next(l)) {
		const struct ns_gone *g = (const struct ns_gone *)((const char *)l -
								     offsetof(struct ns_gone, byoid));
		if (g->owner == owner && now - g->at < NS_GONE_KEEP_NS)
			return 1;
	}
	return 0;
}

/* Whether ours, o, loses to a peer's object ri of its key, by ri's claim
 * (claim) or announce.  Ours that a writer holds open loses to a writer's
 * close decided where the edge's claims meet: the first close wins, so a
 * writer that hangs (a worker whose request was retried elsewhere) neither
 * fails the retry's close nor, killed later, leaves the key published
 * nowhere, nor has its node's readers wait for it.  An O_EXCL put's claim
 * loses to ours, as O_EXCL sees any object; ours closed wins (its claim
 * is on its way), and an undecided announce (the node where claims meet
 * was down) leaves it to the claims, or to the first heard. */
static int ours_loses(const struct object *o, const struct ns_objinfo *ri, int claim)
{
	return o->state == OS_WRITING && (claim ? !ri->excl : ri->decided);
}

/* ns_remote_add, with excl ns_remote_claim, with answer ns_remote_answer. */
static int remote_add(struct ns *ns, int owner, const struct ns_objinfo *ri, int excl,
		      int answer)
{
	struct node *st, *ed, *k;
	struct ns_wakes wl = { 0 };
	struct fetch_start fs;
	int rc, start = 0;

	if (name_check_stage(ri->from) || name_check_stage(ri->to) || name_check_key(ri->key))
		return -EINVAL;
	pthread_mutex_lock(&ns->lock);
	if (answer && gone_lately(ns, owner, ri->oid, clock_mono_ns())) {
		rc = -ENOENT;           /* a late answer about an object gone since */
		goto unlock;
	}
	if ((rc = node_resolve(ns, ns->root, ri->from, NS_LOOKUP_OBJECT, &st)) ||
	    (rc = node_resolve(ns, st, ri->to, NS_LOOKUP_OBJECT, &ed)) ||
	    (rc = node_resolve(ns, ed, ri->key, NS_LOOKUP_WAIT, &k)))
		goto unlock;
	struct object *o = k->obj;
	if (o && o->owner < 0 && !ours_loses(o, ri, excl)) {
		/* Ours stays.  One being written meets the other where the
		 * edge's claims do (cluster_claimer): one of them loses there;
		 * if ours goes unpublished, the peers are asked for theirs
		 * (obj_drop).  Readers here wait for ours meanwhile. */
		rc = o->state == OS_PUBLISHED || excl ? -EEXIST : -EBUSY;
		o->refused |= rc == -EBUSY;
	} else if (excl && o && o->owner >= 0 && (o->owner != owner || o->oid != ri->oid)) {
		rc = -EEXIST;           /* another node's: as O_EXCL sees it */
	} else if (o && o->owner == owner && o->oid == ri->oid) {
		if (!answer)            /* the owner's own word on its connection */
			o->gen = owner_gen(ns, owner);
		else
			o->answered_ns = clock_mono_ns();
		if (ri->reads > o->reads)
			o->reads = ri->reads;
		kvhdr_keep(o, ri);      /* it may have come by a listing, without */
		inline_take(ns, o, ri); /* ... and without its bytes */
	} else {
		if (o && o->owner < 0) {        /* being written: lost (ours_loses) */
			if (!o->error)
				o->error = EEXIST;
			obj_detach(ns, o, ST_ABORTED);
		} else if (o) { /* replaced: k must outlive it (drop: frees it) */
			obj_detach(ns, o, ST_NONE);
		}
		if (!(o = remote_new(ns, k, owner, ri))) {
			rc = -ENOMEM;
			goto drop;
		}
		o->gen = owner_gen(ns, owner);
		o->answered_ns = answer ? clock_mono_ns() : 0;
		wake_sources(ns, k, &wl);
		wake_views(ns, k, &wl);
		if (k->waiters && (o->fetch == F_DONE || obj_streamed(o)))
			wake_readers(ns, k, &wl);       /* here, or streamed at their reads */
		else if (k->waiters)    /* readers are waiting: bring it now */
			start = fetch_begin(ns, o, &fs);
	}
drop:
	node_maybe_free(ns, k);
unlock:
	pthread_mutex_unlock(&ns->lock);
	ns_wake(ns, &wl);
	if (start)
		fetch_go(ns, &fs);
	return rc;
}

int ns_remote_add(struct ns *ns, int owner, const struct ns_objinfo *ri)
{
	return remote_add(ns, owner, ri, 0, 0);
}

int ns_remote_claim(struct ns *ns, int owner, const struct ns_objinfo *ri)
{
	return remote_add(ns, owner, ri, 1, 0);
}

int ns_remote_answer(struct ns *ns, int owner, const struct ns_objinfo *ri)
{
	return remote_add(ns, owner, ri, 0, 1);
}

void ns_remote_gone(struct ns *ns, int owner, const char *from, const char *to,
		    const char *key, uint64_t oid)
{
	pthread_mutex_lock(&ns->lock);
	if (!gone_lately(ns, owner, oid, clock_mono_ns()))      /* our own rm's, often */
		gone_note(ns, owner, oid);
	/* By name, as the owner says it: a scan of every key for the oid
	 * made removing n objects cost n^2. */
	struct node *k = key_node(ns, from, to, key);
	struct ns_wakes wl = { 0 };
	if (k && k->obj && k->obj->owner == owner && k->obj->oid == oid) {
		waiters_reask(ns, k->obj, 0, &wl);      /* another may be there */
		obj_unlink(ns, k->obj, ST_NONE);
	}
	pthread_mutex_unlock(&ns->lock);
	ns_wake(ns, &wl);
}

/* fn(ns, k, arg) for every key node, under the lock; fn may unlink k's
 * object, which may free k and the directories above it. */
static void each_key(struct ns *ns, void (*fn)(struct ns *ns, struct node *k, void *arg),
		     void *arg)
{
	for (struct node *s = ns->root->child, *sn; s; s = sn) {
		sn = s->next;
		for (struct node *e = s->kind == NK_STAGE ? s->child : NULL, *en; e; e = en) {
			en = e->next;
			for (struct node *k = e->child, *kn; k; k = kn) {
				kn = k->next;
				fn(ns, k, arg);
			}
		}
	}
}

struct drop { int owner, kept; uint64_t now; struct ns_wakes wl; };

static void drop_key(struct ns *ns, struct node *k, void *arg)
{
	struct drop *d = arg;

	if (!k->obj || k->obj->owner != d->owner)
		return;
	k->obj->lost = 1;               /* for the views that hold it */
	if (k->obj->state == OS_PUBLISHED) {
		k->lost_ns = d->now;    /* its next open: EIO */
		d->kept = 1;
		/* Opens waiting for room for a window of it: EIO now, as
		 * the open they would make again gets. */
		for (struct ns_waiter *w = k->waiters; w; w = w->next)
			stat_add(ns->st, ST_ERRORS, 1);
		wake_key(ns, k, -EIO, &d->wl);
	}
	obj_unlink(ns, k->obj, ST_LOST);
}

void ns_owner_lost(struct ns *ns, int owner)
{
	struct drop d = { .owner = owner, .now = clock_mono_ns() };

	pthread_mutex_lock(&ns->lock);
	each_key(ns, drop_key, &d);
	if (d.kept) {
		ns_lost_sweep_at(ns, d.now + NS_LOST_KEEP_NS);
		waiters_peer_lost(ns);
	}
	pthread_mutex_unlock(&ns->lock);
	ns_wake(ns, &d.wl);
}

void ns_owner_renew(struct ns *ns, int owner, uint64_t since_ns)
{
	pthread_mutex_lock(&ns->lock);
	if ((size_t)owner >= ns->nowners) {
		struct ns_owner *g = realloc(ns->owners, ((size_t)owner + 1) * sizeof(*g));
		if (!g)
			goto unlock;    /* its records stay until it says them gone */
		memset(g + ns->nowners, 0, ((size_t)owner + 1 - ns->nowners) * sizeof(*g));
		ns->owners = g;
		ns->nowners = (size_t)owner + 1;
	}
	ns->owners[owner].gen++;
	ns->owners[owner].since_ns = since_ns;
unlock:
	pthread_mutex_unlock(&ns->lock);
}

/* What the owner did not say again on its new connection leaves; but
 * what it answered us since that connection was made: it may have
 * answered before we began to serve the connection (we serve it once its
 * old one is drained), and it says again only what we host. */
static void sweep_key(struct ns *ns, struct node *k, void *arg)
{
	int owner = *(int *)arg;
	struct ns_owner ow = owner_of(ns, owner);

	if (k->obj && k->obj->owner == owner && k->obj->gen != ow.gen &&
	    k->obj->answered_ns < ow.since_ns)
		obj_unlink(ns, k->obj, ST_NONE);
}

void ns_owner_swept(struct ns *ns, int owner)
{
	pthread_mutex_lock(&ns->lock);
	each_key(ns, sweep_key, &owner);
	pthread_mutex_unlock(&ns->lock);
}

/* A cover no view makes: its units are heads or ranks, no more than a
 * KV payload or a view's name can have.  A peer that says of = 2^32 - 1
 * must not have us count 4 billion units, under the lock, each time. */
_Static_assert(KV_MAX_RANKS <= KV_MAX_HEADS, "KV_MAX_HEADS bounds a cover of ranks too");
static int cover_bad(const struct ns_cover *c)
{
	return c && c->of && (c->of > KV_MAX_HEADS || c->first >= c->of ||
			      c->n > c->of - c->first);
}

/* Object o was delivered: whole (c NULL or all its units), or units
 * [first, first+n) of `of` by a view.  It counts one read once every unit
 * has been delivered once more; under the lock.  On a reader's node the
 * record of another node's object counts this node's deliveries too, so
 * that a shard its views used up is gone here at once, as a plain key is
 * (count_read), not only once its owner says so. */
int cover_add(struct ns *ns, struct object *o, const struct ns_cover *c)
{
	if (cover_bad(c))
		return -EINVAL;
	if (c && c->of && (c->first || c->n != c->of)) {
		if (!o->cov_of) {
			if (!(o->cov = calloc(c->of, sizeof(*o->cov))))
				return -ENOMEM;
			o->cov_of = c->of;
		}
		if (c->of != o->cov_of)
			return -EINVAL; /* views of another split: not comparable */
		uint32_t min = UINT32_MAX;
		for (uint32_t u = 0; u < o->cov_of; u++) {
			if (u >= c->first && u < c->first + c->n)
				o->cov[u]++;
			if (o->cov[u] < min)
				min = o->cov[u];
		}
		if (min <= o->cov_min)
			return 0;
		o->reads += min - o->cov_min;
		o->cov_min = min;
	} else {
		o->reads++;
	}
	if (o->node && o->readers > 0 && o->reads >= (uint64_t)o->readers)
		obj_unlink(ns, o, o->owner < 0 ? ST_CONSUMED : ST_NONE);
	return 0;
}

/* Under the lock: 1 if peer's read rid of o was counted before, else
 * remembers it (where o is used up by reads: readers > 0).  -ENOMEM.
 * Only the last NS_SEEN_MAX reads are remembered: a read is told again
 * only when its owner's acknowledgement was lost with a connection,
 * milliseconds after it was told first, and a peer that tells us
 * millions of reads of one object (views' partial ones need not use it
 * up) must not have each cost a scan of all the others. */
static int seen_read(struct object *o, int peer, uint64_t rid)
{
	struct seen_read *s;

	for (uint32_t i = 0; i < o->nseen; i++)
		if (o->seen[i].peer == peer && o->seen[i].rid == rid)
			return 1;
	if (o->readers <= 0)
		return 0;
	if (o->nseen == NS_SEEN_MAX) {
		o->seen[o->seen_at] = (struct seen_read){ peer, rid };
		o->seen_at = (o->seen_at + 1) % NS_SEEN_MAX;
		return 0;
	}
	if (!(s = realloc(o->seen, (o->nseen + 1) * sizeof(*s))))
		return -ENOMEM;
	o->seen = s;
	o->seen[o->nseen++] = (struct seen_read){ peer, rid };
	return 0;
}

int ns_consumed(struct ns *ns, uint64_t oid, const struct ns_cover *c, int peer, uint64_t rid)
{
	struct hlink *l;
	int rc = -ENOENT;

	if (cover_bad(c))
		return -EINVAL;         /* and its rid is not remembered */
	pthread_mutex_lock(&ns->lock);
	if ((l = htab_find(&ns->byoid, oid))) {
		struct object *o = (struct object *)((char *)l - offsetof(struct object, byoid));
		if (!(rc = seen_read(o, peer, rid)))
			rc = cover_add(ns, o, c);
		rc = rc > 0 ? 0 : rc;
	}
	ns_unlock(ns);
	return rc;
}

int ns_remove_name(struct ns *ns, const char *from, const char *to, const char *key,
		   uint64_t oid, const struct ns_asker *asker)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	struct node *k = key_node(ns, from, to, key);
	if (k && k->obj && k->obj->owner < 0 && (!oid || k->obj->oid == oid)) {
		if (asker)
			k->obj->asker = *asker;
		obj_unlink(ns, k->obj, ST_REMOVED);
		rc = 0;
	}
	ns_unlock(ns);
	return rc;
}

struct clean { const char *id; const uint8_t *told; uint64_t n; struct ns_wakes wl; };

/* ns_cleanup's step for one key: counts an object of ours it removed. */
static void clean_key(struct ns *ns, struct node *k, void *arg)
{
	struct clean *c = arg;
	struct object *o = k->obj;

	if (!name_of_request(k->name, c->id))
		return;
	if (k->waiters) {       /* opens for a request that is over: no hang */
		wake_key(ns, k, -ENOENT, &c->wl);
		if (!o) {
			node_maybe_free(ns, k);
			return;
		}
	}
	if (!o || (o->owner >= 0 && !(c->told && c->told[o->owner])))
		return;
	if (o->owner >= 0)      /* its GONE may come after a listing */
		gone_note(ns, o->owner, o->oid);
	c->n += o->owner < 0;
	obj_unlink(ns, o, o->owner < 0 ? ST_REMOVED : ST_NONE);
}

uint64_t ns_cleanup(struct ns *ns, const char *id, const uint8_t *told)
{
	struct clean c = { .id = id, .told = told };

	pthread_mutex_lock(&ns->lock);
	if (ended_add(&ns->ended, id, clock_mono_ns())) {
		char esc[NAME_ESC_MAX];
		fprintf(stderr, "omnifs: cleanup of %s: no memory to refuse its later puts\n",
			name_escape(id, esc));
	}
	if (name_stem_finds(id)) {      /* only the keys of its stem */
		struct node *k = node_stem_ring(ns, id), *kn;
		size_t left = 0;
		for (struct node *r = k; r && (!left || r != k); r = r->req_next)
			left++;
		for (; left; left--, k = kn) {
			kn = k->req_next;       /* unlinking frees no other key */
			clean_key(ns, k, &c);
		}
	} else {
		each_key(ns, clean_key, &c);
	}
	ns_unlock(ns);
	ns_wake(ns, &c.wl);
	return c.n;
}

/* What a peer is told of o, but its names. */
static void objinfo_of(const struct object *o, struct ns_objinfo *out)
{
	*out = (struct ns_objinfo){
		.oid = o->oid, .size = o->size, .xxh3 = o->xxh3, .reads = o->reads,
		.published_ns = o->published_ns, .readers = o->readers, .uid = o->uid,
		.gid = o->gid, .owner = o->owner, .kvhdr_len = o->kvhdr_len,
	};
}

static void objinfo(const struct object *o, struct ns_objinfo *out, char names[3][256])
{
	struct node *k = o->node;

	snprintf(names[0], 256, "%s", k->parent->parent->name);
	snprintf(names[1], 256, "%s", k->parent->name);
	snprintf(names[2], 256, "%s", k->name);
	objinfo_of(o, out);
	out->from = names[0];
	out->to = names[1];
	out->key = names[2];
}

int ns_find(struct ns *ns, const char *from, const char *to, const char *key,
	    struct ns_objinfo *out, char names[3][256])
{
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	struct node *k = key_node(ns, from, to, key);
	if (k && k->obj && k->obj->owner < 0 && k->obj->state == OS_PUBLISHED) {
		struct object *o = k->obj;
		objinfo(o, out, names);
		out->kvhdr = NULL;
		if (out->kvhdr_len && (out->kvhdr = malloc(out->kvhdr_len)))
			memcpy((void *)out->kvhdr, o->kvhdr, out->kvhdr_len);
		else
			out->kvhdr_len = 0;
		/* A small one goes with its bytes, as in its announce: a
		 * reader that asked before the announce came needs no pull. */
		void *d = NULL;
		if (o->size && o->size <= NS_INLINE_MAX && (d = malloc(o->size)) &&
		    obj_copy_out(ns, o, 0, d, o->size)) {
			free(d);        /* it is pulled then */
			d = NULL;
		}
		out->data = d;
		rc = 0;
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_exists(struct ns *ns, const char *from, const char *to, const char *key)
{
	pthread_mutex_lock(&ns->lock);
	struct node *k = key_node(ns, from, to, key);
	int rc = k && k->obj ? 0 : -ENOENT;
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

/* An object of ours as collected; its names are at name in the names
 * collected with it (from, to and key, each ending in a NUL): a listing
 * of 100k objects is one small copy each, not three fixed arrays. */
struct own { struct ns_objinfo info; size_t name; int went; };
struct owns { struct own *v; size_t n, cap; char *names; size_t len, size; };

/* Appends the names of k's object to w->names: 0, or -ENOMEM. */
static int own_names(struct owns *w, const struct node *k)
{
	const char *name[3] = { k->parent->parent->name, k->parent->name, k->name };
	size_t len[3], all = 0;

	for (int i = 0; i < 3; i++)
		all += (len[i] = strlen(name[i]) + 1);
	if (w->len + all > w->size) {
		size_t size = w->size ? 2 * w->size : 4096;
		char *nn = realloc(w->names, size += all);
		if (!nn)
			return -ENOMEM;
		w->names = nn;
		w->size = size;
	}
	for (int i = 0; i < 3; i++) {
		memcpy(w->names + w->len, name[i], len[i]);
		w->len += len[i];
	}
	return 0;
}

struct collect { struct owns *w; int kvhdr, full; };

/* Adds k's object, if ours and published; c->full once memory ran out. */
static void own_add(struct node *k, void *arg)
{
	struct collect *c = arg;
	struct owns *w = c->w;
	struct object *o = k->obj;

	if (c->full || !o || o->owner >= 0 || o->state != OS_PUBLISHED)
		return;
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 64;
		struct own *nv = realloc(w->v, cap * sizeof(*nv));
		if (!nv) {
			c->full = 1;
			return;
		}
		w->v = nv;
		w->cap = cap;
	}
	struct own *v = &w->v[w->n];
	v->name = w->len;
	if (own_names(w, k)) {
		c->full = 1;
		return;
	}
	objinfo_of(o, &v->info);
	v->went = 0;
	if (c->kvhdr && o->kvhdr && (v->info.kvhdr = malloc(o->kvhdr_len)))
		memcpy((void *)v->info.kvhdr, o->kvhdr, o->kvhdr_len);
	else
		v->info.kvhdr_len = 0;
	w->n++;
}

/* Our published objects in the scope, copied under the lock (as many as
 * memory allows).  A view's shards come by the base index: a reader
 * elsewhere asks for them on a lookup, and a walk of a large edge for each
 * would hold the lock that long. */
static void own_collect(struct ns *ns, const char *from, const char *to, const char *base,
			int kvhdr, struct owns *w)
{
	struct collect c = { w, kvhdr, 0 };

	for (struct node *s = ns->root->child; s; s = s->next) {
		if (s->kind != NK_STAGE || (*from && strcmp(from, s->name)))
			continue;
		for (struct node *e = s->child; e; e = e->next) {
			if (*to && strcmp(to, e->name))
				continue;
			if (*base)
				node_foreach_shard(ns, e, base, own_add, &c);
			for (struct node *k = *base ? NULL : e->child; k && !c.full; k = k->next)
				own_add(k, &c);
		}
	}
}

/* Still ours and published, as it was when collected? */
static int own_still(struct ns *ns, const struct ns_objinfo *i)
{
	struct node *k = key_node(ns, i->from, i->to, i->key);

	return k && k->obj && k->obj->owner < 0 && k->obj->oid == i->oid &&
	       k->obj->state == OS_PUBLISHED;
}

void ns_foreach_own(struct ns *ns, const char *from, const char *to, const char *base,
		    int kvhdr, void (*fn)(void *arg, const struct ns_objinfo *o),
		    void (*gone)(void *arg, const struct ns_objinfo *o), void *arg)
{
	struct owns w = { 0 };

	pthread_mutex_lock(&ns->lock);
	own_collect(ns, from, to, base, kvhdr, &w);
	pthread_mutex_unlock(&ns->lock);
	struct own *v = w.v;
	size_t n = w.n;
	for (size_t i = 0; i < n; i++) {
		v[i].info.from = w.names + v[i].name;   /* they moved while growing */
		v[i].info.to = v[i].info.from + strlen(v[i].info.from) + 1;
		v[i].info.key = v[i].info.to + strlen(v[i].info.to) + 1;
		fn(arg, &v[i].info);
		free((void *)v[i].info.kvhdr);
		v[i].info.kvhdr = NULL;
	}
	/* One removed since it was collected may have had its GONE sent
	 * before fn's word: said again now, after it.  One removed later
	 * has its own GONE come after fn's. */
	if (gone) {
		pthread_mutex_lock(&ns->lock);
		for (size_t i = 0; i < n; i++)
			v[i].went = !own_still(ns, &v[i].info);
		pthread_mutex_unlock(&ns->lock);
		for (size_t i = 0; i < n; i++)
			if (v[i].went)
				gone(arg, &v[i].info);
	}
	free(w.names);
	free(v);
}

struct waited { char names[3][256]; unsigned ms; };
struct waiteds { struct waited *v; size_t n, cap; uint64_t now; };

/* ns_foreach_waited's step: k, if readers wait for it and no object holds
 * it, with the longest wait left. */
static void waited_key(struct ns *ns, struct node *k, void *arg)
{
	struct waiteds *ws = arg;
	uint64_t until = 0;

	(void)ns;
	for (struct ns_waiter *w = k->obj ? NULL : k->waiters; w; w = w->next)
		if (timer_queued(&w->timer) && w->timer.when > until)
			until = w->timer.when;
	if (until <= ws->now)
		return;
	if (ws->n == ws->cap) {
		struct waited *nv = realloc(ws->v, (ws->cap ? 2 * ws->cap : 16) * sizeof(*nv));
		if (!nv)
			return;         /* that reader waits out its own time */
		ws->v = nv;
		ws->cap = ws->cap ? 2 * ws->cap : 16;
	}
	struct waited *w = &ws->v[ws->n++];
	snprintf(w->names[0], 256, "%s", k->parent->parent->name);
	snprintf(w->names[1], 256, "%s", k->parent->name);
	snprintf(w->names[2], 256, "%s", k->name);
	w->ms = (unsigned)((until - ws->now) / 1000000u) + 1;
}

void ns_foreach_waited(struct ns *ns, void (*fn)(void *arg, const char *from, const char *to,
						const char *key, unsigned ms), void *arg)
{
	struct waiteds ws = { .now = clock_mono_ns() };

	pthread_mutex_lock(&ns->lock);
	each_key(ns, waited_key, &ws);
	pthread_mutex_unlock(&ns->lock);
	for (size_t i = 0; i < ws.n; i++)
		fn(arg, ws.v[i].names[0], ws.v[i].names[1], ws.v[i].names[2], ws.v[i].ms);
	free(ws.v);
}

int ns_serve_open(struct ns *ns, uint64_t oid, struct ns_handle **h, uint64_t *size)
{
	struct hlink *l;
	int rc = -ENOENT;

	pthread_mutex_lock(&ns->lock);
	if ((l = htab_find(&ns->byoid, oid))) {
		struct object *o = (struct object *)((char *)l - offsetof(struct object, byoid));
		if (!(*h = handle_new(ns, o, 0))) {
			rc = -ENOMEM;
		} else {
			(*h)->served = 1;
			handle_unseen(*h);
			*size = o->size;
			rc = 0;
		}
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_serve_map(struct ns *ns, struct ns_handle *h, struct ns_extent *ext, uint32_t max,
		 uint32_t *next, uint64_t first, uint32_t n, uint64_t *hash, uint32_t *nhash)
{
	struct object *o = h->obj;
	uint32_t k = 0;
	int rc = 0;

	pthread_mutex_lock(&ns->lock);
	for (unsigned i = 0; h->served && i < o->next && o->ext[i].lstart < o->size && !rc; i++) {
		uint64_t len = o->ext[i].len < o->size - o->ext[i].lstart ? o->ext[i].len
									 : o->size - o->ext[i].lstart;
		if (k && ext[k - 1].off + ext[k - 1].len == o->ext[i].off)
			ext[k - 1].len += len;
		else if (k < max)
			ext[k++] = (struct ns_extent){ o->ext[i].off, len };
		else
			rc = -E2BIG;
	}
	/* nchunks may count a writer's reserve past the end: the object's own. */
	uint64_t chunks = (o->size + NS_CHUNK - 1) / NS_CHUNK;
	*next = k;
	*nhash = 0;
	for (uint64_t c = first; h->served && c < chunks && c < o->nchunks && *nhash < n; c++)
		hash[(*nhash)++] = o->chunks[c];
	if (!h->served)
		rc = -EINVAL;
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

uint64_t ns_lease_id(struct ns *ns)
{
	return atomic_fetch_add(&ns->next_lease, 1) + 1;
}

int ns_serve_chunk(struct ns *ns, struct ns_handle *h, uint64_t idx,
		   struct iovec *iov, int *n, int max, uint64_t *xxh3)
{
	struct object *o = h->obj;
	uint64_t off = idx * NS_CHUNK;
	size_t len = 0;
	int rc = 0;

	pthread_mutex_lock(&ns->lock);
	if (!h->served || off >= o->size || idx >= o->nchunks) {
		rc = -EINVAL;
	} else {
		len = o->size - off < NS_CHUNK ? o->size - off : NS_CHUNK;
		if (ns->base && obj_iov(ns, o, off, len, iov, n, max) != len)
			rc = -E2BIG;
		*xxh3 = o->chunks[idx];
		h->done += len;
	}
	pthread_mutex_unlock(&ns->lock);
	if (!rc && !ns->base) {         /* a device pool's chunk, through the bounce */
		*n = 1;                 /* h keeps o, published: its extents stay */
		rc = obj_bounce(ns, o, off, len, iov);
	}
	return rc;
}
