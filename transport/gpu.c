/* gpu.c - the NVIDIA driver API, taken from libcuda.so.1 at run time.
 *
 * gpu.h says why it is loaded and not linked.  The entry points are looked
 * up by the names the driver exports: cuda.h maps some of the API's names
 * onto versioned ones (cuMemHostRegister is cuMemHostRegister_v2), and
 * a symbol's old version may behave differently.
 */
#define _GNU_SOURCE
#include "gpu.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef OMNI_CUDA
#include <cuda.h>
#include <dlfcn.h>

#include "xxh3sum.h"

/* The kernel's PTX, as the build made it from gpu_xxh3.cu (a C string),
 * where the toolkit has nvcc; without it, XXH3 sums stay on the CPU. */
#ifdef OMNI_XXH3_PTX
static const char gpu_xxh3_ptx[] =
#include "gpu_xxh3.ptx.h"
	;
#endif

#define GPU_FNS(X)                                                      \
	X(cuInit, "cuInit")                                             \
	X(cuDeviceGetCount, "cuDeviceGetCount")                         \
	X(cuDeviceGet, "cuDeviceGet")                                   \
	X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                 \
	X(cuPointerSetAttribute, "cuPointerSetAttribute")               \
	X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")         \
	X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")    \
	X(cuCtxSetCurrent, "cuCtxSetCurrent")                           \
	X(cuMemHostRegister, "cuMemHostRegister_v2")                    \
	X(cuMemHostUnregister, "cuMemHostUnregister")                   \
	X(cuMemAlloc, "cuMemAlloc_v2")                                  \
	X(cuMemFree, "cuMemFree_v2")                                    \
	X(cuMemcpyDtoH, "cuMemcpyDtoH_v2")                              \
	X(cuMemsetD8, "cuMemsetD8_v2")                                  \
	X(cuCtxSynchronize, "cuCtxSynchronize")                         \
	X(cuStreamSynchronize, "cuStreamSynchronize")                   \
	X(cuIpcGetMemHandle, "cuIpcGetMemHandle")                       \
	X(cuGetErrorName, "cuGetErrorName")                             \
	X(cuMemHostAlloc, "cuMemHostAlloc")                             \
	X(cuMemFreeHost, "cuMemFreeHost")                               \
	X(cuStreamCreate, "cuStreamCreate")                             \
	X(cuStreamDestroy, "cuStreamDestroy_v2")                        \
	X(cuEventCreate, "cuEventCreate")                               \
	X(cuEventDestroy, "cuEventDestroy_v2")                          \
	X(cuEventRecord, "cuEventRecord")                               \
	X(cuEventSynchronize, "cuEventSynchronize")                     \
	X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")                    \
	X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")                    \
	X(cuModuleLoadData, "cuModuleLoadData")                         \
	X(cuModuleGetFunction, "cuModuleGetFunction")                   \
	X(cuModuleUnload, "cuModuleUnload")                             \
	X(cuLaunchKernel, "cuLaunchKernel")

/* The ring that copies to the device go through (gpu_ring_start): each
 * slot is page-locked, so the GPU's DMA engine reads it while the CPU
 * fills the next; its event says when the engine is done with it. */
#define GPU_RING_SLOTS 8
#define GPU_RING_SLOT (1u << 20)

struct gpu_slot {
	pthread_mutex_t lock;   /* held while a thread fills and queues it */
	uint8_t *buf;
	CUevent done;
};

struct gpu {
	void *lib;
	CUdevice dev;
	CUcontext ctx;
	CUstream stream;        /* the ring's copies, in order; NULL: no ring */
	struct gpu_slot ring[GPU_RING_SLOTS];
	atomic_uint next;       /* the slot the next copy takes, modulo */
	/* The XXH3 kernel (gpu_xxh3.cu), made at its first use: */
	pthread_mutex_t xlock;  /* one caller at a time: the sums' buffer */
	int xstate;             /* 0 not tried, 1 made, -ENOTSUP can't be */
	CUmodule xmod;
	CUfunction xfn;
	CUdeviceptr xsums;      /* GPU_XXH3_MAX blocks' sums */
	uint64_t xkey[XXH3_BLOCK_KEY];
#define GPU_FN_PTR(name, sym) __typeof__(name) *f_##name;
	GPU_FNS(GPU_FN_PTR)
};

/* A driver's answer in words: "CUDA_ERROR_X (n)"; a stub driver knows
 * no names. */
