"""direct - the same-node hand-over (README, "Same-node hand-over").

On the node that holds an object, one ioctl on the open file says where
its bytes lie in the daemon's pool, and the process copies them itself with
process_vm_readv(2) (process_vm_writev(2) for a writer): one request and
one copy, instead of a FUSE request per MiB and two copies through the
kernel.  The layout below is fs/direct.h's.  Anything that does not hold
(another node's object, a view, another user, another pid namespace, a
daemon without the ioctls) makes the caller fall back to read and write.
"""
import concurrent.futures
import ctypes
import errno
import fcntl
import os
import struct
import threading

MAGIC = 0x524D444F
NEXT = 60
_HEAD = struct.Struct("<IIQQQQII")         # magic pid size xxh3 cookie_addr cookie n flags
_EXT = struct.Struct("<QQ")
SIZE = _HEAD.size + NEXT * _EXT.size


def _ioc(rw, nr):           # asm-generic/ioctl.h: x86-64, arm64, riscv
    return (rw << 30) | (SIZE << 16) | (ord("O") << 8) | nr


WHERE = _ioc(2, 0x10)       # _IOR
PLACE = _ioc(3, 0x11)       # _IOWR
PLACED = (1 << 30) | (8 << 16) | (ord("O") << 8) | 0x15    # _IOW('O', 0x15, uint64_t)
PLACED_STEP = 8 << 20
# Answers that mean "not this way, ever, here": stop asking.
_NEVER = (errno.ENOTTY, errno.EPERM, errno.ENOSYS, errno.EINVAL)


class _iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        for name in ("process_vm_readv", "process_vm_writev"):
            f = getattr(libc, name)
            f.argtypes = [ctypes.c_int, ctypes.POINTER(_iovec), ctypes.c_ulong,
                          ctypes.POINTER(_iovec), ctypes.c_ulong, ctypes.c_ulong]
            f.restype = ctypes.c_ssize_t
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def _bytearray_api():
    try:
        make = ctypes.pythonapi.PyByteArray_FromStringAndSize
        make.restype, make.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_ssize_t]
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return make, libc.madvise
    except (AttributeError, OSError):
        return None


_BYTEARRAY = _bytearray_api()
_HUGE = 2 << 20
MADV_HUGEPAGE = 14


def fresh_bytearray(size):
    """A bytearray of size bytes that the caller will overwrite whole, over
    huge pages where the kernel gives them.  bytearray(size) zeroes every
    4 KiB page, one fault each: 40 ms of a 64 MiB get on this VM, three
    times the copy; this one is neither zeroed nor faulted until filled."""
    if _BYTEARRAY is None or size < _HUGE:
        return bytearray(size)
    make, madvise = _BYTEARRAY
    buf = make(None, size)
    at = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    lo, hi = -(-at // _HUGE) * _HUGE, (at + size) // _HUGE * _HUGE
    if hi > lo:
        madvise(lo, hi - lo, MADV_HUGEPAGE)     # advice: failing changes nothing
    return buf


class Place:
    """Where an object's bytes are: the daemon's pid and (addr, len) pieces."""

    def __init__(self, raw):
        magic, self.pid, self.size, self.xxh3, self.cookie_addr, self.cookie, n, _ = \
            _HEAD.unpack_from(raw)
        if magic != MAGIC or n > NEXT:
            raise OSError(errno.EPROTO, "omnifs: a bad direct answer")
        self.ext = [_EXT.unpack_from(raw, _HEAD.size + i * _EXT.size) for i in range(n)]
        if sum(ln for _, ln in self.ext) != self.size:
            raise OSError(errno.EPROTO, "omnifs: a direct answer that does not add up")


def available():
    return _LIBC is not None


def _ask(fd, cmd, size):
    buf = bytearray(SIZE)
    _HEAD.pack_into(buf, 0, MAGIC, 0, size, 0, 0, 0, 0, 0)
    fcntl.ioctl(fd, cmd, buf, True)
    return Place(buf)


def where(fd):
    """The Place of the object open for reading on fd (the open then counts
    as a complete read); OSError when it cannot be handed over."""
    return _ask(fd, WHERE, 0)


def place(fd, size):
    """Makes the new object on writer fd size bytes long; its Place."""
    return _ask(fd, PLACE, size)


def never(e):
    """True when an OSError from where()/place() will not change here."""
    return e.errno in _NEVER


def _addr(mv):
    """The address of a contiguous buffer's bytes, or None."""
    if not len(mv):
        return None
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(mv))
    except TypeError:       # read-only (bytes): numpy can tell without a copy
        try:
            import numpy
        except ImportError:
            return None
        return numpy.frombuffer(mv, dtype=numpy.uint8).ctypes.data


