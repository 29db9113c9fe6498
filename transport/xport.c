/* xport.c - peer connections over TCP: handshake, requests, pulls, pings;
 * and which transport moves each peer's bytes (TCP here, RDMA in rdma.c).
 *
 * Threads: an acceptor, whose event loop also takes each new connection
 * through the handshake; one server thread per authenticated connection,
 * which reads its peer's requests in order; one receiver thread per
 * connection we made, which reads replies and DATA frames; a keeper that
 * pings and reconnects.  So threads are bounded by the cluster, never by
 * strangers: a stranger costs a descriptor and a small record, has
 * HANDSHAKE_MS to prove it holds the secret, and at most STRANGERS_MAX
 * (STRANGERS_PER_HOST from one host) are in their handshake at once, the
 * oldest closed to make room (a real peer's handshake takes two round
 * trips, so a flood cannot starve it).  A peer has one connection to us:
 * its newer one replaces the older.  x->lock guards the peers' state and
 * the table of requests in flight; no lock is held while bytes move,
 * except a connection's send lock, which orders its frames.
 *
 * Sockets carry a 250 ms receive timeout: a thread blocked in recv wakes
 * that often to see whether its peer has been silent too long or a pull
 * has stalled.  Senders time out after dead_ms, so a peer that stops
 * reading can block nobody for longer.
 */
#define _GNU_SOURCE
#include "xport.h"
#include "clock.h"
#include "rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>      /* libxxhash's AVX2/AVX-512 paths, chosen at run time */
#endif

#define TICK_MS 250
#define HANDSHAKE_MS 2000
#define STRANGERS_MAX 1024
#define STRANGERS_PER_HOST 256
#define CONNECT_MS 1000
#define RESOLVE_MS 2000         /* a down peer's name, looked up again at most */
#define QP_RETRY_MS 1000        /* a queue pair that did not connect, tried again */
#define QP_RETRY_MAX_MS 30000   /* ... twice as late after each failure, this at most */
#define SOCKBUF (4 << 20)
#define RX_AHEAD (64u << 10)       /* a peer's requests read at a time */
#define HELD_MAX (16u << 10)       /* frames held for the next, at most */

struct xbuf;

struct xport_conn {
	struct xport *x;
	struct rdma_srv *srv;           /* a peer's connection that offered it RDMA */
	int fd, peer, outgoing, refs;
	int reads_rdma;                 /* a peer's connection: its HELLO said it can */
	int hears_redial;               /* ... and that it hears REDIAL */
	int retired;                    /* ours, let go of for a rejoin (rejoin_locked) */
	int ended;                      /* ours, and its receiver saw its end first */
	pthread_mutex_t send_lock;
	atomic_int ping_owed;           /* the keeper found it busy: the sender pings */
	/* Frames held (XPORT_HOLD) to go with the next, under send_lock:
	 * a burst of small ones costs a few sends, not one each. */
	uint8_t *held;                  /* HELD_MAX bytes, made on first use */
	size_t nheld;
	uint64_t held_ns;               /* when the oldest of them was held; 0: none */
	uint64_t last_rx;               /* monotonic ns of the last bytes in */
	uint64_t last_data;             /* ... and of the last DATA frame landed */
	uint8_t *body;                  /* a received frame's body */
	/* A peer's connection to us carries requests only, small and many:
	 * read RX_AHEAD at a time, a burst of them costs one read, not two
	 * each.  (Ours carries DATA, read straight where it goes.) */
	uint8_t *ahead;
	size_t ahead_at, ahead_end;
	/* A peer's requests acted on, to say so in one ACKS (its server
	 * thread's alone: xport_ack). */
	uint64_t acks[PROTO_ACKS_MAX];
	unsigned nacks;
	struct xport_conn *next;        /* accepted connections */
	/* The connection's name, from its HELLO's nonce (conn_name), and its
	 * frames since the handshake: sent or held on ours, served to their
	 * end on a peer's (xport_heard). */
	uint64_t name;
	_Atomic uint64_t frames;
};

struct pending {
	uint64_t reqid;
	int peer, pull, done, busy, err;
	pthread_cond_t *cond;   /* a call's: its caller waits on it */
	xport_reply_fn on_reply;
	xport_done_fn told;     /* a told request's end (xport_tell) */
	void *arg;
	/* A pull: where its bytes go, how far they got, when it was asked. */
	uint64_t off, len, got, asked_ns;
	struct iovec *dst;
	int ndst;
	xport_progress_fn progress;
	struct pending *next;
};

/* A log line that others can provoke at will (a bad frame, a failed
 * handshake) is written at most once a second; the next one says how many
 * were left out meanwhile.  The counters in .omni/stats count them all. */
struct ratelog {
	uint64_t last_ns;
	unsigned long quiet;
};

/* How a peer's bytes move, chosen when our connection to it comes up. */
enum { XP_TCP, XP_RDMA, XP_NONE };
static const char *const xp_name[] = { "tcp", "rdma", "none" };

