/* timerq.h - a min-heap of deadlines embedded in their owners.
 *
 * Each owner embeds a struct timer; adding, removing and popping are
 * O(log n), so ten thousand waiting opens with deadlines cost little and an
 * answered one leaves the heap at once.  Not thread-safe; the owner locks.
 */
#ifndef OMNI_TIMERQ_H
#define OMNI_TIMERQ_H

#include <stddef.h>
#include <stdint.h>

#define TIMER_IDLE ((size_t)-1)

struct timer {
	uint64_t when;          /* CLOCK_MONOTONIC ns */
	size_t idx;             /* heap slot, TIMER_IDLE when not queued */
};

struct timerq {
	struct timer **h;
	size_t n, cap;
};

void timerq_init(struct timerq *q);
void timerq_fini(struct timerq *q);
int timerq_add(struct timerq *q, struct timer *t, uint64_t when);
void timerq_del(struct timerq *q, struct timer *t);
/* The earliest timer, or NULL. */
struct timer *timerq_peek(const struct timerq *q);

static inline int timer_queued(const struct timer *t) { return t->idx != TIMER_IDLE; }

#endif
