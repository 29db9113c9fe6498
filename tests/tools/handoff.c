/* handoff DIR N STATS [RDIR [SIZE]] - the latency of a hand-off of SIZE
 * bytes (4 KiB by default) between two processes: the writer creates,
 * writes and closes DIR/h<i> while the reader is already waiting in open()
 * of RDIR/h<i> (DIR by default; another node's mount of the same edge for
 * a cross-node hand-off; STATS is the reader's node's .omni/stats); the
 * time runs from the writer's open to the reader's close.  Prints the
 * median, p90 and p99 in microseconds, of the N after one untimed
 * hand-off (WARMUP).
 *
 * handoff seq DIR N - the same syscalls one after the other in one
 * process (create, write, close; open, read, close of DIR/s<i>): the
 * ceiling on a minimal FUSE filesystem (tests/bench/ceilingfs).
 *
 * HANDOFF_IDLE_US (0) makes both cold: everything is left idle that long
 * before each write, as between real requests, so that no thread is still
 * spinning from the last one (the writer's check that the reader waits
 * comes before the idle time, not after).  HANDOFF_NAME ("h") is the
 * keys' prefix, so that a second run can use the same directory.
 * HANDOFF_SMALL=1 makes each side one ioctl on its edge directory
 * (OMNIFS_IOC_PUT and OMNIFS_IOC_GET, fs/direct.h), what the Python
 * module does for small objects: the connector's hand-off without its
 * Python, so that the kernel's and the daemon's share of it shows.
 * HANDOFF_PHASES=FILE writes, for each plain run (seq's too; not
 * HANDOFF_SMALL's, one ioctl a side), where its time went (us, a line
 * each): the writer's open, write and close; then how long after that
 * close the reader's open returned (less than 0: before it), its first
 * read, its read of the end of the file, and its close.  The clock is
 * the machine's, so the two processes' times compare. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../fs/direct.h"

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Hand-offs done, untimed, before the N that count: a fresh process's
 * first system calls fault in its code and libc's pages, on ceilingfs as on
 * omnifs (up to 4x the median there, often the slowest of a run), which
 * a long-lived worker does not pay on every request. */
enum { WARMUP = 1 };

static int cmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

