/* direct.h - the same-node hand-over ioctls: a process on the owner's node
 * copies an object's bytes itself, with process_vm_readv(2)/writev(2),
 * instead of one FUSE request per MiB and two kernel copies (README,
 * "Same-node hand-over").  This is an ABI: contrib/python/omnifs spells
 * the same layout, and it only ever grows at the end.
 *
 * OMNIFS_IOC_WHERE, on a descriptor opened for reading: where the bytes of
 * a complete local object are.  Once answered, the open counts as a
 * complete read when it is closed, as a read to the end would.
 * OMNIFS_IOC_PLACE, on a new object's writer descriptor before any write:
 * makes the object `size` bytes long and says where they go; the writer
 * must then fill every byte (process_vm_writev, or pwrite on fallback)
 * before its close publishes them.  Its flags (in) may say
 * OMNIFS_PLACE_SOLE: the caller never duplicates the descriptor (dup,
 * fork), so its close is the writer's last, and the daemon need not look
 * through the caller's descriptors for another one (/proc/PID/fd: some
 * 3 us a descriptor, 0.3 ms for a GPU worker's hundred).  Other flags:
 * EINVAL.
 *
 * Both are answered only to root and to the daemon's own user (who could
 * read and write the daemon's memory anyway): EPERM for others.  pid is
 * the daemon's in its own pid namespace; a caller in another one would
 * find some other process there, so the word at cookie_addr holds cookie:
 * read it first, and trust nothing else on a mismatch.
 */
#ifndef OMNI_DIRECT_H
#define OMNI_DIRECT_H

#include <linux/ioctl.h>
#include <stdint.h>

#define OMNIFS_DIRECT_MAGIC 0x524d444fu        /* "ODMR" little-endian */
#define OMNIFS_DIRECT_EXT 60                    /* keeps the struct < 1 KiB */

struct omnifs_direct {
	uint32_t magic, pid;
	uint64_t size;          /* PLACE: in; both: the object's size out */
	uint64_t xxh3;          /* WHERE: the published object's; PLACE: 0 */
	uint64_t cookie_addr, cookie;
	uint32_t n, flags;      /* extents used; PLACE: OMNIFS_PLACE_SOLE or 0 in;
				 * WHERE_SOON: OMNIFS_WHERE_LANDING or 0 out */
	struct { uint64_t addr, len; } ext[OMNIFS_DIRECT_EXT];
};

#define OMNIFS_PLACE_SOLE 1u

#define OMNIFS_IOC_WHERE _IOR('O', 0x10, struct omnifs_direct)
#define OMNIFS_IOC_PLACE _IOWR('O', 0x11, struct omnifs_direct)

/* OMNIFS_IOC_WHERE_SOON, on a descriptor opened for reading: WHERE's
 * answer, given at once for another node's object whose bytes are still
 * being pulled into this node's pool, with OMNIFS_WHERE_LANDING in flags.
 * The caller then asks OMNIFS_IOC_LANDED before it copies a range, and
 * copies the first bytes while the last ones are still on the wire,
 * instead of after them (a cross-node get's copy out was a third of its
 * time).  Without the flag the answer is WHERE's in every way.  A pull
 * that fails makes LANDED fail with EIO: the bytes copied so far are
 * worth nothing.
 *
 * OMNIFS_IOC_LANDED, after WHERE_SOON: in, upto; it waits until the
 * object's first upto bytes are here and checked, and answers how many
 * are (upto or more; the object's size once all are).  Once all are, the
 * open counts as a complete read when it is closed.  EINVAL past the
 * object's size. */
#define OMNIFS_WHERE_LANDING 1u
#define OMNIFS_IOC_WHERE_SOON _IOR('O', 0x19, struct omnifs_direct)
#define OMNIFS_IOC_LANDED _IOWR('O', 0x1a, uint64_t)

