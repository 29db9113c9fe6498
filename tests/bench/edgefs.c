/* edgefs - the FUSE floor for big directories: a libfuse 3.14 low-level
 * filesystem whose root holds N files of 64 bytes (e000000, e000001, ...)
 * that it only lists (READDIRPLUS), looks up and unlinks, keeping nothing
 * but one byte per name.  `ls -l` and `rm` of an omnifs edge are measured
 * against it in the same run: what no FUSE filesystem can go below, as
 * each unlink is one request to the daemon and back.
 * Usage: edgefs MOUNTPOINT N  (runs in the foreground)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fuse_lowlevel.h>

#include "minfuse.h"

static long nfiles;
static unsigned char *gone;     /* gone[i]: e<i> was unlinked */

/* The index of a name that is one of ours and still there, or -1. */
static long name_index(fuse_ino_t parent, const char *name)
{
	char *end;
	long i;

	if (parent != 1 || name[0] != 'e' || !name[1])
		return -1;
	i = strtol(name + 1, &end, 10);
	return *end || i < 0 || i >= nfiles || gone[i] ? -1 : i;
}

static void fill(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = ino == 1 ? S_IFDIR | 0755 : S_IFREG | 0644;
	st->st_nlink = 1;
	st->st_size = ino == 1 ? 0 : 64;
}

static void entry(long i, struct fuse_entry_param *e)
{
	*e = (struct fuse_entry_param){ .ino = (fuse_ino_t)i + 2, .attr_timeout = 60,
					.entry_timeout = 60 };
	fill(e->ino, &e->attr);
}

static void e_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	long i = name_index(parent, name);

	if (i < 0)
		return (void)fuse_reply_err(req, ENOENT);
	entry(i, &e);
	fuse_reply_entry(req, &e);
}

static void e_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	fill(ino, &st);
	fuse_reply_attr(req, &st, 60);
}

static void e_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			  struct fuse_file_info *fi)
{
	char *buf = malloc(size), name[32];
	size_t used = 0;

	(void)fi;
	if (!buf || ino != 1)
		return (void)(free(buf), fuse_reply_err(req, buf ? ENOTDIR : ENOMEM));
	for (long i = off; i < nfiles; i++) {
		struct fuse_entry_param e;
		if (gone[i])
			continue;
		snprintf(name, sizeof(name), "e%06ld", i);
		entry(i, &e);
		size_t n = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, i + 1);
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void e_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	long i = name_index(parent, name);

	if (i >= 0)
		gone[i] = 1;
	fuse_reply_err(req, i < 0 ? ENOENT : 0);
}

/* Always READDIRPLUS, as omnifs's listings: one request per buffer of
 * names with their attributes, and no LOOKUP per name after it. */
static void e_init(void *data, struct fuse_conn_info *conn)
{
	(void)data;
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
}

static const struct fuse_lowlevel_ops ops = {
	.init = e_init, .lookup = e_lookup, .getattr = e_getattr, .readdirplus = e_readdirplus,
	.unlink = e_unlink,
};

int main(int argc, char **argv)
{
	char *av[] = { argv[0], "-ofsname=edgefs", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(2, av);
	int rc;

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		return printf("usage: edgefs MOUNTPOINT N\n"), 0;
	if (argc != 3 || (nfiles = atol(argv[2])) <= 0)
		return fprintf(stderr, "usage: edgefs MOUNTPOINT N\n"), 2;
	if (!(gone = calloc((size_t)nfiles, 1)))
		return perror("edgefs"), 1;
	rc = minfuse_run(&args, &ops, sizeof(ops), argv[1]);
	free(gone);
	return rc;
}
