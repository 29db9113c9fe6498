/* xport_pull.c - our pulls: a range of a peer's object brought here, by
 * one-sided RDMA READ where the peer is reached over RDMA, else as DATA
 * frames on our TCP connection to it.  Under transport=auto a pull the
 * RDMA path cannot take (the peer's stage full, a buffer the device will
 * not register, a queue pair that fails, even midway) goes over TCP from
 * its last verified byte; under transport=rdma it fails with EIO.  A TCP
 * pull whose connection closes under it is asked for again on the next
 * one, from where its bytes stopped (pulls_resume).  Also the end of a
 * streamed read's lease (xport_release), and the buffers pulls land in
 * outside the pool, registered with whichever opening of the device is in
 * use (xport_buf_alloc).
 */
#define _GNU_SOURCE
#include "xport_internal.h"
#include "clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---------------------------------------------------------------- buffers */

/* A buffer is this module's memory, registered with the device in use
 * when it was made (gen: which opening of it); a device that goes takes
 * its registrations with it, never the memory, and one opened again
 * registers a buffer when a pull first lands in it (bufs_register). */
struct xbuf {
	struct xbuf *next;
	uint8_t *base;
	size_t len;
	unsigned gen;
};

void *xport_buf_alloc(struct xport *x, size_t size)
{
	struct xbuf *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->len = size ? size : 1;
	b->base = mmap(NULL, b->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b->base == MAP_FAILED)
		goto free_b;
	pthread_mutex_lock(&x->lock);
	struct rdma *rd = rdma_hold_locked(x);
	b->gen = x->rdma_gen;
	pthread_mutex_unlock(&x->lock);
	int rc = rd ? rdma_buf_reg(rd, b->base, b->len) : 0;
	rdma_unhold(x, rd);
	if (rc)
		goto unmap;
	pthread_mutex_lock(&x->lock);
	b->next = x->bufs;
	x->bufs = b;
	pthread_mutex_unlock(&x->lock);
	return b->base;
unmap:
	munmap(b->base, b->len);
free_b:
	free(b);
	return NULL;
}

void xport_buf_free(struct xport *x, void *buf)
{
	struct xbuf *b = NULL;

	if (!buf)
		return;
	pthread_mutex_lock(&x->lock);
	for (struct xbuf **pp = &x->bufs; *pp; pp = &(*pp)->next)
		if ((*pp)->base == buf) {
			b = *pp;
			*pp = b->next;
			break;
		}
	struct rdma *rd = b ? rdma_hold_locked(x) : NULL;
	pthread_mutex_unlock(&x->lock);
	if (!b)
		return;
	if (rd)                 /* a registration of an rdma that went: none */
		rdma_buf_unreg(rd, buf);
	rdma_unhold(x, rd);
	munmap(b->base, b->len);
	free(b);
}

/* Registers with rd, opened since they were made, the buffers that dst
 * lands in: the number it registered. */
static int bufs_register(struct xport *x, struct rdma *rd, const struct iovec *dst, int ndst)
{
	int n = 0;

	for (int i = 0; i < ndst; i++) {
		const uint8_t *at = dst[i].iov_base;
		uint8_t *base = NULL;
		size_t len = 0;
		pthread_mutex_lock(&x->lock);
		for (struct xbuf *b = x->bufs; b; b = b->next)
			if (at >= b->base && at < b->base + b->len && b->gen != x->rdma_gen) {
				base = b->base;
				len = b->len;
				b->gen = x->rdma_gen;
				break;
			}
		pthread_mutex_unlock(&x->lock);
		n += base && !rdma_buf_reg(rd, base, len);
	}
	return n;
}

void xbufs_free(struct xport *x)
{
	for (struct xbuf *b = x->bufs, *next; b; b = next) {
		next = b->next;
		munmap(b->base, b->len);
		free(b);
	}
	x->bufs = NULL;
}

/* ---------------------------------------------------------------- pulls */

static struct proto_msg pull_msg(const struct xport_range *r)
{
	return (struct proto_msg){ .type = PT_PULL, .u.pull = { r->oid, r->off, r->len, r->stride,
								 r->count, r->lease } };
}

/* A pull over TCP on *c (a reference, dropped here); on wait, a
 * connection retired meanwhile is followed to the peer's next one
 * (link_on), else the pull fails.  With no c it is held for the peer's
 * next connection, if the peer is being connected to again.  0, or
 * -EHOSTDOWN, -ENOMEM. */
