/* ns_io.c - a handle's bytes: writes into the pool, reads out of it, and
 * the close that publishes: the object trimmed, hashed, checked as KV,
 * claimed where a peer arbitrates its name, then made visible and its
 * waiters answered.  A reader's complete read counts towards consumption
 * here too.  Part of the namespace (ns.c): its lock and structs, from
 * ns_internal.h.
 *
 * Bytes move with ns's lock dropped: a write reserves its extents under
 * it and copies after, a read of a published (immutable) object takes
 * only the extent pointers, and publish hashes unlocked.
 */
#define _GNU_SOURCE
#include "ns_internal.h"
#include "../transport/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "../kvfmt/kvfmt.h"
#include "../transport/clock.h"

/* ---------------------------------------------------------------- publish */

/* o leaves its key while opens wait there (for it, or for the key), or
 * (refused) a peer's object of its name was refused for it: the peers
 * are asked for theirs once the lock is dropped (wl: hooks->reask), for
 * as long as the opens still wait.  A node that hosts no <to> hears of
 * no publish, and an answer it took may have been older than one it
 * dropped for it: without asking, its readers waited out wait_ms while
 * the key was there. */
void waiters_reask(struct ns *ns, struct object *o, int refused, struct ns_wakes *wl)
{
	uint64_t now = clock_mono_ns(), until = now;
	struct ns_event *e;

	for (struct ns_waiter *w = o->node ? o->node->waiters : NULL; w; w = w->next)
		if (timer_queued(&w->timer) && w->timer.when > until)
			until = w->timer.when;
	if ((refused || until > now) && (e = ev_new(ns, EV_REASK, o))) {
		e->wait_ms = until > now ? (unsigned)((until - now) / 1000000u) + 1 : 0;
		e->next = wl->asks;
		wl->asks = e;
	}
}

/* o, written here and never published, goes. */
static void obj_drop(struct ns *ns, struct object *o, struct ns_wakes *wl)
{
	waiters_reask(ns, o, o->refused, wl);
	obj_abort(ns, o);
}

/* Bytes of o for kvfmt, with ns unlocked: o's extents are final.  From a
 * pool the CPU cannot address they come through the thread's bounce. */
struct obj_at { struct ns *ns; struct object *o; };
static const void *obj_at(void *arg, uint64_t off, uint64_t *len)
{
	struct obj_at *a = arg;
	struct ns_span sp;
	struct iovec iov;
	int n;

	if (off >= a->o->size || !obj_spans(a->o, off, a->o->size - off, &sp, &n, 1))
		return NULL;
	*len = sp.len < NS_BOUNCE || a->ns->base ? sp.len : NS_BOUNCE;
	if (a->ns->base)
		return a->ns->base + sp.off;
	return obj_bounce(a->ns, a->o, off, *len, &iov) ? NULL : iov.iov_base;
}

/* A payload that calls itself KV (SPEC §6) must match its own header:
 * else it is torn and not published (EIO).  Keeps the header (not for a
 * payload of missing layers only: it publishes as plain bytes).  Unlocked. */
static int kv_check(struct ns *ns, struct object *o)
{
	struct obj_at a = { ns, o };
	struct kv_info kv;
	uint8_t head[KV_HDR_FIXED], *hdr;
	uint64_t need, n = o->size < sizeof(head) ? o->size : sizeof(head);
	char err[160];
	int rc;

	if (!o->size || kv_read(obj_at, &a, 0, n, head) || kv_sniff(head, n) == KV_FMT_NONE)
		return 0;
	if (kv_need(head, n, &need) || need > o->size) {
		snprintf(err, sizeof(err), "header length out of range");
		goto torn;
	}
	if (!(hdr = malloc(need)))
		return -ENOMEM;
	kv_read(obj_at, &a, 0, need, hdr);
	rc = kv_parse(hdr, need, o->size, &kv, err, sizeof(err));
	if (!rc)
		rc = kv_verify(&kv, obj_at, &a, err, sizeof(err));
	kv_free(&kv);
	if (rc == -ENODATA) {   /* no layer at all: whole, but no views of it */
		free(hdr);
		return 0;
	}
	if (rc) {
		free(hdr);
		if (rc == -ENOMEM)
			return rc;
		goto torn;
	}
	o->kvhdr = hdr;
	o->kvhdr_len = (uint32_t)need;
	return 0;
torn:
	if (o->node) {
		char esc[NAME_ESC_MAX];
		fprintf(stderr, "omnifs: %s: torn KV payload, not published: %s\n",
			obj_path_esc(o, esc), err);
	}
	return -EIO;
}

