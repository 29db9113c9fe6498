/* loop.c - the request loop: one leader reads /dev/fuse, followers wait.
 *
 * Leader/followers: only the leader reads requests.  It serves small ones
 * itself and stays leader, so a chain of requests costs no thread wake-ups
 * at all; before a large read or write (a long copy) with more requests
 * waiting it hands leadership to a follower, so that other streams go on
 * meanwhile.  An idle leader polls the (non-blocking) device for spin_us,
 * yielding its core to any thread that can run, then sleeps in epoll; after
 * a release it sleeps at once, unless it has just answered an open.  A
 * handler about to wait on a peer (once its request is sent), or to work
 * on after its answer, steps aside (loop_step_aside) the same way: one
 * slow peer holds up only the requests that need it.  A thread outside
 * the loop that has answered an open (a publish heard from a peer) wakes
 * a sleeping leader to poll (loop_expect): the reader's first read comes
 * next, and finds it awake.
 */
#define _GNU_SOURCE
#include "loop.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../transport/clock.h"

#define BIG_REQUEST (64u << 10)

struct loop {
	struct fuse_session *se;
	int fd, stopfd, ep;
	uint64_t spin_ns;
	uint64_t expect_ns;             /* until then a read is coming (loop_expect) */
	void (*quiet)(void *arg, int idle);
	void *arg;
	pthread_mutex_t mu;
	pthread_cond_t follow;
	int leader;                     /* 1 while some thread leads */
};

/* The loop this thread serves, and whether it leads now. */
static __thread struct loop *self_loop;
static __thread int self_leads;
/* What loop_expect() writes to: made once and never closed, so that a
 * thread outside the loop never writes to another file of its number. */
static _Atomic int kickfd = -1;

static void loop_stop(struct loop *l)
{
	uint64_t one = 1;
	ssize_t n = write(l->stopfd, &one, sizeof(one));
	(void)n;                /* an eventfd counter this small cannot fail */
	pthread_mutex_lock(&l->mu);
	pthread_cond_broadcast(&l->follow);
	pthread_mutex_unlock(&l->mu);
}

/* The leader's wait for the next request: a short spin, then epoll.
 * Returns >0 with a request in buf, or <=0 when the session ends. */
static int lead_receive(struct loop *l, struct fuse_buf *buf, int spin)
{
	uint64_t end = spin ? clock_mono_ns() + l->spin_ns : 0;

	while (!fuse_session_exited(l->se)) {
		int res = fuse_session_receive_buf(l->se, buf);
		if (res > 0 || (res != -EAGAIN && res != -EINTR))
			return res;
		if (res == -EAGAIN && clock_mono_ns() < end) {
			/* Poll, but give the core to whoever can run: on
			 * a small machine that is our caller, or a peer
			 * daemon, and a spin that held the core would
			 * stand between them and the next request. */
			sched_yield();
			continue;
		}
		if (res == -EAGAIN) {
			struct epoll_event ev;
			uint64_t n;
			if (l->quiet)
				l->quiet(l->arg, 1);
			if (epoll_wait(l->ep, &ev, 1, -1) == 1 && ev.data.fd == kickfd &&
			    read(kickfd, &n, sizeof(n)) > 0)
				end = clock_mono_ns() + l->spin_ns;     /* a request is coming */
		}
	}
	return 0;
}

/* A request that will copy a lot while another one is already waiting:
 * worth a follower taking over the device meanwhile.  A lone stream keeps
 * its thread, and so its caches and its core. */
static int is_big(const struct fuse_buf *buf)
{
	const struct fuse_in_header *in = buf->mem;

	if (buf->size < sizeof(*in))
		return 0;
	if (in->opcode == FUSE_WRITE)
		return in->len > BIG_REQUEST;
	if (in->opcode == FUSE_READ && buf->size >= sizeof(*in) + sizeof(struct fuse_read_in))
		return ((const struct fuse_read_in *)(in + 1))->size > BIG_REQUEST;
	return 0;
}

/* The kernel's word that a file was closed: its caller has gone on
 * already (close(2) does not wait for it), and nobody waits for what
 * comes next. */
static int is_release(const struct fuse_buf *buf)
{
	const struct fuse_in_header *in = buf->mem;

	return buf->size >= sizeof(*in) &&
	       (in->opcode == FUSE_RELEASE || in->opcode == FUSE_RELEASEDIR);
}

static int hand_off(const struct loop *l, const struct fuse_buf *buf)
{
	struct pollfd p = { .fd = l->fd, .events = POLLIN };

	return is_big(buf) && poll(&p, 1, 0) > 0;
}

void loop_expect(void)
{
	if (self_leads) {       /* it polls on, even past a release */
		self_loop->expect_ns = clock_mono_ns() + self_loop->spin_ns;
		return;
	}
	uint64_t one = 1;
	int fd = atomic_load(&kickfd);
	ssize_t n = fd >= 0 ? write(fd, &one, sizeof(one)) : 0;
	(void)n;        /* a kick lost: the read itself wakes the leader */
}

