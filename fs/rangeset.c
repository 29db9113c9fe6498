/* rangeset.c - sorted, merged intervals. */
#include "rangeset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void rangeset_init(struct rangeset *s)
{
	s->r = &s->one;
	s->n = 0;
	s->cap = 1;
}

void rangeset_fini(struct rangeset *s)
{
	if (s->r != &s->one)
		free(s->r);
	rangeset_init(s);
}

static int rangeset_reserve(struct rangeset *s)
{
	if (s->n < s->cap)
		return 0;
	unsigned cap = s->cap * 4;
	struct range *r = malloc(cap * sizeof(*r));
	if (!r)
		return -ENOMEM;
	memcpy(r, s->r, s->n * sizeof(*r));
	if (s->r != &s->one)
		free(s->r);
	s->r = r;
	s->cap = cap;
	return 0;
}

int rangeset_add(struct rangeset *s, uint64_t lo, uint64_t hi)
{
	unsigned i = 0, j;

	if (lo >= hi)
		return 0;
	while (i < s->n && s->r[i].hi < lo)     /* first that touches or follows */
		i++;
	j = i;
	while (j < s->n && s->r[j].lo <= hi) {  /* all that touch [lo, hi) */
		if (s->r[j].lo < lo)
			lo = s->r[j].lo;
		if (s->r[j].hi > hi)
			hi = s->r[j].hi;
		j++;
	}
	if (j > i) {            /* merge [i, j) into slot i */
		s->r[i] = (struct range){ lo, hi };
		memmove(&s->r[i + 1], &s->r[j], (s->n - j) * sizeof(*s->r));
		s->n -= j - i - 1;
		return 0;
	}
	if (rangeset_reserve(s))
		return -ENOMEM;
	memmove(&s->r[i + 1], &s->r[i], (s->n - i) * sizeof(*s->r));
	s->r[i] = (struct range){ lo, hi };
	s->n++;
	return 0;
}

int rangeset_covers(const struct rangeset *s, uint64_t lo, uint64_t hi)
{
	if (lo >= hi)
		return 1;
	for (unsigned i = 0; i < s->n; i++)
		if (s->r[i].lo <= lo && s->r[i].hi >= hi)
			return 1;
	return 0;
}