def _iovs(pairs):
    arr = (_iovec * len(pairs))()
    for i, (a, n) in enumerate(pairs):
        arr[i].base, arr[i].len = a, n
    return arr


_verified = set()       # (pid, cookie) of daemons this process has seen

# A large copy goes in several threads at once: one thread's copy through
# the kernel runs at about half of memcpy's speed here (no streaming
# stores), two take 9 ms for 64 MiB where one takes 16.  Each takes at
# least PAR_MIN bytes; the calls release the GIL.
PAR_MIN = 16 << 20
PAR_MAX = min(4, os.cpu_count() or 1)
_pool = None
_pool_lock = threading.Lock()


def _threads():
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(PAR_MAX, "omnifs-copy")
        return _pool


def _forked():
    """A forked child (vLLM's workers are) has none of its parent's threads:
    a pool inherited from it would queue work that no thread ever runs."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forked)


def _span(pairs, a, b):
    """The (addr, len) pieces that hold bytes [a, b) of pairs laid end to end."""
    out, at = [], 0
    for addr, ln in pairs:
        lo, hi = max(a, at), min(b, at + ln)
        if lo < hi:
            out.append((addr + lo - at, hi - lo))
        at += ln
    return out


def _vm(fn, pid, local, remote):
    lo, re = _iovs(local), _iovs(remote)
    return fn(pid, lo, len(local), re, len(remote), 0)


def _copy(fn, pid, local, remote, a, b, head=None):
    """Copies bytes [a, b) of remote to the same of local (fn: process_vm_
    readv or writev), in up to PAR_MAX threads; head, a (local, remote)
    pair of 8 bytes, goes in the same call as the first part.  True if
    every byte went."""
    n = max(1, min(PAR_MAX, (b - a) // PAR_MIN))
    cut = [a + (b - a) * i // n for i in range(n + 1)]
    jobs = [(_span(local, cut[i], cut[i + 1]), _span(remote, cut[i], cut[i + 1]))
            for i in range(n)]
    if head:
        jobs[0] = ([head[0]] + jobs[0][0], [head[1]] + jobs[0][1])
    want = [sum(ln for _, ln in lo) for lo, _ in jobs]
    more = [_threads().submit(_vm, fn, pid, lo, re) for lo, re in jobs[1:]]
    got = [_vm(fn, pid, *jobs[0])] + [f.result() for f in more]
    return got == want


def _readv(pid, local, remote):
    return _vm(_LIBC.process_vm_readv, pid, local, remote)


def copy_out(pl, dest, skip=0):
    """Fills the writable buffer dest with the object's bytes from `skip`
    on, checking the cookie in the same call.  True if all came, from the
    daemon that answered."""
    mv = memoryview(dest).cast("B")
    cookie = ctypes.c_uint64(0)
    head = ((ctypes.addressof(cookie), 8), (pl.cookie_addr, 8))
    want = len(mv)
    if want > pl.size - skip:
        return False
    a = _addr(mv) if want else 0
    if a is None:
        return False
    ok = _copy(_LIBC.process_vm_readv, pl.pid, [(a, want)] if want else [],
               _span(pl.ext, skip, skip + want), 0, want, head)
    return ok and cookie.value == pl.cookie


def copy_in(pl, pieces, fd=None):
    """Copies bytes-like pieces (pl.size bytes in all) into the placed
    object.  True if all went, to the daemon that answered.  With the
    writer's fd, a large object goes in PLACED_STEP pieces, each said to be
    in (OMNIFS_IOC_PLACED) as it lands: the daemon hashes it on another
    core while the next one is copied, instead of all of it at the close."""
    if (pl.pid, pl.cookie) not in _verified:
        cookie = ctypes.c_uint64(0)
        if (_readv(pl.pid, [(ctypes.addressof(cookie), 8)], [(pl.cookie_addr, 8)]) != 8
                or cookie.value != pl.cookie):
            return False
        _verified.add((pl.pid, pl.cookie))
    local = []
    for p in pieces:
        mv = memoryview(p).cast("B")
        if len(mv):
            a = _addr(mv)
            if a is None:
                return False
            local.append((a, len(mv)))
    if sum(n for _, n in local) != pl.size:
        return False
    if not local:
        return True
    tell = fd is not None and pl.size >= 2 * PLACED_STEP
    step = PLACED_STEP if tell else pl.size
    for at in range(0, pl.size, step):
        end = min(at + step, pl.size)
        if not _copy(_LIBC.process_vm_writev, pl.pid, local, pl.ext, at, end):
            return False
        if tell and end < pl.size:
            try:
                fcntl.ioctl(fd, PLACED, struct.pack("<Q", end))
            except OSError:     # a daemon without it: the close hashes all
                tell = False
    return True
