/* xport_dial.c - our connections to peers: connecting, the client's half
 * of the handshake, which transport moves each peer's bytes, and the
 * threads that keep it so: a dialer per peer that is down (its name looked
 * up again, the connect and handshake away from the keeper), and the
 * keeper, which pings every peer that is up each ping_ms.
 *
 * A request's own connect happens in its caller (peer_conn); a peer whose
 * queue pair did not connect at the handshake is tried again by a dialer
 * on the same connection (peer_relink).
 */
#define _GNU_SOURCE
#include "xport_internal.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONNECT_MS 1000
#define QP_RETRY_MS 1000        /* a queue pair that did not connect, tried again */
#define QP_RETRY_MAX_MS 30000   /* ... twice as late after each failure, this at most */

/* ---------------------------------------------------------------- connecting */

/* A TCP connection to sa within CONNECT_MS: its (blocking) descriptor, or
 * -errno. */
static int connect_timeout(const struct sockaddr_storage *sa, socklen_t salen)
{
	int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	int err = 0;
	socklen_t elen = sizeof(err);

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)sa, salen) && errno != EINPROGRESS)
		goto fail;
	if (poll(&pfd, 1, CONNECT_MS) != 1) {
		errno = ETIMEDOUT;
		goto fail;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) || err) {
		errno = err ? err : errno;
		goto fail;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
fail:
	err = -errno;
	close(fd);
	return err;
}

/* What a WELCOME offered besides the name: caps, and RDMA (port 0: none). */
struct offer { uint32_t caps; uint16_t port; uint8_t token[PROTO_TOKEN]; uint64_t digest; };

/* A connection's name: its HELLO's nonce, the first 8 bytes (never 0). */
uint64_t conn_name(const uint8_t nonce[PROTO_NONCE])
{
	uint64_t v;

	memcpy(&v, nonce, sizeof(v));
	return v ? v : 1;
}

/* The client's half of the handshake (auth.h). */
static int handshake_client(struct xport *x, struct xport_conn *c, struct offer *o)
{
	struct peer *p = &x->peers[c->peer];
	struct proto_msg m = { .type = PT_HELLO }, r;
	struct proto_hdr h;
	uint8_t cnonce[PROTO_NONCE];
	int rc;

	auth_nonce(cnonce);
	m.u.hello.version = PROTO_VERSION;
	m.u.hello.caps = x->caps;
	memcpy(m.u.hello.nonce, cnonce, PROTO_NONCE);
	snprintf(m.u.hello.name, sizeof(m.u.hello.name), "%s", x->self);
	if ((rc = conn_send(c, 0, &m)) || (rc = conn_recv(c, &h, &r, NULL)))
		return rc;
	if (h.type != PT_CHALLENGE)
		return -EPROTO;
	m = (struct proto_msg){ .type = PT_AUTH };
	auth_mac(x->key, AUTH_CLIENT, cnonce, r.u.challenge.nonce, x->self, m.u.auth.mac);
	uint8_t snonce[PROTO_NONCE];
	memcpy(snonce, r.u.challenge.nonce, PROTO_NONCE);
	if ((rc = conn_send(c, 0, &m)) || (rc = conn_recv(c, &h, &r, NULL)))
		return rc == -ECONNRESET ? -EACCES : rc;   /* refused: a wrong secret */
	if (h.type != PT_WELCOME || strcmp(r.u.welcome.name, p->name) ||
	    !auth_check(x->key, AUTH_SERVER, cnonce, snonce, r.u.welcome.name, r.u.welcome.mac))
		return -EACCES;
	o->caps = r.u.welcome.caps;
	o->port = r.u.welcome.rdma_port;
	memcpy(o->token, r.u.welcome.token, PROTO_TOKEN);
	o->digest = r.u.welcome.digest;
	c->name = conn_name(cnonce);
	atomic_store(&c->frames, 0);    /* the peer counts from here on */
	return 0;
}

/* Waits until nobody else is connecting to p.  1: now we are (p->connecting
 * is ours to clear); 0: p is connected; -ESHUTDOWN: we are stopping;
 * -EHOSTDOWN: this thread is the one connecting, and the connection it
 * made went while its peer_up asked p (a peer that drops a frame at once):
 * waiting for ourselves would hang, and p never be connected to again. */
