/* ns_stream.c - a large remote object streamed to one reader.
 *
 * Copying a large object whole into this node's pool costs a trip through
 * memory for every byte (stored, then read again by the reader's read) and
 * room it may not have.  A reader's handle on one larger than NS_STREAM_MIN,
 * or on one whose copy did not fit (o->nofit: a pool held by objects in
 * use), instead gets a window of up to STREAM_SLOTS slots of STREAM_SLOT
 * bytes in the pool, down to STREAM_SLOTS_MIN where the pool is short,
 * and that many beside it where the pool has no room at all (its objects
 * all in use, waiting for readers elsewhere that a read here must not wait
 * for), up to a quarter of the pool's size in all (OUTSIDE_SHARE), so that
 * the pool's size bounds what its streams take beside it too (past that an
 * open waits for one: ns_wait.c's window_open).  Each slot pulls one aligned
 * piece ahead of the reader, its bytes are received straight into it and
 * stay in cache until the read hands them on, and a slot the reader has
 * left behind pulls the next piece.  Nothing of the object stays here
 * after the read.
 *
 * The pulls run under a lease (lease.h), so the owner keeps the object for
 * this read as an open file would, however long it takes.  The owner
 * grants it at the first pull it serves, so that pull answers the open:
 * an rm that reaches the owner before it fails the open with ENOENT, as
 * it would have a moment earlier, where a handle already given out could
 * only fail its first read with EIO.
 *
 * Reads of one open file take turns, from stream_read until its reply has
 * copied the bytes out (stream_done): a window follows one reader, threads
 * that share a descriptor and jump about would otherwise take each other's
 * slots for ever, and no slot moves on while a reply copies out of it,
 * since only a read in its turn (or the open, before any) recycles slots.
 * The window's memory lives until its last pull has ended, since a pull
 * cannot be called back.  Called with ns->lock held unless said otherwise.
 */
#define _GNU_SOURCE
#include "ns_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "../transport/clock.h"
#include "../transport/pool.h"

#define STREAM_SLOT (2u << 20)          /* whole hashed chunks (NS_CHUNK) */
#define STREAM_SLOTS 4
#define STREAM_SLOTS_MIN 2              /* a read of a piece's length may span two */
#define STREAM_WINDOW ((uint64_t)STREAM_SLOTS * STREAM_SLOT)
#define STREAM_WINDOW_MIN ((uint64_t)STREAM_SLOTS_MIN * STREAM_SLOT)
#define OUTSIDE_SHARE 4                 /* windows beside the pool: pool_size / this */
#define NOWINDOW_SAY_NS (10ull * 1000000000)
_Static_assert(STREAM_SLOT % NS_CHUNK == 0, "the owner sends its kept chunk hashes");
_Static_assert(STREAM_WINDOW < NS_STREAM_MIN, "a streamed object is larger than its window");

enum { SL_FREE, SL_BUSY, SL_DONE };     /* BUSY: its pull is in flight */

struct slot {
	struct stream *s;
	int state, err;
	uint64_t start, len, have;      /* [start, start+len) of the object; have landed */
};

struct stream {
	struct ns *ns;
	int owner, nslots;
	uint64_t oid, size, lease;
	uint64_t poff, plen;            /* the window's place in the pool */
	uint8_t *mem;                   /* ... its bytes: there, or in host memory when
					 * the CPU cannot address the pool or is full */
	int outside;                    /* in host memory beside a full pool (ns->outside) */
	uint64_t pos;                   /* where the latest read began */
	unsigned refs;                  /* the handle's, and each pull's in flight */
	int reading;                    /* a read's turn: stream_read..stream_done */
	struct ns_waiter *opener;       /* the open that the first pull answers ... */
	struct ns_handle *h;            /* ... with this handle (or not) */
	struct stream *pump_next;       /* on an ns_wakes' pump list */
	struct slot slot[STREAM_SLOTS];
};

int obj_streamed(const struct object *o)
{
	return o->owner >= 0 && (o->size > NS_STREAM_MIN || o->nofit);
}

/* A window in the pool: all of it, if need be with unused copies dropped;
 * else as many slots as the pool has room for, STREAM_SLOTS_MIN at least. */
static int window_alloc(struct ns *ns, uint64_t *off, uint64_t *len)
{
	int rc = pool_alloc(ns->pool, STREAM_WINDOW, STREAM_WINDOW, off, len);

	if (rc == -ENOSPC && replica_evict(ns, NULL, STREAM_WINDOW))
		rc = pool_alloc(ns->pool, STREAM_WINDOW, STREAM_WINDOW, off, len);
	if (rc == -ENOSPC)
		rc = pool_alloc(ns->pool, STREAM_WINDOW_MIN, STREAM_WINDOW, off, len);
	return rc;
}

