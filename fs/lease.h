/* lease.h - the owner's side of a streamed read (PT_PULL's lease).
 *
 * A reader's node that streams a large object pulls it a window at a time
 * under a lease it names.  The first pull under a lease opens the object
 * here as a served handle and the lease keeps it, as an open file keeps an
 * object, so `rm` or consumption elsewhere does not cut the read short;
 * RELEASE, or the end of the connection the lease came on (the reader's
 * node died, or went silent), lets go, and a serve under it stops there:
 * a reader's node releases early what nobody there wants any more.  A
 * lease read by RDMA is the same lease: the grant (xport.h) opens the
 * object as the first pull would.
 * A peer may hold LEASE_MAX at once: more is refused (EBUSY), so no peer
 * can pin the pool at will.
 * Thread-safe.
 */
#ifndef OMNI_LEASE_H
#define OMNI_LEASE_H

#include <stddef.h>
#include <stdint.h>

/* Every pull runs under a lease (a fetch's, a view's, a stream's), so
 * this bounds the reads one peer has in flight here, and the objects it
 * can keep past their rm or consumption at once. */
#define LEASE_MAX 4096          /* per peer */

struct ns;
struct ns_handle;
struct leases;
struct lease;

int leases_create(struct leases **out, struct ns *ns, size_t npeers);
void leases_destroy(struct leases *t);          /* lets go of them all */

/* peer's lease id on object oid, a pull's on connection conn: opened on
 * first use.  0 with *h, *size and *e (give it back with leases_put), or
 * -ENOENT (no such object), -EINVAL (the lease names another object),
 * -EBUSY, -ENOMEM. */
int leases_get(struct leases *t, const void *conn, int peer, uint64_t id, uint64_t oid,
	       struct lease **e, struct ns_handle **h, uint64_t *size);
void leases_put(struct leases *t, struct lease *e);
/* RELEASE of peer's lease id. */
void leases_end(struct leases *t, int peer, uint64_t id);
/* Whether e was released (or its connection ended) while a serve uses
 * it: the reader no longer wants the bytes, so the serve stops. */
int leases_ended(struct leases *t, const struct lease *e);
/* conn is gone: so are the leases that came on it. */
void leases_drop(struct leases *t, const void *conn);

#endif
