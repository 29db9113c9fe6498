/* view.c - rank-shard views: resolve, wait, plan, bring, verify. */
#define _GNU_SOURCE
#include "view.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "ns.h"
#include "rangeset.h"
#include "stats.h"
#include "../kvfmt/kvfmt.h"
#include "../transport/copy.h"

#define VIEW_MAX_SHARDS 1024
#define VIEW_INLINE_MAX (16u << 20)

struct job;

/* A read waiting for [lo, hi) of a view.  It is woken when that range is
 * ready or the fill ends, not whenever something lands: a short view
 * fills in bands of a few KiB, and waking a 1 MiB read at each of them
 * cost a pair of switches per band, on the fill's own core. */
struct reader {
	uint64_t lo, hi;
	int waiting;
	pthread_cond_t cond;
	struct reader *next;
};

/* An open view.  Its open returns once it is planned and its sources are
 * held for it (a small one of this node's shards: once filled); its
 * bytes land while it is read (reads wait for their range), each (tensor,
 * head) checked against the shards' sums before it counts as landed.
 * A source on another node is held for the view by its owner (a lease)
 * from the moment the view's first pull of it reaches it, not before: an
 * rm or a consumption there in between makes the open fail with ENOENT,
 * as it would have a moment earlier, rather than a read later. */
struct view {
	struct view_env env;
	uint8_t *buf;
	uint64_t size;
	uint32_t nsrc;
	struct ns_handle **src;
	struct kv_cover *cover;
	struct kv_info kv;              /* its own header */
	pthread_mutex_t lock;           /* all below */
	struct reader *readers;         /* waiting for their ranges */
	struct rangeset seen, ready;
	int err, filled, refs;
	int reused;                      /* buf is a kept one: its gaps are not zero */
	size_t bufsize;                 /* buf's own size, >= size */
	struct job *opening;            /* an open to answer once its sources are held */
	struct cluster_pulls *ps;       /* the fill's pulls in flight, or NULL */
	struct view *onext, *oprev;     /* in env.jobs->open, from its answer on */
};

/* What a view's name asks for, and which shards make it. */
struct want {
	char self[NAME_KEY_MAX + 1];
	uint64_t edge;
	size_t baselen;
	uint32_t r, T, S, first, n;
	char names[VIEW_MAX_SHARDS][NAME_KEY_MAX + 1];
	uint64_t ino[VIEW_MAX_SHARDS];  /* 0: not published yet */
};

/* Shard i of S's name; S == 1 may also be the bare base. */
static int shard_name(const struct want *w, uint32_t i, uint32_t S, char *out)
{
	char base[NAME_KEY_MAX + 1];

	memcpy(base, w->self, w->baselen);
	base[w->baselen] = 0;
	int n = snprintf(out, NAME_KEY_MAX + 1, "%s.rank%uof%u", base, i, S);
	return n < 0 || n > NAME_KEY_MAX ? -ENAMETOOLONG : 0;
}

/* Picks S among the published siblings: one that T divides or divides,
 * preferring the one with the most of its needed shards there.
 * 0, -EXDEV (the key itself is the one shard), -EINVAL, -ENOENT (none). */
static int resolve(struct ns *ns, uint64_t ino, struct want *w)
{
	struct ns_sibling *sib;
	size_t nsib;
	uint32_t best = 0, bestn = 0;
	int rc = ns_siblings(ns, ino, w->self, &w->edge, &sib, &nsib);

	if (rc)
		return rc;
	kv_name_split(w->self, &w->baselen, &w->r, &w->T);
	rc = -ENOENT;
	for (size_t s = 0; s < nsib; s++) {
		size_t bl;
		uint32_t i, S, first, n, have = 0;
		kv_name_split(sib[s].name, &bl, &i, &S);
		if (S > VIEW_MAX_SHARDS || kv_view_shards(S, w->r, w->T, &first, &n)) {
			rc = rc == -ENOENT ? -EINVAL : rc;      /* shards of a size that won't do */
			continue;
		}
		for (size_t t = 0; t < nsib; t++) {
			uint32_t i2, S2;
			kv_name_split(sib[t].name, &bl, &i2, &S2);
			have += S2 == S && i2 >= first && i2 < first + n;
		}
		if (!best || have > bestn) {    /* ties: the first seen */
			best = S;
			bestn = have;
		}
		rc = 0;
	}
	if (!rc) {
		w->S = best;
		kv_view_shards(w->S, w->r, w->T, &w->first, &w->n);
		for (uint32_t k = 0; k < w->n; k++) {
			w->ino[k] = 0;
			if ((rc = shard_name(w, w->first + k, w->S, w->names[k])))
				break;
			for (size_t s = 0; s < nsib; s++) {
				size_t bl;
				uint32_t i, S;
				kv_name_split(sib[s].name, &bl, &i, &S);
				if (S == w->S && i == w->first + k) {
					snprintf(w->names[k], NAME_KEY_MAX + 1, "%s", sib[s].name);
					w->ino[k] = sib[s].ino;
				}
			}
		}
		if (!rc && w->n == 1 && !strcmp(w->names[0], w->self))
			rc = -EXDEV;
	}
	free(sib);
	return rc;
}

/* ---------------------------------------------------------------- sources */

/* An open of a shard that is not published yet, answered on our thread. */
struct srcwait {
	struct ns_waiter w;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int answered, err;
	int peer_lost;          /* a peer was lost meanwhile: look at the held */
	struct ns_handle *h;
};

