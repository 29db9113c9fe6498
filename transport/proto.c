/* proto.c - encoding and checked decoding of peer frames.
 *
 * Bodies are sequences of little-endian integers and length-prefixed
 * strings.  The reader keeps a sticky error: a field past the end, a name
 * that is empty, too long, or holds '/' or NUL makes the whole message
 * -EPROTO, and trailing bytes do too, so a message means exactly one thing.
 */
#include "proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct wr { uint8_t *p; size_t len, cap; int err; };
struct rd { const uint8_t *p; size_t len, off; int err; };

static void put(struct wr *w, const void *v, size_t n)
{
	if (w->err || n > w->cap - w->len) {
		w->err = 1;
		return;
	}
	if (n)                  /* an empty field may come with no pointer */
		memcpy(w->p + w->len, v, n);
	w->len += n;
}

static void put_le(struct wr *w, uint64_t v, int n)
{
	uint8_t b[8];
	for (int i = 0; i < n; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, (size_t)n);
}

/* A string with a 1-byte (stage) or 2-byte (key) length. */
static void put_str(struct wr *w, const char *s, int lenbytes)
{
	size_t n = strlen(s);
	put_le(w, n, lenbytes);
	put(w, s, n);
}

static const uint8_t *get(struct rd *r, size_t n)
{
	if (r->err || n > r->len - r->off) {
		r->err = 1;
		return NULL;
	}
	r->off += n;
	return r->p + r->off - n;
}

static void get_bytes(struct rd *r, uint8_t *out, size_t n)
{
	const uint8_t *b = get(r, n);
	if (b)
		memcpy(out, b, n);
}

static uint64_t get_le(struct rd *r, int n)
{
	const uint8_t *b = get(r, (size_t)n);
	uint64_t v = 0;
	for (int i = 0; b && i < n; i++)
		v |= (uint64_t)b[i] << (8 * i);
	return v;
}

/* A byte that says yes (1) or no (0), and nothing else. */
static uint8_t get_flag(struct rd *r)
{
	uint64_t v = get_le(r, 1);

	if (v > 1)
		r->err = 1;
	return (uint8_t)v;
}

/* A name of 1..max bytes without '/' or NUL; empty allowed if may_empty. */
static void get_str(struct rd *r, char *out, size_t max, int lenbytes, int may_empty)
{
	size_t n = (size_t)get_le(r, lenbytes);
	const uint8_t *b;

	out[0] = 0;
	if (r->err || n > max || (!n && !may_empty) || !(b = get(r, n))) {
		r->err = 1;
		return;
	}
	if (memchr(b, 0, n) || memchr(b, '/', n)) {
		r->err = 1;
		return;
	}
	memcpy(out, b, n);
	out[n] = 0;
}

void proto_put_hdr(uint8_t out[PROTO_HDR], uint8_t type, uint32_t len, uint64_t reqid)
{
	struct wr w = { out, 0, PROTO_HDR, 0 };

	put_le(&w, PROTO_MAGIC, 2);
	put_le(&w, PROTO_VERSION, 1);
	put_le(&w, type, 1);
	put_le(&w, len, 4);
	put_le(&w, reqid, 8);
}

int proto_frame_check(const uint8_t in[PROTO_HDR], struct proto_hdr *h)
{
	struct rd r = { in, PROTO_HDR, 0, 0 };

	if (get_le(&r, 2) != PROTO_MAGIC)
		return -EPROTO;
	h->version = (uint8_t)get_le(&r, 1);
	h->type = (uint8_t)get_le(&r, 1);
	h->len = (uint32_t)get_le(&r, 4);
	h->reqid = get_le(&r, 8);
	if (h->version != PROTO_VERSION)
		return -EPROTONOSUPPORT;        /* ours, but another release's */
	if (h->type < PT_HELLO || h->type > PT_MAX_TYPE)
		return -EPROTO;
	return h->len > PROTO_MAX_BODY ? -EMSGSIZE : 0;
}

/* with: OBJ_DATA (inline bytes), OBJ_KVHDR (a KV header). */
enum { OBJ_DATA = 1, OBJ_KVHDR = 2 };

