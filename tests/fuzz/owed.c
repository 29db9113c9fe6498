/* A libFuzzer target for the owed log's reader (fs/owedlog.c): the bytes of
 * a state_dir/<node>.owed file that a crash, a full disk or a stray write
 * left.  Whatever the file holds, owedlog_open() answers 0, never reads
 * past it and leaks nothing (ASan, UBSan), and what it hands on survives
 * a rewrite: the same messages, in the same order, read back.
 *
 * The records' XXH3 would stop a fuzzer at the first one, so the target
 * first puts right each record's hash (where its length fits the file)
 * before writing the file: the records' insides are what gets fuzzed.
 * A first byte of 0 leaves the file as it came, hashes and all. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../../fs/owedlog.h"

static const uint8_t key[32] = "omnifs fuzz cluster key, 32 B.."; /* any */

struct seen { struct proto_msg m[64]; char peer[64][256]; int n; };

static void keep(void *arg, const char *peer, const struct proto_msg *m)
{
	struct seen *s = arg;

	if (s->n == 64)
		return;
	s->m[s->n] = *m;        /* these types own no memory (proto_msg_free) */
	snprintf(s->peer[s->n], sizeof(s->peer[0]), "%s", peer);
	s->n++;
}

/* The encoded bodies of what was seen, to compare after a rewrite. */
static size_t encode_all(const struct seen *s, uint8_t *buf, size_t cap)
{
	size_t n = 0;

	for (int i = 0; i < s->n; i++) {
		int len = proto_encode(&s->m[i], buf + n, cap - n);
		if (len < 0)
			__builtin_trap();       /* a message it handed on must encode */
		n += (size_t)len;
	}
	return n;
}

static char dir[64];

__attribute__((destructor)) static void dir_remove(void)
{
	if (*dir)
		rmdir(dir);
}

static void fix_hashes(uint8_t *b, size_t len)
{
	for (size_t at = 16; len - at >= 12;) {
		uint32_t reclen;
		memcpy(&reclen, b + at, 4);
		if (reclen < 8 || reclen > len - at - 4)
			break;
		uint64_t h = XXH3_64bits(b + at + 12, reclen - 8);
		memcpy(b + at + 4, &h, 8);
		at += 4 + (size_t)reclen;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t a[1 << 16], b[1 << 16];
	char path[128], err[256];
	struct owedlog *l;
	struct seen *s1 = calloc(2, sizeof(*s1)), *s2 = s1 + 1;

	if (!*dir && !mkdtemp(strcpy(dir, "/tmp/owedfuzz.XXXXXX")))
		abort();
	snprintf(path, sizeof(path), "%s/n.owed", dir);
	uint8_t *file = malloc(size + 16);
	uint64_t tag = XXH3_64bits_withSeed(key, sizeof(key), 0x6f776564);
	memcpy(file, "OMNIOWE1", 8);    /* past the header, or it is replaced */
	memcpy(file + 8, &tag, 8);
	memcpy(file + 16, data, size);
	if (!size || data[0])
		fix_hashes(file, size + 16);
	FILE *f = fopen(path, "wb");
	fwrite(file, 1, size + 16, f);
	fclose(f);
	free(file);
	if (owedlog_open(&l, dir, "n", key, sizeof(key), keep, s1, err, sizeof(err)))
		__builtin_trap();
	/* A rewrite of what it held, then a reload, gives the same. */
	owedlog_begin(l);
	for (int i = 0; i < s1->n; i++)
		if (owedlog_add(l, s1->peer[i], &s1->m[i]))
			__builtin_trap();
	owedlog_end(l, 0);
	owedlog_close(l);
	if (owedlog_open(&l, dir, "n", key, sizeof(key), keep, s2, err, sizeof(err)))
		__builtin_trap();
	owedlog_close(l);
	size_t na = encode_all(s1, a, sizeof(a)), nb = encode_all(s2, b, sizeof(b));
	if (s1->n != s2->n || na != nb || memcmp(a, b, na))
		__builtin_trap();
	for (int i = 0; i < s1->n; i++)
		if (strcmp(s1->peer[i], s2->peer[i]))
			__builtin_trap();
	unlink(path);
	free(s1);
	return 0;
}
