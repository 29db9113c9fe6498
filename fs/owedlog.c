/* owedlog.c - the messages this node owes its peers, kept in a file
 * (owedlog.h says why).
 *
 * The file: "OMNIOWE1", the cluster's tag (8 bytes), then records, each
 * its length (4 bytes), the XXH3 of what follows it (8), the peer's name
 * (a length byte, then the name), the message type (1) and the message's
 * body as it goes on the wire (transport/proto.c encodes and checks it).
 * Host byte order: the file never leaves the node.  A record cut short by
 * a crash in an append fails its hash; it and what follows are dropped.
 * No open follows a symbolic link: in a state_dir others may write to, a
 * planted one would make the daemon truncate what it points at.
 */
#define _GNU_SOURCE
#include "owedlog.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static const char magic[8] = "OMNIOWE1";

#define REC_BODY_MAX 4096               /* a CLEANUP, CONSUMED or REMOVE fits */
#define FILE_MAX     (64u << 20)        /* what the file may hold, read back */

struct owedlog {
	char path[PATH_MAX], tmp[PATH_MAX];
	uint64_t tag;
	int fd;                         /* the file (or the rewrite), or -1 */
	unsigned long records;          /* in it */
};

static int write_all(int fd, const void *buf, size_t len)
{
	for (const char *p = buf; len;) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* A new file at path with its header; the descriptor, or -errno. */
static int file_new(struct owedlog *l, const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	int rc;

	if (fd < 0)
		return -errno;
	if ((rc = write_all(fd, magic, sizeof(magic))) ||
	    (rc = write_all(fd, &l->tag, sizeof(l->tag)))) {
		close(fd);
		unlink(path);
		return rc;
	}
	return fd;
}

int owedlog_add(struct owedlog *l, const char *peer, const struct proto_msg *m)
{
	uint8_t rec[4 + 8 + 1 + 255 + 1 + REC_BODY_MAX];
	size_t plen = strlen(peer), n = 4 + 8;
	int len, fd;

	if (plen > 255)
		return -ENAMETOOLONG;
	rec[n++] = (uint8_t)plen;
	memcpy(rec + n, peer, plen);
	n += plen;
	rec[n++] = (uint8_t)m->type;
	if ((len = proto_encode(m, rec + n, REC_BODY_MAX)) < 0)
		return len;
	n += (size_t)len;
	uint32_t reclen = (uint32_t)(n - 4);
	uint64_t h = XXH3_64bits(rec + 12, n - 12);
	memcpy(rec, &reclen, 4);
	memcpy(rec + 4, &h, 8);
	if (l->fd < 0) {                /* the first since the file was emptied */
		if ((fd = file_new(l, l->path)) < 0)
			return fd;
		l->fd = fd;
	}
	int rc = write_all(l->fd, rec, n);
	if (!rc)
		l->records++;
	return rc;
}

int owedlog_begin(struct owedlog *l)
{
	int fd = file_new(l, l->tmp);

	if (fd < 0)
		return fd;
	if (l->fd >= 0)
		close(l->fd);
	l->fd = fd;
	l->records = 0;
	return 0;
}

int owedlog_end(struct owedlog *l, int failed)
{
	int rc = failed;

	if (!rc && !l->records) {       /* nothing owed: no file */
		close(l->fd);
		l->fd = -1;
		unlink(l->tmp);
		if (unlink(l->path) && errno != ENOENT)
			rc = -errno;
		return rc;
	}
	if (!rc && (fsync(l->fd) || rename(l->tmp, l->path)))
		rc = -errno;
	if (rc) {       /* the old file stays, and appends go on at its end */
		close(l->fd);
		unlink(l->tmp);
		l->fd = open(l->path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
		l->records = 1;         /* unknown: a later rewrite tries again */
	}
	return rc;
}

unsigned long owedlog_records(const struct owedlog *l)
{
	return l->records;
}

/* Reads the whole file into *buf; 0 with *len 0 when there is none. */
static int file_read(const char *path, uint8_t **buf, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	size_t got = 0;
	int rc = 0;

	*buf = NULL;
	*len = 0;
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st))
		rc = -errno;
	else if (!S_ISREG(st.st_mode) || st.st_size > FILE_MAX)
		rc = -EFBIG;
	else if (st.st_size && !(*buf = malloc((size_t)st.st_size)))
		rc = -ENOMEM;
	while (!rc && got < (size_t)st.st_size) {
		ssize_t r = read(fd, *buf + got, (size_t)st.st_size - got);
		if (r > 0)
			got += (size_t)r;
		else
			rc = r < 0 ? -errno : -EIO;     /* shrank under us */
	}
	close(fd);
	if (rc) {
		free(*buf);
		*buf = NULL;
	} else {
		*len = (size_t)st.st_size;
	}
	return rc;
}

