/* pool.c - the memory pool: its backends and its extent allocator.
 *
 * A backend makes the region, gives it back and moves bytes in and out
 * of it (perftest's memory.h has the same split): host memory, host
 * memory that CUDA has page-locked (pinned), or a GPU's memory (cuda).
 * The allocator above it does not know which; its users ask pool_cpu()
 * whether they may touch the bytes at pool_base(), or else copy.
 *
 * Free space is an address-ordered array of fragments.  Objects are few and
 * large, so the array stays short; allocation is first-fit for the wanted
 * size, falling back to the largest fragment, and frees coalesce with both
 * neighbours so the pool never fragments by churn alone.
 */
#define _GNU_SOURCE
#include "pool.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gpu.h"
#include "xxh3sum.h"

struct frag { uint64_t off, len; };

/* What holds a pool's bytes.  map() sets base (host and pinned: the
 * CPU's address of the region) or dbase (device memory), or says why not
 * in err; unmap() undoes it.  The others move bytes in and out. */
struct pool_backend {
	int (*map)(struct pool *p, char *err, size_t errlen);
	void (*unmap)(struct pool *p);
	int (*write)(struct pool *p, uint64_t off, const void *src, size_t len);
	int (*read)(struct pool *p, uint64_t off, void *dst, size_t len);
	int (*zero)(struct pool *p, uint64_t off, size_t len);
	void *(*buf_alloc)(struct pool *p, size_t len);        /* a bounce */
	void (*buf_free)(struct pool *p, void *buf);
};

/* A thread's bounce (pool_bounce), kept on the pool's list of all of them
 * and handed on to another thread when its own ends. */
struct bounce {
	struct pool *pool;
	void *buf;
	struct bounce *next;    /* all of the pool's */
	int spare;              /* its thread has ended */
};

struct pool {
	pthread_mutex_t lock;
	enum pool_kind kind;
	int dev;
	const struct pool_backend *be;
	struct gpu *gpu;        /* pinned and cuda: the driver */
	uint8_t *base;          /* NULL for device memory */
	int memfd;              /* host, pinned: the file base maps, or -1 */
	int huge;               /* most of base is mapped with huge pages */
	void *label;            /* the page after the pool in it */
	uint64_t dbase;         /* cuda: the device's address of the region */
	unsigned char ipc[POOL_IPC_BYTES];      /* cuda: its IPC handle */
	uint64_t size, used;
	int locked;
	struct frag *free;      /* address-ordered, never adjacent */
	size_t nfree, capfree;
	pthread_key_t bounce_key;
	struct bounce *bounces;
	pthread_t warm_thread;  /* pool_warm(), if warm_started */
	int warm_started;
	atomic_int warming, warm_stop;
	/* OMNIFS_TEST_CPU_SUMS=1: host memory's sums too, as a GPU's kernel
	 * takes them; =N: and from the Nth call on -ENOTSUP, as a GPU whose
	 * sums turned out wrong answers */
	int cpu_sums;
	atomic_int sums_calls;
};

static uint64_t round_grain(uint64_t n)
{
	return (n + POOL_GRAIN - 1) / POOL_GRAIN * POOL_GRAIN;
}