static void srcwait_done(struct ns_waiter *nw, int err, struct ns_handle *h)
{
	struct srcwait *sw = (struct srcwait *)nw;

	pthread_mutex_lock(&sw->lock);
	sw->answered = 1;
	sw->err = err;
	sw->h = h;
	pthread_cond_signal(&sw->cond);
	pthread_mutex_unlock(&sw->lock);
}

static void srcwait_peer_lost(struct ns_waiter *nw)
{
	struct srcwait *sw = (struct srcwait *)nw;

	pthread_mutex_lock(&sw->lock);
	sw->peer_lost = 1;
	pthread_cond_signal(&sw->cond);
	pthread_mutex_unlock(&sw->lock);
}

/* 1 if one of the n shards held went with its owner. */
static int held_lost(struct ns *ns, struct ns_handle **held, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (ns_source_lost(ns, held[i]))
			return 1;
	return 0;
}

/* Waits for sw's answer.  A view that holds shards of a peer lost
 * meanwhile cannot be made: it fails with EIO then, as their reads
 * would (SPEC §4.7), not at the end of its wait for this one. */
static int srcwait_wait(struct ns *ns, struct srcwait *sw, struct ns_handle **held, uint32_t n)
{
	int lost = held_lost(ns, held, n);     /* (lost before it queued) */

	pthread_mutex_lock(&sw->lock);
	while (!sw->answered) {         /* the waiter's deadline bounds this */
		if (lost) {
			pthread_mutex_unlock(&sw->lock);
			if (ns_cancel(ns, sw->w.id))
				return -EIO;    /* never answered now */
			pthread_mutex_lock(&sw->lock);
			lost = 0;       /* answered meanwhile: the answer comes */
		} else if (sw->peer_lost) {
			sw->peer_lost = 0;
			pthread_mutex_unlock(&sw->lock);
			lost = held_lost(ns, held, n);
			pthread_mutex_lock(&sw->lock);
		} else {
			pthread_cond_wait(&sw->cond, &sw->lock);
		}
	}
	pthread_mutex_unlock(&sw->lock);
	return sw->err;
}

/* A handle on shard k, waiting for it as an open would (wait_ms), while
 * the view holds shards 0..k-1 (held); or, now, only if it is published
 * and needs no waiting: else -EAGAIN. */
static int source_open(struct ns *ns, struct want *w, uint32_t k, int64_t wait_ms, int now,
		       struct ns_handle **held)
{
	const int flags = O_RDONLY | NS_OPEN_SOURCE | NS_OPEN_EXACT;
	struct srcwait sw = { .w.done = srcwait_done, .w.peer_lost = srcwait_peer_lost,
			      .w.wait_ms = wait_ms };
	struct ns_handle **h = &held[k];
	struct ns_attr a;
	int rc;

	if (w->ino[k] && !(rc = ns_open(ns, w->ino[k], flags, NULL, h)))
		return 0;
	if (now)
		return -EAGAIN;
	if ((rc = ns_lookup(ns, w->edge, w->names[k], NS_LOOKUP_WAIT, &a)))
		return rc;
	pthread_mutex_init(&sw.lock, NULL);
	pthread_cond_init(&sw.cond, NULL);
	sw.w.id = ns_waiter_id(ns);
	sw.w.ctx = &sw;
	rc = ns_open(ns, a.ino, flags, &sw.w, h);
	if (rc == -EINPROGRESS) {
		rc = srcwait_wait(ns, &sw, held, k);
		*h = sw.h;              /* (NULL if it never came) */
	}
	ns_forget(ns, a.ino, 1);
	pthread_cond_destroy(&sw.cond);
	pthread_mutex_destroy(&sw.lock);
	return rc;
}

/* The KV header of each source; a remote one that came without its header
 * (we heard of it by a listing) is asked for again, unless now: -EAGAIN. */
static int source_headers(const struct view_env *env, struct want *w, struct ns_handle **h,
			  struct ns_srcinfo *si, int now)
{
	char from[NAME_STAGE_MAX + 1], to[NAME_STAGE_MAX + 1];
	int rc;

	for (uint32_t k = 0; k < w->n; k++) {
		if ((rc = ns_source_info(env->ns, h[k], &si[k])))
			return rc;
		if (si[k].kvhdr || si[k].owner < 0 || !env->cl)
			continue;
		if (now)
			return -EAGAIN;
		if (ns_dir_names(env->ns, w->edge, from, to) == NK_EDGE)
			cluster_ask(env->cl, from, to, w->names[k], 0, NULL);
		if ((rc = ns_source_info(env->ns, h[k], &si[k])))
			return rc;
	}
	for (uint32_t k = 0; k < w->n; k++)
		if (!si[k].kvhdr)
			return -EINVAL;         /* not a KV payload: no views of it */
	return 0;
}

/* ---------------------------------------------------------------- buffers */

/* Pulls land in a view's buffer: memory the transport can write (RDMA:
 * registered); zeroed when new. */
static void *buf_make(struct cluster *cl, size_t size)
{
	return cl ? cluster_buf_alloc(cl, size) : calloc(1, size ? size : 1);
}

static void buf_release(struct cluster *cl, void *p)
{
	if (cl)
		cluster_buf_free(cl, p);
	else
		free(p);
}

