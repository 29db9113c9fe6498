/* tcpceil MIB - the loopback TCP ceiling: one stream over 127.0.0.1, 1 MiB
 * writes into 1 MiB reads, socket buffers as omnifs's peers set them.
 * Prints GiB/s.
 *
 * tcpceil rtt N - the floor under a cross-node hand-off: N round trips of
 * 32 bytes between two processes over loopback TCP.  Prints the median in
 * microseconds.  (A hand-off is at least a message one way and a few
 * wake-ups of sleeping threads, which is what this costs.)  With
 * TCPCEIL_IDLE_US both ends sleep that long before each round trip: the
 * cold floor under a cold hand-off.
 *
 * tcpceil copies MIB - the copies a remote read makes, by a plain program:
 * one stream from a MIB buffer; the receiver reads it straight into a
 * second MIB buffer (omnifs's pool), a MiB frame at a time, hashing what
 * each read brought while it is in cache, and a third thread copies each
 * MiB out as it lands (the FUSE reply into the reader's buffer).  No
 * protocol, no FUSE: what is left between this and omnifs is omnifs's
 * own cost.  Prints GiB/s.
 *
 * tcpceil putget MIB ROUNDS - the floor under a cross-node put -> get of
 * MIB (the connector's, issue 19), as omnifs moves it: a writer copies the
 * object into a pool in 8 MiB pieces while a second thread hashes each
 * piece behind it (the whole object's and each MiB's XXH3, as fs/ns_hash.c
 * does; where it runs is the scheduler's choice); once both are done (the
 * publish), the pool goes out as `copies` sends it.  The daemons' own
 * idle: 20 ms before each round.  Prints the median in milliseconds, and
 * the median of the put alone. */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#ifdef __x86_64__
#include <xxh_x86dispatch.h>
#endif

#define CHUNK (1 << 20)

static long long mib;

static void tune(int fd)
{
	int one = 1, buf = 4 << 20;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

/* The whole stream comes from src when there is one, else from one MiB
 * written over and over. */
static char *src;

static void *sender(void *arg)
{
	int fd = *(int *)arg;
	char *b = src ? NULL : calloc(1, CHUNK);
	for (long long i = 0; (src || b) && i < mib; i++) {
		const char *from = src ? src + i * CHUNK : b;
		for (ssize_t off = 0, w; off < CHUNK; off += w)
			if ((w = write(fd, from + off, CHUNK - off)) <= 0)
				goto out;
	}
out:
	free(b);
	return NULL;
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

/* Ping-pong of 32 bytes; the child echoes. */
static int rtt(int n, int c, int s)
{
	long long *lat = calloc((size_t)n, sizeof(*lat));
	char b[32] = { 0 };
	pid_t pid;

	if (!lat || (pid = fork()) < 0) {
		free(lat);
		return 1;
	}
	if (pid == 0) {
		close(c);
		while (read(s, b, sizeof(b)) == sizeof(b) && write(s, b, sizeof(b)) == sizeof(b))
			;
		_exit(0);
	}
	close(s);
	const char *idle = getenv("TCPCEIL_IDLE_US");
	unsigned us = idle ? (unsigned)strtoul(idle, NULL, 10) : 0;
	for (int i = 0; i < n; i++) {
		if (us)
			usleep(us);
		long long t = now_ns();
		if (write(c, b, sizeof(b)) != sizeof(b) || read(c, b, sizeof(b)) != sizeof(b)) {
			free(lat);
			return 1;
		}
		lat[i] = now_ns() - t;
	}
	close(c);
	waitpid(pid, NULL, 0);
	qsort(lat, (size_t)n, sizeof(*lat), cmp_ll);
	printf("%.1f\n", lat[n / 2] / 1e3);
	free(lat);
	return 0;
}

/* ------------------------------------------------------------ copies */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	long long landed;       /* bytes in dst */
	char *dst;
} pool = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL };

