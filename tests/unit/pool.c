/* Unit tests for the pool: size parsing, extents, growth, coalescing. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../tap.h"
#include "../../transport/pool.h"
#include "../../transport/copy.h"

static void test_sizes(void)
{
	uint64_t v;
	struct { const char *s; uint64_t want; } good[] = {
		{ "512M", 512ull << 20 }, { "4GiB", 4ull << 30 }, { "1024", 1024 },
		{ "1K", 1024 }, { "2T", 2ull << 40 }, { "3KiB", 3072 },
	};
	const char *bad[] = { "", "M", "-1", "0", "1.5G", "1 G", "1GB", "1iB", "1Gi",
			      "99999999999999999999", "16777216T", "1g", "0x10" };

	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
		ok(parse_size(good[i].s, &v) == 0 && v == good[i].want, "size '%s'", good[i].s);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		is(parse_size(bad[i], &v), -EINVAL, "size '%s' rejected", bad[i]);
}

static void test_specs(void)
{
	struct pool_spec s;
	char buf[64];

	ok(!pool_spec_parse("host:1GiB", &s) && s.kind == POOL_HOST && s.size == 1ull << 30, "host:1GiB");
	ok(!pool_spec_parse("cuda:3:2G", &s) && s.kind == POOL_CUDA && s.dev == 3, "cuda:3:2G");
	ok(!pool_spec_parse("pinned:64M", &s) && s.kind == POOL_PINNED, "pinned:64M");
	is(pool_spec_parse("disk:1G", &s), -EINVAL, "unknown kind rejected");
	is(pool_spec_parse("cuda:x:1G", &s), -EINVAL, "cuda without device rejected");
	is(pool_spec_parse("host:100", &s), -EINVAL, "pool smaller than a page rejected");
	is(pool_spec_parse("host", &s), -EINVAL, "kind without size rejected");
	pool_spec_parse("host:1GiB", &s);
	pool_spec_format(&s, buf, sizeof(buf));
	is_str(buf, "host:1GiB", "spec formats back");
}

static void test_alloc(void)
{
	struct pool *p;
	struct pool_spec spec = { POOL_HOST, 0, 1 << 20 };
	struct pool_usage u;
	char err[128];
	uint64_t a, b, c, got;

	if (!ok(pool_create(&p, &spec, err, sizeof(err)) == 0, "create a 1 MiB pool"))
		return;
	ok(!pool_alloc(p, 1, 4096, &a, &got) && a == 0 && got == 4096, "first extent at 0");
	ok(!pool_alloc(p, 1, 8192, &b, &got) && b == 4096 && got == 8192, "second follows");
	ok(!pool_grow(p, b, 8192, 4096, 4096, &got) && got == 4096, "last extent grows in place");
	is(pool_grow(p, a, 4096, 4096, 4096, &got), -ENOSPC, "a boxed-in extent cannot grow");
	ok(!pool_alloc(p, 4096, 1 << 30, &c, &got) && got == (1 << 20) - 16384,
	   "alloc takes what is left when want is larger");
	is(pool_alloc(p, 1, 4096, &c, &got), -ENOSPC, "full pool: ENOSPC");
	pool_free(p, 16384, (1 << 20) - 16384);
	pool_free(p, a, 4096);
	pool_free(p, b, 12288);
	pool_usage(p, &u);
	ok(u.used == 0 && u.fragments == 1 && u.largest_free == 1 << 20,
	   "frees coalesce back to one fragment (used %llu, %u frags)",
	   (unsigned long long)u.used, u.fragments);
	/* fragmentation: alternate frees leave holes; min forces a fit */
	uint64_t offs[8];
	for (int i = 0; i < 8; i++)
		pool_alloc(p, 1, 128 << 10, &offs[i], &got);
	for (int i = 0; i < 8; i += 2)
		pool_free(p, offs[i], 128 << 10);
	is(pool_alloc(p, 256 << 10, 256 << 10, &c, &got), -ENOSPC, "no fragment holds 256K");
	ok(!pool_alloc(p, 4096, 256 << 10, &c, &got) && got == 128 << 10, "largest fragment taken");
	pool_destroy(p);
}

/* Every length and alignment the streaming loop, its head and its tail
 * can meet, and not a byte written outside the target. */
