/* ns_hash.c - an object's XXH3-64 and its chunk sums, computed while the
 * writer is still writing (a hasher thread follows a sequential writer)
 * so that publish has little left to do.
 */
#define _GNU_SOURCE
#include "ns_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <xxhash.h>

#include "../transport/pool.h"
#include "../transport/xxh3sum.h"

#define HASH_STEP_MIN (256u << 10)
/* From this size an object with no hashed prefix is hashed from its
 * blocks' sums where the pool takes them (a GPU's, beside the bytes). */
#define HASH_SUMS_MIN NS_CHUNK

/* Chunk idx's hash, growing the table as the hasher goes. */
static int chunk_store(struct object *o, uint64_t idx, uint64_t h)
{
	if (idx >= o->nchunks) {
		uint64_t n = idx + 1 > o->nchunks * 2 ? idx + 1 : o->nchunks * 2;
		uint64_t *c = realloc(o->chunks, n * sizeof(*c));
		if (!c)
			return -ENOMEM;
		o->chunks = c;
		o->nchunks = n;
	}
	o->chunks[idx] = h;
	return 0;
}

/* Feeds bytes at object offset pos into the whole-object state st and the
 * chunk state cs, closing a chunk at each NS_CHUNK boundary.  Pieces of
 * 64 KiB keep the second pass in cache. */
static int hash_feed(struct object *o, XXH3_state_t *st, XXH3_state_t *cs,
		     uint64_t pos, const uint8_t *p, size_t len)
{
	if (!cs) {              /* a single node never serves chunks */
		XXH3_64bits_update(st, p, len);
		return 0;
	}
	while (len) {
		size_t take = NS_CHUNK - pos % NS_CHUNK;
		if (take > len)
			take = len;
		if (take > (64u << 10))
			take = 64u << 10;
		XXH3_64bits_update(st, p, take);
		XXH3_64bits_update(cs, p, take);
		pos += take;
		p += take;
		len -= take;
		if (pos % NS_CHUNK == 0) {
			if (chunk_store(o, pos / NS_CHUNK - 1, XXH3_64bits_digest(cs)))
				return -ENOMEM;
			XXH3_64bits_reset(cs);
		}
	}
	return 0;
}

/* Where the next piece of the object falls, for hash_piece. */
struct hash_at {
	struct object *o;
	XXH3_state_t *st, *cs;
	uint64_t pos;
};

static int hash_piece(void *arg, const uint8_t *p, size_t n)
{
	struct hash_at *h = arg;
	int rc = hash_feed(h->o, h->st, h->cs, h->pos, p, n);

	h->pos += n;
	return rc;
}

/* Feeds one span of the pool into st and cs: in place where the CPU
 * addresses the pool; else a GPU copies each piece out while the one
 * before it is hashed, so that hashing an object placed in GPU memory
 * costs about the hash alone. */
static int hash_span(struct ns *ns, struct object *o, XXH3_state_t *st, XXH3_state_t *cs,
		     uint64_t pos, const struct ns_span *sp)
{
	struct hash_at h = { o, st, cs, pos };

	return pool_each(ns->pool, sp->off, sp->len, hash_piece, &h);
}

/* Feeds [from, to) of the object into st and cs.  Called unlocked.  Until
 * every writer is done (final is 0) the extent array may grow under a
 * writer, so pieces of it are taken under the lock; the bytes stay put. */
static int hash_range(struct ns *ns, struct object *o, XXH3_state_t *st,
		      XXH3_state_t *cs, uint64_t from, uint64_t to, int final)
{
	int rc = 0;

	while (from < to && !rc) {
		struct ns_span sp[16];
		int n;
		uint64_t at = from;
		if (!final)
			pthread_mutex_lock(&ns->lock);
		from += obj_spans(o, from, to - from, sp, &n, 16);
		if (!final)
			pthread_mutex_unlock(&ns->lock);
		for (int i = 0; i < n && !rc; i++) {
			rc = hash_span(ns, o, st, cs, at, &sp[i]);
			at += sp[i].len;
		}
	}
	return rc;
}

/* ------------------------------------------------------- from block sums */

/* The hash of [start, start + len) of o, whose summed blocks x has: its
 * tail copied out and ended on the CPU. */
