/* rdma_read.c - the reader's side: a queue pair to each owner, the grants
 * its reads run under, and the READs themselves.
 *
 * A pull names its lease.  The first pull under a lease asks the owner
 * for a grant (rdma.h) and later ones reuse it, so a streamed read costs
 * the owner one message per lease, not one per piece.  A pull's READs are
 * queued on its owner's pair and posted as the pair has room (rd->ring at
 * once, rd->wr_max bytes each); every READ is signalled, so completions
 * come in the order of posting and a pull's bytes land in order.
 *
 * Two threads: the completion thread, woken by the completion channel,
 * takes completions and posts the next READs at once; the checker checks
 * each chunk a pull has landed against the owner's hash, reports it, and
 * ends pulls.  Checking is the reader's one cost per byte, and apart from
 * the posting it overlaps the device's work (with soft-RoCE, that work
 * runs on the CPU of the thread that posts).
 *
 * An owner whose pool the device cannot read copies the object into a
 * stage as far as its grant's upto asks (rdma.h): a pull then asks again,
 * a step at a time, while the READs of the step before run, and posts
 * none beyond what the latest grant says is ready.
 *
 * A pull ends only when none of its READs is in flight, so the caller may
 * reuse its buffer at once; a pair that fails is put in the error state,
 * which flushes every READ on it, and connected again by the next pull.
 * Its pulls end with ECONNRESET, not EIO: nothing is known to be wrong
 * with the object's bytes, which the caller may get another way.
 * Grants belong to one connection of the pair (type-2 windows are bound
 * to the owner's end of it): a new connection asks again.
 */
#define _GNU_SOURCE
#include "rdma_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>      /* libxxhash's AVX2/AVX-512 paths, chosen at run time */
#endif

#include "clock.h"

/* What a pull asks the owner to copy into its stage at a time: long
 * against the GRANT's round trip, short against a large object's READs,
 * which overlap the next step's copy. */
#define STAGE_STEP (8u << 20)

/* One GRANTED, as the owner sent it; never changed once made but for
 * ready, which later GRANTs of its lease on its connection move on (under
 * the lock). */
struct rgrant {
	unsigned refs;                  /* its lease's, and each pull's */
	unsigned gen;                   /* the pair's connection it is for */
	uint64_t size, ready, first;
	uint32_t nhash, next;
	uint64_t *hash;
	struct proto_extent *ext;
	uint64_t *lstart;               /* where each extent starts in the object */
};

struct rlease {
	struct rlease *next;
	uint64_t id, oid;
	unsigned pulls;                 /* in flight */
	int released;                   /* RELEASE once pulls drop to 0 */
	int gone;                       /* the owner let go with the connection */
	int failed;                     /* a pull under it failed */
	struct rgrant *g;               /* the newest */
};

struct rpull {
	struct rlink *l;
	struct rlease *ls;
	struct rgrant *g;
	uint64_t off, len, stride, total;
	uint64_t end, limit;            /* in the object: past its last byte; readable */
	int growing;                    /* pull_grow asks for more: it must not end */
	int checks;                     /* chunks checked against the grant's hashes */
	uint64_t posted, landed, verified;      /* positions in the pull's stream */
	unsigned inflight;              /* READs posted, not completed */
	int err, queued, bad, touched;  /* touched: in rd's queue for the checker */
	struct iovec *dst;
	uint32_t *lkey;
	int ndst, di, vi;               /* cursors into dst: posting, verifying */
	uint64_t dskip, vskip;
	xport_progress_fn progress;
	void *arg;
	struct rpull *qnext, *tnext;
};

/* ---------------------------------------------------------------- grants */

static void grant_put(struct rgrant *g)
{
	if (g && !--g->refs) {
		free(g->hash);
		free(g->ext);
		free(g->lstart);
		free(g);
	}
}

/* A GRANTED, on the control connection's receiving thread. */
static void grant_got(void *arg, const struct proto_msg *m)
{
	struct rgrant **out = arg, *g;
	uint32_t nh = m->u.granted.nhash, ne = m->u.granted.next;

	if (m->type != PT_GRANTED || !(g = calloc(1, sizeof(*g))))
		return;
	g->refs = 1;
	g->size = m->u.granted.size;
	g->ready = m->u.granted.ready;
	g->first = m->u.granted.first;
	g->nhash = nh;
	g->next = ne;
	g->hash = malloc((nh ? nh : 1) * sizeof(*g->hash));
	g->ext = malloc((ne ? ne : 1) * sizeof(*g->ext));
	g->lstart = malloc((ne ? ne : 1) * sizeof(*g->lstart));
	if (!g->hash || !g->ext || !g->lstart) {
		grant_put(g);
		return;
	}
	for (uint32_t i = 0; i < nh; i++)
		g->hash[i] = proto_granted_hash(m, i);
	for (uint64_t i = 0, at = 0; i < ne; at += g->ext[i++].len) {
		g->ext[i] = proto_granted_ext(m, (uint32_t)i);
		g->lstart[i] = at;
	}
	grant_put(*out);                /* a frame twice: the second wins */
	*out = g;
}

