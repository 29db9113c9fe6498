"""direct - the same-node hand-over (README, "Same-node hand-over").

On the node that holds an object, one ioctl on the open file says where
its bytes lie in the daemon's pool, and the process copies them itself:
one request and one copy, instead of a FUSE request per MiB and two copies
through the kernel.  The copy is a memmove through the pool's file, mapped
once per daemon (Pool), or, where the daemon cannot share it or this
process cannot open it, process_vm_readv(2) (process_vm_writev(2) for a
writer), which moves a page at a time at a third of memory speed.  The
layout below is fs/direct.h's.  Another node's object that is pulled into
this node's pool whole (up to 65 MiB) is handed over while it lands: each
range is copied once LANDED says it is here.  Anything that does not hold
(a larger object of another node's, which streams; a view, another user,
another pid namespace, a daemon without the ioctls) makes the caller fall
back to read and write.
"""
import ctypes
import errno
import fcntl
import mmap
import os
import stat
import struct
import weakref

from . import ioctl

MAGIC = 0x524D444F
NEXT = 60
_HEAD = struct.Struct("<IIQQQQII")         # magic pid size xxh3 cookie_addr cookie n flags
_EXT = struct.Struct("<QQ")
SIZE = _HEAD.size + NEXT * _EXT.size


def _ioc(rw, nr):           # asm-generic/ioctl.h: x86-64, arm64, riscv
    return (rw << 30) | (SIZE << 16) | (ord("O") << 8) | nr


WHERE = _ioc(2, 0x10)       # _IOR
WHERE_SOON = _ioc(2, 0x19)  # _IOR: at once, while another node's bytes land
LANDED = (3 << 30) | (8 << 16) | (ord("O") << 8) | 0x1A    # _IOWR('O', 0x1a, uint64_t)
LANDING = 1                 # OMNIFS_WHERE_LANDING: ask LANDED before copying
LAND_STEP = 4 << 20         # the least a copy behind a pull waits for
_WIN = struct.Struct("<QQQQ")              # off, then len pool_off size
WINDOW = (3 << 30) | (_WIN.size << 16) | (ord("O") << 8) | 0x1B     # _IOWR
PLACE = _ioc(3, 0x11)       # _IOWR
PLACED = (1 << 30) | (8 << 16) | (ord("O") << 8) | 0x15    # _IOW('O', 0x15, uint64_t)
PLACED_STEP = 8 << 20
SOLE = 1                    # OMNIFS_PLACE_SOLE: the writer's fd is never dup()ed
SHARE_MAGIC = 0x5248534F
_SHR = struct.Struct("<IIiIQQQ")           # magic pid fd flags base size cookie
SHARE = (2 << 30) | (_SHR.size << 16) | (ord("O") << 8) | 0x17     # _IOR
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
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.mmap.restype = ctypes.c_void_p
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
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
_PAGE = 4096
_ALIGN_MIN = 64 << 10
_HUGE = 2 << 20
_MALLOC_MAP_MAX = 32 << 20    # glibc's DEFAULT_MMAP_THRESHOLD_MAX, 64-bit
MADV_HUGEPAGE = 14
MADV_POPULATE_WRITE = 23    # Linux 5.14


def fresh_align(size):
    """Where a fresh buffer of size bytes that a get fills should start: on
    a page, and, beyond 32 MiB, on a huge page, so that every page of it
    can be huge.  Allocate 2 * this more than size to have room for it.
    Started on a mere page, the buffer's first and last 2 MiB are faulted
    in 4 KiB at a time: 512 faults, which took 11 ms of a fresh 64 MiB
    copy in this VM (20 ms against 9).  Up to 32 MiB (glibc's highest
    threshold for mapping an allocation by itself), malloc hands out
    memory that an earlier buffer as large left in the heap, faulted in
    already: 4 MiB more would push a 30 MiB buffer out of it, onto fresh
    pages (2.3 ms to fill it became 9)."""
    return _HUGE if size > _MALLOC_MAP_MAX else _PAGE


