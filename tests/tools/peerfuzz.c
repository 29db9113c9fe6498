/* peerfuzz - a peer that holds the secret and then misbehaves.
 *
 *   peerfuzz ADDR SECRET_FILE NAME SECONDS [SEED]
 *   peerfuzz -l ADDR SECRET_FILE NAME SECONDS [SEED]
 *
 * The frame fuzz target (tests/fuzz/frame.c) covers the decoder; this
 * covers what sits behind it on a live daemon, on both ends of a
 * connection.
 *
 * As a client it completes the handshake at ADDR as node NAME and then,
 * for SECONDS, sends requests built from hostile field values (names that
 * are no names, oids and offsets at the edges, pulls past the end,
 * consumed covers that do not fit, lookups that subscribe, announces of
 * objects that cannot be), a share of them with bytes flipped, cut or
 * added after encoding.  Oids and sizes learned from the daemon's own
 * answers are reused so that pulls and CONSUMED hit real objects too.
 * When the daemon drops the connection (as it must after a bad frame) it
 * connects again.  Prints "peerfuzz: F frames, C connections, R replies,
 * D data bytes" and exits 0 if the daemon then answers a PING and refuses
 * a lookup of a bad name with EINVAL.
 *
 * With -l it is node NAME's server at ADDR: the daemons that connect to it
 * get answers with hostile fields, errnos, answers to other requests,
 * listings that never end, and DATA at the wrong place, of the wrong
 * length or hash, cut off or never ended.  Prints "peerfuzz: served C
 * connections, R requests, A answers" and exits 0 if there were any.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "../../fs/lease.h"
#include "../../transport/auth.h"
#include "../../transport/proto.h"

static uint64_t rng;
static uint64_t rnd(uint64_t n)
{
	rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
	return n ? rng % n : rng;
}

/* What the daemon told us about its objects, for requests that hit. */
struct seen { uint64_t oid, size; };
static struct seen seen[64];
static unsigned nseen;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t replies, data_bytes, pongs;

static void learn(const struct proto_obj *o)
{
	pthread_mutex_lock(&seen_lock);
	seen[nseen++ % 64] = (struct seen){ o->oid, o->size };
	pthread_mutex_unlock(&seen_lock);
}

static int seen_pick(uint64_t *oid, uint64_t *size)
{
	pthread_mutex_lock(&seen_lock);
	unsigned n = nseen < 64 ? nseen : 64, i = n ? (unsigned)rnd(n) : 0;
	if (n) {
		*oid = seen[i].oid;
		*size = seen[i].size;
	}
	pthread_mutex_unlock(&seen_lock);
	return n ? 0 : -1;
}

/* ---------------------------------------------------------------- values */

static void pick_name(char *out, size_t cap, int key)
{
	static const char *names[] = {
		"0", "1", "2", "9", "k1", "k2", "x", "x.rank0of2", "x.rank1of2", "x.rank7of2",
		"", ".", "..", "a/b", "/", "\x01", "\xff\xfe", " ", "-", ".omni", "a\nb",
	};
	size_t n = sizeof(names) / sizeof(names[0]);
	uint64_t r = rnd(n + 3);

	if (r < n) {
		snprintf(out, cap, "%s", names[r]);
	} else {                /* long: at and over the limits */
		size_t len = r == n ? cap - 1 : (size_t)rnd(cap);
		for (size_t i = 0; i < len; i++)
			out[i] = (char)(key && rnd(4) ? 'k' : 1 + rnd(255));
		out[len] = 0;
	}
}

static uint64_t pick_u64(uint64_t hint)
{
	static const uint64_t edges[] = {
		0, 1, 2, 4095, 4096, 4097, 1u << 20, (1u << 20) + 1, 1ull << 30, 1ull << 32,
		UINT64_MAX >> 2, (UINT64_MAX >> 2) + 1, 1ull << 63, UINT64_MAX - 1, UINT64_MAX,
	};
	uint64_t r = rnd(sizeof(edges) / sizeof(edges[0]) + 4);

	if (r < sizeof(edges) / sizeof(edges[0]))
		return edges[r];
	return r & 1 ? hint + rnd(3) - 1 : rnd(0) >> rnd(64);
}

/* ---------------------------------------------------------------- requests */

