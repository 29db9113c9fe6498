/* ceilingfs - the FUSE ceiling: the least a libfuse 3.14 low-level
 * filesystem can do to store one file in memory and give it back, with the
 * best settings it allows (direct_io, 1 MiB requests, multithreaded, its
 * memory pre-faulted before anything is timed).  omnifs is measured
 * against it.  Usage: ceilingfs MOUNTPOINT SIZE_MIB  (runs in the foreground)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fuse_lowlevel.h>

#include "minfuse.h"

static char *mem;
static size_t cap, len;

static void fill(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = ino == 1 ? S_IFDIR | 0755 : S_IFREG | 0644;
	st->st_nlink = 1;
	st->st_size = ino == 1 ? 0 : (off_t)len;
}

static void c_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = { .ino = 2, .attr_timeout = 60, .entry_timeout = 60 };
	if (parent != 1 || strcmp(name, "f"))
		return (void)fuse_reply_err(req, ENOENT);
	fill(2, &e.attr);
	fuse_reply_entry(req, &e);
}

static void c_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	(void)fi;
	fill(ino, &st);
	fuse_reply_attr(req, &st, 60);
}

static void c_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *a, int set,
		      struct fuse_file_info *fi)
{
	if (set & FUSE_SET_ATTR_SIZE)
		len = (size_t)a->st_size;
	c_getattr(req, ino, fi);
}

static void c_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	if (fi->flags & O_TRUNC)
		len = 0;
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

static void c_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t m,
		     struct fuse_file_info *fi)
{
	struct fuse_entry_param e = { .ino = 2, .attr_timeout = 60, .entry_timeout = 60 };
	(void)parent; (void)name; (void)m;
	len = 0;
	fill(2, &e.attr);
	fi->direct_io = 1;
	fuse_reply_create(req, &e, fi);
}

static void c_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	(void)ino; (void)fi;
	size_t o = (size_t)off < len ? (size_t)off : len;
	fuse_reply_buf(req, mem + o, size < len - o ? size : len - o);
}

static void c_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		    off_t off, struct fuse_file_info *fi)
{
	(void)ino; (void)fi;
	if ((size_t)off + size > cap)
		return (void)fuse_reply_err(req, ENOSPC);
	memcpy(mem + off, buf, size);
	if ((size_t)off + size > len)
		len = (size_t)off + size;
	fuse_reply_write(req, size);
}

static void c_init(void *d, struct fuse_conn_info *conn)
{
	(void)d;
	conn->max_write = conn->max_read = 1u << 20;
	conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
}

static const struct fuse_lowlevel_ops ops = {
	.init = c_init, .lookup = c_lookup, .getattr = c_getattr, .setattr = c_setattr,
	.open = c_open, .create = c_create, .read = c_read, .write = c_write,
};

int main(int argc, char **argv)
{
	char *av[] = { argv[0], "-omax_read=1048576,fsname=ceilingfs", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(2, av);

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		return printf("usage: ceilingfs MOUNTPOINT SIZE_MIB\n"), 0;
	if (argc != 3)
		return fprintf(stderr, "usage: ceilingfs MOUNTPOINT SIZE_MIB\n"), 2;
	cap = (size_t)atol(argv[2]) << 20;
	mem = mmap(NULL, cap, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (mem == MAP_FAILED)
		return perror("mmap"), 1;
	return minfuse_run(&args, &ops, sizeof(ops), argv[1]);
}