static uint32_t ext_find(const struct rgrant *g, uint64_t off)
{
	uint32_t lo = 0, hi = g->next;

	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;
		if (g->lstart[mid] <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static struct rlease *lease_find(struct rlink *l, uint64_t id)
{
	for (struct rlease *ls = l->leases; ls; ls = ls->next)
		if (ls->id == id)
			return ls;
	return NULL;
}

static void lease_unlink(struct rlink *l, struct rlease *ls)
{
	for (struct rlease **pp = &l->leases; *pp; pp = &(*pp)->next)
		if (*pp == ls) {
			*pp = ls->next;
			return;
		}
}

/* A lease is over (released, no pull in flight): under the lock.  With
 * OMNIFS_TEST_STALE_RKEY the link remembers the first extent of one that
 * read all it asked, and posts one READ of it before the next pull's: the
 * owner has had the RELEASE by then (see post_stale). */
static void lease_free(struct rdma *rd, struct rlink *l, struct rlease *ls)
{
	if (!ls->gone)
		lease_unlink(l, ls);
	if (rd->test_stale && ls->g && ls->g->next && !ls->gone && !ls->failed) {
		l->stale.addr = ls->g->ext[0].addr;
		l->stale.rkey = ls->g->ext[0].rkey;
		l->stale.armed = 1;
	}
	grant_put(ls->g);
	free(ls);
}

/* Whether g holds the hashes of chunks [first, last]. */
static int grant_covers(const struct rgrant *g, uint64_t first, uint64_t last)
{
	return first >= g->first && last < g->first + g->nhash;
}

/* The chunks [*first, *last] a pull of r checks, or 0 if it checks none. */
static int pull_chunks(const struct xport_range *r, int checks, uint64_t *first, uint64_t *last)
{
	if (!checks)
		return 0;
	*first = r->off / PROTO_CHUNK;
	*last = (r->off + r->len - 1) / PROTO_CHUNK;
	return 1;
}

/* The owner's answer to a grant: ENOTCONN (no pair of ours there, yet or
 * any more) and EIO (its windows would not bind on a pair in error) are
 * the pair's failure, as a READ in error is. */
static int grant_failed(int rc)
{
	return rc == -ENOTCONN || rc == -EIO ? -ECONNRESET : rc;
}

/* A pull let go of its lease: under the lock.  1 if RELEASE must go now.
 * A lease the owner dropped (gone) is off the link's list, where no
 * rdma_release can find it: its last pull frees it, released or not. */
static int lease_unpull(struct rdma *rd, struct rlink *l, struct rlease *ls)
{
	if (--ls->pulls || !(ls->released || ls->gone))
		return 0;
	int send = !ls->gone;
	lease_free(rd, l, ls);
	return send;
}

/* Under the lock: the owner dropped the link's leases with its
 * connection (or we close).  Those a pull holds go with its end. */
static void leases_drop(struct rdma *rd, struct rlink *l)
{
	for (struct rlease *ls = l->leases, *next; ls; ls = next) {
		next = ls->next;
		ls->gone = 1;
		if (!ls->pulls)
			lease_free(rd, l, ls);
	}
	l->leases = NULL;
}

/* A grant for r under its lease that this connection of the pair can
 * use: cached, or asked for (the lock is dropped meanwhile).  Both the
 * lease and the grant are held for the pull. */
static int lease_grant(struct rdma *rd, struct rlink *l, const struct xport_range *r, int checks,
		       uint64_t upto, struct rlease **lsp, struct rgrant **gp)
{
	uint64_t first = 0, last = 0;
	int want = pull_chunks(r, checks, &first, &last);
	struct rgrant *ng = NULL;
	struct rlease *ls;
	int rc;

	pthread_mutex_lock(&rd->lock);
	if (!(ls = lease_find(l, r->lease))) {
		if (!(ls = calloc(1, sizeof(*ls)))) {
			pthread_mutex_unlock(&rd->lock);
			return -ENOMEM;
		}
		*ls = (struct rlease){ .next = l->leases, .id = r->lease, .oid = r->oid };
		l->leases = ls;
	}
	if (ls->oid != r->oid || ls->released) {
		pthread_mutex_unlock(&rd->lock);
		return -EINVAL;         /* one lease is one read of one object */
	}
	ls->pulls++;
	unsigned gen = l->gen;
	if (ls->g && ls->g->gen == gen && (!want || grant_covers(ls->g, first, last))) {
		ls->g->refs++;
		*lsp = ls;
		*gp = ls->g;
		pthread_mutex_unlock(&rd->lock);
		return 0;
	}
	pthread_mutex_unlock(&rd->lock);
	rc = grant_failed(rd->c.grant(rd->c.ctx, l->peer, r->oid, r->lease, first,
				      want ? PROTO_GRANT_HASHES : 0, upto, grant_got, &ng));
	pthread_mutex_lock(&rd->lock);
	if (!rc && !ng)
		rc = -EIO;      /* no answer we can use */
	if (!rc && (l->gen != gen || l->state != L_UP))
		rc = -ECONNRESET;       /* the pair failed, or connected again */
	if (!rc && want && !grant_covers(ng, first, last))
		rc = -EIO;      /* it did not give the hashes asked for */
	if (rc) {
		int send = lease_unpull(rd, l, ls);
		pthread_mutex_unlock(&rd->lock);
		grant_put(ng);
		if (send)
			rd->c.release(rd->c.ctx, l->peer, r->lease);
		return rc;
	}
	ng->gen = gen;
	grant_put(ls->g);
	ls->g = ng;
	ng->refs++;             /* the pull's; the first is the lease's */
	*lsp = ls;
	*gp = ng;
	pthread_mutex_unlock(&rd->lock);
	return 0;
}

static void link_fill(struct rdma *rd, struct rlink *l);

int rdma_release(struct rdma *rd, int peer, uint64_t lease)
{
	struct rlink *l = &rd->links[peer];
	int now = 1;

	pthread_mutex_lock(&rd->lock);
	struct rlease *ls = lease_find(l, lease);
	if (ls) {
		ls->released = 1;
		if (ls->pulls)
			now = 0;
		else
			lease_free(rd, l, ls);
	}
	if (!now)
		link_fill(rd, l);       /* its queued pulls stop posting */
	pthread_mutex_unlock(&rd->lock);
	return now;
}

/* ---------------------------------------------------------------- links */

/* Under the lock: a connected pair failed.  Its READs flush (the thread
 * sees them complete in error), then it is torn down. */
static void link_break(struct rdma *rd, struct rlink *l, const char *why)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (l->state == L_CONNECTING) {
		l->state = L_FAILED;
		snprintf(l->why, sizeof(l->why), "%s", why);
		pthread_cond_broadcast(&l->cond);
		return;
	}
	if (l->state != L_UP)
		return;
	l->state = L_BROKEN;
	l->last_ns = clock_mono_ns();
	snprintf(l->why, sizeof(l->why), "%s", why);
	if (l->id && l->id->qp)
		ibv_modify_qp(l->id->qp, &a, IBV_QP_STATE);
	if (!rd->closing)
		fprintf(stderr, "omnifs: rdma: queue pair to peer %s failed: %s\n",
			rdma_peer(rd, l->peer), why);
	rdma_wake(rd);
}

void link_cm_event(struct rdma *rd, struct rlink *l, struct rdma_cm_event *e,
		   struct rdma_cm_id **destroy)
{
	struct ibv_qp_init_attr qa = rdma_qp_attr(rd, rd->cq, rd->ring + 2);
	struct rdma_conn_param cp = {
		.private_data = l->token, .private_data_len = PROTO_TOKEN,
		.initiator_depth = (uint8_t)(rd->init_depth > 255 ? 255 : rd->init_depth),
		.retry_count = 7, .rnr_retry_count = 7,
	};
	char why[160];

	(void)destroy;          /* the thread that connected, or the tender, destroys */
	pthread_mutex_lock(&rd->lock);
	if (l->id != e->id) {
		pthread_mutex_unlock(&rd->lock);
		return;         /* a connection this link has left */
	}
	switch (e->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(e->id, RDMA_CONNECT_MS / 2))
			link_break(rd, l, "resolving the route failed");
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (rdma_create_qp(e->id, rd->pd, &qa) || rdma_connect(e->id, &cp)) {
			snprintf(why, sizeof(why), "queue pair: %s", strerror(errno));
			link_break(rd, l, why);
		}
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		l->state = L_UP;
		l->gen++;
		l->why[0] = 0;
		pthread_cond_broadcast(&l->cond);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR: case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE: case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR: case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		snprintf(why, sizeof(why), "%s", rdma_event_str(e->event));
		link_break(rd, l, why);
		break;
	default:
		break;
	}
	pthread_mutex_unlock(&rd->lock);
}