int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned shift = 0;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	case 'T': shift = 40; end++; break;
	}
	if (shift && strcmp(end, "iB") == 0)
		end += 2;
	if (*end || v == 0 || v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

const char *pool_kind_name(enum pool_kind kind)
{
	switch (kind) {
	case POOL_HOST: return "host";
	case POOL_PINNED: return "pinned";
	case POOL_CUDA: return "cuda";
	}
	return "?";
}

int pool_spec_parse(const char *s, struct pool_spec *spec)
{
	const char *colon = strchr(s, ':');
	struct pool_spec sp = { 0 };

	if (!colon)
		return -EINVAL;
	size_t klen = (size_t)(colon - s);
	const char *rest = colon + 1;
	if (klen == 4 && !strncmp(s, "host", 4)) {
		sp.kind = POOL_HOST;
	} else if (klen == 6 && !strncmp(s, "pinned", 6)) {
		sp.kind = POOL_PINNED;
	} else if (klen == 4 && !strncmp(s, "cuda", 4)) {
		char *end;
		sp.kind = POOL_CUDA;
		if (*rest < '0' || *rest > '9')
			return -EINVAL;
		long dev = strtol(rest, &end, 10);
		if (*end != ':' || dev > 1023)
			return -EINVAL;
		sp.dev = (int)dev;
		rest = end + 1;
	} else {
		return -EINVAL;
	}
	if (parse_size(rest, &sp.size) || sp.size < POOL_GRAIN)
		return -EINVAL;
	*spec = sp;
	return 0;
}

void pool_spec_format(const struct pool_spec *spec, char *buf, size_t len)
{
	static const char unit[] = "KMGT";
	uint64_t v = spec->size;
	int u = -1;

	while (u < 3 && v % 1024 == 0) {
		v /= 1024;
		u++;
	}
	char size[32];
	if (u < 0)
		snprintf(size, sizeof(size), "%" PRIu64, v);
	else
		snprintf(size, sizeof(size), "%" PRIu64 "%ciB", v, unit[u]);
	if (spec->kind == POOL_CUDA)
		snprintf(buf, len, "cuda:%d:%s", spec->dev, size);
	else
		snprintf(buf, len, "%s:%s", pool_kind_name(spec->kind), size);
}

/* Locks the region in memory if the limit allows, raising the soft limit
 * first when the hard limit permits.  Locking is an optimisation for RDMA
 * registration and for predictable latency, not a requirement. */
static int pool_try_lock(void *base, uint64_t size)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < size) {
		rl.rlim_cur = rl.rlim_max;
		if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= size)
			setrlimit(RLIMIT_MEMLOCK, &rl);
	}
	return mlock(base, size) == 0;
}

/* Faults the whole region in, in one thread per core (up to 8, each 64 MiB
 * at least): without huge pages, as a memfd on most kernels, a page at a
 * time costs about 2 s a GiB in a VM, and a daemon mounts only after. */
struct pool_fill { uint8_t *at; size_t len; };

static void *pool_fill_part(void *v)
{
	struct pool_fill *f = v;

	madvise(f->at, f->len, MADV_POPULATE_WRITE);    /* advice: mlock() or use faults */
	return NULL;
}

static void pool_populate(uint8_t *base, uint64_t size)
{
	enum { MAX_FILL = 8 };
	struct pool_fill part[MAX_FILL];
	pthread_t th[MAX_FILL];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t n = size / (64u << 20), each;
	int started = 0;

	n = n < 1 ? 1 : n > MAX_FILL ? MAX_FILL : n;
	n = cpus > 0 && (uint64_t)cpus < n ? (uint64_t)cpus : n;
	each = size / n / POOL_GRAIN * POOL_GRAIN;
	for (uint64_t i = 0; i < n; i++) {
		part[i] = (struct pool_fill){ base + i * each, i + 1 < n ? each : size - i * each };
		if (i + 1 < n && !pthread_create(&th[started], NULL, pool_fill_part, &part[i]))
			started++;
		else
			pool_fill_part(&part[i]);
	}
	while (started--)
		pthread_join(th[started], NULL);
}

/* The pool sits between two inaccessible guard pages: a copy that runs
 * off either end faults there, rather than landing in whatever the
 * kernel mapped next to it (another thread's stack, say). */
#define POOL_GUARD POOL_GRAIN

/* The file that holds a host pool, so that a process of this node may map
 * the pool itself (pool_share): the pool, then one page for a label.
 * Sealed at that size: a mapper that could shrink it would make the
 * daemon's next touch of the cut pages a SIGBUS.  -1 where the kernel
 * has no memfd; the pool is then private memory, as before. */
