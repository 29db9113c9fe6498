/* Writes DIR/log: the records of an owed log (fs/owedlog.c) holding one
 * message of each kind it keeps, without the file's 16-byte header, which
 * the owed-log fuzz target puts back: its corpus's seed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../fs/owedlog.h"

static void none(void *arg, const char *peer, const struct proto_msg *m)
{
	(void)arg; (void)peer; (void)m;
}

int main(int argc, char **argv)
{
	static const uint8_t key[32] = "omnifs fuzz cluster key, 32 B.."; /* as owed.c */
	struct proto_msg m[3] = { { .type = PT_CLEANUP }, { .type = PT_CONSUMED },
				  { .type = PT_REMOVE } };
	char err[256], path[4096], out[4096];
	struct owedlog *l;

	if (argc != 2)
		return 2;
	snprintf(m[0].u.cleanup.id, sizeof(m[0].u.cleanup.id), "req-7");
	m[1].u.consumed.oid = 42;
	m[1].u.consumed.rid = 7;
	snprintf(m[2].u.obj.from, sizeof(m[2].u.obj.from), "0");
	snprintf(m[2].u.obj.to, sizeof(m[2].u.obj.to), "1");
	snprintf(m[2].u.obj.key, sizeof(m[2].u.obj.key), "k");
	m[2].u.obj.oid = 43;
	if (owedlog_open(&l, argv[1], "seed", key, sizeof(key), none, NULL, err, sizeof(err)))
		return fprintf(stderr, "%s\n", err), 1;
	for (int i = 0; i < 3; i++)
		if (owedlog_add(l, i == 1 ? "b" : "a", &m[i]))
			return 1;
	owedlog_close(l);
	snprintf(path, sizeof(path), "%s/seed.owed", argv[1]);
	snprintf(out, sizeof(out), "%s/log", argv[1]);
	FILE *f = fopen(path, "rb"), *o = fopen(out, "wb");
	static unsigned char buf[1 << 16];
	size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
	if (!o || n <= 16 || fwrite(buf + 16, 1, n - 16, o) != n - 16)
		return 1;
	fclose(f);
	remove(path);
	return fclose(o) != 0;
}