struct peer {
	char name[PROTO_NAME_MAX + 1], addr[128];
	struct sockaddr_storage sa;     /* addr's, as last looked up (x->lock) */
	socklen_t salen;
	int unresolved;                 /* the last lookup failed: said once */
	int config_differs;             /* its WELCOME's digest is not ours */
	uint64_t looked_ns;             /* when (0: at the next dial, it went down) */
	int connecting;
	int dialing;                    /* a dialer thread connects to it */
	uint32_t caps;
	int xp;
	char why[160];                  /* why not RDMA, where we have it */
	char down_why[128];             /* why it is down: the last fault seen */
	uint64_t since_ns;
	struct xport_conn *out;         /* our connection, while up */
	/* To be connected again once no request is in flight to it (what a
	 * handshake settles changed: a device is back), so that none fails
	 * for it; meanwhile new requests wait (peer_out_settled). */
	int rejoin;
	int rejoining;                  /* let go of for that, not connected again yet */
	/* Its queue pair did not connect at the handshake (a peer's rdma_cm
	 * slow or refusing, a fabric hiccup): a dialer tries again on the
	 * same connection (peer_relink), whose bytes move over TCP meanwhile,
	 * QP_RETRY_MS later, then twice as late after each failure. */
	uint16_t qp_port;               /* its WELCOME's: where, and with what */
	uint8_t qp_token[PROTO_TOKEN];
	uint64_t qp_retry_ns;           /* when (monotonic); 0: not to */
	unsigned qp_tries;
	pthread_t rx;
	int rx_joinable;
	struct ratelog bad_frames;      /* its connections to us */
	struct ratelog refused, unread; /* its pulls we refused; reads of it we
					   did not make (transport=rdma) */
	struct ratelog full;            /* its stage had no room for a read */
};

struct xport {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* A pending's busy was cleared.  Apart from cond, which the keeper
	 * sleeps on: a frame lands every few hundred microseconds while bytes
	 * come, and each broadcast on cond woke the keeper for nothing (7 ms
	 * of CPU on a 256 MiB read here). */
	pthread_cond_t unbusy;
	struct xport_conf c;
	struct rdma *rdma;              /* NULL: every byte moves over TCP */
	/* A device that goes (rdma.h, conf.lost) is let go of and opened
	 * again by a thread of its own (tender_thread): calls into x->rdma go
	 * through rdma_hold(), which gives none once it went, and the tender
	 * closes it only when no call is under way.  x->lock guards these. */
	struct rdma_conf rconf;         /* how it was opened */
	unsigned rdma_users;            /* calls under way, and owner-side pairs */
	int rdma_gone;                  /* it went, and is not back yet */
	char rdma_dev[64];              /* its name, for health */
	char rdma_why[128];             /* "rxe0 was removed", while gone */
	unsigned rdma_gen;              /* counts its openings again (rdma_turns) */
	struct xbuf *bufs;              /* xport_buf_alloc's */
	pthread_cond_t tend;            /* the tender's: the device went, or stop */
	pthread_t tender;
	int tender_started;
	uint32_t caps;                  /* PROTO_CAP_* we can do */
	char self[PROTO_NAME_MAX + 1];
	uint8_t key[AUTH_KEY];
	const struct xport_ops *ops;
	void *ctx;
	struct peer *peers;
	size_t npeers;
	int lfd, started, nservers, dialers;
	atomic_int stopping;            /* read unlocked by the threads it stops */
	_Atomic uint64_t held_since;    /* no later than the oldest frame held on
					   any connection; 0: none (xport_flush) */
	struct ratelog bad_handshakes, slow_handshakes, crowded, other_release;
	pthread_t acceptor, keeper;
	uint64_t next_reqid;
	struct pending *pending;
	struct xport_conn *servers;
};