static int pull_tcp(struct xport *x, struct xport_conn *c, int peer, const struct xport_range *r,
		    const struct iovec *dst, int ndst, int wait, xport_progress_fn progress,
		    void *arg)
{
	struct proto_msg m = pull_msg(r);
	struct pending *p = calloc(1, sizeof(*p));
	int rc = -ENOMEM, linked = 0;

	if (!p || !(p->dst = malloc((size_t)ndst * sizeof(*dst))))
		goto fail;
	memcpy(p->dst, dst, (size_t)ndst * sizeof(*dst));
	*p = (struct pending){ .peer = peer, .pull = 1, .arg = arg, .r = *r, .at = r->off,
			       .len = r->len * r->count,        /* the pieces back to back */
			       .asked_ns = clock_mono_ns(), .dst = p->dst, .ndst = ndst,
			       .progress = progress };
	if (wait) {
		linked = link_on(x, &c, p);
	} else {
		pthread_mutex_lock(&x->lock);
		linked = pending_link(x, c, p);
		pthread_mutex_unlock(&x->lock);
	}
	if (!linked) {
		rc = -EHOSTDOWN;        /* as if peer_conn() had found it down */
		goto fail;
	}
	if (!c)
		return 0;
	/* From here the receiver ends it: a failed send closes the socket. */
	conn_send(c, p->reqid, &m);
	conn_unref(x, c);
	return 0;
fail:
	if (p)
		free(p->dst);
	free(p);
	if (c)
		conn_unref(x, c);
	return rc;
}

/* A pull whose connection closed under it this many times in a row with
 * none of its bytes landing in between fails (EIO): a peer that closes
 * each connection a request comes on must not hold its reader for good. */
#define PULL_RESUMES_MAX 3

/* Under x->lock: a pull of peer's that its connection c has not asked
 * for (its last one closed under it, or it was held meanwhile), made the
 * rest of itself, from where its checked bytes end: a whole object's
 * pulls no byte twice, a view's strided one its piece from the start.
 * *end: it is off the table instead, to fail with this (EIO: stuck;
 * ECANCELED: its lease was released, xport_release). */
static struct pending *pull_left(struct xport *x, int peer, const struct xport_conn *c,
				 struct proto_msg *m, int *end)
{
	struct pending *p = x->pending;

	while (p && (p->peer != peer || !p->pull || p->on == c->name))
		p = p->next;
	if (!p)
		return NULL;
	struct xport_range r = p->r;
	uint64_t k = p->got / r.len, from = r.count == 1 ? p->got : k * r.len;
	p->stuck = from > p->resumed || !p->stuck ? 1 : p->stuck + 1;
	p->resumed = from;
	*end = p->cancelled ? -ECANCELED : p->stuck > PULL_RESUMES_MAX ? -EIO : 0;
	if (*end) {
		pending_del(x, p);
		return p;
	}
	p->got = from;
	if (r.count == 1) {
		r.off += from;
		r.len -= from;
	} else {
		r.off += k * r.stride;
		r.count -= (uint32_t)k;
	}
	*m = pull_msg(&r);
	p->at = r.off;
	p->on = c->name;
	p->asked_ns = clock_mono_ns();
	return p;
}

void pulls_resume(struct xport *x, int peer, struct xport_conn *c)
{
	struct proto_msg m;
	struct pending *p;
	unsigned n = 0;
	int end;

	for (;;) {
		pthread_mutex_lock(&x->lock);
		p = x->peers[peer].out == c ? pull_left(x, peer, c, &m, &end) : NULL;
		uint64_t reqid = p ? p->reqid : 0;
		pthread_mutex_unlock(&x->lock);
		if (!p)
			break;
		if (end == -ECANCELED) {
			pull_told(p, end);
			continue;
		}
		if (end) {
			fprintf(stderr, "omnifs: peer %s (%s): a read failed: its connection "
				"closed under it %d times, no byte of it landing between\n",
				x->peers[peer].name, x->peers[peer].addr, PULL_RESUMES_MAX + 1);
			pull_told(p, -EIO);
			continue;
		}
		/* Its DATA lands only on c's receiver, once this is sent. */
		conn_send(c, reqid, &m);
		n++;
	}
	if (n)
		fprintf(stderr, "omnifs: peer %s (%s): %u read%s in flight go%s on from where "
			"%s\n", x->peers[peer].name, x->peers[peer].addr, n, n == 1 ? "" : "s",
			n == 1 ? "es" : "", n == 1 ? "it was" : "they were");
}

/* A pull by RDMA whose queue pair fails under it (rdma.h: ECONNRESET; a
 * fabric that drops RoCE, a READ in error) goes on over TCP from the end
 * of its verified bytes, under auto: the read loses speed, not its bytes.
 * Under rdma it fails with EIO.  The rest is asked for from the RDMA
 * checker's thread, which must not wait: on the peer's connection as it
 * is, or the pull fails (EIO), as it would have. */
