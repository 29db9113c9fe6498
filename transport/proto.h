/* proto.h - the peer protocol's frames and messages (SPEC §7).
 *
 * Pure encoding and decoding, no I/O: what arrives from a socket goes
 * through proto_frame_check() and proto_decode() before anything uses it,
 * and both take hostile bytes (the fuzz target feeds them anything).
 *
 * A frame is a 16-byte header and a body of at most PROTO_MAX_BODY bytes:
 *
 *   u16 magic 0x4d4f ("OM")  u8 version  u8 type  u32 body length  u64 request id
 *
 * all little-endian.  A DATA frame's body is a small header followed by the
 * raw bytes, which the receiver reads straight into its pool.
 */
#ifndef OMNI_PROTO_H
#define OMNI_PROTO_H

#include <stddef.h>
#include <stdint.h>


#define PROTO_NAME_MAX   64             /* a stage name (SPEC §3) */
#define PROTO_KEY_MAX    255            /* a key */
#define PROTO_MAGIC      0x4d4fu
#define PROTO_VERSION    14             /* 2: PULL's lease, RELEASE; 3: RDMA, GRANT;
					   4: OBJECT carries a small object's bytes;
					   5: CLEANUP; 6: EXISTS; 7: CLAIM; 8: GONE of
					   all ends a resync: what a new connection
					   did not announce again is gone; 9:
					   CONSUMED names its read, REMOVE and
					   CONSUMED are acknowledged by ACKS; 10:
					   GRANT's upto, GRANTED's ready (a stage
					   filled a step at a time); 11: LIST's
					   view base; 12: REMOVE's heard; 13:
					   WELCOME's digest of the cluster's
					   config; 14: CLAIM's excl,
					   ANNOUNCE's decided */
#define PROTO_HDR        16
#define PROTO_CHUNK      (1u << 20)     /* data bytes per DATA frame, and per chunk hash */
#define PROTO_MAX_BODY   (PROTO_CHUNK + 64)
#define PROTO_NONCE      32
#define PROTO_MAC        32
#define PROTO_INLINE_MAX (64u << 10)    /* objects this small travel in their announce
					   and in a lookup's answer */
#define PROTO_KVHDR_MAX  (512u << 10)   /* a KV payload's header (kvfmt's KV_HDR_MAX) */
#define PROTO_PULL_PIECES (1u << 24)    /* pieces of one strided pull */
#define PROTO_TOKEN      16             /* names a connection to its RDMA queue pair */
#define PROTO_GRANT_HASHES 16384        /* chunk hashes in one GRANTED (16 GiB) */
#define PROTO_GRANT_EXTENTS 2048        /* extents in one GRANTED */
#define PROTO_GRANT_EXT  20             /* bytes of one: addr u64, len u64, rkey u32 */
#define PROTO_ACKS_MAX   32             /* reqids in one ACKS */

/* What a side's transports can do, exchanged in the handshake. */
#define PROTO_CAP_TCP  1u
#define PROTO_CAP_RDMA 2u
#define PROTO_CAP_REDIAL 4u     /* a client that hears REDIAL */

