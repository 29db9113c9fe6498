/* callwait.c - a thread's own wait for its next open (see callwait.h).
 *
 * A small table scanned linearly: a worker process has a few threads
 * that get, and an arming lives from one setxattr to the open right after
 * it, so a handful of slots are ever in use.
 */
#define _GNU_SOURCE
#include "callwait.h"

#include <errno.h>
#include <string.h>

#include "../transport/clock.h"

void callwait_init(struct callwait *cw)
{
	memset(cw->slot, 0, sizeof(cw->slot));
	pthread_mutex_init(&cw->lock, NULL);
}

void callwait_destroy(struct callwait *cw)
{
	pthread_mutex_destroy(&cw->lock);
}

static int live(const struct callwait *cw, size_t i, uint64_t now)
{
	return cw->slot[i].tid && now - cw->slot[i].at_ns < (uint64_t)CALLWAIT_TTL_S * 1000000000u;
}

int callwait_arm(struct callwait *cw, pid_t tid, const char *value, size_t size)
{
	uint64_t ms = 0, now = clock_mono_ns();
	size_t pick = 0;

	if (!size || size > 9)
		return -EINVAL;
	for (size_t i = 0; i < size; i++) {
		if (value[i] < '0' || value[i] > '9')
			return -EINVAL;
		ms = ms * 10 + (uint64_t)(value[i] - '0');
	}
	if (!ms || ms > CALLWAIT_MAX_MS)
		return -EINVAL;
	if (tid <= 0)           /* outside our pid namespace: whose next open? */
		return -ESRCH;
	pthread_mutex_lock(&cw->lock);
	for (size_t i = 0; i < CALLWAIT_SLOTS; i++) {
		if (cw->slot[i].tid == tid || !live(cw, i, now)) {
			pick = i;
			break;
		}
		if (cw->slot[i].at_ns < cw->slot[pick].at_ns)
			pick = i;       /* all taken: the oldest goes */
	}
	cw->slot[pick].tid = tid;
	cw->slot[pick].ms = (uint32_t)ms;
	cw->slot[pick].at_ns = now;
	pthread_mutex_unlock(&cw->lock);
	return 0;
}

static int64_t find(struct callwait *cw, pid_t tid, int take)
{
	uint64_t now = clock_mono_ns();
	int64_t ms = 0;

	pthread_mutex_lock(&cw->lock);
	for (size_t i = 0; i < CALLWAIT_SLOTS; i++) {
		if (cw->slot[i].tid != tid || !live(cw, i, now))
			continue;
		ms = cw->slot[i].ms;
		if (take)
			cw->slot[i].tid = 0;
		break;
	}
	pthread_mutex_unlock(&cw->lock);
	return ms;
}

int64_t callwait_take(struct callwait *cw, pid_t tid) { return tid > 0 ? find(cw, tid, 1) : 0; }
int64_t callwait_peek(struct callwait *cw, pid_t tid) { return tid > 0 ? find(cw, tid, 0) : 0; }