static int pool_memfd(uint64_t size)
{
	int fd = memfd_create("omnifs-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)(size + POOL_GRAIN)) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Reserves guard, pool and guard, the pool starting on a huge page
 * boundary: a huge page maps only where its address and its offset in
 * the file are both multiples of its size.  The pool's address, or NULL. */
#define POOL_HUGE (2u << 20)
static uint8_t *pool_reserve(uint64_t size)
{
	size_t len = size + 2 * POOL_GUARD + POOL_HUGE;
	uint8_t *map = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			    -1, 0);

	if (map == MAP_FAILED)
		return NULL;
	uintptr_t at = ((uintptr_t)map + POOL_GUARD + POOL_HUGE - 1) & ~(uintptr_t)(POOL_HUGE - 1);
	uint8_t *base = (uint8_t *)at, *end = base + size + POOL_GUARD;

	if (base - POOL_GUARD > map)
		munmap(map, (size_t)(base - POOL_GUARD - map));
	if (end < map + len)
		munmap(end, (size_t)(map + len - end));
	return base;
}

/* Whether most of this process's just-faulted pool of size bytes has huge
 * pages, by the kernel's own count (smaps_rollup's line for that kind of
 * memory, in kB): asking for them is advice the kernel may not take. */
static int pool_huge(uint64_t size, int shared)
{
	const char *key = shared ? "ShmemPmdMapped:" : "AnonHugePages:";
	FILE *f = fopen("/proc/self/smaps_rollup", "re");
	char line[128];
	unsigned long long kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)) &&
		    sscanf(line + strlen(key), "%llu", &kb) == 1)
			break;
	fclose(f);
	return kb * 1024 >= size / 2;
}

static int pool_map_host(struct pool *p, char *err, size_t errlen)
{
	uint8_t *base = pool_reserve(p->size);
	int fd = base ? pool_memfd(p->size) : -1;
	void *label = MAP_FAILED;

	if (fd >= 0) {          /* over the reserved middle, between the guards */
		if (mmap(base, p->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			 fd, 0) == MAP_FAILED ||
		    (label = mmap(NULL, POOL_GRAIN, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
				  (off_t)p->size)) == MAP_FAILED)
			goto fail;
	} else if (!base || mprotect(base, p->size, PROT_READ | PROT_WRITE)) {
		goto fail;
	}
	/* Huge pages make the copies in and out of the pool cheaper; asking
	 * before the first touch lets the kernel back the region with them
	 * (a memfd's only where shmem_enabled allows). */
	madvise(base, p->size, MADV_HUGEPAGE);
	/* A crash's core leaves the pool out: gigabytes of every stage's
	 * data, which would hold up the restart while they were written and
	 * then lie on a disk. */
	madvise(base, p->size, MADV_DONTDUMP);
	pool_populate(base, p->size);
	p->huge = pool_huge(p->size, fd >= 0);
	p->locked = pool_try_lock(base, p->size);
	p->base = base;
	p->memfd = fd;
	p->label = label == MAP_FAILED ? NULL : label;
	return 0;

fail:;
	int e = errno;
	if (label != MAP_FAILED)
		munmap(label, POOL_GRAIN);
	if (fd >= 0)
		close(fd);
	if (base)
		munmap(base - POOL_GUARD, p->size + 2 * POOL_GUARD);
	snprintf(err, errlen, "cannot map %" PRIu64 " bytes: %s", p->size, strerror(e));
	return -e;
}

static void pool_unmap_host(struct pool *p)
{
	munmap(p->base - POOL_GUARD, p->size + 2 * POOL_GUARD);    /* and its guards */
	if (p->memfd >= 0) {
		munmap(p->label, POOL_GRAIN);
		close(p->memfd);
	}
}

int pool_share(const struct pool *p, int *fd, void **label)
{
	if (!p->base || p->memfd < 0)
		return -EOPNOTSUPP;
	*fd = p->memfd;
	*label = p->label;
	return 0;
}

