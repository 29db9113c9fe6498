/* Unit tests for the namespace and object lifecycle, without FUSE. */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include "../tap.h"
#include "../../fs/ns.h"
#include "../../transport/clock.h"
#include "../../transport/pool.h"

static int woken, wake_err;
static struct ns_handle *wake_h;

static void wake(struct ns_waiter *w, int err, struct ns_handle *h)
{
	woken++;
	wake_err = err;
	wake_h = h;
	free(w);
}

static uint64_t edge(struct ns *ns, const char *from, const char *to)
{
	struct ns_attr a;
	ns_lookup(ns, NS_ROOT_INO, from, 0, &a);
	ns_lookup(ns, a.ino, to, 0, &a);
	return a.ino;
}

static uint64_t stale_ino;
static int stale_calls, stale_held, stale_epochs;

/* The kernel's side (ops.c): 1 if it looks every kept name up again
 * before it uses it, where stale_epochs says it can. */
static int stale(void *arg, uint64_t ino, int held)
{
	(void)arg;
	stale_ino = ino;
	stale_held = held;
	stale_calls++;
	return held && stale_epochs;
}

/* A published object of 3 bytes; the kernel has looked its name up. */
static uint64_t put3(struct ns *ns, uint64_t e, const char *key)
{
	struct ns_attr a;
	struct ns_handle *w;

	ns_create_key(ns, e, key, 1, 0, 0, &a, &w);
	ns_write(ns, w, "abc", 3, 0);
	ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	ns_lookup(ns, e, key, 0, &a);
	return a.ino;
}

/* A namespace over an 8 MiB host pool, started (checked as what). */
static struct ns *ns_up(struct pool **pool, struct stats *st, const struct ns_settings *set,
			const char *what)
{
	struct pool_spec spec = { POOL_HOST, 0, 8 << 20 };
	struct ns *ns = NULL;
	char err[128];

	pool_create(pool, &spec, err, sizeof(err));
	ok(ns_create(&ns, *pool, st, set) == 0 && ns_start(ns) == 0, "%s", what);
	return ns;
}

static void ns_down(struct ns *ns, struct pool *pool)
{
	ns_stop(ns);
	ns_destroy(ns);
	pool_destroy(pool);
}

static struct ns_waiter *waiter(struct ns *ns)
{
	struct ns_waiter *w = calloc(1, sizeof(*w));
	w->id = ns_waiter_id(ns);
	return w;
}

/* A claimed publish (hooks->claim), as a small put to a stage on one
 * other node makes: the peer's answer decides, before anyone here sees it. */
static int claim_rc, claims, claim_peer, claim_bytes_ok, claimed_as = -1, gones;
static struct ns_objinfo claim_info;    /* its names are only valid in the call */
static char claim_key[64];
static struct ns *claim_consume_ns;     /* set: the peer's reader's read comes first */
static int claim_consumed_rc = 1;

static int hook_claim(void *ctx, int peer, const struct ns_objinfo *o)
{
	(void)ctx;
	claims++;
	claim_peer = peer;
	claim_info = *o;
	snprintf(claim_key, sizeof(claim_key), "%s", o->key);
	claim_bytes_ok = o->data && !memcmp(o->data, "abc", 3);
	if (claim_consume_ns)
		claim_consumed_rc = ns_consumed(claim_consume_ns, o->oid, NULL, peer, 1);
	return claim_rc;
}

static uint64_t published_oid;

static void hook_published(void *ctx, const struct ns_objinfo *o)
{
	(void)ctx;
	claimed_as = o->claimed;
	published_oid = o->oid;
}

static struct ns_asker gone_asker;

static void hook_gone(void *ctx, const struct ns_objinfo *o)
{
	(void)ctx;
	gone_asker = o->asker;
	gones++;
}

/* Creates, writes "abc" into and closes key, claimed at peer 2: the
 * close's result. */
static int claimed_put(struct ns *ns, uint64_t e, const char *key)
{
	struct ns_attr a;
	struct ns_handle *w;
	int rc = ns_create_key(ns, e, key, 1, 0, 0, &a, &w);

	if (rc)
		return rc;
	ns_forget(ns, a.ino, 1);
	ns_write(ns, w, "abc", 3, 0);
	ns_handle_claim(ns, w, 2, 1);
	rc = ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	return rc;
}

/* Publishes key in e for two reads: its oid. */
static uint64_t two_reads(struct ns *ns, uint64_t e, const char *key)
{
	struct ns_attr a;
	struct ns_handle *w;

	ok(!ns_create_key(ns, e, key, 1, 0, 0, &a, &w) &&
	   !ns_setxattr(ns, a.ino, "user.omni.readers", "2", 1), "%s: an object for two reads", key);
	ns_write(ns, w, "abc", 3, 0);
	ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	return published_oid;
}