struct reroute {
	struct xport *x;
	int peer, ndst;
	struct xport_range r;
	struct iovec *dst;
	uint64_t total;                 /* the pull's bytes */
	uint64_t base;                  /* TCP's part starts there, once it runs */
	uint64_t shown;                 /* what progress said last */
	xport_progress_fn progress;
	void *arg;
};

static void reroute_free(struct reroute *rr)
{
	free(rr->dst);
	free(rr);
}

/* The TCP part's progress: the caller's, from where the RDMA part ended;
 * never back (a piece is pulled again from its start). */
static void rerouted(void *arg, uint64_t upto, int err)
{
	struct reroute *rr = arg;
	uint64_t at = rr->base + upto;
	int end = err || at == rr->total;

	if (at > rr->shown)
		rr->shown = at;
	else if (!end)
		return;         /* the piece pulled again has not passed it yet */
	rr->progress(rr->arg, rr->shown, err);
	if (end)
		reroute_free(rr);
}

/* Asks for what the RDMA part left, from upto (whole pieces): 0, or the
 * caller hears the end. */
static int reroute_tcp(struct reroute *rr, uint64_t upto)
{
	struct xport *x = rr->x;
	struct xport_range r = rr->r;
	uint64_t k = r.count == 1 ? 0 : upto / r.len, cut;
	int i = 0;

	rr->base = r.count == 1 ? upto : k * r.len;
	if (r.count == 1) {
		r.off += upto;
		r.len -= upto;
	} else {
		r.off += k * r.stride;
		r.count -= (uint32_t)k;
	}
	/* dst from base on (base < total <= its room), cut in place: the
	 * RDMA part is over with it, and pull_tcp keeps a copy. */
	for (cut = rr->base; cut >= rr->dst[i].iov_len; i++)
		cut -= rr->dst[i].iov_len;
	rr->dst[i].iov_base = (uint8_t *)rr->dst[i].iov_base + cut;
	rr->dst[i].iov_len -= cut;
	/* rr is the TCP part's from here: it may end, and rr go, at once.
	 * Where the connection closed too, it waits for the next one. */
	int peer = rr->peer;
	int rc = pull_tcp(x, peer_out(x, peer), peer, &r, rr->dst + i, rr->ndst - i, 0,
			  rerouted, rr);
	if (!rc)
		log_limited(x, &x->peers[peer].rerouted, "peer %s: its RDMA queue pair "
			    "failed under a read: the rest of it over tcp", x->peers[peer].name);
	return rc;
}

/* The RDMA part's progress. */
static void rdma_progress(void *arg, uint64_t upto, int err)
{
	struct reroute *rr = arg;

	if (err == -ECONNRESET && upto == rr->total)
		err = 0;                /* nothing was left for the pair to fail */
	if (err == -ECONNRESET && rr->x->c.mode != XPORT_RDMA && !reroute_tcp(rr, upto))
		return;
	if (err == -ECONNRESET)
		err = -EIO;
	rr->shown = upto;
	rr->progress(rr->arg, upto, err);
	if (err || upto == rr->total)
		reroute_free(rr);
}

/* rdma_pull, asked again while the owner's stage has no room (rdma.h)
 * and transport=rdma forbids TCP: its reads make room as they end.  For
 * a third of dead_ms at most: this may be the thread that serves the
 * owner's connection (a fetch that an announce starts), and the owner
 * must not find it dead meanwhile.  With auto the caller moves the bytes
 * over TCP at once. */
static int pull_rdma(struct xport *x, struct rdma *rd, int peer, const struct xport_range *r,
		     const struct iovec *dst, int ndst, unsigned flags, struct reroute *rr)
{
	uint64_t until = clock_mono_ns() + (uint64_t)x->c.dead_ms * 1000000u / 3;
	int rc;

	for (unsigned nap_us = 500;; nap_us = nap_us < 32000 ? nap_us * 2 : nap_us) {
		rc = rdma_pull(rd, peer, r, dst, ndst, flags, rdma_progress, rr);
		if (rc != -ENOBUFS || x->c.mode != XPORT_RDMA || clock_mono_ns() >= until)
			return rc;
		usleep(nap_us);
	}
}

/* A pull from a peer whose bytes move by RDMA (by rd: NULL where this
 * node's device has just gone), or by nothing at all; -ENOBUFS: pull it
 * over TCP (its stage has no room, or this node's device went). */