static void test_copy_stream(void)
{
	enum { N = 4096 };
	uint8_t *src = malloc(N), *dst = malloc(N + 64), *want = malloc(N + 64);
	size_t lens[] = { 0, 1, 15, 255, 256, 257, 319, 1000, 4000 };
	int bad = 0, cases = 0;

	for (size_t i = 0; i < N; i++)
		src[i] = (uint8_t)(i * 131 + 7);
	for (size_t l = 0; l < sizeof(lens) / sizeof(*lens); l++)
		for (size_t da = 0; da < 65; da++)     /* the head runs to a line */
			for (size_t sa = 0; sa < 3; sa++, cases++) {
				memset(dst, 0xee, N + 64);
				memset(want, 0xee, N + 64);
				memcpy(want + da, src + sa, lens[l]);
				copy_stream(dst + da, src + sa, lens[l]);
				copy_fence();
				bad += memcmp(dst, want, N + 64) != 0;
			}
	is(bad, 0, "copy_stream: %d lengths and alignments copy exactly", cases);
	free(src);
	free(dst);
	free(want);
}

/* A write one byte past either end of the pool faults: a child that
 * tries it dies (by SIGSEGV, or by the sanitizer's report of it). */
static int faults_at(struct pool *p, long off)
{
	int st;
	pid_t pid = fork();

	if (pid == 0) {
		freopen("/dev/null", "w", stderr);
		((volatile uint8_t *)pool_base(p))[off] = 1;
		_exit(0);
	}
	return pid > 0 && waitpid(pid, &st, 0) == pid && !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_guards(void)
{
	struct pool *p;
	struct pool_spec spec = { POOL_HOST, 0, 1 << 20 };
	char err[128];

	if (!ok(pool_create(&p, &spec, err, sizeof(err)) == 0, "create a 1 MiB pool"))
		return;
	((volatile uint8_t *)pool_base(p))[0] = 1;
	((volatile uint8_t *)pool_base(p))[(1 << 20) - 1] = 1;
	ok(faults_at(p, 1 << 20), "a write just past the pool's end faults");
	ok(faults_at(p, -1), "a write just before its start faults");
	pool_destroy(p);
}

/* What pool_each handed piece_seen. */
struct pieces {
	int calls, stop;
	const uint8_t *first;
	size_t bytes;
};

static int piece_seen(void *arg, const uint8_t *p, size_t n)
{
	struct pieces *s = arg;

	if (!s->calls++)
		s->first = p;
	s->bytes += n;
	return s->stop;
}

/* The backend interface, through the host backend: what fs/ uses for a
 * pool of any kind (tests/cuda runs the GPU's). */
static void test_backend_copies(void)
{
	struct pool *p;
	struct pool_spec spec = { POOL_HOST, 0, 1 << 20 };
	char err[128], in[5000], out[5000];
	int dev;
	unsigned char h[POOL_IPC_BYTES];

	if (!ok(pool_create(&p, &spec, err, sizeof(err)) == 0, "create a host pool"))
		return;
	ok(pool_cpu(p) && pool_base(p), "the CPU addresses a host pool");
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (char)(i * 7 + 3);
	ok(!pool_write(p, 4093, in, sizeof(in)) && !memcmp((uint8_t *)pool_base(p) + 4093, in,
							      sizeof(in)), "pool_write at an odd offset");
	ok(!pool_read(p, 4093, out, sizeof(out)) && !memcmp(in, out, sizeof(in)), "pool_read it back");
	ok(!pool_zero(p, 4100, 10) && !pool_read(p, 4093, out, sizeof(out)) &&
	   out[6] == in[6] && !out[7] && !out[16] && out[17] == in[17], "pool_zero zeros just its range");
	ok(!pool_write(p, 0, in, 0) && !pool_read(p, 0, out, 0), "0 bytes move nothing");
	ok(!pool_sync(p), "pool_sync has nothing to wait for");
	struct pieces seen = { 0 };
	ok(!pool_each(p, 4093, sizeof(in), piece_seen, &seen) && seen.calls == 1 &&
	   seen.first == (uint8_t *)pool_base(p) + 4093 && seen.bytes == sizeof(in),
	   "pool_each gives a host pool's range in place, in one piece");
	seen = (struct pieces){ .stop = -EINTR };
	is(pool_each(p, 0, 4096, piece_seen, &seen), -EINTR, "... fn's error is pool_each's");
	seen = (struct pieces){ 0 };
	ok(!pool_each(p, 0, 0, piece_seen, &seen) && !seen.calls, "... and 0 bytes call nothing");
	is(pool_ipc(p, &dev, h), -ENOTSUP, "no IPC handle: not GPU memory");
	int fd = -1;
	uint64_t addr = 0;
	is(pool_dmabuf(p, &fd, &addr, err, sizeof(err)), -ENOTSUP,
	   "no dmabuf: RDMA registers host memory as it is (%s)", err);
	ok(fd == -1 && addr == 0, "... and nothing is given back");
	pool_destroy(p);
}

/* pool_share: the host pool is a file another process maps, the same
 * bytes at the same offsets, with the owner's label after them, and no
 * mapper can cut it under the daemon. */
static void test_share(void)
{
	struct pool *p;
	struct pool_spec spec = { POOL_HOST, 0, 1 << 20 };
	char err[128];
	uint64_t word = 0x0123456789abcdefull;
	struct stat st;
	void *label;
	int fd;

	if (!ok(pool_create(&p, &spec, err, sizeof(err)) == 0, "create a host pool"))
		return;
	if (!ok(!pool_share(p, &fd, &label) && fd >= 0 && label, "a host pool is shared"))
		goto destroy;
	ok(!fstat(fd, &st) && st.st_size == (1 << 20) + 4096, "the pool and one page for a label");
	memcpy(label, &word, sizeof(word));
	pool_write(p, 12345, "shared", 6);
	uint8_t *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ok(m != MAP_FAILED, "another mapping of it")) {
		ok(!memcmp(m + 12345, "shared", 6), "pool bytes at their offset in the file");
		ok(!memcmp(m + (1 << 20), &word, sizeof(word)), "the label after them");
		memcpy(m + 777, "back", 4);
		ok(!memcmp((uint8_t *)pool_base(p) + 777, "back", 4), "what the mapper writes, the pool has");
		munmap(m, (size_t)st.st_size);
	}
	ok(ftruncate(fd, 4096) == -1 && errno == EPERM, "no one can shrink it (sealed)");
	ok(ftruncate(fd, 4 << 20) == -1 && errno == EPERM, "nor grow it");
destroy:
	pool_destroy(p);
}

