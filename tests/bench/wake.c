/* wake N [IDLE_US] - what a wake-up costs on this machine: N round trips
 * of one byte over two pipes between two threads, both pinned to core 0,
 * then pinned to cores 0 and 1.  Prints the two medians in microseconds.
 * With IDLE_US, each round trip comes after that long asleep, as a
 * request does after a quiet spell (the cold hand-off's 2 ms): both cores
 * have gone idle, and across cores each of its two wake-ups finds the
 * other core so.
 *
 * Every FUSE request and every peer message wakes a sleeping thread; a
 * 4 KiB hand-off is a chain of about ten of them.  Across cores a wake-up
 * may find the other core asleep, and in a VM whose idle vCPUs halt (no
 * guest halt polling) waking one takes a trip through the host.  This
 * number says which kind of machine the hand-off ran on. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct pair { int ping[2], pong[2], core; };

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int pin(int core)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(core, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static void *echo(void *arg)
{
	struct pair *p = arg;
	char c;

	pin(p->core);
	while (read(p->ping[0], &c, 1) == 1 && write(p->pong[1], &c, 1) == 1)
		;
	return NULL;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

/* The median round trip to a thread pinned to core, each after idle_us
 * asleep; -1 on failure. */
static double round_trip(int n, int core, unsigned idle_us)
{
	struct pair p = { .core = core };
	long long *lat = calloc((size_t)n, sizeof(*lat));
	pthread_t t;
	char c = 'w';
	double med = -1;

	if (!lat || pipe(p.ping))
		goto free_lat;
	if (pipe(p.pong))
		goto close_ping;
	if (pthread_create(&t, NULL, echo, &p))
		goto close_pong;
	for (int i = 0; i < n; i++) {
		if (idle_us)
			usleep(idle_us);
		long long t0 = now_ns();
		if (write(p.ping[1], &c, 1) != 1 || read(p.pong[0], &c, 1) != 1)
			goto join;
		lat[i] = now_ns() - t0;
	}
	qsort(lat, (size_t)n, sizeof(*lat), cmp_ll);
	med = lat[n / 2] / 1e3;
join:
	close(p.ping[1]);       /* the echo thread reads EOF and ends */
	p.ping[1] = -1;
	pthread_join(t, NULL);
close_pong:
	close(p.pong[0]);
	close(p.pong[1]);
close_ping:
	close(p.ping[0]);
	if (p.ping[1] >= 0)
		close(p.ping[1]);
free_lat:
	free(lat);
	return med;
}

/* A whole non-negative decimal number, or -1. */
static int number(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);
	return end == s || *end || v < 0 || v > 100000000 ? -1 : (int)v;
}

int main(int argc, char **argv)
{
	int n = argc == 2 || argc == 3 ? number(argv[1]) : -1;
	int idle = argc == 3 ? number(argv[2]) : 0;

	if (n <= 0 || idle < 0) {
		int help = argc == 2 && !strcmp(argv[1], "--help");
		return fprintf(help ? stdout : stderr, "usage: wake N [IDLE_US]\n"), help ? 0 : 2;
	}
	if (pin(0))
		return perror("wake: sched_setaffinity"), 1;
	double same = round_trip(n, 0, (unsigned)idle);
	double other = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? round_trip(n, 1, (unsigned)idle) : -1;
	if (same < 0)
		return fprintf(stderr, "wake: pipe round trip failed\n"), 1;
	printf("%.1f %.1f\n", same, other);
	return 0;
}
