/* owedlog.h - the messages this node owes its peers, kept in a file.
 *
 * A complete read (CONSUMED), an rm (REMOVE) or a cleanup (CLEANUP) that a
 * peer could not hear when it was said is owed to it, and said again when
 * it is back (cluster.c).  Kept only in memory, what is owed died with a
 * restart of this node, and the owner kept the object for good (ttl_s is
 * off by default): a partition, then a restart of the node that read,
 * leaked the object.  The log keeps them in state_dir/<node>.owed, so a
 * new run says them.  Told twice, each of them changes nothing more
 * (cluster.c, told), so the file may hold more than is still owed, never
 * less: a message is appended when it becomes owed, and the file is
 * rewritten from what is still owed once what was said to a peer that
 * came back has been answered (or is owed again).
 *
 * The file begins with a tag of the cluster's key: one left by another
 * cluster (another secret) is not said to this one's peers.  Appends are
 * not synced: a restart of the daemon keeps them, a crash of the machine
 * may lose the last few.  Callers serialise (cluster.c's lock).
 */
#ifndef OMNI_OWEDLOG_H
#define OMNI_OWEDLOG_H

#include <stddef.h>
#include <stdint.h>

#include "../transport/proto.h"

struct owedlog;

/* What an earlier run left: each message, and the peer it is owed to. */
typedef void (*owedlog_fn)(void *arg, const char *peer, const struct proto_msg *m);

/* Opens dir/<node>.owed (dir is made if missing), hands what it holds to
 * fn, and keeps it for appends.  0, or -errno with a one-line reason in
 * err; a file that is unreadable in part is said on stderr, not fatal. */
int owedlog_open(struct owedlog **out, const char *dir, const char *node,
		 const uint8_t *key, size_t keylen, owedlog_fn fn, void *arg,
		 char *err, size_t errlen);
/* Appends one message owed to peer (CLEANUP, CONSUMED or REMOVE). */
int owedlog_add(struct owedlog *l, const char *peer, const struct proto_msg *m);
/* Rewrites the file: begin, owedlog_add for each message still owed,
 * end (failed: an add's error, or 0).  A file that would hold nothing is
 * removed; a rewrite that failed leaves the old file, appended to. */
int owedlog_begin(struct owedlog *l);
int owedlog_end(struct owedlog *l, int failed);
/* How many messages the file holds (some may be paid already). */
unsigned long owedlog_records(const struct owedlog *l);
void owedlog_close(struct owedlog *l);

#endif
