/* callwait.h - a thread's own wait for its next open (README "Waiting").
 *
 * An open of a missing key waits up to its edge's wait_ms.  A caller with
 * a deadline of its own (vllm-omni's recv_timeout) arms one wait for its
 * thread with setxattr("<mnt>", "user.omni.wait_ms", "<ms>"); the next
 * open that thread makes takes it.  One-shot, so nothing stays armed for
 * a thread id that is later reused; an arming unused for CALLWAIT_TTL_S
 * is forgotten.  Tids key it: FUSE tells the daemon the calling thread.
 */
#ifndef OMNI_CALLWAIT_H
#define OMNI_CALLWAIT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#define CALLWAIT_XATTR "user.omni.wait_ms"  /* set on the mount's root */
#define CALLWAIT_SLOTS 256      /* threads armed at once; more evict the oldest */
#define CALLWAIT_TTL_S 60
#define CALLWAIT_MAX_MS (24 * 3600 * 1000)

struct callwait {
	pthread_mutex_t lock;
	struct { pid_t tid; uint32_t ms; uint64_t at_ns; } slot[CALLWAIT_SLOTS];
};

void callwait_init(struct callwait *cw);
void callwait_destroy(struct callwait *cw);
/* Arms tid's next open with a wait of the decimal ms in value[0, size):
 * 0, or -EINVAL for anything but 1..CALLWAIT_MAX_MS. */
int callwait_arm(struct callwait *cw, pid_t tid, const char *value, size_t size);
/* tid's armed wait, or 0 (the edge's); take clears it, peek does not. */
int64_t callwait_take(struct callwait *cw, pid_t tid);
int64_t callwait_peek(struct callwait *cw, pid_t tid);

#endif
