/* stats.h - the node's counters and transfer-time histograms (SPEC §3).
 *
 * One table drives .omni/stats, .omni/metrics and the tests, so a counter
 * cannot appear in one view and be missing from another.
 */
#ifndef OMNI_STATS_H
#define OMNI_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum stat_id {
	ST_PUTS, ST_GETS, ST_PUBLISHED, ST_CONSUMED, ST_EXPIRED, ST_REMOVED,
	ST_ABORTED, ST_BYTES_WRITTEN, ST_BYTES_READ, ST_BYTES_PULLED,
	ST_BYTES_PULLED_TCP, ST_BYTES_PULLED_RDMA,
	ST_BYTES_SERVED, ST_WAITERS, ST_WAITS, ST_WAIT_TIMEOUTS, ST_ERRORS,
	ST_LOST, ST_PEER_WAITS, ST_PEER_LOOKUPS, ST_PEER_CLAIMS, ST_PEER_LISTINGS, ST_PEER_AUTH_FAILED, ST_PEER_BAD_FRAMES, ST_PEER_STRANGERS_CLOSED, ST_CHECKSUM_FAILED,
	ST_EVICTED, ST_RDMA_READS, ST_RDMA_ERRORS, ST_BYTES_STAGED, ST_RDMA_STAGE_FULL, ST_RDMA_STAGE_STEPS, ST_DIRECT_GETS, ST_DIRECT_PUTS,
	ST_SMALL_GETS, ST_SMALL_PUTS, ST_CUDA_GETS, ST_CUDA_PUTS, ST_LOOKUPS, ST_WINDOW_GETS,
	ST_HASHED_BY_SUMS, ST_WINDOWS_OUTSIDE, ST_REFUSED,
	ST__COUNT, ST_NONE = ST__COUNT
};

enum hist_id { H_PUBLISH, H_READ, H__COUNT };

#define HIST_BUCKETS 12

struct stats {
	_Atomic uint64_t v[ST__COUNT];
	struct {
		_Atomic uint64_t bucket[HIST_BUCKETS + 1];  /* last: +Inf */
		_Atomic uint64_t sum_ns, count;
	} h[H__COUNT];
};

static inline void stat_add(struct stats *s, enum stat_id id, uint64_t n)
{
	atomic_fetch_add_explicit(&s->v[id], n, memory_order_relaxed);
}
static inline void stat_sub(struct stats *s, enum stat_id id, uint64_t n)
{
	atomic_fetch_sub_explicit(&s->v[id], n, memory_order_relaxed);
}
static inline uint64_t stat_get(const struct stats *s, enum stat_id id)
{
	return atomic_load_explicit(&s->v[id], memory_order_relaxed);
}

void stats_observe(struct stats *s, enum hist_id h, uint64_t ns);

/* Gauges that live elsewhere, passed in when rendering. */
struct stats_gauges {
	uint64_t objects, pool_size, pool_used, pool_copies, pool_outside, inflight;
};

/* Render into a malloc'd buffer; NULL on out-of-memory. */
char *stats_render_text(const struct stats *s);
char *stats_render_prometheus(const struct stats *s, const struct stats_gauges *g);

#endif
