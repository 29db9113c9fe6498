/* Unit tests for the peer protocol's frames and the handshake's MACs. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include "../tap.h"
#include "../../transport/auth.h"
#include "../../transport/proto.h"

static uint8_t buf[PROTO_MAX_BODY];

/* Encodes m, decodes it back; the body length, or -errno. */
static void set_pull(struct proto_msg *m, uint64_t oid, uint64_t off, uint64_t len,
		     uint64_t stride, uint32_t count)
{
	m->u.pull.oid = oid;
	m->u.pull.off = off;
	m->u.pull.len = len;
	m->u.pull.stride = stride;
	m->u.pull.count = count;
}

static int roundtrip(const struct proto_msg *m, struct proto_msg *out)
{
	int len = proto_encode(m, buf, sizeof(buf));
	if (len < 0)
		return len;
	int rc = proto_decode((uint8_t)m->type, buf, (size_t)len, out);
	return rc ? rc : len;
}

static void test_header(void)
{
	uint8_t h[PROTO_HDR];
	struct proto_hdr ph;

	proto_put_hdr(h, PT_PULL, 24, 77);
	is(proto_frame_check(h, &ph), 0, "a header round-trips");
	ok(ph.type == PT_PULL && ph.len == 24 && ph.reqid == 77, "with its fields");
	proto_put_hdr(h, PT_DATA, PROTO_MAX_BODY + 1, 1);
	is(proto_frame_check(h, &ph), -EMSGSIZE, "a body over the limit is refused");
	proto_put_hdr(h, PT_PING, 0, 1);
	h[0] ^= 1;
	is(proto_frame_check(h, &ph), -EPROTO, "a bad magic is refused");
	proto_put_hdr(h, PT_PING, 0, 1);
	h[2] = PROTO_VERSION + 1;
	ok(proto_frame_check(h, &ph) == -EPROTONOSUPPORT && ph.version == PROTO_VERSION + 1,
	   "another version is refused, and said");
	proto_put_hdr(h, 0, 0, 1);
	is(proto_frame_check(h, &ph), -EPROTO, "type 0 is refused");
	proto_put_hdr(h, PT_MAX_TYPE + 1, 0, 1);
	is(proto_frame_check(h, &ph), -EPROTO, "an unknown type is refused");
}