static void fill_obj(struct proto_obj *o, uint8_t *scratch)
{
	uint64_t oid = 1, size = 4096;

	seen_pick(&oid, &size);
	pick_name(o->from, sizeof(o->from), 0);
	pick_name(o->to, sizeof(o->to), 0);
	pick_name(o->key, sizeof(o->key), 1);
	o->oid = rnd(2) ? oid : pick_u64(oid);
	o->size = rnd(2) ? size : pick_u64(size);
	o->xxh3 = rnd(0);
	o->reads = pick_u64(1);
	o->readers = (int64_t)(pick_u64(1) >> 1);
	o->uid = (uint32_t)rnd(3);
	o->gid = (uint32_t)rnd(3);
	o->published_ns = pick_u64(0);
	if (rnd(3) == 0) {      /* inline bytes: the object's, or not quite */
		o->datalen = (uint32_t)(rnd(2) ? o->size % (PROTO_INLINE_MAX + 1) : rnd(5000));
		o->data = scratch;
	}
	if (rnd(4) == 0) {      /* a KV header: magic, then anything */
		o->kvhdrlen = (uint32_t)rnd(3000);
		o->kvhdr = scratch;
		memcpy(scratch, "OMNIKV\r\n", 8);
	}
	if (o->data && o->datalen == o->size && rnd(2))  /* with their checksum: kept */
		o->xxh3 = XXH3_64bits(o->data, o->datalen);
}

/* A lease id: often one of a few, to be reused; else one of more than a
 * peer may hold at once. */
static uint64_t pick_lease(void)
{
	return 1 + (rnd(2) ? rnd(300) : rnd(LEASE_MAX + 100));
}

/* A request with hostile fields; 0, or -1 if the encoder refused it. */
static int build(uint8_t *body, size_t cap, uint8_t *type, uint8_t *scratch)
{
	static const uint8_t types[] = { PT_ANNOUNCE, PT_GONE, PT_CONSUMED, PT_LOOKUP,
					 PT_LIST, PT_REMOVE, PT_PULL, PT_PULL, PT_PING,
					 PT_RELEASE, PT_GRANT, PT_CLEANUP, PT_EXISTS, PT_CLAIM };
	struct proto_msg m = { .type = types[rnd(sizeof(types))] };
	uint64_t oid = 1, size = 1 << 20;

	seen_pick(&oid, &size);
	switch (m.type) {
	case PT_ANNOUNCE: case PT_GONE: case PT_LOOKUP: case PT_REMOVE: case PT_EXISTS:
	case PT_CLAIM:
		fill_obj(&m.u.obj, scratch);
		if (m.type == PT_LOOKUP && rnd(2))
			m.u.obj.size = rnd(4000000);    /* subscribe for that many ms */
		if (m.type == PT_CLAIM)         /* a close's, or an O_EXCL put's */
			m.u.obj.excl = (uint8_t)rnd(2);
		if (m.type == PT_ANNOUNCE)      /* decided where claims meet, or not */
			m.u.obj.decided = (uint8_t)rnd(2);
		break;
	case PT_CONSUMED:
		m.u.consumed.oid = rnd(4) ? oid : pick_u64(oid);
		m.u.consumed.of = (uint32_t)rnd(9);
		m.u.consumed.first = (uint32_t)rnd(m.u.consumed.of + 2);
		m.u.consumed.n = (uint32_t)rnd(m.u.consumed.of + 2);
		if (!rnd(4)) {  /* one unit of more than any view makes: 2^32 - 1
				   once had the daemon count each, under its lock */
			static const uint32_t huge[] = { 65537, 1u << 30, UINT32_MAX - 1, UINT32_MAX };
			m.u.consumed.of = huge[rnd(4)];
			m.u.consumed.first = (uint32_t)rnd(2);
			m.u.consumed.n = 1;
		}
		m.u.consumed.rid = rnd(2) ? rnd(4) : pick_u64(1);      /* repeats, too */
		break;
	case PT_LIST:
		pick_name(m.u.list.from, sizeof(m.u.list.from), 0);
		pick_name(m.u.list.to, sizeof(m.u.list.to), 0);
		break;
	case PT_PULL:
		m.u.pull.oid = rnd(4) ? oid : pick_u64(oid);
		m.u.pull.off = rnd(2) ? rnd(size + 2) : pick_u64(size);
		m.u.pull.len = rnd(2) ? rnd(size + 2) : pick_u64(size);
		m.u.pull.count = (uint32_t)(rnd(2) ? 1 : pick_u64(3));
		m.u.pull.stride = rnd(2) ? m.u.pull.len + rnd(4096) : pick_u64(size);
		/* Leases from a few ids, so that they are reused (for another
		 * object, too), released, and pile up past a peer's limit. */
		m.u.pull.lease = rnd(3) ? 0 : rnd(2) ? pick_lease() : pick_u64(1);
		break;
	case PT_RELEASE:
		m.u.release.lease = rnd(2) ? pick_lease() : pick_u64(1);
		break;
	case PT_CLEANUP:        /* the targets' keys too: "k1" is one's id */
		pick_name(m.u.cleanup.id, sizeof(m.u.cleanup.id), 1);
		break;
	case PT_GRANT:          /* refused here, a connection with no RDMA; decoded first */
		m.u.grant.oid = rnd(4) ? oid : pick_u64(oid);
		m.u.grant.lease = pick_lease();
		m.u.grant.first = rnd(2) ? rnd(4) : pick_u64(1);
		m.u.grant.n = (uint32_t)rnd(PROTO_GRANT_HASHES + 2);
		break;
	default:
		break;
	}
	*type = (uint8_t)m.type;
	int len = proto_encode(&m, body, cap);
	return len < 0 ? -1 : len;
}