static const char *gpu_errname(const struct gpu *g, CUresult r, char *buf, size_t len)
{
	const char *s = NULL;

	if (g->f_cuGetErrorName(r, &s) != CUDA_SUCCESS || !s)
		s = "CUDA error";
	snprintf(buf, len, "%s (%d)", s, (int)r);
	return buf;
}

static int gpu_load(struct gpu *g, char *err, size_t errlen)
{
	if (!(g->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))) {
		snprintf(err, errlen, "no NVIDIA driver on this machine (%s)", dlerror());
		return -ENODEV;
	}
#define GPU_FN_LOAD(name, sym)                                                         \
	if (!(g->f_##name = (__typeof__(name) *)dlsym(g->lib, sym))) {                 \
		snprintf(err, errlen, "the NVIDIA driver has no %s: too old for omnifs", sym); \
		return -ENOTSUP;                                                       \
	}
	GPU_FNS(GPU_FN_LOAD)
	return 0;
}

/* The driver, started, and device dev's primary context retained. */
static int gpu_start(struct gpu *g, int dev, char *err, size_t errlen)
{
	char why[64];
	CUresult r;
	int n = 0;

	if ((r = g->f_cuInit(0)) != CUDA_SUCCESS) {
		const char *stub = r == CUDA_ERROR_STUB_LIBRARY ?
				   " (libcuda.so.1 is the toolkit's stub, not a driver)" : "";
		snprintf(err, errlen, "the NVIDIA driver does not start: %s%s",
			 gpu_errname(g, r, why, sizeof(why)), stub);
		return -ENODEV;
	}
	if ((r = g->f_cuDeviceGetCount(&n)) != CUDA_SUCCESS || dev >= n) {
		snprintf(err, errlen, "no CUDA device %d (this machine has %d)", dev, n);
		return -ENODEV;
	}
	if ((r = g->f_cuDeviceGet(&g->dev, dev)) != CUDA_SUCCESS ||
	    (r = g->f_cuDevicePrimaryCtxRetain(&g->ctx, g->dev)) != CUDA_SUCCESS) {
		snprintf(err, errlen, "CUDA device %d: no context: %s", dev,
			 gpu_errname(g, r, why, sizeof(why)));
		return -EIO;
	}
	return 0;
}

int gpu_open(int dev, struct gpu **out, char *err, size_t errlen)
{
	struct gpu *g = calloc(1, sizeof(*g));
	int rc;

	if (!g)
		return -ENOMEM;
	pthread_mutex_init(&g->xlock, NULL);
	if ((rc = gpu_load(g, err, errlen)))
		goto close_lib;
	if ((rc = gpu_start(g, dev, err, errlen)))
		goto close_lib;
	*out = g;
	return 0;

close_lib:
	if (g->lib)
		dlclose(g->lib);
	free(g);
	return rc;
}

/* Gives back the first n slots of the ring and its stream, once every
 * copy queued on it is done (the DMA engine may still read a slot). */
static void gpu_ring_stop(struct gpu *g, int n)
{
	if (g->f_cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS)
		g->f_cuStreamSynchronize(g->stream);
	for (int i = 0; i < n; i++) {
		g->f_cuEventDestroy(g->ring[i].done);
		g->f_cuMemFreeHost(g->ring[i].buf);
		pthread_mutex_destroy(&g->ring[i].lock);
	}
	g->f_cuStreamDestroy(g->stream);
	g->stream = NULL;
}

