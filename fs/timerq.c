/* timerq.c - binary min-heap with back-pointers for O(log n) removal. */
#include "timerq.h"

#include <errno.h>
#include <stdlib.h>

void timerq_init(struct timerq *q)
{
	q->h = NULL;
	q->n = q->cap = 0;
}

void timerq_fini(struct timerq *q)
{
	free(q->h);
	timerq_init(q);
}

static void heap_set(struct timerq *q, size_t i, struct timer *t)
{
	q->h[i] = t;
	t->idx = i;
}

static void heap_up(struct timerq *q, size_t i)
{
	struct timer *t = q->h[i];

	while (i > 0 && q->h[(i - 1) / 2]->when > t->when) {
		heap_set(q, i, q->h[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(q, i, t);
}

static void heap_down(struct timerq *q, size_t i)
{
	struct timer *t = q->h[i];

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= q->n)
			break;
		if (c + 1 < q->n && q->h[c + 1]->when < q->h[c]->when)
			c++;
		if (q->h[c]->when >= t->when)
			break;
		heap_set(q, i, q->h[c]);
		i = c;
	}
	heap_set(q, i, t);
}

int timerq_add(struct timerq *q, struct timer *t, uint64_t when)
{
	if (q->n == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 64;
		struct timer **h = realloc(q->h, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		q->h = h;
		q->cap = cap;
	}
	t->when = when;
	heap_set(q, q->n++, t);
	heap_up(q, q->n - 1);
	return 0;
}

void timerq_del(struct timerq *q, struct timer *t)
{
	size_t i = t->idx;

	if (i == TIMER_IDLE)
		return;
	t->idx = TIMER_IDLE;
	if (i == --q->n)
		return;
	heap_set(q, i, q->h[q->n]);
	heap_down(q, i);
	heap_up(q, q->h[i]->idx);
}

struct timer *timerq_peek(const struct timerq *q)
{
	return q->n ? q->h[0] : NULL;
}