/* A buffer of at least size (*got: its own): the smallest kept one that
 * fits, room in the pool (for both, *reused set: only what the view fills
 * is written), or a new one. */
static void *buf_get(const struct view_env *env, size_t size, size_t *got, int *reused)
{
	struct view_jobs *j = env->jobs;
	void *p = NULL;
	int best = -1;

	*reused = 0;
	if (j && size >= VIEW_KEEP_MIN) {
		pthread_mutex_lock(&j->lock);
		for (int i = 0; i < VIEW_KEEP_BUFS; i++)
			if (j->kept[i].p && j->kept[i].size >= size &&
			    (best < 0 || j->kept[i].size < j->kept[best].size))
				best = i;
		if (best >= 0) {
			p = j->kept[best].p;
			*got = j->kept[best].size;
			j->kept_bytes -= j->kept[best].size;
			j->kept[best].p = NULL;
			*reused = 1;
		}
		pthread_mutex_unlock(&j->lock);
	}
	if (p)
		return p;
	*got = size;
	if (size >= VIEW_KEEP_MIN && (p = ns_scratch_get(env->ns, size)))
		*reused = 1;
	return p ? p : buf_make(env->cl, size);
}

/* A closed view's buffer: back to the pool, kept for the next if there
 * is room, else freed. */
static void buf_put(const struct view_env *env, void *p, size_t size)
{
	struct view_jobs *j = env->jobs;

	if (ns_scratch_put(env->ns, p, size))
		return;
	if (j && size >= VIEW_KEEP_MIN && size <= VIEW_KEEP_BYTES) {
		pthread_mutex_lock(&j->lock);
		for (int i = 0; i < VIEW_KEEP_BUFS; i++)
			if (!j->kept[i].p && j->kept_bytes + size <= VIEW_KEEP_BYTES) {
				j->kept[i].p = p;
				j->kept[i].size = size;
				j->kept_bytes += size;
				p = NULL;
				break;
			}
		pthread_mutex_unlock(&j->lock);
	}
	if (p)
		buf_release(env->cl, p);
}

/* ---------------------------------------------------------------- assembly */

/* Local pieces are copied straight out of the pool.  The span the rows
 * lie in is mapped once (a published object's extents stay put while the
 * view holds it), then each row is one copy, or two where it straddles
 * extents: a token-major view is a gather of many short rows, and a call
 * into the namespace per row cost more than the copy.  Rows are stored
 * around the cache (copy.h): an ordinary store of a short row first
 * reads its target lines in, which made a gather of 512-byte rows run at
 * half the speed of the reader's copy out of the view (vview.py). */
static int copy_local(struct ns *ns, struct ns_handle *h, const struct kv_seg *s, uint8_t *buf)
{
	uint64_t end = s->soff + (uint64_t)(s->count - 1) * s->sstride + s->len;
	uint64_t mstart = 0, mlen = 0;  /* what map holds: [mstart, mstart + mlen) */
	struct iovec map[64];
	int n = 0;

	for (uint32_t k = 0; k < s->count; k++) {
		uint8_t *dst = buf + s->doff + k * s->dstride;
		for (uint64_t done = 0; done < s->len;) {
			uint64_t at = s->soff + k * s->sstride + done;
			if (at < mstart || at >= mstart + mlen) {
				ssize_t got = ns_read(ns, h, at, end - at, map, &n, 64);
				if (got <= 0)
					return got < 0 ? (int)got : -EIO;
				mstart = at;
				mlen = (uint64_t)got;
			}
			uint64_t rel = at - mstart;
			int i = 0;
			while (rel >= map[i].iov_len)
				rel -= map[i++].iov_len;
			uint64_t take = map[i].iov_len - rel < s->len - done ? map[i].iov_len - rel
									  : s->len - done;
			copy_stream(dst + done, (const uint8_t *)map[i].iov_base + rel, take);
			done += take;
		}
	}
	copy_fence();
	return 0;
}

static const void *buf_at(void *arg, uint64_t off, uint64_t *len)
{
	struct view *v = arg;

	if (off >= v->size)
		return NULL;
	*len = v->size - off;
	return v->buf + off;
}

static uint64_t seg_end(const struct kv_seg *s)
{
	return s->doff + (uint64_t)(s->count - 1) * s->dstride + s->len;
}

/* Segment s's heads against its shard's sums: 0 or -EIO. */
static int check(struct view *v, const struct kv_seg *s)
{
	char msg[160];

	if (!kv_verify_range(&v->kv, buf_at, v, s->doff, seg_end(s), msg, sizeof(msg)))
		return 0;
	stat_add(v->env.st, ST_CHECKSUM_FAILED, 1);
	fprintf(stderr, "omnifs: a view's bytes fail their shard's checksum: %s\n", msg);
	return -EIO;
}

/* Wakes the reads whose range is ready, or all once the fill has failed
 * or ended; v->lock held. */
static void wake_readers(struct view *v)
{
	for (struct reader **r = &v->readers; *r;) {
		struct reader *x = *r;
		if (v->err || v->filled || rangeset_covers(&v->ready, x->lo, x->hi)) {
			*r = x->next;
			x->waiting = 0;
			pthread_cond_signal(&x->cond);
		} else {
			r = &x->next;
		}
	}
}

/* Segment s is in (err 0) or will never be: its heads are checked, then
 * its bytes are readable. */
