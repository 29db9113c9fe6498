"""small - small objects in one request each (README, "Small objects").

A put of a few KiB through open, write and close is five FUSE requests
(two lookups, create, write, flush) and a get four (open, read, flush,
release), each a trip through the kernel and a daemon thread.  One ioctl
on the edge's directory does either: OMNIFS_IOC_PUT creates, writes and
publishes (an O_CREAT|O_EXCL create and a close), OMNIFS_IOC_GET waits
like a plain open, reads the object whole and closes it.  The layout is
fs/direct.h's.  A GET that cannot answer here (larger than its buffer,
bytes on another node, a view) consumes nothing: the caller opens and
reads instead.

Both requests are made by omnifs._small, a C extension built with the
package (pip install, make install, make python), where it was built: a
worker's put and get after idle time run with cold caches, where the
ctypes path's Python steps cost some 35 us of a 0.23 ms hand-off.  Where
it was not (no compiler, no Python headers) the same bytes go through
ctypes (native is None).
"""
import errno
import fcntl
import math
import struct
import time

from .ioctl import call_ready, ioc, thread_buffer

try:
    from . import _small as native
except ImportError:
    native = None

MAGIC = 0x4C4D534F
_HEAD = struct.Struct("<IIQqqQ")    # magic key_len size readers wait_ms xxh3
HEAD = _HEAD.size
MAX = (1 << 14) - 1                 # the ioctl size field's 14 bits
# GET answers meaning "open and read this one instead".
FALLBACK = (errno.E2BIG, errno.EREMOTE, errno.EOPNOTSUPP)
# Answers meaning "not this way, ever, here" (a daemon without them).
NEVER = (errno.ENOTTY, errno.ENOSYS)


_GET = ioc(3, 0x13, MAX)
_PUT = ioc(1, 0x12, 0)         # | the size << 16
_UNWAIT = ioc(0, 0x1c, 0)


def put(dirfd, k, views, total, readers=None):
    """Publishes the bytes of views (bytes-like, total in all, and at most
    MAX with HEAD and the key) as the key k (its UTF-8 bytes) in the edge
    open at dirfd.  OSError as a create and close would raise."""
    if native is not None:
        native.put(dirfd, k, views[0] if len(views) == 1 else b"".join(views),
                   -1 if readers is None else int(readers))
        return
    # The kernel only reads a PUT's argument: one new bytes object, whose
    # address ctypes passes as it is, costs fewer cold steps than filling
    # the thread's buffer (20 us against 33 here).
    arg = b"".join((_HEAD.pack(MAGIC, len(k), total, -1 if readers is None else int(readers),
                               0, 0), k, *views))
    call_ready(dirfd, _PUT | len(arg) << 16, arg)


def get(dirfd, key, wait_ms):
    """The bytes of key (a bytearray), waited for up to wait_ms (0: the
    edge's wait) and read whole; OSError as an open and read would raise,
    or with an errno in FALLBACK."""
    k = key.encode()
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        try:
            if native is not None:
                return native.get(dirfd, k, int(wait_ms))
            return _get(dirfd, k, wait_ms)
        except OSError as e:
            # Again, for the wait that is left: after a signal, or where
            # the daemon cut the wait short (ETIME), as it does where the
            # kernel would abort a request that waits too long (README,
            # "Waiting").
            if not isinstance(e, InterruptedError) and e.errno != errno.ETIME:
                raise
            left = deadline - time.monotonic()
            if wait_ms and left > 0.001:
                wait_ms = math.ceil(left * 1000)
                continue
            raise FileNotFoundError(errno.ENOENT, "omnifs: %s not published in time" % key)


def unwait(dirfd):
    """Ends the GETs that wait through the edge open at dirfd, and every
    later one through it, with ECANCELED: how many it ended.  OSError
    (ENOTTY from a daemon without it)."""
    return fcntl.ioctl(dirfd, _UNWAIT)


def _get(dirfd, k, wait_ms):
    """One GET through ctypes: what native.get does."""
    b = thread_buffer(MAX)
    _HEAD.pack_into(b.mv, 0, MAGIC, len(k), 0, 0, int(wait_ms), 0)
    b.mv[HEAD:HEAD + len(k)] = k
    call_ready(dirfd, _GET, b.ptr, retry=False)
    magic, _, got, _, _, _ = _HEAD.unpack_from(b.mv)
    if magic != MAGIC or got > MAX - HEAD:
        raise OSError(errno.EPROTO, "omnifs: a bad small answer")
    return bytearray(b.mv[HEAD:HEAD + got])
