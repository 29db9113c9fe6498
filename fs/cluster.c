/* cluster.c - ns across nodes, over the peers of xport (cluster.h says
 * what it offers).  A peer's requests are served beside it, in
 * cluster_serve.c; cluster_internal.h is what the two share.  Here, in
 * this order:
 *
 *   ns hooks   what ns tells the cluster: a publish announced and an
 *              object of ours gone, a claim where an edge's claims meet,
 *              a removal or a complete read told to the owner, a fetch or
 *              a stream's window pulled, a key asked for again;
 *   views      the pulls of a view's pieces from their owners, each
 *              owner's lease held until the view is done;
 *   peers      a peer up: told again what it should know of ours; down:
 *              its objects leave our listings;
 *   asking     our questions (a key, an edge's listing, EXISTS), what is
 *              owed to a peer that was down (in memory, and in state_dir's
 *              log for a restart), cleanup, and the relist thread, which
 *              lists again what a peer that came up owns on our stages'
 *              edges, and asks again for the keys readers here wait for;
 *   lifecycle
 */
#define _GNU_SOURCE
#include "cluster_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>      /* libxxhash's AVX2/AVX-512 paths, chosen at run time */
#endif

#include "lease.h"
#include "loop.h"
#include "ns.h"
#include "owedlog.h"
#include "stats.h"
#include "subs.h"
#include "../kvfmt/kvfmt.h"
#include "../transport/auth.h"
#include "../transport/clock.h"
#include "../transport/pool.h"

_Static_assert(NS_CHUNK == PROTO_CHUNK, "chunk hashes are per DATA frame");
_Static_assert(NS_INLINE_MAX == PROTO_INLINE_MAX, "inline objects fit an announce");
_Static_assert(KV_HDR_MAX == PROTO_KVHDR_MAX, "KV headers fit an announce");
_Static_assert(NAME_STAGE_MAX == PROTO_NAME_MAX && NAME_KEY_MAX == PROTO_KEY_MAX,
	       "names travel whole");


static void owe(struct cluster *cl, int peer, const struct proto_msg *m);

static int stage_in(const char (*stages)[NAME_STAGE_MAX + 1], size_t n, const char *to)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(stages[i], to))
			return 1;
	return 0;
}

int cluster_hosts(const struct cluster *cl, const char *to)
{
	return stage_in(cl->self.stages, cl->self.n, to);
}

int cluster_peer_hosts(const struct cluster *cl, int peer, const char *to)
{
	return peer >= 0 && (size_t)peer < cl->npeers &&
	       stage_in(cl->hosts[peer].stages, cl->hosts[peer].n, to);
}

void to_proto(const struct ns_objinfo *o, struct proto_obj *p)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->from, sizeof(p->from), "%s", o->from);
	snprintf(p->to, sizeof(p->to), "%s", o->to);
	snprintf(p->key, sizeof(p->key), "%s", o->key);
	p->oid = o->oid;
	p->size = o->size;
	p->xxh3 = o->xxh3;
	p->reads = o->reads;
	p->published_ns = o->published_ns;
	p->readers = o->readers < 0 ? 0 : o->readers;
	p->uid = o->uid;
	p->gid = o->gid;
	p->kvhdr = o->kvhdr;
	p->kvhdrlen = o->kvhdr ? o->kvhdr_len : 0;
	p->excl = o->excl != 0;         /* a claim's; an announce's decided: announce_to */
}

struct ns_objinfo from_proto(const struct proto_obj *p)
{
	return (struct ns_objinfo){
		.from = p->from, .to = p->to, .key = p->key, .oid = p->oid, .size = p->size,
		.xxh3 = p->xxh3, .reads = p->reads, .published_ns = p->published_ns,
		.readers = p->readers, .uid = p->uid, .gid = p->gid, .data = p->data,
		.kvhdr = p->kvhdr, .kvhdr_len = p->kvhdrlen, .excl = p->excl,
		.decided = p->decided,
	};
}

/* Tests: a message served late, as by a daemon too busy to keep up. */
void test_hold(unsigned ms, const char *what, const char *key)
{
	fprintf(stderr, "omnifs: test: holding the %s of %s for %u ms\n", what, key, ms);
	usleep(ms * 1000u);
	fprintf(stderr, "omnifs: test: held the %s of %s\n", what, key);
}

/* ---------------------------------------------------------------- ns hooks */

static size_t arbiter(const struct cluster *cl, const char *from, const char *to);

/* o, ours, to peer.  Decided where it was claimed, or where claims meet
 * (arbiter): a writer there of its key that had not closed lost to it,
 * and one on the peer loses too, or the peer's readers would wait for
 * bytes that can never be published while every other node has these. */
static void announce_to(struct cluster *cl, int peer, const struct ns_objinfo *o)
{
	struct proto_msg m = { .type = PT_ANNOUNCE };

	to_proto(o, &m.u.obj);
	m.u.obj.decided = o->claimed || arbiter(cl, o->from, o->to) == cl->npeers;
	if (o->data) {
		m.u.obj.data = o->data;
		m.u.obj.datalen = (uint32_t)o->size;
	}
	xport_send(cl->x, peer, &m);    /* a peer that is down hears at rejoin */
}

void cluster_reap(struct cluster *cl)
{
	subs_reap(cl->subs);
}

/* What this node says to peers on its own (asks, claims, removals) comes
 * after the news its calls queued: a reader's complete read is told to
 * the owner after the reader's answer (ns_flush), yet before its next
 * lookup or listing, which must not find the object again. */
static void news_first(struct cluster *cl)
{
	if (cl->ns)
		ns_deliver(cl->ns);
}

static void hook_published(void *ctx, const struct ns_objinfo *o)
{
	struct cluster *cl = ctx;
	char *tell = calloc(cl->npeers + 1, 1);

	if (!tell)
		return;
	for (size_t i = 0; i < cl->npeers; i++)
		tell[i] = (char)stage_in(cl->hosts[i].stages, cl->hosts[i].n, o->to);
	subs_take(cl->subs, o->from, o->to, o->key, tell);
	for (size_t i = 0; i < cl->npeers; i++)
		if (tell[i] && (int)i + 1 != o->claimed)        /* it has it */
			announce_to(cl, (int)i, o);
	free(tell);
}

/* One message where an O_EXCL put to a stage on one other node took three
 * (EXISTS, its answer, the announce): the host takes the object unless it knows
 * of one of that name (it hears of every one published on the edge), and
 * its readers have it at once.  A claim that went out and got no answer
 * may have been taken: it is taken back (GONE).  Without an answer the put
 * goes on as an O_EXCL create does without a host to ask. */
