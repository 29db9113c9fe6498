/* ns_wait.c - opens that wait: for a key to be published, for a remote
 * object's first bytes, or for room for a stream's window; and the deadline
 * thread that ends those waits, expires objects and forgets lost keys.
 *
 * A waiter is queued on its key under the namespace's lock, in the id
 * table (an interrupted request finds it) and in the deadline heap.  It
 * is answered after the lock is dropped (ns_wake): the answer is a FUSE
 * reply, a peer's message or a view's next step, none of which may run
 * under the lock.
 */
#define _GNU_SOURCE
#include "ns_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include "../transport/clock.h"

void wake_push(struct ns_wakes *wl, struct ns_waiter *w, int err, struct ns_handle *h)
{
	w->wake_err = err;
	w->wake_h = h;
	w->next = wl->head;
	wl->head = w;
}

void ns_wake(struct ns *ns, struct ns_wakes *wl)
{
	if (wl->deliver) {
		wl->deliver = 0;
		ns_deliver(ns);
	}
	if (wl->pump) {                 /* windows whose first pulls answer their opens */
		struct stream *s = wl->pump;
		wl->pump = NULL;
		stream_pump_all(ns, s);
	}
	while (wl->head) {
		struct ns_waiter *w = wl->head;
		wl->head = w->next;
		w->next = NULL;
		if (w->done)
			w->done(w, w->wake_err, w->wake_h);
		else
			ns->set.wake(w, w->wake_err, w->wake_h);
	}
	while (wl->asks) {
		struct ns_event *e = wl->asks;
		wl->asks = e->next;
		ns->set.hooks->reask(ns->set.hctx, e->from, e->to, e->key, e->wait_ms);
		free(e);
	}
}

/* Takes w out of its key's queue, the id table and the heap. */
void waiter_dequeue(struct ns *ns, struct ns_waiter *w)
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

/* When w's wait on n ends; 0 if it may not wait at all. */
static int waiter_deadline(struct ns *ns, struct node *n, struct ns_waiter *w, int fetch,
			   uint64_t *deadline)
{
	struct ns_policy p = policy_of(ns, n->parent);

	if (!w)
		return 0;
	if (w->wait_ms > 0)
		p.wait_ms = w->wait_ms;         /* the opener armed its own (callwait.h) */
	if (fetch && p.wait_ms <= 0)
		p.wait_ms = FETCH_WAIT_MS;      /* published: waits for its bytes */
	if (p.wait_ms <= 0)
		return 0;
	w->capped = ns->set.max_wait_ms > 0 && p.wait_ms > ns->set.max_wait_ms;
	w->cut = 0;
	if (w->capped)
		p.wait_ms = ns->set.max_wait_ms;
	*deadline = clock_mono_ns() + (uint64_t)p.wait_ms * 1000000u;
	return 1;
}

/* Queues w on n until deadline (counted in waits if fresh). */
static int waiter_enqueue(struct ns *ns, struct node *n, struct ns_waiter *w, int flags,
			  uint64_t deadline, int fresh)
{
	w->type = T_WAITER;
	w->ino = n->ino;
	w->flags = flags;
	w->prev = NULL;
	w->next = n->waiters;
	if (n->waiters)
		n->waiters->prev = w;
	n->waiters = w;
	htab_add(&ns->waiters, &w->byid, w->id);
	w->timer.idx = TIMER_IDLE;
	if (timerq_add(&ns->tq, &w->timer, deadline)) {
		n->waiters = w->next;
		if (w->next)
			w->next->prev = NULL;
		htab_del(&ns->waiters, &w->byid);
		return -ENOMEM;
	}
	stat_add(ns->st, ST_WAITERS, 1);
	if (fresh)
		stat_add(ns->st, ST_WAITS, 1);
	if (w->interrupted && w->interrupted(w)) {
		waiter_dequeue(ns, w);
		return -EINTR;
	}
	if (timerq_peek(&ns->tq) == &w->timer)
		pthread_cond_signal(&ns->cond);
	return -EINPROGRESS;
}

/* Queues an open on key n until it is published, or (fetch) until a
 * remote object's first bytes are here. */
