/* xport_serve.c - a peer's connection to us: its server thread, which
 * serves the peer's requests in the order it sent them (those the
 * transport answers itself, a PING or a GRANT, here; the rest through
 * ops->handle), the replies and acknowledgements that go back, and the
 * sender beside it that moves the bytes of its pulls (xport_defer).
 *
 * One thread per connection, made by xport_accept.c once the peer proved
 * itself, so threads are bounded by the cluster.  A peer's newer
 * connection is served only after its older ones drain, so that nothing
 * it said before it reconnected is heard after what it says now.
 */
#define _GNU_SOURCE
#include "xport_internal.h"
#include "clock.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int xport_reply(struct xport_conn *c, uint64_t reqid, const struct proto_msg *m)
{
	return conn_send(c, reqid, m);
}

int xport_reply_data(struct xport_conn *c, uint64_t reqid, uint64_t off, uint64_t xxh3,
		     const struct iovec *iov, int n)
{
	struct proto_msg m = { .type = PT_DATA, .u.data = { off, xxh3, 0 } };
	uint8_t body[PROTO_DATA_HDR];
	uint64_t len = 0;

	for (int i = 0; i < n; i++)
		len += iov[i].iov_len;
	if (len > PROTO_CHUNK)
		return -EINVAL;
	m.u.data.len = (uint32_t)len;
	proto_encode(&m, body, sizeof(body));
	int rc = conn_sendv(c, PT_DATA, reqid, 0, body, sizeof(body), iov, n);
	if (!rc)
		ops_count(c->x, XC_SERVED, len);
	return rc;
}

#define ACK_WAIT_MS 2

/* What xport_ack gathered, in one ACKS. */
static int acks_flush(struct xport_conn *c)
{
	struct proto_msg m = { .type = PT_ACKS };

	if (!c->nacks)
		return 0;
	m.u.acks.n = c->nacks;
	memcpy(m.u.acks.reqid, c->acks, c->nacks * sizeof(*c->acks));
	c->nacks = 0;
	return conn_send(c, 0, &m);
}

void xport_ack(struct xport_conn *c, uint64_t reqid)
{
	if (!reqid)
		return;
	c->acks[c->nacks++] = reqid;
	if (c->nacks == PROTO_ACKS_MAX)
		acks_flush(c);
}

/* 1 if more of the peer's frames come within ms. */
static int more_within(const struct xport_conn *c, int ms)
{
	struct pollfd p = { c->fd, POLLIN, 0 };

	return c->ahead_at < c->ahead_end || poll(&p, 1, ms) != 0;
}

static int is_request(unsigned t)
{
	return t == PT_PING || t == PT_ANNOUNCE || t == PT_GONE || t == PT_CONSUMED ||
	       t == PT_LOOKUP || t == PT_LIST || t == PT_REMOVE || t == PT_PULL ||
	       t == PT_RELEASE || t == PT_GRANT || t == PT_CLEANUP || t == PT_EXISTS ||
	       t == PT_CLAIM;
}

static int reply_status(struct xport_conn *c, uint64_t reqid, int err)
{
	struct proto_msg st = { .type = PT_STATUS, .u.status.err = err };
	return xport_reply(c, reqid, &st);
}

/* A GRANT: the object's extents and hashes from ops->grant, readable by
 * the peer's queue pair (windows bound by rdma_srv_grant).  A connection
 * that was offered no RDMA gets EPROTONOSUPPORT. */