static void *bounce_of(void *p)
{
	return pool_bounce(p);
}

/* A thread keeps its bounce; two at once have two; one that ends hands
 * its own on to the next thread, so threads that come and go (libfuse's)
 * do not pile buffers up. */
static void test_bounce(void)
{
	struct pool *p;
	struct pool_spec spec = { POOL_HOST, 0, 1 << 20 };
	char err[128];
	pthread_t t;
	void *mine, *theirs = NULL, *next = NULL;

	if (!ok(pool_create(&p, &spec, err, sizeof(err)) == 0, "create a host pool"))
		return;
	mine = pool_bounce(p);
	ok(mine && pool_bounce(p) == mine, "a thread's bounce stays its own");
	memset(mine, 0xab, POOL_BOUNCE);        /* all of it is there (ASan) */
	ok(!pthread_create(&t, NULL, bounce_of, p) && !pthread_join(t, &theirs) &&
	   theirs && theirs != mine, "another thread gets another");
	ok(!pthread_create(&t, NULL, bounce_of, p) && !pthread_join(t, &next) &&
	   next == theirs, "a thread that ended hands its bounce on");
	pool_destroy(p);
}

/* This process's threads named omni-warm, and how many of them run at
 * idle priority. */
static int warm_threads(int *idle)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	*idle = 0;
	while (d && (e = readdir(d))) {
		char path[300], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strcmp(comm, "omni-warm\n")) {
			n++;
			*idle += sched_getscheduler(atoi(e->d_name)) == SCHED_IDLE;
		}
		fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

