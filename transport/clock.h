/* clock.h - nanosecond clocks, for deadlines (monotonic) and for the
 * publish times users see (wall clock); and timed waits that count on the
 * monotonic one.  pthread_cond_timedwait counts on the wall clock unless
 * told otherwise, and a wall clock stepped back (NTP correcting a VM's
 * clock, an admin's date -s) stretches every wait under way by the step:
 * a node that pings its peers each 500 ms would go silent for an hour. */
#ifndef OMNI_CLOCK_H
#define OMNI_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t clock_ns_of(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clock_mono_ns(void) { return clock_ns_of(CLOCK_MONOTONIC); }
static inline uint64_t clock_wall_ns(void) { return clock_ns_of(CLOCK_REALTIME); }

/* A condition variable whose timed waits take clock_deadline_in's times. */
static inline void clock_cond_init(pthread_cond_t *c)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
}

/* The monotonic time ms from now, for a timed wait on such a cond. */
static inline struct timespec clock_deadline_in(unsigned ms)
{
	uint64_t t = clock_mono_ns() + (uint64_t)ms * 1000000u;

	return (struct timespec){ (time_t)(t / 1000000000u), (long)(t % 1000000000u) };
}

#endif
