/* xport_accept.c - peers' connections to us, through the server's half of
 * the handshake (auth.h), in the acceptor's event loop.
 *
 * A stranger costs a descriptor and a small record, never a thread, and
 * has HANDSHAKE_MS to prove it holds the secret; at most STRANGERS_MAX
 * (STRANGERS_PER_HOST from one host) are in their handshake at once, the
 * oldest closed to make room (a real peer's handshake takes two round
 * trips, so a flood cannot starve it).  Only a peer that proved itself
 * gets a server thread (xport_serve.c), so threads are bounded by the cluster,
 * never by strangers.
 */
#define _GNU_SOURCE
#include "xport_internal.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#define HANDSHAKE_MS 2000
#define STRANGERS_MAX 1024
#define STRANGERS_PER_HOST 256

/* ---------------------------------------------------------------- strangers */

/* A connection in its handshake.  Strangers are served by the acceptor's
 * event loop: each costs a descriptor and this, never a thread, and has
 * HANDSHAKE_MS to prove it holds the secret.  Only then does it get a
 * server thread: threads are bounded by the cluster, not by strangers.
 * Nothing but a nonce goes out before the proof. */
#define HS_BODY_MAX 512                 /* HELLO, AUTH and our replies fit */
struct stranger {
	int fd, step;                   /* step 0: HELLO is due; 1: AUTH */
	struct sockaddr_storage from;
	uint64_t deadline;
	size_t have;                    /* bytes of the frame in buf */
	uint8_t buf[PROTO_HDR + HS_BODY_MAX];
	uint8_t cnonce[PROTO_NONCE], snonce[PROTO_NONCE];
	char name[PROTO_NAME_MAX + 1];
	uint32_t caps;
	unsigned turns;                 /* rdma_turns(x) its WELCOME was made at */
	uint64_t welcomed_ns;           /* when it went: the peer may say anything after */
	struct stranger *prev, *next;   /* oldest first: deadlines in order */
};

struct strangers {
	struct stranger *head, *tail;
	unsigned n, max, per_host;
	int ep;
};

/* The same host, whatever the port. */
static int same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return 0;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	return 1;
}

/* Takes s off the loop; its descriptor, for the caller to close or keep. */
static int stranger_unlink(struct strangers *q, struct stranger *s)
{
	int fd = s->fd;

	*(s->prev ? &s->prev->next : &q->head) = s->next;
	*(s->next ? &s->next->prev : &q->tail) = s->prev;
	q->n--;
	epoll_ctl(q->ep, EPOLL_CTL_DEL, fd, NULL);
	free(s);
	return fd;
}

static void stranger_drop(struct strangers *q, struct stranger *s)
{
	close(stranger_unlink(q, s));
}

/* A node of another release (our magic, another version in s's frame):
 * named, as an upgrade half done is a mistake an operator must see. */