static void test_claims(void)
{
	struct pool *pool;
	struct pool_usage u0, u1;
	struct stats st = { 0 };
	struct ns_hooks hk = { .published = hook_published, .gone = hook_gone, .claim = hook_claim };
	struct ns_settings set = { .node_name = "n1", .dflt = { 1, 200, 0 }, .wake = wake,
				   .hooks = &hk };
	struct ns *ns;
	struct ns_attr a;

	ns = ns_up(&pool, &st, &set, "ns with cluster hooks up");
	uint64_t e = edge(ns, "0", "1");
	claim_rc = 0;
	is(claimed_put(ns, e, "c1"), 0, "a claim the peer takes: the close publishes");
	ok(claims == 1 && claim_peer == 2 && !strcmp(claim_key, "c1") &&
	   claim_info.size == 3 && claim_info.xxh3 == XXH3_64bits("abc", 3) &&
	   claim_info.readers == 1 && claim_info.owner == -1 && claim_bytes_ok &&
	   claim_info.excl == 1,
	   "... having asked the peer named, with the bytes, checksum and readers");
	is(claimed_as, 3, "... and announced to all but that peer");
	ok(ns_lookup(ns, e, "c1", 0, &a) == 0 && a.size == 3, "... here, published");
	ns_forget(ns, a.ino, 1);
	pool_usage(pool, &u0);
	uint64_t aborted = stat_get(&st, ST_ABORTED);
	claim_rc = -EEXIST;
	is(claimed_put(ns, e, "c2"), -EEXIST, "a claim refused: the close fails with EEXIST");
	is(ns_lookup(ns, e, "c2", 0, &a), -ENOENT, "... and leaves nothing here");
	pool_usage(pool, &u1);
	ok(u1.used == u0.used && stat_get(&st, ST_ABORTED) == aborted + 1,
	   "... its space back, counted as aborted");
	claimed_as = -1;
	claim_rc = -EHOSTDOWN;
	is(claimed_put(ns, e, "c3"), 0, "a claim no peer answered: published all the same");
	is(claimed_as, 0, "... and announced to every peer, as if never claimed");
	is(gones, 0, "nothing was taken back");
	claim_rc = 0;
	claim_consume_ns = ns;
	uint64_t consumed = stat_get(&st, ST_CONSUMED);
	is(claimed_put(ns, e, "c4"), 0, "a claim whose peer's reader reads it before the answer");
	claim_consume_ns = NULL;
	is(claim_consumed_rc, 0, "... that read counts (the object is found by its oid)");
	ok(ns_lookup(ns, e, "c4", 0, &a) == -ENOENT && stat_get(&st, ST_CONSUMED) == consumed + 1,
	   "... and consumes it: never published here");
	is(gones, 1, "... its peers told it is gone");
	struct ns_asker by = { 3, 0xfeed, 5 };
	is(ns_remove_name(ns, "0", "1", "c1", 0, &by), 0, "peer 2 removes c1");
	ok(gones == 2 && gone_asker.peer == 3 && gone_asker.conn == 0xfeed &&
	   gone_asker.heard == 5, "... its GONE says who asked, and how far it had heard us");
	is(ns_unlink(ns, e, "c3"), 0, "an rm here of c3");
	ok(gones == 3 && !gone_asker.peer, "... its GONE says no peer asked");

	/* A cover no view makes is refused at once, and counts nothing:
	 * of = 2^32 - 1 once had us count 4 billion units under the lock. */
	struct ns_cover huge = { 0, 1, UINT32_MAX }, lo = { 0, 1, 2 }, hi = { 1, 1, 2 };
	uint64_t oid = two_reads(ns, e, "c5");
	is(ns_consumed(ns, oid, &huge, 3, 5), -EINVAL, "a read of 1 unit of 2^32 - 1: EINVAL");
	is(ns_consumed(ns, oid, &(struct ns_cover){ 2, 1, 2 }, 3, 6), -EINVAL,
	   "... of units past `of`: EINVAL");
	is(ns_consumed(ns, oid, &hi, 3, 7), 0, "a view's read of half of it: no error");
	ok(ns_lookup(ns, e, "c5", 0, &a) == 0, "... and no read counted yet: the object stays");
	ns_forget(ns, a.ino, 1);
	is(ns_consumed(ns, oid, &huge, 3, 7), -EINVAL, "... the bad one again (rid 7): EINVAL");
	is(ns_consumed(ns, oid, &lo, 3, 5), 0,
	   "the other half, as rid 5, which the refused read did not take");
	ok(ns_lookup(ns, e, "c5", 0, &a) == 0, "... one read: the object stays");
	ns_forget(ns, a.ino, 1);

	/* A peer's read told twice (its answer went with a connection)
	 * counts once; another read of the same peer counts. */
	oid = two_reads(ns, e, "c6");
	is(ns_consumed(ns, oid, NULL, 1, 77), 0, "peer 1's read 77 counts");
	is(ns_consumed(ns, oid, NULL, 1, 77), 0, "... told again: no error");
	ok(ns_lookup(ns, e, "c6", 0, &a) == 0, "... and counted once: the object stays");
	ns_forget(ns, a.ino, 1);
	is(ns_consumed(ns, oid, NULL, 2, 77), 0, "peer 2's read of the same name counts");
	is(ns_lookup(ns, e, "c6", 0, &a), -ENOENT, "... the second read: used up");

	/* Only the last NS_SEEN_MAX reads are remembered: told again after
	 * as many others, a read counts again (but it costs no more). */
	oid = two_reads(ns, e, "c7");
	is(ns_consumed(ns, oid, NULL, 1, 1), 0, "peer 1's read 1 counts");
	int bad = 0;
	for (uint64_t rid = 2; rid <= NS_SEEN_MAX; rid++)
		bad += ns_consumed(ns, oid, &lo, 2, rid) != 0;
	is(bad, 0, "... then 4095 of peer 2's, each of half of it");
	is(ns_consumed(ns, oid, NULL, 1, 1), 0, "peer 1's read 1, told again");
	ok(ns_lookup(ns, e, "c7", 0, &a) == 0, "... still counts once: the object stays");
	ns_forget(ns, a.ino, 1);
	is(ns_consumed(ns, oid, &lo, 2, 1), 0, "one more of peer 2's");
	is(ns_consumed(ns, oid, NULL, 1, 1), 0, "... and 1's read 1 told again");
	is(ns_lookup(ns, e, "c7", 0, &a), -ENOENT, "... is forgotten: it counts, and uses it up");
	ns_down(ns, pool);
}

/* A complete read of a peer's object is news for its owner
 * (hooks->consumed): a reader's close hands it to its caller, to tell
 * after the reader's answer, unless someone talks to the peers first. */
static int consumed_calls, consumed_owner;
static uint64_t consumed_oid;

static void hook_consumed(void *ctx, int owner, uint64_t oid, const struct ns_cover *c)
{
	(void)ctx;
	(void)c;
	consumed_calls++;
	consumed_owner = owner;
	consumed_oid = oid;
}

/* Adds peer 1's 3-byte object key (oid) to edge 0->1 and reads it whole:
 * the reader's handle. */
static struct ns_handle *read_remote(struct ns *ns, uint64_t e, const char *key, uint64_t oid)
{
	struct ns_objinfo ri = { .from = "0", .to = "1", .key = key, .oid = oid, .size = 3,
				 .xxh3 = XXH3_64bits("abc", 3), .readers = 1, .owner = 1,
				 .data = "abc", .published_ns = 1 };
	struct ns_handle *r = NULL;
	struct ns_attr a;
	struct iovec iov[8];
	int niov;

	if (ns_remote_add(ns, 1, &ri) || ns_lookup(ns, e, key, 0, &a))
		return NULL;
	ns_open(ns, a.ino, O_RDONLY, NULL, &r);
	ns_forget(ns, a.ino, 1);
	if (r && ns_read(ns, r, 0, 3, iov, &niov, 8) != 3)
		return NULL;
	return r;
}

static void test_consumed_later(void)
{
	struct pool *pool;
	struct stats st = { 0 };
	struct ns_hooks hk = { .consumed = hook_consumed };
	struct ns_settings set = { .node_name = "n1", .dflt = { 1, 200, 0 }, .wake = wake,
				   .hooks = &hk };
	struct ns *ns;
	struct ns_attr a;
	struct ns_wakes later = { 0 };

	ns = ns_up(&pool, &st, &set, "ns with cluster hooks up");
	uint64_t e = edge(ns, "0", "1");
	struct ns_handle *r = read_remote(ns, e, "r1", 77);
	ok(r != NULL, "a peer's object, read whole");
	is(ns_flush(ns, r, NS_CLOSE_LAST, &later), 0, "its reader's close");
	ok(consumed_calls == 0 && later.deliver, "... leaves the owner's news to its caller");
	is(ns_lookup(ns, e, "r1", 0, &a), -ENOENT, "... the object gone here at once");
	ns_wake(ns, &later);
	ok(consumed_calls == 1 && consumed_oid == 77 && consumed_owner == 1,
	   "... told by ns_wake, once");
	ns_release(ns, r);
	r = read_remote(ns, e, "r2", 78);
	ns_flush(ns, r, NS_CLOSE_LAST, &later);
	ns_deliver(ns);
	is(consumed_calls, 2, "another close's news: told by the next ns_deliver (an ask's)");
	ns_wake(ns, &later);
	is(consumed_calls, 2, "... and not again by its own caller");
	ns_release(ns, r);
	uint64_t ino = put3(ns, e, "mine");
	ns_open(ns, ino, O_RDONLY, NULL, &r);
	ns_forget(ns, ino, 1);
	struct iovec iov[8];
	int niov;
	ns_read(ns, r, 0, 3, iov, &niov, 8);
	ns_flush(ns, r, NS_CLOSE_LAST, &later);
	ok(!later.deliver && consumed_calls == 2, "a read of this node's own object: no news to tell");
	ns_wake(ns, &later);
	ns_release(ns, r);
	ns_down(ns, pool);
}

