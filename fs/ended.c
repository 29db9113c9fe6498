/* ended.c - the requests cleaned up lately (see ended.h).
 *
 * A key could belong to a handful of ids (names.c's name_request_ids:
 * its prefixes cut at '_' and '.', and a KV key's tail), so a check hashes
 * each and looks it up: a create costs the same whatever the number of
 * requests kept, and nothing when none is. */
#include "ended.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "names.h"

struct ended_req {
	struct hlink byid;
	TAILQ_ENTRY(ended_req) order;
	uint64_t at_ns;
	char id[];
};

int ended_init(struct ended *e, unsigned hold_s, size_t max)
{
	*e = (struct ended){ .hold_ns = (uint64_t)hold_s * 1000000000ull, .max = max };
	TAILQ_INIT(&e->order);
	return htab_init(&e->byid, 64) ? -ENOMEM : 0;
}

static void forget(struct ended *e, struct ended_req *r)
{
	htab_del(&e->byid, &r->byid);
	TAILQ_REMOVE(&e->order, r, order);
	e->n--;
	free(r);
}

void ended_fini(struct ended *e)
{
	struct ended_req *r;

	while ((r = TAILQ_FIRST(&e->order)))
		forget(e, r);
	htab_fini(&e->byid);
}

static struct ended_req *find(const struct ended *e, const char *id, size_t len)
{
	uint64_t h = XXH3_64bits(id, len);

	for (struct hlink *l = htab_find(&e->byid, h); l; l = htab_next(l)) {
		struct ended_req *r = (struct ended_req *)l;
		if (!strncmp(r->id, id, len) && !r->id[len])
			return r;
	}
	return NULL;
}

/* The oldest go first: their hold ran out. */
static void expire(struct ended *e, uint64_t now_ns)
{
	struct ended_req *r;

	while ((r = TAILQ_FIRST(&e->order)) && now_ns - r->at_ns >= e->hold_ns)
		forget(e, r);
}

int ended_add(struct ended *e, const char *id, uint64_t now_ns)
{
	size_t len = strlen(id);
	struct ended_req *r;

	if (!e->hold_ns || !e->max || !len)
		return 0;
	expire(e, now_ns);
	if ((r = find(e, id, len))) {   /* cleaned up again: kept from now */
		TAILQ_REMOVE(&e->order, r, order);
		e->n--;
	} else {
		if (!(r = malloc(sizeof(*r) + len + 1)))
			return -ENOMEM;
		memcpy(r->id, id, len + 1);
		htab_add(&e->byid, &r->byid, XXH3_64bits(id, len));
	}
	if (e->n == e->max)
		forget(e, TAILQ_FIRST(&e->order));
	r->at_ns = now_ns;
	TAILQ_INSERT_TAIL(&e->order, r, order);
	e->n++;
	return 0;
}

int ended_covers(struct ended *e, const char *key, uint64_t now_ns)
{
	struct name_span ids[NAME_KEY_MAX + 1];

	if (!e->n)
		return 0;
	expire(e, now_ns);
	size_t n = e->n ? name_request_ids(key, ids) : 0;
	for (size_t i = 0; i < n; i++)
		if (find(e, key + ids[i].off, ids[i].len))
			return 1;
	return 0;
}