/* Pinned: host memory as above, page-locked by CUDA for every context,
 * so that a GPU copies in and out of it by DMA. */
static int pool_map_pinned(struct pool *p, char *err, size_t errlen)
{
	int rc = gpu_open(0, &p->gpu, err, errlen);

	if (rc)
		return rc;
	if ((rc = pool_map_host(p, err, errlen)))
		goto close_gpu;
	if ((rc = gpu_host_register(p->gpu, p->base, p->size, err, errlen)))
		goto unmap;
	p->locked = 1;
	return 0;

unmap:
	pool_unmap_host(p);
close_gpu:
	gpu_close(p->gpu);
	return rc;
}

static void pool_unmap_pinned(struct pool *p)
{
	gpu_host_unregister(p->gpu, p->base);
	pool_unmap_host(p);
	gpu_close(p->gpu);
}

/* Device memory of GPU dev, in one allocation: its IPC handle then maps
 * the whole pool into another process at once, and an object is an
 * offset into it. */
static int pool_map_cuda(struct pool *p, char *err, size_t errlen)
{
	int rc = gpu_open(p->dev, &p->gpu, err, errlen);

	if (rc)
		return rc;
	if ((rc = gpu_dev_alloc(p->gpu, p->size, &p->dbase, err, errlen)))
		goto close_gpu;
	if ((rc = gpu_ipc_handle(p->gpu, p->dbase, p->ipc, err, errlen)))
		goto free_dev;
	if ((rc = gpu_ring_start(p->gpu, err, errlen)))
		goto free_dev;
	p->locked = 1;          /* device memory never pages */
	return 0;

free_dev:
	gpu_dev_free(p->gpu, p->dbase);
close_gpu:
	gpu_close(p->gpu);
	return rc;
}

static void pool_unmap_cuda(struct pool *p)
{
	gpu_dev_free(p->gpu, p->dbase);
	gpu_close(p->gpu);
}

static int host_write(struct pool *p, uint64_t off, const void *src, size_t len)
{
	memcpy(p->base + off, src, len);
	return 0;
}

static int host_read(struct pool *p, uint64_t off, void *dst, size_t len)
{
	memcpy(dst, p->base + off, len);
	return 0;
}

static int host_zero(struct pool *p, uint64_t off, size_t len)
{
	memset(p->base + off, 0, len);
	return 0;
}

static int cuda_write(struct pool *p, uint64_t off, const void *src, size_t len)
{
	return gpu_to_dev(p->gpu, p->dbase + off, src, len);
}

static int cuda_read(struct pool *p, uint64_t off, void *dst, size_t len)
{
	return gpu_from_dev(p->gpu, dst, p->dbase + off, len);
}

static int cuda_zero(struct pool *p, uint64_t off, size_t len)
{
	return gpu_dev_zero(p->gpu, p->dbase + off, len);
}

static void *host_buf_alloc(struct pool *p, size_t len)
{
	(void)p;
	return aligned_alloc(POOL_GRAIN, len);
}

static void host_buf_free(struct pool *p, void *buf)
{
	(void)p;
	free(buf);
}

/* Page-locked: the device copies straight into it, not through the
 * driver's own staging as it must for pageable memory. */
static void *cuda_buf_alloc(struct pool *p, size_t len)
{
	void *buf;

	return gpu_host_alloc(p->gpu, len, &buf) ? NULL : buf;
}

static void cuda_buf_free(struct pool *p, void *buf)
{
	gpu_host_free(p->gpu, buf);
}

static const struct pool_backend backends[] = {
	[POOL_HOST] = { pool_map_host, pool_unmap_host, host_write, host_read, host_zero,
			host_buf_alloc, host_buf_free },
	[POOL_PINNED] = { pool_map_pinned, pool_unmap_pinned, host_write, host_read, host_zero,
			  host_buf_alloc, host_buf_free },
	[POOL_CUDA] = { pool_map_cuda, pool_unmap_cuda, cuda_write, cuda_read, cuda_zero,
			cuda_buf_alloc, cuda_buf_free },
};