/* What an O_CREAT open of a name the kernel kept goes through (op_lookup,
 * op_open): NS_LOOKUP_KNOWN, then ns_create_known. */
static void test_create_known(void)
{
	struct pool *pool;
	struct stats st = { 0 };
	struct ns_settings set = { .node_name = "n1", .dflt = { 1, 200, 0 }, .wake = wake };
	struct ns *ns;
	struct ns_attr a, ka;
	struct ns_handle *w, *w2, *r;

	ns = ns_up(&pool, &st, &set, "ns up");
	uint64_t e = edge(ns, "0", "1");
	is(ns_lookup(ns, e, "k", NS_LOOKUP_KNOWN, &a), -ENOENT, "KNOWN of a name nobody asked for: ENOENT");
	is(ns_lookup(ns, e, "k", NS_LOOKUP_OBJECT, &a), -ENOENT, "... and it made nothing");
	ns_lookup(ns, e, "k", NS_LOOKUP_WAIT, &ka);
	woken = 0;
	is(ns_open(ns, ka.ino, O_RDONLY, waiter(ns), &r), -EINPROGRESS, "a reader waits on k");
	ok(ns_lookup(ns, e, "k", NS_LOOKUP_KNOWN, &a) == 0 && a.ino == ka.ino,
	   "KNOWN gives the name the reader waits on");
	ns_forget(ns, a.ino, 1);
	uint64_t puts = stat_get(&st, ST_PUTS);
	is(ns_create_known(ns, ka.ino, 7, 8, O_WRONLY, &w), 0, "an O_CREAT open of it creates");
	ok(stat_get(&st, ST_PUTS) == puts + 1 && ns_getattr(ns, ka.ino, &a) == 0 && a.uid == 7 &&
	   a.gid == 8, "... a put, the opener's");
	is(ns_write(ns, w, "abcdef", 6, 0), 6, "... written");
	is(ns_create_known(ns, ka.ino, 7, 8, O_WRONLY | O_TRUNC, &w2), 0,
	   "a second O_CREAT|O_TRUNC open joins the writer");
	ok(ns_getattr(ns, ka.ino, &a) == 0 && a.size == 0 && stat_get(&st, ST_PUTS) == puts + 1,
	   "... emptying it, one put still");
	ns_write(ns, w2, "xy", 2, 0);
	ns_flush(ns, w2, NS_CLOSE_LAST, NULL);
	ns_release(ns, w2);
	is(woken, 0, "the reader waits for the last writer");
	ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	ok(woken == 1 && wake_err == 0 && wake_h, "... then has it");
	is(ns_create_known(ns, ka.ino, 7, 8, O_WRONLY, &w), -EACCES, "O_CREAT of it published: EACCES");
	ns_flush(ns, wake_h, NS_CLOSE_LAST, NULL);
	ns_release(ns, wake_h);
	is(ns_create_known(ns, 1u << 30, 0, 0, O_WRONLY, &w), -ENOENT, "an inode ns never gave: ENOENT");

	/* O_APPEND: at the object's end, whatever offset the write says */
	ns_create_key(ns, e, "ap", 1, 0, 0, &a, &w);
	ns_create_known(ns, a.ino, 0, 0, O_WRONLY, &w2);
	ns_handle_flags(ns, w, O_WRONLY | O_APPEND);
	ns_handle_flags(ns, w2, O_WRONLY | O_APPEND);
	ok(ns_write(ns, w, "abc", 3, 40) == 3 && ns_write(ns, w2, "de", 2, 0) == 2 &&
	   ns_write(ns, w, "f", 1, 3) == 1, "appending writes, at offsets 40, 0, 3");
	ns_flush(ns, w2, NS_CLOSE_DUP, NULL);
	ns_release(ns, w2);
	ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	ok(ns_getattr(ns, a.ino, &ka) == 0 && ka.size == 6, "... six bytes published, no hole");
	struct iovec iov[4];
	int niov;
	ns_open(ns, a.ino, O_RDONLY, NULL, &r);
	ok(ns_read(ns, r, 0, 16, iov, &niov, 4) == 6 && !memcmp(iov[0].iov_base, "abcdef", 6),
	   "... in the order they came");
	ns_handle_flags(ns, r, O_RDWR);
	ok(!ns_handle_mappable(ns, r), "a reader is never a mappable writer");
	ns_flush(ns, r, NS_CLOSE_LAST, NULL);
	ns_release(ns, r);
	ns_forget(ns, a.ino, 1);

	/* O_RDWR: the writer may map its file (ops.c asks its maps) */
	ns_create_key(ns, e, "rw", 1, 0, 0, &a, &w);
	ns_create_known(ns, a.ino, 0, 0, O_WRONLY, &w2);
	ns_handle_flags(ns, w, O_RDWR);
	ns_handle_flags(ns, w2, O_WRONLY | O_APPEND);
	ok(ns_handle_mappable(ns, w) && !ns_handle_mappable(ns, w2),
	   "an O_RDWR writer may map its file, an O_WRONLY one cannot");
	ns_flush(ns, w2, NS_CLOSE_DUP, NULL);
	ns_release(ns, w2);
	ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	ns_forget(ns, a.ino, 1);
	is(ns_create_known(ns, e, 0, 0, O_WRONLY, &w), -EISDIR, "an edge: EISDIR");
	ns_forget(ns, ka.ino, 1);
	ns_down(ns, pool);
}

/* After a cleanup, for cleanup_hold_s, the request's keys take no new
 * object (a stage worker that outlived its aborted request puts nothing
 * that stays) and no open waits for one. */
