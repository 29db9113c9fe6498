/* Unit tests for fs/caller.c: what a task is doing, read from /proc, with
 * the files each thread keeps open between asks.  Real child processes
 * block in real system calls (an open of a FIFO blocks until the other
 * end opens), and the answers must follow them: from one syscall to the
 * next, past more tasks than a thread keeps, and after a task is gone. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../tap.h"
#include "../../fs/caller.h"

#define TASKS 11                /* more than a thread keeps */

static char dir[] = "/tmp/omnifs-caller.XXXXXX";

static void nap_ms(int ms)
{
	struct timespec t = { 0, ms * 1000000L };
	nanosleep(&t, NULL);
}

/* Whether caller_intent(pid) says want within 5 s (the child may not
 * have reached its call yet). */
static int intent_becomes(pid_t pid, enum caller_intent want)
{
	for (int i = 0; i < 5000; i++, nap_ms(1))
		if (caller_intent(pid) == want)
			return 1;
	return 0;
}

static int holds_becomes(pid_t pid, const char *suffix, dev_t dev, ino_t ino, int want)
{
	for (int i = 0; i < 5000; i++, nap_ms(1))
		if (caller_holds_fd(pid, suffix, dev, ino) == want)
			return 1;
	return 0;
}

/* fork(), with a child that dies with the test: one left blocked in an
 * open would hold prove's pipe open. */
static pid_t child(void)
{
	pid_t pid = fork();
	if (pid == 0 && prctl(PR_SET_PDEATHSIG, SIGKILL))
		_exit(1);
	return pid;
}

/* A child blocked in open(fifo, flags) until the test opens the other end;
 * then in read() of go[0] until the test closes go[1]. */
static pid_t blocked_in_open(const char *fifo, int flags, const int go[2])
{
	pid_t pid = child();
	if (pid == 0) {
		char c;
		close(go[1]);
		int fd = open(fifo, flags, 0600);
		_exit(fd < 0 || read(go[0], &c, 1) < 0 ? 1 : 0);
	}
	return pid;
}

static void fifo_path(char *buf, size_t len, int i)
{
	snprintf(buf, len, "%s/f%d", dir, i);
}

/* A task's answer follows it from one call to the next, and a task gone
 * is unknown, its kept file notwithstanding. */
static void one_task(void)
{
	char fifo[128];
	int go[2];

	fifo_path(fifo, sizeof(fifo), 100);
	if (mkfifo(fifo, 0600) || pipe(go))
		exit(1);
	pid_t pid = blocked_in_open(fifo, O_RDONLY, go);
	ok(intent_becomes(pid, CALLER_OPEN_READ), "a plain open for reading");
	is(caller_state(pid), CALLER_ALIVE, "alive");
	int end = open(fifo, O_WRONLY);         /* its open returns; read() next */
	ok(intent_becomes(pid, CALLER_OTHER), "the same task, in read() now: not an open");
	close(go[1]);
	close(end);
	waitpid(pid, NULL, 0);
	is(caller_intent(pid), CALLER_UNKNOWN, "a task gone and reaped: unknown");
	is(caller_holds_fd(pid, "/x", 0, 0), -2, "its descriptors cannot be read");
	close(go[0]);
}

/* Eleven tasks asked in turn, twice over: each answer is its own. */
static void many_tasks(void)
{
	pid_t pid[TASKS];
	int go[2], ends[TASKS], right = 0;
	char fifo[128];

	if (pipe(go))
		exit(1);
	for (int i = 0; i < TASKS; i++) {
		fifo_path(fifo, sizeof(fifo), i);
		if (mkfifo(fifo, 0600))
			exit(1);
		pid[i] = blocked_in_open(fifo, i % 2 ? O_WRONLY | O_CREAT : O_RDONLY, go);
	}
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < TASKS; i++)
			right += intent_becomes(pid[i], i % 2 ? CALLER_OPEN_CREATE : CALLER_OPEN_READ);
	is(right, 2 * TASKS, "%d tasks, each asked twice: each its own answer", TASKS);
	for (int i = 0; i < TASKS; i++) {
		fifo_path(fifo, sizeof(fifo), i);
		ends[i] = open(fifo, i % 2 ? O_RDONLY : O_WRONLY);
	}
	close(go[1]);
	for (int i = 0; i < TASKS; i++) {
		waitpid(pid[i], NULL, 0);
		close(ends[i]);
	}
	close(go[0]);
}