static void land(struct view *v, const struct kv_seg *s, int err)
{
	if (!err)
		err = check(v, s);
	pthread_mutex_lock(&v->lock);
	if (err && !v->err)
		v->err = err == -ENOENT ? -ENOENT : -EIO;
	else if (!err && (s->count == 1 || s->dstride == s->len))
		rangeset_add(&v->ready, s->doff, s->doff + (uint64_t)s->count * s->len);
	else
		for (uint32_t k = 0; !err && k < s->count; k++)
			rangeset_add(&v->ready, s->doff + k * s->dstride, s->doff + k * s->dstride + s->len);
	wake_readers(v);
	pthread_mutex_unlock(&v->lock);
}

static void job_answer(struct job *j, int rc);

/* Answers view arg's open if it still waits: with the view (err is its
 * reads' then, if any), or ENOENT.  Also cluster_pull_start's held: the
 * owners of the remote sources hold them for the view now, or one failed
 * first. */
static void answer_open(void *arg, int err)
{
	struct view *v = arg;

	pthread_mutex_lock(&v->lock);
	struct job *j = v->opening;
	v->opening = NULL;
	pthread_mutex_unlock(&v->lock);
	if (j)
		job_answer(j, err == -ENOENT ? -ENOENT : 0);
}

struct landing { struct view *v; const struct kv_seg *s; };
static void landed(void *arg, int err)
{
	struct landing *l = arg;
	land(l->v, l->s, err);
}

/* The remote segments' pulls in flight, and what they land through. */
struct pulls {
	struct cluster_pulls *ps;
	struct cluster_piece *pc;
	struct iovec **iovs;
	struct landing *ls;
	size_t n;
};

/* Sends the remote segments' pulls, each one strided pull, all of them
 * at once; the remote sources they read are the ones the open waits for. */
static int pulls_start(struct view *v, const struct ns_srcinfo *si, const struct kv_plan *p,
		       struct pulls *pl)
{
	int rc = (pl->pc = calloc(p->nseg, sizeof(*pl->pc))) &&
		 (pl->iovs = calloc(p->nseg, sizeof(*pl->iovs))) &&
		 (pl->ls = calloc(p->nseg, sizeof(*pl->ls))) ? 0 : -ENOMEM;

	for (size_t i = 0; !rc && i < p->nseg; i++) {
		const struct kv_seg *s = &p->seg[i];
		if (si[s->src].owner < 0)
			continue;
		/* Pieces land back to back unless the view spaces them out. */
		uint32_t nd = s->count > 1 && s->dstride != s->len ? s->count : 1;
		struct iovec *iov = malloc(nd * sizeof(*iov));
		if (!iov) {
			rc = -ENOMEM;
			break;
		}
		for (uint32_t j = 0; j < nd; j++)
			iov[j] = (struct iovec){ v->buf + s->doff + j * s->dstride,
						 nd > 1 ? s->len : s->len * s->count };
		pl->iovs[pl->n] = iov;
		pl->ls[pl->n] = (struct landing){ v, s };
		pl->pc[pl->n] = (struct cluster_piece){ si[s->src].owner, si[s->src].oid, s->soff,
			s->len, s->sstride, s->count, iov, (int)nd, landed, &pl->ls[pl->n] };
		pl->n++;
	}
	if (!rc && pl->n)
		rc = v->env.cl ? cluster_pull_start(v->env.cl, pl->pc, pl->n, answer_open, v,
						    &pl->ps) : -EIO;
	pthread_mutex_lock(&v->lock);
	v->ps = pl->ps;         /* for view_close, which may cancel them */
	pthread_mutex_unlock(&v->lock);
	return rc;
}

/* Waits for the pulls sent to end: 0, or the first error. */
static int pulls_wait(struct view *v, struct pulls *pl)
{
	int rc = pl->ps ? cluster_pull_wait(pl->ps) : 0;

	pthread_mutex_lock(&v->lock);
	v->ps = NULL;
	pthread_mutex_unlock(&v->lock);
	if (pl->ps)
		cluster_pull_free(pl->ps);

	for (size_t i = 0; pl->iovs && i < pl->n; i++)
		free(pl->iovs[i]);
	free(pl->iovs);
	free(pl->ls);
	free(pl->pc);
	return rc;
}