/* Now and then the encoded body is damaged: bits flipped, cut, grown. */
static size_t damage(uint8_t *body, size_t len, size_t cap)
{
	switch (rnd(12)) {
	case 0:
		for (int i = 0, k = 1 + (int)rnd(4); len && i < k; i++)
			body[rnd(len)] ^= (uint8_t)(1u << rnd(8));
		return len;
	case 1:
		return len ? (size_t)rnd(len) : 0;
	case 2: {
		size_t more = (size_t)rnd(64);
		if (len + more > cap)
			more = cap - len;
		for (size_t i = 0; i < more; i++)
			body[len + i] = (uint8_t)rnd(256);
		return len + more;
	}
	default:
		return len;
	}
}

/* ---------------------------------------------------------------- the wire */

static int send_all(int fd, const void *buf, size_t len)
{
	for (const uint8_t *p = buf; len;) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static int recv_all(int fd, void *buf, size_t len)
{
	for (uint8_t *p = buf; len;) {
		ssize_t r = recv(fd, p, len, 0);
		if (r <= 0)
			return -1;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

static int send_msg(int fd, const struct proto_msg *m)
{
	uint8_t buf[PROTO_HDR + 512];
	int len = proto_encode(m, buf + PROTO_HDR, sizeof(buf) - PROTO_HDR);

	if (len < 0)
		return -1;
	proto_put_hdr(buf, (uint8_t)m->type, (uint32_t)len, 0);
	return send_all(fd, buf, PROTO_HDR + (size_t)len);
}

/* One frame: header checked, body read whole (a DATA body is counted). */
static int recv_frame(int fd, struct proto_hdr *h, uint8_t *body, struct proto_msg *m)
{
	uint8_t hdr[PROTO_HDR];

	if (recv_all(fd, hdr, PROTO_HDR) || proto_frame_check(hdr, h) ||
	    recv_all(fd, body, h->len))
		return -1;
	if (h->type == PT_DATA)
		data_bytes += h->len;
	return proto_decode(h->type, body, h->len, m) ? -1 : 0;
}

static int handshake(int fd, const uint8_t key[AUTH_KEY], const char *name, uint8_t *body)
{
	struct proto_msg m = { .type = PT_HELLO }, r;
	struct proto_hdr h;
	uint8_t cnonce[PROTO_NONCE];

	auth_nonce(cnonce);
	m.u.hello.version = PROTO_VERSION;
	m.u.hello.caps = PROTO_CAP_TCP;
	memcpy(m.u.hello.nonce, cnonce, PROTO_NONCE);
	snprintf(m.u.hello.name, sizeof(m.u.hello.name), "%s", name);
	if (send_msg(fd, &m) || recv_frame(fd, &h, body, &r) || h.type != PT_CHALLENGE)
		return -1;
	m = (struct proto_msg){ .type = PT_AUTH };
	auth_mac(key, AUTH_CLIENT, cnonce, r.u.challenge.nonce, name, m.u.auth.mac);
	return send_msg(fd, &m) || recv_frame(fd, &h, body, &r) || h.type != PT_WELCOME ? -1 : 0;
}

/* Reads what comes back until the connection ends, learning oids. */
static void *reader(void *arg)
{
	int fd = *(int *)arg;
	uint8_t *body = malloc(PROTO_MAX_BODY);
	struct proto_hdr h;
	struct proto_msg m;

	while (body && !recv_frame(fd, &h, body, &m)) {
		replies++;
		if (m.type == PT_PONG)
			pongs++;
		if (m.type == PT_OBJECT)
			learn(&m.u.obj);
		for (uint32_t i = 0; m.type == PT_LISTING && m.u.listing.objects &&
				     i < m.u.listing.n; i++)
			learn(&m.u.listing.obj[i]);
		proto_msg_free(&m);
	}
	free(body);
	return NULL;
}

/* A daemon that hangs must fail the test, not hang it. */
static const struct timeval io_timeout = { 10, 0 };

/* A TCP socket to ADDR (host:port), connected, or with serve bound to it
 * and listening; reads and writes on it give up after io_timeout.  -1 if
 * not. */
static int sock_at(const char *addr, int serve)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = serve ? AI_PASSIVE : 0 };
	struct addrinfo *ai;
	int fd, one = 1;

	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		return -1;
	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	if (getaddrinfo(host, colon + 1, &hints, &ai))
		return -1;
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &io_timeout, sizeof(io_timeout)) ||
			setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &io_timeout, sizeof(io_timeout)) ||
			(serve ? setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
				 bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 4)
			       : connect(fd, ai->ai_addr, ai->ai_addrlen) != 0))) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One connection: handshake, then hostile frames until it breaks or the
 * time is up.  Returns the frames sent, or -1 if it never got in. */