/* Asks the peer that o's claim names (ns_handle_claim) to take o, with ns
 * unlocked and o whole, hashed and checked: 0 (the peer has it), -EEXIST
 * (a node has an object of its name: nothing is left anywhere), or
 * another error (then o is published as if never claimed). */
static int obj_claim(struct ns *ns, struct object *o, struct ns_event *c, uint64_t h)
{
	c->info.xxh3 = h;
	c->info.published_ns = clock_wall_ns();
	c->info.kvhdr = o->kvhdr;
	c->info.kvhdr_len = o->kvhdr_len;
	c->info.excl = o->claim_excl;
	return ns->set.hooks->claim(ns->set.hctx, o->claim - 1, &c->info);
}

/* o, hashed to h and checked, is published at wall time when; indexed:
 * it is in byoid already (its claim went out). */
static void obj_published(struct ns *ns, struct object *o, uint64_t h, uint64_t when,
			  int indexed)
{
	struct ns_policy p = policy_of(ns, o->node->parent);

	o->xxh3 = h;
	o->state = OS_PUBLISHED;
	o->published_ns = when;
	if (o->readers < 0)
		o->readers = p.readers;
	o->ttl_s = p.ttl_s;
	if (p.ttl_s > 0 && !timerq_add(&ns->tq, &o->ttl,
				       clock_mono_ns() + (uint64_t)p.ttl_s * 1000000000u) &&
	    timerq_peek(&ns->tq) == &o->ttl)
		pthread_cond_signal(&ns->cond);
	npub_add(o->node, 1);
	if (!indexed)
		htab_add(&ns->byoid, &o->byoid, o->oid);
	stat_add(ns->st, ST_PUBLISHED, 1);
	stats_observe(ns->st, H_PUBLISH, clock_mono_ns() - o->created_ns);
}

/* Publishes o: trims its reserve, hashes it with the lock dropped (the
 * bytes are final: every writer has closed), has it claimed if it is to
 * be (obj_claim), then makes it visible and answers its waiters.  Called
 * and returns locked. */
