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
"""
import ctypes
import errno
import math
import struct
import time

from .ioctl import call_ready, ioc, thread_buffer

MAGIC = 0x4C4D534F
_HEAD = struct.Struct("<IIQqqQ")    # magic key_len size readers wait_ms xxh3
HEAD = _HEAD.size
MAX = (1 << 14) - 1                 # the ioctl size field's 14 bits
# GET answers meaning "open and read this one instead".
FALLBACK = (errno.E2BIG, errno.EREMOTE, errno.EOPNOTSUPP)
# Answers meaning "not this way, ever, here" (a daemon without them).
NEVER = (errno.ENOTTY, errno.ENOSYS)


_GET = ctypes.c_ulong(ioc(3, 0x13, MAX))
_PUT = ioc(1, 0x12, 0)         # | the size << 16


def room(key):
    """The most bytes a put of key can carry."""
    return MAX - HEAD - (len(key) if key.isascii() else len(key.encode()))


def put(dirfd, key, views, total, readers=None):
    """Publishes the bytes of views (bytes-like, total in all) as key in
    the edge open at dirfd.  OSError as a create and close would raise."""
    k = key.encode()
    n = HEAD + len(k) + total
    b = thread_buffer(MAX)
    _HEAD.pack_into(b.mv, 0, MAGIC, len(k), total, -1 if readers is None else int(readers), 0, 0)
    b.mv[HEAD:HEAD + len(k)] = k
    at = HEAD + len(k)
    for v in views:
        b.mv[at:at + len(v)] = v
        at += len(v)
    call_ready(dirfd, ctypes.c_ulong(_PUT | n << 16), b.ptr)


def get(dirfd, key, wait_ms):
    """The bytes of key (a bytearray), waited for up to wait_ms (0: the
    edge's wait) and read whole; OSError as an open and read would raise,
    or with an errno in FALLBACK."""
    k = key.encode()
    b = thread_buffer(MAX)
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        _HEAD.pack_into(b.mv, 0, MAGIC, len(k), 0, 0, int(wait_ms), 0)
        b.mv[HEAD:HEAD + len(k)] = k
        try:
            call_ready(dirfd, _GET, b.ptr, retry=False)
            break
        except InterruptedError:        # again, for the wait that is left
            if wait_ms:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FileNotFoundError(errno.ENOENT, "omnifs: %s not published in time" % key)
                wait_ms = math.ceil(left * 1000)
    magic, _, got, _, _, _ = _HEAD.unpack_from(b.mv)
    if magic != MAGIC or got > MAX - HEAD:
        raise OSError(errno.EPROTO, "omnifs: a bad small answer")
    return bytearray(b.mv[HEAD:HEAD + got])