/* The descriptor listing is read afresh each time; a killed task's state
 * is read while it is a zombie. */
static void descriptors(void)
{
	char path[128];
	int go[2], gone[2];

	snprintf(path, sizeof(path), "%s/0", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/0/1", dir);
	mkdir(path, 0700);
	/* Another file of that name elsewhere, as cp's source is. */
	char other[160];
	struct stat st, ost;
	snprintf(other, sizeof(other), "%s/0/key", dir);
	snprintf(path, sizeof(path), "%s/0/1/key", dir);
	int ofd = open(other, O_CREAT | O_WRONLY, 0600), kfd = open(path, O_CREAT | O_WRONLY, 0600);
	if (ofd < 0 || kfd < 0 || fstat(ofd, &ost) || fstat(kfd, &st) || pipe(go) || pipe(gone))
		exit(1);
	close(ofd);
	close(kfd);
	pid_t pid = child();
	if (pid == 0) {
		char c;
		int fd = open(path, O_CREAT | O_WRONLY, 0600);
		if (fd < 0 || read(go[0], &c, 1) != 1)
			_exit(1);
		close(fd);
		if (write(gone[1], "c", 1) != 1)
			_exit(1);
		pause();                        /* until killed */
		_exit(0);
	}
	ok(holds_becomes(pid, "/0/1/key", st.st_dev, st.st_ino, 1),
	   "a task holding the key's descriptor holds it");
	is(caller_holds_fd(pid, "/0/1/other", st.st_dev, st.st_ino), 0, "not another key's");
	is(caller_holds_fd(pid, "/1/key", ost.st_dev, ost.st_ino), 0,
	   "nor another file whose path ends the same (cp's source)");
	is(caller_holds_fd(pid, "/1/key", st.st_dev + 1, st.st_ino), 0,
	   "nor the same inode number on another device (another node's mount)");
	is(caller_holds_fd(pid, "/0/1/key", 0, 0), 1, "device 0: by the path alone");
	char c;
	if (write(go[1], "c", 1) != 1 || read(gone[0], &c, 1) != 1)
		exit(1);
	is(caller_holds_fd(pid, "/0/1/key", st.st_dev, st.st_ino), 0,
	   "once it closed it, no more (the listing is new)");
	kill(pid, SIGKILL);
	siginfo_t si;
	waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT);      /* a zombie: /proc still there */
	is(caller_state(pid), CALLER_KILLED, "killed by a signal");
	waitpid(pid, NULL, 0);
	close(go[0]);
	close(go[1]);
	close(gone[0]);
	close(gone[1]);
	unlink(path);
	unlink(other);
}

/* Its own mappings: a shared one holds the file, a private one does not
 * (fs/ops.c asks for an O_RDWR writer whose descriptors are gone). */
static void mappings(void)
{
	char path[160];
	struct stat st;

	snprintf(path, sizeof(path), "%s/mapped", dir);
	int fd = open(path, O_CREAT | O_RDWR, 0600);
	if (fd < 0 || ftruncate(fd, 8192) || fstat(fd, &st))
		exit(1);
	pid_t me = getpid();
	is(caller_maps_shared(me, st.st_dev, st.st_ino), 0, "an open file, not mapped: no");
	void *p = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, fd, 0);
	is(caller_maps_shared(me, st.st_dev, st.st_ino), 0, "a private mapping: no");
	void *q = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 4096);
	close(fd);
	if (p == MAP_FAILED || q == MAP_FAILED)
		exit(1);
	is(caller_maps_shared(me, st.st_dev, st.st_ino), 1, "a shared one, its descriptor closed: yes");
	is(caller_maps_shared(me, st.st_dev + 1, st.st_ino), 0, "... not on another device");
	is(caller_maps_shared(me, st.st_dev, st.st_ino + 1), 0, "... nor another inode");
	munmap(q, 4096);
	is(caller_maps_shared(me, st.st_dev, st.st_ino), 0, "unmapped: no");
	munmap(p, 8192);
	is(caller_maps_shared(0, st.st_dev, st.st_ino), -1, "pid 0 (outside our namespace): cannot tell");
	unlink(path);
}

int main(void)
{
	if (!mkdtemp(dir))
		return perror("mkdtemp"), 1;
	one_task();
	many_tasks();
	descriptors();
	mappings();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ok(system(cmd) == 0, "cleaned up");
	return done_testing();
}
