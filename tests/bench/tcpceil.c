/* tcpceil MIB - the loopback TCP ceiling: one stream over 127.0.0.1, 1 MiB
 * writes into 1 MiB reads, socket buffers as omnifs's peers set them.
 * Prints GiB/s. */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
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

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), s;
	char *buf = malloc(CHUNK);
	struct timespec t0, t1;
	pthread_t th;

	mib = argc > 1 ? atoll(argv[1]) : 1024;
	tune(l);
	tune(c);
	if (!buf || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &alen) ||
	    connect(c, (struct sockaddr *)&a, sizeof(a)) || (s = accept(l, NULL, NULL)) < 0)
		return perror("tcpceil"), 1;
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
