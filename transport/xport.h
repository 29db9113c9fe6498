/* xport.h - peers: authenticated connections, requests and pulls (SPEC §7).
 *
 * Each node connects to every other on demand and keeps the connection: its
 * requests and one-way messages go out on it, replies come back on it.  The
 * peer serves what arrives on the connections it accepted.  So every pair of
 * nodes has up to two connections, one per direction, and a slow pull never
 * sits in front of a request the other way; nor the same way, as the bytes
 * of a pull over TCP go out from a thread of their own (xport_defer).  What
 * a peer sends is handled in the order it was sent, also across the peer's
 * reconnections.
 *
 * Before anything else a connection runs the handshake of auth.h, which
 * also carries the protocol version and each side's transports (caps).
 * A peer that is silent for dead_ms (pings go every ping_ms) is down: its
 * requests and pulls fail with EIO, and ops->peer_down says so.  Neither
 * a reconnect nor a send to a peer that hangs delays the pings to others.
 *
 * A pull is the transport's one data path: "bring bytes [off, off+len) of
 * object oid on peer into this local buffer".  Over TCP, DATA frames are
 * read straight into the buffer; over RDMA (rdma.h), the owner grants the
 * read once per lease and the bytes come by one-sided READs.  Each chunk
 * is checked against the hash the owner took at publish before progress()
 * reports it.  Which transport a peer uses is chosen when its connection
 * comes up (mode below), said in the log and in xport_peer_info().  What
 * changes that choice (a device that is back) has the connection made
 * again once no request is in flight on it, never under one.
 */
#ifndef OMNI_XPORT_H
#define OMNI_XPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "auth.h"
#include "proto.h"

struct pool;
struct xport;
struct xport_conn;

struct xport_peer_conf { const char *name, *addr; };

/* TCP: never touch an RDMA device.  AUTO: RDMA with every peer where both
 * ends have it, TCP with the others.  RDMA: no byte over TCP: a node
 * without a device is an error, a peer without RDMA is read from by no
 * one (EIO) and served nothing. */
enum xport_mode { XPORT_TCP, XPORT_AUTO, XPORT_RDMA };

struct xport_conf {
	const char *self, *listen;              /* our name and "host:port" */
	const struct xport_peer_conf *peers;    /* every other node */
	size_t npeers;
	const uint8_t *key;                     /* AUTH_KEY bytes */
	enum xport_mode mode;
	void *pool;                             /* what peers read from, and we into; NULL
						 * with a pool_size: GPU memory */
	uint64_t pool_size;
	struct pool *stage_from;                /* a GPU pool: registered by dmabuf, or its */
	uint64_t stage_size;                    /* objects READ from a copy (rdma.h); or NULL */
	unsigned ping_ms, dead_ms, call_ms;     /* 0: 500, 3000, 5000 */
	uint64_t digest;                        /* of the cluster config: a peer whose
						 * differs is said (0: not compared) */
	unsigned trickle_ms;                    /* tests: each DATA frame sent 16 KiB
						 * at a time, this far apart, as over
						 * a link that stalls within frames */
	unsigned handshake_hold_ms;             /* tests: each handshake held this long
						 * between settling the transport and
						 * using the connection */
};

enum xport_count { XC_AUTH_FAILED, XC_BAD_FRAMES, XC_PULLED, XC_SERVED, XC_BAD_CHUNKS,
		   XC_PULLED_TCP, XC_PULLED_RDMA, XC_RDMA_READS, XC_RDMA_ERRORS,
		   XC_STRANGERS_CLOSED, XC_RDMA_STAGED, XC_RDMA_STAGE_FULL,
		   XC_RDMA_STAGE_STEPS };

/* What a peer may read of one object directly (ops->grant fills it): its
 * size, its extents in the pool in order (room for PROTO_GRANT_EXTENTS),
 * and the publish-time hashes of its chunks from first on (room for
 * PROTO_GRANT_HASHES). */
struct xport_extent { uint64_t off, len; };
struct xport_grant {
	uint64_t size, first;
	uint32_t nhash, next;
	uint64_t *hash;
	struct xport_extent *ext;
};