static int pull_other(struct xport *x, struct rdma *rd, int peer, int xp,
		      const struct xport_range *r, const struct iovec *dst, int ndst,
		      unsigned flags, struct reroute *rr)
{
	struct peer *p = &x->peers[peer];
	int rc;

	if (xp == XP_NONE || (!rd && x->c.mode == XPORT_RDMA)) {
		log_limited(x, &p->unread, "peer %s: not read from: %s (transport=rdma)",
			    p->name, xp == XP_NONE ? p->why : "this node's RDMA device went");
		return -EIO;
	}
	if (!rd)                /* the tender says so, peer by peer */
		return -ENOBUFS;
	rc = pull_rdma(x, rd, peer, r, dst, ndst, flags, rr);
	if (rc == -EFAULT && bufs_register(x, rd, dst, ndst))
		rc = pull_rdma(x, rd, peer, r, dst, ndst, flags, rr);
	if (rc == -ENOTCONN) {  /* its pair did not connect again */
		char e[96];
		rdma_link_why(rd, peer, e, sizeof(e));
		if (peer_unlinked(x, peer, e))
			return -EHOSTDOWN;
		if (x->c.mode == XPORT_RDMA)
			return -EIO;
		return -ENOBUFS;        /* over TCP, from now on */
	}
	if (rc != -ENOBUFS && rc != -EFBIG && rc != -EFAULT && rc != -ECONNRESET)
		return rc;
	const char *why = rc == -ECONNRESET ? "its RDMA queue pair failed as a read began" :
		rc == -EFAULT ? "a read's buffer cannot be registered with the device" :
		rc == -EFBIG ? "an object is larger than its RDMA stage" :
		x->c.mode == XPORT_RDMA ? "its RDMA stage had no room for an object in time" :
		"its RDMA stage has no room for an object now";
	if (x->c.mode == XPORT_RDMA) {
		log_limited(x, &p->full, "peer %s: %s: EIO, not read over tcp (transport=rdma)",
			    p->name, why);
		return -EIO;
	}
	log_limited(x, &p->full, "peer %s: %s: read over tcp", p->name, why);
	return -ENOBUFS;
}

/* RDMA where the peer's bytes move so, with what reroute_tcp needs. */
static int pull_by_rdma(struct xport *x, struct rdma *rd, int peer, int xp,
			const struct xport_range *r, const struct iovec *dst, int ndst,
			unsigned flags, xport_progress_fn progress, void *arg)
{
	struct reroute *rr = calloc(1, sizeof(*rr));
	int rc;

	if (!rr || !(rr->dst = malloc((size_t)ndst * sizeof(*dst)))) {
		free(rr);
		return -ENOMEM;
	}
	memcpy(rr->dst, dst, (size_t)ndst * sizeof(*dst));
	rr->x = x;
	rr->peer = peer;
	rr->ndst = ndst;
	rr->r = *r;
	rr->total = r->len * r->count;
	rr->progress = progress;
	rr->arg = arg;
	if ((rc = pull_other(x, rd, peer, xp, r, dst, ndst, flags, rr)))
		reroute_free(rr);       /* progress was never called */
	return rc;
}

int xport_pull(struct xport *x, int peer, const struct xport_range *r,
	       const struct iovec *dst, int ndst, unsigned flags,
	       xport_progress_fn progress, void *arg)
{
	struct xport_conn *c;
	uint64_t room = 0;
	int rc, xp;

	for (int i = 0; i < ndst; i++)
		room += dst[i].iov_len;
	if (!r->len || !r->count || ndst <= 0 || r->len > UINT64_MAX / r->count ||
	    room < r->len * r->count)
		return -EINVAL;
	if (!(c = peer_conn(x, peer)))
		return -EHOSTDOWN;
	pthread_mutex_lock(&x->lock);
	xp = x->peers[peer].xp;
	struct rdma *rd = xp == XP_RDMA ? rdma_hold_locked(x) : NULL;
	pthread_mutex_unlock(&x->lock);
	/* An owner whose stage is full serves this one over TCP (auto). */
	if (xp != XP_TCP) {
		rc = pull_by_rdma(x, rd, peer, xp, r, dst, ndst, flags, progress, arg);
		rdma_unhold(x, rd);
		if (rc != -ENOBUFS) {
			conn_unref(x, c);
			return rc;
		}
	}
	return pull_tcp(x, c, peer, r, dst, ndst, 1, progress, arg);
}

void xport_release(struct xport *x, int peer, uint64_t lease)
{
	struct proto_msg m = { .type = PT_RELEASE, .u.release.lease = lease };

	/* A pull over TCP still under it is not wanted: its owner stops at
	 * the RELEASE, and a connection closed meanwhile does not ask it
	 * again (pull_left). */
	pthread_mutex_lock(&x->lock);
	for (struct pending *p = x->pending; p; p = p->next)
		if (p->pull && p->peer == peer && p->r.lease == lease)
			p->cancelled = 1;
	pthread_mutex_unlock(&x->lock);
	struct rdma *rd = rdma_hold(x);
	int later = rd && !rdma_release(rd, peer, lease);

	rdma_unhold(x, rd);
	if (later)
		return;         /* its READs are in flight: it goes after them */
	xport_send(x, peer, &m);        /* down: its end of the lease went with it */
}