static int connect_claim(struct xport *x, struct peer *p)
{
	int rc, joinable = 0;

	pthread_mutex_lock(&x->lock);
	if (p->connecting && pthread_equal(p->connector, pthread_self())) {
		pthread_mutex_unlock(&x->lock);
		return -EHOSTDOWN;
	}
	while (p->connecting && !x->stopping)
		pthread_cond_wait(&x->cond, &x->lock);
	rc = p->out ? 0 : x->stopping ? -ESHUTDOWN : 1;
	if (rc == 1) {
		p->connecting = 1;
		p->connector = pthread_self();
		joinable = p->rx_joinable;
		p->rx_joinable = 0;
	}
	pthread_mutex_unlock(&x->lock);
	if (joinable)
		pthread_join(p->rx, NULL);      /* the last receiver is done */
	return rc;
}

/* A new connection to peer i at sa, through the handshake.  0, or -errno. */
static int conn_open(struct xport *x, int i, const struct sockaddr_storage *sa, socklen_t salen,
		     struct xport_conn **out, struct offer *o)
{
	struct peer *p = &x->peers[i];
	int fd, rc;

	if ((fd = connect_timeout(sa, salen)) < 0)
		return fd;
	if (!(*out = conn_new(x, fd, i, 1))) {
		close(fd);
		return -ENOMEM;
	}
	if ((rc = handshake_client(x, *out, o))) {
		if (rc == -EACCES)
			fprintf(stderr, "omnifs: peer %s (%s) refused the handshake: "
				"is the secret the same?\n", p->name, p->addr);
		pthread_mutex_lock(&x->lock);
		conn_put(*out);
		pthread_mutex_unlock(&x->lock);
	}
	return rc;
}

/* Which transport moves peer i's bytes, now that its WELCOME is in: RDMA
 * where both ends have it and its queue pair connects; else TCP, or none
 * at all with transport=rdma.  Said in one line, as SPEC §2 wants. */
static int peer_transport(struct xport *x, int i, const struct sockaddr_storage *sa,
			  const struct offer *o, char *why, size_t len, int *pair_failed)
{
	struct peer *p = &x->peers[i];
	int xp = x->c.mode == XPORT_RDMA ? XP_NONE : XP_TCP;
	struct rdma *rd = rdma_hold(x);

	why[0] = 0;
	if (rd && o->port) {
		char e[96];
		if (!rdma_link_up(rd, i, (const struct sockaddr *)sa, o->port, o->token,
				  e, sizeof(e)))
			xp = XP_RDMA;
		else
			snprintf(why, len, "its RDMA queue pair did not connect: %s", e);
		*pair_failed = xp != XP_RDMA;
	} else if (rd) {
		snprintf(why, len, "%s offers no RDMA", p->name);
	} else if (rdma_gone_why(x, why, len)) {
		/* this node's device went: why says so */
	} else if (x->c.mode == XPORT_AUTO && (o->caps & PROTO_CAP_RDMA)) {
		snprintf(why, len, "this node has no RDMA");
	}
	if (xp == XP_RDMA)
		fprintf(stderr, "omnifs: peer %s (%s) up, transport rdma (%s, grants by %s)\n",
			p->name, p->addr, rdma_device(rd), rdma_grants(rd));
	else if (xp == XP_NONE)
		fprintf(stderr, "omnifs: peer %s (%s) up, transport none: %s, and transport=rdma "
			"moves no byte over TCP; reads of its objects fail with EIO\n",
			p->name, p->addr, why);
	else
		fprintf(stderr, "omnifs: peer %s (%s) up, transport tcp%s%s%s\n", p->name, p->addr,
			*why ? " (" : "", why, *why ? ")" : "");
	rdma_unhold(x, rd);
	return xp;
}

/* Under x->lock: why a dial of p failed, for .omni/health (the log says
 * only what changes; this is where an operator looks first). */
static void dial_failed(struct peer *p, int rc)
{
	if (rc == -EHOSTUNREACH && p->unresolved)
		return;                 /* peer_resolve said why */
	if (rc == -EACCES)
		snprintf(p->down_why, sizeof(p->down_why),
			 "it refused the handshake: is the secret the same?");
	else
		snprintf(p->down_why, sizeof(p->down_why), "connecting: %s", strerror(-rc));
}