def advise_huge(at, size, align):
    """Asks for huge pages under [at, at+size), a buffer at a fresh_align()
    boundary with its room after it: where align is 2 MiB, up to the end
    of its last huge page, which that room holds.  Advice: failing, or no
    libc to ask, changes nothing."""
    if _BYTEARRAY is None:
        return
    lo = -(-at // _HUGE) * _HUGE
    hi = (at + size + (_HUGE - 1 if align == _HUGE else 0)) // _HUGE * _HUGE
    if hi > lo:
        _BYTEARRAY[1](lo, hi - lo, MADV_HUGEPAGE)


def fresh_bytearray(size):
    """A bytearray of size bytes that the caller will overwrite whole: its
    bytes start on a page (on a huge page beyond 32 MiB: fresh_align), and lie
    over huge pages where the kernel gives them.  A kernel copy into memory
    that is not aligned within a cache line as its source is runs at half
    speed here (rep movsb): a 256 MiB read through FUSE took 246-274 ms
    into malloc's address + 16, 89-144 ms into a page.  And
    bytearray(size) zeroes every 4 KiB page, one fault each (40 ms of a
    64 MiB get on this VM, three times the copy); this one is neither
    zeroed nor faulted until filled."""
    if _BYTEARRAY is None or size < _ALIGN_MIN:
        return bytearray(size)
    align = fresh_align(size)
    buf = _BYTEARRAY[0](None, size + 2 * align)
    at = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    # Both cuts move no byte: CPython advances a bytearray's start, and
    # keeps its memory when it shrinks by less than half (size > 2 * align).
    del buf[:-at % align]
    del buf[size:]
    advise_huge(at + -at % align, size, align)
    return buf


class Place:
    """Where an object's bytes are: the daemon's pid and (addr, len) pieces."""

    def __init__(self, raw):
        magic, self.pid, self.size, self.xxh3, self.cookie_addr, self.cookie, n, flags = \
            _HEAD.unpack_from(raw)
        if magic != MAGIC or n > NEXT:
            raise OSError(errno.EPROTO, "omnifs: a bad direct answer")
        self.ext = [_EXT.unpack_from(raw, _HEAD.size + i * _EXT.size) for i in range(n)]
        if sum(ln for _, ln in self.ext) != self.size:
            raise OSError(errno.EPROTO, "omnifs: a direct answer that does not add up")
        self.pool = None        # its daemon's Pool, where the caller mapped one
        # Bytes known to be here and checked: the rest are still landing
        # (WHERE_SOON), and LANDED on the descriptor fd says when.
        self.have = 0 if flags & LANDING else self.size
        self.fd = None


def _share(fd):
    """OMNIFS_IOC_SHARE's answer on fd: pid, fd, base, size, cookie."""
    raw = bytearray(_SHR.size)
    ioctl.call(fd, SHARE, raw)
    magic, pid, pfd, _, base, size, cookie = _SHR.unpack(raw)
    if magic != SHARE_MAGIC:
        raise OSError(errno.EPROTO, "omnifs: a bad share answer")
    return pid, pfd, base, size, cookie


def share_key(fd):
    """(pid, cookie) of the daemon behind fd, whose Pool would map it;
    OSError where it does not share its pool."""
    pid, _, _, _, cookie = _share(fd)
    return pid, cookie


class Pool:
    """A daemon's pool mapped into this process (OMNIFS_IOC_SHARE, asked on
    any of its objects' descriptors): the daemon's addresses of a Place
    are then this process's, and its bytes are copied with memmove.
    OSError when the daemon does not share it, or the file this process
    opened is not that daemon's (another pid namespace: the cookie)."""

    def __init__(self, fd):
        self.pid, pfd, self.base, self.size, self.cookie = _share(fd)
        # Looked at before it is opened: in another pid namespace the path
        # names some other process's file, which may be a device or a FIFO.
        p = os.open("/proc/%d/fd/%d" % (self.pid, pfd), os.O_PATH | os.O_CLOEXEC)
        try:
            st = os.fstat(p)
            if not stat.S_ISREG(st.st_mode) or st.st_size < self.size + 8:
                raise OSError(errno.ESTALE, "omnifs: not the daemon's pool")
            f = os.open("/proc/self/fd/%d" % p, os.O_RDWR | os.O_CLOEXEC)
        finally:
            os.close(p)
        try:
            self.addr = _map_huge(f, self.size + 8)
        finally:
            os.close(f)
        # The mapping lives as long as this object: copies in flight hold
        # it (Place.pool), so that it is never unmapped under them.
        weakref.finalize(self, _LIBC.munmap, self.addr, self.size + 8)
        if ctypes.c_uint64.from_address(self.addr + self.size).value != self.cookie:
            raise OSError(errno.ESTALE, "omnifs: not the daemon's pool")

    def local(self, pairs):
        """(addr, len) pieces of the daemon's as this process's addresses,
        or None for one outside the pool."""
        out = []
        for a, n in pairs:
            off = a - self.base
            if off < 0 or off + n > self.size:
                return None
            out.append((self.addr + off, n))
        return out


_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS, _MAP_NORESERVE = 1, 2, 0x10, 0x20, 0x4000
_MAP_FAILED = ctypes.c_void_p(-1).value
_MADV_DONTDUMP = getattr(mmap, "MADV_DONTDUMP", 16)


def _map_huge(fd, length):
    """Maps fd's first length bytes, shared, at a multiple of 2 MiB as the
    daemon does: the pool's huge pages are then mapped whole here too,
    where elsewhere each 4 KiB page of them is mapped (and, in a VM that
    shadows page tables, trapped on) by itself.  The address, or OSError."""
    span = length + _HUGE
    room = _LIBC.mmap(None, span, 0, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
    if room in (None, _MAP_FAILED):
        raise OSError(ctypes.get_errno(), "omnifs: no room to map the pool")
    at = -(-room // _HUGE) * _HUGE
    if _LIBC.mmap(at, length, mmap.PROT_READ | mmap.PROT_WRITE, _MAP_SHARED | _MAP_FIXED,
                  fd, 0) != at:
        e = ctypes.get_errno()
        _LIBC.munmap(room, span)
        raise OSError(e, "omnifs: cannot map the pool")
    # A worker's core leaves the pool out, as the daemon's does: it is
    # the node's memory for every stage, gigabytes, not this worker's.
    _LIBC.madvise(at, length, _MADV_DONTDUMP)
    end = at + -(-length // _PAGE) * _PAGE
    if at > room:
        _LIBC.munmap(room, at - room)
    if room + span > end:
        _LIBC.munmap(end, room + span - end)
    return at


def available():
    return _LIBC is not None


def _ask(fd, cmd, size, flags=0):
    buf = bytearray(SIZE)
    _HEAD.pack_into(buf, 0, MAGIC, 0, size, 0, 0, 0, 0, flags)
    ioctl.call(fd, cmd, buf)
    return Place(buf)


def where(fd):
    """The Place of the object open for reading on fd (the open then counts
    as a complete read); OSError when it cannot be handed over."""
    return _ask(fd, WHERE, 0)


def where_soon(fd):
    """where(), answered at once for another node's object still being
    pulled here: its Place then has have < size, and copy_out copies
    each range as it lands.  OSError(ENOTTY) from a daemon without it."""
    pl = _ask(fd, WHERE_SOON, 0)
    pl.fd = fd
    return pl


def landed(pl, upto):
    """Waits until pl's first upto bytes are here and checked; pl.have
    says how many are.  OSError(EIO) if its pull failed."""
    if pl.have < upto:
        buf = bytearray(struct.pack("<Q", upto))
        ioctl.call(pl.fd, LANDED, buf)
        pl.have = struct.unpack("<Q", buf)[0]
        if pl.have < upto or pl.have > pl.size:
            raise OSError(errno.EPROTO, "omnifs: a bad landed answer")


def copy_window(fd, pool, alloc):
    """A streamed object's bytes (another node's, over 65 MiB), copied out
    of the reader's window in pool (its daemon's Pool, mapped here) range
    by range as each lands (OMNIFS_IOC_WINDOW), into alloc(size, its first
    bytes); None, with nothing read, when the daemon cannot hand it over
    (read instead), OSError(EIO) when a pull failed, as a read would.
    Meanwhile a read(2) of fd fails with EBUSY: one reader per descriptor."""
    buf = bytearray(_WIN.size)

    def window(off, want=1):
        _WIN.pack_into(buf, 0, off, want, 0, 0)
        ioctl.call(fd, WINDOW, buf)
        _, n, at, size = _WIN.unpack(buf)
        if at > pool.size or n > pool.size - at or off + n > size:
            raise OSError(errno.EPROTO, "omnifs: a bad window answer")
        return pool.addr + at, n, size
    try:
        src, n, size = window(0, 64)    # and the head alloc() looks at
    except OSError as e:
        if e.errno in (errno.EIO, errno.EPROTO):
            raise
        return None                     # nothing asked: read instead
    dest = alloc(size, ctypes.string_at(src, min(n, 64)))
    mv = memoryview(dest).cast("B")
    at, a = 0, _addr(mv)
    if a is None or len(mv) != size:
        raise OSError(errno.EINVAL, "omnifs: alloc gave no buffer of %d bytes" % size)
    # Not faulted in first, as copy_out's destination is: the window holds
    # 8 MiB, and its pulls would wait while the pages of the rest are.
    while n:
        ctypes.memmove(a + at, src, n)          # releases the GIL
        at += n
        src, n, _ = window(at)
    if at != size:
        raise OSError(errno.EIO, "omnifs: a window ended at %d of %d bytes" % (at, size))
    return dest


def place(fd, size):
    """Makes the new object on writer fd size bytes long; its Place.  fd
    must never be duplicated (dup, fork): its close publishes, and the
    daemon does not look through this process's descriptors for another
    one (OMNIFS_PLACE_SOLE)."""
    return _ask(fd, PLACE, size, SOLE)


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

# Every copy goes in the calling thread.  A get's destination is fresh
# memory: the pages a thread faults in come warm from what its own CPU
# freed last, another CPU's from the rest, which a VM with free page
# reporting (virtio-balloon) has handed back to its host; a 64 MiB get
# took 70 ms in two threads on this machine, 5.7 in one (a 4 ms copy once
# the pages are in).  A put's goes in PLACED_STEP pieces, each hashed by
# the daemon on another core while the next one is copied.


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


def _memmove(dst, src):
    """Copies pieces src to pieces dst, both (addr, len) lists; the bytes
    moved."""
    i = j = di = si = moved = 0
    while i < len(dst) and j < len(src):
        n = min(dst[i][1] - di, src[j][1] - si)
        ctypes.memmove(dst[i][0] + di, src[j][0] + si, n)     # releases the GIL
        moved, di, si = moved + n, di + n, si + n
        if di == dst[i][1]:
            i, di = i + 1, 0
        if si == src[j][1]:
            j, si = j + 1, 0
    return moved


def _copy(move, local, remote, a, b, head=None):
    """Copies bytes [a, b) between local and remote, each (addr, len)
    pieces laid end to end, with move(local_pieces, remote_pieces) (a
    process_vm_ call, or a memmove either way); head, a (local, remote)
    pair of 8 bytes, goes in the same call.  True if every byte went."""
    lo, re = _span(local, a, b), _span(remote, a, b)
    if head:
        lo, re = [head[0]] + lo, [head[1]] + re
    return move(lo, re) == sum(ln for _, ln in lo)


def _readv(pid, local, remote):
    return _vm(_LIBC.process_vm_readv, pid, local, remote)


def _mapped(pl):
    """pl's pieces as this process's addresses, where its daemon's pool is
    mapped here (pl.pool, set by the caller), else None."""
    return pl.pool.local(pl.ext) if pl.pool is not None else None


def _populate(at, size):
    """Faults in [at, at+size) for writing now (advice: nothing happens
    where the kernel cannot)."""
    if _BYTEARRAY is not None and size:
        lo = at // _PAGE * _PAGE
        _BYTEARRAY[1](lo, at + size - lo, MADV_POPULATE_WRITE)


def copy_out(pl, dest, skip=0):
    """Fills the writable buffer dest with the object's bytes from `skip`
    on, each range once it has landed.  True if all came, from the daemon
    that answered (process_vm_readv checks its cookie in the same call; a
    mapped pool was checked once); OSError(EIO) if its pull failed, as a
    read would."""
    mv = memoryview(dest).cast("B")
    want = len(mv)
    if want > pl.size - skip:
        return False
    a = _addr(mv) if want else 0
    if a is None:
        return False
    local = [(a, want)] if want else []
    pool = _mapped(pl)
    cookie = ctypes.c_uint64(0)
    if pool is not None:
        move, remote, head = _memmove, _span(pool, skip, skip + want), None
    else:
        move = lambda lo, re: _readv(pl.pid, lo, re)    # noqa: E731
        remote = _span(pl.ext, skip, skip + want)
        head = ((ctypes.addressof(cookie), 8), (pl.cookie_addr, 8))
    if pl.have < skip + want:
        _populate(a, want)
    at = 0
    while True:
        landed(pl, skip + min(want, at + LAND_STEP))
        upto = min(want, pl.have - skip)
        if not _copy(move, local, remote, at, upto, head):
            return False
        if head and cookie.value != pl.cookie:
            return False
        if upto == want:
            return True
        at = upto


def _writer(pl):
    """How copy_in moves (local, remote) pieces into pl's pool, remote
    addressed as the mapping's or the daemon's; None when the daemon is
    not the one that answered."""
    pool = _mapped(pl)
    if pool is not None:
        return (lambda lo, re: _memmove(re, lo)), pool
    if (pl.pid, pl.cookie) not in _verified:
        cookie = ctypes.c_uint64(0)
        if (_readv(pl.pid, [(ctypes.addressof(cookie), 8)], [(pl.cookie_addr, 8)]) != 8
                or cookie.value != pl.cookie):
            return None
        _verified.add((pl.pid, pl.cookie))
    return (lambda lo, re: _vm(_LIBC.process_vm_writev, pl.pid, lo, re)), pl.ext


def copy_in(pl, pieces, fd=None):
    """Copies bytes-like pieces (pl.size bytes in all) into the placed
    object.  True if all went, to the daemon that answered.  With the
    writer's fd, a large object goes in PLACED_STEP pieces, each said to be
    in (OMNIFS_IOC_PLACED) as it lands: the daemon hashes it on another
    core while the next one is copied, instead of all of it at the close."""
    how = _writer(pl)
    if how is None:
        return False
    move, remote = how
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
        if not _copy(move, local, remote, at, end):
            return False
        if tell and end < pl.size:
            try:
                fcntl.ioctl(fd, PLACED, struct.pack("<Q", end))
            except OSError:     # a daemon without it: the close hashes all
                tell = False
    return True
