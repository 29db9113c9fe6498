/* Unit tests for the log of messages owed to peers (fs/owedlog.h), on
 * real files in a directory of their own. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../tap.h"
#include "../../fs/owedlog.h"

static const uint8_t key[32] = "the cluster key, thirty-two b..";

struct got { int n; char peer[4][64]; struct proto_msg m[4]; };

static void take(void *arg, const char *peer, const struct proto_msg *m)
{
	struct got *g = arg;

	if (g->n < 4) {
		snprintf(g->peer[g->n], sizeof(g->peer[0]), "%s", peer);
		g->m[g->n] = *m;
		g->n++;
	}
}

static int reopen(struct owedlog **l, const char *dir, const uint8_t *k, struct got *g)
{
	char err[256];

	owedlog_close(*l);
	*l = NULL;
	memset(g, 0, sizeof(*g));
	return owedlog_open(l, dir, "b", k, 32, take, g, err, sizeof(err));
}

static long file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) ? -1 : (long)st.st_size;
}

int main(void)
{
	char dir[] = "/tmp/owedlog-XXXXXX", sub[64], path[96], err[256];
	struct owedlog *l = NULL;
	struct got g;
	struct proto_msg c = { .type = PT_CONSUMED, .u.consumed = { 7, 1, 2, 4, 99 } };
	struct proto_msg r = { .type = PT_REMOVE }, cl = { .type = PT_CLEANUP };

	if (!mkdtemp(dir))
		return 1;
	snprintf(sub, sizeof(sub), "%s/state", dir);
	snprintf(path, sizeof(path), "%s/b.owed", sub);
	strcpy(r.u.obj.from, "0");
	strcpy(r.u.obj.to, "1");
	strcpy(r.u.obj.key, "req-1_kv");
	r.u.obj.oid = 1234;
	strcpy(cl.u.cleanup.id, "req-2");

	is(owedlog_open(&l, sub, "b", key, 32, take, &g, err, sizeof(err)), 0,
	   "a log in a directory that is not there yet: made");
	is(file_size(path), -1, "... and no file while nothing is owed");
	is(owedlog_records(l), 0, "... it holds nothing");
	is(owedlog_add(l, "a", &c), 0, "a complete read owed to a");
	is(owedlog_add(l, "c", &r), 0, "a removal owed to c");
	is(owedlog_add(l, "a", &cl), 0, "a cleanup owed to a");
	is(owedlog_records(l), 3, "... the log holds them");

	is(reopen(&l, sub, key, &g), 0, "a restart opens it again");
	is(g.n, 3, "... and hands over the three, in order");
	ok(!strcmp(g.peer[0], "a") && g.m[0].type == PT_CONSUMED && g.m[0].u.consumed.oid == 7 &&
	   g.m[0].u.consumed.first == 1 && g.m[0].u.consumed.n == 2 &&
	   g.m[0].u.consumed.of == 4 && g.m[0].u.consumed.rid == 99, "... the read, whole");
	ok(!strcmp(g.peer[1], "c") && g.m[1].type == PT_REMOVE && g.m[1].u.obj.oid == 1234 &&
	   !strcmp(g.m[1].u.obj.key, "req-1_kv") && !strcmp(g.m[1].u.obj.to, "1"),
	   "... the removal, names and oid");
	ok(!strcmp(g.peer[2], "a") && g.m[2].type == PT_CLEANUP &&
	   !strcmp(g.m[2].u.cleanup.id, "req-2"), "... the cleanup");

	/* A crash in an append: the torn record goes, what came before stays,
	 * and what is appended next is read back after it. */
	long whole = file_size(path);
	int fd = open(path, O_WRONLY | O_APPEND);
	ok(fd >= 0 && write(fd, "\x40\0\0\0torn", 8) == 8, "a record cut short at the end");
	close(fd);
	is(reopen(&l, sub, key, &g), 0, "reopened");
	is(g.n, 3, "... the three whole ones are kept");
	is(file_size(path), whole, "... and the torn bytes are cut off");
	is(owedlog_add(l, "c", &c), 0, "one more appended");
	is(reopen(&l, sub, key, &g), 0, "reopened");
	is(g.n, 4, "... all four read back");

	/* After a peer is paid, the log holds what is still owed. */
	ok(!owedlog_begin(l) && !owedlog_add(l, "c", &r) && !owedlog_end(l, 0),
	   "rewritten with the one still owed");
	is(reopen(&l, sub, key, &g), 0, "reopened");
	ok(g.n == 1 && g.m[0].type == PT_REMOVE, "... it alone comes back");
	ok(!owedlog_begin(l) && !owedlog_end(l, 0), "rewritten with nothing owed");
	is(file_size(path), -1, "... the file is gone");
	is(reopen(&l, sub, key, &g), 0, "reopened");
	is(g.n, 0, "... nothing comes back");

	/* A rewrite that fails half way (a full disk) leaves the old file,
	 * and what is appended after it still lands there. */
	is(owedlog_add(l, "a", &c), 0, "a read owed");
	ok(!owedlog_begin(l) && !owedlog_add(l, "a", &c) && owedlog_end(l, -ENOSPC) == -ENOSPC,
	   "a rewrite that failed");
	is(owedlog_add(l, "a", &cl), 0, "... then a cleanup owed");
	is(reopen(&l, sub, key, &g), 0, "reopened");
	ok(g.n == 2 && g.m[0].type == PT_CONSUMED && g.m[1].type == PT_CLEANUP,
	   "... the old file, with the cleanup after it");
	ok(!owedlog_begin(l) && !owedlog_end(l, 0), "emptied");

	/* Another cluster's log (another secret): said, not handed over. */
	is(owedlog_add(l, "a", &c), 0, "a read owed");
	uint8_t other[32] = "another cluster's key, 32 bytes";
	is(reopen(&l, sub, other, &g), 0, "opened by a node of another cluster");
	is(g.n, 0, "... it hands nothing over");
	is(owedlog_add(l, "a", &cl), 0, "... and starts the file anew on its first append");
	is(reopen(&l, sub, other, &g), 0, "reopened");
	ok(g.n == 1 && g.m[0].type == PT_CLEANUP, "... its own message alone");

	/* A link planted in the directory is not followed: what it points
	 * at is neither read nor truncated. */
	char victim[96], tmp[96];
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	snprintf(tmp, sizeof(tmp), "%s/b.owed.new", sub);
	fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ok(fd >= 0 && write(fd, "keep", 4) == 4, "a file elsewhere");
	close(fd);
	ok(!symlink(victim, tmp), "... and a link to it where a rewrite writes");
	ok(owedlog_begin(l) < 0, "the rewrite refuses to follow it");
	is(file_size(victim), 4, "... and the file it points at is whole");
	unlink(tmp);
	unlink(victim);
	ok(owedlog_open(&l, "/proc/omnifs-no", "b", key, 32, take, &g, err, sizeof(err)) < 0 &&
	   strstr(err, "option 'state_dir=/proc/omnifs-no'"), "a directory that cannot be made: "
	   "an error that names the option");
	owedlog_close(l);
	unlink(path);
	rmdir(sub);
	rmdir(dir);
	done_testing();
}
