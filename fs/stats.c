/* stats.c - counters rendered as `name: value` lines and as Prometheus text. */
#define _GNU_SOURCE
#include "stats.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static const struct {
	const char *name, *help;
	int gauge;
} stat_info[ST__COUNT] = {
	[ST_PUTS] = { "puts", "Objects created for writing", 0 },
	[ST_GETS] = { "gets", "Opens of objects for reading", 0 },
	[ST_PUBLISHED] = { "published", "Objects published", 0 },
	[ST_CONSUMED] = { "consumed", "Objects deleted after their complete reads", 0 },
	[ST_EXPIRED] = { "expired", "Objects deleted by their TTL", 0 },
	[ST_REMOVED] = { "removed", "Objects deleted by rm", 0 },
	[ST_ABORTED] = { "aborted", "Objects discarded unpublished (writer killed, pool full)", 0 },
	[ST_BYTES_WRITTEN] = { "bytes_written", "Bytes written into the pool", 0 },
	[ST_BYTES_READ] = { "bytes_read", "Bytes returned to readers", 0 },
	[ST_BYTES_PULLED] = { "bytes_pulled", "Bytes received from peers", 0 },
	[ST_BYTES_PULLED_TCP] = { "bytes_pulled_tcp", "Bytes pulled from peers over TCP", 0 },
	[ST_BYTES_PULLED_RDMA] = { "bytes_pulled_rdma", "Bytes pulled from peers by RDMA READ", 0 },
	[ST_BYTES_SERVED] = { "bytes_served", "Bytes sent to peers", 0 },
	[ST_WAITERS] = { "waiters", "Opens waiting for a key now (or for room to stream it)", 1 },
	[ST_WAITS] = { "waits", "Opens that had to wait for a key", 0 },
	[ST_WAIT_TIMEOUTS] = { "wait_timeouts", "Waiting opens that ran out of wait_ms", 0 },
	[ST_ERRORS] = { "errors", "Operations that failed with an error", 0 },
	[ST_LOST] = { "lost", "Objects gone with their owner (died or cut off)", 0 },
	[ST_PEER_WAITS] = { "peer_waits", "Lookups by other nodes that wait here for a publish", 1 },
	[ST_PEER_LOOKUPS] = { "peer_lookups", "Keys other nodes asked this node for (missing there, or O_EXCL)", 0 },
	[ST_PEER_CLAIMS] = { "peer_claims",
		"Other nodes' small puts this node took in one message, or refused (EEXIST)", 0 },
	[ST_PEER_LISTINGS] = { "peer_listings",
		"What this node owns under an edge, a stage or all, listed for other nodes", 0 },
	[ST_PEER_AUTH_FAILED] = { "peer_auth_failed", "Connections refused for a wrong secret or name", 0 },
	[ST_PEER_BAD_FRAMES] = { "peer_bad_frames", "Connections dropped for a malformed frame", 0 },
	[ST_PEER_STRANGERS_CLOSED] = { "peer_strangers_closed",
		"Unauthenticated connections closed: too slow, or too many at once", 0 },
	[ST_CHECKSUM_FAILED] = { "checksum_failures", "Pulled chunks or payloads that failed their XXH3", 0 },
	[ST_EVICTED] = { "evicted", "Unused copies of other nodes' objects dropped to make room in the pool", 0 },
	[ST_RDMA_READS] = { "rdma_reads", "RDMA READs completed", 0 },
	[ST_RDMA_ERRORS] = { "rdma_errors", "RDMA READs that failed, and queue pairs that stalled", 0 },
	[ST_BYTES_STAGED] = { "bytes_staged",
		"Bytes of the GPU pool copied into the RDMA stage for peers' READs", 0 },
	[ST_RDMA_STAGE_FULL] = { "rdma_stage_full",
		"Peers' RDMA grants the stage had no room for (those reads go over TCP, or fail with transport=rdma)", 0 },
	[ST_RDMA_STAGE_STEPS] = { "rdma_stage_steps",
		"Copies into the RDMA stage, each a step of a peer's read that its READs of the step before overlap", 0 },
	[ST_DIRECT_GETS] = { "direct_gets", "Objects a process on this node copied out itself (OMNIFS_IOC_WHERE)", 0 },
	[ST_DIRECT_PUTS] = { "direct_puts", "Objects a process on this node copied in itself (OMNIFS_IOC_PLACE)", 0 },
	[ST_SMALL_GETS] = { "small_gets", "Small objects waited for and read in one request (OMNIFS_IOC_GET)", 0 },
	[ST_SMALL_PUTS] = { "small_puts", "Small objects written and published in one request (OMNIFS_IOC_PUT)", 0 },
	[ST_CUDA_GETS] = { "cuda_gets", "Objects a GPU process on this node copied out of the GPU pool itself (OMNIFS_IOC_CUDA)", 0 },
	[ST_CUDA_PUTS] = { "cuda_puts", "Objects a GPU process on this node copied into the GPU pool itself (OMNIFS_IOC_CUDA_PLACE)", 0 },
	[ST_LOOKUPS] = { "lookups", "Names the kernel asked this node about (FUSE LOOKUPs)", 0 },
	[ST_WINDOW_GETS] = { "window_gets",
		"Streamed objects a process on this node copied out of its window itself (OMNIFS_IOC_WINDOW)", 0 },
	[ST_HASHED_BY_SUMS] = { "hashed_by_sums",
		"Objects hashed at publish from sums the GPU took of their blocks (GPU pools)", 0 },
	[ST_WINDOWS_OUTSIDE] = { "windows_outside_pool",
		"Streamed reads whose window the full pool had no room for, taken from host memory beside it", 0 },
	[ST_REFUSED] = { "refused",
		"Creates refused for a request cleaned up within cleanup_hold_s (ECANCELED)", 0 },
};

