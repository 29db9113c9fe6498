/* rdma.c - the RDMA device: opened by address, the pool (or the stage of a
 * pool it cannot read) registered once, rdma_cm's events, and memory that
 * READs may land in.
 *
 * The device is the one rdma_cm finds behind the node's listen address,
 * so an operator picks it as they pick the address peers reach.  The
 * whole pool is registered once at start: with windows, for binding them
 * (its own rkey then reads nothing); without, for remote READ.  A GPU's
 * memory is registered through a dmabuf of it where the driver and the
 * device allow (GPUDirect RDMA); elsewhere its objects are copied into a
 * stage of host memory, registered the same way, for peers to READ.  One
 * thread takes rdma_cm's events for every queue pair, ours and peers',
 * and hands each to the half it belongs to (rdma_read.c, rdma_grant.c).
 */
#define _GNU_SOURCE
#include "rdma_internal.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

/* READs in flight per queue pair, and bytes per READ: 4 MiB in flight.
 * Measured on rxe (tests/bench/rdma.sh, OMNIFS_TEST_RDMA_DEPTH and
 * _READ_KIB): the size hardly matters from 128 KiB to 4 MiB, but a whole
 * object's fetch reads at 75-80% of ib_read_bw with 16-64 MiB in flight
 * against 90-97% with 2-4 MiB; depth 32 was worse again.  16 is also what
 * ConnectX NICs allow in flight (max_rd_atomic), and 256 KiB READs reach
 * their full bandwidth. */
#define RDMA_RING 16
#define RDMA_WR_MAX (256u << 10)

const char *rdma_device(const struct rdma *rd) { return rd->dev; }
const char *rdma_grants(const struct rdma *rd)
{
	return !rdma_serves(rd) ? "none" : rd->windows ? "window" : "pool";
}
int rdma_serves(const struct rdma *rd) { return rd->pool_mr || rd->stage_mr; }

int rdma_stage(const struct rdma *rd, uint64_t *size, uint64_t *used)
{
	struct pool_usage u;

	if (!rd->stage)
		return 0;
	pool_usage(rd->stage, &u);
	*size = u.size;
	*used = u.used;
	return 1;
}
uint16_t rdma_port(const struct rdma *rd) { return rd->port; }

static void wake_fd(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) < 0) {
		/* full: the thread has a wake-up pending anyway */
	}
}

void rdma_wake(struct rdma *rd)
{
	wake_fd(rd->wake_fd);
}