static int extent_cmp(const void *a, const void *b)
{
	const struct range *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* What no segment fills (the header, alignment gaps) is readable at once. */
static int mark_gaps(struct view *v, const struct kv_plan *p)
{
	struct range *e = malloc((p->nseg + 1) * sizeof(*e));
	uint64_t at = 0;

	if (!e)
		return -ENOMEM;
	for (size_t i = 0; i < p->nseg; i++)
		e[i] = (struct range){ p->seg[i].doff, seg_end(&p->seg[i]) };
	qsort(e, p->nseg, sizeof(*e), extent_cmp);
	e[p->nseg] = (struct range){ v->size, v->size };
	pthread_mutex_lock(&v->lock);
	for (size_t i = 0; i <= p->nseg; i++) {
		uint64_t from = at > p->hdr_len ? at : p->hdr_len;
		if (v->reused && e[i].lo > from)        /* alignment: zeros */
			memset(v->buf + from, 0, e[i].lo - from);
		if (e[i].lo > at)
			rangeset_add(&v->ready, at, e[i].lo);
		if (e[i].hi > at)
			at = e[i].hi;
	}
	pthread_mutex_unlock(&v->lock);
	free(e);
	return 0;
}

static int seg_cmp(const void *a, const void *b, void *arg)
{
	const struct kv_seg *seg = arg;
	uint64_t x = seg[*(const size_t *)a].doff, y = seg[*(const size_t *)b].doff;
	return x < y ? -1 : x > y;
}

/* The local segments, band by band: a band is the segments whose rows
 * interleave in the view (a tensor's rows from every shard, token-major).
 * A band of local segments only is copied, checked, and made readable in
 * one step, so the ready set stays a few ranges instead of one per row;
 * where a remote segment shares the band, each local one lands alone. */
static int fill_local(struct view *v, const struct ns_srcinfo *si, const struct kv_plan *p)
{
	size_t *ix = malloc(p->nseg * sizeof(*ix));

	if (!ix)
		return -ENOMEM;
	for (size_t i = 0; i < p->nseg; i++)
		ix[i] = i;
	qsort_r(ix, p->nseg, sizeof(*ix), seg_cmp, p->seg);
	int rc = 0;
	for (size_t i = 0, j; !rc && i < p->nseg; i = j) {
		uint64_t lo = p->seg[ix[i]].doff, hi = seg_end(&p->seg[ix[i]]);
		int remote = 0;
		for (j = i; j < p->nseg && p->seg[ix[j]].doff < hi; j++) {
			uint64_t e = seg_end(&p->seg[ix[j]]);
			hi = e > hi ? e : hi;
			remote |= si[p->seg[ix[j]].src].owner >= 0;
		}
		for (size_t k = i; !rc && k < j; k++) {
			const struct kv_seg *s = &p->seg[ix[k]];
			if (si[s->src].owner >= 0)
				continue;
			rc = copy_local(v->env.ns, v->src[s->src], s, v->buf);
			if (remote)
				land(v, s, rc);
			else if (!rc)
				rc = check(v, s);
		}
		if (!remote) {
			/* The fill is a long copy beside the reader's requests:
			 * one woken onto this core would wait for the
			 * scheduler's tick (4 ms here, in every other view's
			 * first read) unless the fill steps aside. */
			sched_yield();
			pthread_mutex_lock(&v->lock);
			if (rc && !v->err)
				v->err = rc == -ENOENT ? -ENOENT : -EIO;
			else if (!rc)
				rangeset_add(&v->ready, lo, hi);
			wake_readers(v);
			pthread_mutex_unlock(&v->lock);
		}
	}
	free(ix);
	return rc;
}

/* Brings the view's bytes in, on the job's thread (a small local view:
 * on the opener's, before its open is answered): remote ranges pulled,
 * all in flight while the local ones are copied from the pool.  A waiting
 * open is answered once the remote sources are held, or at once if there
 * are none. */
static void fill(struct view *v, const struct ns_srcinfo *si, const struct kv_plan *p)
{
	struct pulls pl = { 0 };
	int rc = mark_gaps(v, p);

	if (!rc)
		rc = pulls_start(v, si, p, &pl);
	if (rc || !pl.n)        /* no owner to hold anything for it */
		answer_open(v, 0);
	if (!rc)
		rc = fill_local(v, si, p);
	int prc = pulls_wait(v, &pl);
	rc = rc ? rc : prc;
	pthread_mutex_lock(&v->lock);
	if (!v->err && (rc || !rangeset_covers(&v->ready, 0, v->size)))
		v->err = rc == -ENOENT ? -ENOENT : -EIO;
	v->filled = 1;
	wake_readers(v);
	int err = v->err;
	pthread_mutex_unlock(&v->lock);
	answer_open(v, err);
}

/* ---------------------------------------------------------------- the open */

static void view_free(struct view *v)
{
	for (uint32_t k = 0; k < v->nsrc; k++)
		if (v->src[k])
			ns_release(v->env.ns, v->src[k]);
	free(v->src);
	free(v->cover);
	if (v->buf)
		buf_put(&v->env, v->buf, v->bufsize);
	kv_free(&v->kv);
	rangeset_fini(&v->seen);
	rangeset_fini(&v->ready);
	pthread_mutex_destroy(&v->lock);
	free(v);
}

/* An earlier source whose header parses as source k's would (the same
 * bytes and size), or -1.  The S ranks of one request write the same
 * header (vllm-omni's: rid, block ids, metadata, shapes), and a json-c
 * parse of one costs more than the plan. */
static int same_header(const struct ns_srcinfo *si, uint32_t k)
{
	for (uint32_t j = 0; j < k; j++)
		if (si[j].size == si[k].size && si[j].kvhdr_len == si[k].kvhdr_len &&
		    !memcmp(si[j].kvhdr, si[k].kvhdr, si[k].kvhdr_len))
			return (int)j;
	return -1;
}

/* Parses the sources' headers, each distinct one once, and plans rank r
 * of T over them. */
static int plan(struct want *w, struct ns_srcinfo *si, struct kv_plan *p, char *err, size_t errlen)
{
	struct kv_info *kv = calloc(w->n, sizeof(*kv));
	const void **hdr = calloc(w->n, sizeof(*hdr));
	int rc = kv && hdr ? 0 : -ENOMEM;

	for (uint32_t k = 0; !rc && k < w->n; k++) {
		int j = same_header(si, k);
		hdr[k] = si[k].kvhdr;
		if (j >= 0)
			kv[k] = kv[j];          /* the planner only reads its sources */
		else
			rc = kv_parse(si[k].kvhdr, si[k].kvhdr_len, si[k].size, &kv[k], err, errlen);
	}
	if (!rc)
		rc = kv_plan_view(kv, (const void *const *)hdr, w->n, w->S, w->r, w->T, p, err, errlen);
	for (uint32_t k = 0; kv && k < w->n; k++)
		if (same_header(si, k) < 0)     /* a borrowed parse is freed by its owner */
			kv_free(&kv[k]);
	free(kv);
	free(hdr);
	return rc;
}

/* A view up to its open: shards found (waiting for missing ones; now:
 * -EAGAIN instead of waiting or asking a peer), planned, its buffer
 * holding its header.  The plan and the shards' info stay with the
 * caller for fill(), and for it to free on an error too. */
static int prepare(const struct view_env *env, uint64_t ino, int now, struct view **out,
		   struct kv_plan *p, struct ns_srcinfo **sip, uint32_t *nsi)
{
	struct want *w = malloc(sizeof(*w));
	struct view *v = calloc(1, sizeof(*v));
	struct ns_srcinfo *si = NULL;
	char err[160] = "";
	int rc = w && v ? 0 : -ENOMEM;

	if (v) {
		v->env = *env;
		v->refs = 1;
		pthread_mutex_init(&v->lock, NULL);
		rangeset_init(&v->seen);
		rangeset_init(&v->ready);
	}
	if (!rc)
		rc = resolve(env->ns, ino, w);
	if (!rc && (!(v->src = calloc(w->n, sizeof(*v->src))) ||
		    !(si = calloc(w->n, sizeof(*si)))))
		rc = -ENOMEM;
	if (!rc)
		v->nsrc = *nsi = w->n;
	for (uint32_t k = 0; !rc && k < w->n; k++)
		rc = source_open(env->ns, w, k, env->wait_ms, now, v->src);
	if (!rc)
		rc = source_headers(env, w, v->src, si, now);
	if (!rc && (rc = plan(w, si, p, err, sizeof(err))) == -EINVAL) {
		char esc[NAME_ESC_MAX];
		fprintf(stderr, "omnifs: %s: not a view: %s\n", name_escape(w->self, esc), err);
	}
	if (!rc && !(v->buf = buf_get(env, p->size, &v->bufsize, &v->reused)))
		rc = -ENOMEM;
	if (!rc) {
		v->size = p->size;
		memcpy(v->buf, p->hdr, p->hdr_len);
		v->kv = p->kv;
		memset(&p->kv, 0, sizeof(p->kv));
		v->cover = p->cover;
		p->cover = NULL;
	}
	free(w);
	*sip = si;
	if (rc && v)
		view_free(v);
	else
		*out = v;
	return rc;
}

static void view_put(struct view *v)
{
	pthread_mutex_lock(&v->lock);
	int last = !--v->refs;
	pthread_mutex_unlock(&v->lock);
	if (last)
		view_free(v);
}

struct job {
	struct view_env env;
	uint64_t ino;
	view_done_fn done;
	void *arg;
	struct view *v;                 /* prepared (the open answered, or v->opening) */
	struct kv_plan p;
	struct ns_srcinfo *si;
	uint32_t nsi;
};

/* A view's fill copies beside the reads it feeds, which a FUSE thread
 * answers by copying out of the view's buffer.  Each vCPU of a VM like
 * ours has a cache of its own, so the scheduler leaves a woken thread
 * where it ran or where its waker runs: it put the fill and that FUSE
 * thread on one vCPU and left the other idle (a T=1 view of token-major
 * shards, vview.py: 1.25x the time of reading the shards whole; 0.8x
 * with them apart).  So a job keeps off the CPU that opened it, where the
 * FUSE thread that serves the reads is likely to run, within the CPUs the
 * daemon was given; with one CPU it changes nothing.  The job is made
 * there rather than moved once started: a move waits for the kernel's
 * migration thread first (about 50 us of a view's open here). */
static void step_aside(pthread_attr_t *at)
{
	int cpu = sched_getcpu();
	cpu_set_t m;

	if (cpu >= 0 && !sched_getaffinity(0, sizeof(m), &m) && CPU_COUNT(&m) > 1 &&
	    CPU_ISSET(cpu, &m)) {
		CPU_CLR(cpu, &m);
		pthread_attr_setaffinity_np(at, sizeof(m), &m);
	}
}

void view_jobs_init(struct view_jobs *j)
{
	memset(j, 0, sizeof(*j));
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->cond, NULL);
}