struct xport_ops {
	/* A request or one-way message from peer, on one of the transport's
	 * threads.  A request is answered with xport_reply*() before this
	 * returns (several frames for LISTING and DATA). */
	void (*handle)(void *ctx, struct xport_conn *c, int peer, uint64_t reqid,
		       const struct proto_msg *m);
	/* Our connection to peer is up (we may send to it), or went down. */
	void (*peer_up)(void *ctx, int peer);
	void (*peer_down)(void *ctx, int peer);
	/* Peer made a new connection to us: what it said on its earlier ones
	 * is superseded (it tells us again, peer_up on its side).  Called
	 * before the connection's first frame reaches handle() and after the
	 * last frame of its earlier connections has, which may be a while
	 * after made_ns (CLOCK_MONOTONIC), when it was made: what the peer
	 * says anywhere after it has the connection comes after made_ns. */
	void (*conn_start)(void *ctx, int peer, uint64_t made_ns);
	/* A connection a peer made to us, one that handle() was given, has
	 * ended (closed, failed, or silent for dead_ms). */
	void (*conn_end)(void *ctx, struct xport_conn *c);
	/* peer, on connection c, will read object oid directly under lease,
	 * which keeps the object as a PULL's lease does (until RELEASE or
	 * c's end): fill g, with the hashes of chunks [first, first+n).
	 * 0, or -errno for the peer (ENOENT: no such object). */
	int (*grant)(void *ctx, struct xport_conn *c, int peer, uint64_t oid, uint64_t lease,
		     uint64_t first, uint32_t n, struct xport_grant *g);
	void (*count)(void *ctx, enum xport_count what, uint64_t n);
	/* The thread in xport_call*() is about to block on a peer: its
	 * requests are sent, or what it does next may take a while (a
	 * connect, a full socket).  Once per call; may be NULL.  A FUSE
	 * thread lets the next requests go on meanwhile, and the wake-up
	 * that costs goes while its request is on the way. */
	void (*waits)(void *ctx);
};

/* Binds the listening socket; -errno with a reason in err. */
int xport_create(struct xport **out, const struct xport_conf *c,
		 const struct xport_ops *ops, void *ctx, char *err, size_t errlen);
/* Starts accepting and connecting. */
int xport_start(struct xport *x);
void xport_destroy(struct xport *x);

int xport_peer_index(const struct xport *x, const char *name);
const char *xport_peer_name(const struct xport *x, int peer);
struct xport_peer_info {
	const char *name, *addr;
	const char *state;              /* "up", "connecting" (again), "down" */
	const char *transport;          /* in use: "rdma", "tcp", "none"; "" unless up */
	const char *why;                /* why not "rdma" where we have it, or "" */
	char down_why[128];             /* why it is not up (the last fault), or "" */
	int config_differs;             /* its cluster config is not ours */
	uint64_t since_ns;              /* of the last change, wall clock */
};
void xport_peer_info(struct xport *x, int peer, struct xport_peer_info *out);
/* 1 if peer is up, or being connected to again (its connection closed
 * under us): a request to it then waits for the connect. */
int xport_peer_up(struct xport *x, int peer);
/* This node's RDMA device, how it grants reads ("window" or "pool"), and
 * why it moves nothing now if it went ("rxe0 was removed": it is opened
 * again when it is back). */
struct xport_rdma_info {
	char device[64];                /* "": none was ever opened */
	const char *grants;             /* NULL while it is gone */
	char gone[128];                 /* "" unless it went */
};
/* 0 with the device in use; -ENODEV with none (or gone: out says). */
int xport_rdma(struct xport *x, struct xport_rdma_info *out);
/* 1 if peers READ this node's GPU pool itself (GPUDirect RDMA), else 0. */
int xport_rdma_gpudirect(struct xport *x);
/* The RDMA stage of a pool no device reads (rdma.h): its size and the
 * bytes grants hold.  0, or -ENODEV without one. */
int xport_rdma_stage(struct xport *x, uint64_t *size, uint64_t *used);

/* How far this node has heard peer: the name of peer's connection to it
 * that is served now (0: none) and how many of its frames were served to
 * their end (*frames).  xport_heard_all: whether peer had heard every
 * frame sent or held on our connection to it when it said it heard
 * (conn, frames): 1, or 0 (more since, another connection, or none).
 * What a peer says it has heard tells whether something we said since
 * can still reach it (cluster.c: an rm's GONE). */
uint64_t xport_heard(struct xport *x, int peer, uint64_t *frames);
int xport_heard_all(struct xport *x, int peer, uint64_t conn, uint64_t frames);

/* A one-way message on our connection to peer: 0, or -EHOSTDOWN.
 * xport_hold: the same, held as XPORT_HOLD (xport_tell) holds it. */
int xport_send(struct xport *x, int peer, const struct proto_msg *m);
int xport_hold(struct xport *x, int peer, const struct proto_msg *m);
/* A request whose end is told, not awaited: done(arg, err) once, on
 * another thread: 0 when the peer acted on it (its ACKS, or a STATUS's
 * errno), or -EIO when the connection went first (the peer may or may
 * not have acted on it); a peer that never answers ends it with its
 * connection.
 * how: XPORT_CONNECT connects first where no connection is up, as a call
 * does (else as xport_send); XPORT_HOLD, in a thread that flushes (see
 * xport_flush), lets the frame wait (copied) for the next frame to that
 * peer, for xport_flush, or XPORT_HOLD_MS at most (the next tell, or the
 * keeper's ping, sends it): a burst costs a few sends, and wakes the peer
 * a few times, not once a frame.  0, or
 * -EHOSTDOWN or -ENOMEM, and then done is never called. */