int waiter_queue(struct ns *ns, struct node *n, struct ns_waiter *w, int fetch,
			int flags)
{
	uint64_t deadline;

	if (!waiter_deadline(ns, n, w, fetch, &deadline))
		return -ENOENT;         /* an open that may not wait */
	w->window = 0;
	return waiter_enqueue(ns, n, w, flags, deadline, 1);
}

/* A reader's open of key's streamed object: answered by its window's
 * first pull (stream_open), or, where no window has room in the pool or
 * beside it, queued on the key again until room comes back (window_retry)
 * or its deadline passes (then ENOSPC): a read waits for memory that other
 * reads are sure to give back rather than fail.  A first wait's deadline
 * is the edge's wait_ms (or the opener's own) from now. */
int window_open(struct ns *ns, struct node *key, struct ns_waiter *w, int flags,
		       const uint64_t *deadline, struct ns_wakes *wl)
{
	uint64_t until;
	int rc = stream_open(ns, key->obj, w, wl);

	if (rc != -ENOSPC)
		return rc;
	if (deadline)
		until = *deadline;
	else if (!waiter_deadline(ns, key, w, 0, &until)) {
		stream_refused(ns, key->obj);
		return -ENOSPC;
	}
	w->window = 1;
	ns->window_waiting = 1;
	return waiter_enqueue(ns, key, w, flags, until, !deadline);
}

/* Under the lock: pool room or a window came back.  Opens waiting for a
 * window try again on the deadline thread, which answers them. */
void window_room(struct ns *ns)
{
	if (ns->window_waiting && !ns->window_retry) {
		ns->window_retry = 1;
		pthread_cond_signal(&ns->cond);
	}
}

static int by_deadline(const void *a, const void *b)
{
	uint64_t x = (*(struct ns_waiter *const *)a)->timer.when;
	uint64_t y = (*(struct ns_waiter *const *)b)->timer.when;

	return (x > y) - (x < y);
}

/* The opens waiting for a window: how many, and, into v where given, which. */
static size_t window_collect(struct ns *ns, struct ns_waiter **v)
{
	size_t n = 0;

	for (size_t i = 0; i < ns->waiters.nb; i++)
		for (struct hlink *l = ns->waiters.b[i]; l; l = l->next) {
			struct ns_waiter *w = (struct ns_waiter *)
				((char *)l - offsetof(struct ns_waiter, byid));
			if (w->window && v)
				v[n] = w;
			n += w->window != 0;
		}
	return n;
}

/* Under the lock: a peer was lost; the waiters that asked are told. */
void waiters_peer_lost(struct ns *ns)
{
	for (size_t i = 0; i < ns->waiters.nb; i++)
		for (struct hlink *l = ns->waiters.b[i]; l; l = l->next) {
			struct ns_waiter *w = (struct ns_waiter *)
				((char *)l - offsetof(struct ns_waiter, byid));
			if (w->peer_lost)
				w->peer_lost(w);
		}
}

/* The *n opens waiting for a window, earliest deadline (about: longest
 * waiting) first, in a NULL-ended array; NULL when there are none or no
 * memory (the next room retries).  Collected first: one queued again may
 * land in a bucket not yet seen. */
static struct ns_waiter **window_waiters(struct ns *ns, size_t *n)
{
	struct ns_waiter **v;

	if (!(*n = window_collect(ns, NULL)) || !(v = malloc((*n + 1) * sizeof(*v))))
		return NULL;
	window_collect(ns, v);
	v[*n] = NULL;
	qsort(v, *n, sizeof(*v), by_deadline);
	return v;
}

/* The deadline thread's, for window_room(): each open waiting for a
 * window tries again, longest waiting first; one that still finds no room
 * waits on until its deadline. */
static void window_retry(struct ns *ns, struct ns_wakes *wl)
{
	size_t n = 0;
	struct ns_waiter **v = window_waiters(ns, &n);

	ns->window_retry = 0;
	ns->window_waiting = n > 0;
	for (struct ns_waiter **p = v; p && *p; p++) {
		struct ns_waiter *w = *p;
		struct node *key = node_by_ino(ns, w->ino);
		uint64_t deadline = w->timer.when;
		int flags = w->flags;
		if (!key || !key->obj || key->obj->state != OS_PUBLISHED || !obj_streamed(key->obj)) {
			w->window = 0;  /* a new object of its key's: waits for it */
			continue;
		}
		waiter_dequeue(ns, w);  /* (the key stays: it has an object) */
		int rc = window_open(ns, key, w, flags, &deadline, wl);
		if (rc != -EINPROGRESS)
			wake_push(wl, w, rc, NULL);
	}
	free(v);
}

