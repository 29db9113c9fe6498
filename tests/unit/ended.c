/* Unit tests for the requests cleaned up lately (fs/ended.c): what a node
 * refuses after a cleanup, and for how long. */
#define _GNU_SOURCE
#include <stdio.h>
#include "../tap.h"
#include "../../fs/ended.h"

#define S 1000000000ull

int main(void)
{
	struct ended e;
	char id[32];
	int all = 1;

	ok(!ended_init(&e, 10, 4), "init: 10 s, at most 4");
	ok(!ended_covers(&e, "r1_0_1", 0), "nothing kept: nothing refused");
	ok(!ended_add(&e, "r1", 5 * S), "r1 cleaned up at 5 s");
	ok(ended_covers(&e, "r1", 6 * S), "its own key");
	ok(ended_covers(&e, "r1_0_0_1_2", 6 * S), "a key of it ('_')");
	ok(ended_covers(&e, "r1.rank0of2", 6 * S), "a view of it ('.')");
	ok(ended_covers(&e, "omni_0_to_1_kv_cache_r1", 6 * S), "vllm-omni's KV key of it");
	ok(!ended_covers(&e, "r10_0", 6 * S), "another request's key");
	ok(!ended_covers(&e, "xr1", 6 * S), "a key that holds the id");
	ok(!ended_covers(&e, "omni_0_to_1_kv_cache_r10", 6 * S), "another request's KV key");
	ok(ended_covers(&e, "r1_x", 15 * S - 1), "kept until its 10 s are over");
	ok(!ended_covers(&e, "r1_x", 15 * S), "... and not after");
	is(e.n, 0, "forgotten then");
	ok(!ended_add(&e, "r2", 20 * S) && !ended_add(&e, "r3", 21 * S), "r2, r3 cleaned up");
	ok(!ended_add(&e, "r2", 29 * S), "r2 cleaned up again at 29 s");
	ok(!ended_covers(&e, "r3_a", 31 * S) && ended_covers(&e, "r2_a", 31 * S) && e.n == 1,
	   "r3 went at 31 s; r2 is kept from its second cleanup");
	for (int i = 0; i < 6; i++) {
		snprintf(id, sizeof(id), "q%d", i);
		all &= !ended_add(&e, id, 32 * S);
	}
	ok(all && e.n == 4, "at most 4 kept (%zu)", e.n);
	ok(!ended_covers(&e, "r2_a", 32 * S) && !ended_covers(&e, "q1_a", 32 * S) &&
	   ended_covers(&e, "q2_a", 32 * S) && ended_covers(&e, "q5", 32 * S),
	   "the oldest forgotten first");
	ended_fini(&e);
	ok(!ended_init(&e, 0, 4) && !ended_add(&e, "r1", S) && !ended_covers(&e, "r1", S),
	   "hold 0: nothing kept");
	ended_fini(&e);
	return done_testing();
}