enum { XPORT_CONNECT = 1, XPORT_HOLD = 2 };
#define XPORT_HOLD_MS 1
typedef void (*xport_done_fn)(void *arg, int err);
int xport_tell(struct xport *x, int peer, const struct proto_msg *m, unsigned how,
	       xport_done_fn done, void *arg);
/* Sends what XPORT_HOLD held: all of it when the caller's burst is over,
 * or (all 0) what was held longer than XPORT_HOLD_MS.  Only a thread that
 * calls it (the FUSE loop's, a server thread) has its frames held, for it
 * is bound to call it again, all 1, before it sleeps; any other thread's
 * frames go at once. */
void xport_flush(struct xport *x, int all);
/* A request.  on_reply sees each reply frame on the receiving thread and
 * returns 1 while more are due (LISTING with more set).  0, -EHOSTDOWN,
 * -ETIMEDOUT (no reply within call_ms) or the error the reply carries. */
typedef int (*xport_reply_fn)(void *arg, const struct proto_msg *m);
int xport_call(struct xport *x, int peer, const struct proto_msg *req,
	       xport_reply_fn on_reply, void *arg);
/* The same request to each of to[0, n) at once, so that asking n peers
 * takes one round trip, not n: on_reply(to[i].arg, ...) for to[i].peer's
 * replies, and its end (as xport_call returns) in to[i].rc.  A callee may
 * have a request of its own (req), so that one peer is asked two things
 * in that round trip.  0, or -ENOMEM with nothing sent. */
struct xport_callee { int peer; void *arg; int rc; const struct proto_msg *req; };
int xport_call_each(struct xport *x, struct xport_callee *to, int n,
		    const struct proto_msg *req, xport_reply_fn on_reply);

/* What a pull asks of peer: count pieces of len bytes at off + k*stride
 * (count 1: the range [off, off+len)) of object oid, under lease (0:
 * none; see PT_PULL in proto.h). */
struct xport_range { uint64_t oid, off, len, stride, lease; uint32_t count; };

/* Pulls r from peer into dst, the pieces back to back (dst must stay valid
 * until progress reports an end).  progress(arg, upto, 0) as verified
 * bytes land in order; then progress(arg, upto, err) once at the end: 0
 * when all arrived, else -EIO (peer lost, stalled or a chunk that fails its
 * hash), -ECANCELED (its lease was released first: xport_release), or the
 * owner's errno (ENOENT: gone).  A pull by RDMA whose queue
 * pair fails under it goes on over TCP where the transport is auto (-EIO
 * under rdma); one whose connection closes under it, on the peer's next
 * (-EIO if none comes).  upto never goes back.  Returns 0 or -EHOSTDOWN
 * (then progress is never called). */
typedef void (*xport_progress_fn)(void *arg, uint64_t upto, int err);
/* flags: XPORT_CALLER_CHECKS: the caller checks the bytes against sums
 * of its own (a view: its shards' per-head sums), so a transport that has
 * no publish-time hash for an arbitrary range (RDMA) need not; without
 * it, a pull is of whole chunks (off a multiple of PROTO_CHUNK, len too or
 * up to the end).  dst must be pool memory or from xport_buf_alloc.  Over
 * RDMA, a pull names a lease. */
#define XPORT_CALLER_CHECKS 1u
int xport_pull(struct xport *x, int peer, const struct xport_range *r,
	       const struct iovec *dst, int ndst, unsigned flags,
	       xport_progress_fn progress, void *arg);
/* The reads under lease on peer are over: its RELEASE goes out, once no
 * byte of them is still in flight.  A pull still under it is not wanted:
 * it ends soon, with ECANCELED (what landed stays reported), and moves
 * no more of its bytes than were on their way. */
void xport_release(struct xport *x, int peer, uint64_t lease);
/* Memory pulls may land in besides the pool (zeroed): NULL on failure. */
void *xport_buf_alloc(struct xport *x, size_t size);
void xport_buf_free(struct xport *x, void *buf);

/* Replies, from ops->handle. */
int xport_reply(struct xport_conn *c, uint64_t reqid, const struct proto_msg *m);
int xport_reply_data(struct xport_conn *c, uint64_t reqid, uint64_t off, uint64_t xxh3,
		     const struct iovec *iov, int n);
/* From ops->handle: fn(arg) runs on the connection's own sender thread,
 * after what was deferred before it, and before the connection ends (its
 * ops->conn_end).  For a reply of many bytes (a pull's DATA over TCP):
 * the peer's requests after it are served meanwhile, not behind it, and
 * its frames go out between those replies'.  -errno if it cannot be
 * deferred: the caller sends it itself. */
int xport_defer(struct xport_conn *c, void (*fn)(void *arg), void *arg);
/* From ops->handle: a told request (xport_tell) was acted on, said in one
 * ACKS with others once no more of the peer's frames come for a moment. */
void xport_ack(struct xport_conn *c, uint64_t reqid);

#endif
