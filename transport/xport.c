/* xport.c - peer connections over TCP: frames, our requests, their
 * replies and our pulls' DATA; and the lifecycle of it all.  Starting a
 * pull, by RDMA or TCP, is xport_pull.c's, connecting to peers
 * xport_dial.c's, taking their connections through the handshake
 * xport_accept.c's, serving a peer's requests xport_serve.c's, this
 * node's RDMA device xport_rdma.c's (xport_internal.h says what they
 * share).
 *
 * Threads: an acceptor, whose event loop also takes each new connection
 * through the handshake; one server thread per authenticated connection,
 * which reads its peer's requests in order, and beside it a sender of the
 * bytes of its pulls over TCP (both xport_serve.c's); one receiver
 * thread per connection we made, which reads replies and DATA frames; a
 * keeper that pings and reconnects.  So threads are bounded by the cluster, never by
 * strangers (xport_accept.c).  A peer has one connection to us: its newer
 * one replaces the older.  x->lock guards the peers' state and the table
 * of requests in flight; no lock is held while bytes move, except a
 * connection's send lock, which orders its frames.
 *
 * Sockets carry a 250 ms receive timeout: a thread blocked in recv wakes
 * that often to see whether its peer has been silent too long or a pull
 * has stalled.  Senders time out after dead_ms, so a peer that stops
 * reading can block nobody for longer.
 */
#define _GNU_SOURCE
#include "xport_internal.h"
#include "clock.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>      /* libxxhash's AVX2/AVX-512 paths, chosen at run time */
#endif

#define SOCKBUF (4 << 20)
#define RX_AHEAD (64u << 10)       /* a peer's requests read at a time */
#define HELD_MAX (16u << 10)       /* frames held for the next, at most */

/* Set in a thread that has called xport_flush, and so calls it again when
 * its burst of work is over: only its frames may be held.  Any other (a
 * deadline's expiry, a view's job) sends at once, or its GONE would wait
 * for the keeper's next ping. */
static __thread int flushes_bursts;

void sends_bursts(void)
{
	flushes_bursts = 1;
}

void log_limited(struct xport *x, struct ratelog *rl, const char *fmt, ...)
{
	uint64_t now = clock_mono_ns();
	unsigned long quiet;
	char line[256];
	va_list ap;

	pthread_mutex_lock(&x->lock);
	if (rl->last_ns && now - rl->last_ns < 1000000000u) {
		rl->quiet++;
		pthread_mutex_unlock(&x->lock);
		return;
	}
	quiet = rl->quiet;
	rl->quiet = 0;
	rl->last_ns = now;
	pthread_mutex_unlock(&x->lock);
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (quiet)
		fprintf(stderr, "omnifs: %s (and %lu more since the last such line)\n", line, quiet);
	else
		fprintf(stderr, "omnifs: %s\n", line);
}

void ops_count(struct xport *x, enum xport_count what, uint64_t n)
{
	if (x->ops->count)
		x->ops->count(x->ctx, what, n);
}

/* "host:port" or "[v6]:port" into its first socket address: 0, -EINVAL
 * (not of that form), or -EHOSTUNREACH with the resolver's word in why. */
