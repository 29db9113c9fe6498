/* loop.h - serves a FUSE session with a leader and followers.
 *
 * A transfer is a chain of requests (lookup, create, write, flush, the
 * reader's reads), each sent when the previous one was answered.  Waking a
 * sleeping daemon thread for each costs more than the request itself on a
 * small machine, so one thread (the leader) takes requests, serves the
 * small ones itself and polls for a short while before it sleeps.
 */
#ifndef OMNI_LOOP_H
#define OMNI_LOOP_H

#include <fuse_lowlevel.h>

/* Serves until the session exits (unmount or signal).  0 or -errno.
 * quiet(arg, idle), if set, runs after each request a thread served
 * (idle 0), and when that thread may sleep next: a leader that had no
 * request for spin_us, a thread that stepped aside or served a big one
 * (idle 1).  What was held for a burst goes then. */
int loop_serve(struct fuse_session *se, unsigned threads, unsigned spin_us,
	       void (*quiet)(void *arg, int idle), void *arg);
/* The calling request's handler is about to wait on the network, or to
 * work on after its answer: if its thread leads, a follower takes the
 * device now, so that this node's other requests are not held up behind
 * it.  Costs a thread wake-up, so only for work that may take long.  A
 * call to a peer does it for its caller once the request has gone
 * (cluster.c's op_waits), so that the wake-up costs that request
 * nothing: only work before such a call needs it first. */
void loop_step_aside(void);
/* Called by a thread that has just answered an open: a read follows.
 * From outside the loop, a sleeping leader wakes now to poll for it
 * (spin_us) while the reader wakes, instead of after the read came; from
 * the leader itself, it polls on after its next request even if that is a
 * release (a writer's, right behind the publish that answered the open),
 * after which it would sleep.  After the answer, not before: on a VM the
 * first wake-up of an idle core costs its waker an interrupt to it (36 us
 * of a cold cross-node hand-off here), and that one should be the
 * reader's; the leader's, behind it, found a core awake (3.5 us). */
void loop_expect(void);

#endif