static void log_limited(struct xport *x, struct ratelog *rl, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int bufs_register(struct xport *x, struct rdma *rd, const struct iovec *dst, int ndst);
static void dial(struct xport *x, int i);
static void redial_tell(struct xport *x, struct xport_conn *c);

/* Set in a thread that has called xport_flush, and so calls it again when
 * its burst of work is over: only its frames may be held.  Any other (a
 * deadline's expiry, a view's job) sends at once, or its GONE would wait
 * for the keeper's next ping. */
static __thread int flushes_bursts;

static void log_limited(struct xport *x, struct ratelog *rl, const char *fmt, ...)
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

static void count(struct xport *x, enum xport_count what, uint64_t n)
{
	if (x->ops->count)
		x->ops->count(x->ctx, what, n);
}

/* "host:port" or "[v6]:port" into its first socket address: 0, -EINVAL
 * (not of that form), or -EHOSTUNREACH with the resolver's word in why. */
static int resolve_addr(const char *addr, struct sockaddr_storage *sa, socklen_t *len,
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
static void sa_text(const struct sockaddr_storage *sa, socklen_t len, char *out, size_t olen)
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

/* ---------------------------------------------------------------- rdma in use */

/* x->rdma for a call into it, or NULL: none, or it went.  Under x->lock. */
static struct rdma *rdma_hold_locked(struct xport *x)
{
	struct rdma *rd = x->rdma_gone ? NULL : x->rdma;

	if (rd)
		x->rdma_users++;
	return rd;
}

/* Counts the device's goings and comings back, under x->lock: it goes
 * only while here, and each opening again follows a going.  A handshake
 * that settled how a peer's bytes move across one settled it by what is
 * no more, and the connection is made again (peer_connect,
 * stranger_promote). */
static unsigned rdma_turns(const struct xport *x)
{
	return 2 * x->rdma_gen + (unsigned)x->rdma_gone;
}

static struct rdma *rdma_hold(struct xport *x)
{
	pthread_mutex_lock(&x->lock);
	struct rdma *rd = rdma_hold_locked(x);
	pthread_mutex_unlock(&x->lock);
	return rd;
}

static void rdma_drop_locked(struct xport *x)
{
	if (!--x->rdma_users)
		pthread_cond_broadcast(&x->cond);       /* the tender waits for this */
}

static void rdma_drop(struct xport *x)
{
	pthread_mutex_lock(&x->lock);
	rdma_drop_locked(x);
	pthread_mutex_unlock(&x->lock);
}

/* The end of what rdma_hold() gave (rd NULL: nothing). */
static void rdma_unhold(struct xport *x, struct rdma *rd)
{
	if (rd)
		rdma_drop(x);
}

/* 1 if this node's device went and is not back: why says how. */
static int rdma_gone_why(struct xport *x, char *why, size_t len)
{
	pthread_mutex_lock(&x->lock);
	int gone = x->rdma_gone;
	if (gone)
		snprintf(why, len, "%s", x->rdma_why);
	pthread_mutex_unlock(&x->lock);
	return gone;
}

/* Our pair to peer i goes: its READs fail; the owner forgot its grants. */
static void link_down(struct xport *x, int i)
{
	struct rdma *rd = rdma_hold(x);

	if (rd)
		rdma_link_down(rd, i);
	rdma_unhold(x, rd);
}

/* An owner-side pair holds x->rdma as long as it lasts. */
static void srv_end(struct xport *x, struct rdma_srv *s)
{
	if (!s)
		return;
	rdma_srv_end(s);
	rdma_drop(x);
}

/* ---------------------------------------------------------------- frames */

/* Sends iov[0, n) whole, under c->send_lock. */
static int send_locked(struct xport_conn *c, struct iovec *v, int n)
{
	int rc = 0;

	while (n > 0) {
		struct msghdr mh = { .msg_iov = v, .msg_iovlen = (size_t)n };
		ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
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
static int send_ping_locked(struct xport_conn *c)
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
static int conn_sendv(struct xport_conn *c, uint8_t type, uint64_t reqid, int hold,
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
	pthread_mutex_lock(&c->send_lock);
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

static int conn_send(struct xport_conn *c, uint64_t reqid, const struct proto_msg *m)
{
	return conn_send_held(c, reqid, m, 0);
}

/* A body too large for conn_send's stack (a GRANTED). */
static int conn_send_body(struct xport_conn *c, uint8_t type, uint64_t reqid,
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
static int conn_recv(struct xport_conn *c, struct proto_hdr *h, struct proto_msg *m,
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

static struct xport_conn *conn_new(struct xport *x, int fd, int peer, int outgoing)
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
	sock_setup(fd, x->c.dead_ms);
	return c;
}

/* Drops a reference; the last one closes.  Called with x->lock held. */
static void conn_put(struct xport_conn *c)
{
	if (--c->refs)
		return;
	close(c->fd);
	pthread_mutex_destroy(&c->send_lock);
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
	c->retired = 1;
	shutdown(c->fd, SHUT_RD);
	pthread_cond_broadcast(&x->cond);
}

/* Takes p off the table; the last one of a peer being rejoined lets its
 * connection go. */
static void pending_del(struct xport *x, struct pending *p)
{
	for (struct pending **pp = &x->pending; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			rejoin_locked(x, p->peer);
			return;
		}
}

/* Puts p in the table, if c is still its peer's connection.  peer_down()
 * clears that under the lock before it fails what is in flight, so a
 * request on a connection that went down meanwhile would otherwise wait
 * for an end that only a later connection's tick would bring.  Under
 * x->lock; 1 if linked. */
static int pending_link(struct xport *x, struct xport_conn *c, struct pending *p)
{
	if (x->peers[p->peer].out != c)
		return 0;
	p->reqid = ++x->next_reqid;
	p->next = x->pending;
	x->pending = p;
	return 1;
}

/* A pull off the table: its owner hears its end, once. */
static void pull_told(struct pending *p, int err)
{
	p->progress(p->arg, p->got, err);
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

/* Fails what is in flight to peer: the connection is gone.  A call's
 * pending lives on its caller's stack, which call_end() hands back: it is
 * not touched once the lock is dropped. */
static void pending_fail(struct xport *x, int peer)
{
	for (;;) {
		pthread_mutex_lock(&x->lock);
		struct pending *p = x->pending;
		while (p && p->peer != peer)
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
		if (p->peer == c->peer && p->pull && now - moved > dead)
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
	if (p && (!p->pull || p->peer != c->peer || m->u.data.off != p->off + p->got ||
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
		count(x, XC_BAD_CHUNKS, 1);
		fprintf(stderr, "omnifs: chunk at %llu from %s fails its checksum\n",
			(unsigned long long)m->u.data.off, x->peers[c->peer].name);
		err = -EIO;
	} else if (!rc) {
		p->got += m->u.data.len;
		count(x, XC_PULLED, m->u.data.len);
		count(x, XC_PULLED_TCP, m->u.data.len);
		if (p->got < p->len)
			p->progress(p->arg, p->got, 0);
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

static void peer_down(struct xport *x, int i, const char *why)
{
	struct peer *p = &x->peers[i];

	pthread_mutex_lock(&x->lock);
	struct xport_conn *c = p->out;
	if (c)
		snprintf(p->down_why, sizeof(p->down_why), "%s", why);
	p->out = NULL;
	p->rejoin = 0;                  /* what waits for that connects anew */
	p->since_ns = clock_wall_ns();
	p->looked_ns = 0;               /* it may be back elsewhere: look at once */
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->lock);
	if (!c)
		return;
	shutdown(c->fd, SHUT_RDWR);
	if (!x->stopping)
		fprintf(stderr, "omnifs: peer %s (%s) down: %s\n", p->name, p->addr, why);
	link_down(x, i);
	pending_fail(x, i);
	if (x->ops->peer_down)
		x->ops->peer_down(x->ctx, i);
	pthread_mutex_lock(&x->lock);
	conn_put(c);
	pthread_mutex_unlock(&x->lock);
}

/* Peer i is connected to again once no request to it is in flight
 * (rejoin_locked), if it is up (on c, unless c is NULL) and its WELCOME
 * said every cap in need. */
static void rejoin(struct xport *x, int i, const struct xport_conn *c, uint32_t need,
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
	dial(x, peer);          /* its connection, for announces as for requests */
}

/* Reads replies and DATA on our connection until it fails. */
static void *rx_thread(void *arg)
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
		count(x, XC_BAD_FRAMES, 1);
	peer_down(x, c->peer, rc == -ETIMEDOUT ? "silent too long" :
		  rc == -ECONNRESET ? "connection closed" : strerror(-rc));
	return NULL;
}

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
static uint64_t conn_name(const uint8_t nonce[PROTO_NONCE])
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
 * is ours to clear); 0: p is connected; -ESHUTDOWN: we are stopping. */
static int connect_claim(struct xport *x, struct peer *p)
{
	int rc, joinable = 0;

	pthread_mutex_lock(&x->lock);
	while (p->connecting && !x->stopping)
		pthread_cond_wait(&x->cond, &x->lock);
	rc = p->out ? 0 : x->stopping ? -ESHUTDOWN : 1;
	if (rc == 1) {
		p->connecting = 1;
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
	p->out = c;
	p->rejoining = 0;
	p->caps = o.caps;
	p->xp = xp;
	snprintf(p->why, sizeof(p->why), "%s", why);
	p->since_ns = clock_wall_ns();
	p->qp_port = o.port;
	memcpy(p->qp_token, o.token, PROTO_TOKEN);
	p->qp_retry_ns = pair_failed ? clock_mono_ns() + QP_RETRY_MS * 1000000ull : 0;
	p->qp_tries = 0;
	if (pthread_create(&p->rx, NULL, rx_thread, c)) {
		p->out = NULL;
		conn_put(c);
		rc = -EAGAIN;
	} else {
		p->rx_joinable = 1;
	}
	pthread_mutex_unlock(&x->lock);
	if (say)
		fprintf(stderr, "omnifs: peer %s (%s) runs another cluster config than this node "
			"(its nodes, addresses or stages differ): every node must run the same one\n",
			p->name, p->addr);
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
	if (lost && !x->stopping) {
		fprintf(stderr, "omnifs: peer %s (%s) down: %s\n", p->name, p->addr, down);
		if (x->ops->peer_down)
			x->ops->peer_down(x->ctx, i);
	}
	return rc;
}

/* Our connection to peer with a reference, if it is up: never waits to
 * connect. */
static struct xport_conn *peer_out(struct xport *x, int peer)
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
static struct xport_conn *peer_conn(struct xport *x, int i)
{
	struct xport_conn *c;

	if (i < 0 || (size_t)i >= x->npeers)
		return NULL;
	if ((c = peer_out_settled(x, i)) || peer_connect(x, i))
		return c;
	return peer_out(x, i);
}

static void conn_unref(struct xport *x, struct xport_conn *c)
{
	pthread_mutex_lock(&x->lock);
	conn_put(c);
	pthread_mutex_unlock(&x->lock);
}

/* Links p on *c (a reference, or NULL); where *c was let go of for a
 * rejoin since it was had, on the peer's next connection, which *c is
 * then.  1 if linked. */
static int link_on(struct xport *x, struct xport_conn **c, struct pending *p)
{
	while (*c) {
		pthread_mutex_lock(&x->lock);
		int linked = pending_link(x, *c, p), retired = !linked && (*c)->retired;
		pthread_mutex_unlock(&x->lock);
		if (!retired)
			return linked;
		conn_unref(x, *c);
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
	/* All asked before any answer is awaited: one round trip, not n. */
	for (int i = 0; i < n; i++) {
		struct call *k = &call[i];
		k->p = (struct pending){ .peer = to[i].peer, .on_reply = on_reply,
					 .arg = to[i].arg, .cond = &cond };
		k->c = peer_conn(x, to[i].peer);
		to[i].rc = call_send(x, &k->c, &k->p, to[i].req ? to[i].req : req);
		waiting += !to[i].rc;
	}
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

/* rdma_pull, asked again while the owner's stage has no room (rdma.h)
 * and transport=rdma forbids TCP: its reads make room as they end.  For
 * a third of dead_ms at most: this may be the thread that serves the
 * owner's connection (a fetch that an announce starts), and the owner
 * must not find it dead meanwhile.  With auto the caller moves the bytes
 * over TCP at once. */
static int pull_rdma(struct xport *x, struct rdma *rd, int peer, const struct xport_range *r,
		     const struct iovec *dst, int ndst, unsigned flags,
		     xport_progress_fn progress, void *arg)
{
	uint64_t until = clock_mono_ns() + (uint64_t)x->c.dead_ms * 1000000u / 3;
	int rc;

	for (unsigned nap_us = 500;; nap_us = nap_us < 32000 ? nap_us * 2 : nap_us) {
		rc = rdma_pull(rd, peer, r, dst, ndst, flags, progress, arg);
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
		      unsigned flags, xport_progress_fn progress, void *arg)
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
	rc = pull_rdma(x, rd, peer, r, dst, ndst, flags, progress, arg);
	if (rc == -EFAULT && bufs_register(x, rd, dst, ndst))
		rc = pull_rdma(x, rd, peer, r, dst, ndst, flags, progress, arg);
	if (rc == -ENOTCONN) {  /* its pair cannot be had again: choose anew */
		peer_down(x, peer, "its RDMA queue pair failed and does not reconnect");
		return -EHOSTDOWN;
	}
	if (rc != -ENOBUFS && rc != -EFBIG && rc != -EFAULT)
		return rc;
	const char *why = rc == -EFAULT ? "a read's buffer cannot be registered with the device" :
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

int xport_pull(struct xport *x, int peer, const struct xport_range *r,
	       const struct iovec *dst, int ndst, unsigned flags,
	       xport_progress_fn progress, void *arg)
{
	struct proto_msg m = { .type = PT_PULL,
			       .u.pull = { r->oid, r->off, r->len, r->stride, r->count, r->lease } };
	const uint64_t off = r->off, count = r->count;
	uint64_t len = r->len;
	struct xport_conn *c;
	struct pending *p;
	uint64_t room = 0;
	int rc = -ENOMEM, xp;

	for (int i = 0; i < ndst; i++)
		room += dst[i].iov_len;
	if (!len || !count || ndst <= 0 || len > UINT64_MAX / count || room < len * count)
		return -EINVAL;
	len *= count;           /* the pieces arrive back to back */
	if (!(c = peer_conn(x, peer)))
		return -EHOSTDOWN;
	pthread_mutex_lock(&x->lock);
	xp = x->peers[peer].xp;
	struct rdma *rd = xp == XP_RDMA ? rdma_hold_locked(x) : NULL;
	pthread_mutex_unlock(&x->lock);
	/* An owner whose stage is full serves this one over TCP (auto). */
	if (xp != XP_TCP) {
		rc = pull_other(x, rd, peer, xp, r, dst, ndst, flags, progress, arg);
		rdma_unhold(x, rd);
		if (rc != -ENOBUFS) {
			conn_unref(x, c);
			return rc;
		}
	}
	rc = -ENOMEM;
	p = calloc(1, sizeof(*p));
	if (!p || !(p->dst = malloc((size_t)ndst * sizeof(*dst))))
		goto fail;
	memcpy(p->dst, dst, (size_t)ndst * sizeof(*dst));
	*p = (struct pending){ .peer = peer, .pull = 1, .arg = arg, .off = off, .len = len,
			       .asked_ns = clock_mono_ns(), .dst = p->dst, .ndst = ndst,
			       .progress = progress };
	if (!link_on(x, &c, p)) {
		rc = -EHOSTDOWN;        /* as if peer_conn() had found it down */
		goto fail;
	}
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

void xport_release(struct xport *x, int peer, uint64_t lease)
{
	struct proto_msg m = { .type = PT_RELEASE, .u.release.lease = lease };

	struct rdma *rd = rdma_hold(x);
	int later = rd && !rdma_release(rd, peer, lease);

	rdma_unhold(x, rd);
	if (later)
		return;         /* its READs are in flight: it goes after them */
	xport_send(x, peer, &m);        /* down: its end of the lease went with it */
}

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

/* ---------------------------------------------------------------- their side */

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
		count(c->x, XC_SERVED, len);
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

static void *server_thread(void *arg)
{
	struct xport_conn *c = arg;
	struct xport *x = c->x;
	struct proto_hdr h;
	struct proto_msg m;
	int rc;

	pthread_setname_np(pthread_self(), "omni-serve");
	flushes_bursts = 1;             /* at each burst's end, and its own */
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
		x->ops->conn_start(x->ctx, c->peer);
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
	if (rc == -EPROTO || rc == -EMSGSIZE) {
		count(x, XC_BAD_FRAMES, 1);
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
	count(x, XC_BAD_FRAMES, 1);
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
		count(x, XC_STRANGERS_CLOSED, 1);
		log_limited(x, &x->slow_handshakes, "a connection did not prove it holds "
			    "the secret within %d ms; closed", HANDSHAKE_MS);
	} else if (rc == -EUSERS) {
		count(x, XC_STRANGERS_CLOSED, 1);
		log_limited(x, &x->crowded, "too many connections in their handshake "
			    "(%u from one host, or all told); the oldest closed",
			    STRANGERS_PER_HOST);
	} else if (rc == -EACCES || rc == -EPROTO || rc == -EMSGSIZE) {
		count(x, rc == -EACCES ? XC_AUTH_FAILED : XC_BAD_FRAMES, 1);
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

static void *acceptor_thread(void *arg)
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

/* Connects to a peer that is down, away from the keeper: a peer that
 * accepts and then says nothing (stopped, hung) holds a handshake for
 * dead_ms, and the others must go on hearing our pings meanwhile. */
struct dial { struct xport *x; int peer; };

/* p's name did not resolve (under x->lock, or before a thread runs): why,
 * for health; 1 if it resolved before, so that the log says it once. */
static int peer_unresolved(struct peer *p, const char *why)
{
	int news = !p->unresolved;

	snprintf(p->down_why, sizeof(p->down_why), "cannot resolve its name (%s)", why);
	p->unresolved = 1;
	return news;
}

static void say_unresolved(const struct peer *p, const char *why)
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

static void dial(struct xport *x, int i)
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
static void *keeper_thread(void *arg)
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
				dial(x, (int)i);
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

/* RDMA's calls back into the control connection. */
struct grant_call { void (*got)(void *arg, const struct proto_msg *m); void *arg; };

static int grant_reply(void *arg, const struct proto_msg *m)
{
	struct grant_call *g = arg;

	if (m->type == PT_GRANTED)
		g->got(g->arg, m);
	return 0;
}

static int rdma_grant_call(void *ctx, int peer, uint64_t oid, uint64_t lease, uint64_t first,
			   uint32_t n, uint64_t upto,
			   void (*got)(void *arg, const struct proto_msg *m), void *arg)
{
	struct proto_msg m = { .type = PT_GRANT, .u.grant = { oid, lease, first, n, upto } };
	struct grant_call g = { got, arg };

	return xport_call(ctx, peer, &m, grant_reply, &g);
}

static void rdma_release_call(void *ctx, int peer, uint64_t lease)
{
	struct proto_msg m = { .type = PT_RELEASE, .u.release.lease = lease };

	xport_send(ctx, peer, &m);
}

static void rdma_count_call(void *ctx, enum xport_count what, uint64_t n)
{
	count(ctx, what, n);
}

static const char *rdma_name_call(void *ctx, int peer)
{
	return xport_peer_name(ctx, peer);
}

/* The log's line at start: what peers READ of this node, if anything. */
static void rdma_said(struct xport *x)
{
	const char *dev = rdma_device(x->rdma), *swhy = rdma_stage_why(x->rdma), *gwhy;
	int direct = rdma_gpudirect(x->rdma, &gwhy);
	uint64_t size, used;
	char gpu[384];

	snprintf(gpu, sizeof(gpu), "the pool is GPU memory, which %s does not READ "
		 "(no GPUDirect RDMA: %s)", dev, gwhy ? gwhy : "?");
	if (!rdma_serves(x->rdma)) {
		fprintf(stderr, "omnifs: rdma: %s; %s, and there is no stage (%s): this node "
			"reads its peers' objects by RDMA into host memory, and its own go to "
			"peers over tcp\n", dev, gpu, swhy ? swhy : "rdma_stage=0");
		return;
	}
	if (rdma_stage(x->rdma, &size, &used)) {
		fprintf(stderr, "omnifs: rdma: %s; %s: a peer's read of it is copied into a "
			"%llu MiB stage of host memory and READ from there (grants by %s, "
			"rdma_cm port %u)\n", dev, x->c.pool ? "OMNIFS_TEST_STAGE" : gpu,
			(unsigned long long)(size >> 20), rdma_grants(x->rdma), rdma_port(x->rdma));
		return;
	}
	if (swhy)               /* OMNIFS_TEST_STAGE's, on a host pool */
		fprintf(stderr, "omnifs: %s; peers READ the pool itself\n", swhy);
	fprintf(stderr, "omnifs: rdma: %s, the %llu MiB pool registered%s, grants by %s, "
		"rdma_cm port %u\n", dev, (unsigned long long)(x->c.pool_size >> 20),
		direct ? " by a dmabuf of the GPU's memory (GPUDirect RDMA: peers READ it "
			 "with no copy)" : "",
		rdma_grants(x->rdma), rdma_port(x->rdma));
}

/* ---------------------------------------------------------------- a device that goes */

/* rdma's conf.lost, on its rdma_cm thread, which must go on: the tender
 * does the rest.  From here rdma_hold() gives NULL. */
static void rdma_lost_call(void *ctx, const char *why)
{
	struct xport *x = ctx;

	pthread_mutex_lock(&x->lock);
	if (!x->rdma_gone) {
		x->rdma_gone = 1;
		snprintf(x->rdma_why, sizeof(x->rdma_why), "%s", why);
		pthread_cond_signal(&x->tend);
	}
	pthread_mutex_unlock(&x->lock);
}

/* The connections peers READ this node by end, so that they dial again
 * and hear that it offers no RDMA now.  Under x->lock. */
static void servers_redial_locked(struct xport *x)
{
	for (struct xport_conn *c = x->servers; c; c = c->next)
		if (c->srv)
			shutdown(c->fd, SHUT_RDWR);
}

/* This node's device went: every peer read by it is read over TCP now
 * (transport=rdma: not at all), peers that READ this node dial again to
 * a WELCOME that offers no RDMA, and once no call into it is under way
 * it is closed, which lets the kernel finish removing it.  The READs
 * under way fail (EIO), as they would have anyway. */
static void rdma_let_go(struct xport *x)
{
	int xp = x->c.mode == XPORT_RDMA ? XP_NONE : XP_TCP;
	char why[sizeof(x->rdma_why)];

	pthread_mutex_lock(&x->lock);
	snprintf(why, sizeof(why), "%s", x->rdma_why);
	pthread_mutex_unlock(&x->lock);
	fprintf(stderr, "omnifs: rdma: %s: %s until it is back\n", why, xp == XP_TCP ?
		"peers' objects are read over tcp" : "peers' objects cannot be read (transport=rdma)");
	for (size_t i = 0; i < x->npeers; i++) {
		struct peer *p = &x->peers[i];
		pthread_mutex_lock(&x->lock);
		int was = p->xp == XP_RDMA && p->out;
		if (p->xp == XP_RDMA) {
			p->xp = xp;
			snprintf(p->why, sizeof(p->why), "%s", why);
			p->since_ns = clock_wall_ns();
		}
		pthread_mutex_unlock(&x->lock);
		if (was)
			fprintf(stderr, "omnifs: peer %s (%s): transport %s now (%s)\n", p->name,
				p->addr, xp == XP_TCP ? "tcp" : "none", why);
	}
	/* Each call ends within its own bounds (a pull's: about dead_ms). */
	pthread_mutex_lock(&x->lock);
	while (x->rdma_users && !x->stopping) {
		struct timespec ts = clock_deadline_in(100);
		servers_redial_locked(x);       /* a handshake under way may add one */
		pthread_cond_timedwait(&x->cond, &x->lock, &ts);
	}
	struct rdma *rd = x->stopping ? NULL : x->rdma;         /* else xport_destroy's */
	if (rd)
		x->rdma = NULL;
	pthread_mutex_unlock(&x->lock);
	rdma_close(rd);
}

/* Tells c, a peer's connection to us that the caller holds a reference
 * to, that this node's device is back (REDIAL): the peer connects again
 * once its requests here are done, and hears where its pair connects in
 * the WELCOME.  One of an older release, which would not understand, is
 * made to by the end of its connection.  Drops the reference. */
static void redial_tell(struct xport *x, struct xport_conn *c)
{
	struct proto_msg m = { .type = PT_REDIAL };

	if (c->hears_redial)
		conn_send(c, 0, &m);    /* a failure ends it: the same, sooner */
	else
		shutdown(c->fd, SHUT_RDWR);
	conn_unref(x, c);
}

/* Peers that could READ this node but read it over TCP hear that its
 * device is back (redial_tell). */
static void servers_redial_back(struct xport *x)
{
	struct xport_conn **tell;
	size_t n = 0;

	pthread_mutex_lock(&x->lock);
	for (struct xport_conn *c = x->servers; c; c = c->next)
		n++;
	tell = calloc(n + 1, sizeof(*tell));
	n = 0;
	for (struct xport_conn *c = x->servers; c; c = c->next) {
		if (!c->reads_rdma || c->srv)
			continue;
		if (tell) {
			c->refs++;
			tell[n++] = c;
		} else {
			shutdown(c->fd, SHUT_RDWR);     /* no memory to list it: the end */
		}
	}
	pthread_mutex_unlock(&x->lock);
	for (size_t i = 0; i < n; i++)
		redial_tell(x, tell[i]);
	free(tell);
}

/* The device, opened again if it is back. */
static void rdma_reopen(struct xport *x)
{
	struct rdma *rd;
	char why[384];

	if (rdma_open(&rd, &x->rconf, why, sizeof(why)))
		return;
	pthread_mutex_lock(&x->lock);
	int stop = x->stopping;
	if (!stop) {
		x->rdma = rd;
		x->rdma_gone = 0;
		x->rdma_gen++;
		snprintf(x->rdma_dev, sizeof(x->rdma_dev), "%s", rdma_device(rd));
	}
	pthread_mutex_unlock(&x->lock);
	if (stop) {
		rdma_close(rd);
		return;
	}
	fprintf(stderr, "omnifs: rdma: %s is back: connecting to every peer that does RDMA "
		"again, to connect queue pairs, each once its requests in flight are done\n",
		rdma_device(rd));
	rdma_said(x);
	/* Both ways: our pairs connect at the handshake, and peers hear
	 * where theirs connect now in its WELCOME.  Not to peers that do no
	 * RDMA (transport=tcp, or no device at their start): nothing would
	 * change, and their new requests would wait for nothing. */
	for (size_t i = 0; i < x->npeers; i++)
		rejoin(x, (int)i, NULL, PROTO_CAP_RDMA, "this node's RDMA device is back");
	servers_redial_back(x);
}

/* Lets go of a device that went, then opens it again each RESOLVE_MS
 * until it is back.  Idle, and woken by nothing else, the rest of the
 * time. */
static void *tender_thread(void *arg)
{
	struct xport *x = arg;

	pthread_setname_np(pthread_self(), "omni-rdma-tend");
	pthread_mutex_lock(&x->lock);
	while (!x->stopping) {
		if (x->rdma_gone && x->rdma) {
			pthread_mutex_unlock(&x->lock);
			rdma_let_go(x);
			pthread_mutex_lock(&x->lock);
		} else if (x->rdma_gone) {
			struct timespec ts = clock_deadline_in(RESOLVE_MS);
			pthread_cond_timedwait(&x->tend, &x->lock, &ts);
			if (x->stopping)
				break;
			pthread_mutex_unlock(&x->lock);
			rdma_reopen(x);
			pthread_mutex_lock(&x->lock);
		} else {
			pthread_cond_wait(&x->tend, &x->lock);
		}
	}
	pthread_mutex_unlock(&x->lock);
	return NULL;
}

/* transport=auto and rdma open the device behind the listen address;
 * auto goes on without one, saying so, and rdma fails. */
static int open_rdma(struct xport *x, char *err, size_t errlen)
{
	struct rdma_conf rc = {
		.listen = x->c.listen, .pool = x->c.pool, .pool_size = x->c.pool_size,
		.stage_from = x->c.stage_from, .stage_size = x->c.stage_size,
		.npeers = x->npeers, .dead_ms = x->c.dead_ms, .ctx = x,
		.grant = rdma_grant_call, .release = rdma_release_call, .count = rdma_count_call,
		.peer_name = rdma_name_call, .lost = rdma_lost_call,
	};
	char why[384];
	int rc_;

	x->caps = PROTO_CAP_TCP | PROTO_CAP_REDIAL;
	if (x->c.mode == XPORT_TCP)
		return 0;
	rc_ = rdma_open(&x->rdma, &rc, why, sizeof(why));
	if (rc_) {
		x->rdma = NULL;
		if (x->c.mode == XPORT_RDMA) {
			snprintf(err, errlen, "transport=rdma: %s", why);
			return rc_ == -ENODEV ? -EINVAL : rc_;  /* asked of a machine without */
		}
		fprintf(stderr, "omnifs: %s; every peer's bytes move over tcp\n", why);
		return 0;
	}
	if (x->c.mode == XPORT_RDMA && !rdma_serves(x->rdma) && rdma_stage_why(x->rdma)) {
		/* asked for, and peers would read nothing of ours: say so now */
		snprintf(err, errlen, "transport=rdma: %s", rdma_stage_why(x->rdma));
		rdma_close(x->rdma);
		x->rdma = NULL;
		return -ENOMEM;
	}
	x->caps |= PROTO_CAP_RDMA;
	x->rconf = rc;
	snprintf(x->rdma_dev, sizeof(x->rdma_dev), "%s", rdma_device(x->rdma));
	rdma_said(x);
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
	shutdown(x->lfd, SHUT_RDWR);
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
	for (size_t i = 0; i < x->npeers; i++)
		if (x->peers[i].rx_joinable)
			pthread_join(x->peers[i].rx, NULL);
	pthread_mutex_lock(&x->lock);
	while (x->nservers)
		pthread_cond_wait(&x->cond, &x->lock);
	pthread_mutex_unlock(&x->lock);
	rdma_close(x->rdma);    /* its pulls end; every connection is gone */
	for (struct xbuf *b = x->bufs, *next; b; b = next) {     /* their owners' leftovers */
		next = b->next;
		munmap(b->base, b->len);
		free(b);
	}
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

int xport_peer_up(struct xport *x, int peer)
{
	pthread_mutex_lock(&x->lock);
	int up = x->peers[peer].out != NULL;
	pthread_mutex_unlock(&x->lock);
	return up;
}

int xport_rdma(struct xport *x, struct xport_rdma_info *out)
{
	struct rdma *rd = rdma_hold(x);

	pthread_mutex_lock(&x->lock);
	snprintf(out->device, sizeof(out->device), "%s", x->rdma_dev);
	snprintf(out->gone, sizeof(out->gone), "%s", x->rdma_gone ? x->rdma_why : "");
	pthread_mutex_unlock(&x->lock);
	out->grants = rd ? rdma_grants(rd) : NULL;
	rdma_unhold(x, rd);
	return rd ? 0 : -ENODEV;
}

int xport_rdma_gpudirect(struct xport *x)
{
	struct rdma *rd = rdma_hold(x);
	int direct = rd && rdma_gpudirect(rd, NULL);

	rdma_unhold(x, rd);
	return direct;
}

int xport_rdma_stage(struct xport *x, uint64_t *size, uint64_t *used)
{
	struct rdma *rd = rdma_hold(x);
	int rc = rd && rdma_stage(rd, size, used) ? 0 : -ENODEV;

	rdma_unhold(x, rd);
	return rc;
}

void xport_peer_info(struct xport *x, int peer, struct xport_peer_info *out)
{
	struct peer *p = &x->peers[peer];

	pthread_mutex_lock(&x->lock);
	out->name = p->name;
	out->addr = p->addr;
	out->state = p->out ? "up" : "down";
	out->transport = p->out ? xp_name[p->xp] : "";
	out->why = p->out ? p->why : "";
	snprintf(out->down_why, sizeof(out->down_why), "%s", p->out ? "" : p->down_why);
	out->config_differs = p->config_differs;
	out->since_ns = p->since_ns;
	pthread_mutex_unlock(&x->lock);
}