static void test_messages(void)
{
	struct proto_msg m = { .type = PT_ANNOUNCE }, r;
	static const uint8_t data[5] = "hello";

	strcpy(m.u.obj.from, "0");
	strcpy(m.u.obj.to, "1");
	strcpy(m.u.obj.key, "req-7 with spaces");
	m.u.obj.oid = 9;
	m.u.obj.size = 5;
	m.u.obj.readers = 2;
	m.u.obj.data = data;
	m.u.obj.datalen = 5;
	ok(roundtrip(&m, &r) > 0, "ANNOUNCE with inline bytes round-trips");
	ok(!strcmp(r.u.obj.key, m.u.obj.key) && r.u.obj.oid == 9 && r.u.obj.readers == 2 &&
	   r.u.obj.datalen == 5 && !memcmp(r.u.obj.data, "hello", 5), "... every field");
	m.type = PT_OBJECT;             /* a lookup's answer carries them too */
	ok(roundtrip(&m, &r) > 0 && r.u.obj.datalen == 5 && !memcmp(r.u.obj.data, "hello", 5),
	   "OBJECT with inline bytes round-trips");
	m.u.obj.datalen = 4;
	is(roundtrip(&m, &r), -EPROTO, "an OBJECT's inline bytes that are not the whole object: refused");
	m.type = PT_ANNOUNCE;
	is(roundtrip(&m, &r), -EPROTO, "inline bytes that are not the whole object: refused");
	m.u.obj.datalen = 5;
	strcpy(m.u.obj.key, "a/b");
	is(roundtrip(&m, &r), -EPROTO, "a key with '/': refused");
	m.u.obj.key[0] = 0;
	is(roundtrip(&m, &r), -EPROTO, "an empty key: refused");
	strcpy(m.u.obj.key, "k");
	m.u.obj.readers = -1;
	is(roundtrip(&m, &r), -EPROTO, "negative readers: refused");
	m.u.obj.readers = 1;

	int len = proto_encode(&m, buf, sizeof(buf));
	ok(len > 0, "encodes");
	is(proto_decode(PT_ANNOUNCE, buf, (size_t)len - 1, &r), -EPROTO, "truncated by one byte: refused");
	is(proto_decode(PT_ANNOUNCE, buf, (size_t)len + 1, &r), -EPROTO, "one trailing byte: refused");
	buf[0] = 200;                   /* the from name's length */
	is(proto_decode(PT_ANNOUNCE, buf, (size_t)len, &r), -EPROTO, "a length past the end: refused");

	struct proto_msg pull = { .type = PT_PULL, .u.pull = { .oid = 3, .len = 1 << 20, .count = 1 } };
	ok(roundtrip(&pull, &r) > 0 && r.u.pull.len == 1 << 20, "PULL round-trips");
	set_pull(&pull, 3, 64, 256, 1024, 4096);
	ok(roundtrip(&pull, &r) > 0 && r.u.pull.stride == 1024 && r.u.pull.count == 4096,
	   "a strided PULL round-trips");
	pull.u.pull.stride = 100;
	is(roundtrip(&pull, &r), -EPROTO, "pieces that overlap (stride < len): refused");
	set_pull(&pull, 3, 0, 1 << 20, 0, 1);
	pull.u.pull.lease = 0x1122334455667788ull;
	ok(roundtrip(&pull, &r) > 0 && r.u.pull.lease == 0x1122334455667788ull,
	   "a PULL under a lease round-trips");
	pull.u.pull.lease = 0;
	struct proto_msg rel = { .type = PT_RELEASE, .u.release.lease = 99 };
	ok(roundtrip(&rel, &r) > 0 && r.u.release.lease == 99, "RELEASE round-trips");
	uint8_t rb[16] = { 0 };
	is(proto_decode(PT_RELEASE, rb, 7, &r), -EPROTO, "a RELEASE one byte short: refused");
	set_pull(&pull, 3, 0, 1, 1, 0);
	is(roundtrip(&pull, &r), -EPROTO, "a PULL of no pieces: refused");
	set_pull(&pull, 3, 0, 1, 1, PROTO_PULL_PIECES + 1);
	is(roundtrip(&pull, &r), -EPROTO, "a PULL of too many pieces: refused");
	set_pull(&pull, 3, 0, UINT64_MAX, 0, 1);
	is(roundtrip(&pull, &r), -EPROTO, "a PULL of 2^64-1 bytes: refused");
	struct proto_msg cm = { .type = PT_CONSUMED, .u.consumed = { 9, 1, 2, 4, 1ull << 60 } };
	ok(roundtrip(&cm, &r) > 0 && r.u.consumed.first == 1 && r.u.consumed.n == 2 &&
	   r.u.consumed.of == 4, "CONSUMED carries the heads a view delivered");
	ok(r.u.consumed.rid == 1ull << 60, "... and the read it was");
	cm.u.consumed.n = 4;
	is(roundtrip(&cm, &r), -EPROTO, "heads past the shard's: refused");
	struct proto_msg ak = { .type = PT_ACKS, .u.acks = { 3, { 7, 1ull << 63, 9 } } };
	ok(roundtrip(&ak, &r) > 0 && r.u.acks.n == 3 && r.u.acks.reqid[1] == 1ull << 63 &&
	   r.u.acks.reqid[2] == 9, "ACKS carries the requests acted on");
	ak.u.acks.n = PROTO_ACKS_MAX + 1;
	ok(proto_encode(&ak, buf, sizeof(buf)) < 0, "more than PROTO_ACKS_MAX: not encoded");
	uint8_t big[4] = { PROTO_ACKS_MAX + 1, 0, 0, 0 };
	is(proto_decode(PT_ACKS, big, 4, &r), -EPROTO, "... nor decoded");

	struct proto_msg st = { .type = PT_STATUS, .u.status.err = ENOENT };
	ok(roundtrip(&st, &r) > 0 && r.u.status.err == ENOENT, "STATUS round-trips");
	st.u.status.err = -5;
	is(roundtrip(&st, &r), -EPROTO, "a negative errno: refused");

	struct proto_msg cu = { .type = PT_CLEANUP };
	strcpy(cu.u.cleanup.id, "chatcmpl-7 \xc3\xa9");
	ok(roundtrip(&cu, &r) > 0 && !strcmp(r.u.cleanup.id, cu.u.cleanup.id),
	   "CLEANUP carries a request id of any key's bytes");
	memset(cu.u.cleanup.id, 'r', PROTO_KEY_MAX);
	ok(roundtrip(&cu, &r) > 0 && strlen(r.u.cleanup.id) == PROTO_KEY_MAX, "a 255-byte id");
	buf[0] = 0; buf[1] = 1;         /* a 256-byte id */
	memset(buf + 2, 'r', 256);
	is(proto_decode(PT_CLEANUP, buf, 258, &r), -EPROTO, "a 256-byte id: refused");
	static const char *bad[] = { "", ".x", "a/b" };
	for (int i = 0; i < 3; i++) {
		strcpy(cu.u.cleanup.id, bad[i]);
		is(roundtrip(&cu, &r), -EPROTO, "an id that is no key (\"%s\"): refused", bad[i]);
	}
	struct proto_msg cd = { .type = PT_CLEANED, .u.cleaned.removed = 1ull << 40 };
	ok(roundtrip(&cd, &r) > 0 && r.u.cleaned.removed == 1ull << 40, "CLEANED round-trips");
	struct proto_msg ex = { .type = PT_EXISTS };
	strcpy(ex.u.obj.from, "0");
	strcpy(ex.u.obj.to, "talker");
	strcpy(ex.u.obj.key, "req-7_0_1");
	ok(roundtrip(&ex, &r) > 0 && !strcmp(r.u.obj.from, "0") && !strcmp(r.u.obj.to, "talker") &&
	   !strcmp(r.u.obj.key, "req-7_0_1"), "EXISTS carries the names");
	is(strcmp(proto_type_name(PT_EXISTS), "EXISTS"), 0, "... and is named");
	struct proto_msg cl = { .type = PT_CLAIM };
	strcpy(cl.u.obj.from, "0");
	strcpy(cl.u.obj.to, "talker");
	strcpy(cl.u.obj.key, "req-7");
	cl.u.obj.oid = 9;
	cl.u.obj.size = cl.u.obj.datalen = 5;
	cl.u.obj.xxh3 = 0x1234;
	cl.u.obj.data = (const uint8_t *)"bytes";
	ok(roundtrip(&cl, &r) > 0 && !strcmp(r.u.obj.key, "req-7") && r.u.obj.oid == 9 &&
	   r.u.obj.xxh3 == 0x1234 && r.u.obj.datalen == 5 && !memcmp(r.u.obj.data, "bytes", 5),
	   "CLAIM carries an announce: names, ids and the small object's bytes");
	is(strcmp(proto_type_name(PT_CLAIM), "CLAIM"), 0, "... and is named");
	ok(r.u.obj.excl == 0, "... a writer's close's, which wins over one not closed");
	cl.u.obj.excl = 1;
	len = roundtrip(&cl, &r);
	ok(len > 0 && r.u.obj.excl == 1, "... or an O_EXCL put's, in its last byte");
	buf[len - 1] = 2;
	is(proto_decode(PT_CLAIM, buf, (size_t)len, &r), -EPROTO, "... which is 0 or 1: else refused");
	is(proto_decode(PT_CLAIM, buf, (size_t)len - 1, &r), -EPROTO, "... and never left out");
	cl.type = PT_ANNOUNCE;
	cl.u.obj.excl = 0;
	cl.u.obj.decided = 1;
	len = roundtrip(&cl, &r);
	ok(len > 0 && r.u.obj.decided == 1 && !r.u.obj.excl && r.u.obj.datalen == 5,
	   "an ANNOUNCE says whether it was decided where claims meet, in its last byte");
	buf[len - 1] = 2;
	is(proto_decode(PT_ANNOUNCE, buf, (size_t)len, &r), -EPROTO, "... which is 0 or 1");
	cl.type = PT_OBJECT;
	len = roundtrip(&cl, &r);
	ok(len > 0 && !r.u.obj.decided, "an OBJECT (an answer) has no such byte");
	struct proto_msg rm = { .type = PT_REMOVE };
	strcpy(rm.u.obj.from, "0");
	strcpy(rm.u.obj.to, "1");
	strcpy(rm.u.obj.key, "req-7");
	rm.u.obj.oid = 9;
	int bare = proto_encode(&rm, buf, sizeof(buf));
	ok(roundtrip(&rm, &r) > 0 && r.u.obj.oid == 9 && !r.u.obj.heard_conn,
	   "a REMOVE that says nothing heard round-trips (as owed logs of release 11 hold it)");
	rm.u.obj.heard_conn = 0xfeedull << 40;
	rm.u.obj.heard = 12345;
	len = roundtrip(&rm, &r);
	ok(len == bare + 16 && r.u.obj.heard_conn == 0xfeedull << 40 && r.u.obj.heard == 12345,
	   "a REMOVE says how far its sender heard the receiver, in 16 bytes more");
	len = proto_encode(&rm, buf, sizeof(buf));
	is(proto_decode(PT_REMOVE, buf, (size_t)len - 8, &r), -EPROTO, "... not in 8: refused");
	memset(buf + bare, 0, 8);
	is(proto_decode(PT_REMOVE, buf, (size_t)len, &r), -EPROTO, "... nor of connection 0: refused");

	struct proto_msg d = { .type = PT_DATA, .u.data = { 0, 42, 100 } };
	len = proto_encode(&d, buf, sizeof(buf));
	is(len, PROTO_DATA_HDR, "a DATA header is 20 bytes");
	is(proto_decode(PT_DATA, buf, PROTO_DATA_HDR + 100, &r), 0, "DATA with its 100 bytes after");
	is(proto_decode(PT_DATA, buf, PROTO_DATA_HDR + 99, &r), -EPROTO, "DATA whose length disagrees: refused");

	static struct proto_obj objs[3];
	struct proto_msg l = { .type = PT_LISTING, .u.listing = { 3, 1, 1, objs, NULL } };
	for (int i = 0; i < 3; i++) {
		strcpy(objs[i].from, "s");
		strcpy(objs[i].to, "t");
		snprintf(objs[i].key, sizeof(objs[i].key), "k%d", i);
	}
	ok(roundtrip(&l, &r) > 0 && r.u.listing.n == 3 && r.u.listing.more == 1 &&
	   !strcmp(r.u.listing.obj[2].key, "k2"), "LISTING round-trips");
	proto_msg_free(&r);
	len = proto_encode(&l, buf, sizeof(buf));
	buf[0] = 0xff; buf[1] = 0xff;   /* claims 65535 entries */
	is(proto_decode(PT_LISTING, buf, (size_t)len, &r), -EPROTO, "a LISTING over its entry limit: refused");

	struct proto_msg ls = { .type = PT_LIST };
	strcpy(ls.u.list.from, "p");
	strcpy(ls.u.list.base, "req-7");
	ok(roundtrip(&ls, &r) > 0 && !strcmp(r.u.list.from, "p") && !strcmp(r.u.list.to, "") &&
	   !strcmp(r.u.list.base, "req-7"), "LIST carries its scope and a view's base");
	memset(ls.u.list.base, 'k', PROTO_KEY_MAX);
	ok(roundtrip(&ls, &r) > 0 && strlen(r.u.list.base) == PROTO_KEY_MAX,
	   "... up to a key's length");
	len = proto_encode(&ls, buf, sizeof(buf));
	buf[len - PROTO_KEY_MAX + 3] = '/';
	is(proto_decode(PT_LIST, buf, (size_t)len, &r), -EPROTO, "a LIST whose base holds '/': refused");

	struct proto_msg h = { .type = PT_HELLO };
	h.u.hello.version = PROTO_VERSION;
	strcpy(h.u.hello.name, "node-a");
	ok(roundtrip(&h, &r) > 0 && !strcmp(r.u.hello.name, "node-a"), "HELLO round-trips");
	is(proto_decode(PT_PING, buf, 1, &r), -EPROTO, "a PING with a body: refused");
	struct proto_msg rd = { .type = PT_REDIAL };
	is(roundtrip(&rd, &r), 0, "REDIAL round-trips, with no body");
	is(proto_decode(PT_REDIAL, buf, 1, &r), -EPROTO, "a REDIAL with a body: refused");
	is(strcmp(proto_type_name(PT_REDIAL), "REDIAL"), 0, "... and is named");
}

