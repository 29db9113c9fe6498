/* rdma_grant.c - the owner's side: the queue pair a peer connects to us
 * and the windows through which it reads what it was granted.
 *
 * A peer's TCP connection to us gets a token in its WELCOME; the queue
 * pair that comes with that token in its connect request is accepted as
 * that connection's, and one that comes with none we gave is rejected.
 * A grant binds a type-2 memory window over each extent of the leased
 * object on that queue pair: its rkey reads those bytes, through that
 * pair only, until the lease's RELEASE invalidates it, or the connection
 * or the pair ends.  Where the pool is a GPU's, which no RDMA device reads
 * here, the grant takes room in the stage (rdma.h) for the whole object,
 * copies in what the reader asked for (upto), and binds the window over
 * the room; the reader's GRANTs again under the lease copy the rest a
 * step at a time, so its READs of one step overlap the copy of the next.
 * The room goes with the grant.  A stage too full for the object is
 * -ENOBUFS, and the reader goes over TCP or asks again (xport.c): waiting
 * here for room would hold up the RELEASEs of this connection that make
 * it.
 * Binds and invalidations are posted on the pair and waited for here, on
 * the connection's serving thread, which serves its requests one at a
 * time; the pair's completion queue is its own.
 */
#define _GNU_SOURCE
#include "rdma_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sodium.h>

#include "clock.h"

#define SRV_WR 64               /* binds or invalidations posted at once */

struct srv_grant {
	struct srv_grant *next;
	uint64_t lease;
	uint32_t n, asked;              /* extents given; the pool's, asked for */
	struct ibv_mw **mw;             /* windows: one per extent */
	struct proto_extent *out;       /* what the peer was given */
	struct pool *stage;             /* holds [staged, staged + staged_len) */
	uint64_t staged, staged_len;
	uint64_t size, ready;           /* the object's; [0, ready) of it may be read */
	int filling, dropped;           /* copied into unlocked; gone meanwhile */
};

struct rdma_srv {
	int kind;                       /* CM_SRV */
	struct rdma *rd;
	struct rdma_srv *next;          /* rd->srvs */
	unsigned refs;                  /* under rd->lock */
	pthread_mutex_t lock;           /* all below */
	uint8_t token[PROTO_TOKEN];
	struct rdma_cm_id *id;          /* the peer's pair, once it connects */
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	uint64_t seq;                   /* wr_ids of our posts */
	struct srv_grant *grants;       /* bound on id's pair */
	int ended;
};

struct rdma_srv *rdma_srv_new(struct rdma *rd, uint8_t token[PROTO_TOKEN])
{
	struct rdma_srv *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->kind = CM_SRV;
	s->rd = rd;
	s->refs = 1;
	if (getrandom(s->token, PROTO_TOKEN, 0) != PROTO_TOKEN ||
	    !(s->cch = ibv_create_comp_channel(rd->verbs)) ||
	    !(s->cq = ibv_create_cq(rd->verbs, SRV_WR + 2, NULL, s->cch, 0))) {
		if (s->cch)
			ibv_destroy_comp_channel(s->cch);
		free(s);
		return NULL;
	}
	pthread_mutex_init(&s->lock, NULL);
	memcpy(token, s->token, PROTO_TOKEN);
	pthread_mutex_lock(&rd->lock);
	s->next = rd->srvs;
	rd->srvs = s;
	pthread_mutex_unlock(&rd->lock);
	return s;
}