static int hook_claim(void *ctx, int peer, const struct ns_objinfo *o)
{
	struct cluster *cl = ctx;
	struct proto_msg m = { .type = PT_CLAIM };

	news_first(cl);
	to_proto(o, &m.u.obj);
	if (o->data) {
		m.u.obj.data = o->data;
		m.u.obj.datalen = (uint32_t)o->size;
	}
	int rc = xport_call(cl->x, peer, &m, NULL, NULL);
	if (rc == 0 || rc == -EEXIST)
		return rc;
	m.type = PT_GONE;
	m.u.obj.data = NULL;
	m.u.obj.datalen = 0;
	xport_send(cl->x, peer, &m);
	return cluster_exists(cl, o->from, o->to, o->key) ? -EEXIST : rc;
}

struct reask {
	struct reask *next;
	unsigned wait_ms;
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1], key[NAME_KEY_MAX + 1];
};

/* Our object of a key went unpublished (its claim refused, its writer
 * killed, its close failed) after another node's was refused here while
 * ours was being written (to a host of <to>, or for a reader here that
 * waits on the key; ours stayed, remote_add), or while readers here wait
 * for it; or another node's object left while readers here waited for
 * its bytes: asked for now, or the readers would wait for an announce
 * that came and went (a host, which asks nobody, would never have it),
 * or, on a node that hosts no <to>, for one that nobody tells them of.
 * The relister asks: an ask waits for the peers' answers, and the
 * threads that drop an object (a peer's GONE, a pull's end) must not. */
static void hook_reask(void *ctx, const char *from, const char *to, const char *key,
		       unsigned wait_ms)
{
	struct cluster *cl = ctx;
	struct reask *r = malloc(sizeof(*r)), **pp;

	if (!r) {
		fprintf(stderr, "omnifs: out of memory: readers of a key wait for its announce\n");
		return;
	}
	r->next = NULL;
	r->wait_ms = wait_ms;
	snprintf(r->from, sizeof(r->from), "%s", from);
	snprintf(r->to, sizeof(r->to), "%s", to);
	snprintf(r->key, sizeof(r->key), "%s", key);
	pthread_mutex_lock(&cl->lock);
	for (pp = &cl->reasks; *pp; pp = &(*pp)->next)
		;               /* in order: a few at a time, rarely */
	*pp = r;
	pthread_cond_signal(&cl->relist_cond);
	pthread_mutex_unlock(&cl->lock);
}

/* Every peer may have learnt of it (by asking), so every peer hears, but
 * the one whose REMOVE it was where that one had heard all we sent it
 * when it asked: it forgot the object then, and nothing we said of it
 * since can bring it back there (events go out in order: an announce of
 * it queued before this went before it).  An rm of 100k names from b
 * made b hear 100k GONEs back, one message each.  Held for the next,
 * as a REMOVE is (an rm of many, here or asked by a peer, says them in
 * a few sends). */
static void hook_gone(void *ctx, const struct ns_objinfo *o)
{
	struct cluster *cl = ctx;
	struct proto_msg m = { .type = PT_GONE };
	int asker = o->asker.peer - 1;

	if (asker >= 0 && !xport_heard_all(cl->x, asker, o->asker.conn, o->asker.heard))
		asker = -1;
	to_proto(o, &m.u.obj);
	for (size_t i = 0; i < cl->npeers; i++)
		if ((int)i != asker)
			xport_hold(cl->x, (int)i, &m);
}

/* A message its peer must act on once, whatever becomes of the connection
 * it goes on: told, and owed again (op_peer_up) where the connection went
 * before the answer came, for the peer may not have seen it.  Told twice,
 * a REMOVE of an oid removes nothing more, and a CONSUMED counts once by
 * its read's name.  how: xport_tell's.  0, or -EHOSTDOWN (not
 * connected; XPORT_CONNECT: after trying) and nothing owed. */
struct told { struct cluster *cl; int peer, paid; struct proto_msg m; };

static void paid_end(struct cluster *cl);

static void told_end(void *arg, int err)
{
	struct told *t = arg;

	if (err == -EIO)
		owe(t->cl, t->peer, &t->m);
	if (t->paid)
		paid_end(t->cl);
	free(t);
}

/* paid: a message that was owed (pay), whose end the log waits for. */
static int tell_as(struct cluster *cl, int peer, const struct proto_msg *m, unsigned how,
		   int paid)
{
	struct told *t = malloc(sizeof(*t));
	int rc = -ENOMEM;

	if (!t)
		return rc;
	*t = (struct told){ cl, peer, paid, *m };
	if (paid) {
		pthread_mutex_lock(&cl->lock);
		cl->paying++;
		pthread_mutex_unlock(&cl->lock);
	}
	if ((rc = xport_tell(cl->x, peer, m, how, told_end, t))) {
		if (paid)
			paid_end(cl);
		free(t);
	}
	return rc;
}

static int tell(struct cluster *cl, int peer, const struct proto_msg *m, unsigned how)
{
	return tell_as(cl, peer, m, how, 0);
}

static void hook_consumed(void *ctx, int owner, uint64_t oid, const struct ns_cover *cv)
{
	struct cluster *cl = ctx;
	struct proto_msg m = { .type = PT_CONSUMED, .u.consumed = { oid, 0, 0, 0, 0 } };

	if (cv && cv->of) {
		m.u.consumed.first = cv->first;
		m.u.consumed.n = cv->n;
		m.u.consumed.of = cv->of;
	}
	m.u.consumed.rid = ns_lease_id(cl->ns);        /* a name no other read here has */
	if (cl->consumed_delay_ms)
		usleep(cl->consumed_delay_ms * 1000u);
	if (tell(cl, owner, &m, 0))
		owe(cl, owner, &m);     /* or it keeps the object, and tells us of it again */
}

/* A fetch runs under a lease of its own, so that its owner keeps the
 * object until the last byte is in, whichever transport moves it.  An
 * object removed under it with no reader left here is not worth its
 * bytes: the lease goes at once, which stops them (xport_release). */
struct fetch { struct cluster *cl; void *token; uint64_t size, lease; int owner, released; };

/* The transport reports the end exactly once: an error, or all bytes in. */
static void fetch_progress(void *arg, uint64_t upto, int err)
{
	struct fetch *f = arg;
	int end = err || upto >= f->size;
	int unwanted = ns_fetch_progress(f->cl->ns, f->token, upto, err);

	if ((end || unwanted) && !f->released) {
		f->released = 1;
		xport_release(f->cl->x, f->owner, f->lease);
	}
	if (end)
		free(f);
}

static int hook_fetch(void *ctx, int owner, uint64_t oid, uint64_t size,
		      const struct iovec *dst, int n, void *token)
{
	struct cluster *cl = ctx;
	struct fetch *f = malloc(sizeof(*f));
	int rc;

	if (!f)
		return -ENOMEM;
	*f = (struct fetch){ cl, token, size, ns_lease_id(cl->ns), owner, 0 };
	struct xport_range r = { .oid = oid, .len = size, .stride = 1, .lease = f->lease,
				 .count = 1 };
	if ((rc = xport_pull(cl->x, owner, &r, dst, n, 0, fetch_progress, f))) {
		xport_release(cl->x, owner, f->lease);
		free(f);
	}
	return rc;
}

