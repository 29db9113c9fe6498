/* xport_rdma.c - this node's RDMA device as the peer connections use it
 * (rdma.h moves the bytes): opened at start behind the listen address,
 * held by each call into it, and, when it goes (a port down, the device
 * removed), let go of and opened again once it is back, by a thread of
 * its own (the tender).  Peers hear of each change through their
 * connections being made again (xport.c's rejoin, REDIAL).
 */
#define _GNU_SOURCE
#include "xport_internal.h"
#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

/* ---------------------------------------------------------------- held by calls */

/* x->rdma for a call into it, or NULL: none, or it went.  Under x->lock. */
struct rdma *rdma_hold_locked(struct xport *x)
{
	struct rdma *rd = x->rdma_gone ? NULL : x->rdma;

	if (rd)
		x->rdma_users++;
	return rd;
}

/* Counts the device's goings and comings back, under x->lock: it goes
 * only while here, and each opening again follows a going.  A handshake
 * that settled how a peer's bytes move across one settled it by what is
 * no more, and the connection is made again (peer_connect,
 * stranger_promote). */
unsigned rdma_turns(const struct xport *x)
{
	return 2 * x->rdma_gen + (unsigned)x->rdma_gone;
}

struct rdma *rdma_hold(struct xport *x)
{
	pthread_mutex_lock(&x->lock);
	struct rdma *rd = rdma_hold_locked(x);
	pthread_mutex_unlock(&x->lock);
	return rd;
}

static void rdma_drop_locked(struct xport *x)
{
	if (!--x->rdma_users)
		pthread_cond_broadcast(&x->cond);       /* the tender waits for this */
}

static void rdma_drop(struct xport *x)
{
	pthread_mutex_lock(&x->lock);
	rdma_drop_locked(x);
	pthread_mutex_unlock(&x->lock);
}

/* The end of what rdma_hold() gave (rd NULL: nothing). */
void rdma_unhold(struct xport *x, struct rdma *rd)
{
	if (rd)
		rdma_drop(x);
}

/* 1 if this node's device went and is not back: why says how. */
int rdma_gone_why(struct xport *x, char *why, size_t len)
{
	pthread_mutex_lock(&x->lock);
	int gone = x->rdma_gone;
	if (gone)
		snprintf(why, len, "%s", x->rdma_why);
	pthread_mutex_unlock(&x->lock);
	return gone;
}

/* Our pair to peer i goes: its READs fail; the owner forgot its grants. */
void link_down(struct xport *x, int i)
{
	struct rdma *rd = rdma_hold(x);

	if (rd)
		rdma_link_down(rd, i);
	rdma_unhold(x, rd);
}

/* An owner-side pair holds x->rdma as long as it lasts. */
void srv_end(struct xport *x, struct rdma_srv *s)
{
	if (!s)
		return;
	rdma_srv_end(s);
	rdma_drop(x);
}

/* ---------------------------------------------------------------- its calls back, its line in the log */

/* RDMA's calls back into the control connection. */
struct grant_call { void (*got)(void *arg, const struct proto_msg *m); void *arg; };

static int grant_reply(void *arg, const struct proto_msg *m)
{
	struct grant_call *g = arg;

	if (m->type == PT_GRANTED)
		g->got(g->arg, m);
	return 0;
}

static int rdma_grant_call(void *ctx, int peer, uint64_t oid, uint64_t lease, uint64_t first,
			   uint32_t n, uint64_t upto,
			   void (*got)(void *arg, const struct proto_msg *m), void *arg)
{
	struct proto_msg m = { .type = PT_GRANT, .u.grant = { oid, lease, first, n, upto } };
	struct grant_call g = { got, arg };

	return xport_call(ctx, peer, &m, grant_reply, &g);
}

static void rdma_release_call(void *ctx, int peer, uint64_t lease)
{
	struct proto_msg m = { .type = PT_RELEASE, .u.release.lease = lease };

	xport_send(ctx, peer, &m);
}

static void rdma_count_call(void *ctx, enum xport_count what, uint64_t n)
{
	ops_count(ctx, what, n);
}