#define GRANTED_MAX (36 + 8 * PROTO_GRANT_HASHES + PROTO_GRANT_EXT * PROTO_GRANT_EXTENTS)
static void serve_grant(struct xport *x, struct xport_conn *c, uint64_t reqid,
			const struct proto_msg *m)
{
	struct xport_grant g = { 0 };
	struct proto_extent *pe = NULL;
	uint64_t ready = 0;
	uint8_t *body = NULL;
	int rc = -EPROTONOSUPPORT;

	if (!c->srv || !x->ops->grant)
		goto status;
	g.hash = malloc(PROTO_GRANT_HASHES * sizeof(*g.hash));
	g.ext = malloc(PROTO_GRANT_EXTENTS * sizeof(*g.ext));
	pe = malloc(PROTO_GRANT_EXTENTS * sizeof(*pe));
	body = malloc(GRANTED_MAX);
	rc = g.hash && g.ext && pe && body ? 0 : -ENOMEM;
	if (!rc)
		rc = x->ops->grant(x->ctx, c, c->peer, m->u.grant.oid, m->u.grant.lease,
				   m->u.grant.first, m->u.grant.n, &g);
	if (!rc)
		rc = rdma_srv_grant(c->srv, m->u.grant.lease, g.ext, g.next, m->u.grant.upto, pe,
				    &ready);
	if (rc >= 0)    /* its extents: g's, or the one of their room in the stage */
		rc = conn_send_body(c, PT_GRANTED, reqid, body,
				    proto_encode_granted(g.size, ready, g.first, g.hash, g.nhash, pe,
							 (uint32_t)rc, body, GRANTED_MAX)) ? 1 : 0;
status:
	if (rc < 0)
		reply_status(c, reqid, -rc);
	free(g.hash);
	free(g.ext);
	free(pe);
	free(body);
}

/* A request the transport answers itself, or hands to ops->handle. */
static int serve_one(struct xport *x, struct xport_conn *c, const struct proto_hdr *h,
		     const struct proto_msg *m)
{
	struct peer *p = &x->peers[c->peer];

	switch (h->type) {
	case PT_PING: {
		struct proto_msg pong = { .type = PT_PONG };
		return conn_send(c, h->reqid, &pong);
	}
	case PT_GRANT:
		serve_grant(x, c, h->reqid, m);
		return 0;
	case PT_PULL:
		if (x->c.mode != XPORT_RDMA)
			break;
		log_limited(x, &p->refused, "peer %s asked to pull over TCP; refused "
			    "(transport=rdma)", p->name);
		reply_status(c, h->reqid, EPROTONOSUPPORT);
		return 0;
	case PT_RELEASE:        /* its windows go before its object may */
		if (c->srv)
			rdma_srv_release(c->srv, m->u.release.lease);
		break;
	}
	x->ops->handle(x->ctx, c, c->peer, h->reqid, m);
	return 0;
}

/* ---------------------------------------------------------------- deferred replies */

struct deferred {
	void (*fn)(void *arg);
	void *arg;
	struct deferred *next;
};

/* A peer's connection's sender: runs what its server thread deferred, in
 * order, until that thread stops it and nothing is left. */
static void *defer_thread(void *arg)
{
	struct xport_conn *c = arg;

	pthread_setname_np(pthread_self(), "omni-send");
	pthread_mutex_lock(&c->defer_lock);
	for (;;) {
		struct deferred *d = c->defer_head;
		if (!d && c->defer_stop)
			break;
		if (!d) {
			pthread_cond_wait(&c->defer_cond, &c->defer_lock);
			continue;
		}
		if (!(c->defer_head = d->next))
			c->defer_tail = &c->defer_head;
		pthread_mutex_unlock(&c->defer_lock);
		d->fn(d->arg);
		free(d);
		pthread_mutex_lock(&c->defer_lock);
	}
	pthread_mutex_unlock(&c->defer_lock);
	return NULL;
}

/* The server thread's, from ops->handle. */
int xport_defer(struct xport_conn *c, void (*fn)(void *arg), void *arg)
{
	struct deferred *d;

	if (!c->defer_up)
		return -EAGAIN;         /* (no thread for it: see server_thread) */
	if (!(d = malloc(sizeof(*d))))
		return -ENOMEM;
	*d = (struct deferred){ fn, arg, NULL };
	pthread_mutex_lock(&c->defer_lock);
	*c->defer_tail = d;
	c->defer_tail = &d->next;
	pthread_cond_signal(&c->defer_cond);
	pthread_mutex_unlock(&c->defer_lock);
	return 0;
}

/* At the server thread's end: what was deferred runs to its end first (on
 * a connection that is gone, its sends fail at once). */