static char *big_buffer(void)
{
	size_t n = (size_t)mib * CHUNK;
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	madvise(p, n, MADV_HUGEPAGE);   /* as the pool asks */
	memset(p, 1, n);
	return p;
}

static void *copier(void *arg)
{
	char *out = malloc(CHUNK);
	(void)arg;
	for (long long i = 0; out && i < mib; i++) {
		pthread_mutex_lock(&pool.lock);
		while (pool.landed < (i + 1) * CHUNK)
			pthread_cond_wait(&pool.cond, &pool.lock);
		pthread_mutex_unlock(&pool.lock);
		memcpy(out, pool.dst + i * CHUNK, CHUNK);
		__asm__ volatile("" : : "r"(out) : "memory");  /* a copy nobody reads is still made */
	}
	free(out);
	return NULL;
}

/* Receives the stream into pool.dst as omnifs's receiver does. */
static long long land(int s)
{
	long long total = mib * CHUNK, got = 0;
	XXH3_state_t st;
	volatile XXH64_hash_t sink;

	while (got < total) {
		ssize_t k = 0, r;
		XXH3_64bits_reset(&st);
		while (k < CHUNK && (r = read(s, pool.dst + got + k, CHUNK - k)) > 0) {
			XXH3_64bits_update(&st, pool.dst + got + k, (size_t)r);
			k += r;
		}
		if (k < CHUNK)
			break;
		sink = XXH3_64bits_digest(&st);
		(void)sink;
		pthread_mutex_lock(&pool.lock);
		pool.landed = got += k;
		pthread_cond_signal(&pool.cond);
		pthread_mutex_unlock(&pool.lock);
	}
	return got;
}

/* ------------------------------------------------------------ main */

/* The plain stream: into one MiB, over and over. */
static long long drain(int s)
{
	char *buf = malloc(CHUNK);
	long long total = mib * CHUNK, got = 0;
	ssize_t r;

	while (buf && got < total && (r = read(s, buf, CHUNK)) > 0)
		got += r;
	free(buf);
	return got;
}

/* The copies: received and stored by land(), copied out by copier(). */
static long long pipeline(int s)
{
	pthread_t cp;
	long long got;

	if (pthread_create(&cp, NULL, copier, NULL))
		return 0;
	got = land(s);
	if (got == mib * CHUNK)         /* else it waits for bytes that never come */
		pthread_join(cp, NULL);
	return got;
}

/* c and s: the two ends of one loopback TCP connection. */
static int pair(int *c, int *s)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	*c = socket(AF_INET, SOCK_STREAM, 0);
	tune(l);
	tune(*c);
	if (l < 0 || *c < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &alen) ||
	    connect(*c, (struct sockaddr *)&a, sizeof(a)) || (*s = accept(l, NULL, NULL)) < 0)
		return -1;
	close(l);
	return 0;
}

/* ------------------------------------------------------------ putget */

#define PIECE (8 << 20)
#define HASH_STEP (64 << 10)

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	long long front;        /* bytes the writer has copied */
} put = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };

/* Hashes the pool behind the writer: the whole object and each MiB. */
static void *hasher(void *arg)
{
	long long n = mib * CHUNK;
	XXH3_state_t *st = XXH3_createState(), *cs = XXH3_createState();
	volatile XXH64_hash_t sink;

	(void)arg;
	if (!st || !cs)
		goto out;
	XXH3_64bits_reset(st);
	XXH3_64bits_reset(cs);
	for (long long at = 0; at < n; at += HASH_STEP) {
		pthread_mutex_lock(&put.lock);
		while (put.front < at + HASH_STEP)
			pthread_cond_wait(&put.cond, &put.lock);
		pthread_mutex_unlock(&put.lock);
		XXH3_64bits_update(st, src + at, HASH_STEP);
		XXH3_64bits_update(cs, src + at, HASH_STEP);
		if ((at + HASH_STEP) % CHUNK == 0) {
			sink = XXH3_64bits_digest(cs);
			XXH3_64bits_reset(cs);
		}
	}
	sink = XXH3_64bits_digest(st);
	(void)sink;
out:
	XXH3_freeState(st);
	XXH3_freeState(cs);
	return NULL;
}

