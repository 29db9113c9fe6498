"""cuda - a GPU pool's objects, copied device to device (README, "GPU pools").

Where a node's pool is GPU memory (pool=cuda:DEV:SIZE), OMNIFS_IOC_CUDA on
a reader's descriptor says where the object lies in the pool and gives the
pool's CUDA IPC handle (fs/direct.h).  This process opens the pool once,
with the driver's cuIpcOpenMemHandle, and copies the bytes straight into
its own GPU memory: no byte crosses to the host.  The descriptor's close
then counts as a complete read, as a read to the end would.  A writer
does the same the other way: OMNIFS_IOC_CUDA_PLACE on its new object's
descriptor says where its bytes go, it copies them in, and its close
publishes them.

The driver is libcuda.so.1, taken with ctypes; torch, when importable,
gives the GPU memory the bytes land in.  Answered to root and the
daemon's user only (EPERM): the handle reaches the whole pool.
"""
import ctypes
import errno
import os
import struct
import threading

from . import ioctl

MAGIC = 0x4155434F
EXT = 60
SOLE = 1                                # OMNIFS_PLACE_SOLE, as direct.SOLE
_HEAD = struct.Struct("<IIQQ64sII")    # magic dev size xxh3 handle n flags
_EXT = struct.Struct("<QQ")             # off len, into the pool
SIZE = _HEAD.size + EXT * _EXT.size
IOC = (2 << 30) | (SIZE << 16) | (ord("O") << 8) | 0x14    # _IOR('O', 0x14, ...)
PLACE_IOC = (3 << 30) | (SIZE << 16) | (ord("O") << 8) | 0x16     # _IOWR('O', 0x16, ...)


class Where:
    """Where an object lies in a GPU pool."""

    def __init__(self, dev, handle, size, xxh3, extents):
        self.dev, self.handle, self.size, self.xxh3 = dev, handle, size, xxh3
        self.extents = extents          # [(pool offset, length)], in order


def _ask(fd, cmd, size, flags=0):
    buf = bytearray(SIZE)
    _HEAD.pack_into(buf, 0, MAGIC, 0, size, 0, b"", 0, flags)
    ioctl.call(fd, cmd, buf)
    magic, dev, size, xxh3, handle, n, _ = _HEAD.unpack_from(buf)
    if magic != MAGIC or n > EXT:
        raise OSError(errno.EPROTO, "omnifs: a bad OMNIFS_IOC_CUDA answer")
    ext = [_EXT.unpack_from(buf, _HEAD.size + i * _EXT.size) for i in range(n)]
    if sum(ln for _, ln in ext) != size:
        raise OSError(errno.EPROTO, "omnifs: OMNIFS_IOC_CUDA's extents do not add up")
    return Where(dev, bytes(handle), size, xxh3, ext)


def where(fd):
    """The object open at fd in a GPU pool; OSError as the ioctl fails
    (EOPNOTSUPP: not a GPU pool; EREMOTE: its bytes are elsewhere)."""
    return _ask(fd, IOC, 0)


def place(fd, size):
    """Makes the new object on writer fd size bytes long, in the GPU pool;
    where its bytes go.  OSError as the ioctl fails (EOPNOTSUPP: not a GPU
    pool; EBUSY: already written to).  fd must never be duplicated: its
    close publishes (direct.SOLE)."""
    return _ask(fd, PLACE_IOC, size, SOLE)


def _pieces(extents, at, n):
    """(pool offset, offset in the caller's n bytes, length) of the object's
    bytes [at, at + n), through its extents."""
    out, pos = [], 0
    for off, ln in extents:
        lo, hi = max(at, pos), min(at + n, pos + ln)
        if lo < hi:
            out.append((off + lo - pos, lo - at, hi - lo))
        pos += ln
    return out


class _Handle(ctypes.Structure):    # CUipcMemHandle, passed by value
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