/* Connects l's pair if it is down, or waits for whoever is at it.
 * 0 once it is up, or -errno with l->why. */
static int link_connect(struct rdma *rd, struct rlink *l)
{
	struct timespec ts = clock_deadline_in(RDMA_CONNECT_MS + rd->c.dead_ms + 1000);
	struct rdma_cm_id *id = NULL;
	int rc = 0;

	pthread_mutex_lock(&rd->lock);
	while ((l->state == L_CONNECTING || l->state == L_BROKEN || l->state == L_FAILED) && !rc)
		rc = pthread_cond_timedwait(&l->cond, &rd->lock, &ts);
	if (rc || l->state == L_UP || !l->dst.ss_family) {
		rc = l->state == L_UP ? 0 : -ENOTCONN;
		pthread_mutex_unlock(&rd->lock);
		return rc;
	}
	if (rd->test_dark_left) {       /* as a connect that times out, at once */
		rd->test_dark_left--;
		snprintf(l->why, sizeof(l->why), "test: the fabric is dark (OMNIFS_TEST_RDMA_DARK)");
		pthread_mutex_unlock(&rd->lock);
		return -ENOTCONN;
	}
	if (rdma_create_id(rd->ch, &id, l, RDMA_PS_TCP)) {
		snprintf(l->why, sizeof(l->why), "rdma_cm: %s", strerror(errno));
		pthread_mutex_unlock(&rd->lock);
		return -ENOTCONN;
	}
	l->id = id;
	l->state = L_CONNECTING;
	if (rdma_resolve_addr(id, (struct sockaddr *)&rd->src, (struct sockaddr *)&l->dst,
			      RDMA_CONNECT_MS / 2))
		link_break(rd, l, "resolving the address failed");
	ts = clock_deadline_in(RDMA_CONNECT_MS);
	while (l->state == L_CONNECTING)
		if (pthread_cond_timedwait(&l->cond, &rd->lock, &ts) == ETIMEDOUT &&
		    l->state == L_CONNECTING)
			link_break(rd, l, "timed out");
	if (l->state == L_UP) {
		pthread_mutex_unlock(&rd->lock);
		return 0;
	}
	l->id = NULL;           /* failed: ours to tear down */
	l->state = L_DOWN;
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&rd->lock);
	rdma_id_destroy(id);
	return -ENOTCONN;
}