/* A thread ends: its bounce waits for the next thread that asks. */
static void bounce_spare(void *v)
{
	struct bounce *b = v;

	pthread_mutex_lock(&b->pool->lock);
	b->spare = 1;
	pthread_mutex_unlock(&b->pool->lock);
}

void *pool_bounce(struct pool *p)
{
	struct bounce *b = pthread_getspecific(p->bounce_key);

	if (b)
		return b->buf;
	pthread_mutex_lock(&p->lock);
	for (b = p->bounces; b && !b->spare; b = b->next)
		;
	if (b)
		b->spare = 0;
	pthread_mutex_unlock(&p->lock);
	if (!b) {
		if (!(b = calloc(1, sizeof(*b))))
			return NULL;
		if (!(b->buf = p->be->buf_alloc(p, POOL_BOUNCE))) {
			free(b);
			return NULL;
		}
		b->pool = p;
		pthread_mutex_lock(&p->lock);
		b->next = p->bounces;
		p->bounces = b;
		pthread_mutex_unlock(&p->lock);
	}
	if (pthread_setspecific(p->bounce_key, b)) {
		bounce_spare(b);
		return NULL;
	}
	return b->buf;
}

/* The first touch of each page, by the CPU and by the kernel, made before
 * an object needs it.  Under a hypervisor that shadows page tables (a PVM
 * guest, as our CI machines are) the first access to a page traps to it,
 * once for the process's own accesses and once more for the kernel's
 * through the process's addresses (a socket's or /dev/fuse's copies into
 * and out of the pool); populating and locking make neither.  Measured
 * here: about 3 ms per MiB each, so an object's first trip through a
 * fresh part of the pool ran at a tenth of the speed of the next one's
 * through the same pages.  A thread of idle priority goes through the pool
 * from its start (where first fit allocates first), a huge page's worth at
 * a time, and makes that step one huge page (MADV_COLLAPSE, Linux 6.1 on,
 * whatever shmem_enabled says but "deny"): a huge page traps once, not 512
 * times.  It also takes the pool out of the way of a host that samples its
 * guest's memory (DAMON, every 500 ms here): clearing the accessed bits of
 * a gigabyte of small pages stalled this node's other core for 4-10 ms each
 * time, and a 4 KiB put with it.  Where a step will not collapse (a page
 * pinned for RDMA, an older kernel, no huge page to be had) its pages are
 * touched both ways instead, only reading, since objects are written
 * meanwhile.  Without a hypervisor in the way, either costs about a copy
 * of the pool, once. */
#define POOL_WARM_STEP (2u << 20)

/* Reads a byte of each page, then has the kernel copy them all into a
 * scratch file.  0, or -1 when the file takes no more. */
