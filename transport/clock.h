/* clock.h - nanosecond clocks, for deadlines (monotonic) and for the
 * publish times users see (wall clock). */
#ifndef OMNI_CLOCK_H
#define OMNI_CLOCK_H

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

#endif