void loop_step_aside(void)
{
	struct loop *l = self_loop;

	if (!l || !self_leads)
		return;
	pthread_mutex_lock(&l->mu);
	l->leader = 0;
	self_leads = 0;
	pthread_cond_signal(&l->follow);
	pthread_mutex_unlock(&l->mu);
}

static void *worker(void *arg)
{
	struct loop *l = arg;
	struct fuse_buf buf = { 0 };

	pthread_setname_np(pthread_self(), "omni-fuse");
	self_loop = l;
	for (;;) {
		pthread_mutex_lock(&l->mu);
		while (l->leader && !fuse_session_exited(l->se))
			pthread_cond_wait(&l->follow, &l->mu);
		if (fuse_session_exited(l->se)) {
			pthread_mutex_unlock(&l->mu);
			break;
		}
		l->leader = 1;
		self_leads = 1;
		pthread_mutex_unlock(&l->mu);
		int spin = 0, res;
		while ((res = lead_receive(l, &buf, spin)) > 0 && !hand_off(l, &buf)) {
			/* Spin after small requests, the links of a latency
			 * chain; after a long copy the client is slower to
			 * come back, and the core is better left to others
			 * (the hasher); after a release nobody waits, unless
			 * a reader was just answered here, and the spin stood
			 * between a cross-node hand-off and one of this
			 * machine's two cores. */
			spin = !is_big(&buf) &&
			       (!is_release(&buf) || clock_mono_ns() < l->expect_ns);
			fuse_session_process_buf(l->se, &buf);
			/* A thread about to follow may sleep: what it held
			 * goes now, as a leader's does before its epoll. */
			if (l->quiet)
				l->quiet(l->arg, !self_leads);
			if (!self_leads)
				break;  /* it stepped aside: follow again */
		}
		if (!self_leads)
			continue;
		loop_step_aside();
		if (res <= 0)
			break;          /* unmounted, or a device error */
		fuse_session_process_buf(l->se, &buf);  /* the big one */
		if (l->quiet)
			l->quiet(l->arg, 1);
	}
	fuse_session_exit(l->se);
	loop_stop(l);                   /* wake the others and the main thread */
	free(buf.mem);
	return NULL;
}

/* The main thread takes the signals (libfuse's handlers end the session)
 * and tells the workers, which block them. */
static int wait_for_exit(struct loop *l)
{
	struct pollfd p = { .fd = l->stopfd, .events = POLLIN };

	while (!fuse_session_exited(l->se))
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return -errno;
	loop_stop(l);
	return 0;
}

static int loop_open(struct loop *l)
{
	struct epoll_event dev = { .events = EPOLLIN, .data.fd = l->fd };
	struct epoll_event stop = { .events = EPOLLIN }, kick = { .events = EPOLLIN };
	int k = atomic_load(&kickfd);

	if (k < 0 && (k = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) >= 0)
		atomic_store(&kickfd, k);
	if (k < 0 || (l->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		return -errno;
	stop.data.fd = l->stopfd;
	kick.data.fd = k;
	if ((l->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    epoll_ctl(l->ep, EPOLL_CTL_ADD, l->fd, &dev) ||
	    epoll_ctl(l->ep, EPOLL_CTL_ADD, l->stopfd, &stop) ||
	    epoll_ctl(l->ep, EPOLL_CTL_ADD, k, &kick) ||
	    fcntl(l->fd, F_SETFL, fcntl(l->fd, F_GETFL) | O_NONBLOCK) < 0) {
		int rc = -errno;
		if (l->ep >= 0)
			close(l->ep);
		close(l->stopfd);
		return rc;
	}
	return 0;
}

int loop_serve(struct fuse_session *se, unsigned threads, unsigned spin_us,
	       void (*quiet)(void *arg, int idle), void *arg)
{
	struct loop l = { .se = se, .fd = fuse_session_fd(se), .ep = -1,
			  .spin_ns = (uint64_t)spin_us * 1000, .quiet = quiet, .arg = arg };
	pthread_t *t = calloc(threads, sizeof(*t));
	sigset_t block, old;
	unsigned started = 0;
	int rc;

	if (!t)
		return -ENOMEM;
	if ((rc = loop_open(&l)))
		goto free_threads;
	pthread_mutex_init(&l.mu, NULL);
	pthread_cond_init(&l.follow, NULL);
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	for (; started < threads; started++)
		if (pthread_create(&t[started], NULL, worker, &l))
			break;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	rc = started ? wait_for_exit(&l) : -EAGAIN;
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	pthread_cond_destroy(&l.follow);
	pthread_mutex_destroy(&l.mu);
	close(l.ep);
	close(l.stopfd);
free_threads:
	free(t);
	return rc;
}
