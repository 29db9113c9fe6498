/* waiters DIR N - N threads each open DIR/k<i> for reading before it exists
 * (the open waits), read it and check it holds "v<i>".  Prints how many were
 * answered with the right bytes; exit status 0 only if all were. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *dir;
static atomic_int good, bad, errs[256];

static void *reader(void *arg)
{
	long i = (long)arg;
	char path[4096], want[32], got[32];

	snprintf(path, sizeof(path), "%s/k%ld", dir, i);
	snprintf(want, sizeof(want), "v%ld", i);
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		atomic_fetch_add(&errs[errno & 255], 1);
		atomic_fetch_add(&bad, 1);
		return NULL;
	}
	ssize_t n = read(fd, got, sizeof(got));
	close(fd);
	if (n == (ssize_t)strlen(want) && !memcmp(got, want, (size_t)n))
		atomic_fetch_add(&good, 1);
	else
		atomic_fetch_add(&bad, 1);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		int help = argc == 2 && !strcmp(argv[1], "--help");
		fprintf(help ? stdout : stderr, "usage: waiters DIR N\n");
		return help ? 0 : 2;
	}
	dir = argv[1];
	long n = atol(argv[2]);
	pthread_t *t = calloc((size_t)n, sizeof(*t));
	pthread_attr_t attr;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 << 10);
	for (long i = 0; i < n; i++)
		if (pthread_create(&t[i], &attr, reader, (void *)i)) {
			perror("pthread_create");
			return 1;
		}
	for (long i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("answered=%d failed=%d\n", good, bad);
	for (int e = 0; e < 256; e++)
		if (errs[e])
			printf("  %s: %d\n", strerror(e), errs[e]);
	free(t);
	return bad ? 1 : 0;
}
