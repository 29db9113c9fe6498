/* ended.h - the requests cleaned up lately, so that what they still put
 * is refused.
 *
 * A cleanup (ns_cleanup) removes every object of a request, but a stage
 * worker that was still running when its request was aborted puts its
 * output after that, and nothing would ever read it: it would sit in a
 * pool until ttl_s.  So each node remembers the ids it cleaned up for
 * hold_s seconds (at most max of them, the oldest forgotten first) and
 * refuses new objects of their keys.  Not thread-safe; the owner locks.
 */
#ifndef OMNI_ENDED_H
#define OMNI_ENDED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "htab.h"

struct ended_req;

struct ended {
	struct htab byid;               /* by XXH3 of the id */
	TAILQ_HEAD(, ended_req) order;  /* oldest first */
	uint64_t hold_ns;               /* 0: nothing is kept */
	size_t n, max;
};

/* 0, or -ENOMEM. */
int ended_init(struct ended *e, unsigned hold_s, size_t max);
void ended_fini(struct ended *e);
/* Request id ended at now_ns (CLOCK_MONOTONIC): kept until now_ns + hold
 * (again if it was kept already).  0, or -ENOMEM (then it is not kept). */
int ended_add(struct ended *e, const char *id, uint64_t now_ns);
/* Whether key belongs (name_of_request) to a request kept at now_ns. */
int ended_covers(struct ended *e, const char *key, uint64_t now_ns);

#endif
