/* xport.h - peers: authenticated connections, requests and pulls (SPEC §7).
 *
 * Each node connects to every other on demand and keeps the connection: its
 * requests and one-way messages go out on it, replies come back on it.  The
 * peer serves what arrives on the connections it accepted.  So every pair of
 * nodes has up to two connections, one per direction, and a slow pull never
 * sits in front of a request the other way.
 *
 * Before anything else a connection runs the handshake of auth.h, which
 * also carries the protocol version and each side's transports (caps).
 * A peer that is silent for dead_ms (pings go every ping_ms) is down: its
 * requests and pulls fail with EIO, and ops->peer_down says so.
 *
 * A pull is the transport's one data path: "bring bytes [off, off+len) of
 * object oid on peer into this local buffer".  TCP implements it with DATA
 * frames read straight into the buffer; RDMA READ will implement the same
 * call.  Each chunk arrives with the hash the owner took at publish and is
 * checked before progress() reports it.
 */
#ifndef OMNI_XPORT_H
#define OMNI_XPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "auth.h"
#include "proto.h"

struct xport;
struct xport_conn;

struct xport_peer_conf { const char *name, *addr; };

struct xport_conf {
	const char *self, *listen;              /* our name and "host:port" */
	const struct xport_peer_conf *peers;    /* every other node */
	size_t npeers;
	const uint8_t *key;                     /* AUTH_KEY bytes */
	uint32_t caps;                          /* PROTO_CAP_* we can do */
	unsigned ping_ms, dead_ms, call_ms;     /* 0: 500, 3000, 5000 */
};

enum xport_count { XC_AUTH_FAILED, XC_BAD_FRAMES, XC_PULLED, XC_SERVED, XC_BAD_CHUNKS };

struct xport_ops {
	/* A request or one-way message from peer, on one of the transport's
	 * threads.  A request is answered with xport_reply*() before this
	 * returns (several frames for LISTING and DATA). */
	void (*handle)(void *ctx, struct xport_conn *c, int peer, uint64_t reqid,
		       const struct proto_msg *m);
	/* Our connection to peer is up (we may send to it), or went down. */
	void (*peer_up)(void *ctx, int peer);
	void (*peer_down)(void *ctx, int peer);
	/* A connection a peer made to us, one that handle() was given, has
	 * ended (closed, failed, or silent for dead_ms). */
	void (*conn_end)(void *ctx, struct xport_conn *c);
	void (*count)(void *ctx, enum xport_count what, uint64_t n);
};

/* Binds the listening socket; -errno with a reason in err. */
int xport_create(struct xport **out, const struct xport_conf *c,
		 const struct xport_ops *ops, void *ctx, char *err, size_t errlen);
/* Starts accepting and connecting. */
int xport_start(struct xport *x);
void xport_destroy(struct xport *x);

size_t xport_npeers(const struct xport *x);
int xport_peer_index(const struct xport *x, const char *name);
const char *xport_peer_name(const struct xport *x, int peer);
struct xport_peer_info {
	const char *name, *addr;
	const char *state;              /* "up", "down" */
	const char *transport;          /* in use: "tcp"; "" while down */
	uint64_t since_ns;              /* of the last change, wall clock */
};
void xport_peer_info(struct xport *x, int peer, struct xport_peer_info *out);
int xport_peer_up(struct xport *x, int peer);

/* A one-way message on our connection to peer: 0, or -EHOSTDOWN. */
int xport_send(struct xport *x, int peer, const struct proto_msg *m);
/* A request.  on_reply sees each reply frame on the receiving thread and
 * returns 1 while more are due (LISTING with more set).  0, -EHOSTDOWN,
 * -ETIMEDOUT (no reply within call_ms) or the error the reply carries. */
typedef int (*xport_reply_fn)(void *arg, const struct proto_msg *m);
int xport_call(struct xport *x, int peer, const struct proto_msg *req,
	       xport_reply_fn on_reply, void *arg);

/* What a pull asks of peer: count pieces of len bytes at off + k*stride
 * (count 1: the range [off, off+len)) of object oid, under lease (0:
 * none; see PT_PULL in proto.h). */
struct xport_range { uint64_t oid, off, len, stride, lease; uint32_t count; };

/* Pulls r from peer into dst, the pieces back to back (dst must stay valid
 * until progress reports an end).  progress(arg, upto, 0) as verified
 * bytes land in order; then progress(arg, upto, err) once at the end: 0
 * when all arrived, else -EIO (peer lost, stalled or a chunk that fails its
 * hash), or the owner's errno (ENOENT: gone).  Returns 0 or -EHOSTDOWN
 * (then progress is never called). */
typedef void (*xport_progress_fn)(void *arg, uint64_t upto, int err);
/* flags: by default the bytes are stored around the cache (copy.h), for
 * a fetch that someone reads later.  XPORT_CACHED: the caller reads them
 * as soon as they land (a view checks them, a stream hands them on), so
 * they stay in cache. */
#define XPORT_CACHED 1u
int xport_pull(struct xport *x, int peer, const struct xport_range *r,
	       const struct iovec *dst, int ndst, unsigned flags,
	       xport_progress_fn progress, void *arg);

/* Replies, from ops->handle. */
int xport_reply(struct xport_conn *c, uint64_t reqid, const struct proto_msg *m);
int xport_reply_data(struct xport_conn *c, uint64_t reqid, uint64_t off, uint64_t xxh3,
		     const struct iovec *iov, int n);

#endif