/* A stream's window. */
static int hook_pull(void *ctx, int owner, uint64_t oid, uint64_t lease, uint64_t off,
		     uint64_t len, void *dst, void (*progress)(void *, uint64_t, int), void *arg)
{
	struct cluster *cl = ctx;
	struct xport_range r = { .oid = oid, .off = off, .len = len, .stride = len,
				 .lease = lease, .count = 1 };
	struct iovec iov = { dst, len };

	return xport_pull(cl->x, owner, &r, &iov, 1, 0, progress, arg);
}

static void hook_release(void *ctx, int owner, uint64_t lease)
{
	struct cluster *cl = ctx;

	xport_release(cl->x, owner, lease);
}

static void *hook_buf_alloc(void *ctx, size_t size)
{
	return cluster_buf_alloc(ctx, size);
}

static void hook_buf_free(void *ctx, void *buf)
{
	cluster_buf_free(ctx, buf);
}

/* ---------------------------------------------------------------- views */

struct cluster_pulls {
	struct cluster *cl;
	const struct cluster_piece *pc;
	size_t n;
	uint64_t *lease;
	size_t *lead;           /* lead[i]: the first piece of piece i's lease */
	char *held;             /* held[lead[i]]: its owner has answered a piece */
	void (*on_held)(void *arg, int err);    /* until told */
	void *held_arg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t left, unheld;    /* pieces in flight; leases not held yet */
	int err;
	int released;           /* its leases went (cluster_pull_cancel) */
};

struct piece_ctx { struct cluster_pulls *ps; uint64_t total; size_t i; };

/* Piece i's owner answered it: with bytes (it holds the object for the
 * lease from now on) or with err.  on_held hears once: when every lease
 * is held, or of the first error before that. */
static void lease_answered(struct cluster_pulls *ps, size_t i, int err)
{
	void (*tell)(void *, int) = NULL;

	pthread_mutex_lock(&ps->lock);
	if (!err && !ps->held[ps->lead[i]]) {
		ps->held[ps->lead[i]] = 1;
		ps->unheld--;
	}
	if (err || !ps->unheld) {
		tell = ps->on_held;
		ps->on_held = NULL;
	}
	pthread_mutex_unlock(&ps->lock);
	if (tell)               /* ps stays: piece i has not ended yet */
		tell(ps->held_arg, err);
}

/* The transport reports the end of each pull exactly once, and may
 * report bytes come before it. */
static void piece_progress(void *arg, uint64_t upto, int err)
{
	struct piece_ctx *c = arg;
	struct cluster_pulls *ps = c->ps;
	const struct cluster_piece *pc = &ps->pc[c->i];

	if (!err && upto < c->total) {
		if (upto)
			lease_answered(ps, c->i, 0);
		return;
	}
	if (pc->done)
		pc->done(pc->arg, err);
	lease_answered(ps, c->i, err);
	free(c);
	pthread_mutex_lock(&ps->lock);
	if (err && !ps->err)
		ps->err = err;
	ps->left--;
	pthread_cond_broadcast(&ps->cond);
	pthread_mutex_unlock(&ps->lock);
}

/* One lease per owner and object among the pieces: lease[i] is piece i's,
 * lead[i] the first piece of it; how many leases. */
static size_t pull_leases(struct cluster *cl, const struct cluster_piece *pc, size_t n,
			  uint64_t *lease, size_t *lead)
{
	size_t leases = 0;

	for (size_t i = 0; i < n; i++) {
		size_t j = 0;
		while (j < i && (pc[j].owner != pc[i].owner || pc[j].oid != pc[i].oid))
			j++;
		lead[i] = j;
		leases += j == i;
		lease[i] = j == i ? ns_lease_id(cl->ns) : lease[j];
	}
	return leases;
}

int cluster_pull_start(struct cluster *cl, const struct cluster_piece *pc, size_t n,
		       void (*held)(void *arg, int err), void *arg, struct cluster_pulls **out)
{
	struct cluster_pulls *ps = calloc(1, sizeof(*ps));
	int rc = 0;

	if (!ps)
		return -ENOMEM;
	ps->lease = malloc((n ? n : 1) * sizeof(*ps->lease));
	ps->lead = malloc((n ? n : 1) * sizeof(*ps->lead));
	ps->held = calloc(n ? n : 1, 1);
	if (!ps->lease || !ps->lead || !ps->held) {
		free(ps->lease);
		free(ps->lead);
		free(ps->held);
		free(ps);
		return -ENOMEM;
	}
	ps->cl = cl;
	ps->pc = pc;
	ps->n = n;
	ps->on_held = held;
	ps->held_arg = arg;
	pthread_mutex_init(&ps->lock, NULL);
	pthread_cond_init(&ps->cond, NULL);
	ps->unheld = pull_leases(cl, pc, n, ps->lease, ps->lead);
	/* All in flight at once: one round trip, however many pieces. */
	for (size_t i = 0; i < n && !rc; i++) {
		struct piece_ctx *c = malloc(sizeof(*c));
		if (!c) {
			rc = -ENOMEM;
			break;
		}
		*c = (struct piece_ctx){ ps, pc[i].len * pc[i].count, i };
		pthread_mutex_lock(&ps->lock);
		ps->left++;
		pthread_mutex_unlock(&ps->lock);
		struct xport_range r = { pc[i].oid, pc[i].off, pc[i].len, pc[i].stride,
					 ps->lease[i], pc[i].count };
		if ((rc = xport_pull(cl->x, pc[i].owner, &r, pc[i].dst, pc[i].ndst,
				     XPORT_CALLER_CHECKS, piece_progress, c))) {
			free(c);
			pthread_mutex_lock(&ps->lock);
			ps->left--;
			pthread_mutex_unlock(&ps->lock);
		}
	}
	if (rc) {               /* the rest are not sent: the wait says so */
		pthread_mutex_lock(&ps->lock);
		ps->err = ps->err ? ps->err : rc;
		pthread_mutex_unlock(&ps->lock);
	}
	*out = ps;
	return 0;
}

/* Lets go of the pieces' leases, once: early, or after the wait. */
void cluster_pull_cancel(struct cluster_pulls *ps)
{
	pthread_mutex_lock(&ps->lock);
	int done = ps->released;
	ps->released = 1;
	pthread_mutex_unlock(&ps->lock);
	for (size_t i = 0; !done && i < ps->n; i++)
		if (ps->lead[i] == i)
			xport_release(ps->cl->x, ps->pc[i].owner, ps->lease[i]);
}

int cluster_pull_wait(struct cluster_pulls *ps)
{
	pthread_mutex_lock(&ps->lock);
	while (ps->left)        /* every pull ends: done, failed or timed out */
		pthread_cond_wait(&ps->cond, &ps->lock);
	int rc = ps->err;
	pthread_mutex_unlock(&ps->lock);
	cluster_pull_cancel(ps);        /* (its leases go, if they have not) */
	return rc == -EHOSTDOWN ? -EIO : rc;
}