enum proto_type {
	PT_HELLO = 1,   /* client: version, caps, nonce, name */
	PT_CHALLENGE,   /* server: version, nonce */
	PT_AUTH,        /* client: mac */
	PT_WELCOME,     /* server: name, caps, mac */
	PT_PING,
	PT_PONG,
	PT_ANNOUNCE,    /* one-way: an object published (object), then u8
			   decided: 1 if where the edge's claims meet (claimed
			   there, or published there), and the receiver's own
			   object that a writer has not closed loses to it */
	PT_GONE,        /* one-way: an object left (object: names and oid); oid 0:
			   the sender's resync on this connection is over */
	PT_CONSUMED,    /* oid delivered on the sender (whole, or heads of it) by its
			   read rid, counted once whatever the repeats; reply ACKS,
			   none if reqid 0 */
	PT_LOOKUP,      /* request: names; reply OBJECT or STATUS */
	PT_LIST,        /* request: from, to (either may be ""), base: only the shards
			   of the view <base> ("": all); reply LISTING frames */
	PT_REMOVE,      /* names and oid (0: any), and may end with heard: how
			   far the sender had heard the receiver's connection
			   to it; reply ACKS, none if reqid 0 */
	PT_PULL,        /* request: oid, count pieces of len at off + k*stride,
			   lease; reply DATA frames of the pieces back to back, or STATUS */
	PT_STATUS,      /* reply: an errno (0 = ok) */
	PT_OBJECT,      /* reply: one object */
	PT_LISTING,     /* reply: names (dirs) or objects, and whether more follow */
	PT_DATA,        /* reply: off, len, chunk hash, then len raw bytes */
	PT_RELEASE,     /* one-way: a lease the sender's pulls no longer need */
	PT_GRANT,       /* request: oid, lease, first, n: read oid directly under
			   lease; reply GRANTED or STATUS */
	PT_GRANTED,     /* reply: size, the hashes of chunks first.., and the
			   object's extents as the sender's RDMA device lets them be read */
	PT_CLEANUP,     /* request: a request id; the receiver removes the objects
			   of it that it owns; reply CLEANED or STATUS */
	PT_CLEANED,     /* reply: how many it removed */
	PT_EXISTS,      /* request: names; whether the receiver knows of an object
			   of that name, any node's; reply STATUS (0 or ENOENT) */
	PT_CLAIM,       /* request: an ANNOUNCE, then u8 excl, that the receiver
			   takes only if it knows of no other object of that
			   name, any node's, as one step, but for one of its own
			   that a writer has not closed, which loses to it unless
			   excl (an O_EXCL put); reply STATUS (0, or EEXIST:
			   nothing taken) */
	PT_ACKS,        /* reply: the reqids of requests acted on (REMOVE, CONSUMED),
			   up to PROTO_ACKS_MAX in one frame, sent once the
			   requests pause */
	PT_REDIAL,      /* one-way, server to a client whose HELLO has
			   PROTO_CAP_REDIAL: connect again, once no request of
			   yours is in flight here (what the WELCOME would say
			   changed: the sender's RDMA device is back) */
	PT_MAX_TYPE = PT_REDIAL,
};

struct proto_hdr {
	uint8_t version, type;
	uint32_t len;
	uint64_t reqid;
};

/* An object as peers describe it. */
struct proto_obj {
	char from[PROTO_NAME_MAX + 1], to[PROTO_NAME_MAX + 1], key[PROTO_KEY_MAX + 1];
	uint64_t oid, size, xxh3, reads, published_ns;
	int64_t readers;
	uint32_t uid, gid;
	const uint8_t *data;            /* ANNOUNCE, OBJECT: the bytes when small, or NULL */
	uint32_t datalen;
	const uint8_t *kvhdr;           /* ANNOUNCE, OBJECT: a KV payload's header, or NULL */
	uint32_t kvhdrlen;
	/* REMOVE: the receiver's connection to the sender that the sender
	 * has heard (its HELLO's nonce, the first 8 bytes, never 0) and how
	 * many of its frames, when it asked; conn 0: not said (an owed
	 * REMOVE, said again later). */
	uint64_t heard_conn, heard;
	uint8_t excl;                   /* CLAIM: an O_EXCL put's (0 or 1) */
	uint8_t decided;                /* ANNOUNCE: decided where claims meet (0 or 1) */
};

#define PROTO_LIST_MAX 512              /* entries per LISTING frame */

