/* subs.h - the peers waiting to hear of a key.
 *
 * A peer that asks this node for a missing key, for a reader that will
 * wait (PT_LOOKUP with a wait), is told when the key is published here,
 * as the nodes that host its <to> stage are.  Each wait is one entry per
 * peer and name, found by the name in O(1) at publish: many waiting
 * readers elsewhere cost a publish nothing.  At most SUBS_MAX in all, so
 * that what peers ask for cannot grow this node's memory without bound;
 * ST_PEER_WAITS counts them.  Thread-safe.
 */
#ifndef OMNI_SUBS_H
#define OMNI_SUBS_H

#include <stdint.h>

#define SUBS_MAX 65536

struct stats;
struct subs;

struct subs *subs_new(struct stats *st);
void subs_free(struct subs *s);
/* peer waits for from/to/key until until_ns (CLOCK_MONOTONIC); a peer
 * that asks again extends its wait.  0, or -ENOSPC (SUBS_MAX waits alive)
 * or -ENOMEM: the asker's reader then waits out its own time. */
int subs_add(struct subs *s, int peer, const char *from, const char *to, const char *key,
	     uint64_t until_ns);
/* from/to/key is published: tell[p] set for each peer p still waiting for
 * it (tell has room for every peer), and their waits end. */
void subs_take(struct subs *s, const char *from, const char *to, const char *key, char *tell);
/* Ends the waits whose time is over. */
void subs_reap(struct subs *s);

#endif