static void test_cleanup_hold(void)
{
	struct pool *pool;
	struct stats st = { 0 };
	struct ns_settings set = { .node_name = "n1", .dflt = { 1, 200, 0 }, .wake = wake,
				   .cleanup_hold_s = 600 };
	struct ns *ns = ns_up(&pool, &st, &set, "ns up, cleanup_hold_s 600");
	struct ns_attr a;
	struct ns_handle *w, *r;
	uint64_t e = edge(ns, "0", "1");

	ns_forget(ns, put3(ns, e, "h1_a"), 1);
	ns_forget(ns, put3(ns, e, "h1_b"), 1);
	is(ns_cleanup(ns, "h1", NULL), 2, "cleanup of h1: its 2 objects");
	static const char *late[] = { "h1", "h1_a", "h1_0_1_0_1", "h1.rank0of2",
				      "omni_0_to_1_kv_cache_h1" };
	int refused = 0;
	for (int i = 0; i < 5; i++)
		refused += ns_create_key(ns, e, late[i], i & 1, 0, 0, &a, &w) == -ECANCELED;
	ok(refused == 5 && stat_get(&st, ST_REFUSED) == 5 && stat_get(&st, ST_PUTS) == 2,
	   "creates of its keys after it: ECANCELED, counted as refused, no put");
	ok(ns_create_key(ns, e, "h10_a", 1, 0, 0, &a, &w) == 0, "another request's key: created");
	ns_forget(ns, a.ino, 1);
	ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	ns_lookup(ns, e, "h1_c", NS_LOOKUP_WAIT, &a);
	woken = 0;
	struct ns_waiter *hw = waiter(ns);
	is(ns_open(ns, a.ino, O_RDONLY, hw, &r), -ENOENT,
	   "an open of a key of it: ENOENT at once, nothing comes");
	ok(woken == 0 && stat_get(&st, ST_WAITERS) == 0, "... no waiter queued");
	free(hw);       /* not queued: still ours */
	ok(ns_lookup(ns, e, "h1_c", NS_LOOKUP_WAIT, &a) == 0 &&
	   ns_create_known(ns, a.ino, 0, 0, O_WRONLY, &w) == -ECANCELED,
	   "an O_CREAT open of a name the kernel kept: ECANCELED");
	ns_forget(ns, a.ino, 2);
	ns_down(ns, pool);

	set.cleanup_hold_s = 0;
	ns = ns_up(&pool, &st, &set, "ns up, cleanup_hold_s 0");
	e = edge(ns, "0", "1");
	ns_cleanup(ns, "h1", NULL);
	ok(ns_create_key(ns, e, "h1_a", 1, 0, 0, &a, &w) == 0, "with 0, a put after the cleanup stays");
	ns_forget(ns, a.ino, 1);
	ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	ns_down(ns, pool);
}

/* An open that may not wait (no waiter: a view's source, a view's
 * summary) of a name whose object is being written, or was consumed
 * while the kernel kept the name, answers ENOENT: it queues nothing. */
static void test_open_nowait(void)
{
	struct pool *pool;
	struct stats st = { 0 };
	struct ns_settings set = { .node_name = "n1", .dflt = { 1, 200, 0 }, .wake = wake };
	const int src = O_RDONLY | NS_OPEN_SOURCE | NS_OPEN_EXACT;
	struct ns *ns;
	struct ns_attr a;
	struct ns_handle *w, *r;
	struct iovec iov[8];
	int niov;

	ns = ns_up(&pool, &st, &set, "ns up");
	uint64_t e = edge(ns, "0", "1");
	ns_create_key(ns, e, "s.rank0of1", 1, 0, 0, &a, &w);
	is(ns_open(ns, a.ino, src, NULL, &r), -ENOENT, "no waiter, an object being written: ENOENT");
	is(stat_get(&st, ST_WAITERS), 0, "... nothing queued");
	ns_write(ns, w, "abc", 3, 0);
	ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	uint64_t ino = put3(ns, e, "c.rank0of1");
	ns_open(ns, ino, O_RDONLY, NULL, &r);
	ns_read(ns, r, 0, 3, iov, &niov, 8);
	ns_flush(ns, r, NS_CLOSE_LAST, NULL);          /* consumed; the name is kept */
	ns_release(ns, r);
	is(ns_open(ns, ino, src, NULL, &r), -ENOENT, "no waiter, its object consumed: ENOENT");
	is(stat_get(&st, ST_WAITERS), 0, "... nothing queued");
	ns_forget(ns, ino, 1);
	ns_down(ns, pool);
}

/* What was said gone stays so, however many. */
static void test_gone(void)
{
	struct pool *pool;
	struct stats st = { 0 };
	struct ns_settings set = { .node_name = "n1", .dflt = { 1, 200, 0 }, .wake = wake };
	struct ns_attr a;
	struct ns *ns;

	ns = ns_up(&pool, &st, &set, "ns up");
	uint64_t e = edge(ns, "0", "1");

	/* Another node's objects, said gone one after the other: a listing
	 * answered before the first, heard after the last, brings none back. */
	struct ns_objinfo ri = { .from = "0", .to = "1", .size = 3,
				 .xxh3 = XXH3_64bits("xyz", 3), .readers = 1 };
	char key[32];
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof(key), "far%d", i);
		ri.key = key;
		ri.oid = 1000 + i;
		ns_remote_add(ns, 0, &ri);
		ns_remote_gone(ns, 0, "0", "1", key, ri.oid);
	}
	ri.key = "far0";
	ri.oid = 1000;
	ok(ns_remote_answer(ns, 0, &ri) == -ENOENT && ns_lookup(ns, e, "far0", 0, &a) == -ENOENT,
	   "a late listing of the first of 5000 said gone does not bring it back");
	ns_down(ns, pool);
}

/* An rm through this node's kernel of an object a reader has open: the
 * kernel forgot the name, so only that reader's fstat() can ask (a
 * GETATTR without its file), and gets the object's last attributes; the
 * name written again takes a new inode, so the reader's mapping keeps
 * its own (node_renew). */
