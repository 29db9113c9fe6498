/* Unit tests for the range set and the deadline heap. */
#define _GNU_SOURCE
#include <stdlib.h>
#include "../tap.h"
#include "../../fs/rangeset.h"
#include "../../fs/timerq.h"

static void test_rangeset(void)
{
	struct rangeset s;

	rangeset_init(&s);
	ok(rangeset_covers(&s, 0, 0), "empty range always covered");
	ok(!rangeset_covers(&s, 0, 1), "nothing seen yet");
	rangeset_add(&s, 0, 100);
	rangeset_add(&s, 200, 300);
	ok(!rangeset_covers(&s, 0, 300), "a gap is not covered");
	is(s.n, 2, "two intervals");
	rangeset_add(&s, 100, 200);
	ok(rangeset_covers(&s, 0, 300), "filled gap covers all");
	is(s.n, 1, "merged into one");
	for (int i = 9; i >= 0; i--)      /* backwards, disjoint */
		rangeset_add(&s, 1000 + i * 20, 1000 + i * 20 + 10);
	is(s.n, 11, "disjoint backward pieces kept apart");
	for (int i = 0; i < 10; i++)
		rangeset_add(&s, 1000 + i * 20 + 10, 1000 + i * 20 + 20);
	rangeset_add(&s, 300, 1000);
	ok(rangeset_covers(&s, 0, 1200) && s.n == 1, "all merged (%u)", s.n);
	rangeset_fini(&s);
}

static void test_timerq(void)
{
	struct timerq q;
	struct timer t[100];
	uint64_t last = 0;
	int sorted = 1;

	timerq_init(&q);
	srand(7);
	for (int i = 0; i < 100; i++) {
		t[i].idx = TIMER_IDLE;
		timerq_add(&q, &t[i], (uint64_t)(rand() % 1000));
	}
	for (int i = 0; i < 100; i += 3)
		timerq_del(&q, &t[i]);
	is(q.n, 66, "deletions leave 66");
	while (timerq_peek(&q)) {
		struct timer *x = timerq_peek(&q);
		if (x->when < last)
			sorted = 0;
		last = x->when;
		timerq_del(&q, x);
		if (x->idx != TIMER_IDLE)
			sorted = 0;
	}
	ok(sorted, "pops in deadline order and marks idle");
	timerq_fini(&q);
}

int main(void)
{
	test_rangeset();
	test_timerq();
	return done_testing();
}
