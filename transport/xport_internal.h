/* xport_internal.h - what xport.c, xport_pull.c, xport_dial.c,
 * xport_accept.c, xport_serve.c and xport_rdma.c share: the state of
 * peers, connections and requests in flight, and the few calls each makes
 * into the others.
 *
 * xport.c moves frames: our requests, their replies, and the DATA of our
 * pulls; xport_pull.c starts those pulls, by RDMA or over TCP, and takes
 * them on after a fault.  xport_dial.c makes our connections (the
 * client's handshake, the dialers, the keeper's pings); xport_accept.c
 * takes peers' connections through the server's handshake; xport_serve.c
 * serves the requests that come on them; xport_rdma.c holds this node's
 * RDMA device for them, and lets it go and opens it again.
 *
 * Locks: x->lock guards the peers' state and the table of requests in
 * flight; no lock is held while bytes move, except a connection's send
 * lock, which orders its frames.
 */
#ifndef OMNI_XPORT_INTERNAL_H
#define OMNI_XPORT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "rdma.h"
#include "xport.h"

#define TICK_MS 250             /* sockets' receive timeout: see xport.c */
#define RESOLVE_MS 2000         /* a down peer's name, looked up again at most */

struct xbuf;

struct xport_conn {
	struct xport *x;
	struct rdma_srv *srv;           /* a peer's connection that offered it RDMA */
	int fd, peer, outgoing, refs;
	int reads_rdma;                 /* a peer's connection: its HELLO said it can */
	int hears_redial;               /* ... and that it hears REDIAL */
	uint64_t made_ns;               /* ... and when its WELCOME went (conn_start) */
	int retired;                    /* ours, let go of for a rejoin (rejoin_locked) */
	int lapsed;                     /* ours, closed under us (conn_lost) */
	int ended;                      /* ours, and its receiver saw its end first */
	pthread_mutex_t send_lock;
	/* Senders of other frames waiting for send_lock: a pull's DATA
	 * frames, sent back to back, let them go first (conn_sendv). */
	atomic_int waiting;
	pthread_cond_t gap;
	atomic_int ping_owed;           /* the keeper found it busy: the sender pings */
	/* Frames held (XPORT_HOLD) to go with the next, under send_lock:
	 * a burst of small ones costs a few sends, not one each. */
	uint8_t *held;                  /* HELD_MAX bytes, made on first use */
	size_t nheld;
	uint64_t held_ns;               /* when the oldest of them was held; 0: none */
	uint64_t last_rx;               /* monotonic ns of the last bytes in */
	uint64_t last_data;             /* ... and of the last DATA frame landed */
	uint8_t *body;                  /* a received frame's body */
	/* A peer's connection to us carries requests only, small and many:
	 * read RX_AHEAD at a time, a burst of them costs one read, not two
	 * each.  (Ours carries DATA, read straight where it goes.) */
	uint8_t *ahead;
	size_t ahead_at, ahead_end;
	/* A peer's requests acted on, to say so in one ACKS (its server
	 * thread's alone: xport_ack). */
	uint64_t acks[PROTO_ACKS_MAX];
	unsigned nacks;
	struct xport_conn *next;        /* accepted connections */
	/* A peer's connection: replies of many bytes, sent in the order they
	 * were deferred by a thread of their own (xport_defer), which its
	 * server thread starts and, at its end, stops. */
	pthread_mutex_t defer_lock;
	pthread_cond_t defer_cond;
	struct deferred *defer_head, **defer_tail;
	int defer_up, defer_stop;
	pthread_t defer_thread;
	/* The connection's name, from its HELLO's nonce (conn_name), and its
	 * frames since the handshake: sent or held on ours, served to their
	 * end on a peer's (xport_heard). */
	uint64_t name;
	_Atomic uint64_t frames;
};

struct pending {
	uint64_t reqid;
	int peer, pull, done, busy, err;
	pthread_cond_t *cond;   /* a call's: its caller waits on it */
	xport_reply_fn on_reply;
	xport_done_fn told;     /* a told request's end (xport_tell) */
	void *arg;
	/* A pull: what it asks (r), where its bytes go, how far they got
	 * (got: its stream's bytes landed and checked; shown: the most that
	 * progress said), when it was asked, on which connection (its name;
	 * 0: none yet, held while its peer is connected to again) and the
	 * offset its next DATA frame carries there (pulls_resume). */
	struct xport_range r;
	uint64_t len, got, shown, asked_ns, on, at;
	/* Where it was last asked again from, and how many times in a row
	 * from there (PULL_RESUMES_MAX). */
	uint64_t resumed;
	int stuck;
	int cancelled;          /* its lease was released: never asked again */
	struct iovec *dst;
	int ndst;
	xport_progress_fn progress;
	struct pending *next;
};

