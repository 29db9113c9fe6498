/* rdma.h - one-sided RDMA READ from peers' pools: what xport.c uses.
 *
 * TCP stays the control channel: a peer proves it holds the secret there
 * first, and only then learns (in the WELCOME) the rdma_cm port of the
 * node it will read from and a token that ties its queue pair to that
 * authenticated connection.  The reader's node then keeps one RC queue
 * pair per owner.  To read an object it asks the owner, on the TCP
 * connection, for a grant under the read's lease: the object's extents as
 * remote address, length and rkey, and the chunk hashes the owner took at
 * publish.  The READs go straight into the reader's pool (or a view's
 * registered buffer); a completion thread checks each chunk against its
 * hash before a byte of it is reported, and the owner's CPU does nothing
 * per byte.
 *
 * The owner grants only what was leased: where the device has type-2
 * memory windows, it binds one per extent of the object on the reader's
 * queue pair and invalidates them when the lease ends (RELEASE, or the
 * connection ends), so an rkey reads nothing once its lease is over.
 * Without windows the pool's own rkey is handed out ("pool" grants).
 * A lease's RELEASE goes out only once no READ under it is in flight, so
 * nothing is ever read from an extent the owner may have reused.
 *
 * This header is transport/'s own: fs/ sees only xport.h.
 */
#ifndef OMNI_RDMA_H
#define OMNI_RDMA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "proto.h"
#include "xport.h"

struct pool;
struct rdma;
struct rdma_srv;

struct rdma_conf {
	const char *listen;             /* "host:port": the device its host resolves to */
	void *pool;                     /* the pool, registered once; NULL: GPU memory */
	uint64_t pool_size;
	/* A pool the CPU does not address (GPU memory): registered through
	 * its dmabuf where the driver, the GPU and the RDMA device allow
	 * (GPUDirect RDMA), so that peers READ it as they READ a host pool.
	 * Where they do not, a grant copies the object into a stage of
	 * stage_size bytes of page-locked host memory, registered once, as
	 * far as the reader asks (a step at a time), and the peer READs the
	 * copy, which goes at the lease's RELEASE.  stage_size 0: no stage.
	 * (A test stages a host pool's objects alike, pool set too.) */
	struct pool *stage_from;
	uint64_t stage_size;
	size_t npeers;
	unsigned dead_ms;               /* READs that make no progress this long failed */
	void *ctx;                      /* for the calls below */
	/* Asks peer, on the control connection, for a grant of oid under
	 * lease with the hashes of chunks [first, first+n), and [0, upto)
	 * of it readable; got() sees the GRANTED.  0, or -errno (the
	 * owner's, or -ETIMEDOUT, -EHOSTDOWN). */
	int (*grant)(void *ctx, int peer, uint64_t oid, uint64_t lease, uint64_t first,
		     uint32_t n, uint64_t upto,
		     void (*got)(void *arg, const struct proto_msg *m), void *arg);
	/* Sends peer the RELEASE of lease, now that no READ under it is in flight. */
	void (*release)(void *ctx, int peer, uint64_t lease);
	void (*count)(void *ctx, enum xport_count what, uint64_t n);
	const char *(*peer_name)(void *ctx, int peer);  /* for the log */
	/* The device went (removed, reset, a fatal error): why is "rxe0 was
	 * removed".  Called once, from the rdma_cm thread; the caller is to
	 * rdma_close() this rdma from another thread soon, for the kernel
	 * waits for that to finish removing the device, and may open it
	 * again once it is back. */
	void (*lost)(void *ctx, const char *why);
};

/* Opens the device that conf->listen's address is on and registers the
 * pool with it.  0; -ENODEV (no RDMA device has that address) or another
 * -errno, with a one-line reason in err.  Without a pool the CPU
 * addresses (a GPU's memory), this node reads its peers' objects into
 * memory of rdma_buf_reg(), and serves its own by GPUDirect RDMA,
 * through its stage, or not at all: rdma_gpudirect() and rdma_serves()
 * say which. */