struct ibv_qp_init_attr rdma_qp_attr(struct rdma *rd, struct ibv_cq *cq, unsigned send_wr)
{
	(void)rd;
	return (struct ibv_qp_init_attr){
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = send_wr, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
}

void rdma_id_destroy(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

void rdma_cq_free(struct rdma *rd, struct ibv_cq *cq, struct ibv_comp_channel *cch)
{
	int e = cq ? ibv_destroy_cq(cq) : 0;

	/* The channel is a descriptor of the device's: the kernel's removal
	 * of the device waits for it, so one left here is said. */
	if (e)
		fprintf(stderr, "omnifs: rdma: a completion queue is still in use (%s): "
			"%s cannot be removed while this daemon runs\n", strerror(e), rd->dev);
	else if (cch)
		ibv_destroy_comp_channel(cch);
}

/* The listen option's host, as an address with port 0. */
static int src_addr(const char *listen, struct sockaddr_storage *sa)
{
	char host[128];
	const char *colon = strrchr(listen, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	size_t n = colon ? (size_t)(colon - listen) : strlen(listen);

	if (n >= sizeof(host))
		return -EINVAL;
	memcpy(host, listen, n);
	host[n] = 0;
	if (n > 1 && host[0] == '[' && host[n - 1] == ']') {
		memmove(host, host + 1, n - 2);
		host[n - 2] = 0;
	}
	if (getaddrinfo(host, NULL, &hints, &ai))
		return -EINVAL;
	memcpy(sa, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return 0;
}

/* ---------------------------------------------------------------- cm events */

/* The device went (removed, reset, a fatal error): conf.lost hears of it
 * once, and the caller closes this rdma, which lets go of the device. */
static void device_lost(struct rdma *rd, const char *what)
{
	char why[128];

	if (atomic_exchange(&rd->lost, 1))
		return;
	snprintf(why, sizeof(why), "%s %s", rd->dev, what);
	if (rd->c.lost)
		rd->c.lost(rd->c.ctx, why);
}

/* The device's own events: only a fatal one matters here (a queue pair's
 * error reaches its pull by its completions). */
static int async_events(struct rdma *rd)
{
	struct ibv_async_event ae;

	while (!ibv_get_async_event(rd->verbs, &ae)) {
		if (ae.event_type == IBV_EVENT_DEVICE_FATAL)
			device_lost(rd, "had a fatal error");
		ibv_ack_async_event(&ae);
	}
	return errno == EAGAIN ? 0 : -1;
}

static void *cm_thread(void *arg)
{
	struct rdma *rd = arg;
	struct pollfd pf[3] = { { .fd = rd->ch->fd, .events = POLLIN },
				{ .fd = rd->cm_wake_fd, .events = POLLIN },
				{ .fd = rd->verbs->async_fd, .events = POLLIN } };
	struct rdma_cm_event *e;

	pthread_setname_np(pthread_self(), "omni-rdma-cm");
	fcntl(pf[2].fd, F_SETFL, fcntl(pf[2].fd, F_GETFL) | O_NONBLOCK);
	while (!rd->stopping) {
		if (poll(pf, 3, -1) <= 0)
			continue;
		if ((pf[2].revents & POLLIN) && async_events(rd))
			pf[2].fd = -1;  /* the device is gone: nothing more comes */
		if (!(pf[0].revents & POLLIN))
			continue;       /* woken to stop */
		while (!rdma_get_cm_event(rd->ch, &e)) {
			struct rdma_cm_id *destroy = NULL;
			int kind = e->id->context ? *(int *)e->id->context : 0;
			/* (A link's id may sit on another device, which its
			 * queue pair then could not use: that one's loss is
			 * the link's alone.) */
			if (e->event == RDMA_CM_EVENT_DEVICE_REMOVAL && e->id->verbs == rd->verbs)
				device_lost(rd, "was removed");
			if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST)
				srv_connect_request(rd, e, &destroy);
			else if (kind == CM_LINK)
				link_cm_event(rd, e->id->context, e, &destroy);
			else if (kind == CM_SRV)
				srv_cm_event(rd, e->id->context, e, &destroy);
			rdma_ack_cm_event(e);
			if (destroy && kind == CM_SRV && rd->test_cm_hold_ms)   /* 08-removal.t */
				usleep(rd->test_cm_hold_ms * 1000u);
			rdma_id_destroy(destroy);       /* after its last event's ack */
		}
	}
	return NULL;
}

/* ---------------------------------------------------------------- buffers */

int rdma_lkey(struct rdma *rd, const void *p, size_t len, uint32_t *lkey)
{
	const uint8_t *a = p, *pool = rd->c.pool;

	if (pool && a >= pool && len <= rd->c.pool_size &&
	    (uint64_t)(a - pool) <= rd->c.pool_size - len) {
		*lkey = rd->pool_mr->lkey;
		return 1;
	}
	for (struct rbuf *b = rd->bufs; b; b = b->next)
		if (a >= (uint8_t *)b->base && len <= b->size &&
		    (size_t)(a - (uint8_t *)b->base) <= b->size - len) {
			*lkey = b->mr->lkey;
			return 1;
		}
	return 0;
}

int rdma_buf_reg(struct rdma *rd, void *base, size_t size)
{
	struct rbuf *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	*b = (struct rbuf){ .base = base, .size = size };
	if (!(b->mr = ibv_reg_mr(rd->pd, base, size, IBV_ACCESS_LOCAL_WRITE))) {
		int e = errno;
		free(b);
		return -e;
	}
	pthread_mutex_lock(&rd->lock);
	b->next = rd->bufs;
	rd->bufs = b;
	pthread_mutex_unlock(&rd->lock);
	return 0;
}

void rdma_buf_unreg(struct rdma *rd, void *base)
{
	struct rbuf *b = NULL;

	pthread_mutex_lock(&rd->lock);
	for (struct rbuf **pp = &rd->bufs; *pp; pp = &(*pp)->next)
		if ((*pp)->base == base) {
			b = *pp;
			*pp = b->next;
			break;
		}
	pthread_mutex_unlock(&rd->lock);
	if (!b)
		return;         /* another rdma's (one that went), or none */
	ibv_dereg_mr(b->mr);
	free(b);
}

/* The checker ends the pulls it has news of, then stops. */
static void stop_checker(struct rdma *rd)
{
	pthread_mutex_lock(&rd->lock);
	rd->chk_stop = 1;
	pthread_cond_signal(&rd->chk_cond);
	pthread_mutex_unlock(&rd->lock);
	pthread_join(rd->chk_thread, NULL);
}

/* ---------------------------------------------------------------- open */

/* Binds rdma_cm to the listen address's host: the device it names. */
static int open_device(struct rdma *rd, char *err, size_t errlen)
{
	struct ibv_port_attr pa;
	int rc;

	if (src_addr(rd->c.listen, &rd->src)) {
		snprintf(err, errlen, "rdma: listen=%s: not an address", rd->c.listen);
		return -EINVAL;
	}
	if (!(rd->ch = rdma_create_event_channel()) ||
	    rdma_create_id(rd->ch, &rd->listen, rd, RDMA_PS_TCP)) {
		rc = -errno;
		snprintf(err, errlen, "rdma: rdma_cm: %s (is rdma_ucm loaded?)", strerror(errno));
		return rc;
	}
	fcntl(rd->ch->fd, F_SETFL, fcntl(rd->ch->fd, F_GETFL) | O_NONBLOCK);
	if (rdma_bind_addr(rd->listen, (struct sockaddr *)&rd->src) || !rd->listen->verbs) {
		snprintf(err, errlen, "rdma: no RDMA device has the listen address %s", rd->c.listen);
		return -ENODEV;
	}
	rd->verbs = rd->listen->verbs;
	snprintf(rd->dev, sizeof(rd->dev), "%s", ibv_get_device_name(rd->verbs->device));
	if (ibv_query_port(rd->verbs, rd->listen->port_num, &pa) || pa.state != IBV_PORT_ACTIVE) {
		snprintf(err, errlen, "rdma: %s port %u is not active", rd->dev, rd->listen->port_num);
		return -ENODEV;
	}
	return 0;
}

/* Type-2 windows, if the device binds them (OMNIFS_TEST_RDMA_GRANTS=pool:
 * never, so that the tests cover both kinds of grant). */
static int windows_work(struct rdma *rd, const struct ibv_device_attr *da)
{
	const char *t = getenv("OMNIFS_TEST_RDMA_GRANTS");
	struct ibv_mw *mw;

	if ((t && !strcmp(t, "pool")) ||
	    !(da->device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)))
		return 0;
	if (!(mw = ibv_alloc_mw(rd->pd, IBV_MW_TYPE_2)))
		return 0;
	ibv_dealloc_mw(mw);
	return 1;
}

static unsigned env_uint(const char *name, unsigned dflt, unsigned lo, unsigned hi)
{
	const char *v = getenv(name);
	unsigned long n = v ? strtoul(v, NULL, 10) : dflt;

	return n < lo ? lo : n > hi ? hi : (unsigned)n;
}

/* What the pool or the stage is registered for: windows bound over it,
 * or peers' READs with its own rkey. */
static int mem_access(const struct rdma *rd)
{
	return IBV_ACCESS_LOCAL_WRITE | (rd->windows ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_READ);
}

/* The pool or the stage, once: a failure here is nearly always the
 * memlock limit. */
static int register_mem(struct rdma *rd, const char *what, void *base, uint64_t size,
			struct ibv_mr **mr, char *err, size_t errlen)
{
	int access = mem_access(rd);
	struct rlimit rl;
	int e;

	if ((*mr = ibv_reg_mr(rd->pd, base, size, access)))
		return 0;
	e = errno;
	getrlimit(RLIMIT_MEMLOCK, &rl);
	if (rl.rlim_cur == RLIM_INFINITY)
		snprintf(err, errlen, "rdma: cannot register the %" PRIu64 " MiB %s with %s: %s",
			 size >> 20, what, rd->dev, strerror(e));
	else
		snprintf(err, errlen, "rdma: cannot register the %" PRIu64 " MiB %s with %s: %s; "
			 "the memlock limit is %llu KiB (raise ulimit -l or LimitMEMLOCK= to the "
			 "pool's size%s)", size >> 20, what, rd->dev, strerror(e),
			 (unsigned long long)rl.rlim_cur >> 10,
			 rd->c.stage_size ? " and the stage's" : "");
	return -e;
}

/* The stage: host memory the GPU's copy engine fills fastest (page-locked
 * by CUDA) when the pool is a GPU's, plain host memory else (a test's).
 * Without it the device still serves this node's reads of its peers, so
 * a failure is said (rdma_stage_why) and not fatal here. */
static void open_stage(struct rdma *rd)
{
	struct pool_spec ps = { .kind = pool_kind_of(rd->c.stage_from) == POOL_CUDA ? POOL_PINNED
									 : POOL_HOST,
				.size = rd->c.stage_size };
	char why[192];

	if (pool_create(&rd->stage, &ps, why, sizeof(why))) {
		snprintf(rd->stage_why, sizeof(rd->stage_why), "rdma: the %" PRIu64 " MiB stage: %s",
			 ps.size >> 20, why);
		rd->stage = NULL;
	} else if (register_mem(rd, "stage", pool_base(rd->stage), ps.size, &rd->stage_mr,
				rd->stage_why, sizeof(rd->stage_why))) {
		pool_destroy(rd->stage);
		rd->stage = NULL;
	}
}

const char *rdma_stage_why(const struct rdma *rd)
{
	return rd->stage_why[0] ? rd->stage_why : NULL;
}

int rdma_gpudirect(const struct rdma *rd, const char **why)
{
	if (why)
		*why = rd->gpudirect_why[0] ? rd->gpudirect_why : NULL;
	return rd->gpudirect;
}

/* GPUDirect RDMA: the GPU pool registered by a dmabuf of its memory,
 * with the access a host pool gets, at the device addresses, so that a
 * grant is the same for both and no byte goes through host memory.  Where
 * the driver, the GPU or the RDMA device cannot (rxe registers no dmabuf),
 * gpudirect_why says which, and the stage serves instead.
 * OMNIFS_TEST_NO_GPUDIRECT: the stage, so that a GPU machine tests both. */
static void open_gpudirect(struct rdma *rd)
{
	char why[192];
	uint64_t addr;
	int fd;

	if (getenv("OMNIFS_TEST_NO_GPUDIRECT")) {
		snprintf(rd->gpudirect_why, sizeof(rd->gpudirect_why), "OMNIFS_TEST_NO_GPUDIRECT");
		return;
	}
	if (pool_dmabuf(rd->c.stage_from, &fd, &addr, why, sizeof(why))) {
		snprintf(rd->gpudirect_why, sizeof(rd->gpudirect_why), "%s", why);
		return;
	}
	if (!(rd->pool_mr = ibv_reg_dmabuf_mr(rd->pd, 0, rd->c.pool_size, addr, fd,
						   mem_access(rd)))) {
		snprintf(rd->gpudirect_why, sizeof(rd->gpudirect_why),
			 "%s cannot register a dmabuf of the GPU's memory: %s", rd->dev,
			 strerror(errno));
		close(fd);
		return;
	}
	rd->dmabuf_fd = fd;
	rd->pool_addr = addr;
	rd->gpudirect = 1;
}

/* Protection domain, pool registration, completion queue, depths. */
static int open_verbs(struct rdma *rd, char *err, size_t errlen)
{
	struct ibv_device_attr da;
	int rc;

	if (ibv_query_device(rd->verbs, &da) || !(rd->pd = ibv_alloc_pd(rd->verbs))) {
		snprintf(err, errlen, "rdma: %s: %s", rd->dev, strerror(errno));
		return -EIO;
	}
	rd->windows = windows_work(rd, &da);
	if (rd->c.pool && (rc = register_mem(rd, "pool", rd->c.pool, rd->c.pool_size,
					     &rd->pool_mr, err, errlen)))
		return rc;
	rd->pool_addr = (uintptr_t)rd->c.pool;
	if (!rd->c.pool && rd->c.stage_from && pool_kind_of(rd->c.stage_from) == POOL_CUDA)
		open_gpudirect(rd);
	if (!rd->gpudirect && rd->c.stage_from && rd->c.stage_size)
		open_stage(rd);
	/* Tunable for the benchmark that chose them (tests/bench/rdma.sh). */
	rd->ring = env_uint("OMNIFS_TEST_RDMA_DEPTH", RDMA_RING, 1, 1024);
	rd->wr_max = env_uint("OMNIFS_TEST_RDMA_READ_KIB", RDMA_WR_MAX >> 10, 4, 65536) << 10;
	if ((unsigned)da.max_qp_wr < rd->ring + 2)
		rd->ring = (unsigned)da.max_qp_wr - 2;
	rd->init_depth = (unsigned)da.max_qp_init_rd_atom;
	rd->resp_depth = (unsigned)da.max_qp_rd_atom;
	int cqe = (int)((rd->c.npeers ? rd->c.npeers : 1) * (rd->ring + 2) + 16);
	if (cqe > da.max_cqe)
		cqe = da.max_cqe;
	if (!(rd->cch = ibv_create_comp_channel(rd->verbs)) ||
	    !(rd->cq = ibv_create_cq(rd->verbs, cqe, NULL, rd->cch, 0)) ||
	    ibv_req_notify_cq(rd->cq, 0)) {
		snprintf(err, errlen, "rdma: %s: completion queue: %s", rd->dev, strerror(errno));
		return -EIO;
	}
	fcntl(rd->cch->fd, F_SETFL, fcntl(rd->cch->fd, F_GETFL) | O_NONBLOCK);
	return 0;
}

static int open_links(struct rdma *rd)
{
	if (!(rd->links = calloc(rd->c.npeers ? rd->c.npeers : 1, sizeof(*rd->links))))
		return -ENOMEM;
	for (size_t i = 0; i < rd->c.npeers; i++) {
		struct rlink *l = &rd->links[i];
		l->kind = CM_LINK;
		l->rd = rd;
		l->peer = (int)i;
		clock_cond_init(&l->cond);      /* link_connect's waits */
		if (!(l->ring = calloc(rd->ring + 1, sizeof(*l->ring))))
			return -ENOMEM;
	}
	return 0;
}

/* OMNIFS_TEST_STALE_RKEY's READs land here (rdma_read.c). */
static void *scratch_new(struct rdma *rd)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (rdma_buf_reg(rd, p, 4096)) {
		munmap(p, 4096);
		return NULL;
	}
	return p;
}

int rdma_open(struct rdma **out, const struct rdma_conf *c, char *err, size_t errlen)
{
	struct rdma *rd = calloc(1, sizeof(*rd));
	int rc = -ENOMEM;

	if (!rd)
		return -ENOMEM;
	rd->kind = CM_LISTEN;
	rd->c = *c;
	rd->wake_fd = rd->cm_wake_fd = rd->dmabuf_fd = -1;
	rd->test_stale = getenv("OMNIFS_TEST_STALE_RKEY") != NULL;
	rd->test_rejects = env_uint("OMNIFS_TEST_RDMA_REJECTS", 0, 0, 1000);
	rd->test_cm_hold_ms = env_uint("OMNIFS_TEST_CM_HOLD_MS", 0, 0, 10000);
	rd->test_drop = rd->test_drop_every = env_uint("OMNIFS_TEST_RDMA_DROP", 0, 0, 1u << 30);
	rd->test_dark = env_uint("OMNIFS_TEST_RDMA_DARK", 0, 0, 100);
	pthread_mutex_init(&rd->lock, NULL);
	pthread_cond_init(&rd->chk_cond, NULL);
	if ((rc = open_device(rd, err, errlen)) || (rc = open_verbs(rd, err, errlen)))
		goto close;
	if ((rc = open_links(rd)) || (rd->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
	    (rd->cm_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		snprintf(err, errlen, "rdma: out of memory or descriptors");
		rc = rc ? rc : -errno;
		goto close;
	}
	if (rdma_listen(rd->listen, 64)) {
		rc = -errno;
		snprintf(err, errlen, "rdma: rdma_cm listen on %s: %s", rd->dev, strerror(errno));
		goto close;
	}
	rd->port = ntohs(rdma_get_src_port(rd->listen));
	if (pthread_create(&rd->chk_thread, NULL, rdma_chk_thread, rd))
		goto no_thread;
	if (pthread_create(&rd->cm_thread, NULL, cm_thread, rd)) {
		stop_checker(rd);
		goto no_thread;
	}
	if (pthread_create(&rd->cq_thread, NULL, rdma_cq_thread, rd)) {
		rd->stopping = 1;
		wake_fd(rd->cm_wake_fd);
		pthread_join(rd->cm_thread, NULL);
		stop_checker(rd);
		goto no_thread;
	}
	rd->threads = 1;
	if (rd->test_stale)
		rd->scratch = scratch_new(rd);
	*out = rd;
	return 0;
no_thread:
	rc = -EAGAIN;
	snprintf(err, errlen, "rdma: cannot start a thread");
close:
	rdma_close(rd);
	return rc;
}

/* librdmacm keeps a context of its own open on every device it has met,
 * and lets go of one that went only when a look at the list of devices
 * finds it gone: the kernel's removal of the device waits for that. */
static void forget_device(void)
{
	struct ibv_context **all = rdma_get_devices(NULL);

	if (all)
		rdma_free_devices(all);
}

void rdma_close(struct rdma *rd)
{
	if (!rd)
		return;
	if (rd->threads)
		links_close(rd);        /* every pull ends, every pair goes */
	rd->stopping = 1;
	if (rd->threads) {
		rdma_wake(rd);
		wake_fd(rd->cm_wake_fd);
		pthread_join(rd->cq_thread, NULL);
		pthread_join(rd->cm_thread, NULL);
		stop_checker(rd);       /* after the last news of a pull */
	}
	for (size_t i = 0; rd->links && i < rd->c.npeers; i++) {
		rdma_id_destroy(rd->links[i].id);
		free(rd->links[i].ring);
		pthread_cond_destroy(&rd->links[i].cond);
	}
	free(rd->links);
	while (rd->bufs)        /* their memory is their owners' */
		rdma_buf_unreg(rd, rd->bufs->base);
	if (rd->scratch)
		munmap(rd->scratch, 4096);
	if (rd->listen)
		rdma_destroy_id(rd->listen);
	rdma_cq_free(rd, rd->cq, rd->cch);
	if (rd->pool_mr)
		ibv_dereg_mr(rd->pool_mr);
	if (rd->dmabuf_fd >= 0)
		close(rd->dmabuf_fd);
	if (rd->stage_mr)
		ibv_dereg_mr(rd->stage_mr);
	pool_destroy(rd->stage);
	if (rd->pd)
		ibv_dealloc_pd(rd->pd);
	if (rd->ch)
		rdma_destroy_event_channel(rd->ch);
	if (rd->wake_fd >= 0)
		close(rd->wake_fd);
	if (rd->cm_wake_fd >= 0)
		close(rd->cm_wake_fd);
	if (rd->lost)
		forget_device();
	pthread_cond_destroy(&rd->chk_cond);
	pthread_mutex_destroy(&rd->lock);
	free(rd);
}
