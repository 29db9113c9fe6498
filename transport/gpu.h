/* gpu.h - the NVIDIA driver, loaded when a pool asks for it.
 *
 * omnifs links no CUDA library, so that one binary runs on machines with
 * and without a GPU.  A pool that needs CUDA (pinned or device memory)
 * opens the driver library that every NVIDIA driver installs,
 * libcuda.so.1, with dlopen, and takes the few entry points it uses.  The
 * toolkit's cuda.h gives their types at build time; a build without it
 * answers every open with the reason.
 *
 * Every call makes the device's primary context current on the calling
 * thread first: the pool is made on one thread and given back on another.
 */
#ifndef OMNI_GPU_H
#define OMNI_GPU_H

#include <stddef.h>
#include <stdint.h>

struct gpu;

/* Loads the driver and retains device dev's primary context.  0, or
 * -ENODEV / -ENOTSUP / -EIO with a one-line reason in err: no driver,
 * a stub driver, no such device, a build without CUDA. */
int gpu_open(int dev, struct gpu **out, char *err, size_t errlen);
void gpu_close(struct gpu *c);

/* Page-locks host memory [p, p + len) for every CUDA context (portable,
 * mapped): copies between it and any device then run at DMA speed.
 * 0 or -errno with err. */
int gpu_host_register(struct gpu *c, void *p, size_t len, char *err, size_t errlen);
void gpu_host_unregister(struct gpu *c, void *p);

/* Device memory: len bytes of the device, at *dptr (a device address,
 * not one the CPU can touch).  0 or -errno with err. */
int gpu_dev_alloc(struct gpu *c, size_t len, uint64_t *dptr, char *err, size_t errlen);
void gpu_dev_free(struct gpu *c, uint64_t dptr);
/* Page-locked host memory of len bytes at *out, which the GPU copies to
 * and from at DMA speed (a bounce buffer).  0 or -ENOMEM. */
int gpu_host_alloc(struct gpu *c, size_t len, void **out);
void gpu_host_free(struct gpu *c, void *p);

/* Makes the ring that gpu_to_dev() stages through (it needs one): a few
 * page-locked MiB and a stream, so that the CPU fills one slot while the
 * DMA engine empties another.  0 or -errno with err. */
int gpu_ring_start(struct gpu *c, char *err, size_t errlen);

/* Copies between host and device memory, and zeros.  gpu_to_dev() may
 * return before the device has the bytes (src is free again at once):
 * the copies below and gpu_from_dev() see them, other processes after
 * gpu_sync().  The others are complete when they return.  0, or -EIO
 * (a failed queued copy fails the next gpu_sync()). */
int gpu_to_dev(struct gpu *c, uint64_t dptr, const void *src, size_t len);
int gpu_from_dev(struct gpu *c, void *dst, uint64_t dptr, size_t len);
int gpu_dev_zero(struct gpu *c, uint64_t dptr, size_t len);
/* The XXH3 sums (xxh3_block.h) of the n 1 KiB blocks at dptr (8-byte
 * aligned), taken by the GPU, into out (host memory, page-locked for
 * speed): n * 8 words.  n at most GPU_XXH3_MAX; after the copies to the
 * device queued before it.  0, -EINVAL, -EIO, or -ENOTSUP where this
 * build or driver has no kernel for it (the caller sums on the CPU). */
#define GPU_XXH3_MAX 32768
int gpu_xxh3_sums(struct gpu *c, uint64_t dptr, uint64_t n, uint64_t *out);
/* Copies [dptr, dptr + len) out a piece of at most half bytes at a time
 * into the halves of buf (page-locked, 2 * half bytes) in turn, and calls
 * fn on each piece in order while the DMA engine copies the next into the
 * other half: the CPU's work on the bytes and their copy overlap.  Copies
 * to the device queued before it are in what it gives.  fn's nonzero
 * return stops it and is returned; else 0 or -EIO.  buf is free again
 * when it returns. */
int gpu_from_dev_each(struct gpu *c, uint64_t dptr, uint64_t len, uint8_t *buf, size_t half,
		      int (*fn)(void *arg, const uint8_t *p, size_t n), void *arg);
/* Waits until every copy to the device is done for every other user of
 * its memory too (another process through an IPC handle).  0 or -EIO. */
int gpu_sync(struct gpu *c);
/* The IPC handle of the allocation at dptr (GPU_IPC_BYTES opaque bytes)
 * that another process on this machine opens with cuIpcOpenMemHandle. */
#define GPU_IPC_BYTES 64
int gpu_ipc_handle(struct gpu *c, uint64_t dptr, unsigned char out[GPU_IPC_BYTES],
		   char *err, size_t errlen);
/* A dmabuf of the device memory [dptr, dptr + len) (both page-aligned),
 * for an RDMA device to register (GPUDirect RDMA): its descriptor in *fd,
 * the caller's to close.  Synchronous copies to and from the range are
 * ordered with the device's accesses from then on.  0, or -ENOTSUP (a
 * driver before 515, a GPU or kernel module that exports no dmabuf) or
 * -EIO, with the reason in err. */
int gpu_dmabuf(struct gpu *c, uint64_t dptr, size_t len, int *fd, char *err, size_t errlen);

#endif