/* c, handshaken, becomes p's connection, with what its handshake settled
 * (o; xp and why: the transport and the reason for it; pair_failed: its
 * queue pair did not connect, and is tried again in QP_RETRY_MS), and its
 * receiver starts.  Under x->lock.  0, or -EAGAIN (c is let go of). */
static int peer_adopt(struct peer *p, struct xport_conn *c, const struct offer *o,
		      int xp, const char *why, int pair_failed)
{
	p->out = c;
	p->rejoining = 0;
	p->caps = o->caps;
	p->xp = xp;
	snprintf(p->why, sizeof(p->why), "%s", why);
	p->since_ns = clock_wall_ns();
	p->qp_port = o->port;
	memcpy(p->qp_token, o->token, PROTO_TOKEN);
	p->qp_retry_ns = pair_failed ? clock_mono_ns() + QP_RETRY_MS * 1000000ull : 0;
	p->qp_tries = 0;
	if (pthread_create(&p->rx, NULL, rx_thread, c)) {
		p->out = NULL;
		conn_put(c);
		return -EAGAIN;
	}
	p->rx_joinable = 1;
	return 0;
}

/* Connects to peer i and starts its receiver.  0, or -errno. */
static int peer_connect(struct xport *x, int i)
{
	struct peer *p = &x->peers[i];
	struct xport_conn *c;
	struct offer o = { 0 };
	struct sockaddr_storage sa;
	socklen_t salen;
	char why[sizeof(p->why)];
	unsigned turns;
	int rc, xp, differs, say, turned, pair_failed = 0;

	if ((rc = connect_claim(x, p)) <= 0)
		return rc;
	pthread_mutex_lock(&x->lock);
	sa = p->sa;
	salen = p->salen;
	turns = rdma_turns(x);
	pthread_mutex_unlock(&x->lock);
	if (!sa.ss_family) {            /* its name has not resolved yet */
		rc = -EHOSTUNREACH;
		goto unclaim;
	}
	if ((rc = conn_open(x, i, &sa, salen, &c, &o)))
		goto unclaim;
	xp = peer_transport(x, i, &sa, &o, why, sizeof(why), &pair_failed);
	if (x->c.handshake_hold_ms)
		usleep(x->c.handshake_hold_ms * 1000u);
	/* Every node must run the same config (SPEC §7); one that does not
	 * routes announces and asks by another map of who hosts what. */
	differs = x->c.digest && o.digest != x->c.digest;
	pthread_mutex_lock(&x->lock);
	say = differs && !p->config_differs;
	p->config_differs = differs;
	turned = rdma_turns(x) != turns;
	rc = peer_adopt(p, c, &o, xp, why, pair_failed);
	pthread_mutex_unlock(&x->lock);
	if (say)
		fprintf(stderr, "omnifs: peer %s (%s) runs another cluster config than this node "
			"(its nodes, addresses or stages differ): every node must run the same one\n",
			p->name, p->addr);
	if (!rc)
		pulls_resume(x, i, c);  /* before the resync: a reader waits */
	if (!rc && x->ops->peer_up)
		x->ops->peer_up(x->ctx, i);
	if (!rc && turned)      /* what it settled is no more: settle it again */
		rejoin(x, i, c, PROTO_CAP_RDMA, "this node's RDMA device came or went "
		       "while it connected");
	if (rc)
		link_down(x, i);
unclaim:
	pthread_mutex_lock(&x->lock);
	int lost = rc && p->rejoining;  /* it went while we rejoined it */
	char down[sizeof(p->down_why)];
	if (rc) {
		dial_failed(p, rc);
		p->rejoining = 0;
		snprintf(down, sizeof(down), "%s", p->down_why);
	}
	p->connecting = 0;
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->lock);
	if (lost) {     /* its pulls held for this connect (conn_lost) fail */
		if (!x->stopping)
			fprintf(stderr, "omnifs: peer %s (%s) down: %s\n", p->name, p->addr, down);
		pending_fail(x, i, 0);
		if (x->ops->peer_down)
			x->ops->peer_down(x->ctx, i);
	}
	return rc;
}

