/* ns_direct.c - where a local object's bytes lie in the pool, for a process
 * on this node that copies them itself (fs/direct.h).  A 64 MiB read
 * through FUSE is 64 requests and two copies through the kernel; handed
 * over, it is one request and one copy by process_vm_readv(2).
 */
#define _GNU_SOURCE
#include "ns_internal.h"

#include <errno.h>

#include "../transport/pool.h"

/* The bytes of [0, size) of o as iovecs, all of them or -E2BIG. */
static int direct_iov(struct ns *ns, struct object *o, struct iovec *iov, int max, int *n)
{
	return obj_iov(ns, o, 0, o->size, iov, n, max) == o->size ? 0 : -E2BIG;
}

/* Under ns's lock: 0 if reader h may be handed o's place now: its bytes
 * all here or, where soon, still landing there by the fetch h belongs to. */
static int placed_here(const struct ns_handle *h, int soon)
{
	const struct object *o = h->obj;

	if (h->write || h->source || h->served)
		return -EBADF;
	if (o->state != OS_PUBLISHED)
		return -ENOENT;
	if (h->stream || stream_wanted(h))
		return -EREMOTE;        /* never all here: read(2) pulls them */
	if (o->owner >= 0 && o->fetch != F_DONE &&
	    (!soon || o->fetch != F_RUNNING || h->gen != o->fetch_gen || o->stage))
		return -EREMOTE;        /* a failed fetch, or a staged one */
	return 0;
}

/* Under ns's lock: h has had every byte, as a read to the end would. */
static void handed_whole(struct ns *ns, struct ns_handle *h, enum stat_id what)
{
	struct object *o = h->obj;

	if (!rangeset_covers(&h->seen, 0, o->size)) {
		read_seen(ns, h, 0, o->size);
		stat_add(ns->st, ST_BYTES_READ, o->size);
	}
	stat_add(ns->st, what, 1);
	h->done = o->size;
}

