"""ioctl - omnifs' ioctls, made without holding the GIL.

CPython before 3.14 holds the GIL through an fcntl.ioctl() whose mutable
buffer is over 1 KiB (gh-132742).  A small GET waits in its ioctl for the
key to be published, for as long as its timeout: with fcntl it froze every
other thread of the process meanwhile (a 50 ms sleep beside a waiting get
took 1 s).  ctypes lets the GIL go for the call.
"""
import ctypes
import errno
import os


def ioc(rw, nr, size):      # asm-generic/ioctl.h: x86-64, arm64, riscv
    return (rw << 30) | (size << 16) | (ord("O") << 8) | nr


def _libc_ioctl():
    f = ctypes.CDLL(None, use_errno=True).ioctl
    f.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    f.restype = ctypes.c_int
    return f


_IOCTL = _libc_ioctl()


def call(fd, cmd, buf, retry=True):
    """ioctl(fd, cmd, buf) on a writable buffer (a bytearray), the GIL let
    go; OSError as fcntl.ioctl raises.  Interrupted by a signal, it is made
    again once Python has run the handlers (PEP 475), unless retry is False:
    then InterruptedError, for a caller that must change the request first."""
    arg = ctypes.addressof(ctypes.c_char.from_buffer(buf)) if len(buf) else None
    while _IOCTL(fd, cmd, arg) < 0:
        e = ctypes.get_errno()
        if e != errno.EINTR or not retry:
            raise OSError(e, os.strerror(e))