/* An answered open's view is among the open ones until its close. */
static void open_add(struct view *v)
{
	struct view_jobs *j = v->env.jobs;

	if (!j)
		return;
	pthread_mutex_lock(&j->lock);
	v->oprev = NULL;
	v->onext = j->open;
	if (j->open)
		j->open->oprev = v;
	j->open = v;
	pthread_mutex_unlock(&j->lock);
}

static void open_del(struct view *v)
{
	struct view_jobs *j = v->env.jobs;

	if (!j)
		return;
	pthread_mutex_lock(&j->lock);
	if (v->oprev)
		v->oprev->onext = v->onext;
	else
		j->open = v->onext;
	if (v->onext)
		v->onext->oprev = v->oprev;
	pthread_mutex_unlock(&j->lock);
}

void view_jobs_drain(struct view_jobs *j, struct cluster *cl)
{
	pthread_mutex_lock(&j->lock);
	while (j->n)
		pthread_cond_wait(&j->cond, &j->lock);
	while (j->open) {               /* their sources go back through cl */
		struct view *v = j->open;
		pthread_mutex_unlock(&j->lock);
		view_close(v);
		pthread_mutex_lock(&j->lock);
	}
	for (int i = 0; i < VIEW_KEEP_BUFS; i++)
		if (j->kept[i].p)
			buf_release(cl, j->kept[i].p);
	memset(j->kept, 0, sizeof(j->kept));
	j->kept_bytes = 0;
	pthread_mutex_unlock(&j->lock);
}