/* Our connection to peer with a reference, if it is up: never waits to
 * connect. */
struct xport_conn *peer_out(struct xport *x, int peer)
{
	struct xport_conn *c;

	pthread_mutex_lock(&x->lock);
	if ((c = x->peers[peer].out))
		c->refs++;
	pthread_mutex_unlock(&x->lock);
	return c;
}

/* peer_out() for a new request.  While the peer is to be rejoined, it
 * waits until the requests in flight are done and the connection is let
 * go of (NULL: connect again): else a steady stream of them would keep
 * it busy for good.  For a quarter of dead_ms at most (the caller may
 * serve a peer, which must not find it dead), then on it as it is. */
static struct xport_conn *peer_out_settled(struct xport *x, int i)
{
	struct xport_conn *c;
	struct timespec ts;
	int waited = 0;

	pthread_mutex_lock(&x->lock);
	while (x->peers[i].rejoin && !x->stopping) {
		if (!waited++)
			ts = clock_deadline_in(x->c.dead_ms / 4);
		if (pthread_cond_timedwait(&x->cond, &x->lock, &ts) == ETIMEDOUT)
			break;
	}
	if ((c = x->peers[i].out))
		c->refs++;
	pthread_mutex_unlock(&x->lock);
	return c;
}

/* Our connection to peer with a reference, connecting on demand. */
struct xport_conn *peer_conn(struct xport *x, int i)
{
	struct xport_conn *c;

	if (i < 0 || (size_t)i >= x->npeers)
		return NULL;
	if ((c = peer_out_settled(x, i)) || peer_connect(x, i))
		return c;
	return peer_out(x, i);
}

/* ---------------------------------------------------------------- dialers and the keeper */

/* Connects to a peer that is down, away from the keeper: a peer that
 * accepts and then says nothing (stopped, hung) holds a handshake for
 * dead_ms, and the others must go on hearing our pings meanwhile. */
struct dial { struct xport *x; int peer; };

/* p's name did not resolve (under x->lock, or before a thread runs): why,
 * for health; 1 if it resolved before, so that the log says it once. */
int peer_unresolved(struct peer *p, const char *why)
{
	int news = !p->unresolved;

	snprintf(p->down_why, sizeof(p->down_why), "cannot resolve its name (%s)", why);
	p->unresolved = 1;
	return news;
}

void say_unresolved(const struct peer *p, const char *why)
{
	fprintf(stderr, "omnifs: peer %s (%s): cannot resolve its name (%s); "
		"looked up again while it is down\n", p->name, p->addr, why);
}

/* Looks peer i's name up again before a dial, so that a peer back at a
 * new address (a Kubernetes pod rescheduled, a new DHCP lease) is found
 * there, and one whose name did not resolve at start once it does: at
 * once after it went down, then each RESOLVE_MS at most (a dial goes each
 * ping_ms; with Kubernetes' ndots:5 a lookup may ask the DNS 6 times).
 * Only dialers look up (the resolver may take seconds): a request's own
 * connect uses the last address.  Each change is said once. */
static void peer_resolve(struct xport *x, int i)
{
	struct peer *p = &x->peers[i];
	struct sockaddr_storage sa, old;
	socklen_t len, oldlen;
	char why[96], now[INET6_ADDRSTRLEN + 10], was[sizeof(now)] = "";
	uint64_t t = clock_mono_ns();
	int rc, failed, moved;

	pthread_mutex_lock(&x->lock);
	int due = !p->looked_ns || t - p->looked_ns >= (uint64_t)RESOLVE_MS * 1000000u;
	if (due)
		p->looked_ns = t;
	pthread_mutex_unlock(&x->lock);
	if (!due)
		return;
	rc = resolve_addr(p->addr, &sa, &len, why, sizeof(why));
	pthread_mutex_lock(&x->lock);   /* said after: a log may block */
	failed = rc && peer_unresolved(p, why);
	moved = !rc && (len != p->salen || memcmp(&sa, &p->sa, len));
	old = p->sa;
	oldlen = p->salen;
	if (moved) {
		p->sa = sa;
		p->salen = len;
	}
	if (!rc)
		p->unresolved = 0;
	pthread_mutex_unlock(&x->lock);
	if (failed)
		say_unresolved(p, why);
	if (moved) {
		if (old.ss_family)
			sa_text(&old, oldlen, was, sizeof(was));
		sa_text(&sa, len, now, sizeof(now));
		fprintf(stderr, "omnifs: peer %s (%s) is at %s%s%s%s\n", p->name, p->addr, now,
			*was ? " now (was " : "", was, *was ? ")" : "");
	}
}