static void obj_publish(struct ns *ns, struct object *o, struct ns_wakes *wl)
{
	struct ns_event *c = NULL;      /* the claim, then the announce */
	int claimed = 0, indexed = 0, refused = 0;

	o->state = OS_PUBLISHING;       /* the hasher starts no new step */
	while (o->hashing)
		pthread_cond_wait(&ns->hdone, &ns->lock);
	obj_trim(ns, o);
	int hrc = 0;
	if (o->claim && !(c = ev_new(ns, EV_PUBLISHED, o))) {
		hrc = -ENOMEM;          /* unasked, it must not be published */
	} else if (c) {
		/* The claim's peer wakes its readers at once: their
		 * complete reads may come back before the claim's answer,
		 * and must find o (ns_consumed) to count. */
		if (o->readers < 0)
			o->readers = policy_of(ns, o->node->parent).readers;
		c->info.readers = o->readers;
		htab_add(&ns->byoid, &o->byoid, o->oid);
		indexed = 1;
	}
	o->refs++;
	pthread_mutex_unlock(&ns->lock);
	uint64_t h = 0;
	if (!hrc)
		hrc = obj_hash(ns, o, &h);
	if (!hrc)
		hrc = kv_check(ns, o);
	if (!hrc)       /* a device's copies done, for other processes too */
		hrc = pool_sync(ns->pool) ? -EIO : 0;
	if (!hrc && c) {
		int crc = obj_claim(ns, o, c, h);
		claimed = crc == 0;
		if ((refused = crc == -EEXIST))
			hrc = crc;      /* a node has one: nothing is left */
	}
	pthread_mutex_lock(&ns->lock);
	if (hrc) {      /* no chunk table, a torn KV payload, claimed */
		o->refused |= refused;  /* the winner's announce may have been */
		obj_drop(ns, o, wl);
		o->error = -hrc;
	} else if (o->state == OS_PUBLISHING && o->node) {     /* not removed meanwhile */
		obj_published(ns, o, h, claimed ? c->info.published_ns : clock_wall_ns(), indexed);
		if (claimed) {  /* announced to all but the claim's peer */
			c->info.claimed = o->claim;
			ev_push(ns, c);
			c = NULL;
		} else {
			ev_queue(ns, EV_PUBLISHED, o);
		}
		wake_readers(ns, o->node, wl);
		wake_views(ns, o->node, wl);
	} else if (claimed) {   /* removed (or consumed) while the claim went: take it back */
		c->type = EV_GONE;
		ev_push(ns, c);
		c = NULL;
	}
	if (indexed && o->state != OS_PUBLISHED)   /* only published ones stay */
		htab_del(&ns->byoid, &o->byoid);
	ev_free(ns, c);
	obj_put(ns, o);
}

/* A complete read counts towards consumption, once: by the read that
 * completes it (read_seen), or at the handle's close.  The reader is done
 * with the object then, so its file no longer counts as open on it (an
 * fstat() through it may say ENOENT after that: README, "Consume").  The
 * owner's news waits in the queue for the next unlock that delivers it: at
 * the latest the reader's release, which its close sends without waiting. */
static void count_read(struct ns *ns, struct ns_handle *h)
{
	struct object *o = h->obj;

	if (h->write || h->served || h->source || h->counted || o->state != OS_PUBLISHED ||
	    !rangeset_covers(&h->seen, 0, o->size))
		return;
	h->counted = 1;
	handle_unseen(h);
	o->reads++;
	stats_observe(ns->st, H_READ, clock_mono_ns() - h->opened_ns);
	if (o->owner >= 0)              /* the owner counts for the cluster */
		ev_queue(ns, EV_CONSUMED, o);
	if (o->node && o->readers > 0 && o->reads >= (uint64_t)o->readers)
		obj_unlink(ns, o, o->owner < 0 ? ST_CONSUMED : ST_NONE);
}

/* Reader h has had [off, end) of its object.  The read that completes it
 * counts at once, not at the close: so a reader's file needs no FLUSH
 * (ops.c opens it with noflush), and its close no round trip to us. */
void read_seen(struct ns *ns, struct ns_handle *h, uint64_t off, uint64_t end)
{
	rangeset_add(&h->seen, off, end);
	count_read(ns, h);
}


/* ---------------------------------------------------------------- bytes */

/* Zeros [off, off+len) of the object (a hole a write left).  Called
 * locked: the pool's copies do not wait on ns. */
static void obj_zero(struct ns *ns, const struct object *o, uint64_t off, uint64_t len)
{
	while (len) {
		struct ns_span sp[16];
		int n;
		size_t got = obj_spans(o, off, len, sp, &n, 16);
		for (int i = 0; i < n; i++)
			pool_zero(ns->pool, sp[i].off, sp[i].len);
		off += got;
		len -= got;
	}
}

