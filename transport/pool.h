/* pool.h - the node's memory pool: one region, sub-allocated in extents.
 *
 * The region is allocated once at start (page-aligned, pre-faulted, locked
 * where the limit allows) so that it can be registered with an RDMA device
 * once and so that no object ever pays for page faults; a thread of idle
 * priority then makes each page's first touches (pool.c says why).
 * Objects take extents of it; an extent can grow in place when the space
 * after it is free, which keeps a sequentially written object in one or
 * very few extents.
 *
 * All functions are thread-safe.  Offsets are byte offsets into the region.
 */
#ifndef OMNI_POOL_H
#define OMNI_POOL_H

#include <stddef.h>
#include <stdint.h>

#define POOL_GRAIN 4096u        /* allocation unit, bytes */

enum pool_kind { POOL_HOST, POOL_PINNED, POOL_CUDA };

struct pool_spec {
	enum pool_kind kind;
	int dev;                /* CUDA device, for POOL_CUDA */
	uint64_t size;          /* bytes */
};

struct pool_usage {
	uint64_t size, used, free, largest_free;
	unsigned fragments;     /* free fragments */
	int locked;             /* 1 if mlock() succeeded */
	int shared;             /* 1 if a file other processes map (pool_share) */
	int huge;               /* 1 if most of it is mapped with huge pages (warming may make them) */
	int warming;            /* 1 while its pages' first touches are being made */
};

struct pool;

/* Parses "host:SIZE", "pinned:SIZE" or "cuda:DEV:SIZE".  0 or -EINVAL. */
int pool_spec_parse(const char *s, struct pool_spec *spec);
/* Writes the spec back in the form pool_spec_parse() reads. */
void pool_spec_format(const struct pool_spec *spec, char *buf, size_t len);
const char *pool_kind_name(enum pool_kind kind);

/* Creates the pool.  On failure returns -errno and puts a one-line reason,
 * naming the option, in err: -ENODEV for a pinned or device pool on a
 * machine without the NVIDIA driver or that device, -ENOTSUP for one that
 * this build or this version cannot make. */
int pool_create(struct pool **out, const struct pool_spec *spec,
		char *err, size_t errlen);
void pool_destroy(struct pool *p);

/* The CPU's address of the pool's bytes, where pool_cpu() says there is
 * one (host, pinned); device memory is reached only by the copies below. */
void *pool_base(const struct pool *p);
int pool_cpu(const struct pool *p);
/* Where the pool's host memory is a file (a memfd) that another process of
 * this node may map to copy in and out itself: its descriptor, with the
 * pool's bytes at offset 0, and the pool's own address of the page that
 * follows them in it (offset pool size), for the owner to write a label
 * that a mapper checks.  -EOPNOTSUPP for device memory and where the kernel
 * gave no memfd. */
int pool_share(const struct pool *p, int *fd, void **label);
enum pool_kind pool_kind_of(const struct pool *p);

/* Copies into and out of [off, off + len) of the pool, and zeros it, for
 * every kind: the host copies, the GPU by its DMA engines.  0 or -EIO. */
int pool_write(struct pool *p, uint64_t off, const void *src, size_t len);
int pool_read(struct pool *p, uint64_t off, void *dst, size_t len);
int pool_zero(struct pool *p, uint64_t off, size_t len);
/* Calls fn on [off, off + len) of the pool, in order, in memory the CPU
 * reads: the pool itself where it is host memory (one call); else this
 * thread's bounce (below), a half at a time, the device copying the next
 * piece out while fn takes this one.  fn's nonzero return stops it and is
 * returned; else 0, -ENOMEM or -EIO. */
typedef int pool_piece_fn(void *arg, const uint8_t *p, size_t n);
int pool_each(struct pool *p, uint64_t off, uint64_t len, pool_piece_fn *fn, void *arg);
/* The XXH3 sums (xxh3sum.h) of the n 1 KiB blocks at off, taken where
 * the bytes are, in this thread's bounce (below) at *sums: n * 8 words.
 * n at most POOL_SUMS_MAX.  -ENOTSUP where the CPU is the place (host
 * memory), or the GPU has no kernel for it: the caller hashes the bytes
 * itself.  0, -EINVAL (off not 8-byte aligned), -ENOMEM or -EIO. */
#define POOL_SUMS_MAX (POOL_BOUNCE / 64)
int pool_xxh3_sums(struct pool *p, uint64_t off, uint64_t n, const uint64_t **sums);
/* This thread's host buffer of POOL_BOUNCE bytes, the one this pool's
 * copies fill and empty fastest (page-locked for a GPU's memory), for a
 * pool the CPU cannot address.  Valid while the thread and the pool
 * live; NULL when out of memory. */
#define POOL_BOUNCE (2u << 20)
void *pool_bounce(struct pool *p);
/* Waits until the device holds what was written, for every process that
 * maps it (before an object is published).  0 or -EIO. */
int pool_sync(struct pool *p);
/* A device pool's GPU and the IPC handle that maps the whole pool into
 * another process of this node (cuIpcOpenMemHandle); -ENOTSUP else. */
#define POOL_IPC_BYTES 64
int pool_ipc(const struct pool *p, int *dev, unsigned char handle[POOL_IPC_BYTES]);
/* A device pool's memory as a dmabuf, for an RDMA device to register
 * (GPUDirect RDMA): its descriptor in *fd (the caller's to close), whose
 * offset 0 is the pool's offset 0, and in *addr the device address that
 * offset 0 has.  -ENOTSUP with the reason in err for host memory and
 * where the driver or GPU exports none; -EIO. */
int pool_dmabuf(const struct pool *p, int *fd, uint64_t *addr, char *err, size_t errlen);
void pool_usage(struct pool *p, struct pool_usage *u);

/* Allocates one extent of at least min and at most want bytes (both rounded
 * up to POOL_GRAIN), preferring a fragment that holds all of want.
 * Returns 0 with *off and *got set, or -ENOSPC. */
int pool_alloc(struct pool *p, uint64_t min, uint64_t want,
	       uint64_t *off, uint64_t *got);
/* Grows the extent [off, off+len) in place by at least min and at most want
 * bytes if the space right after it is free.  0 with *got set, or -ENOSPC. */
int pool_grow(struct pool *p, uint64_t off, uint64_t len, uint64_t min,
	      uint64_t want, uint64_t *got);
/* Returns [off, off+len) to the pool.  len is rounded up to POOL_GRAIN. */
void pool_free(struct pool *p, uint64_t off, uint64_t len);

/* Parses a SIZE: a number with an optional K, M, G or T (powers of 1024),
 * optionally followed by "iB".  0 or -EINVAL (also on overflow or 0). */
int parse_size(const char *s, uint64_t *out);

#endif
