/* kinit.h - asks the kernel, at FUSE_INIT, for what libfuse 3.14 cannot.
 *
 * Objects are served with direct_io (ops.c says why), and the kernel then
 * refuses a shared mmap of them (ENODEV) unless the filesystem answered
 * INIT with FUSE_DIRECT_IO_ALLOW_MMAP (kernel 6.6 and later).  numpy's
 * mmap_mode='r', safetensors' safe_open and Python's mmap.ACCESS_READ all
 * map MAP_SHARED.  libfuse names that flag from 3.16 on
 * (FUSE_CAP_DIRECT_IO_ALLOW_MMAP), and then it is asked for in op_init;
 * the libfuse of Debian 12 (3.14) does not, so this module sets the bit in
 * INIT's reply on its way to the kernel, through libfuse's own hook for a
 * session's I/O (fuse_session_custom_io), where the kernel offered it.
 */
#ifndef OMNI_KINIT_H
#define OMNI_KINIT_H

#include <fuse_lowlevel.h>

/* Call after fuse_session_mount, before the session's first request.
 * 0 or -errno (then nothing changed).  One session per process: what INIT
 * said is kept by the process. */
int kinit_allow_mmap(struct fuse_session *se);

#endif