int rdma_open(struct rdma **out, const struct rdma_conf *c, char *err, size_t errlen);
void rdma_close(struct rdma *rd);
const char *rdma_device(const struct rdma *rd);         /* "rxe0" */
const char *rdma_grants(const struct rdma *rd);         /* "window", "pool" or "none" */
int rdma_serves(const struct rdma *rd);                 /* peers may READ our pool */
uint16_t rdma_port(const struct rdma *rd);              /* rdma_cm's, host order */
/* The stage's size and the bytes of it that grants hold; 0: no stage. */
int rdma_stage(const struct rdma *rd, uint64_t *size, uint64_t *used);
/* Why the stage conf asked for could not be made (one line), or NULL. */
const char *rdma_stage_why(const struct rdma *rd);
/* 1: peers READ the GPU pool conf->stage_from itself (GPUDirect RDMA);
 * 0: they do not, and *why (if why) says why (NULL when the pool is no
 * GPU's). */
int rdma_gpudirect(const struct rdma *rd, const char **why);

/* ---- the reader's side (rdma_read.c) ---- */

/* Our TCP connection to peer is up and its WELCOME offered RDMA at ip's
 * port with token: connect a queue pair there.  0, or -errno with the
 * reason in why.  The pair is connected again on demand if it fails while
 * the TCP connection lasts. */
int rdma_link_up(struct rdma *rd, int peer, const struct sockaddr *ip, uint16_t port,
		 const uint8_t token[PROTO_TOKEN], char *why, size_t whylen);
/* Our TCP connection to peer went: its pulls end (ECONNRESET), its grants go
 * (the owner let go of them with the connection). */
void rdma_link_down(struct rdma *rd, int peer);
/* Why peer's queue pair last failed, or did not connect (after
 * rdma_pull's -ENOTCONN). */
void rdma_link_why(struct rdma *rd, int peer, char *why, size_t len);
/* xport_pull's RDMA path, same contract, but for one more end that
 * progress may report: -ECONNRESET, the queue pair failed under the pull
 * (a READ in error, no progress for dead_ms, the peer's connection gone),
 * so that bytes from upto on may still be had another way; returned, it
 * failed as the pull began.  -ENOTCONN
 * (the pair is lost and cannot be connected again), -ENOBUFS (the owner's
 * stage has no room for the object now), -EFBIG (nor ever), -EFAULT (dst
 * is not the pool nor registered memory: registered with an rdma that
 * went) and -EIO also mean progress is never called. */
int rdma_pull(struct rdma *rd, int peer, const struct xport_range *r,
	      const struct iovec *dst, int ndst, unsigned flags,
	      xport_progress_fn progress, void *arg);
/* The lease's reads are over.  1: send RELEASE now; 0: it goes out
 * (conf->release) once the lease's last READ has completed.  Pulls still
 * under it post no more READs and end with ECANCELED. */
int rdma_release(struct rdma *rd, int peer, uint64_t lease);

/* The caller's memory [base, base+size) registered, for READs to land in
 * besides the pool, until rdma_buf_unreg() or rdma_close(); the memory
 * stays the caller's.  0, or -errno.  Unregistering memory this rdma did
 * not register does nothing. */
int rdma_buf_reg(struct rdma *rd, void *base, size_t size);
void rdma_buf_unreg(struct rdma *rd, void *base);

/* ---- the owner's side (rdma_grant.c) ---- */

/* A connection a peer made to us, whose peer can do RDMA: its token,
 * for the WELCOME.  NULL on failure (then offer no RDMA). */
struct rdma_srv *rdma_srv_new(struct rdma *rd, uint8_t token[PROTO_TOKEN]);
/* The connection ended: its queue pair and windows go. */
void rdma_srv_end(struct rdma_srv *s);
/* Grants lease's reads of the n pool extents [off, off+len) in ext: out
 * gets each as an address, length and rkey the peer may READ (with a
 * stage: one, over the object's room there), and ready how much of the
 * object it may READ now: all of it, or with a stage, what has been copied
 * in, which this call takes to upto at least.  Binds the windows on the
 * peer's queue pair (or reuses those already bound for lease).  The
 * number of extents in out; -ENOTCONN (the peer has not connected its
 * queue pair), -ENOBUFS (the stage has no room for the object now),
 * -EFBIG (it is larger than the stage), -EIO. */
int rdma_srv_grant(struct rdma_srv *s, uint64_t lease, const struct xport_extent *ext,
		   uint32_t n, uint64_t upto, struct proto_extent *out, uint64_t *ready);
/* RELEASE of lease: its windows are invalidated before this returns. */
void rdma_srv_release(struct rdma_srv *s, uint64_t lease);

#endif
