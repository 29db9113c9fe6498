/* xxh3_block.h - one step of XXH3-64 that a GPU can take for every block
 * at once.
 *
 * XXH3 over a long input (more than 240 bytes, the default secret) runs
 * 1 KiB blocks of 16 stripes through 8 accumulator lanes: each stripe
 * only adds to the lanes, and the lanes are scrambled once a block.  So
 * a block's 16 stripes added into zeroed lanes are a sum that the block
 * contributes whatever came before it, and every block's sum can be taken
 * apart from the others (on a GPU, a thread a block); what is left in
 * order, adding each sum and scrambling, is xxh3sum.c's.  This is the
 * stripe arithmetic of xxHash's XXH3_accumulate_512_scalar, written once
 * for both compilers: the CPU's version (tests) and the kernel (gpu_xxh3.cu)
 * include it.  Little-endian machines only, as both are.
 */
#ifndef OMNI_XXH3_BLOCK_H
#define OMNI_XXH3_BLOCK_H

#ifdef __CUDACC__
#define XXH3_BLOCK_FN __device__ static inline
typedef unsigned long long xxh3_block_u64;
#else
#include <stdint.h>
#define XXH3_BLOCK_FN static inline
typedef uint64_t xxh3_block_u64;
#endif

#define XXH3_BLOCK 1024          /* bytes: 16 stripes of 64 */
#define XXH3_BLOCK_KEY 24        /* words of the default secret (192 bytes) */

/* The sum block (128 words) adds to the 8 lanes, under key (the secret's
 * 24 words): stripe n reads key words n to n + 7. */
XXH3_BLOCK_FN void xxh3_block_sum(const xxh3_block_u64 *block, const xxh3_block_u64 *key,
				  xxh3_block_u64 out[8])
{
	for (int i = 0; i < 8; i++)
		out[i] = 0;
	for (int n = 0; n < 16; n++) {
		for (int i = 0; i < 8; i++) {
			xxh3_block_u64 v = block[n * 8 + i], k = v ^ key[n + i];
			out[i ^ 1] += v;
			out[i] += (k & 0xFFFFFFFFu) * (k >> 32);
		}
	}
}

#endif