/* Peer i is up, and its queue pair, which did not connect, is due to be
 * tried again on this node's device (under x->lock). */
static int relink_due(struct xport *x, int i)
{
	const struct peer *p = &x->peers[i];

	return p->out && !p->connecting && p->qp_retry_ns && x->rdma && !x->rdma_gone &&
	       clock_mono_ns() >= p->qp_retry_ns;
}

/* Under x->lock: the pair tried again ended (rc), on the connection it
 * was for; 1 if it is up and to be said. */
static int relinked(struct xport *x, int i, int rc, const char *e)
{
	struct peer *p = &x->peers[i];

	p->qp_tries++;
	if (!rc) {
		p->xp = XP_RDMA;
		p->why[0] = 0;
		p->since_ns = clock_wall_ns();
		p->qp_retry_ns = 0;
		return 1;
	}
	unsigned ms = QP_RETRY_MS << (p->qp_tries < 5 ? p->qp_tries : 5);
	ms = ms < QP_RETRY_MAX_MS ? ms : QP_RETRY_MAX_MS;
	p->qp_retry_ns = clock_mono_ns() + ms * 1000000ull;
	snprintf(p->why, sizeof(p->why), "its RDMA queue pair did not connect: %s "
		 "(try %u; the next in %u s)", e, p->qp_tries + 1, ms / 1000);
	return 0;
}

/* Peer i's queue pair failed and did not connect again (the fabric drops
 * RoCE, while TCP gets through): it is tried again as one that did not
 * connect at the handshake is, and its bytes move over its connection,
 * which stays up (transport=rdma: not at all).  0, or -EHOSTDOWN where
 * that connection is gone too. */
int peer_unlinked(struct xport *x, int i, const char *e)
{
	struct peer *p = &x->peers[i];
	char why[sizeof(p->why)];
	int say;

	snprintf(why, sizeof(why), "its RDMA queue pair failed and did not connect again: %s "
		 "(try 1; the next in %u s)", e, QP_RETRY_MS / 1000);
	pthread_mutex_lock(&x->lock);
	if (!p->out) {
		pthread_mutex_unlock(&x->lock);
		return -EHOSTDOWN;
	}
	say = p->xp == XP_RDMA;
	p->xp = x->c.mode == XPORT_RDMA ? XP_NONE : XP_TCP;
	memcpy(p->why, why, sizeof(why));
	p->since_ns = clock_wall_ns();
	p->qp_tries = 0;
	p->qp_retry_ns = clock_mono_ns() + QP_RETRY_MS * 1000000ull;
	pthread_mutex_unlock(&x->lock);
	if (say)        /* what it said then, not what a retry says by now */
		fprintf(stderr, "omnifs: peer %s (%s): transport %s now (%s)\n", p->name, p->addr,
			x->c.mode == XPORT_RDMA ? "none" : "tcp", why);
	return 0;
}

/* Connects the queue pair of peer i again where it did not connect at the
 * handshake and its time has come: on the same connection, whose bytes
 * move over TCP (transport=rdma: not at all) until it does.  No other
 * connect to i runs meanwhile (p->connecting), so that the pair is that
 * connection's or none; one that came up for a connection gone since, or
 * on a device that went, goes again at once. */