static CUresult gpu_slot_make(struct gpu *g, struct gpu_slot *s)
{
	CUresult r = g->f_cuMemHostAlloc((void **)&s->buf, GPU_RING_SLOT,
					 CU_MEMHOSTALLOC_PORTABLE);

	if (r != CUDA_SUCCESS)
		return r;
	if ((r = g->f_cuEventCreate(&s->done, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
		g->f_cuMemFreeHost(s->buf);
		return r;
	}
	pthread_mutex_init(&s->lock, NULL);
	return CUDA_SUCCESS;
}

int gpu_ring_start(struct gpu *g, char *err, size_t errlen)
{
	CUresult r = g->f_cuCtxSetCurrent(g->ctx);
	char why[64];
	int n = 0;

	/* A blocking stream (flags 0): the synchronous copies and memsets,
	 * which run on the legacy default stream, wait for what it has
	 * queued, so a read-back sees every byte written before it. */
	if (r == CUDA_SUCCESS)
		r = g->f_cuStreamCreate(&g->stream, CU_STREAM_DEFAULT);
	if (r != CUDA_SUCCESS)
		goto fail;
	while (n < GPU_RING_SLOTS && (r = gpu_slot_make(g, &g->ring[n])) == CUDA_SUCCESS)
		n++;
	if (n == GPU_RING_SLOTS)
		return 0;
	gpu_ring_stop(g, n);
fail:
	g->stream = NULL;
	snprintf(err, errlen, "CUDA cannot make its copy ring (%u page-locked MiB): %s",
		 GPU_RING_SLOTS * GPU_RING_SLOT >> 20, gpu_errname(g, r, why, sizeof(why)));
	return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

void gpu_close(struct gpu *g)
{
	if (!g)
		return;
	if (g->stream)
		gpu_ring_stop(g, GPU_RING_SLOTS);
	if (g->xsums && g->f_cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS) {
		g->f_cuMemFree(g->xsums);
		g->f_cuModuleUnload(g->xmod);
	}
	pthread_mutex_destroy(&g->xlock);
	g->f_cuDevicePrimaryCtxRelease(g->dev);
	/* The library stays loaded: the driver keeps threads of its own
	 * that would run into unmapped code. */
	free(g);
}

int gpu_host_register(struct gpu *g, void *p, size_t len, char *err, size_t errlen)
{
	CUresult r = g->f_cuCtxSetCurrent(g->ctx);
	char why[64];

	if (r == CUDA_SUCCESS)
		r = g->f_cuMemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE |
					   CU_MEMHOSTREGISTER_DEVICEMAP);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "CUDA cannot page-lock %zu bytes: %s", len,
			 gpu_errname(g, r, why, sizeof(why)));
		return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
	}
	return 0;
}

void gpu_host_unregister(struct gpu *g, void *p)
{
	if (g->f_cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS)
		g->f_cuMemHostUnregister(p);
}

int gpu_dev_alloc(struct gpu *g, size_t len, uint64_t *dptr, char *err, size_t errlen)
{
	CUdeviceptr d = 0;
	CUresult r = g->f_cuCtxSetCurrent(g->ctx);
	char why[64];

	if (r == CUDA_SUCCESS)
		r = g->f_cuMemAlloc(&d, len);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "CUDA cannot allocate %zu bytes of device memory: %s", len,
			 gpu_errname(g, r, why, sizeof(why)));
		return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
	}
	*dptr = (uint64_t)d;
	return 0;
}

void gpu_dev_free(struct gpu *g, uint64_t dptr)
{
	if (g->f_cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS)
		g->f_cuMemFree((CUdeviceptr)dptr);
}