static const char *rdma_name_call(void *ctx, int peer)
{
	return xport_peer_name(ctx, peer);
}

/* The log's line at start: what peers READ of this node, if anything. */
static void rdma_said(struct xport *x)
{
	const char *dev = rdma_device(x->rdma), *swhy = rdma_stage_why(x->rdma), *gwhy;
	int direct = rdma_gpudirect(x->rdma, &gwhy);
	uint64_t size, used;
	char gpu[384];

	snprintf(gpu, sizeof(gpu), "the pool is GPU memory, which %s does not READ "
		 "(no GPUDirect RDMA: %s)", dev, gwhy ? gwhy : "?");
	if (!rdma_serves(x->rdma)) {
		fprintf(stderr, "omnifs: rdma: %s; %s, and there is no stage (%s): this node "
			"reads its peers' objects by RDMA into host memory, and its own go to "
			"peers over tcp\n", dev, gpu, swhy ? swhy : "rdma_stage=0");
		return;
	}
	if (rdma_stage(x->rdma, &size, &used)) {
		fprintf(stderr, "omnifs: rdma: %s; %s: a peer's read of it is copied into a "
			"%llu MiB stage of host memory and READ from there (grants by %s, "
			"rdma_cm port %u)\n", dev, x->c.pool ? "OMNIFS_TEST_STAGE" : gpu,
			(unsigned long long)(size >> 20), rdma_grants(x->rdma), rdma_port(x->rdma));
		return;
	}
	if (swhy)               /* OMNIFS_TEST_STAGE's, on a host pool */
		fprintf(stderr, "omnifs: %s; peers READ the pool itself\n", swhy);
	fprintf(stderr, "omnifs: rdma: %s, the %llu MiB pool registered%s, grants by %s, "
		"rdma_cm port %u\n", dev, (unsigned long long)(x->c.pool_size >> 20),
		direct ? " by a dmabuf of the GPU's memory (GPUDirect RDMA: peers READ it "
			 "with no copy)" : "",
		rdma_grants(x->rdma), rdma_port(x->rdma));
}

/* ---------------------------------------------------------------- a device that goes */

/* rdma's conf.lost, on its rdma_cm thread, which must go on: the tender
 * does the rest.  From here rdma_hold() gives NULL. */
static void rdma_lost_call(void *ctx, const char *why)
{
	struct xport *x = ctx;

	pthread_mutex_lock(&x->lock);
	if (!x->rdma_gone) {
		x->rdma_gone = 1;
		snprintf(x->rdma_why, sizeof(x->rdma_why), "%s", why);
		pthread_cond_signal(&x->tend);
	}
	pthread_mutex_unlock(&x->lock);
}

/* The connections peers READ this node by end, so that they dial again
 * and hear that it offers no RDMA now.  Under x->lock. */
static void servers_redial_locked(struct xport *x)
{
	for (struct xport_conn *c = x->servers; c; c = c->next)
		if (c->srv)
			shutdown(c->fd, SHUT_RDWR);
}

/* This node's device went: every peer read by it is read over TCP now
 * (transport=rdma: not at all), peers that READ this node dial again to
 * a WELCOME that offers no RDMA, and once no call into it is under way
 * it is closed, which lets the kernel finish removing it.  The READs
 * under way fail (EIO), as they would have anyway. */
