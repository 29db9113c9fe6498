/* cluster_serve.c - a peer's requests and messages, served on its
 * connection's server thread (xport): announces and GONEs of its objects,
 * lookups (a reader there waits for one of ours: subs), EXISTS and
 * claims, listings of an edge, removals, complete reads, cleanups, and
 * pulls of our objects' bytes, each chunk hashed, a streamed read's
 * under its lease (lease.c).  A pull of more than one frame is sent from
 * the connection's sender thread (xport_defer), so the peer's requests
 * after it are not served behind every byte of it.
 * Part of the cluster (cluster.c): its struct, from cluster_internal.h.
 */
#define _GNU_SOURCE
#include "cluster_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>      /* libxxhash's AVX2/AVX-512 paths, chosen at run time */
#endif

#include "lease.h"
#include "stats.h"
#include "subs.h"
#include "../transport/clock.h"

/* ---------------------------------------------------------------- serving */

/* Gathers up to PROTO_CHUNK bytes of the pieces of a strided pull from
 * stream position pos into buf. */
static int gather(struct cluster *cl, struct ns_handle *h, const struct proto_msg *m,
		  uint64_t pos, uint8_t *buf, uint64_t n)
{
	const uint64_t len = m->u.pull.len;

	for (uint64_t done = 0; done < n;) {
		uint64_t k = (pos + done) / len, in = (pos + done) % len, take = len - in;
		struct iovec iov[64];
		int cnt;
		if (take > n - done)
			take = n - done;
		ssize_t got = ns_read(cl->ns, h, m->u.pull.off + k * m->u.pull.stride + in, take,
				      iov, &cnt, 64);
		if (got <= 0)
			return got < 0 ? (int)got : -EINVAL;
		for (int i = 0; i < cnt; i++) {
			memcpy(buf + done, iov[i].iov_base, iov[i].iov_len);
			done += iov[i].iov_len;
		}
	}
	return 0;
}

static uint64_t iov_hash(const struct iovec *iov, int n)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	for (int i = 0; i < n; i++)
		XXH3_64bits_update(&st, iov[i].iov_base, iov[i].iov_len);
	return XXH3_64bits_digest(&st);
}

/* A whole object's chunks go out with the hashes kept at publish; any
 * other range (a view's) is gathered and hashed as it goes.  DATA frames
 * carry the stream position, m->u.pull.off plus the bytes before.  A
 * pull whose lease e its reader released meanwhile (an object removed
 * under a fetch nobody reads, a stream or a view closed early) ends
 * there, or sends nothing if it was still queued: ECANCELED. */
static int serve_ranges(struct cluster *cl, struct xport_conn *c, uint64_t reqid,
			const struct proto_msg *m, struct ns_handle *h, uint64_t size,
			const struct lease *e)
{
	const uint64_t off = m->u.pull.off, len = m->u.pull.len, cnt = m->u.pull.count;
	const uint64_t total = len * cnt;
	int aligned = cnt == 1 && off % NS_CHUNK == 0 && (off + len == size || len % NS_CHUNK == 0);
	uint8_t *buf = aligned || cnt == 1 ? NULL : malloc(PROTO_CHUNK);
	int rc = 0;

	if (!aligned && cnt > 1 && !buf)
		return -ENOMEM;
	for (uint64_t pos = 0, n; !rc && pos < total; pos += n) {
		uint64_t xxh3;
		if (e && leases_ended(cl->leases, e)) {
			rc = -ECANCELED;
			break;
		}
		n = total - pos < PROTO_CHUNK ? total - pos : PROTO_CHUNK;
		struct iovec iov[64];
		int k;
		if (aligned) {
			rc = ns_serve_chunk(cl->ns, h, (off + pos) / NS_CHUNK, iov, &k, 64, &xxh3);
		} else if (cnt == 1) {  /* a range: straight from the pool */
			ssize_t got = ns_read(cl->ns, h, off + pos, n, iov, &k, 64);
			rc = got <= 0 ? -EIO : 0;
			n = got > 0 ? (uint64_t)got : 0;
			xxh3 = iov_hash(iov, k);
		} else if (!(rc = gather(cl, h, m, pos, buf, n))) {
			iov[0] = (struct iovec){ buf, n };
			k = 1;
			xxh3 = XXH3_64bits(buf, n);
		}
		if (rc)
			break;
		if (cl->corrupt)        /* the receiver must refuse this chunk */
			xxh3 ^= 1;
		if (cl->delay_ms)
			usleep(cl->delay_ms * 1000u);
		if (xport_reply_data(c, reqid, off + pos, xxh3, iov, k))
			rc = 1;         /* the connection is gone: no STATUS */
	}
	free(buf);
	return rc;
}