static int sums_end(struct ns *ns, struct object *o, const struct xxh3sum *x,
		    uint64_t start, uint64_t len, uint64_t *h)
{
	uint8_t tail[XXH3_BLOCK + 64];
	size_t t = xxh3sum_tail(len);
	int rc = obj_copy_out(ns, o, start + len - t, tail, t);

	if (!rc)
		*h = xxh3sum_final(x, tail, len);
	return rc;
}

/* Feeds blocks [b, b + n) of o (their sums s) into the chunk sum ch,
 * ending and storing each chunk whose last summed block is among them.
 * A last chunk shorter than XXH3SUM_MIN is hashed whole after. */
static int sums_chunks(struct ns *ns, struct object *o, struct xxh3sum *ch,
		       uint64_t b, const uint64_t *s, uint64_t n)
{
	const uint64_t per = NS_CHUNK / XXH3_BLOCK;

	for (uint64_t i = 0; i < n;) {
		uint64_t c = (b + i) / per, j = (b + i) % per, k, hc;
		uint64_t clen = o->size - c * NS_CHUNK < NS_CHUNK ? o->size - c * NS_CHUNK : NS_CHUNK;
		uint64_t need = xxh3sum_nblocks(clen);
		int rc;

		if (clen < XXH3SUM_MIN)
			return 0;
		if (j >= need) {        /* a chunk's last block: its tail */
			i++;
			continue;
		}
		k = need - j < n - i ? need - j : n - i;
		xxh3sum_blocks(ch, s + 8 * i, k);
		i += k;
		if (j + k < need)
			continue;
		if ((rc = sums_end(ns, o, ch, c * NS_CHUNK, clen, &hc)) ||
		    (rc = chunk_store(o, c, hc)))
			return rc;
		xxh3sum_init(ch);
	}
	return 0;
}

/* The object's XXH3-64 and, with chunks, its chunk sums, from the sums
 * the pool takes of its 1 KiB blocks where they lie (a GPU's pool, its
 * kernel): the CPU only puts them in order and ends each range.
 * -ENOTSUP where the pool takes none, or a block lies across two
 * extents: the caller hashes the bytes instead. */
static int hash_by_sums(struct ns *ns, struct object *o, int chunks, uint64_t *h)
{
	uint64_t nb = xxh3sum_nblocks(o->size), b = 0, last = o->size / NS_CHUNK * NS_CHUNK;
	struct xxh3sum all, ch;
	int rc = 0;

	xxh3sum_init(&all);
	xxh3sum_init(&ch);
	while (b < nb && !rc) {
		struct ns_span sp;
		const uint64_t *s;
		int k;

		if (!obj_spans(o, b * XXH3_BLOCK, (nb - b) * XXH3_BLOCK, &sp, &k, 1) || k != 1)
			return -EIO;
		uint64_t n = sp.len / XXH3_BLOCK;
		if (!n || (sp.len % XXH3_BLOCK && b + n < nb))
			return -ENOTSUP;
		if (n > POOL_SUMS_MAX)
			n = POOL_SUMS_MAX;
		if ((rc = pool_xxh3_sums(ns->pool, sp.off, n, &s)))
			return rc == -EINVAL ? -ENOTSUP : rc;
		xxh3sum_blocks(&all, s, n);
		if (chunks)
			rc = sums_chunks(ns, o, &ch, b, s, n);
		b += n;
	}
	if (!rc && chunks && o->size - last && o->size - last < XXH3SUM_MIN) {
		uint8_t buf[XXH3SUM_MIN];
		if (!(rc = obj_copy_out(ns, o, last, buf, o->size - last)))
			rc = chunk_store(o, last / NS_CHUNK, XXH3_64bits(buf, o->size - last));
	}
	return rc ? rc : sums_end(ns, o, &all, 0, o->size, h);
}

/* The object's XXH3-64 at publish: the hasher's prefix (if still valid)
 * plus the rest; with no prefix, from the pool's block sums where it
 * takes them.  Called unlocked; every writer has closed. */