/* What prepare() left in j, after an error or the fill. */
static void job_clear(struct job *j)
{
	kv_plan_free(&j->p);
	for (uint32_t k = 0; j->si && k < j->nsi; k++)
		free(j->si[k].kvhdr);
	free(j->si);
	j->si = NULL;
	j->nsi = 0;
}

/* Answers the open: a view to read (the fill holds a reference too), or
 * why not. */
static void job_answer(struct job *j, int rc)
{
	if (!rc) {
		stat_add(j->env.st, ST_GETS, 1);
		pthread_mutex_lock(&j->v->lock);
		j->v->refs++;
		pthread_mutex_unlock(&j->v->lock);
		open_add(j->v);
	}
	j->done(j->arg, rc, rc ? NULL : j->v);
}

/* Whether all the view's sources are in this node's pool. */
static int all_local(const struct job *j)
{
	for (uint32_t k = 0; k < j->nsi; k++)
		if (j->si[k].owner >= 0)
			return 0;
	return 1;
}

/* A view small enough to fill on the opener's thread before answering,
 * from this node's pool only.  A T=1 view of four vllm-omni shards of 16
 * tokens (1.8 MB) took 1.9-2.0 ms against 1.4 ms so (vview.py, 0/2):
 * the job's thread started late and woke its reader band by band.  At
 * 29 MB the two ways took the same time; 16 MiB keeps an open's thread
 * busy for 2-3 ms at most. */
static int small_local(const struct job *j)
{
	return j->v->size <= VIEW_INLINE_MAX && all_local(j);
}

/* A prepared view's open: answered now if its sources are all here,
 * else by the fill, once their owners hold them for it. */
static void job_prepared(struct job *j)
{
	if (all_local(j))
		job_answer(j, 0);
	else
		j->v->opening = j;
}

/* A job is over: the drain at unmount waits for none left. */
static void job_drop(struct job *j)
{
	struct view_jobs *jobs = j->env.jobs;

	free(j);
	pthread_mutex_lock(&jobs->lock);
	if (!--jobs->n)
		pthread_cond_broadcast(&jobs->cond);
	pthread_mutex_unlock(&jobs->lock);
}

/* Prepares the view if the open did not (waiting for its shards), then
 * fills it. */
static void job_run(struct job *j)
{
	if (!j->v) {
		int rc = prepare(&j->env, j->ino, 0, &j->v, &j->p, &j->si, &j->nsi);
		if (rc)
			job_answer(j, rc);
		else
			job_prepared(j);
	}
	if (j->v) {
		fill(j->v, j->si, &j->p);
		view_put(j->v);
	}
	job_clear(j);
	job_drop(j);
}

static void *job_thread(void *arg)
{
	pthread_setname_np(pthread_self(), "omni-view");
	job_run(arg);
	return NULL;
}

static int job_start(struct job *j)
{
	pthread_attr_t at;
	pthread_t t;

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	step_aside(&at);
	int rc = -pthread_create(&t, &at, job_thread, j);
	pthread_attr_destroy(&at);
	return rc;
}

/* Shards all here with their headers (the common case: a reader opens
 * what was published before) are planned on the opener's thread, here,
 * and if they are all in this node's pool the open is answered there:
 * starting a thread first cost 175-250 us, mostly waking the other vCPU.
 * A small view of this node's shards is filled there too; a job's thread
 * fills the others while the answer travels, and prepares too where the
 * open must wait.  Remote shards answer the open from the job, once
 * their owners hold them for it (fill). */
int view_open(const struct view_env *env, uint64_t ino, int64_t wait_ms, int here,
	      view_done_fn done, void *arg)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	j->env = *env;
	j->env.wait_ms = wait_ms;
	j->ino = ino;
	j->done = done;
	j->arg = arg;
	pthread_mutex_lock(&env->jobs->lock);
	env->jobs->n++;
	pthread_mutex_unlock(&env->jobs->lock);
	int rc = here ? prepare(&j->env, ino, 1, &j->v, &j->p, &j->si, &j->nsi) : -EAGAIN;
	if (rc == -EAGAIN) {            /* all of it on the job's thread */
		job_clear(j);
		if ((rc = job_start(j)))
			job_drop(j);
		return rc;
	}
	if (rc || small_local(j)) {     /* answered here, nothing left to fill */
		if (!rc)
			fill(j->v, j->si, &j->p);
		job_answer(j, rc);
		if (!rc)
			view_put(j->v);         /* the fill's reference */
		job_clear(j);
		job_drop(j);
		return 0;
	}
	job_prepared(j);
	if (job_start(j))
		job_run(j);             /* no thread: it fills here */
	return 0;
}