ssize_t ns_write(struct ns *ns, struct ns_handle *h, const void *buf,
		 size_t len, uint64_t off)
{
	struct object *o = h->obj;
	struct ns_span sp[64];
	int n, rc = 0;

	pthread_mutex_lock(&ns->lock);
	if (h->append)
		off = o->size;
	if (off > UINT64_MAX / 2 || len > UINT64_MAX / 2 - off)
		rc = -EFBIG;
	else if (!h->write)
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
	for (size_t done = 0; done < len && !rc;) {
		obj_spans(o, off + done, len - done, sp, &n, 64);
		pthread_mutex_unlock(&ns->lock);
		for (int i = 0; i < n && !rc; i++) {
			rc = pool_write(ns->pool, sp[i].off, (const char *)buf + done, sp[i].len);
			done += sp[i].len;
		}
		pthread_mutex_lock(&ns->lock);
	}
	if (rc) {                       /* the device failed the copy */
		o->error = EIO;
		stat_add(ns->st, ST_ERRORS, 1);
		pthread_mutex_unlock(&ns->lock);
		return -EIO;
	}
	if (!hash_pass(ns, o, off, buf, len))
		hash_note_write(ns, o, off, off + len, -1);
	h->done += len;
	pthread_mutex_unlock(&ns->lock);
	stat_add(ns->st, ST_BYTES_WRITTEN, len);
	return (ssize_t)len;
}

/* A read from a pool the CPU cannot address: the bytes are copied into
 * the calling thread's bounce, which the caller copies on or sends before
 * it reads again.  Called locked; the copies run with the lock dropped,
 * over spans taken under it (a writer may grow the extent array). */
static ssize_t bounce_read(struct ns *ns, struct object *o, uint64_t off, size_t len,
			   struct iovec *iov, int *niov)
{
	uint8_t *b = ns_bounce(ns);
	struct ns_span sp[64];
	int n, rc = 0;

	if (!b)
		return -ENOMEM;
	/* At most the bounce, in at most 64 spans: a short read, which the
	 * caller continues. */
	len = obj_spans(o, off, len < NS_BOUNCE ? len : NS_BOUNCE, sp, &n, 64);
	o->refs++;
	pthread_mutex_unlock(&ns->lock);
	for (int i = 0, at = 0; i < n && !rc; at += (int)sp[i].len, i++)
		rc = pool_read(ns->pool, sp[i].off, b + at, sp[i].len);
	pthread_mutex_lock(&ns->lock);
	obj_put(ns, o);
	if (rc)
		return rc;
	iov[0] = (struct iovec){ b, len };
	*niov = 1;
	return (ssize_t)len;
}

ssize_t ns_read(struct ns *ns, struct ns_handle *h, uint64_t off, size_t len,
		struct iovec *iov, int *niov, int maxiov)
{
	struct object *o = h->obj;
	size_t got = 0;

	*niov = 0;
	pthread_mutex_lock(&ns->lock);
	if (h->source && o->owner >= 0) {
		pthread_mutex_unlock(&ns->lock);
		return -EREMOTE;        /* a view pulls its ranges itself */
	}
	if (h->windowed) {              /* its own turn: it would wait for itself */
		pthread_mutex_unlock(&ns->lock);
		return -EBUSY;
	}
	if ((o->state != OS_PUBLISHED && !h->write) ||
	    (o->owner >= 0 && !h->stream && fetch_wait(ns, h, off, len)))
		goto fail;
	if (off < o->size) {
		if (len > o->size - off)
			len = o->size - off;
		ssize_t r = h->stream ? stream_read(ns, h->stream, off, len, iov, niov)
			  : ns->base ? (ssize_t)obj_iov(ns, o, off, len, iov, niov, maxiov)
				     : bounce_read(ns, o, off, len, iov, niov);
		if (r < 0)
			goto fail;
		got = (size_t)r;
		if (!h->source && !h->served)
			read_seen(ns, h, off, off + got);
		h->done += got;
	}
	pthread_mutex_unlock(&ns->lock);
	if (!h->source && !h->served)   /* views and peers count their own */
		stat_add(ns->st, ST_BYTES_READ, got);
	return (ssize_t)got;
fail:
	stat_add(ns->st, ST_ERRORS, 1);
	pthread_mutex_unlock(&ns->lock);
	return -EIO;
}