int rdma_link_up(struct rdma *rd, int peer, const struct sockaddr *ip, uint16_t port,
		 const uint8_t token[PROTO_TOKEN], char *why, size_t whylen)
{
	struct rlink *l = &rd->links[peer];
	socklen_t len = ip->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						  : sizeof(struct sockaddr_in);
	int rc;

	pthread_mutex_lock(&rd->lock);
	memset(&l->dst, 0, sizeof(l->dst));
	memcpy(&l->dst, ip, len);
	if (ip->sa_family == AF_INET6)
		((struct sockaddr_in6 *)&l->dst)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)&l->dst)->sin_port = htons(port);
	memcpy(l->token, token, PROTO_TOKEN);
	pthread_mutex_unlock(&rd->lock);
	if ((rc = link_connect(rd, l)))
		snprintf(why, whylen, "%s", l->why);
	return rc;
}

void rdma_link_why(struct rdma *rd, int peer, char *why, size_t len)
{
	pthread_mutex_lock(&rd->lock);
	snprintf(why, len, "%s", rd->links[peer].why);
	pthread_mutex_unlock(&rd->lock);
}

void rdma_link_down(struct rdma *rd, int peer)
{
	struct rlink *l = &rd->links[peer];

	pthread_mutex_lock(&rd->lock);
	memset(&l->dst, 0, sizeof(l->dst));     /* no reconnects: no connection to name */
	leases_drop(rd, l);
	l->stale.armed = 0;
	link_break(rd, l, "the peer's connection ended");
	pthread_mutex_unlock(&rd->lock);
}

/* ---------------------------------------------------------------- posting */

static void ring_push(struct rdma *rd, struct rlink *l, struct rpull *p, uint32_t len)
{
	if (!l->count) {        /* the thread sleeps while idle: it must tick now */
		l->last_ns = clock_mono_ns();
		rdma_wake(rd);
	}
	l->ring[(l->head + l->count) % (rd->ring + 1)] = (struct ring_ent){ p, len };
	l->count++;
}

static void dequeue(struct rlink *l, struct rpull *p)
{
	struct rpull *prev = NULL;

	if (!p->queued)
		return;
	for (struct rpull *q = l->q_head; q; prev = q, q = q->qnext)
		if (q == p) {
			*(prev ? &prev->qnext : &l->q_head) = p->qnext;
			if (l->q_tail == p)
				l->q_tail = prev;
			break;
		}
	p->queued = 0;
}

/* Under the lock: p has news (bytes landed, an error) for the checker. */
static void touch(struct rdma *rd, struct rpull *p)
{
	if (p->touched)
		return;
	p->touched = 1;
	p->tnext = NULL;
	*(rd->chk_tail ? &rd->chk_tail->tnext : &rd->chk_head) = p;
	rd->chk_tail = p;
	pthread_cond_signal(&rd->chk_cond);
}

/* Where p's next READ starts in the object. */
static uint64_t pull_at(const struct rpull *p)
{
	return p->off + p->posted / p->len * p->stride + p->posted % p->len;
}

/* Under the lock: p joins the end of l's queue, unless it is in it. */
static void queue_push(struct rlink *l, struct rpull *p)
{
	if (p->queued)
		return;
	p->queued = 1;
	p->qnext = NULL;
	*(l->q_tail ? &l->q_tail->qnext : &l->q_head) = p;
	l->q_tail = p;
}

/* Under the lock: p joins l's queue if it has READs it may post now. */
static void enqueue(struct rlink *l, struct rpull *p)
{
	if (p->posted < p->total && pull_at(p) < p->limit)
		queue_push(l, p);
}

/* p's next READ into wr: at most wr_max bytes, within one piece of the
 * range, what is readable, one extent of the owner's and one buffer of
 * ours. */
static void next_read(struct rdma *rd, struct rlink *l, struct rpull *p,
		      struct ibv_send_wr *wr, struct ibv_sge *sge)
{
	uint64_t obj = pull_at(p), n = p->len - p->posted % p->len;
	uint32_t e = ext_find(p->g, obj);
	uint64_t ein = obj - p->g->lstart[e];

	if (n > p->limit - obj)
		n = p->limit - obj;
	if (n > p->g->ext[e].len - ein)
		n = p->g->ext[e].len - ein;
	if (n > p->dst[p->di].iov_len - p->dskip)
		n = p->dst[p->di].iov_len - p->dskip;
	if (n > rd->wr_max)
		n = rd->wr_max;
	*sge = (struct ibv_sge){ (uintptr_t)p->dst[p->di].iov_base + p->dskip, (uint32_t)n,
				 p->lkey[p->di] };
	*wr = (struct ibv_send_wr){ .wr_id = (uintptr_t)l, .sg_list = sge, .num_sge = 1,
				    .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
				    .wr.rdma = { p->g->ext[e].addr + ein, p->g->ext[e].rkey } };
	p->posted += n;
	if ((p->dskip += n) == p->dst[p->di].iov_len) {
		p->di++;
		p->dskip = 0;
	}
	p->inflight++;
	ring_push(rd, l, p, (uint32_t)n);
	if (p->posted == p->total || pull_at(p) >= p->limit)
		dequeue(l, p);  /* all posted, or what is readable yet */
}