void cluster_pull_free(struct cluster_pulls *ps)
{
	pthread_cond_destroy(&ps->cond);
	pthread_mutex_destroy(&ps->lock);
	free(ps->lease);
	free(ps->lead);
	free(ps->held);
	free(ps);
}

static int hook_remove(void *ctx, const struct ns_objinfo *o)
{
	struct cluster *cl = ctx;
	struct proto_msg m = { .type = PT_REMOVE };

	news_first(cl);
	to_proto(o, &m.u.obj);
	m.u.obj.kvhdr = NULL;   /* a REMOVE carries names and oid; it may be kept */
	m.u.obj.kvhdrlen = 0;
	/* How far we heard the owner: if that is all it said, it need not
	 * say GONE back (hook_gone there). */
	m.u.obj.heard_conn = xport_heard(cl->x, o->owner, &m.u.obj.heard);
	/* Held for the next: an rm of many names tells in a few sends
	 * (cluster_flush, when the requests stop). */
	return tell(cl, o->owner, &m, XPORT_CONNECT | XPORT_HOLD) ? -EIO : 0;
}

static const char *hook_peer_name(void *ctx, int owner)
{
	return xport_peer_name(((struct cluster *)ctx)->x, owner);
}

static const struct ns_hooks hooks = {
	.published = hook_published, .gone = hook_gone, .consumed = hook_consumed,
	.claim = hook_claim,
	.reask = hook_reask,
	.fetch = hook_fetch, .remove = hook_remove, .peer_name = hook_peer_name,
	.pull = hook_pull, .release = hook_release,
	.buf_alloc = hook_buf_alloc, .buf_free = hook_buf_free,
};

const struct ns_hooks *cluster_hooks(void) { return &hooks; }

/* ---------------------------------------------------------------- peers */

struct resync { struct cluster *cl; int peer, held; };

/* Whether peer keeps a record of our objects on from/to: it hosts to, or
 * the edge's claims meet there (then none hosts to). */
static int peer_records(const struct cluster *cl, int peer, const char *from, const char *to)
{
	return cluster_peer_hosts(cl, peer, to) || arbiter(cl, from, to) == (size_t)peer;
}

static void resync_one(void *arg, const struct ns_objinfo *o)
{
	struct resync *r = arg;

	if (!peer_records(r->cl, r->peer, o->from, o->to))
		return;
	if (r->cl->resync_hold_ms && !r->held++)
		test_hold(r->cl->resync_hold_ms, "resync ANNOUNCE", o->key);
	announce_to(r->cl, r->peer, o);
}

/* Removed while we announced it: its GONE may have overtaken that. */
static void resync_gone(void *arg, const struct ns_objinfo *o)
{
	struct resync *r = arg;
	struct proto_msg m = { .type = PT_GONE };

	if (!peer_records(r->cl, r->peer, o->from, o->to))
		return;
	to_proto(o, &m.u.obj);
	xport_send(r->cl->x, r->peer, &m);
}

static void reask_one(void *arg, const char *from, const char *to, const char *key,
		      unsigned ms);
static void pay(struct cluster *cl, int peer);
static struct proto_msg name_msg(enum proto_type type, const char *from, const char *to,
				 const char *key);

/* Our connection to a peer came up: tell it what it hosts, as a publish
 * would have, and that this is all (what it knew of ours and does not
 * hear again then goes: op_conn_start and ns_owner_swept there); ask it
 * for what our readers wait for, tell it what it missed (pay), and have
 * relist_thread learn again what it owns on our edges.  Puts may use the
 * connection already: their claims and announces are of the new
 * generation, so none is lost to it. */
static void op_peer_up(void *ctx, int peer)
{
	struct cluster *cl = ctx;
	struct resync r = { cl, peer, 0 };
	struct proto_msg over = name_msg(PT_GONE, "-", "-", "-");      /* oid 0: all said */

	if (cl->peer_up_delay_ms) {
		fprintf(stderr, "omnifs: test: resync of %s in %u ms\n",
			xport_peer_name(cl->x, peer), cl->peer_up_delay_ms);
		usleep(cl->peer_up_delay_ms * 1000u);
		fprintf(stderr, "omnifs: test: resync of %s now\n", xport_peer_name(cl->x, peer));
	}
	ns_foreach_own(cl->ns, "", "", "", 1, resync_one, resync_gone, &r);
	if (cl->resync_hold_ms)
		fprintf(stderr, "omnifs: test: resync of %s sent\n", xport_peer_name(cl->x, peer));
	xport_send(cl->x, peer, &over);
	ns_foreach_waited(cl->ns, reask_one, &r);
	pay(cl, peer);
	pthread_mutex_lock(&cl->lock);
	cl->relist[peer] = 1;
	pthread_cond_signal(&cl->relist_cond);
	pthread_mutex_unlock(&cl->lock);
}

/* A peer's new connection to us: what it told us of its objects may be
 * stale (said while we could not hear).  It tells us again (op_peer_up),
 * then says it is done: what it did not renew leaves then. */
static void op_conn_start(void *ctx, int peer, uint64_t made_ns)
{
	struct cluster *cl = ctx;

	ns_owner_renew(cl->ns, peer, made_ns);
}

static void op_peer_down(void *ctx, int peer)
{
	struct cluster *cl = ctx;

	ns_owner_lost(cl->ns, peer);
}

/* A peer reads oid straight from our pool under lease (RDMA): its
 * extents and chunk hashes.  The lease keeps the object for the peer as
 * for a PULL's, until RELEASE or c's end. */
static int op_grant(void *ctx, struct xport_conn *c, int peer, uint64_t oid, uint64_t lease,
		    uint64_t first, uint32_t n, struct xport_grant *g)
{
	struct cluster *cl = ctx;
	struct ns_extent *ext = malloc(PROTO_GRANT_EXTENTS * sizeof(*ext));
	struct ns_handle *h;
	struct lease *e;
	int rc = ext ? leases_get(cl->leases, c, peer, lease, oid, &e, &h, &g->size) : -ENOMEM;

	if (rc)
		goto free_ext;
	rc = ns_serve_map(cl->ns, h, ext, PROTO_GRANT_EXTENTS, &g->next, first, n, g->hash,
			  &g->nhash);
	leases_put(cl->leases, e);
	if (rc == -E2BIG)
		fprintf(stderr, "omnifs: an object of %llu bytes lies in more than %u pieces of "
			"the pool: no grant can describe it\n", (unsigned long long)g->size,
			PROTO_GRANT_EXTENTS);
	for (uint32_t i = 0; !rc && i < g->next; i++)
		g->ext[i] = (struct xport_extent){ ext[i].off, ext[i].len };
	for (uint32_t i = 0; cl->corrupt && i < g->nhash; i++)
		g->hash[i] ^= 1;        /* the reader must refuse these chunks */
	g->first = first;
free_ext:
	free(ext);
	return rc;
}