/* A pull being served: its object held (h, and its lease e if any). */
struct serving {
	struct cluster *cl;
	struct xport_conn *c;
	uint64_t reqid, size;
	struct proto_msg m;
	struct ns_handle *h;
	struct lease *e;
	int rc;                 /* < 0: refused, with this status */
};

/* Its bytes, or its refusal; then it lets go of the object. */
static void serving_run(struct serving *s)
{
	struct proto_msg st = { .type = PT_STATUS };

	if (!s->rc)
		s->rc = serve_ranges(s->cl, s->c, s->reqid, &s->m, s->h, s->size, s->e);
	if (s->rc < 0) {
		st.u.status.err = -s->rc;
		xport_reply(s->c, s->reqid, &st);
	}
	if (s->e)
		leases_put(s->cl->leases, s->e);
	else if (s->h)
		ns_release(s->cl->ns, s->h);
}

static void serving_deferred(void *arg)
{
	serving_run(arg);
	free(arg);
}

/* A pull under a lease serves from the handle the lease keeps.  The
 * object is taken here, in the order of the peer's requests (an rm it
 * sent after the pull leaves the pull its bytes).  Bytes of more than one
 * frame go out from the connection's sender thread: the peer's requests
 * after it (a claim, a lookup, an rm, a small pull) are served meanwhile,
 * not behind every byte of it.  One frame's are sent here, at once. */
static void serve_pull(struct cluster *cl, struct xport_conn *c, int peer, uint64_t reqid,
		       const struct proto_msg *m)
{
	struct serving s = { .cl = cl, .c = c, .reqid = reqid, .m = *m }, *d;
	uint64_t off = m->u.pull.off, len = m->u.pull.len, last;

	s.rc = m->u.pull.lease ? leases_get(cl->leases, c, peer, m->u.pull.lease, m->u.pull.oid,
					    &s.e, &s.h, &s.size)
			       : ns_serve_open(cl->ns, m->u.pull.oid, &s.h, &s.size);
	/* The last piece must end inside the object (decode bounded all). */
	last = off + (uint64_t)(m->u.pull.count - 1) * m->u.pull.stride;
	if (!s.rc && (!len || off >= s.size || last > s.size || len > s.size - last))
		s.rc = -EINVAL;
	if (!s.rc && (uint64_t)m->u.pull.count * len > PROTO_CHUNK && (d = malloc(sizeof(*d)))) {
		*d = s;
		if (!xport_defer(c, serving_deferred, d))
			return;
		free(d);        /* (no sender: served here) */
	}
	serving_run(&s);
}

/* LISTING frames of at most PROTO_LIST_MAX objects each. */
struct lister {
	struct xport_conn *c;
	uint64_t reqid;
	struct proto_msg m;
	struct proto_obj obj[PROTO_LIST_MAX];
};

static void list_flush(struct lister *l, int more)
{
	l->m.u.listing.more = (uint8_t)more;
	xport_reply(l->c, l->reqid, &l->m);
	l->m.u.listing.n = 0;
}

static void list_one(void *arg, const struct ns_objinfo *o)
{
	struct lister *l = arg;

	if (l->m.u.listing.n == PROTO_LIST_MAX)
		list_flush(l, 1);
	to_proto(o, &l->obj[l->m.u.listing.n++]);      /* without KV headers: views ask */
}

static void serve_list(struct cluster *cl, struct xport_conn *c, uint64_t reqid,
		       const struct proto_msg *m)
{
	struct lister *l = calloc(1, sizeof(*l));

	if (!l) {
		struct proto_msg st = { .type = PT_STATUS, .u.status.err = ENOMEM };
		xport_reply(c, reqid, &st);
		return;
	}
	stat_add(cl->st, ST_PEER_LISTINGS, 1);
	l->c = c;
	l->reqid = reqid;
	l->m.type = PT_LISTING;
	l->m.u.listing.objects = 1;
	l->m.u.listing.obj = l->obj;
	ns_foreach_own(cl->ns, m->u.list.from, m->u.list.to, m->u.list.base, 0, list_one, NULL, l);
	list_flush(l, 0);
	free(l);
}

/* LOOKUP: the object, or ENOENT and (size = ms) a promise to announce it;
 * EINVAL for names that cannot be. */
