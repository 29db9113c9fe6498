"""ioctl - omnifs' ioctls, made without holding the GIL.

CPython before 3.14 holds the GIL through an fcntl.ioctl() whose mutable
buffer is over 1 KiB (gh-132742).  A small GET waits in its ioctl for the
key to be published, for as long as its timeout: with fcntl it froze every
other thread of the process meanwhile (a 50 ms sleep beside a waiting get
took 1 s).  ctypes lets the GIL go for the call.

A ctypes call costs what its arguments cost to convert: with the caches
cold after a worker's idle time, wrapping a bytearray for each call took
16 us, against 9 for a call whose arguments are ready.  So the small
requests, which a 4 KiB hand-off makes twice, go through a buffer of the
calling thread's, made once with its address (Buffer).
"""
import ctypes
import errno
import os
import threading

_IOCTL = ctypes.CDLL(None, use_errno=True).ioctl
# ioctl(2) is variadic, but on the ABIs Linux runs on its third argument,
# a pointer, goes where a fixed one would: typed, a command is converted
# in C, not by a ctypes object made in Python for each call.
_IOCTL.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]


def ioc(rw, nr, size):      # asm-generic/ioctl.h: x86-64, arm64, riscv
    return (rw << 30) | (size << 16) | (ord("O") << 8) | nr


class Buffer:
    """Request bytes for ioctls, with their address ready for the call."""

    def __init__(self, size):
        self._c = ctypes.create_string_buffer(size)
        self.mv = memoryview(self._c).cast("B")
        self.ptr = ctypes.c_void_p(ctypes.addressof(self._c))


_mine = threading.local()


def thread_buffer(size):
    """The calling thread's Buffer, of at least size bytes: valid until
    the thread's next call of this."""
    b = getattr(_mine, "b", None)
    if b is None or len(b.mv) < size:
        b = _mine.b = Buffer(size)
    return b


def call_ready(fd, cmd, ptr, retry=True):
    """ioctl(fd, cmd, ptr): ptr an address (a Buffer's ptr), or bytes for
    a command that only reads its argument; the GIL let go; OSError as
    fcntl.ioctl raises.  Interrupted by a signal, it is made again once
    Python has run the handlers (PEP 475), unless retry is False: then
    InterruptedError, for a caller that must change the request first."""
    while _IOCTL(fd, cmd, ptr) < 0:
        e = ctypes.get_errno()
        if e != errno.EINTR or not retry:
            raise OSError(e, os.strerror(e))


def call(fd, cmd, buf, retry=True):
    """call_ready() on a writable buffer (a bytearray)."""
    call_ready(fd, cmd, ctypes.addressof(ctypes.c_char.from_buffer(buf)) if len(buf) else None, retry)