int resolve_addr(const char *addr, struct sockaddr_storage *sa, socklen_t *len,
			char *why, size_t wlen)
{
	char host[128];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	int rc;

	if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(host))
		return -EINVAL;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = 0;
	}
	if ((rc = getaddrinfo(host, colon + 1, &hints, &ai))) {
		snprintf(why, wlen, "%s", rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	memcpy(sa, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

/* A socket address as text, numeric ("10.0.0.7:7070", "[fe80::1]:7070"). */
void sa_text(const struct sockaddr_storage *sa, socklen_t len, char *out, size_t olen)
{
	char host[INET6_ADDRSTRLEN], port[8];

	if (getnameinfo((const struct sockaddr *)sa, len, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV))
		snprintf(out, olen, "?");
	else
		snprintf(out, olen, sa->ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

static void sock_setup(int fd, unsigned dead_ms)
{
	struct timeval rt = { 0, TICK_MS * 1000 }, st = { dead_ms / 1000, (dead_ms % 1000) * 1000 };
	int one = 1, buf = SOCKBUF;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rt, sizeof(rt));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &st, sizeof(st));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

/* ---------------------------------------------------------------- frames */

/* The transport whose ops->waits() this thread owes, while it is in
 * xport_call_each(): told before the first thing that would block it. */
static __thread struct xport *waits_owed;

static void waits_note(void)
{
	struct xport *x = waits_owed;

	waits_owed = NULL;
	if (x && x->ops->waits)
		x->ops->waits(x->ctx);
}

/* Sends iov[0, n) whole, under c->send_lock. */
static int send_locked(struct xport_conn *c, struct iovec *v, int n)
{
	int rc = 0;

	while (n > 0) {
		struct msghdr mh = { .msg_iov = v, .msg_iovlen = (size_t)n };
		ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | (waits_owed ? MSG_DONTWAIT : 0));
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN && waits_owed) {
			waits_note();   /* the socket is full: this will block */
			continue;
		}
		if (w <= 0) {
			rc = w < 0 ? -errno : -EPIPE;
			/* Half a frame went out: the stream is unusable. */
			shutdown(c->fd, SHUT_RDWR);
			break;
		}
		while (n > 0 && (size_t)w >= v->iov_len) {
			w -= (ssize_t)v->iov_len;
			v++;
			n--;
		}
		if (n > 0) {
			v->iov_base = (char *)v->iov_base + w;
			v->iov_len -= (size_t)w;
		}
	}
	return rc;
}

/* Sends v[1, n) after what was held, which v[0] is made to hold: under
 * c->send_lock.  Whatever happens, nothing is held after. */
static int send_after_held(struct xport_conn *c, struct iovec *v, int n)
{
	int rc;

	v[0] = (struct iovec){ c->held, c->nheld };
	rc = c->nheld ? send_locked(c, v, n) : send_locked(c, v + 1, n - 1);
	c->nheld = 0;
	c->held_ns = 0;
	return rc;
}

/* A PING (a header alone), under c->send_lock. */
int send_ping_locked(struct xport_conn *c)
{
	uint8_t hdr[PROTO_HDR];
	struct iovec v[2] = { { 0 }, { hdr, PROTO_HDR } };

	proto_put_hdr(hdr, PT_PING, 0, 0);
	if (c->outgoing)
		atomic_fetch_add(&c->frames, 1);
	return send_after_held(c, v, 2);
}

/* x->held_since becomes t, if that is older. */
static void held_note(struct xport *x, uint64_t t)
{
	uint64_t cur = atomic_load(&x->held_since);

	while ((!cur || t < cur) && !atomic_compare_exchange_weak(&x->held_since, &cur, t))
		;
}

/* Holds the frame of v[0, n), len bytes, for the next: 1, or 0 where it
 * must go now, with what was held (there is no room, or the oldest has
 * waited XPORT_HOLD_MS: a steady stream of them still goes out). */
static int hold_locked(struct xport_conn *c, const struct iovec *v, int n, size_t len)
{
	uint64_t now = clock_mono_ns(), held = c->held_ns;

	if (len > HELD_MAX - c->nheld || (held && now - held > XPORT_HOLD_MS * 1000000ull) ||
	    (!c->held && !(c->held = malloc(HELD_MAX))))
		return 0;
	for (int i = 0; i < n; i++) {
		memcpy(c->held + c->nheld, v[i].iov_base, v[i].iov_len);
		c->nheld += v[i].iov_len;
	}
	if (!held) {
		c->held_ns = now;
		held_note(c->x, now);
	}
	return 1;
}

/* A frame v[0, n) TRICKLE bytes at a time, c->x->c.trickle_ms apart
 * (tests: a link that stalls within frames), under c->send_lock. */
#define TRICKLE (16u << 10)
static int send_trickled(struct xport_conn *c, struct iovec *v, int n)
{
	int rc = 0;

	while (!rc && n > 0) {
		struct iovec part[3 + 64];
		size_t len = 0;
		int k = 0;
		while (n > 0 && len < TRICKLE) {
			size_t take = v->iov_len < TRICKLE - len ? v->iov_len : TRICKLE - len;
			part[k++] = (struct iovec){ v->iov_base, take };
			len += take;
			v->iov_base = (char *)v->iov_base + take;
			if (!(v->iov_len -= take)) {
				v++;
				n--;
			}
		}
		rc = send_locked(c, part, k);
		if (!rc && n > 0)
			usleep(c->x->c.trickle_ms * 1000u);
	}
	return rc;
}

/* Sends a header, a body and extra bytes as one frame, after what was
 * held, or holds it (hold); and the ping the keeper left to this sender
 * (ping_peer). */
int conn_sendv(struct xport_conn *c, uint8_t type, uint64_t reqid, int hold,
	       const uint8_t *body, size_t blen, const struct iovec *extra, int nextra)
{
	struct iovec iov[3 + 64];
	uint8_t hdr[PROTO_HDR];
	size_t total = blen;
	int n = 1, rc = 0;              /* iov[0]: what was held */

	if (nextra > 64)
		return -EINVAL;
	for (int i = 0; i < nextra; i++)
		total += extra[i].iov_len;
	proto_put_hdr(hdr, type, (uint32_t)total, reqid);
	iov[n++] = (struct iovec){ hdr, PROTO_HDR };
	if (blen)
		iov[n++] = (struct iovec){ (void *)body, blen };
	for (int i = 0; i < nextra; i++)
		iov[n++] = extra[i];
	/* A pull's DATA frames go out one after the other from its own
	 * thread, which takes the lock again before a waiter for it wakes: a
	 * reply, an ACKS or a PONG meanwhile would wait for the pull's end
	 * (a RELEASE that stops it was not even read).  It goes between two
	 * of them instead. */
	int bulk = type == PT_DATA;
	if (!bulk)
		atomic_fetch_add(&c->waiting, 1);
	if (!waits_owed || pthread_mutex_trylock(&c->send_lock)) {
		waits_note();
		pthread_mutex_lock(&c->send_lock);
	}
	if (!bulk)
		atomic_fetch_sub(&c->waiting, 1);
	while (bulk && atomic_load(&c->waiting))
		pthread_cond_wait(&c->gap, &c->send_lock);
	if (c->outgoing)                /* in the order they go */
		atomic_fetch_add(&c->frames, 1);
	if (type == PT_DATA && c->x->c.trickle_ms) {
		if (!(rc = send_after_held(c, iov, 1)))
			rc = send_trickled(c, iov + 1, n - 1);
	} else if (!hold || !flushes_bursts || !hold_locked(c, iov + 1, n - 1, PROTO_HDR + total)) {
		rc = send_after_held(c, iov, n);
	}
	if (!rc && atomic_exchange(&c->ping_owed, 0))
		rc = send_ping_locked(c);
	if (!bulk && !atomic_load(&c->waiting))
		pthread_cond_broadcast(&c->gap);
	pthread_mutex_unlock(&c->send_lock);
	return rc;
}

static int conn_send_held(struct xport_conn *c, uint64_t reqid, const struct proto_msg *m,
			  int hold)
{
	uint8_t buf[PROTO_INLINE_MAX + 1024];
	int len = proto_encode(m, buf, sizeof(buf));

	return len < 0 ? len : conn_sendv(c, (uint8_t)m->type, reqid, hold, buf, (size_t)len,
					  NULL, 0);
}

int conn_send(struct xport_conn *c, uint64_t reqid, const struct proto_msg *m)
{
	return conn_send_held(c, reqid, m, 0);
}

/* A body too large for conn_send's stack (a GRANTED). */
int conn_send_body(struct xport_conn *c, uint8_t type, uint64_t reqid,
		   const uint8_t *body, int len)
{
	return len < 0 ? len : conn_sendv(c, type, reqid, 0, body, (size_t)len, NULL, 0);
}

/* After a receive timed out (EAGAIN): the error that ends the wait, or 0
 * to wait on.  A silence of dead_ms, between frames or within one, is a
 * dead peer; tick() runs each time and may end the wait itself. */
static int conn_waited(struct xport_conn *c, int (*tick)(struct xport_conn *c))
{
	if (c->x->stopping)
		return -ESHUTDOWN;
	if (clock_mono_ns() - c->last_rx > (uint64_t)c->x->c.dead_ms * 1000000u)
		return -ETIMEDOUT;
	return tick ? tick(c) : 0;
}

/* Moves up to len bytes from c->ahead to buf; how many. */
static size_t ahead_take(struct xport_conn *c, void *buf, size_t len)
{
	size_t n = c->ahead_end - c->ahead_at;

	n = n < len ? n : len;
	memcpy(buf, c->ahead + c->ahead_at, n);
	c->ahead_at += n;
	return n;
}

/* Reads exactly len bytes through c->ahead. */
static int conn_read_ahead(struct xport_conn *c, uint8_t *buf, size_t len,
			   int (*tick)(struct xport_conn *c))
{
	for (size_t got = ahead_take(c, buf, len); got < len; got += ahead_take(c, buf + got, len - got)) {
		ssize_t r = read(c->fd, c->ahead, RX_AHEAD);
		int rc;
		if (r == 0)
			return -ECONNRESET;
		if (r < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (r < 0 && errno != EINTR && (rc = conn_waited(c, tick)))
			return rc;
		c->ahead_at = 0;
		c->ahead_end = r > 0 ? (size_t)r : 0;
		if (r > 0)
			c->last_rx = clock_mono_ns();
	}
	return 0;
}

/* Reads exactly the bytes of iov.  With st, the bytes are hashed as each
 * read returns them, while they are still in cache. */
static int conn_readv(struct xport_conn *c, struct iovec *iov, int n,
		      int (*tick)(struct xport_conn *c), XXH3_state_t *st)
{
	while (n > 0) {
		ssize_t r = readv(c->fd, iov, n);
		if (r == 0)
			return -ECONNRESET;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return -errno;
			int rc = conn_waited(c, tick);
			if (rc)
				return rc;
			continue;
		}
		c->last_rx = clock_mono_ns();
		while (n > 0 && (size_t)r >= iov->iov_len) {
			if (st)
				XXH3_64bits_update(st, iov->iov_base, iov->iov_len);
			r -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (st && n > 0 && r)
			XXH3_64bits_update(st, iov->iov_base, (size_t)r);
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + r;
			iov->iov_len -= (size_t)r;
		}
	}
	return 0;
}

static int conn_read(struct xport_conn *c, void *buf, size_t len,
		     int (*tick)(struct xport_conn *c))
{
	struct iovec iov = { buf, len };

	if (c->ahead)
		return conn_read_ahead(c, buf, len, tick);
	return len ? conn_readv(c, &iov, 1, tick, NULL) : 0;
}

/* Reads and checks one frame; its body (if not DATA) lands in c->body and
 * is decoded into m. */
int conn_recv(struct xport_conn *c, struct proto_hdr *h, struct proto_msg *m,
		     int (*tick)(struct xport_conn *c))
{
	uint8_t hdr[PROTO_HDR];
	int rc;

	if ((rc = conn_read(c, hdr, PROTO_HDR, tick)))
		return rc;
	if ((rc = proto_frame_check(hdr, h)))
		return rc;
	size_t want = h->type == PT_DATA ? (h->len < PROTO_DATA_HDR ? h->len : PROTO_DATA_HDR) : h->len;
	if ((rc = conn_read(c, c->body, want, tick)))
		return rc;
	return proto_decode(h->type, c->body, h->len, m);
}

struct xport_conn *conn_new(struct xport *x, int fd, int peer, int outgoing)
{
	struct xport_conn *c = calloc(1, sizeof(*c));

	if (!c || !(c->body = malloc(PROTO_MAX_BODY)) ||
	    (!outgoing && !(c->ahead = malloc(RX_AHEAD)))) {
		if (c)
			free(c->body);
		free(c);
		return NULL;
	}
	c->x = x;
	c->fd = fd;
	c->peer = peer;
	c->outgoing = outgoing;
	c->refs = 1;
	c->last_rx = clock_mono_ns();
	pthread_mutex_init(&c->send_lock, NULL);
	pthread_cond_init(&c->gap, NULL);
	pthread_mutex_init(&c->defer_lock, NULL);
	pthread_cond_init(&c->defer_cond, NULL);
	c->defer_tail = &c->defer_head;
	sock_setup(fd, x->c.dead_ms);
	return c;
}

/* Drops a reference; the last one closes.  Called with x->lock held. */
void conn_put(struct xport_conn *c)
{
	if (--c->refs)
		return;
	close(c->fd);
	pthread_mutex_destroy(&c->send_lock);
	pthread_cond_destroy(&c->gap);
	pthread_mutex_destroy(&c->defer_lock);
	pthread_cond_destroy(&c->defer_cond);
	free(c->body);
	free(c->ahead);
	free(c->held);
	free(c);
}

/* ---------------------------------------------------------------- requests */

static struct pending *pending_find(struct xport *x, uint64_t reqid)
{
	for (struct pending *p = x->pending; p; p = p->next)
		if (p->reqid == reqid)
			return p;
	return NULL;
}

/* Whether a request to peer i is in flight.  Under x->lock. */
static int peer_busy(const struct xport *x, int i)
{
	for (const struct pending *p = x->pending; p; p = p->next)
		if (p->peer == i)
			return 1;
	return 0;
}

/* Peer i's connection is let go of, if it is to be rejoined and no
 * request is in flight on it: its receiver sees its end at once (SHUT_RD
 * ends no send), sends what is still held on it and closes it
 * (retired_end); the requests that wait for it (peer_out_settled)
 * connect again.  The peer is not down: nothing it told us is forgotten.
 * Under x->lock. */
static void rejoin_locked(struct xport *x, int i)
{
	struct peer *p = &x->peers[i];
	struct xport_conn *c = p->out;

	if (!p->rejoin || !c || c->ended || peer_busy(x, i))
		return;
	p->out = NULL;
	p->rejoin = 0;
	p->rejoining = 1;
	p->down_why[0] = '\0';         /* no fault: health says only "connecting" */
	c->retired = 1;
	shutdown(c->fd, SHUT_RD);
	pthread_cond_broadcast(&x->cond);
}

/* Takes p off the table; the last one of a peer being rejoined lets its
 * connection go. */
void pending_del(struct xport *x, struct pending *p)
{
	for (struct pending **pp = &x->pending; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			rejoin_locked(x, p->peer);
			return;
		}
}

/* Puts p in the table, if c is still its peer's connection.  conn_lost()
 * clears that under the lock before it fails what is in flight, so a
 * request on a connection that went down meanwhile would otherwise wait
 * for an end that only a later connection's tick would bring.  A pull
 * with no c is held while its peer is connected to again (conn_lost),
 * and asked for on the next connection (pulls_resume).  Under x->lock; 1
 * if linked. */
int pending_link(struct xport *x, struct xport_conn *c, struct pending *p)
{
	const struct peer *pe = &x->peers[p->peer];

	if (c ? pe->out != c : !p->pull || pe->out || !pe->rejoining)
		return 0;
	p->on = c ? c->name : 0;
	p->reqid = ++x->next_reqid;
	p->next = x->pending;
	x->pending = p;
	return 1;
}

/* A pull off the table: its owner hears its end, once. */
void pull_told(struct pending *p, int err)
{
	p->progress(p->arg, p->got > p->shown ? p->got : p->shown, err);
	free(p->dst);
	free(p);
}

/* Ends a pull.  Called unlocked, on the receiver. */
static void pull_end(struct xport *x, struct pending *p, int err)
{
	pthread_mutex_lock(&x->lock);
	pending_del(x, p);
	pthread_mutex_unlock(&x->lock);
	pull_told(p, err);
}

/* Ends a told request, taken off the table under the lock by whoever
 * ends it: its sender hears once.  Called unlocked. */
static void tell_end(struct pending *p, int err)
{
	p->told(p->arg, err);
	free(p);
}

/* Ends a call with err (0: a reply was given to on_reply). */
static void call_end(struct xport *x, struct pending *p, int err)
{
	p->done = 1;
	p->err = err;
	pending_del(x, p);
	pthread_cond_broadcast(p->cond);
}

/* Fails what is in flight to peer: the connection is gone (pulls: the
 * peer too, unless kept for its next connection).  A call's pending lives
 * on its caller's stack, which call_end() hands back: it is not touched
 * once the lock is dropped. */
void pending_fail(struct xport *x, int peer, int keep_pulls)
{
	for (;;) {
		pthread_mutex_lock(&x->lock);
		struct pending *p = x->pending;
		while (p && (p->peer != peer || (keep_pulls && p->pull)))
			p = p->next;
		if (p && p->busy) {     /* a reply is being handed over: look again */
			pthread_cond_wait(&x->unbusy, &x->lock);
			pthread_mutex_unlock(&x->lock);
			continue;
		}
		int pull = p && p->pull, told = p && p->told;
		if (told)
			pending_del(x, p);
		else if (p && !pull)
			call_end(x, p, -EIO);
		pthread_mutex_unlock(&x->lock);
		if (!p)
			return;
		if (pull)
			pull_end(x, p, -EIO);
		else if (told)
			tell_end(p, -EIO);
	}
}

/* The receiver's tick between frames: a pull failed when it was asked,
 * and the last DATA frame on its connection landed, over dead_ms ago.
 * The peer serves its pulls in turn: one queued behind a long one waits
 * while that one's bytes come, however slowly.  Within a DATA frame no
 * tick runs (land, rx_drop); a silence of dead_ms there ends the
 * connection (conn_waited). */
static int rx_tick(struct xport_conn *c)
{
	struct xport *x = c->x;
	uint64_t now = clock_mono_ns(), dead = (uint64_t)x->c.dead_ms * 1000000u;
	struct pending *stalled = NULL;

	pthread_mutex_lock(&x->lock);
	for (struct pending *p = x->pending; p && !stalled; p = p->next) {
		uint64_t moved = p->asked_ns > c->last_data ? p->asked_ns : c->last_data;
		if (p->peer == c->peer && p->pull && p->on == c->name && now - moved > dead)
			stalled = p;
	}
	pthread_mutex_unlock(&x->lock);
	if (stalled) {
		fprintf(stderr, "omnifs: pull from %s stalled for %u ms\n",
			x->peers[c->peer].name, x->c.dead_ms);
		pull_end(x, stalled, -EIO);
	}
	return 0;
}

/* Up to max pieces of the pull's buffer from stream offset from, on for
 * at most len bytes; *took says how many they hold. */
static int pull_slice(const struct pending *p, uint64_t from, uint64_t len,
		      struct iovec *out, int max, uint64_t *took)
{
	int n = 0;
	uint64_t pos = 0, want = len;

	for (int i = 0; i < p->ndst && len && n < max; i++) {
		uint64_t l = p->dst[i].iov_len;
		if (from < pos + l) {
			uint64_t skip = from - pos, take = l - skip < len ? l - skip : len;
			out[n++] = (struct iovec){ (char *)p->dst[i].iov_base + skip, take };
			from += take;
			len -= take;
		}
		pos += l;
	}
	*took = want - len;
	return n ? n : -EINVAL;
}

/* A frame's bytes, read straight into the pull's buffer (in as many
 * pieces as it spans) and hashed as each read lands them, while they are
 * in cache.  Straight in, not through a small buffer in cache and on
 * around it with streaming stores: whoever pulls reads the bytes soon
 * (a reader copies them out right behind the pull, a view checks them, a
 * stream hands them on), and the detour cost a copy.  A 64 MiB get
 * across two nodes on this VM: the receiving thread's CPU went from
 * 18-24 ms to 16-20, the get from 40-46 ms to 35-42 (interleaved runs). */
static int land(struct xport_conn *c, const struct pending *p, uint64_t len,
		XXH3_state_t *st)
{
	struct iovec iov[64];
	uint64_t took;
	int n, rc;

	for (uint64_t pos = p->got; len; pos += took, len -= took) {
		if ((n = pull_slice(p, pos, len, iov, 64, &took)) < 0)
			return -EPROTO;         /* the buffer is shorter than the pull */
		if ((rc = conn_readv(c, iov, n, NULL, st)))
			return rc;
	}
	return 0;
}

/* A frame's bytes for a pull that ended: read and dropped. */
static int rx_drop(struct xport_conn *c, uint32_t len)
{
	for (uint32_t k; len; len -= k) {
		k = len < PROTO_MAX_BODY ? len : PROTO_MAX_BODY;
		int rc = conn_read(c, c->body, k, NULL);
		if (rc)
			return rc;
	}
	return 0;
}

/* A DATA frame: its bytes land in the pull's buffer, are hashed on the
 * way, and are reported only once the frame's hash matches.  The pull is
 * busy while they land and while it hears: nobody else ends it under us
 * (pending_fail waits), and no pull is stalled while a frame's bytes
 * come, however slowly (rx_tick). */
static int rx_data(struct xport_conn *c, const struct proto_hdr *h, const struct proto_msg *m)
{
	struct xport *x = c->x;
	int rc, err = 0, end;
	XXH3_state_t st;

	pthread_mutex_lock(&x->lock);
	struct pending *p = pending_find(x, h->reqid);
	if (p && (!p->pull || p->peer != c->peer || p->on != c->name || m->u.data.off != p->at ||
		  m->u.data.len > p->len - p->got))
		p = NULL;
	if (p)
		p->busy = 1;
	pthread_mutex_unlock(&x->lock);
	if (p) {
		XXH3_64bits_reset(&st);
		rc = land(c, p, m->u.data.len, &st);
	} else {
		rc = rx_drop(c, m->u.data.len);
	}
	c->last_data = clock_mono_ns();
	if (!p)
		return rc;
	if (!rc && XXH3_64bits_digest(&st) != m->u.data.xxh3) {
		ops_count(x, XC_BAD_CHUNKS, 1);
		fprintf(stderr, "omnifs: chunk at %llu from %s fails its checksum\n",
			(unsigned long long)m->u.data.off, x->peers[c->peer].name);
		err = -EIO;
	} else if (!rc) {
		p->got += m->u.data.len;
		p->at += m->u.data.len;
		ops_count(x, XC_PULLED, m->u.data.len);
		ops_count(x, XC_PULLED_TCP, m->u.data.len);
		if (p->got < p->len && p->got > p->shown) {     /* not a piece again */
			p->shown = p->got;
			p->progress(p->arg, p->got, 0);
		}
	}
	/* A failed read leaves it to the connection's end (pending_fail). */
	pthread_mutex_lock(&x->lock);
	p->busy = 0;
	pthread_cond_broadcast(&x->unbusy);
	if ((end = !rc && (err || p->got == p->len)))
		pending_del(x, p);
	pthread_mutex_unlock(&x->lock);
	if (end)
		pull_told(p, err);
	return rc;
}

/* A reply frame for a call or a STATUS ending a pull. */
static void rx_reply(struct xport_conn *c, const struct proto_hdr *h, const struct proto_msg *m)
{
	struct xport *x = c->x;

	pthread_mutex_lock(&x->lock);
	struct pending *p = pending_find(x, h->reqid);
	if (!p || p->peer != c->peer) {
		pthread_mutex_unlock(&x->lock);
		return;                 /* it timed out */
	}
	if (p->pull) {
		pthread_mutex_unlock(&x->lock);
		int err = m->type == PT_STATUS ? -m->u.status.err : -EPROTO;
		pull_end(x, p, err ? err : -EIO);
		return;
	}
	if (p->told) {
		pending_del(x, p);
		pthread_mutex_unlock(&x->lock);
		tell_end(p, m->type == PT_STATUS ? -m->u.status.err : -EPROTO);
		return;
	}
	p->busy = 1;
	pthread_mutex_unlock(&x->lock);
	int more = m->type == PT_STATUS || !p->on_reply ? 0 : p->on_reply(p->arg, m);
	pthread_mutex_lock(&x->lock);
	p->busy = 0;
	pthread_cond_broadcast(&x->unbusy);
	if (m->type == PT_STATUS)
		call_end(x, p, -m->u.status.err);
	else if (!more)
		call_end(x, p, 0);
	pthread_mutex_unlock(&x->lock);
}

/* Told requests the peer acted on: each one's sender hears. */
static void rx_acks(struct xport_conn *c, const struct proto_msg *m)
{
	struct xport *x = c->x;
	struct pending *done = NULL, *p;

	pthread_mutex_lock(&x->lock);
	for (uint32_t i = 0; i < m->u.acks.n; i++)
		if ((p = pending_find(x, m->u.acks.reqid[i])) && p->told && p->peer == c->peer) {
			pending_del(x, p);
			p->next = done;
			done = p;
		}
	pthread_mutex_unlock(&x->lock);
	while ((p = done)) {
		done = p->next;
		tell_end(p, 0);
	}
}

/* ---------------------------------------------------------------- our side */

/* Our connection to peer i ended: the peer is down, or, where the
 * connection was closed under us (lapse: reset or aborted by a
 * middlebox's idle timer, a conntrack flush, a link that flapped), maybe
 * only the connection.  Then it is connected to again at once, and the
 * pulls in flight on it wait for that (pulls_resume) rather than fail:
 * only if the connect fails is the peer down (peer_connect, p->rejoining),
 * its pulls failing then; a peer that died refuses the connect, which
 * takes a round trip.  Calls and told requests fail either way: a call
 * may have been acted on, and what is told is owed again. */
static void conn_lost(struct xport *x, int i, const char *why, int lapse)
{
	struct peer *p = &x->peers[i];

	pthread_mutex_lock(&x->lock);
	struct xport_conn *c = p->out;
	if (c) {
		snprintf(p->down_why, sizeof(p->down_why), "%s%s", why,
			 lapse ? "; connecting again" : "");
		c->lapsed = lapse;
		p->rejoining = lapse;
	}
	p->out = NULL;
	p->rejoin = 0;                  /* what waits for that connects anew */
	p->since_ns = clock_wall_ns();
	if (!lapse)
		p->looked_ns = 0;       /* it may be back elsewhere: look at once */
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->lock);
	if (!c)
		return;
	shutdown(c->fd, SHUT_RDWR);
	if (lapse)
		fprintf(stderr, "omnifs: peer %s (%s): %s; connecting again, its reads "
			"waiting\n", p->name, p->addr, why);
	else if (!x->stopping)
		fprintf(stderr, "omnifs: peer %s (%s) down: %s\n", p->name, p->addr, why);
	link_down(x, i);                /* a lapse holds its RDMA pulls too (reroute_tcp) */
	pending_fail(x, i, lapse);
	if (!lapse && x->ops->peer_down)
		x->ops->peer_down(x->ctx, i);
	pthread_mutex_lock(&x->lock);
	conn_put(c);
	pthread_mutex_unlock(&x->lock);
	if (lapse)
		peer_dial(x, i);
}

/* Peer i is connected to again once no request to it is in flight
 * (rejoin_locked), if it is up (on c, unless c is NULL) and its WELCOME
 * said every cap in need. */
void rejoin(struct xport *x, int i, const struct xport_conn *c, uint32_t need,
		   const char *why)
{
	struct peer *p = &x->peers[i];

	pthread_mutex_lock(&x->lock);
	int now = p->out && (!c || p->out == c) && (p->caps & need) == need && !p->rejoin;
	if (now) {
		p->rejoin = 1;
		rejoin_locked(x, i);
	}
	pthread_mutex_unlock(&x->lock);
	if (now)
		fprintf(stderr, "omnifs: peer %s (%s): connecting again once its requests in "
			"flight are done (%s)\n", p->name, p->addr, why);
}

/* The end of a connection let go of for a rejoin: what was held on it
 * goes first, as with its next frame.  No request is on it (they link
 * only on p->out), and its peer's next connection waits for this
 * receiver (connect_claim), pair and all. */
static void retired_end(struct xport *x, struct xport_conn *c)
{
	int peer = c->peer;
	struct iovec v[1];

	pthread_mutex_lock(&c->send_lock);
	if (c->held_ns)
		send_after_held(c, v, 1);
	pthread_mutex_unlock(&c->send_lock);
	shutdown(c->fd, SHUT_RDWR);
	link_down(x, peer);
	pthread_mutex_lock(&x->lock);
	conn_put(c);
	pthread_mutex_unlock(&x->lock);
	peer_dial(x, peer);          /* its connection, for announces as for requests */
}

/* Reads replies and DATA on our connection until it fails. */
void *rx_thread(void *arg)
{
	struct xport_conn *c = arg;
	struct xport *x = c->x;
	struct proto_hdr h;
	struct proto_msg m;
	int rc;

	pthread_setname_np(pthread_self(), "omni-rx");
	for (;;) {
		if ((rc = conn_recv(c, &h, &m, rx_tick)))
			break;
		if (h.type == PT_DATA) {
			rc = rx_data(c, &h, &m);
		} else if (h.type == PT_STATUS || h.type == PT_OBJECT || h.type == PT_LISTING ||
			   h.type == PT_GRANTED || h.type == PT_CLEANED) {
			rx_reply(c, &h, &m);
		} else if (h.type == PT_ACKS) {
			rx_acks(c, &m);
		} else if (h.type == PT_REDIAL) {
			rejoin(x, c->peer, c, 0, "it asks: its RDMA device is back");
		} else if (h.type != PT_PONG) {
			rc = -EPROTO;   /* a request has no business here */
		}
		proto_msg_free(&m);
		if (rc)
			break;
	}
	pthread_mutex_lock(&x->lock);
	int retired = c->retired;
	c->ended = 1;                   /* else peer_down's */
	pthread_mutex_unlock(&x->lock);
	if (retired) {
		retired_end(x, c);
		return NULL;
	}
	if (rc == -EPROTO || rc == -EMSGSIZE)
		ops_count(x, XC_BAD_FRAMES, 1);
	const char *why = rc == -ETIMEDOUT ? "silent too long" :
			  rc == -ECONNRESET ? "connection closed" : strerror(-rc);
	/* Silence or a bad frame: down.  A close: maybe the connection only. */
	conn_lost(x, c->peer, why, (rc == -ECONNRESET || rc == -ECONNABORTED || rc == -EPIPE) &&
		  !x->stopping);
	return NULL;
}

void conn_unref(struct xport *x, struct xport_conn *c)
{
	pthread_mutex_lock(&x->lock);
	conn_put(c);
	pthread_mutex_unlock(&x->lock);
}

/* Links p on *c (a reference, or NULL); where *c was let go of for a
 * rejoin since it was had, or closed under us (conn_lost), on the peer's
 * next connection, which *c is then.  1 if linked. */
int link_on(struct xport *x, struct xport_conn **c, struct pending *p)
{
	while (*c) {
		pthread_mutex_lock(&x->lock);
		int linked = pending_link(x, *c, p);
		int retired = !linked && ((*c)->retired || (*c)->lapsed);
		pthread_mutex_unlock(&x->lock);
		if (!retired)
			return linked;
		conn_unref(x, *c);
		waits_note();           /* the next one may have to be made */
		*c = peer_conn(x, p->peer);
	}
	return 0;
}

/* A one-way message on c (a reference the caller took), which it drops. */
static int send_on(struct xport *x, struct xport_conn *c, const struct proto_msg *m, int hold)
{
	int rc;

	if (!c)
		return -EHOSTDOWN;
	rc = conn_send_held(c, 0, m, hold);
	conn_unref(x, c);
	return rc;
}

int xport_send(struct xport *x, int peer, const struct proto_msg *m)
{
	return send_on(x, peer_out(x, peer), m, 0);
}

int xport_hold(struct xport *x, int peer, const struct proto_msg *m)
{
	return send_on(x, peer_out(x, peer), m, 1);
}

int xport_tell(struct xport *x, int peer, const struct proto_msg *m, unsigned how,
	       xport_done_fn done, void *arg)
{
	struct pending *p = calloc(1, sizeof(*p));
	struct xport_conn *c;
	uint64_t id = 0;
	int rc;

	if (!p)
		return -ENOMEM;
	*p = (struct pending){ .peer = peer, .told = done, .arg = arg };
	c = how & XPORT_CONNECT ? peer_conn(x, peer) : peer_out(x, peer);
	if (link_on(x, &c, p))
		id = p->reqid;
	if (!id) {
		rc = -EHOSTDOWN;
		free(p);
	} else if ((rc = conn_send_held(c, id, m, how & XPORT_HOLD))) {
		/* Still in the table: nobody else will end it.  Gone from it:
		 * the connection's end took it and tells done. */
		pthread_mutex_lock(&x->lock);
		int mine = pending_find(x, id) != NULL;
		if (mine)
			pending_del(x, p);
		pthread_mutex_unlock(&x->lock);
		if (mine)
			free(p);
		else
			rc = 0;
	}
	if (c)
		conn_unref(x, c);
	return rc;
}

/* With nothing held, or nothing held long enough, as after most FUSE
 * requests, this costs an atomic load and a clock read. */
void xport_flush(struct xport *x, int all)
{
	uint64_t now = clock_mono_ns(), hold = XPORT_HOLD_MS * 1000000ull;
	uint64_t since = atomic_load(&x->held_since), oldest = 0;
	struct iovec v[1];

	flushes_bursts = 1;
	if (!since || (!all && now - since <= hold))
		return;
	atomic_store(&x->held_since, 0);
	for (size_t i = 0; i < x->npeers; i++) {
		pthread_mutex_lock(&x->lock);
		struct xport_conn *c = x->peers[i].out;
		if (c)
			c->refs++;
		pthread_mutex_unlock(&x->lock);
		if (!c)
			continue;
		pthread_mutex_lock(&c->send_lock);
		uint64_t held = c->held_ns;
		if (held && (all || now - held > hold))
			send_after_held(c, v, 1);       /* a failure ends c */
		else if (held && (!oldest || held < oldest))
			oldest = held;
		pthread_mutex_unlock(&c->send_lock);
		conn_unref(x, c);
	}
	if (oldest)
		held_note(x, oldest);
}

/* Sends call p on *c (link_on), linked so that its reply finds it: 0 or
 * an errno (the call is then over).  Unlocked. */
static int call_send(struct xport *x, struct xport_conn **c, struct pending *p,
		     const struct proto_msg *req)
{
	return link_on(x, c, p) ? conn_send(*c, p->reqid, req) : -EHOSTDOWN;
}

/* 1 if a request to peer goes out at once: its connection is up and is
 * not to be let go of for a rejoin (peer_conn would wait, or connect). */
static int peer_ready(struct xport *x, int peer)
{
	pthread_mutex_lock(&x->lock);
	int ready = peer >= 0 && (size_t)peer < x->npeers && x->peers[peer].out &&
		    !x->peers[peer].rejoin;
	pthread_mutex_unlock(&x->lock);
	return ready;
}

int xport_call_each(struct xport *x, struct xport_callee *to, int n,
		    const struct proto_msg *req, xport_reply_fn on_reply)
{
	struct timespec ts = clock_deadline_in(x->c.call_ms);
	struct call { struct pending p; struct xport_conn *c; } one, *call = &one;
	pthread_cond_t cond;
	int waiting = 0;

	if (n <= 0)
		return 0;
	if (n > 1 && !(call = calloc((size_t)n, sizeof(*call))))
		return -ENOMEM;
	clock_cond_init(&cond);
	/* All asked before any answer is awaited: one round trip, not n.
	 * Our caller hears that we wait once they are on the way (or before
	 * a connect, a full socket). */
	waits_owed = x;
	for (int i = 0; i < n; i++) {
		struct call *k = &call[i];
		k->p = (struct pending){ .peer = to[i].peer, .on_reply = on_reply,
					 .arg = to[i].arg, .cond = &cond };
		if (!peer_ready(x, to[i].peer))
			waits_note();
		k->c = peer_conn(x, to[i].peer);
		to[i].rc = call_send(x, &k->c, &k->p, to[i].req ? to[i].req : req);
		waiting += !to[i].rc;
	}
	waits_note();
	pthread_mutex_lock(&x->lock);
	for (int timedout = 0; waiting; ) {
		waiting = 0;
		for (int i = 0; i < n; i++) {
			struct pending *p = &call[i].p;
			if (to[i].rc || p->done)
				continue;
			if (timedout) {         /* a reply being handed over ends first */
				while (p->busy)
					pthread_cond_wait(&x->unbusy, &x->lock);
				if (!p->done)
					to[i].rc = -ETIMEDOUT;
			}
			waiting += !to[i].rc && !p->done;
		}
		if (waiting)
			timedout = pthread_cond_timedwait(&cond, &x->lock, &ts) == ETIMEDOUT;
	}
	for (int i = 0; i < n; i++) {
		struct pending *p = &call[i].p;
		if (!call[i].c)
			continue;
		while (p->busy)         /* a reply still in hand: p is read after */
			pthread_cond_wait(&x->unbusy, &x->lock);
		if (!p->done)
			pending_del(x, p);
		else if (!to[i].rc)
			to[i].rc = p->err;
		conn_put(call[i].c);
	}
	pthread_mutex_unlock(&x->lock);
	pthread_cond_destroy(&cond);
	if (call != &one)
		free(call);
	return 0;
}

int xport_call(struct xport *x, int peer, const struct proto_msg *req,
	       xport_reply_fn on_reply, void *arg)
{
	struct xport_callee to = { .peer = peer, .arg = arg };

	xport_call_each(x, &to, 1, req, on_reply);     /* one: nothing to allocate */
	return to.rc;
}

/* ---------------------------------------------------------------- lifecycle */

static int sa_loopback(const struct sockaddr_storage *sa)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

	if (sa->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	return sa->ss_family == AF_INET6 && (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr) ||
		(IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && s6->sin6_addr.s6_addr[12] == 127));
}

