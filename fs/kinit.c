/* kinit.c - FUSE_DIRECT_IO_ALLOW_MMAP with a libfuse that cannot ask for
 * it (kinit.h says why).
 *
 * The kernel sends FUSE_INIT before anything else and waits for its
 * answer, so the first request a session reads is INIT (by read(2): libfuse
 * splices only once INIT has agreed to), and the answer that carries its
 * unique is INIT's.  Both are laid out by the kernel's ABI
 * (<linux/fuse.h>): a header, then struct fuse_init_in or fuse_init_out.
 * flags2 counts only with FUSE_INIT_EXT in flags; the kernel sets that in
 * its request when it reads flags2, and offers the flag there when it
 * knows it.  The bit is set only then, so an older kernel hears what
 * libfuse said and nothing else.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/fuse.h>
#include "kinit.h"

#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP
int kinit_allow_mmap(struct fuse_session *se)
{
	(void)se;                       /* op_init asks libfuse for it */
	return 0;
}
#else
#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#endif
#define ALLOW_MMAP_2 ((uint32_t)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32))   /* in flags2 */

static atomic_int init_read;            /* the first request was looked at */
static _Atomic uint64_t init_unique;    /* INIT's, while its answer is owed
					 * and the kernel offered the flag */

/* The first request: INIT, from a kernel that offers the flag? */
static void look_at_init(const void *buf, ssize_t n)
{
	const struct fuse_in_header *in = buf;
	const struct fuse_init_in *arg = (const void *)(in + 1);

	if (n < (ssize_t)(sizeof(*in) + offsetof(struct fuse_init_in, flags2) +
			  sizeof(arg->flags2)) || in->opcode != FUSE_INIT)
		return;
	if ((arg->flags & FUSE_INIT_EXT) && (arg->flags2 & ALLOW_MMAP_2))
		atomic_store(&init_unique, in->unique);
}

static ssize_t kinit_read(int fd, void *buf, size_t len, void *userdata)
{
	(void)userdata;
	ssize_t n = read(fd, buf, len);

	if (n > 0 && !atomic_load_explicit(&init_read, memory_order_relaxed) &&
	    !atomic_exchange(&init_read, 1))
		look_at_init(buf, n);
	return n;
}

/* INIT's answer, as libfuse sends it: the header, then fuse_init_out. */
static void allow_mmap(struct iovec *iov, int count)
{
	struct fuse_out_header *hd = iov[0].iov_base;

	if (count < 2 || iov[0].iov_len < sizeof(*hd) || hd->error ||
	    hd->unique != atomic_load(&init_unique) ||
	    iov[1].iov_len < offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t))
		return;
	struct fuse_init_out *out = iov[1].iov_base;

	out->flags |= FUSE_INIT_EXT;
	out->flags2 |= ALLOW_MMAP_2;
	atomic_store(&init_unique, 0);
}

static ssize_t kinit_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	if (atomic_load_explicit(&init_unique, memory_order_relaxed))
		allow_mmap(iov, count);
	return writev(fd, iov, count);
}

int kinit_allow_mmap(struct fuse_session *se)
{
	static const struct fuse_custom_io io = { .read = kinit_read,
						  .writev = kinit_writev };

	return fuse_session_custom_io(se, &io, fuse_session_fd(se)) ? -EIO : 0;
}
#endif