static void test_left(struct ns *ns, uint64_t e)
{
	struct iovec iov[2];
	struct ns_handle *r, *r2, *wr;
	struct ns_attr a;
	int niov;

	struct ns_objinfo oi;
	char names[3][256];
	uint64_t li = put3(ns, e, "l");
	ok(ns_open(ns, li, O_RDONLY, NULL, &r) == 0, "a reader opens an object");
	for (stale_epochs = 0; stale_epochs < 2; stale_epochs++) {
		ok(!ns_find(ns, "0", "1", "l", &oi, names), "a peer looks it up");
		free((void *)oi.kvhdr);
		free((void *)oi.data);
		is(ns_remove_name(ns, "0", "1", "l", oi.oid, NULL), 0, "... and removes it");
		ok(stale_held, "... the kernel is told a file is open on it");
		if (!stale_epochs) {
			is(ns_getattr(ns, li, &a), -ENOENT,
			   "a kernel that keeps the name and uses it as it is: ENOENT");
			ns_flush(ns, r, NS_CLOSE_LAST, NULL);
			ns_release(ns, r);
			li = put3(ns, e, "l");
			ok(ns_open(ns, li, O_RDONLY, NULL, &r) == 0, "a reader opens a new one");
			continue;
		}
		ok(ns_getattr(ns, li, &a) == 0 && a.size == 3 && a.gone,
		   "one that looks it up again first: the object's last attributes, gone");
	}
	ok(ns_read(ns, r, 0, 8, iov, &niov, 2) == 3 && !memcmp(iov[0].iov_base, "abc", 3),
	   "its bytes are still read");
	ns_flush(ns, r, NS_CLOSE_LAST, NULL);
	ns_release(ns, r);
	stale_calls = 0;
	li = put3(ns, e, "l");
	ok(ns_open(ns, li, O_RDONLY, NULL, &r) == 0 && ns_read(ns, r, 0, 8, iov, &niov, 2) == 3,
	   "a reader reads a new one whole");
	ns_flush(ns, r, NS_CLOSE_LAST, NULL);
	ok(stale_calls == 1 && !stale_held, "its read consumes it: no file is said open on it");
	ns_release(ns, r);

	li = put3(ns, e, "l");
	ok(ns_open(ns, li, O_RDONLY, NULL, &r) == 0, "a reader opens another");
	is(ns_unlink(ns, e, "l"), 0, "rm here");
	ok(ns_getattr(ns, li, &a) == 0 && a.size == 3 && a.gone && a.mode == (S_IFREG | 0444),
	   "getattr: the object's last attributes, gone");
	ok(ns_read(ns, r, 0, 8, iov, &niov, 2) == 3 && !memcmp(iov[0].iov_base, "abc", 3),
	   "its bytes are still read");
	ok(!ns_create_key(ns, e, "l", 1, 0, 0, &a, &wr) && a.ino != li,
	   "a writer creates the name again: a new inode, as a file is open on the old one");
	uint64_t li2 = a.ino;
	ok(ns_getattr(ns, li2, &a) == 0 && !a.gone && a.mode == (S_IFREG | 0644),
	   "... its object answers there");
	ok(ns_getattr(ns, li, &a) == 0 && a.size == 3 && a.gone,
	   "... the old inode still the last attributes of the object that left it");
	is(ns_open(ns, li, O_RDONLY, NULL, &r2), -ESTALE, "an open through the old inode: ESTALE");
	ok(ns_read(ns, r, 0, 8, iov, &niov, 2) == 3 && !memcmp(iov[0].iov_base, "abc", 3),
	   "the file open on it still reads its bytes");
	ns_flush(ns, wr, NS_CLOSE_LAST, NULL);
	ns_release(ns, wr);
	ns_flush(ns, r, NS_CLOSE_LAST, NULL);
	ns_release(ns, r);
	ns_forget(ns, li, 7);    /* four put3s above, a create and a lookup each */
	ok(ns_getattr(ns, li, &a) == 0, "the old inode stays while the kernel knows it");
	ns_forget(ns, li, 1);
	is(ns_getattr(ns, li, &a), -ENOENT, "the kernel forgets the old inode: gone");
	ns_unlink(ns, e, "l");
	ok(ns_getattr(ns, li2, &a) == 0 && !a.gone && a.size == 0, "an rm of an object nobody has open: the name's");
	ok(!ns_create_key(ns, e, "l", 1, 0, 0, &a, &wr) && a.ino == li2,
	   "written again with no file open on the last one: the same inode");
	ns_flush(ns, wr, NS_CLOSE_LAST, NULL);
	ns_release(ns, wr);
	ns_forget(ns, li2, 2);

	/* A mapping's read consumes it and its file stays open: that file no
	 * longer asks for its attributes (count_read), and the kernel's
	 * entry of the name is its inode, which a stat() uses. */
	uint64_t mi = put3(ns, e, "m");
	ok(ns_open(ns, mi, O_RDONLY, NULL, &r) == 0, "a reader opens an object");
	ns_handle_mapped(ns, r);
	ok(ns_read(ns, r, 0, 8, iov, &niov, 2) == 3, "... maps it and reads it whole (consumed)");
	is(ns_open(ns, mi, O_RDONLY, NULL, &r2), -ESTALE,
	   "an open through the name's inode meanwhile: ESTALE (the kernel looks it up again)");
	is(ns_open(ns, mi, O_RDONLY | NS_OPEN_RETRY, NULL, &r2), -ENOENT,
	   "... but not its second try: it opens the name as it is (empty; this one may not wait)");
	ok(!ns_create_key(ns, e, "m", 1, 0, 0, &a, &wr) && a.ino != mi,
	   "the name written again: a new inode");
	is(ns_getattr(ns, mi, &a), -ESTALE, "the old one: ESTALE (a stat() looks the name up again)");
	ns_write(ns, wr, "xy", 2, 0);
	ns_flush(ns, wr, NS_CLOSE_LAST, NULL);
	ns_release(ns, wr);
	is(ns_open(ns, mi, O_RDONLY, NULL, &r2), -ESTALE, "an open through the old inode: ESTALE");
	ok(ns_open(ns, mi, O_RDONLY | NS_OPEN_RETRY, NULL, &r2) == 0 &&
	   ns_read(ns, r2, 0, 8, iov, &niov, 2) == 2 && !memcmp(iov[0].iov_base, "xy", 2),
	   "... its second try: the name's object now");
	ns_release(ns, r2);
	ns_forget(ns, a.ino, 1);
	ns_release(ns, r);
	ns_forget(ns, mi, 2);

	/* A reader that read it whole and closed nothing: no file maps it. */
	mi = put3(ns, e, "p");
	ok(ns_open(ns, mi, O_RDONLY, NULL, &r) == 0 && ns_read(ns, r, 0, 8, iov, &niov, 2) == 3,
	   "a reader reads an object whole (consumed), its file open, not mapped");
	ok(!ns_create_key(ns, e, "p", 1, 0, 0, &a, &wr) && a.ino == mi,
	   "the name written again: the same inode (nothing to keep)");
	ns_flush(ns, wr, NS_CLOSE_LAST, NULL);
	ns_release(ns, wr);
	ns_release(ns, r);
	ns_forget(ns, mi, 3);
}