/* OMNIFS_IOC_WINDOW, on a descriptor opened for reading of another node's
 * object that streams (larger than 65 MiB: README, "A cluster"): in, off
 * and len; it waits until len bytes from off on (at least 1; fewer where
 * their 2 MiB piece ends first) have landed in the reader's window and
 * been checked, and answers how many lie there in a row (len: up to the
 * end of their piece; 0 at the end), where (pool_off: an offset in
 * OMNIFS_IOC_SHARE's file) and the object's size.  The caller copies them
 * itself, instead of a FUSE read per MiB and a kernel copy.  They stay
 * until the descriptor's next WINDOW (one caller at a time: it moves the
 * window on) or its close; meanwhile a read(2) of it fails with EBUSY.
 * Counted as a read of those bytes (all of them: a complete read).
 * EOPNOTSUPP for any other object, or a pool that is not host memory; EIO
 * once a pull of the range failed (the bytes copied so far are worth
 * nothing); EINVAL past the end.  Root and the daemon's user only, as
 * SHARE. */
struct omnifs_window {
	uint64_t off;           /* in */
	uint64_t len;           /* in: the least wanted; out: how many */
	uint64_t pool_off, size;        /* out */
};

#define OMNIFS_IOC_WINDOW _IOWR('O', 0x1b, struct omnifs_window)

/* OMNIFS_IOC_PLACED, on a placed writer's descriptor, as its copy goes:
 * the object's first `upto` bytes are in and final.  The daemon hashes
 * them while the writer copies the rest, so that its close does not wait
 * for a pass over all of it (optional: the close hashes what was not
 * said).  Bytes changed after they were said to be final may leave the
 * object a checksum its bytes fail, and its readers on other nodes an EIO.
 * EINVAL beyond the object's size or on a descriptor that did not PLACE. */
#define OMNIFS_IOC_PLACED _IOW('O', 0x15, uint64_t)

/* OMNIFS_IOC_SHARE, on any object's descriptor: the pool's memory as a
 * file that a process of this node maps once (/proc/PID/fd/FD, MAP_SHARED)
 * to copy the bytes of WHERE's and PLACE's answers itself, with memcpy:
 * one copy at memory speed, where process_vm_readv(2) and writev(2) move
 * a page at a time.  Their addresses less base are offsets in the file;
 * the pool is [0, size) of it, and the 8 bytes at offset size hold cookie,
 * the same as WHERE's: read them through the mapping first, and trust
 * nothing else on a mismatch.  The file is sealed at its size.  Root and
 * the daemon's user only (they could open it anyway); EOPNOTSUPP for a
 * pool that is not such a file (device memory, no memfd), a view or an
 * .omni file. */
#define OMNIFS_SHARE_MAGIC 0x5248534fu         /* "OSHR" little-endian */

struct omnifs_share {
	uint32_t magic, pid;
	int32_t fd;             /* the daemon's descriptor of the file */
	uint32_t flags;         /* 0 */
	uint64_t base;          /* the daemon's address of its offset 0 */
	uint64_t size;          /* the pool's bytes; the cookie follows */
	uint64_t cookie;
};

#define OMNIFS_IOC_SHARE _IOR('O', 0x17, struct omnifs_share)

/* OMNIFS_IOC_CUDA, on a descriptor opened for reading, where the pool is
 * a GPU's memory (pool=cuda:DEV:SIZE): the pool's CUDA IPC handle, which
 * a process of this node opens once (cuIpcOpenMemHandle), and where in
 * the pool the object's bytes lie, for it to copy them device to device.
 * Once answered, the open counts as a complete read when it is closed.
 * Root and the daemon's user only: the handle reaches the whole pool.
 * EOPNOTSUPP for a pool of another kind (WHERE is for those), a view or
 * an .omni file; EREMOTE while the bytes are not all on this node. */
#define OMNIFS_CUDA_MAGIC 0x4155434fu          /* "OCUA" little-endian */

struct omnifs_cuda {
	uint32_t magic, dev;    /* dev: the pool's GPU */
	uint64_t size, xxh3;    /* the published object's */
	uint8_t handle[64];     /* CUipcMemHandle of the whole pool */
	uint32_t n, flags;      /* extents used; CUDA_PLACE: OMNIFS_PLACE_SOLE or 0 in */
	struct { uint64_t off, len; } ext[OMNIFS_DIRECT_EXT];  /* offsets into the pool */
};

#define OMNIFS_IOC_CUDA _IOR('O', 0x14, struct omnifs_cuda)

