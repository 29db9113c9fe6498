/* Unit tests for XXH3-64 from block sums (transport/xxh3sum.h): over
 * random bytes of lengths around every boundary the decomposition has
 * (a block, the 64 bytes the last stripe reaches back, a chunk), the
 * sums taken a block at a time give what the library's XXH3_64bits()
 * gives for the whole range.  The GPU's kernel takes the same sums
 * (tests/cuda checks it there). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "../tap.h"
#include "../../transport/xxh3sum.h"

/* XXH3 of buf[0, len) by sums, with the sums handed over n at a time */
static uint64_t by_sums(const uint8_t *buf, uint64_t len, size_t n)
{
	uint64_t nb = xxh3sum_nblocks(len), *sums = malloc((nb + 1) * 64);
	struct xxh3sum x;

	for (uint64_t b = 0; b < nb; b++)
		xxh3sum_block(buf + b * XXH3_BLOCK, sums + 8 * b);
	xxh3sum_init(&x);
	for (uint64_t b = 0; b < nb; b += n)
		xxh3sum_blocks(&x, sums + 8 * b, nb - b < n ? nb - b : n);
	free(sums);
	return xxh3sum_final(&x, buf + len - xxh3sum_tail(len), len);
}

int main(void)
{
	static const uint64_t lens[] = {
		XXH3SUM_MIN, XXH3SUM_MIN + 1, 5 * 1024 - 1, 5 * 1024 + 1, 5 * 1024 + 63,
		5 * 1024 + 64, 5 * 1024 + 65, 6 * 1024, 65536 + 7, (1 << 20) - 1, 1 << 20,
		(1 << 20) + 1, (3 << 20) + 777,
	};
	size_t max = (3 << 20) + 777;
	uint8_t *buf = malloc(max + 13);      /* the odd address reads 13 bytes on */
	uint64_t key[XXH3_BLOCK_KEY];

	srandom(7);
	for (size_t i = 0; i < max + 13; i++)
		buf[i] = (uint8_t)random();
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint64_t want = XXH3_64bits(buf, lens[i]);
		ok(by_sums(buf, lens[i], 1) == want, "%llu bytes by sums, a block at a time",
		   (unsigned long long)lens[i]);
		ok(by_sums(buf + 13, lens[i], 1000) == XXH3_64bits(buf + 13, lens[i]),
		   "... and at an odd address, 1000 sums at a time");
	}
	memset(buf, 0xff, 8192);
	ok(by_sums(buf, 8192, 3) == XXH3_64bits(buf, 8192), "all ones: no carry lost in the sums");
	xxh3sum_key(key);
	ok(key[0] == 0xbe4ba423396cfeb8ull, "the key is XXH3's default secret, read little-endian");
	ok(xxh3sum_tail(5 * 1024 + 1) == 65 && xxh3sum_tail(6 * 1024) == 1088 &&
	   xxh3sum_tail(XXH3SUM_MIN) == 1088, "the tail is the last block and the 64 bytes before it");
	free(buf);
	done_testing();
}