class Driver:
    """The few calls of the CUDA driver API this needs, and the pools this
    process has opened (one cuIpcOpenMemHandle each, kept)."""

    _lock = threading.Lock()
    _one = None

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle,
                                                   ctypes.c_uint]
        self.lib.cuMemcpyDtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t]
        self.lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self.lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        self._check(self.lib.cuInit(0), "cuInit")
        self.ctx, self.pools = {}, {}

    @classmethod
    def get(cls):
        with cls._lock:
            if cls._one is None:
                cls._one = cls()
            return cls._one

    @staticmethod
    def _check(rc, what):
        if rc:
            raise OSError(errno.EIO, "omnifs: CUDA %s failed (error %d)" % (what, rc))

    def _current(self, dev):
        """Makes dev's primary context (the one torch uses) current."""
        if dev not in self.ctx:
            d, c = ctypes.c_int(), ctypes.c_void_p()
            self._check(self.lib.cuDeviceGet(ctypes.byref(d), dev), "cuDeviceGet")
            self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(c), d),
                        "cuDevicePrimaryCtxRetain")
            self.ctx[dev] = c
        self._check(self.lib.cuCtxSetCurrent(self.ctx[dev]), "cuCtxSetCurrent")

    def pool(self, w):
        """The device address of w's pool in this process."""
        with self._lock:
            self._current(w.dev)
            if w.handle not in self.pools:
                p = ctypes.c_uint64()
                self._check(self.lib.cuIpcOpenMemHandle_v2(
                    ctypes.byref(p), _Handle.from_buffer_copy(w.handle), 1), "cuIpcOpenMemHandle")
                self.pools[w.handle] = p.value
            return self.pools[w.handle]

    def to_device(self, w, dst):
        """Copies the object to GPU memory at device address dst, and waits
        for the copy: the caller's close lets the daemon reuse the bytes."""
        base, at = self.pool(w), 0
        for off, ln in w.extents:
            self._check(self.lib.cuMemcpyDtoD_v2(dst + at, base + off, ln), "cuMemcpyDtoD")
            at += ln
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

    def from_device(self, w, src, n, at=0):
        """Copies n bytes of GPU memory at device address src into the
        placed object w from its byte at on, and waits for the copies: the
        close that follows publishes them."""
        base = self.pool(w)
        for off, i, ln in _pieces(w.extents, at, n):
            self._check(self.lib.cuMemcpyDtoD_v2(base + off, src + i, ln), "cuMemcpyDtoD")
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

    def from_host(self, w, buf, at=0):
        """As from_device, from host memory buf (its bytes)."""
        base, n = self.pool(w), len(buf)
        addr = ctypes.addressof((ctypes.c_char * n).from_buffer(buf)) if n else 0
        for off, i, ln in _pieces(w.extents, at, n):
            self._check(self.lib.cuMemcpyHtoD_v2(base + off, addr + i, ln), "cuMemcpyHtoD")
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

    def to_host(self, w, buf):
        """Copies the object into writable host memory buf (its bytes)."""
        base, at = self.pool(w), 0
        addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
        for off, ln in w.extents:
            self._check(self.lib.cuMemcpyDtoH_v2(addr + at, base + off, ln), "cuMemcpyDtoH")
            at += ln


def get_tensor(fd, dev):
    """The object open at fd as a torch uint8 tensor on GPU dev, the
    pool's (health's pool.device), copied device to device.  The tensor
    is taken before where() is asked, which makes the close a complete
    read: a GPU short of memory leaves the object for the next reader.
    OSError as where() raises it."""
    import torch
    out = torch.empty(os.fstat(fd).st_size, dtype=torch.uint8, device="cuda:%d" % dev)
    w = where(fd)
    if w.dev != dev or w.size != out.numel():
        raise OSError(errno.EPROTO, "omnifs: the object is %d bytes on GPU %d, not %d on %d"
                      % (w.size, w.dev, out.numel(), dev))
    if w.size:
        Driver.get().to_device(w, out.data_ptr())
    return out


def get_bytes(fd):
    """The object open at fd, copied out of the GPU pool into a bytearray."""
    w = where(fd)
    buf = bytearray(w.size)
    if w.size:
        Driver.get().to_host(w, buf)
    return buf


def put_tensor(fd, tensor, head=b""):
    """Fills the new object on writer fd with head and then a GPU tensor's
    bytes, copied device to device into the pool; the caller's close
    publishes them.  OSError as place() raises it, before anything is
    written."""
    t = tensor.detach().contiguous()
    n = t.numel() * t.element_size()
    w = place(fd, len(head) + n)
    if head:
        os.pwrite(fd, head, 0)
    if n:
        Driver.get().from_device(w, t.data_ptr(), n, len(head))


def put_bytes(fd, data):
    """Fills the new object on writer fd with host bytes, copied into the
    GPU pool by this process (tests; put_tensor is the way for tensors)."""
    buf = bytearray(data)
    w = place(fd, len(buf))
    if buf:
        Driver.get().from_host(w, buf)