/* OMNIFS_IOC_CUDA_PLACE, on a new object's writer descriptor before any
 * write, where the pool is a GPU's memory: PLACE's twin.  In: size; out:
 * the pool's GPU and IPC handle, and where in the pool the object's bytes
 * go.  The writer fills every byte (device to device from its own GPU
 * memory, or pwrite), waits for its copies (cuCtxSynchronize), and its
 * close publishes them, hashed from the device.  Flags as PLACE's.
 * EOPNOTSUPP for a pool of another kind (PLACE is for those); EBUSY once
 * written to; root and the daemon's user only. */
#define OMNIFS_IOC_CUDA_PLACE _IOWR('O', 0x16, struct omnifs_cuda)

/* OMNIFS_IOC_PUT and OMNIFS_IOC_GET, on a descriptor of an edge directory
 * (open(2) of <mnt>/<from>/<to>, O_RDONLY): a small object created and
 * published, or waited for, read whole and closed, in one request instead
 * of the five or four that open, write or read, and close take (README,
 * "Small objects").  They mean what those calls mean: PUT is an
 * O_CREAT|O_EXCL create, GET a plain open that waits and a read to the
 * end.  Open to every user, as those calls are.
 *
 * The argument is the header, the key's bytes, then (PUT) the object's;
 * its size, header included, is the command's size field (at most
 * OMNIFS_SMALL_MAX): OMNIFS_IOC_PUT(n), OMNIFS_IOC_GET(n).  GET answers
 * the header then the object's bytes in the same buffer; it fails, having
 * consumed nothing, with E2BIG for an object larger than the buffer's
 * room after the header, EREMOTE for one whose bytes are on another node
 * and larger than what announces carry, EOPNOTSUPP for a view or a pool
 * a memcpy cannot read: open and read those instead. */
#define OMNIFS_SMALL_MAGIC 0x4c4d534fu         /* "OSML" little-endian */

struct omnifs_small {
	uint32_t magic;
	uint32_t key_len;       /* bytes of key after the header, no NUL */
	uint64_t size;          /* PUT: the bytes after the key; GET: out */
	int64_t readers;        /* PUT: as user.omni.readers; -1: the edge's */
	int64_t wait_ms;        /* GET: how long to wait; 0: the edge's */
	uint64_t xxh3;          /* GET: out, the published object's */
};

#define OMNIFS_SMALL_MAX _IOC_SIZEMASK         /* 16383 */
#define OMNIFS_IOC_PUT(n) _IOC(_IOC_WRITE, 'O', 0x12, (n))
#define OMNIFS_IOC_GET(n) _IOC(_IOC_READ | _IOC_WRITE, 'O', 0x13, (n))

/* OMNIFS_IOC_CLEANUP, on a descriptor of any directory of the mount: rm
 * of every object of one request, on every node, in one round trip to
 * the peers (README, "Cleaning up a request"): the keys that are the id,
 * or the id followed by '_' or '.' and more, or vllm-omni's
 * omni_<from>_to_<to>_kv_cache_<id>; published, or being written (their
 * writers' next write fails with ENOENT).  Open to every user, as rm is.
 *
 * The argument is the header then the id's bytes (a valid key), its size
 * the command's size field; the answer is the header, with removed (how
 * many objects went, on all nodes) and missed (peers that could not be
 * told, down or silent: their objects stay).  EINVAL or ENAMETOOLONG for
 * an id that is no key, having removed nothing. */
#define OMNIFS_CLEANUP_MAGIC 0x4e4c434fu       /* "OCLN" little-endian */

struct omnifs_cleanup {
	uint32_t magic;
	uint32_t id_len;        /* bytes of id after the header, no NUL */
	uint64_t removed;       /* out */
	uint64_t missed;        /* out */
};

#define OMNIFS_IOC_CLEANUP(n) _IOC(_IOC_READ | _IOC_WRITE, 'O', 0x18, (n))

/* OMNIFS_IOC_UNWAIT, on a descriptor of an edge directory: the GETs that
 * wait through this open directory (this open file description: its
 * dups, and a fork's copies, share it) fail with ECANCELED, and so does
 * every GET through it from now on, at once; its PUTs are untouched.  The
 * answer (ioctl's return value) is how many waits it ended.  A closing
 * Mount ends its own threads' waits so (README, "Small objects"): a
 * thread blocked in a syscall can be woken by nothing else.  ENOTTY on
 * any other directory. */
#define OMNIFS_IOC_UNWAIT _IO('O', 0x1c)

#endif