static void put_obj(struct wr *w, const struct proto_obj *o, int with)
{
	put_str(w, o->from, 1);
	put_str(w, o->to, 1);
	put_str(w, o->key, 2);
	put_le(w, o->oid, 8);
	put_le(w, o->size, 8);
	put_le(w, o->xxh3, 8);
	put_le(w, o->reads, 8);
	put_le(w, o->published_ns, 8);
	put_le(w, (uint64_t)o->readers, 8);
	put_le(w, o->uid, 4);
	put_le(w, o->gid, 4);
	if (with & OBJ_DATA) {
		put_le(w, o->datalen, 4);
		put(w, o->data, o->datalen);
	}
	if (with & OBJ_KVHDR) {
		put_le(w, o->kvhdrlen, 4);
		put(w, o->kvhdr, o->kvhdrlen);
	}
}

static void get_obj(struct rd *r, struct proto_obj *o, int with)
{
	get_str(r, o->from, PROTO_NAME_MAX, 1, 0);
	get_str(r, o->to, PROTO_NAME_MAX, 1, 0);
	get_str(r, o->key, PROTO_KEY_MAX, 2, 0);
	o->oid = get_le(r, 8);
	o->size = get_le(r, 8);
	o->xxh3 = get_le(r, 8);
	o->reads = get_le(r, 8);
	o->published_ns = get_le(r, 8);
	o->readers = (int64_t)get_le(r, 8);
	o->uid = (uint32_t)get_le(r, 4);
	o->gid = (uint32_t)get_le(r, 4);
	o->data = o->kvhdr = NULL;
	o->datalen = o->kvhdrlen = 0;
	if (o->readers < 0 || o->size > (UINT64_MAX >> 2))
		r->err = 1;
	if (with & OBJ_DATA) {
		o->datalen = (uint32_t)get_le(r, 4);
		/* Inline bytes are the whole object, and only a small one. */
		if (o->datalen && (o->datalen != o->size || o->datalen > PROTO_INLINE_MAX))
			r->err = 1;
		else if (o->datalen)
			o->data = get(r, o->datalen);
	}
	if (with & OBJ_KVHDR) {
		o->kvhdrlen = (uint32_t)get_le(r, 4);
		if (o->kvhdrlen > PROTO_KVHDR_MAX || o->kvhdrlen > o->size)
			r->err = 1;
		else if (o->kvhdrlen)
			o->kvhdr = get(r, o->kvhdrlen);
	}
}

static void put_listing(struct wr *w, const struct proto_msg *m)
{
	put_le(w, m->u.listing.n, 4);
	put_le(w, m->u.listing.more, 1);
	put_le(w, m->u.listing.objects, 1);
	for (uint32_t i = 0; i < m->u.listing.n; i++) {
		if (m->u.listing.objects)
			put_obj(w, &m->u.listing.obj[i], 0);
		else
			put_str(w, m->u.listing.name[i], 1);
	}
}

/* HELLO, CHALLENGE, AUTH and WELCOME: a connection's first frames. */
static void put_handshake(struct wr *w, const struct proto_msg *m)
{
	switch (m->type) {
	case PT_HELLO:
		put_le(w, m->u.hello.version, 2);
		put_le(w, m->u.hello.caps, 4);
		put(w, m->u.hello.nonce, PROTO_NONCE);
		put_str(w, m->u.hello.name, 1);
		break;
	case PT_CHALLENGE:
		put_le(w, m->u.challenge.version, 2);
		put(w, m->u.challenge.nonce, PROTO_NONCE);
		break;
	case PT_AUTH:
		put(w, m->u.auth.mac, PROTO_MAC);
		break;
	case PT_WELCOME:
		put_le(w, m->u.welcome.caps, 4);
		put(w, m->u.welcome.mac, PROTO_MAC);
		put_str(w, m->u.welcome.name, 1);
		put_le(w, m->u.welcome.rdma_port, 2);
		put(w, m->u.welcome.token, PROTO_TOKEN);
		put_le(w, m->u.welcome.digest, 8);
		break;
	default:
		break;
	}
}