static void rdma_let_go(struct xport *x)
{
	int xp = x->c.mode == XPORT_RDMA ? XP_NONE : XP_TCP;
	char why[sizeof(x->rdma_why)];

	pthread_mutex_lock(&x->lock);
	snprintf(why, sizeof(why), "%s", x->rdma_why);
	pthread_mutex_unlock(&x->lock);
	fprintf(stderr, "omnifs: rdma: %s: %s until it is back\n", why, xp == XP_TCP ?
		"peers' objects are read over tcp" : "peers' objects cannot be read (transport=rdma)");
	for (size_t i = 0; i < x->npeers; i++) {
		struct peer *p = &x->peers[i];
		pthread_mutex_lock(&x->lock);
		int was = p->xp == XP_RDMA && p->out;
		if (p->xp == XP_RDMA) {
			p->xp = xp;
			snprintf(p->why, sizeof(p->why), "%s", why);
			p->since_ns = clock_wall_ns();
		}
		pthread_mutex_unlock(&x->lock);
		if (was)
			fprintf(stderr, "omnifs: peer %s (%s): transport %s now (%s)\n", p->name,
				p->addr, xp == XP_TCP ? "tcp" : "none", why);
	}
	/* Each call ends within its own bounds (a pull's: about dead_ms). */
	pthread_mutex_lock(&x->lock);
	while (x->rdma_users && !x->stopping) {
		struct timespec ts = clock_deadline_in(100);
		servers_redial_locked(x);       /* a handshake under way may add one */
		pthread_cond_timedwait(&x->cond, &x->lock, &ts);
	}
	struct rdma *rd = x->stopping ? NULL : x->rdma;         /* else xport_destroy's */
	if (rd)
		x->rdma = NULL;
	pthread_mutex_unlock(&x->lock);
	rdma_close(rd);
}

/* Tells c, a peer's connection to us that the caller holds a reference
 * to, that this node's device is back (REDIAL): the peer connects again
 * once its requests here are done, and hears where its pair connects in
 * the WELCOME.  One of an older release, which would not understand, is
 * made to by the end of its connection.  Drops the reference. */
void redial_tell(struct xport *x, struct xport_conn *c)
{
	struct proto_msg m = { .type = PT_REDIAL };

	if (c->hears_redial)
		conn_send(c, 0, &m);    /* a failure ends it: the same, sooner */
	else
		shutdown(c->fd, SHUT_RDWR);
	conn_unref(x, c);
}

/* Peers that could READ this node but read it over TCP hear that its
 * device is back (redial_tell). */
static void servers_redial_back(struct xport *x)
{
	struct xport_conn **tell;
	size_t n = 0;

	pthread_mutex_lock(&x->lock);
	for (struct xport_conn *c = x->servers; c; c = c->next)
		n++;
	tell = calloc(n + 1, sizeof(*tell));
	n = 0;
	for (struct xport_conn *c = x->servers; c; c = c->next) {
		if (!c->reads_rdma || c->srv)
			continue;
		if (tell) {
			c->refs++;
			tell[n++] = c;
		} else {
			shutdown(c->fd, SHUT_RDWR);     /* no memory to list it: the end */
		}
	}
	pthread_mutex_unlock(&x->lock);
	for (size_t i = 0; i < n; i++)
		redial_tell(x, tell[i]);
	free(tell);
}

/* The device, opened again if it is back. */
static void rdma_reopen(struct xport *x)
{
	struct rdma *rd;
	char why[384];

	if (rdma_open(&rd, &x->rconf, why, sizeof(why)))
		return;
	pthread_mutex_lock(&x->lock);
	int stop = x->stopping;
	if (!stop) {
		x->rdma = rd;
		x->rdma_gone = 0;
		x->rdma_gen++;
		snprintf(x->rdma_dev, sizeof(x->rdma_dev), "%s", rdma_device(rd));
	}
	pthread_mutex_unlock(&x->lock);
	if (stop) {
		rdma_close(rd);
		return;
	}
	fprintf(stderr, "omnifs: rdma: %s is back: connecting to every peer that does RDMA "
		"again, to connect queue pairs, each once its requests in flight are done\n",
		rdma_device(rd));
	rdma_said(x);
	/* Both ways: our pairs connect at the handshake, and peers hear
	 * where theirs connect now in its WELCOME.  Not to peers that do no
	 * RDMA (transport=tcp, or no device at their start): nothing would
	 * change, and their new requests would wait for nothing. */
	for (size_t i = 0; i < x->npeers; i++)
		rejoin(x, (int)i, NULL, PROTO_CAP_RDMA, "this node's RDMA device is back");
	servers_redial_back(x);
}

/* Lets go of a device that went, then opens it again each RESOLVE_MS
 * until it is back.  Idle, and woken by nothing else, the rest of the
 * time. */