int ns_handle_streams(const struct ns_handle *h)
{
	return stream_wanted(h);        /* fixed for the handle's life */
}

void ns_read_done(struct ns *ns, struct ns_handle *h)
{
	pthread_mutex_lock(&ns->lock);
	stream_done(ns, h->stream);
	pthread_mutex_unlock(&ns->lock);
}

int ns_flush(struct ns *ns, struct ns_handle *h, enum ns_close how, struct ns_wakes *later)
{
	struct object *o = h->obj;
	struct ns_wakes wl = { 0 };
	int rc = 0;

	pthread_mutex_lock(&ns->lock);
	if (!h->write) {
		count_read(ns, h);
		if (!later)
			goto unlock;
		/* The owner hears of a complete read after the reader's
		 * answer (sent before it, the news took 40 of the 69 us of a
		 * cold reader's close here); ns_deliver() keeps it before
		 * anything else this node says to the owner. */
		*later = (struct ns_wakes){ .deliver = ns->ev_head != NULL };
		pthread_mutex_unlock(&ns->lock);
		return 0;
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
		obj_drop(ns, o, &wl);
	} else if (o->writers_flushed == o->writers) {
		obj_publish(ns, o, &wl);
		rc = o->error ? -o->error : 0;
	}
	if (rc)
		stat_add(ns->st, ST_ERRORS, 1);
unlock:
	ns_unlock(ns);
	if (later)
		*later = wl;
	else
		ns_wake(ns, &wl);
	return rc;
}

void ns_release(struct ns *ns, struct ns_handle *h)
{
	struct object *o = h->obj;
	struct ns_wakes wl = { 0 };

	pthread_mutex_lock(&ns->lock);
	if (h->write) {
		o->writers--;
		if (h->flushed)
			o->writers_flushed--;
		/* The last reference is gone: a killed writer publishes
		 * nothing; otherwise publish once every writer is done. */
		if (o->state == OS_WRITING && (o->error || h->killed))
			obj_drop(ns, o, &wl);
		else if (o->state == OS_WRITING && o->writers_flushed == o->writers)
			obj_publish(ns, o, &wl);
	} else {
		count_read(ns, h);
	}
	int owner = -1;
	uint64_t lease = 0;
	/* The kernel may send the release as soon as a read's reply is out,
	 * before that read's ns_read_done: its turn must end first.  A turn
	 * kept for the caller's copy out of the window ends here. */
	window_end(ns, h);
	while (h->stream && stream_reading(h->stream))
		pthread_cond_wait(&ns->fcond, &ns->lock);
	handle_drop(ns, h, &owner, &lease);
	ns_unlock(ns);
	ns_wake(ns, &wl);
	if (lease && ns->set.hooks && ns->set.hooks->release)
		ns->set.hooks->release(ns->set.hctx, owner, lease);
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

int handle_writable(const struct ns_handle *h)
{
	if (!h->write)
		return -EBADF;
	if (h->obj->state != OS_WRITING)
		return h->obj->state == OS_DEAD ? -ENOENT : -EACCES;
	return 0;
}

int ns_fallocate(struct ns *ns, struct ns_handle *h, uint64_t off, uint64_t len)
{
	struct object *o = h->obj;
	int rc;

	if (off > UINT64_MAX / 2 || len > UINT64_MAX / 2 - off)
		return -EFBIG;
	pthread_mutex_lock(&ns->lock);
	rc = handle_writable(h);
	if (!rc && !(rc = obj_reserve(ns, o, off + len)) && off + len > o->size) {
		obj_zero(ns, o, o->size, off + len - o->size);
		obj_set_size(o, off + len);
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}