int gpu_host_alloc(struct gpu *g, size_t len, void **out)
{
	if (g->f_cuCtxSetCurrent(g->ctx) != CUDA_SUCCESS ||
	    g->f_cuMemHostAlloc(out, len, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS)
		return -ENOMEM;
	return 0;
}

void gpu_host_free(struct gpu *g, void *p)
{
	if (p && g->f_cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS)
		g->f_cuMemFreeHost(p);
}

/* Copies run on the calling thread, which may be any of the daemon's:
 * each makes the context current first (cheap when it already is). */

/* One slot's worth through the ring: wait until the engine has left the
 * slot, fill it, queue its copy and mark it.  The caller's bytes are
 * free again on return; the device has them by the next gpu_sync(). */
static int gpu_ring_put(struct gpu *g, uint64_t dptr, const void *src, size_t n)
{
	struct gpu_slot *s = &g->ring[atomic_fetch_add(&g->next, 1) % GPU_RING_SLOTS];
	CUresult r;

	pthread_mutex_lock(&s->lock);
	r = g->f_cuEventSynchronize(s->done);
	if (r == CUDA_SUCCESS) {
		memcpy(s->buf, src, n);
		r = g->f_cuMemcpyHtoDAsync((CUdeviceptr)dptr, s->buf, n, g->stream);
	}
	if (r == CUDA_SUCCESS)
		r = g->f_cuEventRecord(s->done, g->stream);
	pthread_mutex_unlock(&s->lock);
	return r == CUDA_SUCCESS ? 0 : -EIO;
}

int gpu_to_dev(struct gpu *g, uint64_t dptr, const void *src, size_t len)
{
	const uint8_t *at = src;
	int rc = 0;

	if (g->f_cuCtxSetCurrent(g->ctx) != CUDA_SUCCESS)
		return -EIO;
	for (size_t n; len && !rc; dptr += n, at += n, len -= n) {
		n = len < GPU_RING_SLOT ? len : GPU_RING_SLOT;
		rc = gpu_ring_put(g, dptr, at, n);
	}
	return rc;
}

int gpu_from_dev(struct gpu *g, void *dst, uint64_t dptr, size_t len)
{
	if (g->f_cuCtxSetCurrent(g->ctx) != CUDA_SUCCESS ||
	    g->f_cuMemcpyDtoH(dst, (CUdeviceptr)dptr, len) != CUDA_SUCCESS)
		return -EIO;
	return 0;
}

/* Queues the copy of n bytes at dptr into dst on the ring's stream, after
 * the copies to the device queued there, and marks its end with ev. */
static int gpu_out_queue(struct gpu *g, uint8_t *dst, uint64_t dptr, size_t n, CUevent ev)
{
	if (g->f_cuMemcpyDtoHAsync(dst, (CUdeviceptr)dptr, n, g->stream) != CUDA_SUCCESS ||
	    g->f_cuEventRecord(ev, g->stream) != CUDA_SUCCESS)
		return -EIO;
	return 0;
}

int gpu_from_dev_each(struct gpu *g, uint64_t dptr, uint64_t len, uint8_t *buf, size_t half,
		      int (*fn)(void *arg, const uint8_t *p, size_t n), void *arg)
{
	CUevent ev[2];
	int rc, cur = 0;

	if (g->f_cuCtxSetCurrent(g->ctx) != CUDA_SUCCESS ||
	    g->f_cuEventCreate(&ev[0], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
		return -EIO;
	rc = -EIO;
	if (g->f_cuEventCreate(&ev[1], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
		goto destroy_first;
	rc = gpu_out_queue(g, buf, dptr, len < half ? len : half, ev[0]);
	for (uint64_t at = 0, next; at < len && !rc; at = next, cur ^= 1) {
		next = at + (len - at < half ? len - at : half);
		if (next < len)
			rc = gpu_out_queue(g, buf + (cur ^ 1) * half, dptr + next,
					   len - next < half ? len - next : half, ev[cur ^ 1]);
		if (!rc && g->f_cuEventSynchronize(ev[cur]) != CUDA_SUCCESS)
			rc = -EIO;
		if (!rc)
			rc = fn(arg, buf + cur * half, next - at);
	}
	/* Stopped early, a copy may still be landing in the other half. */
	g->f_cuEventSynchronize(ev[0]);
	g->f_cuEventSynchronize(ev[1]);
	g->f_cuEventDestroy(ev[1]);
destroy_first:
	g->f_cuEventDestroy(ev[0]);
	return rc;
}

/* Loads the kernel and takes its sums' buffer: 0, or -ENOTSUP for good
 * (no PTX in this build, a driver too old to compile it).  Called with
 * xlock held and the context current. */
static int gpu_xxh3_make(struct gpu *g)
{
#ifdef OMNI_XXH3_PTX
	char why[64];
	CUresult r;

	if (g->xstate)
		return g->xstate == 1 ? 0 : g->xstate;
	g->xstate = -ENOTSUP;
	if ((r = g->f_cuModuleLoadData(&g->xmod, gpu_xxh3_ptx)) != CUDA_SUCCESS)
		goto say;
	if ((r = g->f_cuModuleGetFunction(&g->xfn, g->xmod, "omni_xxh3_blocks")) != CUDA_SUCCESS ||
	    (r = g->f_cuMemAlloc(&g->xsums, GPU_XXH3_MAX * 64)) != CUDA_SUCCESS) {
		g->f_cuModuleUnload(g->xmod);
		goto say;
	}
	xxh3sum_key(g->xkey);
	g->xstate = 1;
	return 0;
say:    /* once: the CPU hashes these objects from now on, as it did */
	fprintf(stderr, "omnifs: the GPU pool's objects are hashed on the CPU: "
		"the driver cannot load the XXH3 kernel: %s\n", gpu_errname(g, r, why, sizeof(why)));
	return -ENOTSUP;
#else
	(void)g;
	return -ENOTSUP;
#endif
}

/* Whether the kernel's sums of the first and last of n blocks at dptr
 * are what the CPU takes of the same bytes.  A kernel that a driver
 * compiled wrong, or that this code calls wrong, then costs a fallback
 * to the CPU's hashing, never a wrong checksum. */
static int gpu_xxh3_agrees(struct gpu *g, uint64_t dptr, uint64_t n, const uint64_t *out)
{
	uint8_t block[XXH3_BLOCK];
	uint64_t want[8];

	for (uint64_t i = 0; i < 2; i++) {
		uint64_t b = i ? n - 1 : 0;
		if (gpu_from_dev(g, block, dptr + b * XXH3_BLOCK, XXH3_BLOCK))
			return 0;
		xxh3sum_block(block, want);
		if (memcmp(want, out + 8 * b, sizeof(want)))
			return 0;
	}
	return 1;
}

int gpu_xxh3_sums(struct gpu *g, uint64_t dptr, uint64_t n, uint64_t *out)
{
	unsigned threads = 256, grid = (unsigned)((n + threads - 1) / threads);
	void *args[] = { &dptr, &n, g->xkey, &g->xsums };
	const char *fail = NULL;
	char why[64] = "";
	CUresult r;
	int rc;

	if (!n || n > GPU_XXH3_MAX || dptr % 8)
		return -EINVAL;
	if (g->f_cuCtxSetCurrent(g->ctx) != CUDA_SUCCESS)
		return -EIO;
	pthread_mutex_lock(&g->xlock);
	if (!(rc = gpu_xxh3_make(g))) {
		/* on the ring's stream: after the copies in queued there */
		if ((r = g->f_cuLaunchKernel(g->xfn, grid, 1, 1, threads, 1, 1, 0, g->stream, args,
					     NULL)) != CUDA_SUCCESS ||
		    (r = g->f_cuMemcpyDtoHAsync(out, g->xsums, n * 64, g->stream)) != CUDA_SUCCESS ||
		    (r = g->f_cuStreamSynchronize(g->stream)) != CUDA_SUCCESS)
			fail = gpu_errname(g, r, why, sizeof(why));
		else if (!gpu_xxh3_agrees(g, dptr, n, out))
			fail = "its sums differ from the CPU's";
	}
	/* Whatever went wrong, the CPU can still hash: once said, for good. */
	if (fail) {
		fprintf(stderr, "omnifs: the GPU pool's objects are hashed on the CPU: "
			"the XXH3 kernel failed: %s\n", fail);
		g->xstate = rc = -ENOTSUP;
	}
	pthread_mutex_unlock(&g->xlock);
	return rc;
}

int gpu_dev_zero(struct gpu *g, uint64_t dptr, size_t len)
{
	if (g->f_cuCtxSetCurrent(g->ctx) != CUDA_SUCCESS ||
	    g->f_cuMemsetD8((CUdeviceptr)dptr, 0, len) != CUDA_SUCCESS)
		return -EIO;
	return 0;
}

int gpu_sync(struct gpu *g)
{
	if (g->f_cuCtxSetCurrent(g->ctx) != CUDA_SUCCESS ||
	    g->f_cuCtxSynchronize() != CUDA_SUCCESS)
		return -EIO;
	return 0;
}

int gpu_ipc_handle(struct gpu *g, uint64_t dptr, unsigned char out[GPU_IPC_BYTES],
		   char *err, size_t errlen)
{
	_Static_assert(sizeof(CUipcMemHandle) == GPU_IPC_BYTES, "CUDA's IPC handle size");
	CUipcMemHandle h;
	CUresult r = g->f_cuCtxSetCurrent(g->ctx);
	char why[64];

	if (r == CUDA_SUCCESS)
		r = g->f_cuIpcGetMemHandle(&h, (CUdeviceptr)dptr);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "no CUDA IPC handle for the pool: %s",
			 gpu_errname(g, r, why, sizeof(why)));
		return -EIO;
	}
	memcpy(out, &h, GPU_IPC_BYTES);
	return 0;
}

/* Looked up here, not with the others: a driver without it still runs
 * every pool, only without GPUDirect RDMA. */
int gpu_dmabuf(struct gpu *g, uint64_t dptr, size_t len, int *fd, char *err, size_t errlen)
{
	__typeof__(cuMemGetHandleForAddressRange) *get =
		(__typeof__(cuMemGetHandleForAddressRange) *)dlsym(g->lib,
								    "cuMemGetHandleForAddressRange");
	unsigned sync = 1;
	int ok = 0;
	char why[64];
	CUresult r;

	if (!get) {
		snprintf(err, errlen, "the NVIDIA driver exports no dmabuf (it needs 515 or later)");
		return -ENOTSUP;
	}
	if ((r = g->f_cuCtxSetCurrent(g->ctx)) != CUDA_SUCCESS ||
	    (r = g->f_cuDeviceGetAttribute(&ok, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
					   g->dev)) != CUDA_SUCCESS)
		goto fail;
	if (!ok) {
		snprintf(err, errlen, "the GPU's driver exports no dmabuf of its memory (it "
			 "needs NVIDIA's open kernel modules and Linux 5.12 or later)");
		return -ENOTSUP;
	}
	/* The NIC's accesses and the driver's synchronous copies (a read
	 * of an object back to the host) then see each other in order. */
	if ((r = g->f_cuPointerSetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
					    (CUdeviceptr)dptr)) != CUDA_SUCCESS ||
	    (r = get(fd, (CUdeviceptr)dptr, len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)) !=
	    CUDA_SUCCESS)
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "no dmabuf of the GPU's memory: %s", gpu_errname(g, r, why, sizeof(why)));
	return r == CUDA_ERROR_NOT_SUPPORTED ? -ENOTSUP : -EIO;
}

#else   /* built without the CUDA toolkit's headers */

/* gpu_open() always fails here, with the reason; nothing else is ever
 * called, and each says so if it were. */
int gpu_open(int dev, struct gpu **out, char *err, size_t errlen)
{
	(void)dev;
	(void)out;
	snprintf(err, errlen, "this omnifs was built without CUDA (no cuda.h at build time; "
		 "see README, \"GPU pools\")");
	return -ENOTSUP;
}

static int no_cuda(char *err, size_t errlen)
{
	if (err)
		snprintf(err, errlen, "this omnifs was built without CUDA");
	return -ENOTSUP;
}

void gpu_close(struct gpu *g) { (void)g; }
void gpu_host_unregister(struct gpu *g, void *p) { (void)g; (void)p; }
void gpu_dev_free(struct gpu *g, uint64_t dptr) { (void)g; (void)dptr; }
int gpu_sync(struct gpu *g) { (void)g; return no_cuda(NULL, 0); }

int gpu_host_register(struct gpu *g, void *p, size_t len, char *err, size_t errlen)
{
	(void)g; (void)p; (void)len;
	return no_cuda(err, errlen);
}

int gpu_dev_alloc(struct gpu *g, size_t len, uint64_t *dptr, char *err, size_t errlen)
{
	(void)g; (void)len; (void)dptr;
	return no_cuda(err, errlen);
}

int gpu_ipc_handle(struct gpu *g, uint64_t dptr, unsigned char out[GPU_IPC_BYTES],
		   char *err, size_t errlen)
{
	(void)g; (void)dptr; (void)out;
	return no_cuda(err, errlen);
}

int gpu_to_dev(struct gpu *g, uint64_t dptr, const void *src, size_t len)
{
	(void)g; (void)dptr; (void)src; (void)len;
	return no_cuda(NULL, 0);
}

int gpu_ring_start(struct gpu *g, char *err, size_t errlen)
{
	(void)g;
	return no_cuda(err, errlen);
}

int gpu_host_alloc(struct gpu *g, size_t len, void **out)
{
	(void)g; (void)len; (void)out;
	return no_cuda(NULL, 0);
}

void gpu_host_free(struct gpu *g, void *p) { (void)g; (void)p; }

int gpu_from_dev(struct gpu *g, void *dst, uint64_t dptr, size_t len)
{
	(void)g; (void)dst; (void)dptr; (void)len;
	return no_cuda(NULL, 0);
}

int gpu_from_dev_each(struct gpu *g, uint64_t dptr, uint64_t len, uint8_t *buf, size_t half,
		      int (*fn)(void *arg, const uint8_t *p, size_t n), void *arg)
{
	(void)g; (void)dptr; (void)len; (void)buf; (void)half; (void)fn; (void)arg;
	return no_cuda(NULL, 0);
}

int gpu_xxh3_sums(struct gpu *g, uint64_t dptr, uint64_t n, uint64_t *out)
{
	(void)g; (void)dptr; (void)n; (void)out;
	return -ENOTSUP;
}

int gpu_dev_zero(struct gpu *g, uint64_t dptr, size_t len)
{
	(void)g; (void)dptr; (void)len;
	return no_cuda(NULL, 0);
}

int gpu_dmabuf(struct gpu *g, uint64_t dptr, size_t len, int *fd, char *err, size_t errlen)
{
	(void)g; (void)dptr; (void)len; (void)fd;
	return no_cuda(err, errlen);
}

#endif
