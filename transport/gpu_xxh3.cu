/* gpu_xxh3.cu - every 1 KiB block's XXH3 sum at once, a thread a block
 * (xxh3_block.h says why the blocks can be taken apart).  Built to PTX
 * where the toolkit's nvcc is; gpu.c hands it to the driver, which
 * compiles it for the GPU it has, and xxh3sum.c puts the sums in order.
 */
#include "xxh3_block.h"

struct omni_xxh3_key {
	unsigned long long w[XXH3_BLOCK_KEY];
};

extern "C" __global__ void omni_xxh3_blocks(const unsigned long long *in, unsigned long long n,
					    struct omni_xxh3_key key, unsigned long long *out)
{
	unsigned long long b = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;

	if (b < n)
		xxh3_block_sum(in + b * (XXH3_BLOCK / 8), key.w, out + b * 8);
}