static int warming(struct pool *p)
{
	struct pool_usage u;

	pool_usage(p, &u);
	return u.warming;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

/* Whether a thread here can do what pool_warm does to give a pool huge
 * pages: come back from idle priority, and collapse 2 MiB of a memfd
 * mapped at a multiple of 2 MiB into one huge page. */
static void *collapse_probe(void *arg)
{
	struct sched_param prio = { 0 };
	size_t huge = 2u << 20;
	int fd = memfd_create("probe", MFD_CLOEXEC), ok = 0;
	uint8_t *room = mmap(NULL, 2 * huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *at = (uint8_t *)(((uintptr_t)room + huge - 1) & ~(uintptr_t)(huge - 1));

	if (fd >= 0 && room != MAP_FAILED && !ftruncate(fd, (off_t)huge) &&
	    mmap(at, huge, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == at &&
	    !pthread_setschedparam(pthread_self(), SCHED_IDLE, &prio) &&
	    !pthread_setschedparam(pthread_self(), SCHED_OTHER, &prio)) {
		memset(at, 1, huge);
		ok = madvise(at, huge, MADV_COLLAPSE) == 0;
	}
	if (room != MAP_FAILED)
		munmap(room, 2 * huge);
	if (fd >= 0)
		close(fd);
	*(int *)arg = ok;
	return NULL;
}

/* Each host pool's pages are touched once in the background (pool_warm):
 * by one thread of idle priority, which ends when the whole pool is warm
 * or when the pool goes, whichever is first; pool_usage says warming
 * until then.  Where the kernel collapses shared memory into huge pages,
 * the pool is then mapped with them, and what was written into it while
 * it was being collapsed is still there. */
static void test_warm(void)
{
	struct pool *p;
	struct pool_spec big = { POOL_HOST, 0, 256u << 20 };
	struct pool_usage u;
	char err[128];
	int idle, n, can = 0, same = 1;
	pthread_t probe;
	uint8_t *base;

	if (!pthread_create(&probe, NULL, collapse_probe, &can))
		pthread_join(probe, NULL);
	if (!ok(pool_create(&p, &big, err, sizeof(err)) == 0, "create a 256 MiB host pool"))
		return;
	/* It names itself once it runs; it is at idle priority but while it
	 * collapses a step. */
	for (int i = 0; i < 1000 && (n = warm_threads(&idle)) == 0; i++)
		usleep(1000);
	ok(n == 1 && (idle == 1 || can),
	   "one thread warms it, at idle priority or collapsing (%d threads, %d idle)", n, idle);
	base = pool_base(p);
	for (uint64_t off = 0; off < big.size; off += 4096)
		base[off] = (uint8_t)(off >> 12) | 1;
	/* 256 MiB take under 2 s in a PVM guest, 30 ms elsewhere */
	for (int i = 0; i < 2000 && warming(p); i++)
		usleep(10000);
	ok(!warming(p), "pool_usage stops saying warming once it is through");
	for (uint64_t off = 0; off < big.size; off += 4096)
		same &= base[off] == ((uint8_t)(off >> 12) | 1);
	ok(same, "bytes written while it warmed are all there");
	pool_usage(p, &u);
	if (can)
		ok(u.huge, "it is mapped with huge pages (this kernel collapses shared memory)");
	else
		tap_ok(1, __FILE__, __LINE__, "# SKIP this kernel or thread collapses no shared memory");
	for (int i = 0; i < 500 && warm_threads(&idle); i++)
		usleep(10000);
	is(warm_threads(&idle), 0, "... and the thread ends");
	pool_destroy(p);
	if (!ok(pool_create(&p, &big, err, sizeof(err)) == 0, "another 256 MiB host pool"))
		return;
	ok(warming(p), "... warming");
	pool_destroy(p);
	is(warm_threads(&idle), 0, "destroyed at once, a pool takes its warming thread with it");
}

/* Without the NVIDIA driver, a pinned or device pool is refused with a
 * reason that names the option (tests/cuda runs them where there is one). */
static void test_gpu_pools(void)
{
	struct pool_spec specs[] = { { POOL_PINNED, 0, 1 << 20 }, { POOL_CUDA, 0, 1 << 20 } };
	const char *names[] = { "option 'pool=pinned:1MiB': ", "option 'pool=cuda:0:1MiB': " };
	void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	for (int i = 0; i < 2; i++) {
		struct pool *p;
		char err[256] = "";
		if (drv) {
			tap_ok(1, __FILE__, __LINE__, "# SKIP this machine has an NVIDIA driver");
			continue;
		}
		int rc = pool_create(&p, &specs[i], err, sizeof(err));
		ok((rc == -ENODEV || rc == -ENOTSUP) && !strncmp(err, names[i], strlen(names[i])),
		   "%s pool without a driver: %s", pool_kind_name(specs[i].kind), err);
	}
	if (drv)
		dlclose(drv);
}

int main(void)
{
	test_sizes();
	test_specs();
	test_alloc();
	test_copy_stream();
	test_guards();
	test_backend_copies();
	test_share();
	test_bounce();
	test_warm();
	test_gpu_pools();
	return done_testing();
}