struct proto_msg {
	enum proto_type type;
	union {
		struct { uint16_t version; uint32_t caps; uint8_t nonce[PROTO_NONCE];
			 char name[PROTO_NAME_MAX + 1]; } hello;
		struct { uint16_t version; uint8_t nonce[PROTO_NONCE]; } challenge;
		struct { uint8_t mac[PROTO_MAC]; } auth;
		/* rdma_port 0: the server offers no RDMA on this connection;
		 * else its rdma_cm port, and the token that names this
		 * connection when the client connects its queue pair there. */
		struct { uint32_t caps; uint8_t mac[PROTO_MAC];
			 char name[PROTO_NAME_MAX + 1];
			 uint16_t rdma_port; uint8_t token[PROTO_TOKEN];
			 uint64_t digest; } welcome;    /* of its cluster config */
		struct proto_obj obj;   /* ANNOUNCE GONE LOOKUP REMOVE OBJECT */
		struct { uint64_t oid; uint32_t first, n, of; uint64_t rid; } consumed; /* of 0: whole */
		struct {
			char from[PROTO_NAME_MAX + 1], to[PROTO_NAME_MAX + 1];
			char base[PROTO_KEY_MAX + 1];
		} list;
		/* lease (0: none): the sender's name for a read of oid that
		 * pulls it piece by piece; the owner keeps the object for it,
		 * as for an open file, until RELEASE. */
		struct { uint64_t oid, off, len, stride; uint32_t count; uint64_t lease; } pull;
		struct { uint64_t lease; } release;
		struct { char id[PROTO_KEY_MAX + 1]; } cleanup;   /* a valid key */
		struct { uint64_t removed; } cleaned;
		struct { uint32_t n; uint64_t reqid[PROTO_ACKS_MAX]; } acks;
		struct { int32_t err; } status;
		struct { uint32_t n; uint8_t more, objects; struct proto_obj *obj;
			 char (*name)[PROTO_NAME_MAX + 1]; } listing;
		struct { uint64_t off, xxh3; uint32_t len; } data;
		/* A grant of oid under lease (never 0), with the hashes of
		 * chunks [first, first+n) (n may be 0: the reader checks the
		 * bytes itself), and [0, upto) of the object readable now
		 * (an owner that copies it into a stage copies that far). */
		struct { uint64_t oid, lease, first; uint32_t n; uint64_t upto; } grant;
		/* The object's size, how much of it [0, ready) READs may read
		 * now, nhash hashes of chunks from first on, and next extents
		 * that cover [0, size) in order: little-endian arrays in the
		 * body (read them with proto_granted_*), valid as long as the
		 * body is. */
		struct { uint64_t size, ready, first; uint32_t nhash, next;
			 const uint8_t *hash, *ext; } granted;
	} u;
};

/* A GRANTED's i-th hash and extent (i below nhash, next). */
struct proto_extent { uint64_t addr, len; uint32_t rkey; };
uint64_t proto_granted_hash(const struct proto_msg *m, uint32_t i);
struct proto_extent proto_granted_ext(const struct proto_msg *m, uint32_t i);
/* Encodes a GRANTED from arrays: the body's length, or -EMSGSIZE. */
int proto_encode_granted(uint64_t size, uint64_t ready, uint64_t first, const uint64_t *hash,
			 uint32_t nhash, const struct proto_extent *ext, uint32_t next,
			 uint8_t *buf, size_t cap);

/* Encodes and decodes a frame header.  proto_frame_check: 0, or -EPROTO
 * (bad magic or type), -EPROTONOSUPPORT (our magic, another version: h's
 * version says which) or -EMSGSIZE (a body over the limit). */
void proto_put_hdr(uint8_t out[PROTO_HDR], uint8_t type, uint32_t len, uint64_t reqid);
int proto_frame_check(const uint8_t in[PROTO_HDR], struct proto_hdr *h);

/* Encodes m's body into buf; returns its length, or -EMSGSIZE.  A DATA
 * body is only its header (PROTO_DATA_HDR bytes): the bytes follow. */
#define PROTO_DATA_HDR 20
int proto_encode(const struct proto_msg *m, uint8_t *buf, size_t cap);
/* Decodes a whole body of the given type, checking every field: 0, or
 * -EPROTO.  Pointers in *m point into body (ANNOUNCE data) or into
 * arrays that proto_msg_free() releases (LISTING).  A DATA body is decoded
 * from its first min(len, PROTO_DATA_HDR) bytes, all body must hold; len
 * is the whole body's length, raw bytes included. */
int proto_decode(uint8_t type, const uint8_t *body, size_t len, struct proto_msg *m);
void proto_msg_free(struct proto_msg *m);
const char *proto_type_name(unsigned type);

#endif