ssize_t view_read(struct view *v, uint64_t off, size_t len, struct iovec *iov)
{
	if (off >= v->size)
		return 0;
	if (len > v->size - off)
		len = v->size - off;
	pthread_mutex_lock(&v->lock);
	if (!v->err && !v->filled && !rangeset_covers(&v->ready, off, off + len)) {
		struct reader r = { off, off + len, 1, .next = v->readers };
		pthread_cond_init(&r.cond, NULL);
		v->readers = &r;
		while (r.waiting)       /* fill() always ends, and wakes all */
			pthread_cond_wait(&r.cond, &v->lock);
		pthread_cond_destroy(&r.cond);
	}
	int ok = rangeset_covers(&v->ready, off, off + len);
	if (ok) {
		rangeset_add(&v->seen, off, off + len);
		v->refs++;              /* the reply's, until view_read_done() */
	}
	int err = v->err;
	pthread_mutex_unlock(&v->lock);
	if (!ok) {
		stat_add(v->env.st, ST_ERRORS, 1);
		return err == -ENOENT ? -ENOENT : -EIO;
	}
	*iov = (struct iovec){ v->buf + off, len };
	stat_add(v->env.st, ST_BYTES_READ, len);
	return (ssize_t)len;
}

void view_read_done(struct view *v)
{
	view_put(v);
}


/* A complete read delivers the heads each source gave (SPEC §5): counted
 * by the read that completes it, before its reply, as for objects, so
 * that the reader's next step sees it; called again at the close (the
 * release, or a FLUSH from a kernel that ignores noflush), it adds none. */
void view_flush(struct view *v)
{
	pthread_mutex_lock(&v->lock);
	int whole = rangeset_covers(&v->seen, 0, v->size);
	pthread_mutex_unlock(&v->lock);
	if (whole)      /* each source handle counts once */
		for (uint32_t k = 0; k < v->nsrc; k++) {
			struct ns_cover c = { v->cover[k].first, v->cover[k].n, v->cover[k].of };
			ns_source_consumed(v->env.ns, v->src[k], &c);
		}
}

/* A view closed while its fill still pulls: nobody wants the rest of
 * its bytes (a reader that read part of it, or none), so the pulls stop
 * instead of bringing it all in for nothing (cluster_pull_cancel). */
void view_close(struct view *v)
{
	open_del(v);
	view_flush(v);
	pthread_mutex_lock(&v->lock);
	if (v->ps)
		cluster_pull_cancel(v->ps);
	pthread_mutex_unlock(&v->lock);
	view_put(v);
}

void view_base(const char *name, char *out, size_t size)
{
	size_t bl;
	uint32_t r, T;

	kv_name_split(name, &bl, &r, &T);
	snprintf(out, size, "%.*s", (int)bl, name);
}

int view_exists(const struct view_env *env, uint64_t ino)
{
	struct want *w = malloc(sizeof(*w));
	int rc = w ? resolve(env->ns, ino, w) : -ENOMEM;

	for (uint32_t k = 0; !rc && k < w->n; k++)
		if (!w->ino[k])
			rc = -ENOENT;
	free(w);
	return !rc;
}

/* Plans the view of key inode ino from what is here (its shards' headers,
 * no waiting): 0 with *p (kv_plan_free it), or -ENODATA (not a view, or
 * not yet), or -errno. */
static int plan_here(const struct view_env *env, uint64_t ino, struct kv_plan *p)
{
	struct want *w = malloc(sizeof(*w));
	struct ns_handle **h = NULL;
	struct ns_srcinfo *si = NULL;
	int rc = w ? resolve(env->ns, ino, w) : -ENOMEM;

	if (rc == -EXDEV)
		rc = -ENODATA;
	if (!rc && (!(h = calloc(w->n, sizeof(*h))) || !(si = calloc(w->n, sizeof(*si)))))
		rc = -ENOMEM;
	for (uint32_t k = 0; !rc && k < w->n; k++)      /* only what is here: no waiting */
		rc = w->ino[k] ? ns_open(env->ns, w->ino[k], O_RDONLY | NS_OPEN_SOURCE |
					 NS_OPEN_EXACT, NULL, &h[k]) : -ENODATA;
	if (!rc)
		rc = source_headers(env, w, h, si, 0);
	if (!rc)
		rc = plan(w, si, p, NULL, 0);
	for (uint32_t k = 0; w && h && k < w->n; k++) {
		if (h[k])
			ns_release(env->ns, h[k]);
		if (si)
			free(si[k].kvhdr);
	}
	free(h);
	free(si);
	free(w);
	return rc == -EINVAL || rc == -ENOENT ? -ENODATA : rc;
}

int view_summary(const struct view_env *env, uint64_t ino, char *buf, size_t size)
{
	struct kv_plan p = { 0 };
	struct kv_info kv;
	int rc = plan_here(env, ino, &p);

	if (!rc && !(rc = kv_parse(p.hdr, p.hdr_len, p.size, &kv, NULL, 0))) {
		rc = kv_summary(&kv, buf, size);
		kv_free(&kv);
	}
	kv_plan_free(&p);
	return rc == -EINVAL ? -ENODATA : rc;
}

int view_size(const struct view_env *env, uint64_t ino, uint64_t *size)
{
	struct kv_plan p = { 0 };
	int rc = plan_here(env, ino, &p);

	if (!rc)
		*size = p.size;
	kv_plan_free(&p);
	return rc;
}

uint64_t view_bytes(const struct view *v)
{
	return v->size;         /* set at its open, before anyone has v */
}