/* Hands the records of buf to fn; how many were whole (the bytes they end
 * at in *good), or -1 for a file of another cluster or no log at all. */
static long records_load(const struct owedlog *l, const uint8_t *buf, size_t len,
			 owedlog_fn fn, void *arg, size_t *good)
{
	long n = 0;
	size_t at = 16;

	if (len < 16 || memcmp(buf, magic, 8) || memcmp(buf + 8, &l->tag, 8))
		return -1;
	while (len - at >= 12) {
		uint32_t reclen;
		uint64_t h;
		memcpy(&reclen, buf + at, 4);
		memcpy(&h, buf + at + 4, 8);
		if (reclen < 10 || reclen > len - at - 4 ||
		    XXH3_64bits(buf + at + 12, reclen - 8) != h)
			break;
		const uint8_t *r = buf + at + 12, *end = buf + at + 4 + reclen;
		char peer[256];
		struct proto_msg m;
		size_t plen = r[0];
		if ((size_t)(end - r) < 2 + plen)
			break;
		memcpy(peer, r + 1, plen);
		peer[plen] = '\0';
		uint8_t type = r[1 + plen];
		const uint8_t *body = r + 2 + plen;
		if ((type == PT_CLEANUP || type == PT_CONSUMED || type == PT_REMOVE) &&
		    !proto_decode(type, body, (size_t)(end - body), &m)) {
			fn(arg, peer, &m);
			proto_msg_free(&m);
		}
		at += 4 + reclen;
		n++;
	}
	if (at != len)
		fprintf(stderr, "omnifs: %s: %zu bytes at its end are torn (a crash in a "
			"write?); the %ld messages before them are kept\n", l->path, len - at, n);
	*good = at;
	return n;
}

int owedlog_open(struct owedlog **out, const char *dir, const char *node,
		 const uint8_t *key, size_t keylen, owedlog_fn fn, void *arg,
		 char *err, size_t errlen)
{
	struct owedlog *l = calloc(1, sizeof(*l));
	uint8_t *buf = NULL;
	size_t len;
	int rc = -ENOMEM;

	if (!l)
		goto fail;
	l->fd = -1;
	l->tag = XXH3_64bits_withSeed(key, keylen, 0x6f776564 /* "owed" */);
	if ((size_t)snprintf(l->path, sizeof(l->path), "%s/%s.owed", dir, node) >= sizeof(l->path) ||
	    (size_t)snprintf(l->tmp, sizeof(l->tmp), "%s/%s.owed.new", dir, node) >= sizeof(l->tmp)) {
		rc = -ENAMETOOLONG;
		goto fail;
	}
	if (mkdir(dir, 0700) && errno != EEXIST) {
		rc = -errno;
		goto fail;
	}
	if ((rc = file_read(l->path, &buf, &len)) == -EFBIG)
		fprintf(stderr, "omnifs: %s is over %u MiB or not a file; it is replaced\n",
			l->path, FILE_MAX >> 20);
	else if (rc)
		goto fail;
	size_t good = 0;
	long n = len ? records_load(l, buf, len, fn, arg, &good) : 0;
	free(buf);
	if (n < 0)              /* the next append starts it anew */
		fprintf(stderr, "omnifs: %s was left by another cluster (another secret) or "
			"is not a log of owed messages; it is replaced\n", l->path);
	/* What it held is owed again (fn), and stays in it until a rewrite
	 * keeps what is still owed then; appends go after its whole records. */
	if (n > 0 && (l->fd = open(l->path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW)) >= 0) {
		if (ftruncate(l->fd, (off_t)good)) {
			close(l->fd);
			l->fd = -1;
		}
		l->records = (unsigned long)n;
	}
	*out = l;
	return 0;
fail:
	snprintf(err, errlen, "option 'state_dir=%s': %s", dir, strerror(-rc));
	free(l);
	return rc;
}

void owedlog_close(struct owedlog *l)
{
	if (!l)
		return;
	if (l->fd >= 0)
		close(l->fd);
	free(l);
}