static void stranger_other_release(struct xport *x, const struct stranger *s)
{
	char host[64] = "?", port[16] = "?";
	struct proto_hdr h;

	proto_frame_check(s->buf, &h);  /* -EPROTONOSUPPORT, h.version set */
	ops_count(x, XC_BAD_FRAMES, 1);
	getnameinfo((const struct sockaddr *)&s->from, sizeof(s->from), host, sizeof(host),
		    port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
	log_limited(x, &x->other_release, "%s:%s speaks peer protocol version %u, this node "
		    "%u: run the same omnifs release on every node", host, port, h.version,
		    PROTO_VERSION);
}

/* Why a stranger was dropped, counted, and said at most once a second. */
static void stranger_refused(struct xport *x, int rc)
{
	if (rc == -ETIMEDOUT) {
		ops_count(x, XC_STRANGERS_CLOSED, 1);
		log_limited(x, &x->slow_handshakes, "a connection did not prove it holds "
			    "the secret within %d ms; closed", HANDSHAKE_MS);
	} else if (rc == -EUSERS) {
		ops_count(x, XC_STRANGERS_CLOSED, 1);
		log_limited(x, &x->crowded, "too many connections in their handshake "
			    "(%u from one host, or all told); the oldest closed",
			    STRANGERS_PER_HOST);
	} else if (rc == -EACCES || rc == -EPROTO || rc == -EMSGSIZE) {
		ops_count(x, rc == -EACCES ? XC_AUTH_FAILED : XC_BAD_FRAMES, 1);
		log_limited(x, &x->bad_handshakes, "a connection failed the handshake (%s)",
			    rc == -EACCES ? "wrong secret or unknown node" : "not our protocol");
	}
}

/* What has come of s's frame: 1 when it is whole (h and m set), 0 while
 * more is due, or -errno. */
static int stranger_read(struct stranger *s, struct proto_hdr *h, struct proto_msg *m)
{
	for (;;) {
		size_t want = PROTO_HDR;
		int rc;
		if (s->have >= PROTO_HDR) {
			if ((rc = proto_frame_check(s->buf, h)))
				return rc;
			if (h->len > HS_BODY_MAX)
				return -EMSGSIZE;
			want += h->len;
			if (s->have == want)
				break;
		}
		ssize_t r = recv(s->fd, s->buf + s->have, want - s->have, MSG_DONTWAIT);
		if (r == 0)
			return -ECONNRESET;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		s->have += (size_t)r;
	}
	s->have = 0;
	int rc = proto_decode(h->type, s->buf + PROTO_HDR, h->len, m);
	return rc ? rc : 1;
}

/* A handshake frame to a socket with room for it (nothing else went out). */
static int stranger_send(struct stranger *s, const struct proto_msg *m)
{
	uint8_t buf[PROTO_HDR + HS_BODY_MAX];
	int len = proto_encode(m, buf + PROTO_HDR, HS_BODY_MAX);

	if (len < 0)
		return len;
	proto_put_hdr(buf, (uint8_t)m->type, (uint32_t)len, 0);
	ssize_t w = send(s->fd, buf, PROTO_HDR + (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
	return w == PROTO_HDR + len ? 0 : w < 0 ? -errno : -EAGAIN;
}

/* s's next frame, if it has come: 1 once it proved itself (WELCOME sent,
 * *peer and *srv set), 0 while more is due, or -errno. */
static int stranger_step(struct xport *x, struct stranger *s, int *peer, struct rdma_srv **srv)
{
	struct proto_msg r, m = { .type = PT_CHALLENGE };
	struct proto_hdr h;
	int rc = stranger_read(s, &h, &r);

	if (rc <= 0)
		return rc;
	rc = 0;
	if (s->step == 0) {
		if (h.type != PT_HELLO || r.u.hello.version != PROTO_VERSION) {
			rc = -EPROTO;
		} else {
			s->caps = r.u.hello.caps;
			memcpy(s->cnonce, r.u.hello.nonce, PROTO_NONCE);
			snprintf(s->name, sizeof(s->name), "%s", r.u.hello.name);
			auth_nonce(s->snonce);
			m.u.challenge.version = PROTO_VERSION;
			memcpy(m.u.challenge.nonce, s->snonce, PROTO_NONCE);
			rc = stranger_send(s, &m);
			s->step = 1;
		}
		proto_msg_free(&r);
		return rc;
	}
	*peer = xport_peer_index(x, s->name);
	if (h.type != PT_AUTH || *peer < 0 ||
	    !auth_check(x->key, AUTH_CLIENT, s->cnonce, s->snonce, s->name, r.u.auth.mac))
		rc = -EACCES;
	proto_msg_free(&r);
	if (rc)
		return rc;
	m = (struct proto_msg){ .type = PT_WELCOME };
	m.u.welcome.caps = x->caps;
	m.u.welcome.digest = x->c.digest;
	snprintf(m.u.welcome.name, sizeof(m.u.welcome.name), "%s", x->self);
	auth_mac(x->key, AUTH_SERVER, s->cnonce, s->snonce, x->self, m.u.welcome.mac);
	/* Only now, to a peer that proved it holds the secret: where to
	 * connect its queue pair, and the token that ties it to us. */
	*srv = NULL;
	pthread_mutex_lock(&x->lock);
	struct rdma *rd = rdma_hold_locked(x);
	s->turns = rdma_turns(x);
	pthread_mutex_unlock(&x->lock);
	if (rd && rdma_serves(rd) && (s->caps & PROTO_CAP_RDMA) &&
	    (*srv = rdma_srv_new(rd, m.u.welcome.token)))
		m.u.welcome.rdma_port = rdma_port(rd);
	else
		rdma_unhold(x, rd);     /* else the pair holds it (srv_end) */
	s->welcomed_ns = clock_mono_ns();
	if ((rc = stranger_send(s, &m)) && *srv) {
		srv_end(x, *srv);
		*srv = NULL;
	}
	return rc ? rc : 1;
}

/* A peer that proved itself gets a server thread; a newer connection of
 * a peer replaces its older one (it reconnected: the old one is stale). */
static void stranger_promote(struct xport *x, struct strangers *q, struct stranger *s,
			     int peer, struct rdma_srv *srv)
{
	uint64_t name = conn_name(s->cnonce);
	uint32_t caps = s->caps;
	unsigned turns = s->turns;
	uint64_t made_ns = s->welcomed_ns;
	int fd = stranger_unlink(q, s), tell = 0;
	pthread_t t;

	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	if (x->c.handshake_hold_ms)
		usleep(x->c.handshake_hold_ms * 1000u);
	struct xport_conn *c = conn_new(x, fd, peer, 0);
	if (!c) {
		srv_end(x, srv);
		close(fd);
		return;
	}
	c->srv = srv;
	c->reads_rdma = !!(caps & PROTO_CAP_RDMA);
	c->hears_redial = !!(caps & PROTO_CAP_REDIAL);
	c->made_ns = made_ns;
	c->name = name;
	pthread_mutex_lock(&x->lock);
	for (struct xport_conn *o = x->servers; o; o = o->next)
		if (o->peer == peer)
			shutdown(o->fd, SHUT_RDWR);
	c->next = x->servers;
	x->servers = c;
	x->nservers++;
	if (pthread_create(&t, NULL, server_thread, c)) {
		x->servers = c->next;
		x->nservers--;
		c->srv = NULL;  /* ended below, unlocked: rdma_cm's thread may want x->lock */
		conn_put(c);
	} else {
		/* Its WELCOME offered no RDMA, and the device is back since:
		 * servers_redial_back did not know this connection yet. */
		tell = !srv && c->reads_rdma && turns != rdma_turns(x) && x->rdma && !x->rdma_gone;
		if (tell)
			c->refs++;
		srv = NULL;     /* the server thread's */
		pthread_detach(t);
	}
	pthread_mutex_unlock(&x->lock);
	srv_end(x, srv);
	if (tell)
		redial_tell(x, c);
}

/* A new stranger from `from`, after the oldest from that host (or of all)
 * is closed when there are already as many as we take. */
static void stranger_add(struct xport *x, struct strangers *q, int fd,
			 const struct sockaddr_storage *from)
{
	struct stranger *s = calloc(1, sizeof(*s)), *old = NULL;
	unsigned here = 0;

	for (struct stranger *o = q->tail; o; o = o->prev)
		if (same_host(&o->from, from) && ++here >= q->per_host)
			old = o;                /* the oldest of them */
	if (!old && q->n >= q->max)
		old = q->head;
	if (old) {
		stranger_drop(q, old);
		stranger_refused(x, -EUSERS);
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = s };
	if (!s || epoll_ctl(q->ep, EPOLL_CTL_ADD, fd, &ev)) {
		free(s);
		close(fd);
		return;
	}
	s->fd = fd;
	s->from = *from;
	s->deadline = clock_mono_ns() + HANDSHAKE_MS * 1000000ull;
	s->prev = q->tail;
	*(q->tail ? &q->tail->next : &q->head) = s;
	q->tail = s;
	q->n++;
}

/* Strangers take at most a quarter of the descriptors we may have. */
static void strangers_init(struct strangers *q)
{
	struct rlimit rl;

	*q = (struct strangers){ .max = STRANGERS_MAX, .per_host = STRANGERS_PER_HOST };
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur / 4 < q->max)
		q->max = rl.rlim_cur / 4 > 8 ? (unsigned)(rl.rlim_cur / 4) : 8;
	if (q->per_host > q->max)
		q->per_host = q->max;
}

/* Strangers' frames first, new connections after: making room for one
 * may close a stranger whose event is in the same batch. */
static void acceptor_events(struct xport *x, struct strangers *q, struct epoll_event *ev, int n)
{
	int listener = 0;

	for (int i = 0; i < n; i++) {
		struct stranger *s = ev[i].data.ptr;
		struct rdma_srv *srv = NULL;
		int peer = -1, rc;
		if (!s) {
			listener = 1;
		} else if ((rc = stranger_step(x, s, &peer, &srv)) > 0) {
			stranger_promote(x, q, s, peer, srv);
		} else if (rc < 0) {
			if (rc == -EPROTONOSUPPORT)
				stranger_other_release(x, s);
			else
				stranger_refused(x, rc);
			stranger_drop(q, s);
		}
	}
	if (listener) {
		struct sockaddr_storage from = { 0 };
		socklen_t len = sizeof(from);
		int fd = accept4(x->lfd, (struct sockaddr *)&from, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0)
			stranger_add(x, q, fd, &from);
		else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			usleep(100000);         /* let it ease */
	}
}

void *acceptor_thread(void *arg)
{
	struct xport *x = arg;
	struct strangers q;
	struct epoll_event ev[64] = { { .events = EPOLLIN, .data.ptr = NULL } };

	pthread_setname_np(pthread_self(), "omni-accept");
	strangers_init(&q);
	if ((q.ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    epoll_ctl(q.ep, EPOLL_CTL_ADD, x->lfd, &ev[0])) {
		fprintf(stderr, "omnifs: the acceptor cannot poll: %s; no peer can connect\n",
			strerror(errno));
		return NULL;
	}
	while (!x->stopping) {
		int n = epoll_wait(q.ep, ev, 64, TICK_MS);
		acceptor_events(x, &q, ev, n > 0 ? n : 0);
		for (uint64_t now = clock_mono_ns(); q.head && q.head->deadline <= now;) {
			stranger_refused(x, -ETIMEDOUT);
			stranger_drop(&q, q.head);
		}
	}
	while (q.head)
		stranger_drop(&q, q.head);
	close(q.ep);
	return NULL;
}