/* The peer's streamed reads of ours came on c: they ended with it. */
static void op_conn_end(void *ctx, struct xport_conn *c)
{
	struct cluster *cl = ctx;

	leases_drop(cl->leases, c);
}

static void op_count(void *ctx, enum xport_count what, uint64_t n)
{
	struct cluster *cl = ctx;
	static const enum stat_id map[] = {
		[XC_AUTH_FAILED] = ST_PEER_AUTH_FAILED, [XC_BAD_FRAMES] = ST_PEER_BAD_FRAMES,
		[XC_PULLED] = ST_BYTES_PULLED, [XC_SERVED] = ST_BYTES_SERVED,
		[XC_BAD_CHUNKS] = ST_CHECKSUM_FAILED, [XC_PULLED_TCP] = ST_BYTES_PULLED_TCP,
		[XC_PULLED_RDMA] = ST_BYTES_PULLED_RDMA, [XC_RDMA_READS] = ST_RDMA_READS,
		[XC_RDMA_ERRORS] = ST_RDMA_ERRORS, [XC_STRANGERS_CLOSED] = ST_PEER_STRANGERS_CLOSED,
		[XC_RDMA_STAGED] = ST_BYTES_STAGED, [XC_RDMA_STAGE_FULL] = ST_RDMA_STAGE_FULL,
		[XC_RDMA_STAGE_STEPS] = ST_RDMA_STAGE_STEPS,
	};
	stat_add(cl->st, map[what], n);
}

/* A FUSE thread about to wait for a peer lets the next requests go on
 * without it (loop.h), its request sent first: waking the thread that
 * reads them next costs it an interrupt on this VM (36 us when that core
 * sleeps), which the request no longer waits for. */
static void op_waits(void *ctx)
{
	(void)ctx;
	loop_step_aside();
}

static const struct xport_ops xops = {
	.handle = op_handle, .peer_up = op_peer_up, .peer_down = op_peer_down,
	.conn_start = op_conn_start, .conn_end = op_conn_end, .count = op_count, .grant = op_grant,
	.waits = op_waits,
};

/* ---------------------------------------------------------------- asking */

struct ask { struct cluster *cl; int peer; uint64_t found; };

static int ask_reply(void *arg, const struct proto_msg *m)
{
	struct ask *a = arg;

	if (m->type == PT_OBJECT) {
		struct ns_objinfo o = from_proto(&m->u.obj);
		a->found |= ns_remote_answer(a->cl->ns, a->peer, &o) == 0;
		return 0;
	}
	if (m->type == PT_LISTING && a->cl->list_delay_ms) {
		fprintf(stderr, "omnifs: test: holding a listing for %u ms\n", a->cl->list_delay_ms);
		usleep(a->cl->list_delay_ms * 1000u);
		fprintf(stderr, "omnifs: test: the held listing is heard now\n");
	}
	for (uint32_t i = 0; m->type == PT_LISTING && m->u.listing.objects && i < m->u.listing.n; i++) {
		struct ns_objinfo o = from_proto(&m->u.listing.obj[i]);
		ns_remote_answer(a->cl->ns, a->peer, &o);
	}
	return m->type == PT_LISTING && m->u.listing.more;
}

/* CLEANED: how many objects the peer removed. */
static int cleaned_reply(void *arg, const struct proto_msg *m)
{
	if (m->type == PT_CLEANED)
		((struct ask *)arg)->found += m->u.cleaned.removed;
	return 0;
}

/* The peers that are up, and host stage hosting unless it is NULL, into
 * to[], with their asks in a[] unless it is NULL (room for every peer in
 * both): how many. */
static int callees_up(struct cluster *cl, const char *hosting, struct ask *a,
		      struct xport_callee *to)
{
	int n = 0;

	for (size_t i = 0; i < cl->npeers; i++) {
		if (!xport_peer_up(cl->x, (int)i) ||
		    (hosting && !stage_in(cl->hosts[i].stages, cl->hosts[i].n, hosting)))
			continue;
		if (a)
			a[n] = (struct ask){ cl, (int)i, 0 };
		to[n] = (struct xport_callee){ .peer = (int)i, .arg = a ? &a[n] : NULL };
		n++;
	}
	return n;
}

/* Sends m, and also unless it is NULL, to every peer that is up, all at
 * once (asking never waits for a peer to connect), on_reply taking each
 * answer; what they found in all, and, if told is set, which of them
 * answered m without an error. */
static uint64_t ask_all(struct cluster *cl, const struct proto_msg *m,
			const struct proto_msg *also, xport_reply_fn on_reply, uint8_t *told)
{
	struct ask *a = calloc(2 * cl->npeers + 1, sizeof(*a));
	struct xport_callee *to = calloc(2 * cl->npeers + 1, sizeof(*to));
	uint64_t found = 0;
	int n = 0;

	if (!a || !to)
		goto free_asks;
	news_first(cl);
	n = callees_up(cl, NULL, a, to);
	for (int i = 0; also && i < n; i++) {   /* each peer's second ask, after m */
		a[n + i] = a[i];
		to[n + i] = (struct xport_callee){ .peer = to[i].peer, .arg = &a[n + i], .req = also };
	}
	if (!xport_call_each(cl->x, to, also ? 2 * n : n, m, on_reply))
		for (int i = 0; i < (also ? 2 * n : n); i++) {
			found += a[i].found;
			if (told && i < n)
				told[to[i].peer] = !to[i].rc;
		}
free_asks:
	free(a);
	free(to);
	return found;
}

/* A request about one name. */
static struct proto_msg name_msg(enum proto_type type, const char *from, const char *to,
				 const char *key)
{
	struct proto_msg m = { .type = type };

	snprintf(m.u.obj.from, sizeof(m.u.obj.from), "%s", from);
	snprintf(m.u.obj.to, sizeof(m.u.obj.to), "%s", to);
	snprintf(m.u.obj.key, sizeof(m.u.obj.key), "%s", key);
	return m;
}

/* A LIST of what a peer owns under from/to ("" for all): the shards of the
 * view base, or all if base is "". */
static struct proto_msg list_msg(const char *from, const char *to, const char *base)
{
	struct proto_msg m = { .type = PT_LIST };

	snprintf(m.u.list.from, sizeof(m.u.list.from), "%s", from);
	snprintf(m.u.list.to, sizeof(m.u.list.to), "%s", to);
	snprintf(m.u.list.base, sizeof(m.u.list.base), "%s", base);
	return m;
}

int cluster_ask(struct cluster *cl, const char *from, const char *to,
		const char *key, unsigned subscribe_ms, const char *base)
{
	struct proto_msg m = name_msg(PT_LOOKUP, from, to, key), list;

	m.u.obj.size = subscribe_ms;
	if (base)
		list = list_msg(from, to, base);
	return ask_all(cl, &m, base ? &list : NULL, ask_reply, NULL) ? 0 : -ENOENT;
}