/* 1 once the daemon reports a waiting open (so the reader is in open()). */
static int waiting(const char *stats)
{
	char buf[4096];
	int fd = open(stats, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *w = strstr(buf, "\nwaiters: ");
	return w && atoi(w + 10) > 0;
}

static const char *name(void)
{
	const char *s = getenv("HANDOFF_NAME");
	return s && *s ? s : "h";
}

static int small(void)
{
	const char *s = getenv("HANDOFF_SMALL");
	return s && *s == '1';
}

/* The request for key: the header, then the key's bytes; its size. */
static size_t small_request(char *buf, const char *key, uint64_t size, int64_t wait_ms)
{
	struct omnifs_small s = { .magic = OMNIFS_SMALL_MAGIC, .key_len = (uint32_t)strlen(key),
				  .size = size, .readers = -1, .wait_ms = wait_ms };

	memcpy(buf, &s, sizeof(s));
	memcpy(buf + sizeof(s), key, s.key_len);
	return sizeof(s) + s.key_len;
}

/* One GET of dir/key into buf: the object's size, or -1. */
static ssize_t small_get(int dfd, const char *key, char *buf)
{
	struct omnifs_small s;

	small_request(buf, key, 0, 60000);
	if (ioctl(dfd, OMNIFS_IOC_GET(OMNIFS_SMALL_MAX), buf) < 0)
		return -1;
	memcpy(&s, buf, sizeof(s));
	return (ssize_t)s.size;
}

/* When each step of a run ended (CLOCK_MONOTONIC ns).  The reader's
 * close is the run's end; its other steps, like the writer's, are only for
 * HANDOFF_PHASES (unset by HANDOFF_SMALL's ioctls, which it skips). */
struct stamps { long long opened, io, eof, closed; };

/* The writer's create, write and close of path, each step's end in w
 * (io: the write's).  0 or -1. */
static int put_plain(const char *path, const char *data, ssize_t size, struct stamps *w)
{
	int fd = open(path, O_CREAT | O_WRONLY, 0644);

	w->opened = now_ns();
	if (fd < 0 || write(fd, data, (size_t)size) != size)
		return -1;
	w->io = now_ns();
	if (close(fd))
		return -1;
	w->closed = now_ns();
	return 0;
}

/* The reader's open, reads to the end and close of path into buf (len
 * bytes), each step's end in r (io: the first read's).  The bytes read,
 * or -1. */
static ssize_t get_plain(const char *path, char *buf, size_t len, struct stamps *r)
{
	int fd = open(path, O_RDONLY);
	ssize_t got = 0, n;

	r->opened = now_ns();
	if (fd < 0)
		return -1;
	while ((n = read(fd, buf, len)) > 0) {
		got += n;
		if (!r->io)
			r->io = now_ns();
	}
	r->eof = now_ns();
	if (!r->io)             /* nothing to read: the end came first */
		r->io = r->eof;
	close(fd);
	r->closed = now_ns();
	return n < 0 ? -1 : got;
}

/* HANDOFF_PHASES's line for the run that began at t0. */
static void phase_line(FILE *f, long long t0, const struct stamps *w, const struct stamps *r)
{
	fprintf(f, "%.1f %.1f %.1f %.1f %.1f %.1f %.1f\n", (w->opened - t0) / 1e3,
		(w->io - w->opened) / 1e3, (w->closed - w->io) / 1e3,
		(r->opened - w->closed) / 1e3, (r->io - r->opened) / 1e3,
		(r->eof - r->io) / 1e3, (r->closed - r->eof) / 1e3);
}

static FILE *phases_file(void)
{
	const char *pf = getenv("HANDOFF_PHASES");
	return pf && *pf ? fopen(pf, "w") : NULL;
}

static void reader(const char *dir, int n, ssize_t size, int ready, int done)
{
	static char buf[65536];
	int dfd = small() ? open(dir, O_RDONLY | O_DIRECTORY) : -1;

	if (small() && dfd < 0)
		_exit(1);       /* no plain reads instead: the writer sees it end */
	for (int i = 0; i < n; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s%d", dir, name(), i);
		if (write(ready, "r", 1) != 1)
			_exit(1);
		struct stamps st = { 0 };
		ssize_t got = dfd >= 0 ? small_get(dfd, strrchr(path, '/') + 1, buf) :
			      get_plain(path, buf, sizeof(buf), &st);
		st.closed = got == size ? now_ns() : -1;
		if (write(done, &st, sizeof(st)) != sizeof(st))
			_exit(1);
	}
	_exit(0);
}

static unsigned idle_us(void)
{
	const char *s = getenv("HANDOFF_IDLE_US");
	return s ? (unsigned)strtoul(s, NULL, 10) : 0;
}

/* HANDOFF_DUMP=FILE also writes each run's time (us), in the order of the
 * runs, to FILE: where the slow ones fall tells what makes them slow. */
static int report(long long *lat, int n)
{
	const char *dump = getenv("HANDOFF_DUMP");
	FILE *f = dump ? fopen(dump, "w") : NULL;

	for (int i = 0; f && i < n; i++)
		fprintf(f, "%.1f\n", lat[i] / 1e3);
	if (f)
		fclose(f);
	qsort(lat, (size_t)n, sizeof(*lat), cmp);
	printf("%.1f %.1f %.1f\n", lat[n / 2] / 1e3, lat[n * 9 / 10] / 1e3, lat[n * 99 / 100] / 1e3);
	return 0;
}

/* handoff seq DIR N */
static int sequential(const char *dir, int n)
{
	static char data[4096], buf[65536];
	long long *lat = calloc((size_t)(n > 0 ? n : 0) + WARMUP, sizeof(*lat));
	unsigned idle = idle_us();
	FILE *phases = phases_file();

	if (!lat || n <= 0)
		return fprintf(stderr, "handoff: bad N\n"), 2;
	memset(data, 'h', sizeof(data));
	for (int i = 0; i < n + WARMUP; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/s%d", dir, i);
		if (idle)
			usleep(idle);
		struct stamps w = { 0 }, r = { 0 };
		long long t0 = now_ns();
		if (put_plain(path, data, sizeof(data), &w))
			return perror(path), 1;
		ssize_t got = get_plain(path, buf, sizeof(buf), &r);
		if (got != (ssize_t)sizeof(data))
			return fprintf(stderr, "handoff: %s read %zd bytes\n", path, got), 1;
		lat[i] = r.closed - t0;
		if (phases && i >= WARMUP)
			phase_line(phases, t0, &w, &r);
		unlink(path);           /* a ceiling keeps nothing */
	}
	if (phases)
		fclose(phases);
	return report(lat + WARMUP, n);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "seq"))
		return sequential(argv[2], atoi(argv[3]));
	int help = argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));

	if (argc < 4 || argc > 6 || help)
		return fprintf(help ? stdout : stderr, "usage: handoff DIR N STATSFILE [READER-DIR [SIZE]]\n"
			       "       handoff seq DIR N\n"), help ? 0 : 2;
	const char *dir = argv[1], *rdir = argc >= 5 ? argv[4] : dir;
	int n = atoi(argv[2]), rp[2], dp[2];
	ssize_t size = argc == 6 ? atol(argv[5]) : 4096;
	long long *lat = calloc((size_t)(n > 0 ? n : 0) + WARMUP, sizeof(*lat));
	char *data = size > 0 ? malloc((size_t)size) : NULL;
	unsigned idle = idle_us();

	static char req[OMNIFS_SMALL_MAX];
	int dfd = small() ? open(dir, O_RDONLY | O_DIRECTORY) : -1;
	FILE *phases = phases_file();

	if (!lat || !data || n <= 0)
		return fprintf(stderr, "handoff: bad N or SIZE\n"), 2;
	if (small() && (dfd < 0 || sizeof(struct omnifs_small) + strlen(name()) + 12 + (size_t)size >
			OMNIFS_SMALL_MAX))
		return fprintf(stderr, "handoff: HANDOFF_SMALL needs an edge directory and SIZE "
			       "under 16 KiB\n"), 2;
	memset(data, 'h', (size_t)size);
	if (pipe(rp) || pipe(dp))
		return 1;
	if (fork() == 0)
		reader(rdir, n + WARMUP, size, rp[1], dp[1]);
	close(rp[1]);           /* a reader that dies is then an end of file */
	close(dp[1]);
	for (int i = 0; i < n + WARMUP; i++) {
		char c, path[4096];
		if (read(rp[0], &c, 1) != 1)
			return 1;
		for (int spin = 0; !waiting(argv[3]) && spin < 100000; spin++)
			;
		if (idle)
			usleep(idle);
		snprintf(path, sizeof(path), "%s/%s%d", dir, name(), i);
		struct stamps w = { 0 }, r;
		long long t0 = now_ns();
		if (dfd >= 0) {
			size_t at = small_request(req, strrchr(path, '/') + 1, (uint64_t)size, 0);
			memcpy(req + at, data, (size_t)size);
			if (ioctl(dfd, OMNIFS_IOC_PUT(at + (size_t)size), req) < 0)
				return perror(path), 1;
		} else if (put_plain(path, data, size, &w)) {
			return perror(path), 1;
		}
		if (read(dp[0], &r, sizeof(r)) != sizeof(r) || r.closed < 0)
			return fprintf(stderr, "reader failed at %d\n", i), 1;
		lat[i] = r.closed - t0;
		if (phases && i >= WARMUP && dfd < 0)
			phase_line(phases, t0, &w, &r);
	}
	wait(NULL);
	if (phases)
		fclose(phases);
	return report(lat + WARMUP, n);
}