/* Where the window's bytes go: the pool, or host memory (land_alloc: a
 * device pool's windows, and a full pool's up to its share).  0 or -errno,
 * *outside set for the latter kind. */
static int window_take(struct ns *ns, uint8_t **mem, uint64_t *poff, uint64_t *plen,
		       int *outside)
{
	int rc = ns->base ? window_alloc(ns, poff, plen) : 0;

	*outside = 0;
	if (!rc && ns->base) {
		*mem = ns->base + *poff;
		return 0;
	}
	if (rc == -ENOSPC && ns->outside + STREAM_WINDOW_MIN <= ns->pool_size / OUTSIDE_SHARE) {
		*outside = 1;
		*plen = STREAM_WINDOW_MIN;
		rc = 0;
	}
	if (!rc && !(*mem = land_alloc(ns, *plen)))
		rc = -ENOMEM;
	if (!rc && *outside) {
		ns->outside += *plen;
		stat_add(ns->st, ST_WINDOWS_OUTSIDE, 1);
	}
	return rc;
}

int stream_wanted(const struct ns_handle *h)
{
	return !h->write && !h->source && !h->served && obj_streamed(h->obj);
}

static int stream_new(struct ns *ns, struct object *o, struct stream **out)
{
	struct stream *s = calloc(1, sizeof(*s));
	uint64_t poff = 0, plen = STREAM_WINDOW;
	uint8_t *mem = NULL;
	int outside, rc;

	if (!s)
		return -ENOMEM;
	/* A window passes bytes on to the reader's reads: it stays in host
	 * memory, which a device pool is not. */
	if ((rc = window_take(ns, &mem, &poff, &plen, &outside))) {
		free(s);
		return rc;
	}
	*s = (struct stream){ .ns = ns, .owner = o->owner, .oid = o->oid, .size = o->size,
			      .lease = ns_lease_id(ns), .poff = poff, .plen = plen, .mem = mem,
			      .outside = outside, .nslots = (int)(plen / STREAM_SLOT), .refs = 1 };
	for (int i = 0; i < STREAM_SLOTS; i++)
		s->slot[i].s = s;
	*out = s;
	return 0;
}

static void stream_put(struct stream *s)
{
	if (--s->refs)
		return;
	if (s->outside)
		s->ns->outside -= s->plen;
	if (s->ns->base && !s->outside)
		pool_free(s->ns->pool, s->poff, s->plen);
	else
		land_free(s->ns, s->mem);
	window_room(s->ns);
	free(s);
}

void stream_close(struct stream *s, int *owner, uint64_t *lease)
{
	*owner = s->owner;
	*lease = s->lease;
	stream_put(s);
}

static uint8_t *slot_mem(const struct slot *sl)
{
	const struct stream *s = sl->s;

	return s->mem + (uint64_t)(sl - s->slot) * STREAM_SLOT;
}

static struct slot *slot_at(struct stream *s, uint64_t x)
{
	for (int i = 0; i < s->nslots; i++) {
		struct slot *sl = &s->slot[i];
		if (sl->state != SL_FREE && x >= sl->start && x - sl->start < sl->len)
			return sl;
	}
	return NULL;
}

/* The window: nslots pieces from the one the latest read began in. */
static uint64_t window_base(const struct stream *s)
{
	return s->pos / STREAM_SLOT * STREAM_SLOT;
}

static uint64_t window_stop(const struct stream *s)
{
	return window_base(s) + (uint64_t)s->nslots * STREAM_SLOT;
}

/* Frees the slots whose pieces the reader has left behind or jumped past. */
static void stream_recycle(struct stream *s)
{
	uint64_t base = window_base(s), end = window_stop(s);

	for (int i = 0; i < s->nslots; i++) {
		struct slot *sl = &s->slot[i];
		if (sl->state == SL_DONE && (sl->start + sl->len <= base || sl->start >= end))
			sl->state = SL_FREE;
	}
}

/* A free slot for the first piece of the window that none holds, or NULL. */
static struct slot *stream_gap(struct stream *s, uint64_t *piece)
{
	struct slot *free = NULL;
	uint64_t end = window_stop(s);