static long session(const char *addr, const uint8_t *key, const char *name, double until,
		    uint8_t *body, uint8_t *scratch)
{
	int fd = sock_at(addr, 0);
	pthread_t th;
	long frames = 0;

	if (fd < 0 || handshake(fd, key, name, body)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (pthread_create(&th, NULL, reader, &fd)) {
		close(fd);
		return -1;
	}
	for (; now_s() < until; frames++) {
		uint8_t type;
		int len = build(body + PROTO_HDR, PROTO_MAX_BODY - PROTO_HDR, &type, scratch);
		if (len < 0)
			continue;
		size_t blen = damage(body + PROTO_HDR, (size_t)len, PROTO_MAX_BODY - PROTO_HDR);
		proto_put_hdr(body, type, (uint32_t)blen, rnd(0));
		if (send_all(fd, body, PROTO_HDR + blen))
			break;
	}
	shutdown(fd, SHUT_WR);
	pthread_join(th, NULL);
	close(fd);
	return frames;
}

/* One request q on a new, well-formed connection: the type of the first
 * reply (with *err, if it is a STATUS), or -1. */
static int ask(const char *addr, const uint8_t *key, const char *name, uint8_t *body,
	       const struct proto_msg *q, int32_t *err)
{
	int fd = sock_at(addr, 0), type = -1;
	struct proto_msg m;
	struct proto_hdr h;

	if (fd >= 0 && !handshake(fd, key, name, body) && !send_msg(fd, q) &&
	    !recv_frame(fd, &h, body, &m)) {
		type = m.type;
		if (type == PT_STATUS && err)
			*err = m.u.status.err;
		proto_msg_free(&m);
	}
	if (fd >= 0)
		close(fd);
	return type;
}

/* The daemon still answers a well-formed peer, and still refuses a lookup
 * of a name that cannot be (one that would also wait 60 s for it) with
 * EINVAL.  NULL, or what it no longer does. */
static const char *still_serves(const char *addr, const uint8_t *key, const char *name,
				uint8_t *body)
{
	struct proto_msg ping = { .type = PT_PING }, bad = { .type = PT_LOOKUP };
	int32_t err = 0;

	snprintf(bad.u.obj.from, sizeof(bad.u.obj.from), "0");
	snprintf(bad.u.obj.to, sizeof(bad.u.obj.to), "1");
	snprintf(bad.u.obj.key, sizeof(bad.u.obj.key), ".hidden");
	bad.u.obj.size = 60000;
	if (ask(addr, key, name, body, &ping, NULL) != PT_PONG)
		return "answers a PING";
	if (ask(addr, key, name, body, &bad, &err) != PT_STATUS || err != EINVAL)
		return "refuses a lookup of a bad name with EINVAL";
	return NULL;
}

/* As a client of addr until the time is up; then it must still serve. */
static int fuzz(const char *addr, const uint8_t *key, const char *name, double until,
		uint8_t *body, uint8_t *scratch)
{
	long frames = 0, conns = 0, refused = 0;

	while (now_s() < until && refused < 50) {
		long n = session(addr, key, name, until, body, scratch);
		if (n < 0) {
			refused++;      /* it may be busy dropping the last one */
			usleep(20000);
			continue;
		}
		frames += n;
		conns++;
	}
	const char *lost = still_serves(addr, key, name, body);
	printf("peerfuzz: %ld frames, %ld connections, %llu replies, %llu data bytes%s%s\n",
	       frames, conns, (unsigned long long)replies, (unsigned long long)data_bytes,
	       lost ? "; the daemon no longer " : "", lost ? lost : "");
	return !lost && conns ? 0 : 1;
}

/* ---------------------------------------------------------------- as a server */

/* The server's half of the handshake, as node name. */
static int handshake_serve(int fd, const uint8_t key[AUTH_KEY], const char *name, uint8_t *body)
{
	struct proto_msg m = { .type = PT_CHALLENGE }, r;
	struct proto_hdr h;
	uint8_t cnonce[PROTO_NONCE], snonce[PROTO_NONCE];
	char client[PROTO_NAME_MAX + 1];

	if (recv_frame(fd, &h, body, &r) || h.type != PT_HELLO)
		return -1;
	memcpy(cnonce, r.u.hello.nonce, PROTO_NONCE);
	snprintf(client, sizeof(client), "%s", r.u.hello.name);
	auth_nonce(snonce);
	m.u.challenge.version = PROTO_VERSION;
	memcpy(m.u.challenge.nonce, snonce, PROTO_NONCE);
	if (send_msg(fd, &m) || recv_frame(fd, &h, body, &r) || h.type != PT_AUTH ||
	    !auth_check(key, AUTH_CLIENT, cnonce, snonce, client, r.u.auth.mac))
		return -1;
	m = (struct proto_msg){ .type = PT_WELCOME };
	m.u.welcome.caps = PROTO_CAP_TCP;
	snprintf(m.u.welcome.name, sizeof(m.u.welcome.name), "%s", name);
	auth_mac(key, AUTH_SERVER, cnonce, snonce, name, m.u.welcome.mac);
	return send_msg(fd, &m);
}

static uint64_t answers;

/* m, encoded into out (header room first), damaged now and then, sent. */
static int reply(int fd, const struct proto_msg *m, uint64_t reqid, uint8_t *out)
{
	int len = proto_encode(m, out + PROTO_HDR, PROTO_MAX_BODY);
	if (len < 0)
		return 0;
	size_t blen = damage(out + PROTO_HDR, (size_t)len, PROTO_MAX_BODY);
	proto_put_hdr(out, (uint8_t)m->type, (uint32_t)blen, reqid);
	answers++;
	return send_all(fd, out, PROTO_HDR + blen);
}

/* Objects named like those asked about, mostly. */
static void fill_like(struct proto_obj *o, const char *from, const char *to, uint8_t *scratch)
{
	fill_obj(o, scratch);
	if (rnd(4)) {
		snprintf(o->from, sizeof(o->from), "%s", from);
		snprintf(o->to, sizeof(o->to), "%s", to);
	}
}

static int answer_list(int fd, const struct proto_msg *q, uint64_t reqid, uint8_t *out,
		       uint8_t *scratch)
{
	static struct proto_obj obj[PROTO_LIST_MAX];
	static char names[PROTO_LIST_MAX][PROTO_NAME_MAX + 1];
	int frames = 1 + (int)rnd(3), rc = 0;

	for (int f = 0; f < frames && !rc; f++) {
		struct proto_msg m = { .type = PT_LISTING };
		m.u.listing.objects = rnd(8) != 0;
		m.u.listing.n = (uint32_t)(rnd(16) ? rnd(20) : PROTO_LIST_MAX);
		m.u.listing.more = f < frames - 1 || rnd(16) == 0;      /* or never ends */
		m.u.listing.obj = obj;
		m.u.listing.name = names;
		for (uint32_t i = 0; i < m.u.listing.n; i++) {
			fill_like(&obj[i], q->u.list.from, q->u.list.to, scratch);
			obj[i].data = obj[i].kvhdr = NULL;
			obj[i].datalen = obj[i].kvhdrlen = 0;
			pick_name(names[i], sizeof(names[i]), 0);
		}
		rc = reply(fd, &m, reqid, out);
	}
	return rc;
}

/* DATA for a pull: mostly right, sometimes at the wrong place, of the
 * wrong length or hash, cut off, or never ended. */
static int answer_pull(int fd, const struct proto_msg *q, uint64_t reqid, uint8_t *out,
		       uint8_t *scratch)
{
	uint64_t total, pos = 0;

	if (__builtin_mul_overflow(q->u.pull.len, (uint64_t)q->u.pull.count, &total) ||
	    total > (8u << 20))
		total = 8u << 20;
	for (int f = 0; pos < total && f < 16; f++) {
		uint32_t n = (uint32_t)(total - pos < PROTO_CHUNK ? total - pos : PROTO_CHUNK);
		struct proto_msg m = { .type = PT_DATA };
		uint8_t hdr[PROTO_HDR];
		if (rnd(16) == 0)
			n = (uint32_t)rnd(PROTO_CHUNK + 1);
		for (uint32_t i = 0; i < n; i += 8) {     /* scratch has 8 bytes to spare */
			rnd(0);
			memcpy(scratch + i, &rng, 8);
		}
		m.u.data.off = q->u.pull.off + pos + (rnd(16) ? 0 : rnd(3) - 1);
		m.u.data.len = n;
		m.u.data.xxh3 = XXH3_64bits(scratch, n) ^ (rnd(16) ? 0 : 1);
		proto_encode(&m, out, PROTO_DATA_HDR);
		proto_put_hdr(hdr, PT_DATA, PROTO_DATA_HDR + n, reqid);
		size_t cut = rnd(32) ? n : (size_t)rnd(n + 1);  /* then the stream is lost */
		if (send_all(fd, hdr, PROTO_HDR) || send_all(fd, out, PROTO_DATA_HDR) ||
		    send_all(fd, scratch, cut) || cut < n)
			return -1;
		answers++;
		pos += n;
	}
	struct proto_msg st = { .type = PT_STATUS, .u.status.err = (int32_t)rnd(3) };
	return rnd(8) ? reply(fd, &st, reqid, out) : 0;      /* or it stalls */
}

/* What a request gets: a fitting answer with hostile fields, an errno,
 * nothing, or something for another request. */
static int answer(int fd, const struct proto_hdr *h, const struct proto_msg *q, uint8_t *out,
		  uint8_t *scratch)
{
	uint64_t reqid = rnd(16) ? h->reqid : rnd(4) ? h->reqid + 1 : rnd(0);
	struct proto_msg r = { .type = PT_STATUS, .u.status.err = (int32_t)rnd(4096) };

	if (rnd(10) == 0)
		return reply(fd, &r, reqid, out);
	switch (q->type) {
	case PT_PING:
		r.type = PT_PONG;
		break;
	case PT_LOOKUP:
		r.type = PT_OBJECT;
		fill_like(&r.u.obj, q->u.obj.from, q->u.obj.to, scratch);
		if (rnd(4))
			snprintf(r.u.obj.key, sizeof(r.u.obj.key), "%s", q->u.obj.key);
		break;
	case PT_LIST:
		return answer_list(fd, q, reqid, out, scratch);
	case PT_PULL:
		return answer_pull(fd, q, reqid, out, scratch);
	case PT_REMOVE: case PT_CONSUMED:      /* heard, with others made up, or a STATUS */
		if (rnd(2)) {
			r.type = PT_ACKS;
			r.u.acks.n = (uint32_t)rnd(PROTO_ACKS_MAX + 1);
			for (uint32_t i = 0; i < r.u.acks.n; i++)
				r.u.acks.reqid[i] = rnd(2) ? reqid : pick_u64(reqid);
			return reply(fd, &r, rnd(2) ? 0 : reqid, out);
		}
		r.u.status.err = rnd(2) ? 0 : ENOENT;
		break;
	case PT_EXISTS:
		r.u.status.err = rnd(2) ? 0 : ENOENT;
		break;
	case PT_CLAIM:          /* taken, refused, or an errno it never sends */
		r.u.status.err = rnd(3) ? (rnd(2) ? 0 : EEXIST) : (int)rnd(200);
		break;
	case PT_CLEANUP:        /* any count at all, or an errno */
		if (rnd(4)) {
			r.type = PT_CLEANED;
			r.u.cleaned.removed = pick_u64(3);
		}
		break;
	default:
		return 0;       /* one-way: nothing is owed */
	}
	return reply(fd, &r, reqid, out);
}

/* One connection from the daemon: its requests get answer(); when it is
 * quiet, now and then a frame nobody asked for.  Requests it counts. */
static long serve_one(int fd, const uint8_t *key, const char *name, double until,
		      uint8_t *body, uint8_t *out, uint8_t *scratch)
{
	struct pollfd p = { fd, POLLIN, 0 };
	struct proto_hdr h;
	struct proto_msg m;
	long requests = 0;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &io_timeout, sizeof(io_timeout));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &io_timeout, sizeof(io_timeout));
	if (handshake_serve(fd, key, name, body))
		return 0;
	while (now_s() < until) {
		if (poll(&p, 1, 50) == 0) {
			struct proto_msg st = { .type = PT_STATUS, .u.status.err = (int32_t)rnd(9) };
			if (rnd(8) == 0 && reply(fd, &st, rnd(8), out))
				break;
			continue;
		}
		if (recv_frame(fd, &h, body, &m))
			break;
		requests++;
		int rc = answer(fd, &h, &m, out, scratch);
		proto_msg_free(&m);
		if (rc)
			break;
	}
	return requests;
}