int main(void)
{
	struct pool *pool;
	struct stats st = { 0 };
	struct ns_settings set = { .node_name = "n1", .dflt = { 1, 200, 0 }, .wake = wake,
				   .stale = stale };
	struct ns *ns;
	struct ns_attr a;
	struct ns_handle *w, *r;
	struct iovec iov[8];
	int niov;

	ns = ns_up(&pool, &st, &set, "ns up");
	uint64_t e = edge(ns, "0", "1");
	is(ns_lookup(ns, e, "k", 0, &a), -ENOENT, "missing key: ENOENT");
	is(ns_lookup(ns, e, ".k", 0, &a), -EINVAL, "bad key: EINVAL");
	is(ns_lookup(ns, NS_ROOT_INO, "a:b", 0, &a), -EINVAL, "bad stage: EINVAL");
	ok(!ns_create_key(ns, e, "k", 1, 0, 0, &a, &w), "create k");
	is(ns_create_key(ns, e, "k", 1, 0, 0, &a, &r), -EEXIST, "O_EXCL on a key being written");
	is(ns_exists(ns, "0", "1", "k"), 0, "... and a peer's EXISTS for it finds it");
	is(ns_exists(ns, "0", "1", "nope"), -ENOENT, "EXISTS of a key never created: ENOENT");
	is(ns_write(ns, w, "hello", 5, 10), 5, "write at offset 10");
	is(ns_write(ns, w, "0123456789", 10, 0), 10, "write the gap");

	/* a reader waits on the key until publish */
	struct ns_attr ka;
	ns_lookup(ns, e, "k", 1, &ka);
	struct ns_waiter *wt = waiter(ns);
	is(ns_open(ns, ka.ino, O_RDONLY, wt, &r), -EINPROGRESS, "open before publish waits");
	is(stat_get(&st, ST_WAITERS), 1, "one waiter");
	is(ns_flush(ns, w, NS_CLOSE_DUP, NULL), 0, "a dup'd close does not publish");
	is(woken, 0, "still waiting");
	struct ns_wakes later = { 0 };
	is(ns_flush(ns, w, NS_CLOSE_LAST, &later), 0, "last close publishes");
	ns_getattr(ns, ka.ino, &a);
	ok(a.stable && a.size == 15, "... at once, for everyone who looks");
	ok(woken == 0 && later.head, "... and leaves its reader to be woken by its caller");
	ns_wake(ns, &later);
	ok(woken == 1 && wake_err == 0 && wake_h, "waiter answered with a handle");
	is(ns_write(ns, w, "x", 1, 0), -EACCES, "write after publish: EACCES");
	ns_release(ns, w);
	r = wake_h;
	ns_getattr(ns, ka.ino, &a);
	is(a.size, 15, "published size");
	char v[64] = { 0 };
	ok(ns_getxattr(ns, ka.ino, "user.omni.xxh3", v, sizeof(v)) == 16, "xxh3 xattr: %s", v);
	ssize_t n = ns_read(ns, r, 0, 100, iov, &niov, 8);
	ok(n == 15 && !memcmp(iov[0].iov_base, "0123456789hello", 15), "reads what was written");
	is(ns_flush(ns, r, NS_CLOSE_LAST, NULL), 0, "reader closes");
	is(ns_lookup(ns, e, "k", 0, &a), -ENOENT, "consumed after one complete read");
	is(stat_get(&st, ST_CONSUMED), 1, "consumed counted");
	ns_release(ns, r);

	/* a partial read consumes nothing; a waiting open times out */
	ns_create_key(ns, e, "p", 0, 0, 0, &a, &w);
	ns_write(ns, w, "abcdef", 6, 0);
	ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	ns_open(ns, a.ino, O_RDONLY, NULL, &r);
	ns_read(ns, r, 0, 3, iov, &niov, 8);
	ns_flush(ns, r, NS_CLOSE_LAST, NULL);
	ns_release(ns, r);
	is(ns_lookup(ns, e, "p", 0, &a), 0, "partial read leaves the object");
	ns_forget(ns, a.ino, 1);
	ns_lookup(ns, e, "never", 1, &ka);
	woken = 0;
	is(ns_open(ns, ka.ino, O_RDONLY, waiter(ns), &r), -EINPROGRESS, "wait for a key never written");
	is(ns_exists(ns, "0", "1", "never"), -ENOENT, "... a key only waited for does not exist");
	for (int i = 0; i < 100 && !woken; i++)
		usleep(10000);
	ok(woken == 1 && wake_err == -ENOENT, "answered ENOENT after wait_ms");

	/* killed writer, ENOSPC, removal */
	ns_create_key(ns, e, "killed", 0, 0, 0, &a, &w);
	ns_write(ns, w, "abc", 3, 0);
	ns_flush(ns, w, NS_CLOSE_KILLED, NULL);
	is(ns_lookup(ns, e, "killed", 0, &a), 0, "a killed task's close waits for the release");
	ns_forget(ns, a.ino, 1);
	ns_release(ns, w);
	is(ns_lookup(ns, e, "killed", 0, &a), -ENOENT, "killed writer publishes nothing");
	ns_create_key(ns, e, "exited", 0, 0, 0, &a, &w);
	ns_write(ns, w, "abc", 3, 0);
	ns_flush(ns, w, NS_CLOSE_EXIT, NULL);
	ns_release(ns, w);
	ns_getattr(ns, a.ino, &a);
	is(a.size, 3, "a writer that exits without close publishes at release");
	ns_unlink(ns, e, "exited");
	ns_create_key(ns, e, "big", 0, 0, 0, &a, &w);
	static char chunk[1 << 20];
	ssize_t wr = 0;
	for (int i = 0; i < 9 && wr >= 0; i++)
		wr = ns_write(ns, w, chunk, sizeof(chunk), (uint64_t)i << 20);
	is(wr, -ENOSPC, "9 MiB into an 8 MiB pool: ENOSPC");
	is(ns_flush(ns, w, NS_CLOSE_LAST, NULL), -ENOSPC, "close reports it");
	ns_release(ns, w);
	struct pool_usage u;
	for (int i = 0; i < 100 && (pool_usage(pool, &u), u.used != 4096); i++)
		usleep(10000);  /* a hash step in progress holds it briefly */
	ok(u.used == 4096, "space comes back (used %llu: the 6-byte object)", (unsigned long long)u.used);
	is(ns_unlink(ns, e, "p"), 0, "rm");
	is(ns_unlink(ns, e, "p"), -ENOENT, "rm again: ENOENT");
	pool_usage(pool, &u);
	is(u.used, 0, "pool empty");

	/* Names the kernel keeps: a published object that leaves one is
	 * told (stale), and the name answers ENOENT / ESTALE until looked up
	 * again or given a new object. */
	struct ns_objinfo oi;
	char names[3][256];
	stale_calls = 0;
	uint64_t si = put3(ns, e, "s");
	ok(!ns_find(ns, "0", "1", "s", &oi, names) && oi.size == 3 && oi.data &&
	   !memcmp(oi.data, "abc", 3), "a peer's lookup of a small object gets its bytes");
	free((void *)oi.kvhdr);
	free((void *)oi.data);
	is(ns_remove_name(ns, "0", "1", "s", oi.oid + 1, NULL), -ENOENT, "a peer's rm of another oid: ENOENT");
	is(ns_getattr(ns, si, &a), 0, "... and the object stays");
	is(stale_calls, 0, "... nothing stale");
	is(ns_remove_name(ns, "0", "1", "s", oi.oid, NULL), 0, "a peer's rm of its oid");
	ok(stale_calls == 1 && stale_ino == si, "the kernel is told its name is stale");
	is(ns_getattr(ns, si, &a), -ENOENT, "stale: getattr ENOENT");
	is(ns_getxattr(ns, si, "user.omni.size", v, sizeof(v)), -ENOENT, "stale: getxattr ENOENT");
	struct ns_handle *sh;
	struct ns_waiter *sw = waiter(ns);
	is(ns_open(ns, si, O_RDONLY, sw, &sh), -ESTALE, "stale: open ESTALE (the kernel looks again)");
	is(ns_open(ns, si, O_WRONLY, sw, &sh), -ESTALE, "... for a writer too");
	free(sw);
	ok(!ns_create_key(ns, e, "s", 1, 0, 0, &a, &w) && a.ino == si, "a new object on the name");
	is(ns_getattr(ns, si, &a), 0, "... is not stale");
	ns_flush(ns, w, NS_CLOSE_LAST, NULL);
	ns_release(ns, w);
	ns_unlink(ns, e, "s");
	is(ns_getattr(ns, si, &a), 0, "the kernel's own rm leaves no stale name");
	ns_forget(ns, si, 3);

	test_left(ns, e);

	/* A whole local object handed over (OMNIFS_IOC_WHERE, _GET): counted
	 * only once done says the caller has it. */
	uint64_t ci = put3(ns, e, "c"), size = 0, xxh = 0;
	ok(ns_open(ns, ci, O_RDONLY | NS_OPEN_HERE, NULL, &r) == 0, "open a small object");
	is(ns_direct_where(ns, r, iov, 0, &niov, &size, &xxh, NULL), -E2BIG, "too few iovecs: E2BIG");
	ok(!ns_direct_where(ns, r, iov, 8, &niov, &size, &xxh, NULL) && size == 3 && xxh &&
	   niov == 1 && !memcmp(iov[0].iov_base, "abc", 3), "where: its bytes, size and checksum");
	ns_flush(ns, r, NS_CLOSE_LAST, NULL);
	ns_release(ns, r);
	is(ns_getattr(ns, ci, &a), 0, "shown but not handed over: not consumed");
	ok(ns_open(ns, ci, O_RDONLY | NS_OPEN_HERE, NULL, &r) == 0 &&
	   !ns_direct_where(ns, r, iov, 8, &niov, &size, &xxh, NULL), "shown again");
	uint64_t sg = stat_get(&st, ST_SMALL_GETS);
	ns_direct_done(ns, r, ST_SMALL_GETS);
	ns_flush(ns, r, NS_CLOSE_LAST, NULL);
	ns_release(ns, r);
	is(ns_lookup(ns, e, "c", 0, &a), -ENOENT, "handed over: one complete read consumed it");
	is(stat_get(&st, ST_SMALL_GETS), sg + 1, "counted under the stat given");
	ns_forget(ns, ci, 1);

	/* A peer's small object learnt first without its bytes (a listing),
	 * then with them (its announce, the same oid): here from then on. */
	struct ns_objinfo ri = { .from = "0", .to = "1", .key = "far", .oid = 77, .size = 3,
				 .xxh3 = XXH3_64bits("xyz", 3), .readers = 1 };
	is(ns_exists(ns, "0", "1", "far"), -ENOENT, "EXISTS of a peer's key not heard of: ENOENT");
	is(ns_remote_add(ns, 0, &ri), 0, "a peer's object without its bytes");
	is(ns_exists(ns, "0", "1", "far"), 0, "... EXISTS of it, heard of: found");
	ns_lookup(ns, e, "far", 0, &a);
	is(ns_open(ns, a.ino, O_RDONLY | NS_OPEN_HERE, NULL, &r), -EREMOTE, "... is elsewhere");
	uint64_t bad = stat_get(&st, ST_CHECKSUM_FAILED);
	ri.data = "xyw";
	ns_remote_add(ns, 0, &ri);
	ok(stat_get(&st, ST_CHECKSUM_FAILED) == bad + 1 &&
	   ns_open(ns, a.ino, O_RDONLY | NS_OPEN_HERE, NULL, &r) == -EREMOTE,
	   "bytes that fail its checksum: counted and not kept");
	ri.data = "xyz";
	is(ns_remote_add(ns, 0, &ri), 0, "its announce with its bytes");
	is(ns_remote_claim(ns, 0, &ri), 0, "its claim again (a retry): taken, nothing changes");
	ri.oid = 80;
	is(ns_remote_claim(ns, 0, &ri), -EEXIST, "a claim of its name by another of that peer's: EEXIST");
	is(ns_remote_claim(ns, 1, &ri), -EEXIST, "... by another peer's: EEXIST");
	ri.oid = 77;
	struct ns_objinfo ci2 = ri;
	ci2.key = "k2";
	struct ns_handle *kw;
	struct ns_attr ka2;
	ns_create_key(ns, e, "k2", 1, 0, 0, &ka2, &kw);
	ns_forget(ns, ka2.ino, 1);
	ci2.oid = 79;
	ci2.excl = 1;
	is(ns_remote_claim(ns, 0, &ci2), -EEXIST,
	   "an O_EXCL put's claim of a key being written here: EEXIST");
	ci2.excl = 0;
	is(ns_remote_add(ns, 0, &ci2), -EBUSY,
	   "an announce of it: EBUSY (the claims decide), and ours stays");
	is(ns_write(ns, kw, "w", 1, 0), 1, "... its writer writes on");
	uint64_t aborted = stat_get(&st, ST_ABORTED);
	is(ns_remote_claim(ns, 0, &ci2), 0,
	   "a writer's close's claim of it: taken, the first close wins");
	is(ns_write(ns, kw, "w", 1, 1), -EEXIST, "... ours lost: its writes fail with EEXIST");
	is(ns_flush(ns, kw, NS_CLOSE_LAST, NULL), -EEXIST, "... and so does its close");
	ns_release(ns, kw);
	is(stat_get(&st, ST_ABORTED), aborted + 1, "... counted as aborted");
	ns_lookup(ns, e, "k2", 0, &ka2);
	ok(ka2.size == 3 && ns_open(ns, ka2.ino, O_RDONLY | NS_OPEN_HERE, NULL, &r) == 0,
	   "... the key holds the claim's object, its bytes here");
	ns_release(ns, r);
	ns_forget(ns, ka2.ino, 1);
	ci2.key = "k3";
	ci2.oid = 78;
	ns_create_key(ns, e, "k3", 1, 0, 0, &ka2, &kw);
	ns_forget(ns, ka2.ino, 1);
	ci2.decided = 1;
	is(ns_remote_add(ns, 0, &ci2), 0,
	   "an announce decided where claims meet, of a key being written here: taken");
	ci2.decided = 0;
	is(ns_write(ns, kw, "w", 1, 0), -EEXIST, "... ours lost: its writes fail with EEXIST");
	is(ns_flush(ns, kw, NS_CLOSE_LAST, NULL), -EEXIST, "... and so does its close");
	ns_release(ns, kw);
	ci2.oid = 77;
	ci2.key = "claimed";
	ci2.oid = 81;
	struct ns_attr cw;
	ns_lookup(ns, e, "claimed", 1, &cw);
	woken = 0;
	is(ns_open(ns, cw.ino, O_RDONLY, waiter(ns), &r), -EINPROGRESS, "a reader waits for a key");
	is(ns_remote_claim(ns, 0, &ci2), 0, "a claim of it, with its bytes: taken");
	ok(woken == 1 && wake_err == 0 && wake_h, "... and the reader has it at once");
	ns_release(ns, wake_h);
	ns_forget(ns, cw.ino, 1);
	int here = ns_open(ns, a.ino, O_RDONLY | NS_OPEN_HERE, NULL, &r) == 0;
	ok(here && !ns_direct_where(ns, r, iov, 8, &niov, &size, &xxh, NULL) && size == 3 &&
	   !memcmp(iov[0].iov_base, "xyz", 3), "... are here now");
	if (here)
		ns_release(ns, r);
	ns_forget(ns, a.ino, 1);

	/* rm of a request: its keys of this node, published or being
	 * written; another node's only once its owner has removed them. */
	static const char *mine[] = { "q1", "q1_0_1", "q1.rank0of2", "omni_0_to_1_kv_cache_q1" };
	for (int i = 0; i < 4; i++)
		ns_forget(ns, put3(ns, e, mine[i]), 1);
	ns_forget(ns, put3(ns, e, "q10"), 1);
	struct ns_handle *qw;
	ns_create_key(ns, e, "q1_writing", 1, 0, 0, &a, &qw);
	ns_forget(ns, a.ino, 1);
	struct ns_objinfo qi = { .from = "0", .to = "1", .key = "q1_far", .oid = 78, .size = 3,
				 .xxh3 = XXH3_64bits("xyz", 3), .readers = 1 };
	ns_remote_add(ns, 0, &qi);
	uint64_t removed = stat_get(&st, ST_REMOVED);
	is(ns_cleanup(ns, "q1", NULL), 5, "cleanup: the request's 5 objects of this node");
	is(stat_get(&st, ST_REMOVED), removed + 5, "counted as removed");
	is(ns_write(ns, qw, "x", 1, 0), -ENOENT, "its writer's next write: ENOENT");
	ns_release(ns, qw);
	ok(ns_lookup(ns, e, "q10", 0, &a) == 0, "another request's key stays");
	ns_forget(ns, a.ino, 1);
	ok(ns_lookup(ns, e, "q1_far", 0, &a) == 0, "another node's stays until its owner is told");
	ns_forget(ns, a.ino, 1);
	uint8_t told[1] = { 1 };
	ok(ns_cleanup(ns, "q1", told) == 0 && ns_lookup(ns, e, "q1_far", 0, &a) == -ENOENT,
	   "and is forgotten, not counted, once it is");
	ok(ns_remote_answer(ns, 0, &qi) == -ENOENT && ns_lookup(ns, e, "q1_far", 0, &a) == -ENOENT,
	   "a late listing of it does not bring it back");
	ok(ns_remote_add(ns, 0, &qi) == 0 && ns_lookup(ns, e, "q1_far", 0, &a) == 0,
	   "its owner's announce after that does (it says what it has in order)");
	ns_forget(ns, a.ino, 1);
	ns_remote_gone(ns, 0, "0", "1", "q1_far", 78);

	/* An owner's new connection: its records stay on their keys while it
	 * says them again, and those it does not say leave at the end, but
	 * for those its answers gave since the connection was made. */
	struct ns_objinfo g1 = qi, g2 = qi, g3 = qi, g4 = qi;
	g1.key = "gen1", g1.oid = 91;
	g2.key = "gen2", g2.oid = 92;
	g3.key = "gen3", g3.oid = 93;
	g4.key = "gen4", g4.oid = 94;
	ns_remote_add(ns, 0, &g1);
	ns_remote_add(ns, 0, &g2);
	ns_remote_add(ns, 0, &g4);
	ns_remote_answer(ns, 0, &g2);   /* heard before the connection was made */
	usleep(1000);
	uint64_t made = clock_mono_ns();
	usleep(1000);
	ns_owner_renew(ns, 0, made);
	struct ns_attr a1, a2;
	ok(ns_lookup(ns, e, "gen1", 0, &a1) == 0 && ns_lookup(ns, e, "gen2", 0, &a2) == 0,
	   "an owner's new connection: its records stay meanwhile");
	ns_forget(ns, a1.ino, 1);
	ns_forget(ns, a2.ino, 1);
	ns_remote_add(ns, 0, &g1);      /* said again */
	ns_remote_answer(ns, 0, &g3);   /* new, by a listing */
	ns_remote_answer(ns, 0, &g4);   /* answered since, not said again */
	ns_owner_swept(ns, 0);
	ok(ns_lookup(ns, e, "gen1", 0, &a) == 0, "... the one it said again stays");
	ns_forget(ns, a.ino, 1);
	ok(ns_lookup(ns, e, "gen3", 0, &a) == 0, "... and one heard of since");
	ns_forget(ns, a.ino, 1);
	ok(ns_lookup(ns, e, "gen4", 0, &a) == 0,
	   "... and one its answer gave since the connection was made (it says again only what we host)");
	ns_forget(ns, a.ino, 1);
	is(ns_lookup(ns, e, "gen2", 0, &a), -ENOENT,
	   "... one it did not say, answered only before the connection was made, leaves");
	ns_remote_gone(ns, 0, "0", "1", "gen1", 91);
	ns_remote_gone(ns, 0, "0", "1", "gen3", 93);
	ns_remote_gone(ns, 0, "0", "1", "gen4", 94);

	/* The same by the stem index: a long id, with another request of
	 * the same stem beside it. */
	static const char *mine2[] = { "0_0123456789ab", "0_0123456789ab_0_1",
				       "0_0123456789ab.rank1of2", "omni_0_to_1_kv_cache_0_0123456789ab" };
	for (int i = 0; i < 4; i++)
		ns_forget(ns, put3(ns, e, mine2[i]), 1);
	ns_forget(ns, put3(ns, e, "0_0123456789abc"), 1);
	ns_forget(ns, put3(ns, edge(ns, "2", "3"), "0_0123456789ab_2_3"), 1);
	qi.key = "0_0123456789ab_far";
	qi.oid = 79;
	ns_remote_add(ns, 0, &qi);
	is(ns_cleanup(ns, "0_0123456789ab", told), 5, "cleanup by stem: the 5 of ours, on two edges");
	ok(ns_lookup(ns, e, "0_0123456789ab_far", 0, &a) == -ENOENT, "and another node's record");
	ok(ns_lookup(ns, e, "0_0123456789abc", 0, &a) == 0, "another request of that stem stays");
	ns_forget(ns, a.ino, 1);
	struct ns_attr wa;
	ns_lookup(ns, e, "0_0123456789abc_later", 1, &wa);
	woken = 0;
	is(ns_open(ns, wa.ino, O_RDONLY, waiter(ns), &r), -EINPROGRESS, "an open waits for a key of it");
	ns_forget(ns, wa.ino, 1);
	is(ns_cleanup(ns, "0_0123456789abc", NULL), 1, "... until its own cleanup");
	ok(woken == 1 && wake_err == -ENOENT, "which answers the waiting open at once: ENOENT");
	is(stat_get(&st, ST_WAITERS), 0, "no waiter left");
	is(ns_cleanup(ns, "0_0123456789abc", NULL), 0, "and nothing is left");
	ns_down(ns, pool);
	test_claims();
	test_consumed_later();
	test_create_known();
	test_cleanup_hold();
	test_open_nowait();
	test_gone();
	return done_testing();
}