/* A log line that others can provoke at will (a bad frame, a failed
 * handshake) is written at most once a second; the next one says how many
 * were left out meanwhile.  The counters in .omni/stats count them all. */
struct ratelog {
	uint64_t last_ns;
	unsigned long quiet;
};

/* How a peer's bytes move, chosen when our connection to it comes up. */
enum { XP_TCP, XP_RDMA, XP_NONE };

struct peer {
	char name[PROTO_NAME_MAX + 1], addr[128];
	struct sockaddr_storage sa;     /* addr's, as last looked up (x->lock) */
	socklen_t salen;
	int unresolved;                 /* the last lookup failed: said once */
	int config_differs;             /* its WELCOME's digest is not ours */
	uint64_t looked_ns;             /* when (0: at the next dial, it went down) */
	/* One connects to it at a time (connect_claim), the thread in
	 * connector; peer_up runs in that thread before it lets go. */
	int connecting;
	pthread_t connector;
	int dialing;                    /* a dialer thread connects to it */
	uint32_t caps;
	int xp;
	char why[160];                  /* why not RDMA, where we have it */
	char down_why[128];             /* why it is down: the last fault seen */
	uint64_t since_ns;
	struct xport_conn *out;         /* our connection, while up */
	/* To be connected again once no request is in flight to it (what a
	 * handshake settles changed: a device is back), so that none fails
	 * for it; meanwhile new requests wait (peer_out_settled). */
	int rejoin;
	int rejoining;                  /* let go of for that, not connected again yet */
	/* Its queue pair did not connect at the handshake (a peer's rdma_cm
	 * slow or refusing, a fabric hiccup): a dialer tries again on the
	 * same connection (peer_relink), whose bytes move over TCP meanwhile,
	 * QP_RETRY_MS later, then twice as late after each failure. */
	uint16_t qp_port;               /* its WELCOME's: where, and with what */
	uint8_t qp_token[PROTO_TOKEN];
	uint64_t qp_retry_ns;           /* when (monotonic); 0: not to */
	unsigned qp_tries;
	pthread_t rx;
	int rx_joinable;
	struct ratelog bad_frames;      /* its connections to us */
	struct ratelog refused, unread; /* its pulls we refused; reads of it we
					   did not make (transport=rdma) */
	struct ratelog full;            /* its stage had no room for a read */
	struct ratelog rerouted;        /* reads whose RDMA pair failed under them */
};

struct xport {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* A pending's busy was cleared.  Apart from cond, which the keeper
	 * sleeps on: a frame lands every few hundred microseconds while bytes
	 * come, and each broadcast on cond woke the keeper for nothing (7 ms
	 * of CPU on a 256 MiB read here). */
	pthread_cond_t unbusy;
	struct xport_conf c;
	struct rdma *rdma;              /* NULL: every byte moves over TCP */
	/* A device that goes (rdma.h, conf.lost) is let go of and opened
	 * again by a thread of its own (tender_thread): calls into x->rdma go
	 * through rdma_hold(), which gives none once it went, and the tender
	 * closes it only when no call is under way.  x->lock guards these. */
	struct rdma_conf rconf;         /* how it was opened */
	unsigned rdma_users;            /* calls under way, and owner-side pairs */
	int rdma_gone;                  /* it went, and is not back yet */
	char rdma_dev[64];              /* its name, for health */
	char rdma_why[128];             /* "rxe0 was removed", while gone */
	unsigned rdma_gen;              /* counts its openings again (rdma_turns) */
	struct xbuf *bufs;              /* xport_buf_alloc's */
	pthread_cond_t tend;            /* the tender's: the device went, or stop */
	pthread_t tender;
	int tender_started;
	uint32_t caps;                  /* PROTO_CAP_* we can do */
	char self[PROTO_NAME_MAX + 1];
	uint8_t key[AUTH_KEY];
	const struct xport_ops *ops;
	void *ctx;
	struct peer *peers;
	size_t npeers;
	int lfd, started, nservers, dialers;
	atomic_int stopping;            /* read unlocked by the threads it stops */
	_Atomic uint64_t held_since;    /* no later than the oldest frame held on
					   any connection; 0: none (xport_flush) */
	struct ratelog bad_handshakes, slow_handshakes, crowded, other_release;
	pthread_t acceptor, keeper;
	uint64_t next_reqid;
	struct pending *pending;
	struct xport_conn *servers;
};