/* Under the lock: a pull whose lease was released (rdma_release: nobody
 * wants its bytes) posts no more READs; it ends once those in flight are
 * in, with ECANCELED. */
static void pull_cancel(struct rdma *rd, struct rlink *l, struct rpull *p)
{
	if (!p->err)
		p->err = -ECANCELED;
	dequeue(l, p);
	touch(rd, p);
}

/* Under the lock: posts what the queued pulls have left, as far as the
 * ring has room.  A post that fails breaks the pair. */
#define POST_BATCH 32
static void link_fill(struct rdma *rd, struct rlink *l)
{
	struct ibv_send_wr wr[POST_BATCH], *bad = NULL;
	struct ibv_sge sge[POST_BATCH];

	while (l->state == L_UP && l->q_head && l->count < rd->ring) {
		int n = 0;
		while (n < POST_BATCH && l->q_head && l->count < rd->ring) {
			if (l->q_head->ls && l->q_head->ls->released) {
				pull_cancel(rd, l, l->q_head);
				continue;
			}
			next_read(rd, l, l->q_head, &wr[n], &sge[n]);
			if (n)
				wr[n - 1].next = &wr[n];
			n++;
		}
		if (!n || !ibv_post_send(l->id->qp, wr, &bad))
			continue;
		/* Those from bad on never went: out of the ring, failed, and
		 * queued again, so that the tender of the broken pair ends them. */
		for (int i = (int)(bad - wr); i < n; i++) {
			struct rpull *p = l->ring[(l->head + l->count - 1) % (rd->ring + 1)].p;
			l->count--;
			p->inflight--;
			if (!p->err)
				p->err = -ECONNRESET;
			queue_push(l, p);
		}
		link_break(rd, l, "posting a READ failed");
	}
}

/* The test's READ under a released lease's rkey (OMNIFS_TEST_STALE_RKEY),
 * posted before a fresh grant's first READ: the owner had the RELEASE
 * before it answered the GRANT, on the same connection. */
static void post_stale(struct rdma *rd, struct rlink *l)
{
	struct ibv_sge sge = { (uintptr_t)rd->scratch, 64, 0 };
	struct ibv_send_wr wr = { .wr_id = (uintptr_t)l, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { l->stale.addr, l->stale.rkey } }, *bad;

	l->stale.armed = 0;
	if (rd->scratch && rdma_lkey(rd, rd->scratch, 64, &sge.lkey) && l->count < rd->ring &&
	    !ibv_post_send(l->id->qp, &wr, &bad))
		ring_push(rd, l, NULL, 0);
}

/* ---------------------------------------------------------------- pulls */

static int pull_check_range(const struct rpull *p, const struct rgrant *g)
{
	uint64_t last = p->end - p->len;       /* where its last piece starts */

	if (p->off >= g->size || last > g->size || p->len > g->size - last)
		return -EINVAL;
	/* A checked pull is of whole chunks: each has its publish-time hash. */
	if (p->checks && p->off + p->len != g->size && p->len % PROTO_CHUNK)
		return -EINVAL;
	return 0;
}

static struct rpull *pull_new(struct rdma *rd, const struct xport_range *r,
			      const struct iovec *dst, int ndst, int checks)
{
	struct rpull *p = calloc(1, sizeof(*p));
	uint64_t room = 0;

	if (!p)
		return NULL;
	p->dst = malloc((size_t)ndst * sizeof(*dst));
	p->lkey = malloc((size_t)ndst * sizeof(*p->lkey));
	if (!p->dst || !p->lkey)
		goto free_p;
	memcpy(p->dst, dst, (size_t)ndst * sizeof(*dst));
	p->ndst = ndst;
	p->off = r->off;
	p->len = r->len;
	p->stride = r->count > 1 ? r->stride : r->len;
	p->total = r->len * r->count;
	p->end = p->off + (r->count - 1) * p->stride + p->len;
	p->checks = checks;
	pthread_mutex_lock(&rd->lock);
	for (int i = 0; i < ndst; i++) {
		room += dst[i].iov_len;
		if (dst[i].iov_len && !rdma_lkey(rd, dst[i].iov_base, dst[i].iov_len, &p->lkey[i]))
			room = 0;       /* not memory a READ may land in */
	}
	pthread_mutex_unlock(&rd->lock);
	if (room >= p->total)
		return p;
free_p:
	free(p->dst);
	free(p->lkey);
	free(p);
	return NULL;
}

static void pull_free(struct rpull *p)
{
	free(p->dst);
	free(p->lkey);
	free(p);
}

/* The owner copies the object into its stage as far as asked: p asks
 * for the next step while the READs of the last one run, until all of
 * its range is readable.  A step goes past p's range where the object
 * does, for the next pull of a stream.  p does not end meanwhile
 * (growing), and a failure ends it as a failed READ would. */