/* Answers the opens waiting on a key: with a handle on its object, or
 * with err.  A reader of a streamed object is answered later, by its
 * window's first pull (window_open).  The queue is taken whole first: an
 * open with no room for a window joins the key's queue again. */
void wake_key(struct ns *ns, struct node *key, int err, struct ns_wakes *wl)
{
	struct ns_waiter *list = key->waiters;

	key->waiters = NULL;            /* the key stays: it has an object */
	while (list) {
		struct ns_waiter *w = list;
		list = w->next;
		htab_del(&ns->waiters, &w->byid);
		timerq_del(&ns->tq, &w->timer);
		stat_sub(ns->st, ST_WAITERS, 1);
		if (!err && obj_streamed(key->obj) && !(w->flags & (NS_OPEN_SOURCE | NS_OPEN_HERE))) {
			uint64_t deadline = w->timer.when;
			int rc = window_open(ns, key, w, w->flags, &deadline, wl);
			if (rc != -EINPROGRESS)
				wake_push(wl, w, rc, NULL);
			continue;
		}
		struct ns_handle *h = err ? NULL : handle_new(ns, key->obj, 0);
		if (h) {
			if (w->flags & NS_OPEN_SOURCE)
				handle_source(h);
			stat_add(ns->st, ST_GETS, 1);
		}
		wake_push(wl, w, err ? err : h ? 0 : -ENOMEM, h);
	}
}

void wake_readers(struct ns *ns, struct node *key, struct ns_wakes *wl)
{
	wake_key(ns, key, 0, wl);
}

/* Answers the opens on key that only want it published (a view's
 * sources): a remote object need not be fetched for them. */
void wake_sources(struct ns *ns, struct node *key, struct ns_wakes *wl)
{
	for (struct ns_waiter *w = key->waiters, *next; w; w = next) {
		next = w->next;
		if (!(w->flags & NS_OPEN_SOURCE))
			continue;
		struct ns_handle *h = handle_new(ns, key->obj, 0);
		waiter_dequeue(ns, w);
		if (h)
			handle_source(h);
		wake_push(wl, w, h ? 0 : -ENOMEM, h);
	}
}

/* k was published here or heard of: opens waiting on other names of its
 * base may now be views of it; they are told to look again (-EAGAIN). */
void wake_views(struct ns *ns, struct node *k, struct ns_wakes *wl)
{
	for (struct hlink *l = htab_find(&ns->bybase, base_hash(k->parent->ino, k->name)), *ln;
	     l; l = ln) {
		struct node *n = (struct node *)((char *)l - offsetof(struct node, bybase));
		ln = htab_next(l);      /* n goes when its last waiter does */
		if (n == k || n->obj || n->parent != k->parent || !same_base(n->name, k->name))
			continue;
		for (struct ns_waiter *w = n->waiters, *next; w; w = next) {
			next = w->next;
			if (w->flags & NS_OPEN_EXACT)
				continue;
			waiter_dequeue(ns, w);
			wake_push(wl, w, -EAGAIN, NULL);
		}
	}
}

/* ---------------------------------------------------------------- deadlines */

/* Forgets the keys lost NS_LOST_KEEP_NS ago; comes back for the others. */
static void lost_sweep(struct ns *ns, uint64_t now)
{
	uint64_t next = 0;

	for (struct node *s = ns->root->child, *sn; s; s = sn) {
		sn = s->next;           /* freeing a key may free its edge and stage */
		for (struct node *e = s->kind == NK_STAGE ? s->child : NULL, *en; e; e = en) {
			en = e->next;
			for (struct node *k = e->child, *kn; k; k = kn) {
				kn = k->next;
				if (!k->lost_ns)
					continue;
				if (now - k->lost_ns < NS_LOST_KEEP_NS) {
					if (!next || k->lost_ns < next)
						next = k->lost_ns;
					continue;
				}
				k->lost_ns = 0;
				node_maybe_free(ns, k);
			}
		}
	}
	if (next)
		ns_lost_sweep_at(ns, next + NS_LOST_KEEP_NS);
}