static void srv_put(struct rdma_srv *s)
{
	struct rdma *rd = s->rd;

	pthread_mutex_lock(&rd->lock);
	int last = !--s->refs;
	pthread_mutex_unlock(&rd->lock);
	if (!last)
		return;
	rdma_cq_free(rd, s->cq, s->cch);      /* its pair went first (srv_qp_drop) */
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Its windows, then the copy they read: no READ reaches a stage's bytes
 * once they may be another grant's. */
static void grant_free(struct srv_grant *g)
{
	for (uint32_t i = 0; g->mw && i < g->n; i++)
		if (g->mw[i])
			ibv_dealloc_mw(g->mw[i]);
	if (g->staged_len)
		pool_free(g->stage, g->staged, g->staged_len);
	free(g->mw);
	free(g->out);
	free(g);
}

/* Under s->lock: the pair is gone or replaced, and its windows with it.
 * One being copied into goes when the copy ends (rdma_srv_grant). */
static void grants_drop(struct rdma_srv *s)
{
	while (s->grants) {
		struct srv_grant *g = s->grants;
		s->grants = g->next;
		if (g->filling)
			g->dropped = 1;
		else
			grant_free(g);
	}
}

/* ---------------------------------------------------------------- cm events */

/* Under s->lock: the pair of an id that goes after its event's ack, on
 * rdma_cm's thread, goes now.  The connection may end meanwhile, and its
 * srv_put finds s->cq free: a pair left on it would keep the queue, and
 * with it the device, for good. */
static void srv_qp_drop(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
}

/* A connect request: accepted if it names a connection we gave a token. */
void srv_connect_request(struct rdma *rd, struct rdma_cm_event *e, struct rdma_cm_id **destroy)
{
	const struct rdma_conn_param *req = &e->param.conn;
	struct rdma_srv *s = NULL;
	struct rdma_cm_id *old = NULL;

	pthread_mutex_lock(&rd->lock);
	for (s = rd->srvs; s && req->private_data_len >= PROTO_TOKEN; s = s->next)
		if (!sodium_memcmp(s->token, req->private_data, PROTO_TOKEN))
			break;          /* in constant time: nothing to learn by guessing */
	if (s && req->private_data_len >= PROTO_TOKEN && rd->test_rejects) {
		fprintf(stderr, "omnifs: test: a queue pair rejected (%u more)\n", --rd->test_rejects);
		s = NULL;
	}
	if (s && req->private_data_len >= PROTO_TOKEN)
		s->refs++;
	else
		s = NULL;
	pthread_mutex_unlock(&rd->lock);
	if (!s) {
		rdma_reject(e->id, NULL, 0);
		*destroy = e->id;
		return;
	}
	struct ibv_qp_init_attr qa = rdma_qp_attr(rd, s->cq, SRV_WR + 2);
	/* rdma_cm gives the request's depths as the acceptor sees them: the
	 * READs the reader wants in flight are our responder_resources. */
	struct rdma_conn_param cp = {
		.responder_resources = (uint8_t)(req->responder_resources < rd->resp_depth ?
						 req->responder_resources : rd->resp_depth),
	};
	pthread_mutex_lock(&s->lock);
	if (!s->ended) {        /* a pair again: the old one and its windows go */
		old = s->id;
		s->id = NULL;
		grants_drop(s);
	}
	e->id->context = s;
	if (s->ended || rdma_create_qp(e->id, rd->pd, &qa) || rdma_accept(e->id, &cp)) {
		rdma_reject(e->id, NULL, 0);
		srv_qp_drop(e->id);
		*destroy = e->id;
	} else {
		s->id = e->id;
	}
	pthread_mutex_unlock(&s->lock);
	rdma_id_destroy(old);   /* its events were all handled and acked */
	srv_put(s);
}

void srv_cm_event(struct rdma *rd, struct rdma_srv *s, struct rdma_cm_event *e,
		  struct rdma_cm_id **destroy)
{
	(void)rd;
	pthread_mutex_lock(&s->lock);
	if (s->id == e->id && (e->event == RDMA_CM_EVENT_DISCONNECTED ||
			       e->event == RDMA_CM_EVENT_DEVICE_REMOVAL)) {
		grants_drop(s);
		s->id = NULL;
		srv_qp_drop(e->id);
		*destroy = e->id;
	}
	pthread_mutex_unlock(&s->lock);
}

void rdma_srv_end(struct rdma_srv *s)
{
	struct rdma *rd = s->rd;

	pthread_mutex_lock(&s->lock);
	struct rdma_cm_id *id = s->id;
	s->id = NULL;
	s->ended = 1;
	grants_drop(s);
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_lock(&rd->lock);
	for (struct rdma_srv **pp = &rd->srvs; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	pthread_mutex_unlock(&rd->lock);
	if (id) {
		rdma_disconnect(id);
		rdma_id_destroy(id);
	}
	srv_put(s);
}

/* ---------------------------------------------------------------- windows */

/* Under s->lock: waits for the completions of posts [from, s->seq).
 * 0 if all succeeded. */
static int srv_wait(struct rdma_srv *s, uint64_t from)
{
	uint64_t until = clock_mono_ns() + (uint64_t)RDMA_WAIT_MS * 1000000u;
	int left = (int)(s->seq - from), rc = 0;
	struct ibv_wc wc[8];

	while (left > 0) {
		int n = ibv_poll_cq(s->cq, 8, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id < from)
				continue;       /* of an earlier wait that gave up */
			left--;
			if (wc[i].status != IBV_WC_SUCCESS)
				rc = -EIO;
		}
		if (n || left <= 0)
			continue;
		struct pollfd pf = { .fd = s->cch->fd, .events = POLLIN };
		struct ibv_cq *cq;
		void *ctx;
		uint64_t now = clock_mono_ns();
		if (now >= until)
			return -ETIMEDOUT;
		ibv_req_notify_cq(s->cq, 0);
		if ((n = ibv_poll_cq(s->cq, 8, wc)) > 0) {      /* came before the arming */
			for (int i = 0; i < n; i++)
				if (wc[i].wr_id >= from) {
					left--;
					rc = wc[i].status == IBV_WC_SUCCESS ? rc : -EIO;
				}
			continue;
		}
		if (poll(&pf, 1, (int)((until - now) / 1000000u) + 1) == 1 &&
		    !ibv_get_cq_event(s->cch, &cq, &ctx))
			ibv_ack_cq_events(cq, 1);
	}
	return rc;
}

/* Under s->lock: posts wr (a chain of k) and waits for all of them. */
static int srv_post(struct rdma_srv *s, struct ibv_send_wr *wr, int k)
{
	uint64_t from = s->seq;
	struct ibv_send_wr *bad;

	for (int i = 0; i < k; i++)
		wr[i].wr_id = s->seq++;
	if (ibv_post_send(s->id->qp, wr, &bad)) {
		s->seq = from + (uint64_t)(bad - wr);   /* those never went */
		return -EIO;
	}
	return srv_wait(s, from);
}

/* Under s->lock: g's windows bound over its extents, SRV_WR at a time. */
static int bind_windows(struct rdma_srv *s, struct srv_grant *g)
{
	struct rdma *rd = s->rd;
	struct ibv_send_wr wr[SRV_WR];

	for (uint32_t i = 0; i < g->n;) {
		int k = 0;
		for (; k < SRV_WR && i < g->n; k++, i++) {
			if (!(g->mw[i] = ibv_alloc_mw(rd->pd, IBV_MW_TYPE_2)))
				return -EIO;
			g->out[i].rkey = ibv_inc_rkey(g->mw[i]->rkey);
			wr[k] = (struct ibv_send_wr){
				.next = k + 1 < SRV_WR && i + 1 < g->n ? &wr[k + 1] : NULL,
				.opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
				.bind_mw = { .mw = g->mw[i], .rkey = g->out[i].rkey, .bind_info = {
					.mr = g->stage ? rd->stage_mr : rd->pool_mr,
					.addr = g->out[i].addr,
					.length = g->out[i].len,
					.mw_access_flags = IBV_ACCESS_REMOTE_READ } },
			};
		}
		if (srv_post(s, wr, k))
			return -EIO;
	}
	return 0;
}

/* Room in the stage for the object's n extents, which are copied into
 * it in order by stage_fill: g->out[0].  -ENOBUFS: no room for it now;
 * -EFBIG: it is larger than the stage. */
static int stage_room(struct rdma *rd, struct srv_grant *g)
{
	uint64_t got;

	if (pool_alloc(rd->stage, g->size, g->size, &g->staged, &got)) {
		rdma_count(rd, XC_RDMA_STAGE_FULL, 1);
		return g->size > rd->c.stage_size ? -EFBIG : -ENOBUFS;
	}
	g->stage = rd->stage;
	g->staged_len = got;
	g->n = 1;
	g->out[0] = (struct proto_extent){ (uintptr_t)pool_base(rd->stage) + g->staged, g->size,
					   rd->stage_mr->rkey };
	return 0;
}

/* [g->ready, upto) of the object, from its n extents of the pool no
 * device reads into its room in the stage. */
static int stage_fill(struct rdma *rd, struct srv_grant *g, const struct xport_extent *ext,
		      uint32_t n, uint64_t upto)
{
	uint8_t *room = (uint8_t *)pool_base(rd->stage) + g->staged;
	uint64_t from = g->ready, at = 0;

	if (upto > g->size)
		upto = g->size;
	for (uint32_t i = 0; i < n && at < upto; at += ext[i++].len) {
		uint64_t lo = from > at ? from : at;
		uint64_t hi = upto < at + ext[i].len ? upto : at + ext[i].len;
		if (lo < hi && pool_read(rd->c.stage_from, ext[i].off + (lo - at), room + lo, hi - lo))
			return -EIO;
	}
	if (upto > from) {
		rdma_count(rd, XC_RDMA_STAGED, upto - from);
		rdma_count(rd, XC_RDMA_STAGE_STEPS, 1);
		g->ready = upto;
	}
	return 0;
}

/* A new grant for lease's extents, not yet bound: the pool's addresses
 * and rkey, or those of their room in the stage, filled upto. */
static int grant_new(struct rdma *rd, uint64_t lease, const struct xport_extent *ext,
		     uint32_t n, uint64_t upto, struct srv_grant **out)
{
	struct srv_grant *g = calloc(1, sizeof(*g));
	int rc = -EIO;

	if (!g || !(g->out = calloc(n ? n : 1, sizeof(*g->out))) ||
	    (rd->windows && !(g->mw = calloc(n ? n : 1, sizeof(*g->mw)))))
		goto fail;
	g->lease = lease;
	g->n = g->asked = n;
	for (uint32_t i = 0; i < n; i++)
		g->size += ext[i].len;
	if (rd->stage && n) {
		if (!(rc = stage_room(rd, g)))
			rc = stage_fill(rd, g, ext, n, upto);
	} else {                /* rdma_serves(): pool_mr */
		for (uint32_t i = 0; i < n; i++)
			g->out[i] = (struct proto_extent){ rd->pool_addr + ext[i].off,
							   ext[i].len, rd->pool_mr->rkey };
		g->ready = g->size;
		rc = 0;
	}
	if (rc)
		goto fail;
	*out = g;
	return 0;
fail:
	if (g)
		grant_free(g);
	return rc;
}

static struct srv_grant *grant_find(struct rdma_srv *s, uint64_t lease)
{
	struct srv_grant *g = s->grants;

	while (g && g->lease != lease)
		g = g->next;
	return g;
}

/* Under s->lock: lease's grant, *ng if none is bound yet (then it is,
 * and *ng is ours), for out and ready. */
static int grant_settle(struct rdma_srv *s, uint64_t lease, uint32_t n, struct srv_grant **ng,
			struct proto_extent *out, uint64_t *ready)
{
	struct srv_grant *g = grant_find(s, lease);
	int rc = 0;

	if (!s->id)
		return -ENOTCONN;
	if (g && g->asked != n)
		return -EINVAL;         /* a lease names one object, whose extents stay */
	if (!g && !*ng)
		return -EIO;            /* it went with its pair meanwhile */
	if (!g && !(s->rd->windows && (rc = bind_windows(s, *ng)))) {
		g = *ng;
		g->next = s->grants;
		s->grants = g;
		*ng = NULL;
	}
	if (rc)
		return rc;
	memcpy(out, g->out, g->n * sizeof(*out));
	*ready = g->ready;
	return (int)g->n;
}

int rdma_srv_grant(struct rdma_srv *s, uint64_t lease, const struct xport_extent *ext,
		   uint32_t n, uint64_t upto, struct proto_extent *out, uint64_t *ready)
{
	struct srv_grant *g, *ng = NULL;
	int rc = 0;

	/* Copies into the stage are made without the lock, which the cm
	 * thread takes for every pair's events: they take a while.  This
	 * connection's requests come one at a time, so no other grant of
	 * lease is made or filled meanwhile; one that the pair's end drops
	 * meanwhile is left to us (filling). */
	pthread_mutex_lock(&s->lock);
	if ((g = grant_find(s, lease)) && g->asked == n && g->stage)
		g->filling = 1;
	pthread_mutex_unlock(&s->lock);
	if (!g)
		rc = grant_new(s->rd, lease, ext, n, upto, &ng);
	else if (g->filling)
		rc = stage_fill(s->rd, g, ext, n, upto);
	pthread_mutex_lock(&s->lock);
	if (g && g->filling) {
		g->filling = 0;
		if (g->dropped)
			grant_free(g);
	}
	if (!rc)
		rc = grant_settle(s, lease, n, &ng, out, ready);
	pthread_mutex_unlock(&s->lock);
	if (ng)
		grant_free(ng);
	return rc;
}

/* Invalidates g's windows on the pair, if it still works; a pair in error
 * takes no READs, and dealloc ends them either way. */
static void unbind_windows(struct rdma_srv *s, struct srv_grant *g)
{
	struct ibv_send_wr wr[SRV_WR];

	for (uint32_t i = 0; s->id && g->mw && i < g->n;) {
		int k = 0;
		for (; k < SRV_WR && i < g->n; k++, i++)
			wr[k] = (struct ibv_send_wr){
				.next = k + 1 < SRV_WR && i + 1 < g->n ? &wr[k + 1] : NULL,
				.opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
				.invalidate_rkey = g->out[i].rkey,
			};
		if (srv_post(s, wr, k))
			break;
	}
}

void rdma_srv_release(struct rdma_srv *s, uint64_t lease)
{
	struct srv_grant *g = NULL;

	pthread_mutex_lock(&s->lock);
	for (struct srv_grant **pp = &s->grants; *pp; pp = &(*pp)->next)
		if ((*pp)->lease == lease) {
			g = *pp;
			*pp = g->next;
			break;
		}
	if (g) {
		unbind_windows(s, g);
		grant_free(g);
	}
	pthread_mutex_unlock(&s->lock);
}