/* A GRANTED of a 3 MiB + 5 object in two extents, [0, 2 MiB) of it
 * ready, with the hashes of chunks 1..3; the body's length. */
static int granted(uint64_t size, uint64_t first, uint32_t nhash, uint64_t len0)
{
	static const uint64_t hash[4] = { 11, 22, 33, 44 };
	struct proto_extent ext[2] = { { 0x7f0000001000ull, len0, 0x1234 },
				       { 0x7f0000900000ull, size - len0, 0x5678 } };

	return proto_encode_granted(size, 2u << 20, first, hash, nhash, ext, 2, buf, sizeof(buf));
}

static void test_grants(void)
{
	const uint64_t size = (3u << 20) + 5;
	struct proto_msg g = { .type = PT_GRANT, .u.grant = { 7, 99, 1, 3, 8u << 20 } }, r;

	ok(roundtrip(&g, &r) > 0 && r.u.grant.oid == 7 && r.u.grant.lease == 99 &&
	   r.u.grant.first == 1 && r.u.grant.n == 3 && r.u.grant.upto == 8u << 20,
	   "GRANT round-trips");
	g.u.grant.lease = 0;
	is(roundtrip(&g, &r), -EPROTO, "a GRANT under no lease: refused");
	g.u.grant.lease = 99;
	g.u.grant.n = PROTO_GRANT_HASHES + 1;
	is(roundtrip(&g, &r), -EPROTO, "a GRANT of too many hashes: refused");

	int len = granted(size, 1, 3, 1u << 20);
	ok(len > 0 && !proto_decode(PT_GRANTED, buf, (size_t)len, &r), "GRANTED decodes");
	struct proto_extent e = proto_granted_ext(&r, 1);
	ok(r.u.granted.size == size && r.u.granted.ready == 2u << 20 && r.u.granted.first == 1 &&
	   r.u.granted.nhash == 3 &&
	   r.u.granted.next == 2 && proto_granted_hash(&r, 2) == 33 &&
	   e.addr == 0x7f0000900000ull && e.len == size - (1u << 20) && e.rkey == 0x5678,
	   "... every field, hashes and extents");
	struct proto_msg again = r;
	ok(roundtrip(&again, &r) == len, "... and encodes back to the same length");
	len = granted(size, 2, 3, 1u << 20);
	is(proto_decode(PT_GRANTED, buf, (size_t)len, &r), -EPROTO,
	   "hashes of chunks past the object's last: refused");
	len = granted(size, 0, 0, 0);
	is(proto_decode(PT_GRANTED, buf, (size_t)len, &r), -EPROTO, "an empty extent: refused");
	len = granted(size, 0, 0, 1u << 20);
	buf[len - 12] ^= 1;             /* the last extent's length, one byte more or less */
	is(proto_decode(PT_GRANTED, buf, (size_t)len, &r), -EPROTO,
	   "extents that do not add up to the size: refused");
	len = granted(size, 0, 0, 1u << 20);
	is(proto_decode(PT_GRANTED, buf, (size_t)len - 1, &r), -EPROTO, "a GRANTED cut short: refused");
	struct proto_extent wrap = { UINT64_MAX - 10, 100, 1 };
	len = proto_encode_granted(100, 100, 0, NULL, 0, &wrap, 1, buf, sizeof(buf));
	is(proto_decode(PT_GRANTED, buf, (size_t)len, &r), -EPROTO,
	   "an extent that wraps around the address space: refused");
	struct proto_extent one = { 0x1000, 100, 1 };
	len = proto_encode_granted(100, 100, 0, NULL, 0, &one, 1, buf, sizeof(buf));
	ok(!proto_decode(PT_GRANTED, buf, (size_t)len, &r) && r.u.granted.ready == 100,
	   "a GRANTED all of whose object is ready decodes");
	len = proto_encode_granted(100, 101, 0, NULL, 0, &one, 1, buf, sizeof(buf));
	is(proto_decode(PT_GRANTED, buf, (size_t)len, &r), -EPROTO,
	   "more ready than the object holds: refused");

	struct proto_msg w = { .type = PT_WELCOME };
	strcpy(w.u.welcome.name, "b");
	w.u.welcome.rdma_port = 4791;
	memcpy(w.u.welcome.token, "0123456789abcdef", PROTO_TOKEN);
	w.u.welcome.digest = 0x0123456789abcdefull;
	ok(roundtrip(&w, &r) > 0 && r.u.welcome.rdma_port == 4791 &&
	   !memcmp(r.u.welcome.token, "0123456789abcdef", PROTO_TOKEN) &&
	   r.u.welcome.digest == 0x0123456789abcdefull,
	   "WELCOME carries the RDMA port, the connection's token and the config's digest");
}

static void test_auth(void)
{
	uint8_t key[AUTH_KEY] = { 1 }, other[AUTH_KEY] = { 2 }, cn[PROTO_NONCE], sn[PROTO_NONCE];
	uint8_t mac[PROTO_MAC];

	auth_nonce(cn);
	auth_nonce(sn);
	ok(memcmp(cn, sn, PROTO_NONCE), "nonces differ");
	auth_mac(key, AUTH_CLIENT, cn, sn, "a", mac);
	ok(auth_check(key, AUTH_CLIENT, cn, sn, "a", mac), "the right key checks");
	ok(!auth_check(other, AUTH_CLIENT, cn, sn, "a", mac), "another key does not");
	ok(!auth_check(key, AUTH_SERVER, cn, sn, "a", mac), "a client's MAC is no server's");
	ok(!auth_check(key, AUTH_CLIENT, cn, sn, "b", mac), "nor another name's");
	ok(!auth_check(key, AUTH_CLIENT, sn, cn, "a", mac), "nor for swapped nonces");

	char err[256];
	is(auth_load("/nonexistent/secret", key, err, sizeof(err)), -ENOENT, "a missing secret file");
}

int main(void)
{
	test_header();
	test_messages();
	test_grants();
	test_auth();
	return done_testing();
}