	for (int i = 0; i < s->nslots && !free; i++)
		if (s->slot[i].state == SL_FREE)
			free = &s->slot[i];
	for (uint64_t x = window_base(s); free && x < end && x < s->size; x += STREAM_SLOT)
		if (!slot_at(s, x)) {
			*piece = x;
			return free;
		}
	return NULL;
}

/* A read refused for want of a window, counted, and said in the log once
 * in NOWINDOW_SAY_NS, as many readers at once may be. */
void stream_refused(struct ns *ns, const struct object *o)
{
	uint64_t now = clock_mono_ns();

	stat_add(ns->st, ST_ERRORS, 1);
	if (ns->nowindow_said_ns && now - ns->nowindow_said_ns < NOWINDOW_SAY_NS)
		return;
	ns->nowindow_said_ns = now;
	char esc[NAME_ESC_MAX];
	fprintf(stderr, "omnifs: %s: no room for a window to stream it to a reader, "
		"in the pool or beside it (%" PRIu64 " bytes beside it, a quarter of the "
		"pool's size): ENOSPC\n", obj_path_esc(o, esc), ns->outside);
}

int stream_open(struct ns *ns, struct object *o, struct ns_waiter *w, struct ns_wakes *wl)
{
	struct stream *s = NULL;       /* set by stream_new (some gcc -O levels cannot tell) */
	uint64_t lease;
	int owner, rc;

	if (!w)
		return -ENOENT;         /* an open that may not wait */
	if ((rc = stream_new(ns, o, &s)))
		return rc;
	if (!(s->h = handle_new(ns, o, 0))) {
		stream_close(s, &owner, &lease);        /* it pulled nothing yet */
		return -ENOMEM;
	}
	s->h->stream = s;
	s->opener = w;
	s->pump_next = wl->pump;
	wl->pump = s;
	return -EINPROGRESS;
}

/* The first pull has bytes (the owner holds the object for this read from
 * now on) or failed: the open hears so.  Only the owner's "no such
 * object" refuses it, and then no lease was granted, so the handle just
 * goes (s may go with it).  Any other failure is the read's to report,
 * EIO, as it would be a moment later. */
static void stream_answer(struct ns *ns, struct stream *s, int err, struct ns_wakes *wl)
{
	struct ns_waiter *w = s->opener;
	struct ns_handle *h = s->h;
	uint64_t lease;
	int owner;

	s->opener = NULL;
	s->h = NULL;
	if (err == -ENOENT) {
		handle_drop(ns, h, &owner, &lease);
		wake_push(wl, w, -ENOENT, NULL);
		return;
	}
	stat_add(ns->st, ST_GETS, 1);
	wake_push(wl, w, 0, h);
}

/* From the transport's thread: a pull moved on, or ended. */
static void stream_progress(void *arg, uint64_t upto, int err)
{
	struct slot *sl = arg;
	struct stream *s = sl->s;
	struct ns *ns = s->ns;
	struct ns_wakes wl = { 0 };

	pthread_mutex_lock(&ns->lock);
	if (!err && upto > sl->have)
		sl->have = upto;
	if (s->opener && (err || upto))
		stream_answer(ns, s, err, &wl);         /* the pull's reference keeps s */
	if (err || upto >= sl->len) {
		sl->state = SL_DONE;
		sl->err = err ? -EIO : 0;
		stream_put(s);          /* s may go */
	}
	pthread_cond_broadcast(&ns->fcond);
	pthread_mutex_unlock(&ns->lock);
	ns_wake(ns, &wl);
}

/* Unlocked: starts the pulls of the window's free slots. */
static void stream_pump(struct ns *ns, struct stream *s)
{
	const struct ns_hooks *hk = ns->set.hooks;

	pthread_mutex_lock(&ns->lock);
	s->refs++;              /* a pull refused at once may free the handle's */
	for (;;) {
		uint64_t x;
		stream_recycle(s);
		struct slot *sl = stream_gap(s, &x);
		if (!sl)
			break;
		*sl = (struct slot){ .s = s, .state = SL_BUSY, .start = x,
				     .len = s->size - x < STREAM_SLOT ? s->size - x : STREAM_SLOT };
		s->refs++;      /* the pull's, until it ends */
		pthread_mutex_unlock(&ns->lock);
		int rc = hk && hk->pull ? hk->pull(ns->set.hctx, s->owner, s->oid, s->lease, sl->start,
						   sl->len, slot_mem(sl), stream_progress, sl)
					: -ENOTCONN;
		if (rc)
			stream_progress(sl, 0, rc);
		pthread_mutex_lock(&ns->lock);
	}
	stream_put(s);
	pthread_mutex_unlock(&ns->lock);
}