/* A key that readers here wait for, on an edge into a stage we do not
 * host (the hosts hear of its publish, we do not): a peer that just came
 * up never heard them ask, and is asked now, to tell us when it comes. */
static void reask_one(void *arg, const char *from, const char *to, const char *key,
		      unsigned ms)
{
	struct resync *r = arg;
	struct proto_msg m = name_msg(PT_LOOKUP, from, to, key);
	struct ask a = { r->cl, r->peer, 0 };

	if (cluster_hosts(r->cl, to))
		return;
	m.u.obj.size = ms;
	xport_call(r->cl->x, r->peer, &m, ask_reply, &a);
}

/* The node where the publishes on edges into stage to meet: the first
 * node of the config that hosts to, which hears of every object on those
 * edges; where none does, one node picked by the edge's name.  Every
 * node that runs the same config picks the same.  A peer index, or
 * npeers for this node. */
static size_t arbiter(const struct cluster *cl, const char *from, const char *to)
{
	size_t nodes = cl->npeers + 1;

	for (size_t at = 0; at < nodes; at++) {         /* config order */
		if (at == cl->self_at) {
			if (cluster_hosts(cl, to))
				return cl->npeers;
		} else {
			size_t i = at < cl->self_at ? at : at - 1;
			if (stage_in(cl->hosts[i].stages, cl->hosts[i].n, to))
				return i;
		}
	}
	char edge[2 * NAME_STAGE_MAX + 2];
	size_t at = XXH3_64bits(edge, (size_t)snprintf(edge, sizeof(edge), "%s/%s", from, to)) %
		    nodes;
	return at == cl->self_at ? cl->npeers : at < cl->self_at ? at : at - 1;
}

int cluster_claimer(struct cluster *cl, const char *from, const char *to)
{
	size_t at = arbiter(cl, from, to);

	return at < cl->npeers && xport_peer_up(cl->x, (int)at) ? (int)at : -1;
}

/* The nodes that host <to> hear of every object published on the edge,
 * whoever owns it (announces, and a resync when they come up), so they are
 * the ones asked: one round trip to them, whatever the size of the
 * cluster.  Only where none of them is up and answers is every peer asked
 * for what it owns. */
int cluster_exists(struct cluster *cl, const char *from, const char *to, const char *key)
{
	struct proto_msg m = name_msg(PT_EXISTS, from, to, key);
	struct xport_callee *c = calloc(cl->npeers + 1, sizeof(*c));
	/* The answer is the STATUS itself: no reply to take, no asks. */
	int n, found = 0, answered = 0;

	news_first(cl);
	n = c ? callees_up(cl, to, NULL, c) : 0;
	if (n && !xport_call_each(cl->x, c, n, &m, NULL))
		for (int i = 0; i < n; i++) {
			found |= c[i].rc == 0;
			answered |= c[i].rc == 0 || c[i].rc == -ENOENT;
		}
	free(c);
	if (found || answered)
		return found;
	return !cluster_ask(cl, from, to, key, 0, NULL);
}

/* Brings what peer owns under from/to into ns. */
static void list_peer(struct cluster *cl, int peer, const char *from, const char *to)
{
	struct proto_msg m = list_msg(from, to, "");
	struct ask a = { cl, peer, 0 };

	news_first(cl);
	if (xport_peer_up(cl->x, peer))  /* never dials one that is down */
		xport_call(cl->x, peer, &m, ask_reply, &a);
}

void cluster_refresh(struct cluster *cl, const char *from, const char *to)
{
	struct proto_msg m = list_msg(from, to, "");

	ask_all(cl, &m, NULL, ask_reply, NULL);
}

/* At most this many messages owed to one peer: past it, the oldest is
 * dropped (and said), so a peer gone for good costs bounded memory. */
#define OWED_MAX 4096

/* Under the lock (or before any thread runs): m owed to peer, in memory. */
static void owe_locked(struct cluster *cl, int peer, const struct proto_msg *m)
{
	struct owed *o = calloc(1, sizeof(*o)), **tail;

	if (!o)
		return;
	o->m = *m;              /* CLEANUP, CONSUMED and REMOVE hold no pointer */
	/* Said again later, when what we heard of the peer is not what we
	 * say here: it says GONE back.  (And the log keeps release 11's
	 * REMOVE.) */
	if (m->type == PT_REMOVE)
		o->m.u.obj.heard_conn = o->m.u.obj.heard = 0;
	for (tail = &cl->owed[peer]; *tail; tail = &(*tail)->next)
		;
	*tail = o;
	if (++cl->nowed[peer] > OWED_MAX) {
		struct owed *old = cl->owed[peer];
		cl->owed[peer] = old->next;
		cl->nowed[peer]--;
		char esc[NAME_ESC_MAX];
		if (old->m.type == PT_CLEANUP)
			fprintf(stderr, "omnifs: over %u messages owed to %s: the cleanup of %s "
				"is dropped; its objects there stay\n", OWED_MAX,
				xport_peer_name(cl->x, peer), name_escape(old->m.u.cleanup.id, esc));
		else if (old->m.type == PT_REMOVE)
			fprintf(stderr, "omnifs: over %u messages owed to %s: the removal of "
				"%s/%s/%s is dropped; it stays there\n", OWED_MAX,
				xport_peer_name(cl->x, peer), old->m.u.obj.from,
				old->m.u.obj.to, name_escape(old->m.u.obj.key, esc));
		else
			fprintf(stderr, "omnifs: over %u messages owed to %s: a complete read "
				"of its object %llu is not counted\n", OWED_MAX,
				xport_peer_name(cl->x, peer),
				(unsigned long long)old->m.u.consumed.oid);
		free(old);
	}
}

/* Said once: what is owed may not outlive this run. */
static void log_failed(struct cluster *cl, int rc)
{
	if (!cl->log_errors++)
		fprintf(stderr, "omnifs: the log of owed messages cannot be written (%s); "
			"a restart of this node loses what is owed now\n", strerror(-rc));
}

static void log_rewrite(struct cluster *cl);

/* Under the lock: how many messages are owed, all peers together. */
static unsigned long owed_total(const struct cluster *cl)
{
	unsigned long n = 0;

	for (size_t i = 0; i < cl->npeers; i++)
		n += cl->nowed[i];
	return n;
}

static void owe(struct cluster *cl, int peer, const struct proto_msg *m)
{
	int rc;

	pthread_mutex_lock(&cl->lock);
	owe_locked(cl, peer, m);
	if (cl->log && (rc = owedlog_add(cl->log, xport_peer_name(cl->x, peer), m)))
		log_failed(cl, rc);
	/* What OWED_MAX dropped, the file keeps until a peer is paid: a
	 * peer down for good would grow it without end. */
	else if (cl->log && !cl->paying && owedlog_records(cl->log) > 2 * owed_total(cl) + 64)
		log_rewrite(cl);
	pthread_mutex_unlock(&cl->lock);
}

