/* hashrate - how fast one core takes XXH3-64 of 1 MiB pieces (the chunk
 * size a reader checks each pulled piece of an object by), the best of 5
 * passes over SIZE_MIB of pre-faulted memory.  Prints MiB/s.  A ceiling
 * for the RDMA bench: in the soft-RoCE guest, whose CPU is emulated, the
 * SIMD XXH3 runs at a fraction of a plain copy, and the checking shares
 * the two vCPUs with rxe's own work. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <xxhash.h>

#define PIECE (1u << 20)

static volatile XXH64_hash_t sink;      /* so that no pass is left out */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
		return puts("usage: hashrate [SIZE_MIB]   (64 by default): prints MiB/s"), 0;
	size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 64) << 20;
	char *a = n ? mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
			   -1, 0) : MAP_FAILED;
	double best = 0;

	if (a == MAP_FAILED)
		return fprintf(stderr, "hashrate: no %zu MiB to hash\n", n >> 20), 1;
	memset(a, 1, n);
	for (int i = 0; i < 5; i++) {
		double t = now();
		for (size_t off = 0; off + PIECE <= n; off += PIECE)
			sink = XXH3_64bits(a + off, PIECE);
		t = now() - t;
		if (n / t > best)
			best = n / t;
	}
	printf("%.1f\n", best / (1 << 20));
	return 0;
}
