/* cluster.h - the namespace across nodes (SPEC §3, §4, §7).
 *
 * Ties ns to the peers of transport/xport.h.  A publish is announced to
 * the nodes that host its <to> stage (and to any that asked for that key
 * while it was missing); objects small enough travel inside the announce.
 * A node that does not host <to> asks: for a key on a lookup, for a
 * directory on readdir; an O_EXCL create asks the hosts of <to>.  rm goes
 * to the owner, which tells everyone; complete reads are counted by the
 * owner.  An owner lost takes its objects out of every listing, and a peer
 * that comes back is told again what it should know.
 */
#ifndef OMNI_CLUSTER_H
#define OMNI_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "names.h"
#include "../transport/xport.h"

struct ns;
struct pool;
struct stats;
struct cluster;

struct cluster_node {
	const char *name, *addr;
	const char (*stages)[NAME_STAGE_MAX + 1];
	size_t nstages;
};

struct cluster_conf {
	const char *self, *listen;              /* listen "" = self's addr */
	const struct cluster_node *nodes;       /* every node, self included */
	size_t nnodes;
	const uint8_t *key;                     /* AUTH_KEY bytes */
	enum xport_mode mode;                   /* transport=tcp|auto|rdma */
	struct pool *pool;                      /* what peers read of ours */
	unsigned dead_ms;                       /* 0: the transport's default */
	const char *state_dir;                  /* where what is owed is kept, or NULL */
	uint64_t rdma_stage;                    /* bytes: a GPU pool's copies for RDMA */
};

/* Binds the peer port; -errno with a reason in err. */
int cluster_create(struct cluster **out, const struct cluster_conf *c,
		   struct stats *st, char *err, size_t errlen);
/* What ns must be created with, and the ns to serve from, then start. */
const struct ns_hooks *cluster_hooks(void);
int cluster_start(struct cluster *cl, struct ns *ns);
void cluster_destroy(struct cluster *cl);

/* Whether this node hosts stage to (its announces come unasked). */
int cluster_hosts(const struct cluster *cl, const char *to);
/* Whether peer hosts stage to. */
int cluster_peer_hosts(const struct cluster *cl, int peer, const char *to);
/* Asks the peers for from/to/key; those that lack it announce it when
 * published within subscribe_ms (0: don't).  Unless base is NULL, the
 * same round trip brings into ns what they own of the view base's shards
 * (<base>.rank<i>of<S>).  0 if some peer had the key (it is now in ns),
 * -ENOENT if none. */
int cluster_ask(struct cluster *cl, const char *from, const char *to,
		const char *key, unsigned subscribe_ms, const char *base);
/* Whether a node of the cluster knows from/to/key (for an O_EXCL create
 * on a node that does not host to): 1 or 0. */
int cluster_exists(struct cluster *cl, const char *from, const char *to, const char *key);
/* The peer where a publish on from/to is claimed (ns_handle_claim): the
 * node where all publishes on the edge meet (the first in the config that
 * hosts to; where none does, one picked by the edge's name), if it is
 * another node and up; else -1 (this node decides, or none can). */
int cluster_claimer(struct cluster *cl, const char *from, const char *to);
/* Brings all the peers own under from/to ("" for all) into ns. */
void cluster_refresh(struct cluster *cl, const char *from, const char *to);
/* rm of request id's objects on every node (ns_cleanup there), in one
 * round trip: how many went in all, and how many peers could not be told
 * (down, or no answer in time: theirs stay).  0, or -ENOMEM. */
int cluster_cleanup(struct cluster *cl, const char *id, uint64_t *removed, size_t *missed);

/* Brings pieces of objects from their owners, all pulls in flight at once
 * (each piece's done, if set, is called as it ends, on a peer's thread):
 * count pieces of len bytes at off + k*stride, into dst back to back
 * (memory from cluster_buf_alloc).  The caller checks the bytes itself
 * (a view, against its shards' per-head sums).  The pieces of one object
 * share a lease: its owner keeps the object for all of them from the
 * moment one of them reaches it until the wait.
 * Start sends them and returns at once (0, or -ENOMEM: none sent); held,
 * if set, is called once, on a peer's thread: held(arg, 0) when the owner
 * of every object has answered one of its pieces with bytes, or
 * held(arg, err) at the first failure before that (-ENOENT: the object is
 * gone).  p must stay as it is until the wait, which returns once every
 * piece has ended: 0, or -EIO (owner lost, a chunk that fails its hash),
 * -ENOENT (gone). */
struct cluster_piece {
	int owner;
	uint64_t oid, off, len, stride;
	uint32_t count;
	const struct iovec *dst;
	int ndst;
	void (*done)(void *arg, int err);       /* optional: this piece ended */
	void *arg;
};
struct cluster_pulls;
int cluster_pull_start(struct cluster *cl, const struct cluster_piece *p, size_t n,
		       void (*held)(void *arg, int err), void *arg, struct cluster_pulls **out);
int cluster_pull_wait(struct cluster_pulls *ps);
void cluster_pull_free(struct cluster_pulls *ps);       /* after the wait */
/* Nobody wants the pieces' bytes any more (a view closed before they were
 * all in): their leases go now, so the pulls end soon (xport_release),
 * and the wait returns -ECANCELED unless another error came first.  Any
 * time before the wait returns. */
void cluster_pull_cancel(struct cluster_pulls *ps);

/* Memory that pulls may land in (zeroed); NULL on failure. */
void *cluster_buf_alloc(struct cluster *cl, size_t size);
void cluster_buf_free(struct cluster *cl, void *buf);
/* This node's RDMA device, its kind of grant, and why it moves nothing
 * if it went: 0, or -ENODEV (xport_rdma). */
int cluster_rdma(const struct cluster *cl, struct xport_rdma_info *out);
/* 1 if peers READ its GPU pool itself (GPUDirect RDMA), else 0. */
int cluster_rdma_gpudirect(const struct cluster *cl);
/* Its RDMA stage (rdma_stage=): size and bytes in use.  0, or -ENODEV. */
int cluster_rdma_stage(const struct cluster *cl, uint64_t *size, uint64_t *used);

/* Sends the messages held for a burst (an rm's REMOVEs and GONEs): all
 * when the node's requests have stopped for now, else (all 0) those held
 * long enough.  Any cl, NULL too. */
void cluster_flush(struct cluster *cl, int all);

size_t cluster_npeers(const struct cluster *cl);
/* Forgets peers' waits that have run out, so that peer_waits counts
 * only live ones; the counters' readers call it first. */
void cluster_reap(struct cluster *cl);
void cluster_peer(struct cluster *cl, size_t i, struct xport_peer_info *out);
/* How many messages peer i is owed (said when it is back up). */
unsigned cluster_owed(struct cluster *cl, size_t i);

#endif
