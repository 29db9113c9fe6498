/* gpu.h - the NVIDIA driver, loaded when a pool asks for it.
 *
 * omnifs links no CUDA library, so that one binary runs on machines with
 * and without a GPU.  A pool that needs CUDA (pinned, and later device
 * memory) opens the driver library that every NVIDIA driver installs,
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

#endif
