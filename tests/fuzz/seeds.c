/* Writes one valid frame of each message type into DIR: the fuzz corpus's
 * seeds, so the fuzzer starts from frames that get deep into the decoder. */
#include <stdio.h>
#include <string.h>

#include "../../transport/proto.h"

static int put(const char *dir, const struct proto_msg *m, size_t extra)
{
	static uint8_t buf[PROTO_HDR + PROTO_INLINE_MAX + 1024];
	char path[4096];
	int len = proto_encode(m, buf + PROTO_HDR, sizeof(buf) - PROTO_HDR);
	if (len < 0)
		return 1;
	proto_put_hdr(buf, (uint8_t)m->type, (uint32_t)(len + (int)extra), 1);
	memset(buf + PROTO_HDR + len, 'x', extra);
	snprintf(path, sizeof(path), "%s/%s", dir, proto_type_name(m->type));
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, PROTO_HDR + (size_t)len + extra, f) == 0)
		return 1;
	return fclose(f) != 0;
}

int main(int argc, char **argv)
{
	static struct proto_obj objs[2] = {
		{ .from = "0", .to = "1", .key = "a", .oid = 1, .size = 2, .xxh3 = 3, .readers = 1 },
		{ .from = "0", .to = "1", .key = "b", .oid = 2, .size = 2, .xxh3 = 3, .readers = 1 } };
	struct proto_msg m;
	int rc = 0;

	if (argc != 2)
		return fprintf(stderr, "usage: seeds DIR\n"), 2;
	for (int t = PT_HELLO; t <= PT_MAX_TYPE; t++) {
		memset(&m, 0, sizeof(m));
		m.type = (enum proto_type)t;
		strcpy(m.u.hello.name, "a");
		if (t == PT_WELCOME)    /* its name is elsewhere in the union */
			strcpy(m.u.welcome.name, "a");
		if (t == PT_ANNOUNCE || t == PT_GONE || t == PT_LOOKUP || t == PT_REMOVE || t == PT_OBJECT ||
		    t == PT_EXISTS || t == PT_CLAIM) {
			m.u.obj = objs[0];
			if (t == PT_ANNOUNCE || t == PT_CLAIM) {
				m.u.obj.data = (const uint8_t *)"hi";
				m.u.obj.datalen = 2;
				m.u.obj.decided = t == PT_ANNOUNCE;     /* their last byte */
			}
			if (t == PT_REMOVE) {   /* and how far its sender heard */
				m.u.obj.heard_conn = 0x1234;
				m.u.obj.heard = 7;
			}
		}
		if (t == PT_LIST) {
			strcpy(m.u.list.from, "0");
			strcpy(m.u.list.base, "k");
		}
		if (t == PT_CLEANUP)
			strcpy(m.u.cleanup.id, "req-7");
		if (t == PT_LISTING)
			m.u.listing = (typeof(m.u.listing)){ 2, 0, 1, objs, NULL };
		if (t == PT_DATA)
			m.u.data.len = 8;
		if (t == PT_PULL)       /* one piece of one byte */
			m.u.pull = (typeof(m.u.pull)){ 1, 0, 1, 1, 1, 0 };
		if (t == PT_GRANT)
			m.u.grant = (typeof(m.u.grant)){ 1, 2, 0, 1, 100 };
		if (t == PT_GRANTED) {  /* 100 bytes: one hash, one extent at 0x1000 */
			static const uint8_t hash[8] = { 1 }, ext[PROTO_GRANT_EXT] = {
				0, 0x10, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 7 };
			m.u.granted = (typeof(m.u.granted)){ 100, 100, 0, 1, 1, hash, ext };
		}
		rc |= put(argv[1], &m, t == PT_DATA ? 8 : 0);
	}
	return rc;
}