/* Listens at addr as node name until the time is up. */
static int serve(const char *addr, const uint8_t *key, const char *name, double until,
		 uint8_t *body, uint8_t *scratch)
{
	int l = sock_at(addr, 1);
	uint8_t *out = malloc(PROTO_HDR + PROTO_MAX_BODY + 64);
	long conns = 0, requests = 0;

	if (l < 0 || !out) {
		fprintf(stderr, "peerfuzz: cannot listen at %s\n", addr);
		free(out);
		return 2;
	}
	while (now_s() < until) {
		struct pollfd p = { l, POLLIN, 0 };
		if (poll(&p, 1, 100) <= 0)
			continue;
		int fd = accept(l, NULL, NULL);
		if (fd < 0)
			continue;
		conns++;
		requests += serve_one(fd, key, name, until, body, out, scratch);
		close(fd);
	}
	close(l);
	free(out);
	printf("peerfuzz: served %ld connections, %ld requests, %llu answers\n", conns, requests,
	       (unsigned long long)answers);
	return conns && requests ? 0 : 1;
}

int main(int argc, char **argv)
{
	uint8_t key[AUTH_KEY];
	char err[256];
	int as_server = argc > 1 && !strcmp(argv[1], "-l");

	argv += as_server;
	argc -= as_server;
	if (argc < 5 || atof(argv[4]) <= 0) {
		int help = argc == 2 && !strcmp(argv[1], "--help");
		fprintf(help ? stdout : stderr,
			"usage: peerfuzz [-l] ADDR SECRET_FILE NAME SECONDS [SEED]\n");
		return help ? 0 : 2;
	}
	if (auth_load(argv[2], key, err, sizeof(err))) {
		fprintf(stderr, "peerfuzz: %s\n", err);
		return 2;
	}
	rng = argc > 5 ? strtoull(argv[5], NULL, 0) | 1 : (uint64_t)time(NULL) | 1;
	uint8_t *body = malloc(PROTO_MAX_BODY), *scratch = calloc(1, PROTO_CHUNK + 8);
	double until = now_s() + atof(argv[4]);
	int rc = 2;

	if (body && scratch)
		rc = as_server ? serve(argv[1], key, argv[3], until, body, scratch)
			    : fuzz(argv[1], key, argv[3], until, body, scratch);
	free(body);
	free(scratch);
	return rc;
}
