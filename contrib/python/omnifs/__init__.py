"""omnifs from Python: a mounted omnifs through plain files.

    m = omnifs.Mount("/mnt/omni")
    m.put("0", "1", "req-7", b"...")          # write + close: published
    data = m.get("0", "1", "req-7", timeout=5) # waits inside open(), no polling

Errors are Python's own OSErrors with omnifs' errno (SPEC §9):
FileNotFoundError when a key is not published within the wait,
FileExistsError for a key that exists, OSError(EINVAL) for a bad name.
"""
import errno
import json
import math
import os
import re

__all__ = ["Mount", "WAIT_XATTR"]

# Set on the mount's root, it arms the calling thread's next open with a
# wait of its own (README, "Waiting").
WAIT_XATTR = "user.omni.wait_ms"
_STAGE = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")


def _bad(what, name):
    return OSError(errno.EINVAL, "omnifs: bad %s %r" % (what, name))


class Mount:
    """One omnifs mount point."""

    def __init__(self, path):
        self.root = os.fspath(path)
        if not os.path.isfile(os.path.join(self.root, ".omni", "health")):
            raise OSError(errno.ENOTCONN, "omnifs: %s is not an omnifs mount" % self.root)

    def path(self, from_stage, to_stage, key):
        """The file of a key; OSError(EINVAL) for names SPEC §3 refuses."""
        for s in (from_stage, to_stage):
            if not isinstance(s, str) or not _STAGE.match(s) or s.startswith("."):
                raise _bad("stage", s)
        if (not isinstance(key, str) or not key or "/" in key or "\0" in key
                or key.startswith(".") or len(key.encode()) > 255):
            raise _bad("key", key)
        return os.path.join(self.root, from_stage, to_stage, key)

    def put(self, from_stage, to_stage, key, data, readers=None):
        """Writes and publishes data (bytes-like, or a list of bytes-like
        pieces written one after the other); its size.  readers: how many
        complete reads consume it (0 keeps it until removed)."""
        p = self.path(from_stage, to_stage, key)
        pieces = data if isinstance(data, (list, tuple)) else [data]
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        total = 0
        try:
            if readers is not None:
                os.setxattr(fd, "user.omni.readers", str(int(readers)).encode())
            for piece in pieces:
                view, done = memoryview(piece).cast("B"), 0
                while done < len(view):
                    done += os.write(fd, view[done:])
                total += done
        except BaseException:
            os.close(fd)            # unpublished: a torn write is never seen
            raise
        os.close(fd)                # publishes; EIO/ENOSPC surface here
        return total

    def _arm(self, timeout):
        if timeout is not None:
            ms = max(1, math.ceil(float(timeout) * 1000))
            os.setxattr(self.root, WAIT_XATTR, str(ms).encode())

    def get(self, from_stage, to_stage, key, timeout=None):
        """The bytes of a key (a bytearray), waiting inside open() until it is
        published: timeout seconds, or the edge's wait_ms if None."""
        p = self.path(from_stage, to_stage, key)
        if timeout is not None and timeout <= 0:
            raise FileNotFoundError(errno.ENOENT, "omnifs: no time left to wait", p)
        self._arm(timeout)
        with open(p, "rb", buffering=0) as f:
            # An object's size is known at open; a view's stat may say 0
            # (it is made at open): then read to the end.
            size = os.fstat(f.fileno()).st_size
            buf, got = bytearray(size or 1 << 20), 0
            while True:
                if got == len(buf):
                    if size:
                        return buf
                    buf.extend(bytes(len(buf)))
                with memoryview(buf) as view:
                    n = f.readinto(view[got:])
                if not n:
                    break
                got += n
            if size and got != size:
                raise OSError(errno.EIO, "omnifs: %s ended at %d of %d bytes" % (p, got, size))
            del buf[got:]
            return buf

    def view(self, from_stage, to_stage, key, rank, of, timeout=None):
        """Rank `rank` of `of` of a KV payload's shards (SPEC §5)."""
        return self.get(from_stage, to_stage, "%s.rank%dof%d" % (key, rank, of), timeout)

    def remove(self, from_stage, to_stage, key):
        os.unlink(self.path(from_stage, to_stage, key))

    def keys(self, from_stage, to_stage):
        """The published keys of an edge, on every node."""
        try:
            return sorted(os.listdir(os.path.join(self.root, from_stage, to_stage)))
        except FileNotFoundError:
            return []

    def edges(self):
        """(from, to) of every edge that holds objects, on every node."""
        out = []
        for f in os.listdir(self.root):
            if f.startswith("."):
                continue
            for t in os.listdir(os.path.join(self.root, f)):
                out.append((f, t))
        return out

    def health(self):
        with open(os.path.join(self.root, ".omni", "health"), "rb") as f:
            return json.load(f)

    def stats(self):
        out = {}
        with open(os.path.join(self.root, ".omni", "stats")) as f:
            for line in f:
                k, _, v = line.partition(":")
                try:
                    out[k.strip()] = int(v)
                except ValueError:
                    out[k.strip()] = v.strip()
        return out