/* What an earlier run of this node owed, owed again (owedlog_open). */
static void owed_loaded(void *arg, const char *peer, const struct proto_msg *m)
{
	struct cluster *cl = arg;

	for (size_t i = 0; i < cl->npeers; i++)
		if (!strcmp(xport_peer_name(cl->x, (int)i), peer)) {
			owe_locked(cl, (int)i, m);      /* decoded, it points into nothing */
			cl->loaded++;
			return;
		}
	fprintf(stderr, "omnifs: a message owed to %s, no longer a node of the cluster, "
		"is dropped\n", peer);
}

/* The log again, from what is owed now (after a peer was paid: what it
 * heard is dropped).  Under the lock. */
static void log_rewrite(struct cluster *cl)
{
	int rc = owedlog_begin(cl->log);

	if (rc) {
		log_failed(cl, rc);
		return;
	}
	for (size_t i = 0; i < cl->npeers && !rc; i++)
		for (struct owed *o = cl->owed[i]; o && !rc; o = o->next)
			rc = owedlog_add(cl->log, xport_peer_name(cl->x, (int)i), &o->m);
	if ((rc = owedlog_end(cl->log, rc)))
		log_failed(cl, rc);
}

/* The log is rewritten only once every message a pay told has ended
 * (heard, or owed again): until then it still holds them, so a restart
 * meanwhile loses none.  Under the lock. */
static void log_tidy(struct cluster *cl)
{
	if (cl->log && !cl->paying && owedlog_records(cl->log))
		log_rewrite(cl);
}

static void paid_end(struct cluster *cl)
{
	pthread_mutex_lock(&cl->lock);
	cl->paying--;
	log_tidy(cl);
	pthread_mutex_unlock(&cl->lock);
}

/* What peer missed, now that it is up; what it misses again stays owed. */
static void pay(struct cluster *cl, int peer)
{
	pthread_mutex_lock(&cl->lock);
	struct owed *o = cl->owed[peer], *next;
	cl->owed[peer] = NULL;
	cl->nowed[peer] = 0;
	cl->paying++;           /* o, in no list now, stays in the log */
	pthread_mutex_unlock(&cl->lock);
	for (; o; o = next) {
		struct ask a = { cl, peer, 0 };
		next = o->next;
		if (o->m.type == PT_CLEANUP ? xport_call(cl->x, peer, &o->m, cleaned_reply, &a)
					    : tell_as(cl, peer, &o->m, 0, 1))
			owe(cl, peer, &o->m);
		free(o);
	}
	paid_end(cl);
}

int cluster_cleanup(struct cluster *cl, const char *id, uint64_t *removed, size_t *missed)
{
	struct proto_msg m = { .type = PT_CLEANUP };
	uint8_t *told = calloc(cl->npeers + 1, 1);

	if (!told)
		return -ENOMEM;
	snprintf(m.u.cleanup.id, sizeof(m.u.cleanup.id), "%s", id);
	*removed = ask_all(cl, &m, NULL, cleaned_reply, told);
	*missed = 0;
	for (size_t i = 0; i < cl->npeers; i++)
		if (!told[i]) {
			owe(cl, (int)i, &m);
			(*missed)++;
		}
	/* After the owners: the records of theirs it forgets stay forgotten. */
	*removed += ns_cleanup(cl->ns, id, told);
	free(told);
	return 0;
}

/* A peer that came up: what it owns on the edges into our stages, learnt
 * again.  We forgot it when our own connection to the peer failed
 * (op_peer_down), while the peer re-announces it when its connection to
 * us comes up (op_peer_up there): after a cut one way that never happens,
 * and a node that wakes from a stall can hear the announces before it
 * sees its old connection fail.  Its replies come on that new connection,
 * after the old one's end has been dealt with, so nothing learnt here is
 * forgotten by mistake.  A thread of its own: a listing waits for the
 * peer, and the keeper, which connects, must go on pinging the others.
 * The keys that readers here wait for again (hook_reask) are asked for
 * on it too, first. */
static void *relist_thread(void *arg)
{
	struct cluster *cl = arg;

	pthread_setname_np(pthread_self(), "omni-relist");
	pthread_mutex_lock(&cl->lock);
	while (!cl->relist_stop) {
		struct reask *r = cl->reasks;
		if (r) {
			cl->reasks = r->next;
			pthread_mutex_unlock(&cl->lock);
			cluster_ask(cl, r->from, r->to, r->key, r->wait_ms, NULL);
			free(r);
			pthread_mutex_lock(&cl->lock);
			continue;
		}
		size_t i = 0;
		while (i < cl->npeers && !cl->relist[i])
			i++;
		if (i == cl->npeers) {
			pthread_cond_wait(&cl->relist_cond, &cl->lock);
			continue;
		}
		cl->relist[i] = 0;
		pthread_mutex_unlock(&cl->lock);
		for (size_t s = 0; s < cl->self.n; s++)
			list_peer(cl, (int)i, "", cl->self.stages[s]);
		pthread_mutex_lock(&cl->lock);
	}
	pthread_mutex_unlock(&cl->lock);
	return NULL;
}

/* ---------------------------------------------------------------- lifecycle */

/* A test's delay from the environment, in ms (under 10 s); 0 unset. */
static unsigned test_ms(const char *name)
{
	const char *v = getenv(name);

	return v ? (unsigned)strtoul(v, NULL, 10) % 10000 : 0;
}

/* The part of the config every node must share (SPEC §7): the nodes,
 * their addresses and the stages each hosts, in whatever order the file
 * lists them (sums of hashes do not mind the order).  Never 0, which
 * means "not compared" to xport. */
static uint64_t config_digest(const struct cluster_conf *c)
{
	uint64_t d = 0;

	for (size_t i = 0; i < c->nnodes; i++) {
		const struct cluster_node *n = &c->nodes[i];
		uint64_t s = 0;
		for (size_t j = 0; j < n->nstages; j++)
			s += XXH3_64bits(n->stages[j], strlen(n->stages[j]));
		s = XXH3_64bits_withSeed(n->name, strlen(n->name), s);
		d += XXH3_64bits_withSeed(n->addr, strlen(n->addr), s);
	}
	return d ? d : 1;
}

int cluster_create(struct cluster **out, const struct cluster_conf *c,
		   struct stats *st, char *err, size_t errlen)
{
	struct cluster *cl = calloc(1, sizeof(*cl));
	struct xport_peer_conf *pc = calloc(c->nnodes, sizeof(*pc));
	const char *listen = c->listen;
	int rc = -ENOMEM;

