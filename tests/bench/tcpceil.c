/* tcpceil MIB - the loopback TCP ceiling: one stream over 127.0.0.1, 1 MiB
 * writes into 1 MiB reads, socket buffers as omnifs's peers set them.
 * Prints GiB/s.
 *
 * tcpceil rtt N - the floor under a cross-node hand-off: N round trips of
 * 32 bytes between two processes over loopback TCP.  Prints the median in
 * microseconds.  (A hand-off is at least a message one way and a few
 * wake-ups of sleeping threads, which is what this costs.) */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1 << 20)

static long long mib;

static void tune(int fd)
{
	int one = 1, buf = 4 << 20;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

static void *sender(void *arg)
{
	int fd = *(int *)arg;
	char *b = calloc(1, CHUNK);
	for (long long i = 0; b && i < mib; i++)
		for (ssize_t off = 0, w; off < CHUNK; off += w)
			if ((w = write(fd, b + off, CHUNK - off)) <= 0)
				return NULL;
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

	if (!lat || (pid = fork()) < 0)
		return 1;
	if (pid == 0) {
		close(c);
		while (read(s, b, sizeof(b)) == sizeof(b) && write(s, b, sizeof(b)) == sizeof(b))
			;
		_exit(0);
	}
	close(s);
	for (int i = 0; i < n; i++) {
		long long t = now_ns();
		if (write(c, b, sizeof(b)) != sizeof(b) || read(c, b, sizeof(b)) != sizeof(b))
			return 1;
		lat[i] = now_ns() - t;
	}
	close(c);
	waitpid(pid, NULL, 0);
	qsort(lat, (size_t)n, sizeof(*lat), cmp_ll);
	printf("%.1f\n", lat[n / 2] / 1e3);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), s;
	char *buf = malloc(CHUNK);
	struct timespec t0, t1;
	pthread_t th;

	mib = argc > 1 ? atoll(argv[1]) : 1024;     /* "rtt": not used */
	tune(l);
	tune(c);
	if (!buf || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &alen) ||
	    connect(c, (struct sockaddr *)&a, sizeof(a)) || (s = accept(l, NULL, NULL)) < 0)
		return perror("tcpceil"), 1;
	if (argc > 2 && !strcmp(argv[1], "rtt")) {
		tune(s);
		return rtt(atoi(argv[2]) > 0 ? atoi(argv[2]) : 1000, c, s);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_create(&th, NULL, sender, &c);
	long long total = mib * CHUNK, got = 0;
	ssize_t r;
	while (got < total && (r = read(s, buf, CHUNK)) > 0)
		got += r;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_join(th, NULL);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("%.3f\n", (double)got / secs / (1 << 30));
	return got == total ? 0 : 1;
}