static int warm_range(struct pool *p, int scratch, uint64_t off, size_t len)
{
	const volatile uint8_t *page = p->base + off;

	for (size_t at = 0; at < len; at += POOL_GRAIN)
		(void)page[at];
	return pwrite(scratch, p->base + off, len, 0) < 0 ? -1 : 0;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25        /* linux/mman.h; glibc names it from 2.37 */
#endif

/* Collapses a step into a huge page.  The thread waits for an idle core at
 * idle priority, but collapses at normal priority: a collapse locks the
 * step's pages, and a writer of one of them must not wait for a thread the
 * scheduler starves.  A thread that may not come back from idle priority
 * (no CAP_SYS_NICE, RLIMIT_NICE 0) does not collapse.  0, or -errno. */
static int collapse_step(uint8_t *at, size_t len)
{
	struct sched_param prio = { 0 };
	int rc;

	if ((rc = pthread_setschedparam(pthread_self(), SCHED_OTHER, &prio)))
		return -rc;
	rc = madvise(at, len, MADV_COLLAPSE) ? -errno : 0;
	pthread_setschedparam(pthread_self(), SCHED_IDLE, &prio);
	sched_yield();          /* the next step waits for an idle core again */
	return rc;
}

static void *pool_warm(void *arg)
{
	struct pool *p = arg;
	struct sched_param idle = { 0 };
	int scratch = memfd_create("omnifs-warm", MFD_CLOEXEC);
	int collapse = !p->huge, collapsed = 0;

	pthread_setname_np(pthread_self(), "omni-warm");
	pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
	if (scratch >= 0 && ftruncate(scratch, POOL_WARM_STEP)) {
		close(scratch);
		scratch = -1;
	}
	for (uint64_t off = 0; off < p->size && !atomic_load(&p->warm_stop); off += POOL_WARM_STEP) {
		size_t len = p->size - off < POOL_WARM_STEP ? p->size - off : POOL_WARM_STEP;
		if (collapse && len == POOL_WARM_STEP) {
			int rc = collapse_step(p->base + off, len);
			if (!rc) {
				collapsed = 1;
				continue;
			}
			if (rc == -EINVAL || rc == -EPERM || rc == -ENOMEM)
				collapse = 0;   /* not this kernel or thread, or no huge page to have */
		}
		if (scratch < 0 || warm_range(p, scratch, off, len))
			break;
	}
	if (scratch >= 0)
		close(scratch);
	if (collapsed) {
		int huge = pool_huge(p->size, p->memfd >= 0);
		pthread_mutex_lock(&p->lock);
		p->huge = huge;
		pthread_mutex_unlock(&p->lock);
	}
	atomic_store(&p->warming, 0);
	return NULL;
}

int pool_create(struct pool **out, const struct pool_spec *spec,
		char *err, size_t errlen)
{
	char why[200];
	struct pool *p;
	int rc;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->kind = spec->kind;
	p->be = &backends[spec->kind];
	p->dev = spec->dev;
	p->size = round_grain(spec->size);
	p->memfd = -1;
	if (getenv("OMNIFS_TEST_CPU_SUMS"))
		p->cpu_sums = atoi(getenv("OMNIFS_TEST_CPU_SUMS"));
	p->capfree = 16;
	p->free = malloc(p->capfree * sizeof(*p->free));
	if (!p->free) {
		rc = -ENOMEM;
		goto free_pool;
	}
	if ((rc = p->be->map(p, why, sizeof(why)))) {
		char spec_s[64];
		pool_spec_format(spec, spec_s, sizeof(spec_s));
		snprintf(err, errlen, "option 'pool=%s': %s", spec_s, why);
		goto free_frags;
	}
	if ((rc = -pthread_key_create(&p->bounce_key, bounce_spare))) {
		snprintf(err, errlen, "no thread key: %s", strerror(-rc));
		goto unmap;
	}
	p->free[0] = (struct frag){ 0, p->size };
	p->nfree = 1;
	pthread_mutex_init(&p->lock, NULL);
	if (p->base) {
		atomic_store(&p->warming, 1);
		p->warm_started = !pthread_create(&p->warm_thread, NULL, pool_warm, p);
		if (!p->warm_started)
			atomic_store(&p->warming, 0);
	}
	*out = p;
	return 0;

unmap:
	p->be->unmap(p);
free_frags:
	free(p->free);
free_pool:
	free(p);
	return rc;
}

void pool_destroy(struct pool *p)
{
	if (!p)
		return;
	atomic_store(&p->warm_stop, 1);
	if (p->warm_started)
		pthread_join(p->warm_thread, NULL);
	/* Every thread that used the pool is gone (or never uses it again). */
	pthread_key_delete(p->bounce_key);
	for (struct bounce *b = p->bounces, *next; b; b = next) {
		next = b->next;
		p->be->buf_free(p, b->buf);
		free(b);
	}
	p->be->unmap(p);
	pthread_mutex_destroy(&p->lock);
	free(p->free);
	free(p);
}

void *pool_base(const struct pool *p) { return p->base; }
int pool_cpu(const struct pool *p) { return p->base != NULL; }
enum pool_kind pool_kind_of(const struct pool *p) { return p->kind; }

int pool_write(struct pool *p, uint64_t off, const void *src, size_t len)
{
	return len ? p->be->write(p, off, src, len) : 0;
}

int pool_read(struct pool *p, uint64_t off, void *dst, size_t len)
{
	return len ? p->be->read(p, off, dst, len) : 0;
}

int pool_each(struct pool *p, uint64_t off, uint64_t len, pool_piece_fn *fn, void *arg)
{
	uint8_t *b;

	if (!len)
		return 0;
	if (p->base)
		return fn(arg, p->base + off, len);
	if (!(b = pool_bounce(p)))
		return -ENOMEM;
	return gpu_from_dev_each(p->gpu, p->dbase + off, len, b, POOL_BOUNCE / 2, fn, arg);
}

_Static_assert(POOL_SUMS_MAX <= GPU_XXH3_MAX, "the kernel's buffer holds a bounce of sums");

int pool_xxh3_sums(struct pool *p, uint64_t off, uint64_t n, const uint64_t **sums)
{
	uint64_t *b;
	int rc;

	if (p->kind != POOL_CUDA && !p->cpu_sums)
		return -ENOTSUP;
	if (n > POOL_SUMS_MAX || off % 8)
		return -EINVAL;
	if (!(b = pool_bounce(p)))
		return -ENOMEM;
	if (p->kind != POOL_CUDA && p->cpu_sums > 1 &&
	    atomic_fetch_add(&p->sums_calls, 1) + 1 >= p->cpu_sums)
		return -ENOTSUP;
	if (p->kind != POOL_CUDA) {     /* the CPU does what the kernel does: tests */
		for (uint64_t i = 0; i < n; i++)
			xxh3sum_block(p->base + off + i * XXH3_BLOCK, b + 8 * i);
		rc = 0;
	} else {
		rc = gpu_xxh3_sums(p->gpu, p->dbase + off, n, b);
	}
	if (!rc)
		*sums = b;
	return rc;
}

int pool_zero(struct pool *p, uint64_t off, size_t len)
{
	return len ? p->be->zero(p, off, len) : 0;
}

int pool_sync(struct pool *p)
{
	return p->kind == POOL_CUDA ? gpu_sync(p->gpu) : 0;
}

_Static_assert(POOL_IPC_BYTES == GPU_IPC_BYTES, "pool.h spells the driver's handle size");

int pool_ipc(const struct pool *p, int *dev, unsigned char handle[POOL_IPC_BYTES])
{
	if (p->kind != POOL_CUDA)
		return -ENOTSUP;
	*dev = p->dev;
	memcpy(handle, p->ipc, POOL_IPC_BYTES);
	return 0;
}

int pool_dmabuf(const struct pool *p, int *fd, uint64_t *addr, char *err, size_t errlen)
{
	if (p->kind != POOL_CUDA) {
		snprintf(err, errlen, "the pool is host memory, registered as it is");
		return -ENOTSUP;
	}
	*addr = p->dbase;
	return gpu_dmabuf(p->gpu, p->dbase, p->size, fd, err, errlen);
}

void pool_usage(struct pool *p, struct pool_usage *u)
{
	pthread_mutex_lock(&p->lock);
	u->size = p->size;
	u->used = p->used;
	u->free = p->size - p->used;
	u->largest_free = 0;
	for (size_t i = 0; i < p->nfree; i++)
		if (p->free[i].len > u->largest_free)
			u->largest_free = p->free[i].len;
	u->fragments = (unsigned)p->nfree;
	u->locked = p->locked;
	u->shared = p->memfd >= 0;
	u->huge = p->huge;
	u->warming = atomic_load(&p->warming);
	pthread_mutex_unlock(&p->lock);
}

/* Takes len bytes from the front of fragment i. */
static void frag_take(struct pool *p, size_t i, uint64_t len)
{
	p->free[i].off += len;
	p->free[i].len -= len;
	if (p->free[i].len == 0) {
		memmove(&p->free[i], &p->free[i + 1],
			(p->nfree - i - 1) * sizeof(*p->free));
		p->nfree--;
	}
	p->used += len;
}

int pool_alloc(struct pool *p, uint64_t min, uint64_t want,
	       uint64_t *off, uint64_t *got)
{
	size_t best = SIZE_MAX;

	min = round_grain(min ? min : 1);
	want = round_grain(want < min ? min : want);
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->nfree; i++) {
		if (p->free[i].len >= want) {
			best = i;
			break;
		}
		if (p->free[i].len >= min &&
		    (best == SIZE_MAX || p->free[i].len > p->free[best].len))
			best = i;
	}
	if (best == SIZE_MAX) {
		pthread_mutex_unlock(&p->lock);
		return -ENOSPC;
	}
	uint64_t len = p->free[best].len < want ? p->free[best].len : want;
	*off = p->free[best].off;
	*got = len;
	frag_take(p, best, len);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

/* Index of the first fragment whose offset is >= off. */
static size_t frag_search(const struct pool *p, uint64_t off)
{
	size_t lo = 0, hi = p->nfree;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (p->free[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int pool_grow(struct pool *p, uint64_t off, uint64_t len, uint64_t min,
	      uint64_t want, uint64_t *got)
{
	uint64_t end = off + round_grain(len);
	int rc = -ENOSPC;

	min = round_grain(min ? min : 1);
	want = round_grain(want < min ? min : want);
	pthread_mutex_lock(&p->lock);
	size_t i = frag_search(p, end);
	if (i < p->nfree && p->free[i].off == end && p->free[i].len >= min) {
		uint64_t n = p->free[i].len < want ? p->free[i].len : want;
		frag_take(p, i, n);
		*got = n;
		rc = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

static int frag_insert(struct pool *p, size_t i, uint64_t off, uint64_t len)
{
	if (p->nfree == p->capfree) {
		size_t cap = p->capfree * 2;
		struct frag *f = realloc(p->free, cap * sizeof(*f));
		if (!f)
			return -ENOMEM;
		p->free = f;
		p->capfree = cap;
	}
	memmove(&p->free[i + 1], &p->free[i], (p->nfree - i) * sizeof(*p->free));
	p->free[i] = (struct frag){ off, len };
	p->nfree++;
	return 0;
}

void pool_free(struct pool *p, uint64_t off, uint64_t len)
{
	len = round_grain(len);
	if (!len)
		return;
	pthread_mutex_lock(&p->lock);
	size_t i = frag_search(p, off);
	int prev = i > 0 && p->free[i - 1].off + p->free[i - 1].len == off;
	int next = i < p->nfree && off + len == p->free[i].off;

	if (prev && next) {
		p->free[i - 1].len += len + p->free[i].len;
		memmove(&p->free[i], &p->free[i + 1],
			(p->nfree - i - 1) * sizeof(*p->free));
		p->nfree--;
	} else if (prev) {
		p->free[i - 1].len += len;
	} else if (next) {
		p->free[i].off = off;
		p->free[i].len += len;
	} else if (frag_insert(p, i, off, len)) {
		/* Out of memory for bookkeeping: the space is lost until
		 * restart, which is better than corrupting the free list. */
		fprintf(stderr, "omnifs: pool: lost %" PRIu64 " bytes (no memory)\n", len);
		pthread_mutex_unlock(&p->lock);
		return;
	}
	p->used -= len;
	pthread_mutex_unlock(&p->lock);
}