static const char *hist_name[H__COUNT] = {
	[H_PUBLISH] = "publish",        /* create to publish */
	[H_READ] = "read",              /* open to complete read */
};

/* Upper bounds in ns: 10us .. 10s, roughly x3 apart. */
static const uint64_t hist_le[HIST_BUCKETS] = {
	10000, 30000, 100000, 300000, 1000000, 3000000, 10000000,
	30000000, 100000000, 300000000, 1000000000, 10000000000ull,
};

void stats_observe(struct stats *s, enum hist_id h, uint64_t ns)
{
	unsigned i = 0;

	while (i < HIST_BUCKETS && ns > hist_le[i])
		i++;
	atomic_fetch_add_explicit(&s->h[h].bucket[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->h[h].sum_ns, ns, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->h[h].count, 1, memory_order_relaxed);
}

char *stats_render_text(const struct stats *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	for (int i = 0; i < ST__COUNT; i++)
		fprintf(f, "%s: %" PRIu64 "\n", stat_info[i].name, stat_get(s, i));
	fclose(f);
	return buf;
}

static void prom_hist(FILE *f, const struct stats *s, int h)
{
	uint64_t cum = 0;

	fprintf(f, "# HELP omnifs_%s_seconds Time from %s\n", hist_name[h],
		h == H_PUBLISH ? "create to publish" : "open to complete read");
	fprintf(f, "# TYPE omnifs_%s_seconds histogram\n", hist_name[h]);
	for (int i = 0; i <= HIST_BUCKETS; i++) {
		cum += atomic_load(&s->h[h].bucket[i]);
		if (i < HIST_BUCKETS)
			fprintf(f, "omnifs_%s_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
				hist_name[h], hist_le[i] / 1e9, cum);
		else
			fprintf(f, "omnifs_%s_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n",
				hist_name[h], cum);
	}
	fprintf(f, "omnifs_%s_seconds_sum %.9f\n", hist_name[h],
		atomic_load(&s->h[h].sum_ns) / 1e9);
	fprintf(f, "omnifs_%s_seconds_count %" PRIu64 "\n", hist_name[h],
		atomic_load(&s->h[h].count));
}

static void prom_gauge(FILE *f, const char *name, const char *help, uint64_t v)
{
	fprintf(f, "# HELP omnifs_%s %s\n# TYPE omnifs_%s gauge\nomnifs_%s %" PRIu64 "\n",
		name, help, name, name, v);
}

char *stats_render_prometheus(const struct stats *s, const struct stats_gauges *g)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	for (int i = 0; i < ST__COUNT; i++) {
		const char *n = stat_info[i].name;
		if (stat_info[i].gauge) {
			prom_gauge(f, n, stat_info[i].help, stat_get(s, i));
			continue;
		}
		fprintf(f, "# HELP omnifs_%s_total %s\n# TYPE omnifs_%s_total counter\n"
			"omnifs_%s_total %" PRIu64 "\n", n, stat_info[i].help, n, n,
			stat_get(s, i));
	}
	prom_gauge(f, "objects", "Objects held by this node", g->objects);
	prom_gauge(f, "pool_size_bytes", "Size of the memory pool", g->pool_size);
	prom_gauge(f, "pool_used_bytes", "Bytes of the pool in use", g->pool_used);
	prom_gauge(f, "pool_copies_bytes", "Bytes of the pool holding copies of other nodes' objects", g->pool_copies);
	prom_gauge(f, "pool_outside_bytes", "Host memory beside the full pool that streamed reads' windows hold", g->pool_outside);
	prom_gauge(f, "inflight", "Transfers in flight", g->inflight);
	for (int h = 0; h < H__COUNT; h++)
		prom_hist(f, s, h);
	fclose(f);
	return buf;
}
