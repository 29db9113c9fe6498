/* rdma_internal.h - what rdma.c, rdma_read.c and rdma_grant.c share.
 *
 * Locks: rd->lock guards the reader's links, grants and pulls, the list
 * of owner-side connections (tokens) and the registered buffers.  Each
 * rdma_srv has its own lock for its queue pair and windows; the two are
 * never held together.  A cm id is destroyed only with no lock held,
 * since rdma_destroy_id() waits for the cm thread to finish with the
 * id's events, and that thread takes the locks.
 */
#ifndef OMNI_RDMA_INTERNAL_H
#define OMNI_RDMA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "pool.h"
#include "rdma.h"

#define RDMA_CONNECT_MS 2000    /* to connect a queue pair, all steps */
#define RDMA_TICK_MS 250        /* the completion thread looks at stalls this often */
#define RDMA_WAIT_MS 2000       /* an owner waits this long for a bind or invalidate */

/* What a cm id's context points at: the first member of each. */
enum { CM_LISTEN = 1, CM_LINK, CM_SRV };

/* A reader's queue pair to one owner. */
enum link_state { L_DOWN, L_CONNECTING, L_UP, L_FAILED, L_BROKEN };

struct rpull;
struct rlease;

struct ring_ent { struct rpull *p; uint32_t len; };

struct rlink {
	int kind;                       /* CM_LINK */
	struct rdma *rd;
	int peer;
	enum link_state state;
	struct rdma_cm_id *id;          /* while not L_DOWN */
	unsigned gen;                   /* counts connections: grants are of one */
	pthread_cond_t cond;            /* the state changed */
	char why[160];                  /* of the last failure */
	/* Where the owner listens, for as long as our TCP connection lasts
	 * (port 0: no RDMA offered). */
	struct sockaddr_storage dst;
	uint8_t token[PROTO_TOKEN];
	/* READs posted, in the order their completions come (all signalled). */
	struct ring_ent *ring;
	unsigned head, count;
	uint64_t last_ns;               /* the last completion, or the first post */
	struct rpull *q_head, *q_tail;  /* pulls with READs still to post */
	struct rlease *leases;
	struct { uint64_t addr; uint32_t rkey; int armed; } stale; /* test: see rdma_read.c */
};

struct rbuf { struct rbuf *next; void *base; size_t size; struct ibv_mr *mr; };

struct rdma {
	int kind;                       /* CM_LISTEN: the listening id's context */
	struct rdma_conf c;
	pthread_mutex_t lock;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen;
	struct ibv_context *verbs;      /* the listening id's */
	struct ibv_pd *pd;
	struct ibv_mr *pool_mr;
	uint64_t pool_addr;             /* what grants add an extent's offset to */
	int gpudirect;                  /* pool_mr is a GPU pool's dmabuf */
	int dmabuf_fd;                  /* its descriptor, or -1 */
	char gpudirect_why[256];        /* why a GPU pool is not, or "" */
	struct pool *stage;             /* conf.stage_from's objects are READ from here */
	struct ibv_mr *stage_mr;
	char stage_why[384];            /* why the stage asked for is not there */
	struct ibv_comp_channel *cch;   /* the readers' completions */
	struct ibv_cq *cq;
	int windows;                    /* grants bind type-2 memory windows */
	unsigned init_depth, resp_depth;        /* READs in flight per pair, each way */
	unsigned ring, wr_max;          /* READs posted per pair, and bytes per READ */
	struct sockaddr_storage src;    /* our address, for the reader's connects */
	uint16_t port;
	char dev[64];
	struct rlink *links;            /* per peer */
	struct rdma_srv *srvs;          /* owner-side connections, by token */
	struct rbuf *bufs;
	struct rpull *chk_head, *chk_tail;      /* pulls with news, for the checker */
	pthread_cond_t chk_cond;
	int chk_stop;
	void *scratch;                  /* OMNIFS_TEST_STALE_RKEY's READs land here */
	pthread_t cm_thread, cq_thread, chk_thread;
	int threads;                    /* all started */
	int wake_fd;                    /* eventfd: the completion thread has news */
	int cm_wake_fd;                 /* eventfd: the cm thread is to stop */
	atomic_int stopping;
	atomic_int lost;                /* the device went: conf.lost was told */
	int closing;                    /* pairs fail now because we close: say nothing */
	int test_stale;                 /* OMNIFS_TEST_STALE_RKEY (rdma_read.c) */
	unsigned test_rejects;          /* OMNIFS_TEST_RDMA_REJECTS left (rdma_grant.c) */
	unsigned test_cm_hold_ms;       /* OMNIFS_TEST_CM_HOLD_MS (cm_thread) */
	/* OMNIFS_TEST_RDMA_DROP=N: every Nth READ's pair breaks as its
	 * completion comes, as one in error would break it (rdma_read.c). */
	unsigned test_drop_every, test_drop;
	/* OMNIFS_TEST_RDMA_DARK=K: after each such break, the next K connects
	 * of a pair fail at once, as ones that time out in the fabric do. */
	unsigned test_dark, test_dark_left;
};

static inline void rdma_count(struct rdma *rd, enum xport_count what, uint64_t n)
{
	if (rd->c.count)
		rd->c.count(rd->c.ctx, what, n);
}

void rdma_wake(struct rdma *rd);        /* the completion thread looks again */

static inline const char *rdma_peer(const struct rdma *rd, int peer)
{
	return rd->c.peer_name ? rd->c.peer_name(rd->c.ctx, peer) : "?";
}

/* rdma_read.c: the reader's half of the cm events and the completion thread. */
void link_cm_event(struct rdma *rd, struct rlink *l, struct rdma_cm_event *e,
		   struct rdma_cm_id **destroy);
void *rdma_cq_thread(void *arg);
void *rdma_chk_thread(void *arg);       /* checks, reports and ends pulls */
void links_close(struct rdma *rd);      /* at close: every pair torn down */
/* The key and lkey of the registered memory holding [p, p+len), or 0. */
int rdma_lkey(struct rdma *rd, const void *p, size_t len, uint32_t *lkey);

/* rdma_grant.c: the owner's half. */
void srv_connect_request(struct rdma *rd, struct rdma_cm_event *e, struct rdma_cm_id **destroy);
void srv_cm_event(struct rdma *rd, struct rdma_srv *s, struct rdma_cm_event *e,
		  struct rdma_cm_id **destroy);

/* The QP every pair uses: RC, READs and binds only. */
struct ibv_qp_init_attr rdma_qp_attr(struct rdma *rd, struct ibv_cq *cq, unsigned send_wr);
/* Destroys a cm id and its queue pair: no lock held. */
void rdma_id_destroy(struct rdma_cm_id *id);
/* Destroys a completion queue and its channel (either may be NULL); says
 * so where a queue pair still holds it, and with it the device. */
void rdma_cq_free(struct rdma *rd, struct ibv_cq *cq, struct ibv_comp_channel *cch);

#endif