void stream_pump_all(struct ns *ns, struct stream *list)
{
	while (list) {
		struct stream *s = list;
		list = s->pump_next;    /* s may go once pumped */
		stream_pump(ns, s);
	}
}

/* 1 once sl's piece has landed up to end, or whole if it ends before. */
static int slot_has(const struct slot *sl, uint64_t end)
{
	uint64_t stop = end < sl->start + sl->len ? end : sl->start + sl->len;

	return sl->start + sl->have >= stop;
}

/* A slot whose pull failed answers one read with its error, then goes, so
 * that a read that tries again pulls again.  That read's turn ends. */
static ssize_t slot_failed(struct ns *ns, struct slot *sl)
{
	sl->state = SL_FREE;
	sl->s->reading = 0;
	pthread_cond_broadcast(&ns->fcond);
	return sl->err;
}

/* Waits for its turn (which it takes) and for [off, end) to land, in the
 * slots *a (at off) and *b (at end - 1): 0, or the error of a slot whose
 * pull failed, and then the turn is over. */
static ssize_t stream_wait(struct ns *ns, struct stream *s, uint64_t off, uint64_t end,
			   struct slot **a, struct slot **b)
{
	uint64_t x;

	while (s->reading)
		pthread_cond_wait(&ns->fcond, &ns->lock);
	s->reading = 1;
	s->pos = off;
	for (;;) {
		stream_recycle(s);
		if (stream_gap(s, &x)) {
			pthread_mutex_unlock(&ns->lock);
			stream_pump(ns, s);
			pthread_mutex_lock(&ns->lock);
			continue;
		}
		*a = slot_at(s, off);
		*b = slot_at(s, end - 1);
		if (*a && (*a)->state == SL_DONE && (*a)->err)
			return slot_failed(ns, *a);
		if (*b && (*b)->state == SL_DONE && (*b)->err)
			return slot_failed(ns, *b);
		if (*a && *b && slot_has(*a, end) && slot_has(*b, end))
			return 0;
		pthread_cond_wait(&ns->fcond, &ns->lock);
	}
}

ssize_t stream_read(struct ns *ns, struct stream *s, uint64_t off, size_t len,
		    struct iovec *iov, int *niov)
{
	uint64_t end = off + (len < STREAM_SLOT ? len : STREAM_SLOT);
	struct slot *a, *b;
	ssize_t rc = stream_wait(ns, s, off, end, &a, &b);

	if (rc)
		return rc;
	iov[0] = (struct iovec){ slot_mem(a) + (off - a->start),
				 (a == b ? end : a->start + a->len) - off };
	*niov = 1;
	if (b != a)
		iov[(*niov)++] = (struct iovec){ slot_mem(b), end - b->start };
	return (ssize_t)(end - off);
}

/* OMNIFS_IOC_WINDOW's (ns_direct_window): where the bytes from off on lie
 * in the pool once want of them (at least 1; fewer where their slot ends
 * first) have landed: *poff, and how many, up to the end of their slot.
 * The turn is a read's, taken here and ended by the caller's next range or
 * its release (stream_done), so that the slot stays while the process
 * copies out of it. */
ssize_t stream_window(struct ns *ns, struct stream *s, uint64_t off, uint64_t want,
		      uint64_t *poff)
{
	uint64_t end = off + (want ? want : 1), stop = (off / STREAM_SLOT + 1) * STREAM_SLOT;
	struct slot *a, *b;
	ssize_t rc;

	if (end > stop)         /* slots hold aligned pieces */
		end = stop;
	if (end > s->size)
		end = s->size;
	if ((rc = stream_wait(ns, s, off, end, &a, &b)))
		return rc;
	*poff = (uint64_t)(slot_mem(a) - ns->base) + (off - a->start);
	return (ssize_t)(a->start + a->have - off);
}

uint64_t ns_outside_bytes(struct ns *ns)
{
	pthread_mutex_lock(&ns->lock);
	uint64_t n = ns->outside;
	pthread_mutex_unlock(&ns->lock);
	return n;
}

int stream_in_pool(const struct ns *ns, const struct stream *s)
{
	return ns->base && !s->outside;
}

int stream_reading(const struct stream *s)
{
	return s->reading;
}

void stream_done(struct ns *ns, struct stream *s)
{
	s->reading = 0;
	pthread_cond_broadcast(&ns->fcond);     /* the next read's turn */
}
