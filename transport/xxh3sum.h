/* xxh3sum.h - XXH3-64 of a long range from its blocks' sums
 * (xxh3_block.h), so that the bytes can be summed where they are (a GPU)
 * and only the sums, a 16th of them, and the range's last block travel.
 *
 * The result is XXH3_64bits() of the range, bit for bit: the ordered
 * part and the end are xxHash's own code (XXH_INLINE_ALL).
 */
#ifndef OMNI_XXH3SUM_H
#define OMNI_XXH3SUM_H

#include <stddef.h>
#include <stdint.h>

#include "xxh3_block.h"

/* Ranges at least this long are hashed by sums; shorter ones are not
 * worth it (and XXH3 hashes 240 bytes or fewer another way). */
#define XXH3SUM_MIN (4 * XXH3_BLOCK)

struct xxh3sum {
	uint64_t acc[8];
	uint64_t blocks;        /* summed so far */
};

/* The default secret as the kernel's key. */
void xxh3sum_key(uint64_t key[XXH3_BLOCK_KEY]);
void xxh3sum_init(struct xxh3sum *x);
/* How many of a len-byte range's blocks go through xxh3sum_blocks(): all
 * but the last (a range that ends on a block's end keeps that one too). */
static inline uint64_t xxh3sum_nblocks(uint64_t len) { return (len - 1) / XXH3_BLOCK; }
/* Adds n blocks' sums (8 words each), in the range's order. */
void xxh3sum_blocks(struct xxh3sum *x, const uint64_t *sums, size_t n);
/* How many of the range's last bytes xxh3sum_final() reads: its last
 * block and the 64 bytes before that the last stripe may reach back into. */
static inline size_t xxh3sum_tail(uint64_t len)
{
	uint64_t t = len - xxh3sum_nblocks(len) * XXH3_BLOCK + 64;
	return t < len ? (size_t)t : (size_t)len;
}
/* The range's hash, from its xxh3sum_nblocks(len) sums and tail, its
 * last xxh3sum_tail(len) bytes; len at least XXH3SUM_MIN. */
uint64_t xxh3sum_final(const struct xxh3sum *x, const uint8_t *tail, uint64_t len);
/* One block's sum on the CPU (tests, and what the kernel must match). */
void xxh3sum_block(const uint8_t *block, uint64_t out[8]);

#endif