	if (!cl || !pc || !(cl->hosts = calloc(c->nnodes, sizeof(*cl->hosts))) ||
	    !(cl->relist = calloc(c->nnodes, 1)) || !(cl->subs = subs_new(st)) ||
	    !(cl->owed = calloc(c->nnodes, sizeof(*cl->owed))) ||
	    !(cl->nowed = calloc(c->nnodes, sizeof(*cl->nowed))))
		goto fail;
	for (size_t i = 0; i < c->nnodes; i++) {
		const struct cluster_node *n = &c->nodes[i];
		if (!strcmp(n->name, c->self)) {
			cl->self_at = i;
			cl->self.stages = n->stages;
			cl->self.n = n->nstages;
			if (!listen || !*listen)
				listen = n->addr;
			continue;
		}
		pc[cl->npeers] = (struct xport_peer_conf){ n->name, n->addr };
		cl->hosts[cl->npeers].stages = n->stages;
		cl->hosts[cl->npeers].n = n->nstages;
		cl->npeers++;
	}
	struct pool_usage u = { 0 };
	if (c->pool)
		pool_usage(c->pool, &u);
	struct xport_conf xc = { .self = c->self, .listen = listen, .peers = pc,
				 .npeers = cl->npeers, .key = c->key, .mode = c->mode,
				 .pool = c->pool ? pool_base(c->pool) : NULL, .pool_size = u.size,
				 .dead_ms = c->dead_ms, .digest = config_digest(c),
				 .trickle_ms = test_ms("OMNIFS_TEST_TRICKLE_MS"),
				 .handshake_hold_ms = test_ms("OMNIFS_TEST_HANDSHAKE_HOLD_MS") };
	/* GPU memory is READ by GPUDirect RDMA where the transport can, else
	 * from a copy in the stage.  A test stages a host pool's alike. */
	if (c->pool && (!pool_cpu(c->pool) || (c->rdma_stage && getenv("OMNIFS_TEST_STAGE")))) {
		xc.stage_from = c->pool;
		xc.stage_size = c->rdma_stage < u.size ? c->rdma_stage : u.size;
	}
	cl->st = st;
	cl->corrupt = getenv("OMNIFS_TEST_CORRUPT") != NULL;
	cl->delay_ms = test_ms("OMNIFS_TEST_SERVE_DELAY_MS");
	cl->list_delay_ms = test_ms("OMNIFS_TEST_LIST_DELAY_MS");
	cl->consumed_delay_ms = test_ms("OMNIFS_TEST_CONSUMED_DELAY_MS");
	cl->hold_ms = test_ms("OMNIFS_TEST_HOLD_MS");
	cl->gone_hold_ms = test_ms("OMNIFS_TEST_GONE_HOLD_MS");
	cl->peer_up_delay_ms = test_ms("OMNIFS_TEST_PEER_UP_DELAY_MS");
	cl->resync_hold_ms = test_ms("OMNIFS_TEST_RESYNC_HOLD_MS");
	cl->told_hold_ms = test_ms("OMNIFS_TEST_TOLD_HOLD_MS");
	pthread_mutex_init(&cl->lock, NULL);
	pthread_cond_init(&cl->relist_cond, NULL);
	if ((rc = xport_create(&cl->x, &xc, &xops, cl, err, errlen)))
		goto destroy_locks;
	if (c->state_dir && owedlog_open(&cl->log, c->state_dir, c->self, c->key, AUTH_KEY,
					 owed_loaded, cl, err, errlen)) {
		rc = -EINVAL;   /* the option names what cannot be: exit status 2 */
		goto destroy_xport;
	}
	if (cl->loaded)
		fprintf(stderr, "omnifs: %u messages that an earlier run owed its peers are "
			"said again when they are up\n", cl->loaded);
	free(pc);
	*out = cl;
	return 0;
destroy_xport:
	xport_destroy(cl->x);
destroy_locks:
	pthread_cond_destroy(&cl->relist_cond);
	pthread_mutex_destroy(&cl->lock);
fail:
	if (cl) {
		subs_free(cl->subs);
		free(cl->hosts);
		free(cl->relist);
		free(cl->owed);
		free(cl->nowed);
	}
	free(cl);
	free(pc);
	return rc;
}

int cluster_start(struct cluster *cl, struct ns *ns)
{
	int rc = leases_create(&cl->leases, ns, cl->npeers);

	cl->ns = ns;
	if (!rc)
		rc = -pthread_create(&cl->relister, NULL, relist_thread, cl);
	cl->relist_running = !rc;
	return rc ? rc : xport_start(cl->x);
}

/* Before the transport goes, as the relister's listings go through it. */
static void relist_stop(struct cluster *cl)
{
	if (!cl->relist_running)
		return;
	pthread_mutex_lock(&cl->lock);
	cl->relist_stop = 1;
	pthread_cond_signal(&cl->relist_cond);
	pthread_mutex_unlock(&cl->lock);
	pthread_join(cl->relister, NULL);
	cl->relist_running = 0;
	while (cl->reasks) {            /* nobody waits for them now */
		struct reask *r = cl->reasks;
		cl->reasks = r->next;
		free(r);
	}
}

void cluster_destroy(struct cluster *cl)
{
	if (!cl)
		return;
	relist_stop(cl);
	xport_destroy(cl->x);   /* what it fails to tell now is owed, and logged */
	owedlog_close(cl->log);
	leases_destroy(cl->leases);
	subs_free(cl->subs);
	pthread_cond_destroy(&cl->relist_cond);
	pthread_mutex_destroy(&cl->lock);
	for (size_t i = 0; i < cl->npeers; i++)
		for (struct owed *o = cl->owed[i], *next; o; o = next) {
			next = o->next;
			free(o);
		}
	free(cl->owed);
	free(cl->nowed);
	free(cl->hosts);
	free(cl->relist);
	free(cl);
}

void *cluster_buf_alloc(struct cluster *cl, size_t size)
{
	return xport_buf_alloc(cl->x, size);
}

void cluster_buf_free(struct cluster *cl, void *buf)
{
	xport_buf_free(cl->x, buf);
}

int cluster_rdma(const struct cluster *cl, struct xport_rdma_info *out)
{
	return xport_rdma(cl->x, out);
}

int cluster_rdma_gpudirect(const struct cluster *cl)
{
	return xport_rdma_gpudirect(cl->x);
}

int cluster_rdma_stage(const struct cluster *cl, uint64_t *size, uint64_t *used)
{
	return xport_rdma_stage(cl->x, size, used);
}

void cluster_flush(struct cluster *cl, int all)
{
	if (cl)
		xport_flush(cl->x, all);
}

size_t cluster_npeers(const struct cluster *cl) { return cl->npeers; }

void cluster_peer(struct cluster *cl, size_t i, struct xport_peer_info *out)
{
	xport_peer_info(cl->x, (int)i, out);
}

unsigned cluster_owed(struct cluster *cl, size_t i)
{
	pthread_mutex_lock(&cl->lock);
	unsigned n = cl->nowed[i];
	pthread_mutex_unlock(&cl->lock);
	return n;
}