static void defer_end(struct xport_conn *c)
{
	if (!c->defer_up)
		return;
	pthread_mutex_lock(&c->defer_lock);
	c->defer_stop = 1;
	pthread_cond_signal(&c->defer_cond);
	pthread_mutex_unlock(&c->defer_lock);
	pthread_join(c->defer_thread, NULL);
	c->defer_up = 0;
}

static void server_detach(struct xport *x, struct xport_conn *c)
{
	pthread_mutex_lock(&x->lock);
	for (struct xport_conn **pp = &x->servers; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	conn_put(c);
	x->nservers--;
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->lock);
}

/* Whether a connection the peer made to us before c is still served
 * (x->servers holds the newest first).  Under x->lock. */
static int older_of_peer(const struct xport_conn *c)
{
	for (const struct xport_conn *o = c->next; o; o = o->next)
		if (o->peer == c->peer)
			return 1;
	return 0;
}

void *server_thread(void *arg)
{
	struct xport_conn *c = arg;
	struct xport *x = c->x;
	struct proto_hdr h;
	struct proto_msg m;
	int rc;

	pthread_setname_np(pthread_self(), "omni-serve");
	sends_bursts();                 /* it flushes at each burst's end, and its own */
	/* The peer's frames are served in the order it sent them, across its
	 * connections: its older ones (shut by stranger_promote) are drained
	 * first, then ops->conn_start, so that nothing it said before it
	 * reconnected is heard after what it says now.  Draining takes no
	 * time but serving what was queued; a serve that is stuck must not
	 * keep the peer out: past half of dead_ms (the peer waits for our
	 * pongs no longer) the new one is served beside it. */
	struct timespec ts = clock_deadline_in(x->c.dead_ms / 2);
	pthread_mutex_lock(&x->lock);
	while (!x->stopping && older_of_peer(c))
		if (pthread_cond_timedwait(&x->cond, &x->lock, &ts) == ETIMEDOUT) {
			fprintf(stderr, "omnifs: peer %s's old connection is still being served "
				"after %u ms; serving its new one beside it\n",
				x->peers[c->peer].name, x->c.dead_ms / 2);
			break;
		}
	pthread_mutex_unlock(&x->lock);
	if (x->ops->conn_start)
		x->ops->conn_start(x->ctx, c->peer, c->made_ns);
	/* Its sender, with it from the start (a thread started at each pull
	 * would cost each a wake-up of another core); without one, this
	 * thread sends the pulls' bytes itself. */
	c->defer_up = !pthread_create(&c->defer_thread, NULL, defer_thread, c);
	c->last_rx = clock_mono_ns();
	while (!(rc = conn_recv(c, &h, &m, NULL))) {
		if (!is_request(h.type)) {
			rc = -EPROTO;
			break;
		}
		rc = serve_one(x, c, &h, &m);
		proto_msg_free(&m);
		atomic_fetch_add(&c->frames, 1);        /* heard, and acted on */
		if (rc)
			break;
		if (c->ahead_at < c->ahead_end)
			continue;       /* more of the burst read already */
		/* The burst is over: what serving it held goes (a GONE for
		 * each REMOVE).  Acknowledgements wait a little for the next
		 * request: a burst of removals is acknowledged in a few
		 * frames, not one each (an answer costs both sides a wake-up;
		 * 100,000 rm took twice as long).  Only a lost connection
		 * needs them. */
		xport_flush(x, 1);
		if (c->nacks && !more_within(c, ACK_WAIT_MS))
			acks_flush(c);
	}
	xport_flush(x, 1);              /* what its last burst held */
	defer_end(c);
	if (rc == -EPROTO || rc == -EMSGSIZE) {
		ops_count(x, XC_BAD_FRAMES, 1);
		log_limited(x, &x->peers[c->peer].bad_frames,
			    "peer %s sent a bad frame; disconnected", x->peers[c->peer].name);
	}
	if (c->srv) {           /* its windows go before the leases they read */
		srv_end(x, c->srv);
		pthread_mutex_lock(&x->lock);
		c->srv = NULL;
		pthread_mutex_unlock(&x->lock);
	}
	if (c->peer >= 0 && x->ops->conn_end)
		x->ops->conn_end(x->ctx, c);
	server_detach(x, c);
	return NULL;
}