/* A node bound to a loopback address while a peer is elsewhere cannot be
 * reached by it, and nothing else would say why: a config of host names
 * meets this where /etc/hosts maps the host's own name to 127.0.1.1 (as
 * Debian's installer writes it). */
static void warn_loopback(struct xport *x, const struct sockaddr_storage *sa, socklen_t len)
{
	char self[INET6_ADDRSTRLEN + 10];

	if (!sa_loopback(sa))
		return;
	for (size_t i = 0; i < x->npeers; i++) {
		struct peer *p = &x->peers[i];
		if (!p->sa.ss_family || sa_loopback(&p->sa))
			continue;
		sa_text(sa, len, self, sizeof(self));
		fprintf(stderr, "omnifs: listen=%s is %s, a loopback address, and peer %s (%s) is "
			"elsewhere: it cannot reach this node; give this node an addr (or listen=) "
			"that its peers reach\n", x->c.listen, self, p->name, p->addr);
		return;
	}
}

static int listen_on(struct xport *x, char *err, size_t errlen)
{
	struct sockaddr_storage sa;
	socklen_t len;
	char why[96];
	int one = 1, rc = resolve_addr(x->c.listen, &sa, &len, why, sizeof(why));

	if (rc == -EINVAL) {
		snprintf(err, errlen, "listen=%s: not an address:port", x->c.listen);
		return rc;
	} else if (rc) {
		snprintf(err, errlen, "listen=%s: cannot resolve the name: %s", x->c.listen, why);
		return -EINVAL;
	}
	if ((x->lfd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    setsockopt(x->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(x->lfd, (struct sockaddr *)&sa, len) || listen(x->lfd, 128)) {
		int e = errno;
		snprintf(err, errlen, "listen=%s: %s", x->c.listen, strerror(e));
		if (x->lfd >= 0)
			close(x->lfd);
		x->lfd = -1;
		return -e;
	}
	warn_loopback(x, &sa, len);
	return 0;
}

int xport_create(struct xport **out, const struct xport_conf *c,
		 const struct xport_ops *ops, void *ctx, char *err, size_t errlen)
{
	struct xport *x = calloc(1, sizeof(*x));
	int rc = -ENOMEM;

	if (!x || !(x->peers = calloc(c->npeers ? c->npeers : 1, sizeof(*x->peers))))
		goto free_x;
	x->c = *c;
	x->c.ping_ms = c->ping_ms ? c->ping_ms : 500;
	x->c.dead_ms = c->dead_ms ? c->dead_ms : 3000;
	x->c.call_ms = c->call_ms ? c->call_ms : 5000;
	snprintf(x->self, sizeof(x->self), "%s", c->self);
	memcpy(x->key, c->key, AUTH_KEY);
	x->ops = ops;
	x->ctx = ctx;
	x->npeers = c->npeers;
	x->lfd = -1;
	for (size_t i = 0; i < c->npeers; i++) {
		struct peer *p = &x->peers[i];
		snprintf(p->name, sizeof(p->name), "%s", c->peers[i].name);
		snprintf(p->addr, sizeof(p->addr), "%s", c->peers[i].addr);
		p->since_ns = clock_wall_ns();
		p->looked_ns = clock_mono_ns();
		/* A name that does not resolve yet (a peer's DNS record comes
		 * with it) is looked up again at each dial: peer_resolve. */
		char why[96];
		if ((rc = resolve_addr(p->addr, &p->sa, &p->salen, why, sizeof(why))) == -EINVAL) {
			snprintf(err, errlen, "node %s: addr %s: not an address:port", p->name, p->addr);
			goto free_x;
		} else if (rc && peer_unresolved(p, why)) {
			say_unresolved(p, why);
		}
	}
	if ((rc = listen_on(x, err, errlen)))
		goto free_x;
	pthread_mutex_init(&x->lock, NULL);
	clock_cond_init(&x->cond);
	clock_cond_init(&x->tend);
	pthread_cond_init(&x->unbusy, NULL);
	if ((rc = open_rdma(x, err, errlen))) {
		pthread_cond_destroy(&x->tend);
		pthread_cond_destroy(&x->unbusy);
		pthread_cond_destroy(&x->cond);
		pthread_mutex_destroy(&x->lock);
		close(x->lfd);
		goto free_x;
	}
	*out = x;
	return 0;
free_x:
	if (x)
		free(x->peers);
	free(x);
	return rc;
}

int xport_start(struct xport *x)
{
	if (pthread_create(&x->acceptor, NULL, acceptor_thread, x))
		return -EAGAIN;
	if (pthread_create(&x->keeper, NULL, keeper_thread, x)) {
		x->stopping = 1;
		shutdown(x->lfd, SHUT_RDWR);
		pthread_join(x->acceptor, NULL);
		return -EAGAIN;
	}
	x->started = 1;
	/* Only a device opened at start is looked after: auto on a node
	 * without one does not look for one. */
	if (x->rdma && !pthread_create(&x->tender, NULL, tender_thread, x))
		x->tender_started = 1;
	return 0;
}

void xport_destroy(struct xport *x)
{
	if (!x)
		return;
	xport_flush(x, 1);              /* what an rm held goes before the end */
	/* The listener first: a peer that sees its connections close dials
	 * again (conn_lost), and must be refused, not left in a backlog. */
	shutdown(x->lfd, SHUT_RDWR);
	pthread_mutex_lock(&x->lock);
	x->stopping = 1;
	pthread_cond_broadcast(&x->cond);
	pthread_cond_signal(&x->tend);
	for (struct xport_conn *c = x->servers; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	for (size_t i = 0; i < x->npeers; i++)
		if (x->peers[i].out)
			shutdown(x->peers[i].out->fd, SHUT_RDWR);
	pthread_mutex_unlock(&x->lock);
	if (x->started) {
		pthread_join(x->acceptor, NULL);
		pthread_join(x->keeper, NULL);
	}
	if (x->tender_started)  /* a device it let go of is closed already */
		pthread_join(x->tender, NULL);
	pthread_mutex_lock(&x->lock);
	while (x->dialers)      /* each sees stopping within a tick */
		pthread_cond_wait(&x->cond, &x->lock);
	pthread_mutex_unlock(&x->lock);
	for (size_t i = 0; i < x->npeers; i++) {
		if (x->peers[i].rx_joinable)
			pthread_join(x->peers[i].rx, NULL);
		pending_fail(x, (int)i, 0);     /* pulls held for a connect that never came */
	}
	pthread_mutex_lock(&x->lock);
	while (x->nservers)
		pthread_cond_wait(&x->cond, &x->lock);
	pthread_mutex_unlock(&x->lock);
	rdma_close(x->rdma);    /* its pulls end; every connection is gone */
	xbufs_free(x);          /* their owners' leftovers */
	close(x->lfd);
	pthread_cond_destroy(&x->tend);
	pthread_cond_destroy(&x->unbusy);
	pthread_cond_destroy(&x->cond);
	pthread_mutex_destroy(&x->lock);
	free(x->peers);
	free(x);
}

int xport_peer_index(const struct xport *x, const char *name)
{
	for (size_t i = 0; i < x->npeers; i++)
		if (!strcmp(x->peers[i].name, name))
			return (int)i;
	return -1;
}

const char *xport_peer_name(const struct xport *x, int peer)
{
	return peer >= 0 && (size_t)peer < x->npeers ? x->peers[peer].name : "?";
}

uint64_t xport_heard(struct xport *x, int peer, uint64_t *frames)
{
	uint64_t name = 0;

	pthread_mutex_lock(&x->lock);
	for (struct xport_conn *c = x->servers; c; c = c->next)
		if (c->peer == peer) {          /* the newest first */
			name = c->name;
			*frames = atomic_load(&c->frames);
			break;
		}
	pthread_mutex_unlock(&x->lock);
	return name;
}

int xport_heard_all(struct xport *x, int peer, uint64_t conn, uint64_t frames)
{
	int all = 0;

	if (peer < 0 || (size_t)peer >= x->npeers || !conn)
		return 0;
	pthread_mutex_lock(&x->lock);
	struct xport_conn *c = x->peers[peer].out;
	if (c && c->name == conn)
		all = atomic_load(&c->frames) == frames;
	pthread_mutex_unlock(&x->lock);
	return all;
}

/* Up, or being connected to again (a rejoin, a lapse): asked, it waits. */
int xport_peer_up(struct xport *x, int peer)
{
	pthread_mutex_lock(&x->lock);
	int up = x->peers[peer].out || x->peers[peer].rejoining;
	pthread_mutex_unlock(&x->lock);
	return up;
}

/* How a peer's bytes move, by name (XP_*). */
static const char *const xp_name[] = { "tcp", "rdma", "none" };

void xport_peer_info(struct xport *x, int peer, struct xport_peer_info *out)
{
	struct peer *p = &x->peers[peer];

	pthread_mutex_lock(&x->lock);
	out->name = p->name;
	out->addr = p->addr;
	/* A peer whose connection closed under us is connected to again,
	 * its requests waiting: not down, for whoever watches health. */
	out->state = p->out ? "up" : p->rejoining ? "connecting" : "down";
	out->transport = p->out ? xp_name[p->xp] : "";
	out->why = p->out ? p->why : "";
	snprintf(out->down_why, sizeof(out->down_why), "%s", p->out ? "" : p->down_why);
	out->config_differs = p->config_differs;
	out->since_ns = p->since_ns;
	pthread_mutex_unlock(&x->lock);
}