int proto_encode(const struct proto_msg *m, uint8_t *buf, size_t cap)
{
	struct wr w = { buf, 0, cap, 0 };

	switch (m->type) {
	case PT_HELLO: case PT_CHALLENGE: case PT_AUTH: case PT_WELCOME:
		put_handshake(&w, m);
		break;
	case PT_PING: case PT_PONG: case PT_REDIAL:
		break;
	case PT_OBJECT:
		put_obj(&w, &m->u.obj, OBJ_DATA | OBJ_KVHDR);
		break;
	case PT_ANNOUNCE: case PT_CLAIM:
		put_obj(&w, &m->u.obj, OBJ_DATA | OBJ_KVHDR);
		put_le(&w, m->type == PT_CLAIM ? m->u.obj.excl : m->u.obj.decided, 1);
		break;
	case PT_GONE: case PT_LOOKUP: case PT_EXISTS:
		put_obj(&w, &m->u.obj, 0);
		break;
	case PT_REMOVE:
		put_obj(&w, &m->u.obj, 0);
		if (m->u.obj.heard_conn) {
			put_le(&w, m->u.obj.heard_conn, 8);
			put_le(&w, m->u.obj.heard, 8);
		}
		break;
	case PT_CONSUMED:
		put_le(&w, m->u.consumed.oid, 8);
		put_le(&w, m->u.consumed.first, 4);
		put_le(&w, m->u.consumed.n, 4);
		put_le(&w, m->u.consumed.of, 4);
		put_le(&w, m->u.consumed.rid, 8);
		break;
	case PT_LIST:
		put_str(&w, m->u.list.from, 1);
		put_str(&w, m->u.list.to, 1);
		put_str(&w, m->u.list.base, 1);
		break;
	case PT_PULL:
		put_le(&w, m->u.pull.oid, 8);
		put_le(&w, m->u.pull.off, 8);
		put_le(&w, m->u.pull.len, 8);
		put_le(&w, m->u.pull.stride, 8);
		put_le(&w, m->u.pull.count, 4);
		put_le(&w, m->u.pull.lease, 8);
		break;
	case PT_RELEASE:
		put_le(&w, m->u.release.lease, 8);
		break;
	case PT_CLEANUP:
		put_str(&w, m->u.cleanup.id, 2);
		break;
	case PT_CLEANED:
		put_le(&w, m->u.cleaned.removed, 8);
		break;
	case PT_ACKS:
		if (m->u.acks.n > PROTO_ACKS_MAX)
			w.err = 1;
		put_le(&w, m->u.acks.n, 4);
		for (uint32_t i = 0; !w.err && i < m->u.acks.n; i++)
			put_le(&w, m->u.acks.reqid[i], 8);
		break;
	case PT_GRANT:
		put_le(&w, m->u.grant.oid, 8);
		put_le(&w, m->u.grant.lease, 8);
		put_le(&w, m->u.grant.first, 8);
		put_le(&w, m->u.grant.n, 4);
		put_le(&w, m->u.grant.upto, 8);
		break;
	case PT_GRANTED:
		put_le(&w, m->u.granted.size, 8);
		put_le(&w, m->u.granted.ready, 8);
		put_le(&w, m->u.granted.first, 8);
		put_le(&w, m->u.granted.nhash, 4);
		put(&w, m->u.granted.hash, (size_t)m->u.granted.nhash * 8);
		put_le(&w, m->u.granted.next, 4);
		put(&w, m->u.granted.ext, (size_t)m->u.granted.next * PROTO_GRANT_EXT);
		break;
	case PT_STATUS:
		put_le(&w, (uint32_t)m->u.status.err, 4);
		break;
	case PT_LISTING:
		put_listing(&w, m);
		break;
	case PT_DATA:
		put_le(&w, m->u.data.off, 8);
		put_le(&w, m->u.data.xxh3, 8);
		put_le(&w, m->u.data.len, 4);
		break;
	default:
		return -EINVAL;
	}
	return w.err ? -EMSGSIZE : (int)w.len;
}