static void serve_lookup(struct cluster *cl, struct xport_conn *c, int peer,
			 uint64_t reqid, const struct proto_msg *m)
{
	struct proto_msg r = { .type = PT_OBJECT };
	struct ns_objinfo o;
	char names[3][256];
	const struct proto_obj *q = &m->u.obj;

	stat_add(cl->st, ST_PEER_LOOKUPS, 1);
	if (!ns_find(cl->ns, q->from, q->to, q->key, &o, names)) {
		to_proto(&o, &r.u.obj);
		if (o.data) {
			r.u.obj.data = o.data;
			r.u.obj.datalen = (uint32_t)o.size;
		}
		xport_reply(c, reqid, &r);
		free((void *)o.kvhdr);
		free((void *)o.data);
		return;
	}
	int bad = name_check_stage(q->from) || name_check_stage(q->to) || name_check_key(q->key);
	if (!bad && q->size && q->size <= 3600000)
		subs_add(cl->subs, peer, q->from, q->to, q->key, clock_mono_ns() + q->size * 1000000u);
	r = (struct proto_msg){ .type = PT_STATUS, .u.status.err = bad ? EINVAL : ENOENT };
	xport_reply(c, reqid, &r);
}

void op_handle(void *ctx, struct xport_conn *c, int peer, uint64_t reqid,
	       const struct proto_msg *m)
{
	struct cluster *cl = ctx;
	struct proto_msg st = { .type = PT_STATUS };
	struct ns_objinfo o;

	if (cl->hold_ms && (m->type == PT_ANNOUNCE || m->type == PT_CLAIM))
		test_hold(cl->hold_ms, m->type == PT_CLAIM ? "CLAIM" : "ANNOUNCE", m->u.obj.key);
	if (cl->gone_hold_ms && m->type == PT_GONE && m->u.obj.oid)
		test_hold(cl->gone_hold_ms, "GONE", m->u.obj.key);
	if (cl->told_hold_ms && (m->type == PT_REMOVE || m->type == PT_CONSUMED))
		test_hold(cl->told_hold_ms, m->type == PT_REMOVE ? "REMOVE" : "CONSUMED",
			  m->type == PT_REMOVE ? m->u.obj.key : "an object");
	switch (m->type) {
	case PT_ANNOUNCE:
		o = from_proto(&m->u.obj);
		if (ns_remote_add(cl->ns, peer, &o) == -EEXIST) {
			char key[NAME_ESC_MAX];
			fprintf(stderr, "omnifs: %s/%s/%s published by %s exists here too; "
				"keeping ours\n", o.from, o.to, name_escape(o.key, key),
				xport_peer_name(cl->x, peer));
		}
		break;
	case PT_GONE:           /* oid 0: its resync is over (op_peer_up) */
		if (m->u.obj.oid)
			ns_remote_gone(cl->ns, peer, m->u.obj.from, m->u.obj.to,
				       m->u.obj.key, m->u.obj.oid);
		else
			ns_owner_swept(cl->ns, peer);
		break;
	case PT_CONSUMED: {
		struct ns_cover cv = { m->u.consumed.first, m->u.consumed.n, m->u.consumed.of };
		ns_consumed(cl->ns, m->u.consumed.oid, &cv, peer, m->u.consumed.rid);
		xport_ack(c, reqid);    /* counted, or not here to count: either way, heard */
		break;
	}
	case PT_LOOKUP:
		serve_lookup(cl, c, peer, reqid, m);
		break;
	case PT_EXISTS:
		stat_add(cl->st, ST_PEER_LOOKUPS, 1);
		st.u.status.err = -ns_exists(cl->ns, m->u.obj.from, m->u.obj.to, m->u.obj.key);
		xport_reply(c, reqid, &st);
		break;
	case PT_CLAIM:          /* an EXISTS and an ANNOUNCE in one */
		stat_add(cl->st, ST_PEER_CLAIMS, 1);
		o = from_proto(&m->u.obj);
		st.u.status.err = -ns_remote_claim(cl->ns, peer, &o);
		xport_reply(c, reqid, &st);
		break;
	case PT_LIST:
		serve_list(cl, c, reqid, m);
		break;
	case PT_REMOVE: {       /* gone, or not here to remove: either way, heard */
		struct ns_asker by = { peer + 1, m->u.obj.heard_conn, m->u.obj.heard };
		ns_remove_name(cl->ns, m->u.obj.from, m->u.obj.to, m->u.obj.key, m->u.obj.oid,
			       &by);
		xport_ack(c, reqid);
		break;
	}
	case PT_PULL:
		serve_pull(cl, c, peer, reqid, m);
		break;
	case PT_CLEANUP: {
		struct proto_msg r = { .type = PT_CLEANED };
		r.u.cleaned.removed = ns_cleanup(cl->ns, m->u.cleanup.id, NULL);
		xport_reply(c, reqid, &r);
		break;
	}
	case PT_RELEASE:
		leases_end(cl->leases, peer, m->u.release.lease);
		break;
	default:
		break;
	}
}