int obj_hash(struct ns *ns, struct object *o, uint64_t *h)
{
	XXH3_state_t local, clocal, *st = &local, *cs = ns->set.hooks ? &clocal : NULL;
	uint64_t from = 0;
	int rc;

	/* a truncation below the prefix made it dirty */
	int prefix = o->hs && (o->cs || !cs) && !o->hash_dirty;
	if ((!prefix || !o->hashed) && o->size >= HASH_SUMS_MIN &&
	    (rc = hash_by_sums(ns, o, cs != NULL, h)) != -ENOTSUP) {
		if (!rc)
			stat_add(ns->st, ST_HASHED_BY_SUMS, 1);
		goto free_states;
	}
	if (prefix) {
		st = o->hs;
		cs = o->cs;
		from = o->hashed;
	} else {
		XXH3_64bits_reset(&local);
		XXH3_64bits_reset(&clocal);
	}
	rc = hash_range(ns, o, st, cs, from, o->size, 1);
	if (!rc && cs && o->size % NS_CHUNK)
		rc = chunk_store(o, o->size / NS_CHUNK, XXH3_64bits_digest(cs));
	*h = XXH3_64bits_digest(st);
free_states:
	if (o->hs)
		XXH3_freeState(o->hs);
	if (o->cs)
		XXH3_freeState(o->cs);
	o->hs = o->cs = NULL;
	return rc;
}

/* ---------------------------------------------------------------- hasher */

/* A truncation: bytes the hash may cover can change. */
void obj_set_size(struct object *o, uint64_t size)
{
	if (size < (o->hashing ? o->hash_to : o->hashed))
		o->hash_dirty = 1;
	if (o->front > size)
		o->front = size;
	o->size = size;
}

/* Hashing a large object at publish would cost a pass over its bytes after
 * the last write.  A sequential writer's completed prefix is hashed instead
 * by this thread while the writer goes on; the FUSE thread copying the
 * bytes in keeps its core busy, this one uses another. */
#define HASH_STEP (4u << 20)

static int hasher_queue(struct ns *ns, struct object *o)
{
	if (o->queued || o->hashing || o->hash_dirty || o->front - o->hashed < HASH_STEP)
		return 0;
	o->queued = 1;
	o->refs++;
	o->hq_next = NULL;
	if (ns->hq_tail)
		ns->hq_tail->hq_next = o;
	else
		ns->hq_head = o;
	ns->hq_tail = o;
	pthread_cond_signal(&ns->hcond);
	return 1;
}

/* Where the hasher may run: anywhere but CPU away (-1: anywhere it may).
 * A writer that copies into the pool itself (a placed object) wakes the
 * hasher through a FUSE thread that may run on another core, and the
 * scheduler puts the hasher where that thread is, or where it ran last:
 * on a machine whose cores share no cache (as the vCPUs of some VMs) it
 * then stays on the writer's core while another idles, and the two take
 * turns (a 64 MiB put took 7.6 ms instead of 5.8 here).  A FUSE write is
 * copied by a daemon thread and the writer's kernel copy together: there
 * the scheduler's choice did better, and away is -1.  Advice: a failure
 * changes nothing. */
static void hasher_place(struct ns *ns, int away)
{
	cpu_set_t m = ns->hasher_cpus;

	if (!ns->hasher_tid)
		return;
	if (away >= 0 && CPU_COUNT(&m) > 1 && CPU_ISSET(away, &m)) {
		CPU_CLR(away, &m);
		ns->hasher_narrowed = !sched_setaffinity(ns->hasher_tid, sizeof(m), &m);
	} else if (ns->hasher_narrowed) {
		ns->hasher_narrowed = 0;
		sched_setaffinity(ns->hasher_tid, sizeof(m), &m);
	}
}

/* An object that leaves its key gives up its place in the queue, so that
 * its space comes back as soon as its handles close. */
void hasher_dequeue(struct ns *ns, struct object *o)
{
	struct object **pp = &ns->hq_head, *prev = NULL;

	if (!o->queued)
		return;
	for (; *pp && *pp != o; pp = &(*pp)->hq_next)
		prev = *pp;
	if (!*pp)
		return;
	*pp = o->hq_next;
	if (ns->hq_tail == o)
		ns->hq_tail = prev;
	o->queued = 0;
	o->refs--;              /* the queue's; the key's link still holds it */
}

