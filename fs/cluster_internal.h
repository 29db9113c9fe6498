/* cluster_internal.h - what the parts of the cluster share: its struct and
 * the helpers each part offers the others.  Only fs/cluster*.c include
 * it; the rest of omnifs sees cluster.h.
 */
#ifndef OMNIFS_CLUSTER_INTERNAL_H
#define OMNIFS_CLUSTER_INTERNAL_H

#include <pthread.h>

#include "cluster.h"
#include "ns.h"
#include "../transport/proto.h"
#include "../transport/xport.h"

struct cluster {
	struct xport *x;
	struct ns *ns;
	struct stats *st;
	pthread_mutex_t lock;           /* relist */
	struct subs *subs;              /* peers waiting for keys of ours */
	size_t npeers;
	/* Stages hosted, per peer index, and by this node. */
	struct { const char (*stages)[NAME_STAGE_MAX + 1]; size_t n; } *hosts, self;
	size_t self_at;                 /* this node's place in the config */
	/* Fault injection for the tests: OMNIFS_TEST_CORRUPT sends chunks with
	 * a wrong hash; OMNIFS_TEST_SERVE_DELAY_MS slows serving per chunk
	 * (OMNIFS_TEST_TRICKLE_MS, within each: the transport's). */
	int corrupt;
	unsigned delay_ms;
	unsigned list_delay_ms;          /* tests: a listing answered late */
	unsigned consumed_delay_ms;      /* tests: a complete read told late */
	unsigned hold_ms;                /* tests: each ANNOUNCE and CLAIM served late */
	unsigned gone_hold_ms;           /* tests: each GONE of an object served late */
	unsigned peer_up_delay_ms;       /* tests: a new connection used before its resync */
	unsigned resync_hold_ms;         /* tests: a resync's announces sent late */
	unsigned told_hold_ms;           /* tests: each REMOVE and CONSUMED served late */
	struct leases *leases;          /* peers' streamed reads of ours */
	/* What each peer missed hearing (down or silent then) and must hear
	 * when it is up again: cleanups, complete reads; under lock. */
	struct owed { struct owed *next; struct proto_msg m; } **owed;
	unsigned *nowed;
	struct owedlog *log;            /* the same, for a restart (state_dir) */
	unsigned log_errors, loaded;
	unsigned paying;                /* owed messages told, not yet answered */
	/* Peers whose objects on our edges we list again, and keys we ask
	 * for again (relist_thread), under lock. */
	pthread_cond_t relist_cond;
	unsigned char *relist;
	struct reask *reasks;
	int relist_stop, relist_running;
	pthread_t relister;
};

/* An object's description, for the wire and back; what from_proto gives
 * points into p (its names, inline bytes and KV header). */
void to_proto(const struct ns_objinfo *o, struct proto_obj *p);
struct ns_objinfo from_proto(const struct proto_obj *p);
/* Tests: a message served or sent ms late, said on stderr (the
 * OMNIFS_TEST_*_HOLD_MS of cluster_create). */
void test_hold(unsigned ms, const char *what, const char *key);

/* ------------------------------------------------------- cluster_serve.c */

/* A peer's request or message, on its connection's server thread:
 * xport's ops.handle. */
void op_handle(void *ctx, struct xport_conn *c, int peer, uint64_t reqid,
	       const struct proto_msg *m);

#endif
