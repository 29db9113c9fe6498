/* vfile.c - health (JSON), stats, metrics, transfers and config. */
#define _GNU_SOURCE
#include "vfile.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "ns.h"
#include "stats.h"
#include "../transport/pool.h"

#ifndef OMNI_VERSION
#define OMNI_VERSION "0.0.0"
#endif

static json_object *render_peers(const struct vfile_ctx *c)
{
	json_object *arr = json_object_new_array();

	for (size_t i = 0; c->cl && i < cluster_npeers(c->cl); i++) {
		struct xport_peer_info pi;
		json_object *p = json_object_new_object();
		cluster_peer(c->cl, i, &pi);
		json_object_object_add(p, "name", json_object_new_string(pi.name));
		json_object_object_add(p, "addr", json_object_new_string(pi.addr));
		json_object_object_add(p, "state", json_object_new_string(pi.state));
		json_object_object_add(p, "transport", json_object_new_string(pi.transport));
		if (*pi.why)
			json_object_object_add(p, "transport_why", json_object_new_string(pi.why));
		if (*pi.down_why)
			json_object_object_add(p, "down_why", json_object_new_string(pi.down_why));
		if (pi.config_differs)
			json_object_object_add(p, "config_differs", json_object_new_boolean(1));
		json_object_object_add(p, "since_ns", json_object_new_uint64(pi.since_ns));
		json_object_object_add(p, "owed", json_object_new_int64(cluster_owed(c->cl, i)));
		json_object_array_add(arr, p);
	}
	return arr;
}

static char *render_health(const struct vfile_ctx *c)
{
	struct pool_usage u;
	uint64_t objects, inflight;
	json_object *root = json_object_new_object();
	json_object *pool = json_object_new_object();

	pool_usage(c->pool, &u);
	ns_counts(c->ns, &objects, &inflight);
	json_object_object_add(root, "node", json_object_new_string(c->node_name));
	json_object_object_add(root, "version", json_object_new_string(OMNI_VERSION));
	json_object_object_add(pool, "kind", json_object_new_string(pool_kind_name(pool_kind_of(c->pool))));
	json_object_object_add(pool, "size", json_object_new_uint64(u.size));
	json_object_object_add(pool, "used", json_object_new_uint64(u.used));
	json_object_object_add(pool, "free", json_object_new_uint64(u.free));
	json_object_object_add(pool, "largest_free", json_object_new_uint64(u.largest_free));
	json_object_object_add(pool, "copies", json_object_new_uint64(ns_copy_bytes(c->ns)));
	json_object_object_add(pool, "outside", json_object_new_uint64(ns_outside_bytes(c->ns)));
	json_object_object_add(pool, "locked", json_object_new_boolean(u.locked));
	if (pool_cpu(c->pool)) {
		json_object_object_add(pool, "shared", json_object_new_boolean(u.shared));
		json_object_object_add(pool, "huge_pages", json_object_new_boolean(u.huge));
		json_object_object_add(pool, "warming", json_object_new_boolean(u.warming));
	} else {                        /* GPU memory */
		unsigned char handle[POOL_IPC_BYTES];
		int dev;
		if (!pool_ipc(c->pool, &dev, handle))  /* a reader's GPU memory goes there */
			json_object_object_add(pool, "device", json_object_new_int(dev));
		json_object_object_add(pool, "gpudirect", json_object_new_boolean(
					       c->cl && cluster_rdma_gpudirect(c->cl)));
	}
	json_object_object_add(root, "pool", pool);
	json_object_object_add(root, "transport", json_object_new_string(c->transport));
	struct xport_rdma_info ri;
	if (c->cl && !cluster_rdma(c->cl, &ri)) {
		json_object_object_add(root, "rdma_device", json_object_new_string(ri.device));
		json_object_object_add(root, "rdma_grants", json_object_new_string(ri.grants));
	} else if (c->cl && ri.gone[0]) {       /* opened again when it is back */
		json_object_object_add(root, "rdma_gone", json_object_new_string(ri.gone));
	}
	uint64_t ssize, sused;
	if (c->cl && !cluster_rdma_stage(c->cl, &ssize, &sused)) {
		json_object *stage = json_object_new_object();
		json_object_object_add(stage, "size", json_object_new_uint64(ssize));
		json_object_object_add(stage, "used", json_object_new_uint64(sused));
		json_object_object_add(root, "rdma_stage", stage);
	}
	json_object_object_add(root, "peers", render_peers(c));
	json_object_object_add(root, "objects", json_object_new_uint64(objects));
	json_object_object_add(root, "inflight", json_object_new_uint64(inflight));
	json_object_object_add(root, "waiters", json_object_new_uint64(stat_get(c->st, ST_WAITERS)));
	char *s = NULL;
	const char *t = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
	if (t && asprintf(&s, "%s\n", t) < 0)
		s = NULL;
	json_object_put(root);
	return s;
}

static char *render_transfers(const struct vfile_ctx *c)
{
	struct ns_xfer *v;
	size_t n;
	char *buf = NULL;
	size_t len = 0;

	if (ns_transfers(c->ns, &v, &n))
		return NULL;
	FILE *f = open_memstream(&buf, &len);
	if (f) {
		fprintf(f, "# key peer dir done/total rate_MiB_s\n");
		for (size_t i = 0; i < n; i++) {
			double s = v[i].elapsed_ns / 1e9;
			char path[NAME_ESC_MAX], peer[NAME_ESC_MAX];
			fprintf(f, "%s %s %s %" PRIu64 "/%" PRIu64 " %.1f\n",
				name_escape(v[i].path, path), name_escape(v[i].peer, peer),
				v[i].writing ? "in" : "out", v[i].done,
				v[i].total, s > 0 ? v[i].done / s / 1048576.0 : 0.0);
		}
		fclose(f);
	}
	free(v);
	return buf;
}

char *vfile_render(const struct vfile_ctx *c, const char *name, size_t *len)
{
	char *s = NULL;

	if (c->cl)              /* peer_waits: only the waits still alive */
		cluster_reap(c->cl);
	if (!strcmp(name, "health")) {
		s = render_health(c);
	} else if (!strcmp(name, "stats")) {
		s = stats_render_text(c->st);
	} else if (!strcmp(name, "metrics")) {
		struct stats_gauges g;
		struct pool_usage u;
		pool_usage(c->pool, &u);
		ns_counts(c->ns, &g.objects, &g.inflight);
		g.pool_size = u.size;
		g.pool_used = u.used;
		g.pool_copies = ns_copy_bytes(c->ns);
		g.pool_outside = ns_outside_bytes(c->ns);
		s = stats_render_prometheus(c->st, &g);
	} else if (!strcmp(name, "transfers")) {
		s = render_transfers(c);
	} else if (!strcmp(name, "config")) {
		s = strdup(c->config_text);
	} else {
		errno = ENOENT;
		return NULL;
	}
	if (!s)
		errno = ENOMEM;
	else
		*len = strlen(s);
	return s;
}