static int get_listing(struct rd *r, struct proto_msg *m)
{
	uint32_t n = (uint32_t)get_le(r, 4);
	m->u.listing.more = (uint8_t)get_le(r, 1);
	m->u.listing.objects = (uint8_t)get_le(r, 1);
	m->u.listing.obj = NULL;
	m->u.listing.name = NULL;
	m->u.listing.n = 0;
	if (r->err || n > PROTO_LIST_MAX || m->u.listing.more > 1 || m->u.listing.objects > 1)
		return -EPROTO;
	if (!n)
		return 0;
	if (m->u.listing.objects)
		m->u.listing.obj = calloc(n, sizeof(*m->u.listing.obj));
	else
		m->u.listing.name = calloc(n, sizeof(*m->u.listing.name));
	if (!m->u.listing.obj && !m->u.listing.name)
		return -ENOMEM;
	m->u.listing.n = n;
	for (uint32_t i = 0; i < n && !r->err; i++) {
		if (m->u.listing.objects)
			get_obj(r, &m->u.listing.obj[i], 0);
		else
			get_str(r, m->u.listing.name[i], PROTO_NAME_MAX, 1, 0);
	}
	return 0;
}

static uint64_t le_at(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

uint64_t proto_granted_hash(const struct proto_msg *m, uint32_t i)
{
	return le_at(m->u.granted.hash + (size_t)i * 8, 8);
}

struct proto_extent proto_granted_ext(const struct proto_msg *m, uint32_t i)
{
	const uint8_t *e = m->u.granted.ext + (size_t)i * PROTO_GRANT_EXT;
	return (struct proto_extent){ le_at(e, 8), le_at(e + 8, 8), (uint32_t)le_at(e + 16, 4) };
}

/* Ready is within the object, the hashes are of chunks inside it, and
 * the extents cover it exactly, each of them non-empty and not wrapping around. */
static void get_granted(struct rd *r, struct proto_msg *m)
{
	uint64_t size = m->u.granted.size = get_le(r, 8), sum = 0;
	uint64_t chunks = size / PROTO_CHUNK + (size % PROTO_CHUNK != 0);

	m->u.granted.ready = get_le(r, 8);
	m->u.granted.first = get_le(r, 8);
	m->u.granted.nhash = (uint32_t)get_le(r, 4);
	if (r->err || size > (UINT64_MAX >> 2) || m->u.granted.ready > size || m->u.granted.nhash > PROTO_GRANT_HASHES ||
	    m->u.granted.first > chunks || m->u.granted.nhash > chunks - m->u.granted.first) {
		r->err = 1;
		return;
	}
	m->u.granted.hash = get(r, (size_t)m->u.granted.nhash * 8);
	m->u.granted.next = (uint32_t)get_le(r, 4);
	if (r->err || m->u.granted.next > PROTO_GRANT_EXTENTS || !m->u.granted.next != !size) {
		r->err = 1;
		return;
	}
	m->u.granted.ext = get(r, (size_t)m->u.granted.next * PROTO_GRANT_EXT);
	for (uint32_t i = 0; !r->err && i < m->u.granted.next; i++) {
		struct proto_extent e = proto_granted_ext(m, i);
		if (!e.len || e.len > size - sum || e.addr > UINT64_MAX - e.len)
			r->err = 1;
		sum += e.len;
	}
	if (sum != size)
		r->err = 1;
}

int proto_encode_granted(uint64_t size, uint64_t ready, uint64_t first, const uint64_t *hash,
			 uint32_t nhash, const struct proto_extent *ext, uint32_t next,
			 uint8_t *buf, size_t cap)
{
	struct wr w = { buf, 0, cap, 0 };

	put_le(&w, size, 8);
	put_le(&w, ready, 8);
	put_le(&w, first, 8);
	put_le(&w, nhash, 4);
	for (uint32_t i = 0; i < nhash; i++)
		put_le(&w, hash[i], 8);
	put_le(&w, next, 4);
	for (uint32_t i = 0; i < next; i++) {
		put_le(&w, ext[i].addr, 8);
		put_le(&w, ext[i].len, 8);
		put_le(&w, ext[i].rkey, 4);
	}
	return w.err ? -EMSGSIZE : (int)w.len;
}

/* HELLO, CHALLENGE, AUTH and WELCOME: a connection's first frames. */
static void get_handshake(struct rd *r, struct proto_msg *m)
{
	switch (m->type) {
	case PT_HELLO:
		m->u.hello.version = (uint16_t)get_le(r, 2);
		m->u.hello.caps = (uint32_t)get_le(r, 4);
		get_bytes(r, m->u.hello.nonce, PROTO_NONCE);
		get_str(r, m->u.hello.name, PROTO_NAME_MAX, 1, 0);
		break;
	case PT_CHALLENGE:
		m->u.challenge.version = (uint16_t)get_le(r, 2);
		get_bytes(r, m->u.challenge.nonce, PROTO_NONCE);
		break;
	case PT_AUTH:
		get_bytes(r, m->u.auth.mac, PROTO_MAC);
		break;
	case PT_WELCOME:
		m->u.welcome.caps = (uint32_t)get_le(r, 4);
		get_bytes(r, m->u.welcome.mac, PROTO_MAC);
		get_str(r, m->u.welcome.name, PROTO_NAME_MAX, 1, 0);
		m->u.welcome.rdma_port = (uint16_t)get_le(r, 2);
		get_bytes(r, m->u.welcome.token, PROTO_TOKEN);
		m->u.welcome.digest = get_le(r, 8);
		break;
	default:
		break;
	}
}

/* A read that delivered oid whole (of 0), or its pieces [first, first+n)
 * of of (heads of a KV payload). */
static void get_consumed(struct rd *r, struct proto_msg *m)
{
	m->u.consumed.oid = get_le(r, 8);
	m->u.consumed.first = (uint32_t)get_le(r, 4);
	m->u.consumed.n = (uint32_t)get_le(r, 4);
	m->u.consumed.of = (uint32_t)get_le(r, 4);
	m->u.consumed.rid = get_le(r, 8);
	if (m->u.consumed.of && (m->u.consumed.first >= m->u.consumed.of ||
				 m->u.consumed.n > m->u.consumed.of - m->u.consumed.first))
		r->err = 1;
}

static void get_pull(struct rd *r, struct proto_msg *m)
{
	m->u.pull.oid = get_le(r, 8);
	m->u.pull.off = get_le(r, 8);
	m->u.pull.len = get_le(r, 8);
	m->u.pull.stride = get_le(r, 8);
	m->u.pull.count = (uint32_t)get_le(r, 4);
	m->u.pull.lease = get_le(r, 8);
	/* count pieces of len at off + k*stride: bounded, apart, in order. */
	if (m->u.pull.off > (UINT64_MAX >> 2) || m->u.pull.len > (UINT64_MAX >> 2) ||
	    !m->u.pull.count || m->u.pull.count > PROTO_PULL_PIECES ||
	    (m->u.pull.count > 1 && (m->u.pull.stride < m->u.pull.len ||
				     m->u.pull.stride > (UINT64_MAX >> 26))))
		r->err = 1;
}

static void get_grant(struct rd *r, struct proto_msg *m)
{
	m->u.grant.oid = get_le(r, 8);
	m->u.grant.lease = get_le(r, 8);
	m->u.grant.first = get_le(r, 8);
	m->u.grant.n = (uint32_t)get_le(r, 4);
	m->u.grant.upto = get_le(r, 8);
	if (!m->u.grant.lease || m->u.grant.n > PROTO_GRANT_HASHES ||
	    m->u.grant.first > (UINT64_MAX >> 24))
		r->err = 1;
}

int proto_decode(uint8_t type, const uint8_t *body, size_t len, struct proto_msg *m)
{
	struct rd r = { body, len, 0, 0 };
	int rc = 0;

	memset(m, 0, sizeof(*m));
	m->type = (enum proto_type)type;
	switch (type) {
	case PT_HELLO: case PT_CHALLENGE: case PT_AUTH: case PT_WELCOME:
		get_handshake(&r, m);
		break;
	case PT_PING: case PT_PONG: case PT_REDIAL:
		break;
	case PT_OBJECT:
		get_obj(&r, &m->u.obj, OBJ_DATA | OBJ_KVHDR);
		break;
	case PT_ANNOUNCE: case PT_CLAIM:
		get_obj(&r, &m->u.obj, OBJ_DATA | OBJ_KVHDR);
		if (type == PT_CLAIM)
			m->u.obj.excl = get_flag(&r);
		else
			m->u.obj.decided = get_flag(&r);
		break;
	case PT_GONE: case PT_LOOKUP: case PT_EXISTS:
		get_obj(&r, &m->u.obj, 0);
		break;
	case PT_REMOVE:         /* without heard: as owed logs of release 11 hold it */
		get_obj(&r, &m->u.obj, 0);
		if (!r.err && r.off < len) {
			m->u.obj.heard_conn = get_le(&r, 8);
			m->u.obj.heard = get_le(&r, 8);
			if (!m->u.obj.heard_conn)
				r.err = 1;
		}
		break;
	case PT_CONSUMED:
		get_consumed(&r, m);
		break;
	case PT_LIST:
		get_str(&r, m->u.list.from, PROTO_NAME_MAX, 1, 1);
		get_str(&r, m->u.list.to, PROTO_NAME_MAX, 1, 1);
		get_str(&r, m->u.list.base, PROTO_KEY_MAX, 1, 1);
		break;
	case PT_PULL:
		get_pull(&r, m);
		break;
	case PT_RELEASE:
		m->u.release.lease = get_le(&r, 8);
		break;
	case PT_CLEANUP:
		get_str(&r, m->u.cleanup.id, PROTO_KEY_MAX, 2, 0);
		if (!r.err && m->u.cleanup.id[0] == '.')
			r.err = 1;
		break;
	case PT_CLEANED:
		m->u.cleaned.removed = get_le(&r, 8);
		break;
	case PT_ACKS:
		m->u.acks.n = (uint32_t)get_le(&r, 4);
		if (m->u.acks.n > PROTO_ACKS_MAX)
			r.err = 1;
		for (uint32_t i = 0; !r.err && i < m->u.acks.n; i++)
			m->u.acks.reqid[i] = get_le(&r, 8);
		break;
	case PT_GRANT:
		get_grant(&r, m);
		break;
	case PT_GRANTED:
		get_granted(&r, m);
		break;
	case PT_STATUS:
		m->u.status.err = (int32_t)get_le(&r, 4);
		if (m->u.status.err < 0 || m->u.status.err > 4095)
			r.err = 1;
		break;
	case PT_LISTING:
		rc = get_listing(&r, m);
		break;
	case PT_DATA:
		m->u.data.off = get_le(&r, 8);
		m->u.data.xxh3 = get_le(&r, 8);
		m->u.data.len = (uint32_t)get_le(&r, 4);
		/* The bytes follow the header and are exactly len of them. */
		if (!r.err && (m->u.data.len > PROTO_CHUNK || len != PROTO_DATA_HDR + m->u.data.len))
			r.err = 1;
		r.off = len;
		break;
	default:
		return -EPROTO;
	}
	if (!rc && (r.err || r.off != len))
		rc = -EPROTO;
	if (rc)
		proto_msg_free(m);
	return rc;
}

void proto_msg_free(struct proto_msg *m)
{
	if (m->type == PT_LISTING) {
		free(m->u.listing.obj);
		free(m->u.listing.name);
		m->u.listing.obj = NULL;
		m->u.listing.name = NULL;
		m->u.listing.n = 0;
	}
}

const char *proto_type_name(unsigned type)
{
	static const char *const names[] = {
		"?", "HELLO", "CHALLENGE", "AUTH", "WELCOME", "PING", "PONG",
		"ANNOUNCE", "GONE", "CONSUMED", "LOOKUP", "LIST", "REMOVE", "PULL",
		"STATUS", "OBJECT", "LISTING", "DATA", "RELEASE", "GRANT", "GRANTED",
		"CLEANUP", "CLEANED", "EXISTS", "CLAIM", "ACKS", "REDIAL",
	};
	_Static_assert(sizeof(names) / sizeof(*names) == PT_MAX_TYPE + 1, "a name for each type");
	return type <= PT_MAX_TYPE ? names[type] : "?";
}