static void pull_grow(struct rdma *rd, struct rlink *l, struct rpull *p,
		      const struct xport_range *r)
{
	int rc = 0;

	pthread_mutex_lock(&rd->lock);
	while (!rc && !p->err && p->limit < p->end) {
		uint64_t upto = p->g->size - p->limit > STAGE_STEP ? p->limit + STAGE_STEP
								  : p->g->size;
		unsigned gen = p->g->gen;
		struct rgrant *ng = NULL;
		pthread_mutex_unlock(&rd->lock);
		rc = grant_failed(rd->c.grant(rd->c.ctx, l->peer, r->oid, r->lease, 0, 0, upto,
					      grant_got, &ng));
		pthread_mutex_lock(&rd->lock);
		if (!rc && (!ng || ng->size != p->g->size || ng->ready < upto))
			rc = -EIO;      /* the owner did not copy it */
		if (!rc && (l->gen != gen || l->state != L_UP))
			rc = -ECONNRESET;       /* the pair failed, or connected again */
		if (!rc && ng->ready > p->g->ready)
			p->g->ready = ng->ready;
		grant_put(ng);
		if (!rc) {
			p->limit = p->g->ready;
			enqueue(l, p);
			link_fill(rd, l);
		}
	}
	if (rc && !p->err) {
		p->err = rc == -ENOENT || rc == -ECONNRESET ? rc : -EIO;
		dequeue(l, p);
	}
	p->growing = 0;
	touch(rd, p);           /* the checker ends it, if that is all */
	pthread_mutex_unlock(&rd->lock);
}

int rdma_pull(struct rdma *rd, int peer, const struct xport_range *r,
	      const struct iovec *dst, int ndst, unsigned flags,
	      xport_progress_fn progress, void *arg)
{
	struct rlink *l = &rd->links[peer];
	int checks = !(flags & XPORT_CALLER_CHECKS);
	struct rpull *p;
	int rc;

	if (!r->lease || !r->len || !r->count || r->len > UINT64_MAX / r->count ||
	    (checks && (r->count != 1 || r->off % PROTO_CHUNK)))
		return -EINVAL;
	if (!(p = pull_new(rd, r, dst, ndst, checks)))
		return -EFAULT;         /* dst is no memory a READ may land in (or none) */
	p->l = l;
	p->progress = progress;
	p->arg = arg;
	if ((rc = link_connect(rd, l))) {
		pull_free(p);
		return rc;
	}
	uint64_t upto = p->off + STAGE_STEP;    /* the owner copies no more than there is */
	if ((rc = lease_grant(rd, l, r, checks, upto, &p->ls, &p->g)) == -ENOBUFS || rc == -EFBIG) {
		pull_free(p);   /* the owner's stage is full: the caller chooses */
		return rc;
	} else if (rc) {
		/* The owner's answer (ENOENT: gone) reaches the caller as a
		 * TCP pull's would: through progress, from the thread. */
		pthread_mutex_lock(&rd->lock);
		p->err = rc == -ENOENT || rc == -ECONNRESET ? rc : -EIO;
		touch(rd, p);
		pthread_mutex_unlock(&rd->lock);
		return 0;
	}
	pthread_mutex_lock(&rd->lock);
	if ((rc = pull_check_range(p, p->g)) || l->state != L_UP || l->gen != p->g->gen) {
		int send = lease_unpull(rd, l, p->ls);
		grant_put(p->g);
		pthread_mutex_unlock(&rd->lock);
		if (send)
			rd->c.release(rd->c.ctx, peer, r->lease);
		pull_free(p);
		return rc ? rc : -ECONNRESET;
	}
	if (l->stale.armed)
		post_stale(rd, l);
	p->limit = p->g->ready;
	int grow = p->growing = p->limit < p->end;
	enqueue(l, p);
	link_fill(rd, l);
	pthread_mutex_unlock(&rd->lock);
	if (grow)
		pull_grow(rd, l, p, r);
	return 0;
}

/* ---------------------------------------------------------------- completions */

/* Unlocked, on the checker: checks the chunks p has landed whole (up to
 * landed) against the grant's hashes.  A chunk that fails marks p bad. */
static void verify(struct rdma *rd, struct rpull *p, uint64_t landed)
{
	const struct rgrant *g = p->g;

	while (p->verified < landed && !p->bad) {
		uint64_t obj = p->off + p->verified, idx = obj / PROTO_CHUNK;
		uint64_t end = (idx + 1) * PROTO_CHUNK < g->size ? (idx + 1) * PROTO_CHUNK : g->size;
		uint64_t stop = end - p->off, left = stop - p->verified;
		XXH3_state_t st;
		if (stop > landed)
			break;
		XXH3_64bits_reset(&st);
		while (left) {
			uint64_t k = p->dst[p->vi].iov_len - p->vskip;
			if (k > left)
				k = left;
			XXH3_64bits_update(&st, (uint8_t *)p->dst[p->vi].iov_base + p->vskip, k);
			left -= k;
			if ((p->vskip += k) == p->dst[p->vi].iov_len) {
				p->vi++;
				p->vskip = 0;
			}
		}
		if (XXH3_64bits_digest(&st) != g->hash[idx - g->first]) {
			p->bad = 1;
			rdma_count(rd, XC_BAD_CHUNKS, 1);
			fprintf(stderr, "omnifs: chunk at %" PRIu64 " read by RDMA from %s "
				"fails its checksum\n", obj, rdma_peer(rd, p->l->peer));
			break;
		}
		p->verified = stop;
	}
}

