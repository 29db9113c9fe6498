/* htab.c - chained hash table that doubles when it gets full. */
#include "htab.h"

#include <stdlib.h>

int htab_init(struct htab *t, size_t nb)
{
	t->b = calloc(nb, sizeof(*t->b));
	t->nb = nb;
	t->n = 0;
	return t->b ? 0 : -1;
}

void htab_fini(struct htab *t)
{
	free(t->b);
	t->b = NULL;
}

static void htab_grow(struct htab *t)
{
	size_t nb = t->nb * 2;
	struct hlink **b = calloc(nb, sizeof(*b));

	if (!b)
		return;         /* longer chains, still correct */
	for (size_t i = 0; i < t->nb; i++) {
		struct hlink *l = t->b[i], *next;
		for (; l; l = next) {
			next = l->next;
			l->next = b[l->key & (nb - 1)];
			b[l->key & (nb - 1)] = l;
		}
	}
	free(t->b);
	t->b = b;
	t->nb = nb;
}

void htab_add(struct htab *t, struct hlink *l, uint64_t key)
{
	if (t->n >= t->nb)
		htab_grow(t);
	l->key = key;
	l->next = t->b[key & (t->nb - 1)];
	t->b[key & (t->nb - 1)] = l;
	t->n++;
}

void htab_del(struct htab *t, struct hlink *l)
{
	struct hlink **pp = &t->b[l->key & (t->nb - 1)];

	for (; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			t->n--;
			return;
		}
	}
}

struct hlink *htab_find(const struct htab *t, uint64_t key)
{
	struct hlink *l = t->b[key & (t->nb - 1)];

	while (l && l->key != key)
		l = l->next;
	return l;
}

struct hlink *htab_next(const struct hlink *l)
{
	uint64_t key = l->key;

	for (l = l->next; l && l->key != key; l = l->next)
		;
	return (struct hlink *)l;
}