static void peer_relink(struct xport *x, int i)
{
	struct peer *p = &x->peers[i];
	struct sockaddr_storage sa;
	uint8_t token[PROTO_TOKEN];
	uint16_t port;
	char e[96] = "";
	unsigned tries = 0;
	int rc, same, say = 0;

	pthread_mutex_lock(&x->lock);
	struct xport_conn *c = p->out;
	struct rdma *rd = relink_due(x, i) ? rdma_hold_locked(x) : NULL;
	unsigned turns = rdma_turns(x);
	if (rd) {
		p->connecting = 1;
		p->connector = pthread_self();
		sa = p->sa;
		port = p->qp_port;
		memcpy(token, p->qp_token, PROTO_TOKEN);
	}
	pthread_mutex_unlock(&x->lock);
	if (!rd)
		return;
	rc = rdma_link_up(rd, i, (const struct sockaddr *)&sa, port, token, e, sizeof(e));
	pthread_mutex_lock(&x->lock);
	same = p->out == c && rdma_turns(x) == turns;
	pthread_mutex_unlock(&x->lock);
	if (!same)
		rdma_link_down(rd, i);
	pthread_mutex_lock(&x->lock);
	if (same)
		say = relinked(x, i, rc, e);
	tries = p->qp_tries;
	p->connecting = 0;
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->lock);
	if (say)
		fprintf(stderr, "omnifs: peer %s (%s): transport rdma now (%s, grants by %s; its "
			"queue pair connected, try %u)\n", p->name, p->addr, rdma_device(rd),
			rdma_grants(rd), tries + 1);
	rdma_unhold(x, rd);
}

static void *dialer_thread(void *arg)
{
	struct dial *d = arg;
	struct xport *x = d->x;

	pthread_setname_np(pthread_self(), "omni-dial");
	pthread_mutex_lock(&x->lock);
	int up = x->peers[d->peer].out != NULL;
	pthread_mutex_unlock(&x->lock);
	if (up) {
		peer_relink(x, d->peer);
	} else {
		peer_resolve(x, d->peer);
		peer_connect(x, d->peer);
	}
	pthread_mutex_lock(&x->lock);
	x->peers[d->peer].dialing = 0;
	x->dialers--;
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->lock);
	free(d);
	return NULL;
}

void peer_dial(struct xport *x, int i)
{
	struct peer *p = &x->peers[i];
	struct dial *d = NULL;
	pthread_t t;

	pthread_mutex_lock(&x->lock);
	int go = !p->dialing && !x->stopping;
	if (go) {
		p->dialing = 1;
		x->dialers++;
	}
	pthread_mutex_unlock(&x->lock);
	if (!go)
		return;
	if ((d = malloc(sizeof(*d)))) {
		*d = (struct dial){ x, i };
		if (!pthread_create(&t, NULL, dialer_thread, d)) {
			pthread_detach(t);
			return;
		}
	}
	free(d);
	pthread_mutex_lock(&x->lock);
	p->dialing = 0;
	x->dialers--;
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->lock);
}

/* Pings peer i, never waiting behind a frame another thread is sending
 * (to a peer that reads nothing, that takes dead_ms): that thread pings
 * after its frame.  -EHOSTDOWN when not connected. */
static int ping_peer(struct xport *x, int i)
{
	struct xport_conn *c;

	pthread_mutex_lock(&x->lock);
	if ((c = x->peers[i].out))
		c->refs++;
	pthread_mutex_unlock(&x->lock);
	if (!c)
		return -EHOSTDOWN;
	if (pthread_mutex_trylock(&c->send_lock)) {
		atomic_store(&c->ping_owed, 1);
	} else {
		send_ping_locked(c);
		pthread_mutex_unlock(&c->send_lock);
	}
	conn_unref(x, c);
	return 0;
}

/* Pings what is up and has what is down dialed. */
void *keeper_thread(void *arg)
{
	struct xport *x = arg;

	pthread_setname_np(pthread_self(), "omni-keeper");
	pthread_mutex_lock(&x->lock);
	while (!x->stopping) {
		pthread_mutex_unlock(&x->lock);
		for (size_t i = 0; i < x->npeers && !x->stopping; i++) {
			int down = ping_peer(x, (int)i) == -EHOSTDOWN;
			pthread_mutex_lock(&x->lock);
			int relink = relink_due(x, (int)i);
			pthread_mutex_unlock(&x->lock);
			if (down || relink)
				peer_dial(x, (int)i);
		}
		/* A round each ping_ms, whatever else x->cond is broadcast for
		 * (a dialer's end among them: a peer that refuses at once
		 * must not be dialed in a loop). */
		struct timespec ts = clock_deadline_in(x->c.ping_ms);
		pthread_mutex_lock(&x->lock);
		while (!x->stopping && pthread_cond_timedwait(&x->cond, &x->lock, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&x->lock);
	return NULL;
}