static void pull_end(struct rdma *rd, struct rpull *p)
{
	struct rlink *l = p->l;
	uint64_t lease = p->ls ? p->ls->id : 0;

	/* Cut short by a release, whatever else befell it: not to be read
	 * on over TCP (xport.c's reroute) under a lease that is over. */
	if (p->err && p->ls) {
		pthread_mutex_lock(&rd->lock);
		if (p->ls->released)
			p->err = -ECANCELED;
		pthread_mutex_unlock(&rd->lock);
	}
	p->progress(p->arg, p->err ? p->verified : p->total, p->err);
	if (!p->ls) {           /* it failed before it had a grant */
		pull_free(p);
		return;
	}
	pthread_mutex_lock(&rd->lock);
	p->ls->failed |= p->err != 0;
	int send = lease_unpull(rd, l, p->ls);
	grant_put(p->g);
	pthread_mutex_unlock(&rd->lock);
	if (send)
		rd->c.release(rd->c.ctx, l->peer, lease);
	pull_free(p);
}

/* Unlocked, on the checker: what p's landed bytes come to.  Only the
 * checker writes verified; landed grows under the lock meanwhile (then p
 * is queued again). */
static void pull_advance(struct rdma *rd, struct rpull *p)
{
	uint64_t before = p->verified, landed;

	pthread_mutex_lock(&rd->lock);
	landed = p->landed;
	pthread_mutex_unlock(&rd->lock);
	if (!p->ls)             /* it failed before it had a grant */
		landed = 0;
	else if (p->checks)
		verify(rd, p, landed);
	else
		p->verified = landed;
	if (p->verified > before) {
		rdma_count(rd, XC_PULLED, p->verified - before);
		rdma_count(rd, XC_PULLED_RDMA, p->verified - before);
	}
	pthread_mutex_lock(&rd->lock);
	if (p->bad && !p->err) {
		p->err = -EIO;
		dequeue(p->l, p);
	}
	/* Queued again meanwhile (its last READ landed): its next turn ends it. */
	int end = !p->queued && !p->inflight && !p->touched && !p->growing &&
		  (p->err || p->verified == p->total);
	pthread_mutex_unlock(&rd->lock);
	if (end)
		pull_end(rd, p);
	else if (p->verified > before && p->verified < p->total)  /* all in: the end says so */
		p->progress(p->arg, p->verified, 0);
}

/* Under the lock: one completion.  A pair we have torn down since can
 * still have some in the queue: they are not ours any more. */
static void complete(struct rdma *rd, const struct ibv_wc *wc)
{
	struct rlink *l = (struct rlink *)(uintptr_t)wc->wr_id;

	if (!l || !l->count || !l->id || !l->id->qp || wc->qp_num != l->id->qp->qp_num)
		return;
	/* A READ that completes after its pair broke counts as flushed, as
	 * it would on a pair that broke in the fabric: its pull ends there. */
	int landed = wc->status == IBV_WC_SUCCESS && l->state == L_UP;
	const char *why = wc->status == IBV_WC_SUCCESS || wc->status == IBV_WC_WR_FLUSH_ERR
			  ? NULL : ibv_wc_status_str(wc->status);
	if (landed && rd->test_drop_every && !--rd->test_drop) {
		rd->test_drop = rd->test_drop_every;
		rd->test_dark_left = rd->test_dark;
		landed = 0;
		why = "test: the fabric dropped its READs (OMNIFS_TEST_RDMA_DROP)";
	}
	struct ring_ent re = l->ring[l->head];
	l->head = (l->head + 1) % (rd->ring + 1);
	l->count--;
	l->last_ns = clock_mono_ns();
	if (!re.p) {            /* the test's READ under a released lease */
		fprintf(stderr, "omnifs: test: a READ under a released lease's rkey: %s\n",
			ibv_wc_status_str(wc->status));
	} else {
		re.p->inflight--;
		if (landed) {
			re.p->landed += re.len;
			rdma_count(rd, XC_RDMA_READS, 1);
		} else if (!re.p->err) {
			re.p->err = -ECONNRESET;
		}
		touch(rd, re.p);
	}
	if (why) {
		rdma_count(rd, XC_RDMA_ERRORS, 1);
		link_break(rd, l, why);
	}
}

static void cq_drain(struct rdma *rd)
{
	struct ibv_wc wc[32];
	int n;

	do {
		pthread_mutex_lock(&rd->lock);
		n = ibv_poll_cq(rd->cq, 32, wc);
		for (int i = 0; i < n; i++)
			complete(rd, &wc[i]);
		for (size_t i = 0; i < rd->c.npeers; i++)
			link_fill(rd, &rd->links[i]);
		pthread_mutex_unlock(&rd->lock);
	} while (n == 32);
}

/* Under the lock: a broken pair's queued pulls fail; once nothing is in
 * flight on it, it goes (its id into *gone, to destroy unlocked).  A pair
 * whose READs make no progress for dead_ms is broken; one that stays
 * broken that long with READs in flight is torn down anyway, which stops
 * the device writing into them. */
