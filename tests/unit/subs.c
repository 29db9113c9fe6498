/* Unit tests for the peers waiting to hear of a key (fs/subs.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "../tap.h"
#include "../../fs/stats.h"
#include "../../fs/subs.h"
#include "../../transport/clock.h"

int main(void)
{
	struct stats st = { 0 };
	struct subs *s = subs_new(&st);
	uint64_t now = clock_mono_ns(), later = now + 60000000000ull;
	char tell[4];

	ok(s != NULL, "subs up");
	is(subs_add(s, 0, "0", "1", "k", later), 0, "peer 0 waits for 0/1/k");
	is(subs_add(s, 2, "0", "1", "k", later), 0, "peer 2 too");
	is(subs_add(s, 0, "0", "1", "k", later + 1), 0, "peer 0 asks again");
	is(stat_get(&st, ST_PEER_WAITS), 2, "... one wait per peer and name: 2");
	is(subs_add(s, 1, "0", "1", "kk", later), 0, "peer 1 waits for another key");
	is(subs_add(s, 1, "0", "2", "k", later), 0, "... and for k on another edge");
	is(subs_add(s, 1, "9", "1", "k", later), 0, "... and from another stage");

	memset(tell, 0, sizeof(tell));
	subs_take(s, "0", "1", "k", tell);
	ok(tell[0] && !tell[1] && tell[2], "0/1/k published: peers 0 and 2 are told, not 1");
	is(stat_get(&st, ST_PEER_WAITS), 3, "... and their waits end");
	memset(tell, 0, sizeof(tell));
	subs_take(s, "0", "1", "k", tell);
	ok(!tell[0] && !tell[1] && !tell[2], "published again: nobody is waiting any more");
	subs_take(s, "0", "2", "k", tell);
	ok(tell[1] && !tell[0], "0/2/k: peer 1");

	is(subs_add(s, 2, "0", "1", "gone", now - 1), 0, "a wait already over");
	memset(tell, 0, sizeof(tell));
	subs_take(s, "0", "1", "gone", tell);
	ok(!tell[2], "... is not told");
	is(subs_add(s, 2, "0", "1", "old", now - 1), 0, "another wait already over");
	subs_reap(s);
	is(stat_get(&st, ST_PEER_WAITS), 2, "subs_reap ends it, and only it");

	char key[32];
	int rc = 0, i;
	for (i = 2; i < SUBS_MAX && !rc; i++) {
		snprintf(key, sizeof(key), "w%d", i);
		rc = subs_add(s, 3, "0", "1", key, i % 2 ? later : now - 1);
	}
	is(rc, 0, "SUBS_MAX waits in all");
	is(subs_add(s, 3, "0", "1", "one-more", later), 0,
	   "one more: the waits that ran out make room for it");
	is(stat_get(&st, ST_PEER_WAITS), SUBS_MAX / 2 + 2, "... all of them gone");
	for (i = 0; rc == 0; i++) {
		snprintf(key, sizeof(key), "x%d", i);
		rc = subs_add(s, 3, "0", "1", key, later);
	}
	is(rc, -ENOSPC, "SUBS_MAX alive: ENOSPC");
	is(stat_get(&st, ST_PEER_WAITS), SUBS_MAX, "... at SUBS_MAX");
	memset(tell, 0, sizeof(tell));
	subs_take(s, "0", "1", "x7", tell);
	ok(tell[3], "one of them published: its peer is told, among SUBS_MAX");
	subs_free(s);
	is(stat_get(&st, ST_PEER_WAITS), 0, "subs_free ends them all");
	return done_testing();
}