int ns_direct_where(struct ns *ns, struct ns_handle *h, struct iovec *iov, int max,
		    int *n, uint64_t *size, uint64_t *xxh3, int *landing)
{
	struct object *o = h->obj;
	int rc;

	if (!ns->base)
		return -EOPNOTSUPP;     /* not memory a process can copy */
	pthread_mutex_lock(&ns->lock);
	if (!(rc = placed_here(h, landing != NULL)) && !(rc = direct_iov(ns, o, iov, max, n))) {
		*size = o->size;
		*xxh3 = o->xxh3;
		if (landing)
			*landing = o->owner >= 0 && o->fetch != F_DONE;
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_direct_landing(struct ns *ns, struct ns_handle *h, uint64_t upto, uint64_t *have)
{
	struct object *o = h->obj;
	int rc = 0;

	pthread_mutex_lock(&ns->lock);
	/* Not placed_here(): an object removed or lost meanwhile is still
	 * h's, as an open file's bytes are; only a failed fetch is not. */
	if (h->write || h->source || h->served)
		rc = -EBADF;
	else if (h->stream || stream_wanted(h))
		rc = -EREMOTE;
	else if (upto > o->size)
		rc = -EINVAL;
	else if (o->owner >= 0 && fetch_wait(ns, h, 0, upto))
		rc = -EIO;              /* what came of it is worth nothing */
	if (!rc) {
		*have = o->owner >= 0 && o->fetch != F_DONE ? o->have : o->size;
		if (*have == o->size && h->done != o->size)
			handed_whole(ns, h, ST_DIRECT_GETS);
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

void ns_direct_landed(struct ns *ns, struct ns_handle *h)
{
	struct object *o = h->obj;

	pthread_mutex_lock(&ns->lock);
	if (o->owner >= 0 && o->fetch == F_RUNNING && !stream_wanted(h))
		fetch_wait(ns, h, 0, o->size);
	pthread_mutex_unlock(&ns->lock);
}

void window_end(struct ns *ns, struct ns_handle *h)
{
	if (h->windowed) {
		h->windowed = 0;
		stream_done(ns, h->stream);
	}
}

int ns_direct_window(struct ns *ns, struct ns_handle *h, uint64_t off, uint64_t want,
		     uint64_t *poff, uint64_t *len, uint64_t *size)
{
	struct object *o = h->obj;
	ssize_t got = 0;
	int rc = 0;

	if (!ns->base)
		return -EOPNOTSUPP;     /* the window is not where a process can copy */
	pthread_mutex_lock(&ns->lock);
	if (h->write || h->source || h->served)
		rc = -EBADF;
	else if (!h->stream)
		rc = -EOPNOTSUPP;       /* not streamed: WHERE, or read(2) */
	else if (!stream_in_pool(ns, h->stream))
		rc = -EOPNOTSUPP;       /* beside a full pool: read(2) */
	else if (off > o->size)
		rc = -EINVAL;
	if (!rc)
		window_end(ns, h);
	if (!rc && off < o->size && (got = stream_window(ns, h->stream, off, want, poff)) < 0)
		rc = (int)got;
	if (!rc && got > 0) {
		h->windowed = 1;
		read_seen(ns, h, off, off + (uint64_t)got);
		h->done += (uint64_t)got;
		if (off + (uint64_t)got == o->size)
			stat_add(ns->st, ST_WINDOW_GETS, 1);
	}
	*len = rc ? 0 : (uint64_t)got;
	*size = o->size;
	pthread_mutex_unlock(&ns->lock);
	if (*len)
		stat_add(ns->st, ST_BYTES_READ, *len);
	return rc;
}

int ns_direct_spans(struct ns *ns, struct ns_handle *h, struct ns_span *sp, int max, int *n,
		    uint64_t *size, uint64_t *xxh3)
{
	struct object *o = h->obj;
	int rc;

	pthread_mutex_lock(&ns->lock);
	/* Another node's object being pulled here: wait as a read would. */
	if (o->owner >= 0 && !stream_wanted(h) && fetch_wait(ns, h, 0, o->size))
		rc = -EIO;
	else if (!(rc = placed_here(h, 0)) && obj_spans(o, 0, o->size, sp, n, max) != o->size)
		rc = -E2BIG;
	*size = o->size;
	*xxh3 = o->xxh3;
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_direct_bounce(struct ns *ns, struct ns_handle *h, size_t cap, struct iovec *iov,
		     uint64_t *size, uint64_t *xxh3)
{
	struct object *o = h->obj;
	int rc;

	pthread_mutex_lock(&ns->lock);
	if (!(rc = placed_here(h, 0)) && (o->size > cap || o->size > NS_BOUNCE))
		rc = -E2BIG;
	*size = o->size;
	*xxh3 = o->xxh3;
	pthread_mutex_unlock(&ns->lock);
	return rc ? rc : obj_bounce(ns, o, 0, o->size, iov);     /* h keeps o whole */
}

void ns_direct_done(struct ns *ns, struct ns_handle *h, enum stat_id what)
{
	pthread_mutex_lock(&ns->lock);
	handed_whole(ns, h, what);
	pthread_mutex_unlock(&ns->lock);
}

int ns_direct_place(struct ns *ns, struct ns_handle *h, uint64_t size, struct ns_span *sp,
		    int max, int *n, enum stat_id what, int sole)
{
	struct object *o = h->obj;
	int rc;

	if (size > UINT64_MAX / 2)
		return -EFBIG;
	pthread_mutex_lock(&ns->lock);
	rc = handle_writable(h);
	if (!rc && (o->size || o->writers > 1 || o->error))
		rc = -EBUSY;            /* only a fresh object, by its one writer */
	if (!rc && !(rc = obj_reserve(ns, o, size))) {
		/* Not noted for the hasher: the bytes come after this returns,
		 * so the publish hashes them all. */
		obj_set_size(o, size);
		if (obj_spans(o, 0, size, sp, n, max) != size) {
			rc = -E2BIG;
			obj_set_size(o, 0);     /* the reserve goes at publish */
		} else {
			h->done = size;
			h->placed = 1;
			h->sole = sole;
			stat_add(ns->st, ST_BYTES_WRITTEN, size);
			stat_add(ns->st, what, 1);
		}
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_direct_placed(struct ns *ns, struct ns_handle *h, uint64_t upto, int cpu)
{
	struct object *o = h->obj;
	int rc;

	pthread_mutex_lock(&ns->lock);
	rc = handle_writable(h);
	if (!rc && (!h->placed || upto > o->size))
		rc = -EINVAL;
	if (!rc)                /* as a write of [front, upto) would say */
		hash_note_write(ns, o, o->front, upto, cpu);
	pthread_mutex_unlock(&ns->lock);
	return rc;
}