static void link_tend(struct rdma *rd, struct rlink *l, struct rdma_cm_id **gone)
{
	uint64_t now = clock_mono_ns(), dead = (uint64_t)rd->c.dead_ms * 1000000u;
	char why[64];

	if (l->state == L_UP && l->count && now - l->last_ns > dead) {
		snprintf(why, sizeof(why), "READs made no progress for %u ms", rd->c.dead_ms);
		rdma_count(rd, XC_RDMA_ERRORS, 1);
		link_break(rd, l, why);
	}
	if (l->state != L_BROKEN)
		return;
	while (l->q_head) {
		struct rpull *p = l->q_head;
		dequeue(l, p);
		if (!p->err)
			p->err = -ECONNRESET;
		touch(rd, p);
	}
	if (l->count && now - l->last_ns <= dead)
		return;
	*gone = l->id;          /* destroying the pair flushes nothing more */
	for (; l->count; l->count--, l->head = (l->head + 1) % (rd->ring + 1)) {
		struct rpull *p = l->ring[l->head].p;
		if (p) {
			p->inflight--;
			if (!p->err)
				p->err = -ECONNRESET;
			touch(rd, p);
		}
	}
	l->id = NULL;
	l->state = L_DOWN;
	pthread_cond_broadcast(&l->cond);
}

/* Tends every pair; 1 if one has READs in flight or is broken, so that
 * the thread must look again within a tick (else it sleeps until woken). */
static int links_tend(struct rdma *rd)
{
	struct rdma_cm_id *gone[64];
	size_t ngone = 0;
	int busy = 0;

	pthread_mutex_lock(&rd->lock);
	for (size_t i = 0; i < rd->c.npeers && ngone < 64; i++) {
		gone[ngone] = NULL;
		link_tend(rd, &rd->links[i], &gone[ngone]);
		ngone += gone[ngone] != NULL;
		busy |= rd->links[i].count || rd->links[i].state == L_BROKEN;
	}
	pthread_mutex_unlock(&rd->lock);
	for (size_t i = 0; i < ngone; i++)
		rdma_id_destroy(gone[i]);
	return busy || ngone == 64;
}

void *rdma_cq_thread(void *arg)
{
	struct rdma *rd = arg;
	struct pollfd pf[2] = { { .fd = rd->cch->fd, .events = POLLIN },
				{ .fd = rd->wake_fd, .events = POLLIN } };

	int busy = 0;

	pthread_setname_np(pthread_self(), "omni-rdma");
	while (!rd->stopping) {
		struct ibv_cq *cq;
		void *ctx;
		uint64_t v;
		/* Idle (nothing in flight), it sleeps until a completion or a wake. */
		if (poll(pf, 2, busy ? RDMA_TICK_MS : -1) > 0) {
			if ((pf[1].revents & POLLIN) && read(rd->wake_fd, &v, sizeof(v)) < 0)
				v = 0;
			if ((pf[0].revents & POLLIN) && !ibv_get_cq_event(rd->cch, &cq, &ctx)) {
				ibv_ack_cq_events(cq, 1);
				ibv_req_notify_cq(cq, 0);
			}
		}
		cq_drain(rd);   /* after re-arming: nothing slips between */
		busy = links_tend(rd);
	}
	return NULL;
}

void *rdma_chk_thread(void *arg)
{
	struct rdma *rd = arg;

	pthread_setname_np(pthread_self(), "omni-rdma-chk");
	pthread_mutex_lock(&rd->lock);
	for (;;) {
		struct rpull *p = rd->chk_head;
		if (!p && rd->chk_stop)
			break;
		if (!p) {
			pthread_cond_wait(&rd->chk_cond, &rd->lock);
			continue;
		}
		if (!(rd->chk_head = p->tnext))
			rd->chk_tail = NULL;
		p->touched = 0;         /* news from now on queues it again */
		pthread_mutex_unlock(&rd->lock);
		pull_advance(rd, p);
		pthread_mutex_lock(&rd->lock);
	}
	pthread_mutex_unlock(&rd->lock);
	return NULL;
}

/* At close: every pair broken, and given the time to flush its READs
 * (the tender bounds that by dead_ms). */
void links_close(struct rdma *rd)
{
	uint64_t until = clock_mono_ns() + ((uint64_t)rd->c.dead_ms + 2000) * 1000000u;
	int busy = 1;

	pthread_mutex_lock(&rd->lock);
	rd->closing = 1;
	for (size_t i = 0; i < rd->c.npeers; i++)
		link_break(rd, &rd->links[i], "closing");
	while (busy && clock_mono_ns() < until) {
		busy = rd->chk_head != NULL;
		for (size_t i = 0; i < rd->c.npeers; i++)
			busy |= rd->links[i].state == L_BROKEN;
		pthread_mutex_unlock(&rd->lock);
		if (busy)
			usleep(10000);
		pthread_mutex_lock(&rd->lock);
	}
	for (size_t i = 0; i < rd->c.npeers; i++)
		leases_drop(rd, &rd->links[i]);         /* a file still open at unmount */
	pthread_mutex_unlock(&rd->lock);
}
