/* subs.c - the peers waiting to hear of a key: a hash table by name, for
 * publish and asks, and a list of all, for the waits that run out. */
#define _GNU_SOURCE
#include "subs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "htab.h"
#include "names.h"
#include "stats.h"
#include "../transport/clock.h"

struct sub {
	struct hlink byname;
	struct sub *prev, *next;        /* all, for subs_reap */
	int peer;
	uint64_t until_ns;
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1], key[NAME_KEY_MAX + 1];
};

struct subs {
	pthread_mutex_t lock;
	struct htab byname;
	struct sub all;                 /* the list's head */
	struct stats *st;
};

static uint64_t names_hash(const char *from, const char *to, const char *key)
{
	uint64_t h = XXH3_64bits(from, strlen(from));

	h = XXH3_64bits_withSeed(to, strlen(to), h);
	return XXH3_64bits_withSeed(key, strlen(key), h);
}

static int sub_names(const struct sub *e, const char *from, const char *to, const char *key)
{
	return !strcmp(e->key, key) && !strcmp(e->to, to) && !strcmp(e->from, from);
}

struct subs *subs_new(struct stats *st)
{
	struct subs *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (htab_init(&s->byname, 1024)) {
		free(s);
		return NULL;
	}
	pthread_mutex_init(&s->lock, NULL);
	s->all.prev = s->all.next = &s->all;
	s->st = st;
	return s;
}

/* Under s->lock. */
static void sub_del(struct subs *s, struct sub *e)
{
	htab_del(&s->byname, &e->byname);
	e->prev->next = e->next;
	e->next->prev = e->prev;
	stat_sub(s->st, ST_PEER_WAITS, 1);
	free(e);
}

void subs_free(struct subs *s)
{
	if (!s)
		return;
	while (s->all.next != &s->all)
		sub_del(s, s->all.next);
	htab_fini(&s->byname);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Under s->lock: ends the waits that ran out by now. */
static void reap(struct subs *s, uint64_t now)
{
	for (struct sub *e = s->all.next, *next; e != &s->all; e = next) {
		next = e->next;
		if (e->until_ns < now)
			sub_del(s, e);
	}
}

int subs_add(struct subs *s, int peer, const char *from, const char *to, const char *key,
	     uint64_t until_ns)
{
	uint64_t h = names_hash(from, to, key), now = clock_mono_ns();
	struct sub *e;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	for (struct hlink *l = htab_find(&s->byname, h); l; l = htab_next(l)) {
		e = (struct sub *)l;
		if (e->peer == peer && sub_names(e, from, to, key)) {
			if (until_ns > e->until_ns)
				e->until_ns = until_ns;
			goto unlock;
		}
	}
	if (s->byname.n >= SUBS_MAX)    /* full: only then is a sweep worth it */
		reap(s, now);
	if (s->byname.n >= SUBS_MAX) {
		rc = -ENOSPC;
		goto unlock;
	}
	if (!(e = calloc(1, sizeof(*e)))) {
		rc = -ENOMEM;
		goto unlock;
	}
	e->peer = peer;
	e->until_ns = until_ns;
	snprintf(e->from, sizeof(e->from), "%s", from);
	snprintf(e->to, sizeof(e->to), "%s", to);
	snprintf(e->key, sizeof(e->key), "%s", key);
	htab_add(&s->byname, &e->byname, h);
	e->next = &s->all;
	e->prev = s->all.prev;
	e->prev->next = e;
	s->all.prev = e;
	stat_add(s->st, ST_PEER_WAITS, 1);
unlock:
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void subs_take(struct subs *s, const char *from, const char *to, const char *key, char *tell)
{
	uint64_t h = names_hash(from, to, key), now = clock_mono_ns();

	pthread_mutex_lock(&s->lock);
	for (struct hlink *l = htab_find(&s->byname, h), *next; l; l = next) {
		struct sub *e = (struct sub *)l;
		next = htab_next(l);
		if (!sub_names(e, from, to, key))
			continue;
		if (e->until_ns >= now)
			tell[e->peer] = 1;
		sub_del(s, e);
	}
	pthread_mutex_unlock(&s->lock);
}

void subs_reap(struct subs *s)
{
	pthread_mutex_lock(&s->lock);
	reap(s, clock_mono_ns());
	pthread_mutex_unlock(&s->lock);
}
