/* xxh3sum.c - XXH3-64 of a long range from its blocks' sums: the ordered
 * part (add a sum, scramble) and the end (the last block's stripes, the
 * last stripe, the merge) are xxHash's own inline code, so that the
 * result is XXH3_64bits()'s by construction; only the sums are ours
 * (xxh3_block.h), and the unit test holds them to the library's hash.
 * The library's vector variants for the build's target (SSE2 on
 * x86-64) scramble: the chain of 256 MiB's sums took 4.0 ms with the
 * scalar one here, 2.7 ms with them.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <string.h>

#include "xxh3sum.h"

_Static_assert(sizeof(XXH3_kSecret) == XXH3_BLOCK_KEY * 8, "the default secret is 192 bytes");
_Static_assert((sizeof(XXH3_kSecret) - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE * XXH_STRIPE_LEN
	       == XXH3_BLOCK, "a block is 16 stripes");

void xxh3sum_key(uint64_t key[XXH3_BLOCK_KEY])
{
	for (int i = 0; i < XXH3_BLOCK_KEY; i++)
		key[i] = XXH_readLE64(XXH3_kSecret + 8 * i);
}

void xxh3sum_init(struct xxh3sum *x)
{
	const uint64_t init[8] = XXH3_INIT_ACC;

	memcpy(x->acc, init, sizeof(init));
	x->blocks = 0;
}

void xxh3sum_blocks(struct xxh3sum *x, const uint64_t *sums, size_t n)
{
	XXH_ALIGN(XXH_ACC_ALIGN) uint64_t acc[8];

	memcpy(acc, x->acc, sizeof(acc));
	for (size_t b = 0; b < n; b++, sums += 8) {
		for (int i = 0; i < 8; i++)
			acc[i] += sums[i];
		XXH3_scrambleAcc(acc, XXH3_kSecret + sizeof(XXH3_kSecret) - XXH_STRIPE_LEN);
	}
	memcpy(x->acc, acc, sizeof(acc));
	x->blocks += n;
}

/* XXH3_hashLong_internal_loop's "last partial block" and the merge of
 * XXH3_hashLong_64b_internal, on the range's tail. */
uint64_t xxh3sum_final(const struct xxh3sum *x, const uint8_t *tail, uint64_t len)
{
	XXH_ALIGN(XXH_ACC_ALIGN) uint64_t acc[8];
	size_t t = xxh3sum_tail(len), r = (size_t)(len - xxh3sum_nblocks(len) * XXH3_BLOCK);
	const uint8_t *last = tail + t - r;     /* the last block */

	memcpy(acc, x->acc, sizeof(acc));
	XXH3_accumulate(acc, last, XXH3_kSecret, (r - 1) / XXH_STRIPE_LEN, XXH3_accumulate_512);
	XXH3_accumulate_512(acc, tail + t - XXH_STRIPE_LEN, XXH3_kSecret + sizeof(XXH3_kSecret)
				   - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
	return XXH3_mergeAccs(acc, XXH3_kSecret + XXH_SECRET_MERGEACCS_START, len * XXH_PRIME64_1);
}

void xxh3sum_block(const uint8_t *block, uint64_t out[8])
{
	uint64_t words[XXH3_BLOCK / 8], key[XXH3_BLOCK_KEY];

	memcpy(words, block, sizeof(words));
	xxh3sum_key(key);
	xxh3_block_sum(words, key, out);
}