/* o's running hash states, made on first use: 0, or -ENOMEM.  Without
 * chunk sums (out of memory for them) publish hashes it all again. */
static int hash_states(struct ns *ns, struct object *o)
{
	if (o->hs)
		return 0;
	if (!(o->hs = XXH3_createState()))
		return -ENOMEM;
	XXH3_64bits_reset(o->hs);
	if (ns->set.hooks && (o->cs = XXH3_createState()))
		XXH3_64bits_reset(o->cs);
	return 0;
}

/* One step: hash [hashed, front) of o with the lock dropped. */
static void hasher_step(struct ns *ns, struct object *o)
{
	if (o->state != OS_WRITING || o->hash_dirty || o->front <= o->hashed)
		return;
	if (hash_states(ns, o))
		return;
	o->hashing = 1;
	o->hash_to = o->front;
	uint64_t from = o->hashed, to = o->hash_to;
	pthread_mutex_unlock(&ns->lock);
	int rc = hash_range(ns, o, o->hs, o->cs, from, to, 0);
	pthread_mutex_lock(&ns->lock);
	o->hashing = 0;
	o->hashed = to;
	if (rc)
		o->hash_dirty = 1;      /* out of memory: publish hashes it all */
	pthread_cond_broadcast(&ns->hdone);
	hasher_queue(ns, o);
}

void *hasher_thread(void *arg)
{
	struct ns *ns = arg;

	pthread_setname_np(pthread_self(), "omni-hash");
	pthread_mutex_lock(&ns->lock);
	/* The CPUs it was given (a cpuset, taskset): hasher_place() keeps
	 * within them. */
	if (!sched_getaffinity(0, sizeof(ns->hasher_cpus), &ns->hasher_cpus))
		ns->hasher_tid = gettid();
	while (!ns->stopping) {
		struct object *o = ns->hq_head;
		if (!o) {
			pthread_cond_wait(&ns->hcond, &ns->lock);
			continue;
		}
		ns->hq_head = o->hq_next;
		if (!ns->hq_head)
			ns->hq_tail = NULL;
		o->queued = 0;
		hasher_step(ns, o);
		obj_put(ns, o);
	}
	pthread_mutex_unlock(&ns->lock);
	return NULL;
}

/* A write of [off, end) finished copying: extend the written prefix, or
 * note that bytes the hash already covers have changed.  away: the CPU
 * the writer copied on, for the hasher to keep off (hasher_place). */
void hash_note_write(struct ns *ns, struct object *o, uint64_t off, uint64_t end, int away)
{
	if (off < (o->hashing ? o->hash_to : o->hashed))
		o->hash_dirty = 1;
	else if (off <= o->front && end > o->front)
		o->front = end;
	/* Only once there is enough to be worth a thread's wake-up: publish
	 * hashes a small rest itself in less time than that takes. */
	if (ns->hasher_running && o->front - o->hashed >= HASH_STEP_MIN && hasher_queue(ns, o))
		hasher_place(ns, away);
}

/* A write to a pool the CPU cannot address (a GPU's) that extends the
 * hashed prefix: its bytes are hashed here, from the request's buffer as
 * they pass, where the hasher would copy them back out of the device.
 * Called locked instead of hash_note_write(); 0 if it did not take them
 * (host pools, writes out of order), and hash_note_write() is for them.
 * Drops the lock to hash. */
int hash_pass(struct ns *ns, struct object *o, uint64_t off, const void *buf, size_t len)
{
	if (ns->base || !len || o->hashing || o->queued || o->hash_dirty ||
	    off != o->hashed || off != o->front || hash_states(ns, o))
		return 0;
	o->hashing = 1;
	o->hash_to = off + len;
	pthread_mutex_unlock(&ns->lock);
	int rc = hash_feed(o, o->hs, o->cs, off, buf, len);
	pthread_mutex_lock(&ns->lock);
	o->hashing = 0;
	o->hashed = off + len;
	if (o->front < o->hashed)
		o->front = o->hashed;
	if (rc)
		o->hash_dirty = 1;      /* out of memory: publish hashes it all */
	pthread_cond_broadcast(&ns->hdone);
	return 1;
}