/* xport.c: logging, addresses, connections and their frames */
void log_limited(struct xport *x, struct ratelog *rl, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void ops_count(struct xport *x, enum xport_count what, uint64_t n);
int resolve_addr(const char *addr, struct sockaddr_storage *sa, socklen_t *len,
		 char *why, size_t wlen);
void sa_text(const struct sockaddr_storage *sa, socklen_t len, char *out, size_t olen);
struct xport_conn *conn_new(struct xport *x, int fd, int peer, int outgoing);
void conn_put(struct xport_conn *c);            /* under x->lock */
void conn_unref(struct xport *x, struct xport_conn *c);
int conn_send(struct xport_conn *c, uint64_t reqid, const struct proto_msg *m);
/* A frame of a header, a body and extra bytes, or held to go with the
 * next (hold, in a thread that sends_bursts) */
int conn_sendv(struct xport_conn *c, uint8_t type, uint64_t reqid, int hold,
	       const uint8_t *body, size_t blen, const struct iovec *extra, int nextra);
int conn_send_body(struct xport_conn *c, uint8_t type, uint64_t reqid,
		   const uint8_t *body, int len);
/* This thread calls xport_flush at the end of each burst of its work, so
 * its frames may be held for the next. */
void sends_bursts(void);
int conn_recv(struct xport_conn *c, struct proto_hdr *h, struct proto_msg *m,
	      int (*tick)(struct xport_conn *c));
int send_ping_locked(struct xport_conn *c);
void pending_fail(struct xport *x, int peer, int keep_pulls);
/* The table of requests in flight, under x->lock: p in it if c is still
 * its peer's connection (1), or out of it. */
int pending_link(struct xport *x, struct xport_conn *c, struct pending *p);
void pending_del(struct xport *x, struct pending *p);
/* p linked on *c, or on the peer's next connection if *c went meanwhile
 * (*c is then that one).  Unlocked; 1 if linked. */
int link_on(struct xport *x, struct xport_conn **c, struct pending *p);
/* A pull off the table: its owner hears its end, once. */
void pull_told(struct pending *p, int err);
void rejoin(struct xport *x, int i, const struct xport_conn *c, uint32_t need,
	    const char *why);
void *rx_thread(void *arg);             /* our connection's receiver */

/* xport_pull.c: our pulls */
/* The pulls of peer that its last connection left, asked for on c. */
void pulls_resume(struct xport *x, int peer, struct xport_conn *c);
/* xport_buf_alloc's buffers that their owners left, at the end. */
void xbufs_free(struct xport *x);

/* xport_serve.c: peers' connections, once through their handshake */
void *server_thread(void *arg);         /* a peer's connection's server */

/* xport_dial.c: our connections */
uint64_t conn_name(const uint8_t nonce[PROTO_NONCE]);
struct xport_conn *peer_out(struct xport *x, int peer);
struct xport_conn *peer_conn(struct xport *x, int i);
void peer_dial(struct xport *x, int i);
int peer_unresolved(struct peer *p, const char *why);
void say_unresolved(const struct peer *p, const char *why);
void *keeper_thread(void *arg);

/* xport_accept.c: peers' connections, through their handshake */
void *acceptor_thread(void *arg);

/* xport_rdma.c: the device */
struct rdma *rdma_hold_locked(struct xport *x);
struct rdma *rdma_hold(struct xport *x);
void rdma_unhold(struct xport *x, struct rdma *rd);
unsigned rdma_turns(const struct xport *x);
int rdma_gone_why(struct xport *x, char *why, size_t len);
void link_down(struct xport *x, int i);
void srv_end(struct xport *x, struct rdma_srv *s);
void redial_tell(struct xport *x, struct xport_conn *c);
int open_rdma(struct xport *x, char *err, size_t errlen);
void *tender_thread(void *arg);
int peer_unlinked(struct xport *x, int i, const char *e);

#endif