void *tender_thread(void *arg)
{
	struct xport *x = arg;

	pthread_setname_np(pthread_self(), "omni-rdma-tend");
	pthread_mutex_lock(&x->lock);
	while (!x->stopping) {
		if (x->rdma_gone && x->rdma) {
			pthread_mutex_unlock(&x->lock);
			rdma_let_go(x);
			pthread_mutex_lock(&x->lock);
		} else if (x->rdma_gone) {
			struct timespec ts = clock_deadline_in(RESOLVE_MS);
			pthread_cond_timedwait(&x->tend, &x->lock, &ts);
			if (x->stopping)
				break;
			pthread_mutex_unlock(&x->lock);
			rdma_reopen(x);
			pthread_mutex_lock(&x->lock);
		} else {
			pthread_cond_wait(&x->tend, &x->lock);
		}
	}
	pthread_mutex_unlock(&x->lock);
	return NULL;
}

/* ---------------------------------------------------------------- at start, and as health asks */

/* transport=auto and rdma open the device behind the listen address;
 * auto goes on without one, saying so, and rdma fails. */
int open_rdma(struct xport *x, char *err, size_t errlen)
{
	struct rdma_conf rc = {
		.listen = x->c.listen, .pool = x->c.pool, .pool_size = x->c.pool_size,
		.stage_from = x->c.stage_from, .stage_size = x->c.stage_size,
		.npeers = x->npeers, .dead_ms = x->c.dead_ms, .ctx = x,
		.grant = rdma_grant_call, .release = rdma_release_call, .count = rdma_count_call,
		.peer_name = rdma_name_call, .lost = rdma_lost_call,
	};
	char why[384];
	int rc_;

	x->caps = PROTO_CAP_TCP | PROTO_CAP_REDIAL;
	if (x->c.mode == XPORT_TCP)
		return 0;
	rc_ = rdma_open(&x->rdma, &rc, why, sizeof(why));
	if (rc_) {
		x->rdma = NULL;
		if (x->c.mode == XPORT_RDMA) {
			snprintf(err, errlen, "transport=rdma: %s", why);
			return rc_ == -ENODEV ? -EINVAL : rc_;  /* asked of a machine without */
		}
		fprintf(stderr, "omnifs: %s; every peer's bytes move over tcp\n", why);
		return 0;
	}
	if (x->c.mode == XPORT_RDMA && !rdma_serves(x->rdma) && rdma_stage_why(x->rdma)) {
		/* asked for, and peers would read nothing of ours: say so now */
		snprintf(err, errlen, "transport=rdma: %s", rdma_stage_why(x->rdma));
		rdma_close(x->rdma);
		x->rdma = NULL;
		return -ENOMEM;
	}
	x->caps |= PROTO_CAP_RDMA;
	x->rconf = rc;
	snprintf(x->rdma_dev, sizeof(x->rdma_dev), "%s", rdma_device(x->rdma));
	rdma_said(x);
	return 0;
}

int xport_rdma(struct xport *x, struct xport_rdma_info *out)
{
	struct rdma *rd = rdma_hold(x);

	pthread_mutex_lock(&x->lock);
	snprintf(out->device, sizeof(out->device), "%s", x->rdma_dev);
	snprintf(out->gone, sizeof(out->gone), "%s", x->rdma_gone ? x->rdma_why : "");
	pthread_mutex_unlock(&x->lock);
	out->grants = rd ? rdma_grants(rd) : NULL;
	rdma_unhold(x, rd);
	return rd ? 0 : -ENODEV;
}

int xport_rdma_gpudirect(struct xport *x)
{
	struct rdma *rd = rdma_hold(x);
	int direct = rd && rdma_gpudirect(rd, NULL);

	rdma_unhold(x, rd);
	return direct;
}

int xport_rdma_stage(struct xport *x, uint64_t *size, uint64_t *used)
{
	struct rdma *rd = rdma_hold(x);
	int rc = rd && rdma_stage(rd, size, used) ? 0 : -ENODEV;

	rdma_unhold(x, rd);
	return rc;
}