void ns_lost_sweep_at(struct ns *ns, uint64_t when)
{
	if (timer_queued(&ns->lost_sweep.t))
		return;
	if (!timerq_add(&ns->tq, &ns->lost_sweep.t, when) && timerq_peek(&ns->tq) == &ns->lost_sweep.t)
		pthread_cond_signal(&ns->cond);
}

/* A waiter's time is up.  If its key was published in time and only its
 * bytes are still coming, it is not "not published within wait_ms"
 * (SPEC §9): the pull's own end answers it, and the transport bounds
 * that (a peer silent for dead_ms, an owner lost), as it bounds a read's
 * wait in fetch_wait().  Its timer only looks again later.  1 if so. */
static int waiter_fetching(struct ns *ns, struct ns_waiter *w, uint64_t now)
{
	struct node *n = node_by_ino(ns, w->ino);
	struct object *o = n ? n->obj : NULL;

	if (!o || o->state != OS_PUBLISHED || o->owner < 0 || o->fetch != F_RUNNING)
		return 0;
	timerq_del(&ns->tq, &w->timer);
	if (timerq_add(&ns->tq, &w->timer, now + (uint64_t)FETCH_WAIT_MS * 1000000u))
		return 0;       /* no room to look again: answered as before */
	return 1;
}

/* An open that waited for room for a window until its deadline. */
static void window_expired(struct ns *ns, struct ns_waiter *w, struct ns_wakes *wl)
{
	struct node *key = node_by_ino(ns, w->ino);

	if (key && key->obj)
		stream_refused(ns, key->obj);
	else
		stat_add(ns->st, ST_ERRORS, 1);
	waiter_dequeue(ns, w);
	wake_push(wl, w, -ENOSPC, NULL);
}

static void expire_due(struct ns *ns, uint64_t now, struct ns_wakes *wl)
{
	struct timer *t;

	while ((t = timerq_peek(&ns->tq)) && t->when <= now) {
		struct timed *td = (struct timed *)t;
		if (td->type == T_WAITER) {
			struct ns_waiter *w = (struct ns_waiter *)t;
			if (waiter_fetching(ns, w, now))
				continue;
			if (w->window) {
				window_expired(ns, w, wl);
				continue;
			}
			waiter_dequeue(ns, w);
			stat_add(ns->st, ST_WAIT_TIMEOUTS, 1);
			stat_add(ns->st, ST_ERRORS, 1);
			w->cut = w->capped;
			wake_push(wl, w, -ENOENT, NULL);
		} else if (td->type == T_SWEEP) {
			timerq_del(&ns->tq, t);
			lost_sweep(ns, now);
		} else {
			timerq_del(&ns->tq, t);
			obj_unlink(ns, (struct object *)t, ST_EXPIRED);
		}
	}
}

void *deadline_thread(void *arg)
{
	struct ns *ns = arg;

	pthread_setname_np(pthread_self(), "omni-deadline");
	pthread_mutex_lock(&ns->lock);
	while (!ns->stopping) {
		struct ns_wakes wl = { 0 };
		struct timer *t = timerq_peek(&ns->tq);
		uint64_t now = clock_mono_ns();
		if (ns->window_retry) {
			window_retry(ns, &wl);
		} else if (!t) {
			pthread_cond_wait(&ns->cond, &ns->lock);
			continue;
		} else if (t->when > now) {
			struct timespec ts = { (time_t)(t->when / 1000000000u),
					       (long)(t->when % 1000000000u) };
			pthread_cond_timedwait(&ns->cond, &ns->lock, &ts);
			continue;
		} else {
			expire_due(ns, now, &wl);
		}
		ns_unlock(ns);
		ns_wake(ns, &wl);
		pthread_mutex_lock(&ns->lock);
	}
	pthread_mutex_unlock(&ns->lock);
	return NULL;
}