/* The writer's copy of user into the pool (src), the hasher behind it. */
static int put_object(const char *user)
{
	pthread_t h;

	put.front = 0;
	if (pthread_create(&h, NULL, hasher, NULL))
		return -1;
	for (long long at = 0; at < mib * CHUNK; at += PIECE) {
		long long n = mib * CHUNK - at < PIECE ? mib * CHUNK - at : PIECE;
		memcpy(src + at, user + at, (size_t)n);
		pthread_mutex_lock(&put.lock);
		put.front = at + n;
		pthread_cond_broadcast(&put.cond);
		pthread_mutex_unlock(&put.lock);
	}
	return pthread_join(h, NULL) ? -1 : 0;
}

/* One round: the put, then the stream and its copies.  ns: both, and the
 * put alone. */
static int putget_round(const char *user, long long *ns, long long *put_ns)
{
	pthread_t th;
	int c, s;

	if (pair(&c, &s))
		return -1;
	pool.landed = 0;
	usleep(20000);
	long long t0 = now_ns();
	if (put_object(user) || (*put_ns = now_ns() - t0, pthread_create(&th, NULL, sender, &c))) {
		close(c);
		close(s);
		return -1;
	}
	long long got = pipeline(s);
	*ns = now_ns() - t0;
	pthread_join(th, NULL);
	close(c);
	close(s);
	return got == mib * CHUNK ? 0 : -1;
}

static int putget(int rounds)
{
	long long *ns = calloc((size_t)rounds, sizeof(*ns)), *pn = calloc((size_t)rounds, sizeof(*pn));
	char *user = big_buffer();
	int rc = !ns || !pn || !user || !(src = big_buffer()) || !(pool.dst = big_buffer());

	for (int i = 0; !rc && i < rounds; i++)
		rc = putget_round(user, &ns[i], &pn[i]) != 0;
	if (!rc) {
		qsort(ns, (size_t)rounds, sizeof(*ns), cmp_ll);
		qsort(pn, (size_t)rounds, sizeof(*pn), cmp_ll);
		printf("%.2f %.2f\n", ns[rounds / 2] / 1e6, pn[rounds / 2] / 1e6);
	}
	free(ns);
	free(pn);
	return rc;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 ? argv[1] : "stream";
	int copies = !strcmp(mode, "copies"), pg = !strcmp(mode, "putget"), c, s;
	int rounds = pg && argc > 3 ? atoi(argv[3]) : 0;
	struct timespec t0, t1;
	pthread_t th;

	mib = atoll(argc > 2 ? argv[2] : argc > 1 ? argv[1] : "1024");
	if (argc > 3 + pg || mib <= 0 || (pg && rounds <= 0) ||
	    (argc > 2 && !copies && !pg && strcmp(mode, "rtt"))) {
		int help = argc > 1 && !strcmp(argv[1], "--help");
		fprintf(help ? stdout : stderr, "usage: tcpceil [MIB] | tcpceil rtt N | "
			"tcpceil copies MIB | tcpceil putget MIB ROUNDS   (see tcpceil.c's head)\n");
		return help ? 0 : 2;
	}
	if (pg)
		return putget(rounds) ? (perror("tcpceil"), 1) : 0;
	if (pair(&c, &s))
		return perror("tcpceil"), 1;
	if (!strcmp(mode, "rtt")) {
		tune(s);
		return rtt((int)mib, c, s);
	}
	if (copies && (!(src = big_buffer()) || !(pool.dst = big_buffer())))
		return perror("tcpceil"), 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_create(&th, NULL, sender, &c);
	long long got = copies ? pipeline(s) : drain(s);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_join(th, NULL);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("%.3f\n", (double)got / secs / (1 << 30));
	return got == mib * CHUNK ? 0 : 1;
}
