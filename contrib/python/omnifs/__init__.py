"""omnifs from Python: a mounted omnifs through plain files.

    m = omnifs.Mount("/mnt/omni")
    m.put("0", "1", "req-7", b"...")          # write + close: published
    data = m.get("0", "1", "req-7", timeout=5) # waits inside open(), no polling

Small objects (up to 16 KiB) go in one request each way (omnifs.small).
On the node that holds an object, get() and large put()s copy its bytes
straight from and into the daemon's pool (omnifs.direct) when this process
may (root, or the daemon's user); elsewhere they read and write the file.
get_cuda() gives a GPU tensor, copied device to device out of a pool of GPU
memory, and put_cuda() publishes one copied device to device into it
(omnifs.cuda).

Errors are Python's own OSErrors with omnifs' errno (SPEC §9):
FileNotFoundError when a key is not published within the wait,
FileExistsError for a key that exists, OSError(EINVAL) for a bad name.
"""
import errno
import json
import math
import numbers
import operator
import os
import re
import struct
import threading
import weakref

from . import cuda, direct, ioctl, small

# put_cuda's "not this way here": a pool of host memory, a daemon without
# the ioctl, a process that may not reach the pool.
_NOT_HERE = (errno.EOPNOTSUPP, errno.ENOTTY, errno.EPERM)

__all__ = ["Mount", "WAIT_XATTR"]

# Set on the mount's root, it arms the calling thread's next open with a
# wait of its own (README, "Waiting").
WAIT_XATTR = "user.omni.wait_ms"
_STAGE = re.compile(r"[A-Za-z0-9_.-]+\Z")         # 1 to 64 of them (_edge_path)
# Smaller puts write(): one request either way, and the daemon hashes
# written bytes as they come.
DIRECT_PUT_MIN = 64 << 10
# OMNIFS_IOC_CLEANUP's header (fs/direct.h): magic id_len removed missed.
_CLEANUP = struct.Struct("<IIQQ")
_CLEANUP_MAGIC = 0x4E4C434F
# get()'s alloc chooses buffers this large, shown an object's first HEAD
# bytes; smaller ones are bytearrays, with no extra read for the head.
ALLOC_MIN = 1 << 20
HEAD = 64


def _open_size(f):
    """The size of the object open as f; 0 if unknown.  On a kernel
    before Linux 6.16, an object that another node removed or consumed
    since the open answers fstat() with ENOENT (README, "Consume"), and
    reads every byte."""
    try:
        return os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return 0


def _bad(what, name, err=errno.EINVAL):
    why = "bad" if err == errno.EINVAL else "too long a"
    return OSError(err, "omnifs: %s %s %r" % (why, what, name))


def _key(key):
    """key, if SPEC §3 allows it; OSError(EINVAL) if not, or
    OSError(ENAMETOOLONG) for one over 255 bytes, as the filesystem says."""
    if type(key) is not str or not key or key[0] == "." or "/" in key or "\0" in key:
        raise _bad("key", key)
    if len(key) > 63 and len(key.encode()) > 255:         # 63 * 4 < 255
        raise _bad("key", key, errno.ENAMETOOLONG)
    return key


def _readers(n):
    """n as the count of complete reads that consume an object: None (the
    edge's own) or an int >= 0; ValueError for anything else (-1 would
    have meant the edge's own to the daemon, quietly)."""
    if n is None:
        return None
    try:
        k = operator.index(n)       # an int, numpy's too; not 1.5 or "2"
    except TypeError:
        k = -1
    if isinstance(n, bool) or k < 0:
        raise ValueError("omnifs: readers must be an integer >= 0, not %r" % (n,))
    return k


def _seconds(t):
    """A get's timeout: None (the edge's wait_ms) or a finite number."""
    if t is None:
        return None
    # float and int first: the check against numbers.Real, an ABC, cost
    # a get 11 us more here with the caches cold after idle time.
    real = type(t) is float or type(t) is int or (
        not isinstance(t, bool) and isinstance(t, numbers.Real))
    if not real or not math.isfinite(t):
        raise ValueError("omnifs: timeout must be a finite number of seconds or None, not %r"
                         % (t,))
    return t


def _fresh(size, head):
    """get()'s buffer where its caller gives no alloc."""
    return direct.fresh_bytearray(size)


def _pieces(data):
    """data as bytes-like pieces, and their total size."""
    try:
        views = [p if type(p) is bytes or type(p) is bytearray else memoryview(p).cast("B")
                 for p in (data if isinstance(data, (list, tuple)) else (data,))]
    except TypeError:
        raise TypeError("omnifs: put takes bytes-like data or a list of them, not %s"
                        % type(data).__name__) from None
    return views, sum(map(len, views))


def _close_edges(edges, stale, lock):
    """Closes a Mount's edge descriptors, kept and stale, emptying the two
    in place (its finalizer holds them, not the Mount).  The gets waiting
    through them end first (ECANCELED): a thread blocked in the daemon
    could be woken by nothing else, and would hold its wait there until
    its timeout."""
    with lock:
        fds = list(edges.values()) + stale
        edges.clear()
        stale.clear()
    for fd in fds:
        try:
            small.unwait(fd)
        except OSError:         # an older daemon, or one gone: nothing waits
            pass
        os.close(fd)


class Mount:
    """One omnifs mount point."""

    def __init__(self, path):
        self.root = os.fspath(path)
        if not os.path.isfile(os.path.join(self.root, ".omni", "health")):
            raise OSError(errno.ENOTCONN, "omnifs: %s is not an omnifs mount" % self.root)
        self.direct = direct.available()
        self.soon = True            # the daemon answers WHERE_SOON
        self.small = True
        self._edges = {}            # (from, to): an open descriptor of the edge
        self._edges_lock = threading.Lock()
        self._stale = []            # edge descriptors of a daemon gone
        self._pool = None           # ((pid, cookie), direct.Pool or None)
        self._gpu_dev = None        # the pool's GPU for get_cuda, -1: not one; None: ask
        # One dropped without close() closes them all the same: a worker
        # that makes a Mount (or a connector) per request must not run out
        # of descriptors.  Not at exit, which closes them anyway, where a
        # daemon thread may still be using one.  (The pool's mapping has
        # its own finalizer.)
        weakref.finalize(self, _close_edges, self._edges, self._stale,
                         self._edges_lock).atexit = False

    def close(self):
        """Closes the edges' descriptors and lets the pool's mapping go;
        the Mount stays usable.  A get that waits meanwhile raises
        OSError(ECANCELED)."""
        self._pool = None
        _close_edges(self._edges, self._stale, self._edges_lock)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _edge(self, from_stage, to_stage):
        """The edge's open descriptor; OSError(EINVAL) for bad stage names.
        Only good names are ever kept, so a kept pair needs no check."""
        try:
            return self._edges[from_stage, to_stage]
        except (KeyError, TypeError):
            pass
        fd = os.open(self._edge_path(from_stage, to_stage),
                     os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        with self._edges_lock:
            fd, extra = self._edges.setdefault((from_stage, to_stage), fd), fd
        if extra != fd:
            os.close(extra)         # another thread opened it first
        return fd

    def _on_edge(self, from_stage, to_stage, fn, *args):
        """fn(the edge's descriptor, *args), and once more with a new one if
        the kept one is of a daemon that has gone (ENOTCONN): the mount's
        daemon restarted since.  The old one is closed only by close():
        another thread may be using its number still."""
        fd = self._edge(from_stage, to_stage)
        try:
            return fn(fd, *args)
        except OSError as e:
            if e.errno != errno.ENOTCONN:
                raise
        with self._edges_lock:
            if self._edges.get((from_stage, to_stage)) == fd:
                self._stale.append(self._edges.pop((from_stage, to_stage)))
        return fn(self._edge(from_stage, to_stage), *args)

    # The small paths are what a 4 KiB hand-off runs, with the caches cold
    # after the caller's idle time, where every Python step costs micro-
    # seconds: they check a key without building its path, reuse the
    # edge's descriptor, and make the path only for an error's message.

    def _small_put(self, from_stage, to_stage, k, views, total, readers):
        """True if put in one request; False: write the file instead."""
        try:
            self._on_edge(from_stage, to_stage, small.put, k, views, total, readers)
            return True
        except OSError as e:
            if e.errno not in small.NEVER:
                raise OSError(e.errno, e.strerror,
                              self.path(from_stage, to_stage, k.decode())) from None
            self.small = False
            return False

    def _small_get(self, from_stage, to_stage, key, timeout):
        """The bytes of a small object, or None: open and read it instead."""
        ms = 0 if timeout is None else max(1, math.ceil(float(timeout) * 1000))
        try:
            return self._on_edge(from_stage, to_stage, small.get, key, ms)
        except OSError as e:
            if e.errno in small.NEVER:
                self.small = False
            elif e.errno not in small.FALLBACK:
                raise OSError(e.errno, e.strerror, self.path(from_stage, to_stage, key)) from None
            return None

    def _direct(self, fn, *args):
        """A Place from where()/place(), or None to read and write instead
        (for good when the answer will not change here).  ENOSPC raises."""
        if not self.direct:
            return None
        try:
            pl = fn(*args)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise
            if direct.never(e):
                self.direct = False
            return None
        pl.pool = self._mapped_pool(args[0], (pl.pid, pl.cookie))
        return pl

    def _share(self, fd):
        """The pool of the daemon behind fd, mapped here (as _mapped_pool),
        or None."""
        try:
            return self._mapped_pool(fd, direct.share_key(fd))
        except OSError:
            return None

    def _mapped_pool(self, fd, key):
        """The pool of the daemon whose (pid, cookie) is key, mapped here
        once (the copies are then memmoves), or None: it does not share it,
        or this process cannot map it.  A daemon that restarted has another
        cookie: the old pool's mapping goes, and its memory with it."""
        cur = self._pool
        if cur is not None and cur[0] == key:
            return cur[1]
        try:
            pool = direct.Pool(fd)
            if (pool.pid, pool.cookie) != key:
                pool = None
        except OSError:
            pool = None
        self._pool = (key, pool)
        return pool

    def path(self, from_stage, to_stage, key):
        """The file of a key; OSError(EINVAL) for names SPEC §3 refuses,
        OSError(ENAMETOOLONG) for ones over its lengths."""
        return os.path.join(self._edge_path(from_stage, to_stage), _key(key))

    def _edge_path(self, from_stage, to_stage):
        for s in (from_stage, to_stage):
            if not isinstance(s, str) or not _STAGE.match(s) or s.startswith("."):
                raise _bad("stage", s)
            if len(s) > 64:
                raise _bad("stage", s, errno.ENAMETOOLONG)
        return os.path.join(self.root, from_stage, to_stage)

    def put(self, from_stage, to_stage, key, data, readers=None):
        """Writes and publishes data (bytes-like, or a list of bytes-like
        pieces written one after the other); its size.  readers: how many
        complete reads consume it (0 keeps it until removed)."""
        # The common small put in one step: plain bytes, on an edge open
        # already, the edge's readers.  Each Python call between a worker's
        # put() and the ioctl cost some 7 us with the caches cold after
        # idle time, eight of them a third of a 4 KiB hand-off; the daemon
        # checks the key as _key() does.  Any failure goes the whole way
        # below, which says why, or writes the file instead: a PUT that
        # failed made nothing.
        fd = self._edges.get((from_stage, to_stage))
        if (fd is not None and readers is None and type(data) is bytes and self.small
                and small.native is not None and len(data) < small.MAX):
            try:
                small.native.put(fd, key.encode(), data, -1)
                return len(data)
            except (OSError, AttributeError, UnicodeError):
                pass
        # Plain bytes are counted and copied as they are (a view of each
        # costs microseconds with the caches cold); anything else as bytes.
        if type(data) is bytes or type(data) is bytearray:
            views, total = (data,), len(data)
        else:
            views, total = _pieces(data)
        readers = _readers(readers)
        if self.small:
            k = _key(key).encode()
            if (small.HEAD + len(k) + total <= small.MAX
                    and self._small_put(from_stage, to_stage, k, views, total, readers)):
                return total
        p = self.path(from_stage, to_stage, key)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if readers is not None:
                os.setxattr(fd, "user.omni.readers", str(readers).encode())
            pl = self._direct(direct.place, fd, total) if total >= DIRECT_PUT_MIN else None
            if pl is None or not direct.copy_in(pl, views, fd):
                for view in views:
                    view, done = memoryview(view), 0     # slices that copy nothing
                    while done < len(view):
                        done += os.write(fd, view[done:])
        except BaseException:
            # A close publishes: take the key away first, so that neither a
            # half-written object nor a placed one (the pool's old bytes)
            # is ever seen.  O_EXCL made it ours.
            try:
                os.unlink(p)
            except OSError:
                pass
            os.close(fd)
            raise
        os.close(fd)                # publishes; EIO/ENOSPC surface here
        return total

    def put_cuda(self, from_stage, to_stage, key, tensor, readers=None, head=b""):
        """Publishes head and then a GPU tensor's bytes; their size.  Where
        this node's pool is GPU memory they are copied device to device
        into it (omnifs.cuda: no host copy); otherwise, or where this
        process may not, the tensor is copied to the host and put()."""
        readers = _readers(readers)
        p = self.path(from_stage, to_stage, key)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if readers is not None:
                os.setxattr(fd, "user.omni.readers", str(readers).encode())
            cuda.put_tensor(fd, tensor, head)
        except BaseException as e:
            # A close publishes: take the key away first, so that neither a
            # half-filled object nor the pool's old bytes are ever seen.
            try:
                os.unlink(p)
            except OSError:
                pass
            os.close(fd)
            if not isinstance(e, OSError) or e.errno not in _NOT_HERE:
                raise
            import torch
            host = tensor.detach().contiguous().cpu().reshape(-1)
            body = host.view(torch.uint8).numpy() if host.numel() else b""
            return self.put(from_stage, to_stage, key, [head, body], readers)
        os.close(fd)                # publishes; EIO/ENOSPC surface here
        return len(head) + tensor.numel() * tensor.element_size()

    def _arm(self, timeout):
        if timeout is not None:
            ms = max(1, math.ceil(float(timeout) * 1000))
            try:
                os.setxattr(self.root, WAIT_XATTR, str(ms).encode())
            except OSError as e:
                # ESRCH: a daemon in another pid namespace cannot tell
                # whose next open this is, nor make it wait (README, "Pid
                # namespaces"); the small GET before it waited already.
                if e.errno != errno.ESRCH:
                    raise

    def get(self, from_stage, to_stage, key, timeout=None, alloc=None):
        """The bytes of a key, waiting inside open() until it is published:
        timeout seconds, or the edge's wait_ms if None.  alloc(size, head)
        gives the writable buffer to fill for objects of ALLOC_MIN bytes and
        more (otherwise, and by default, a bytearray), shown their first
        HEAD bytes."""
        # A small object on an edge open already, in one step (as put()).
        # A key not published in time is said here, where the wait was;
        # any other failure is answered at once, and goes the whole way,
        # which opens and reads at once where the answer said so.
        fd, asked = self._edges.get((from_stage, to_stage)), False
        if fd is not None and self.small and (timeout is None or (
                (type(timeout) is float or type(timeout) is int) and 0 < timeout < 1e9)):
            try:
                return small.get(fd, key, 0 if timeout is None
                                 else max(1, math.ceil(timeout * 1000)))
            except FileNotFoundError as e:
                raise FileNotFoundError(e.errno, e.strerror,
                                        self.path(from_stage, to_stage, key)) from None
            except OSError as e:
                if e.errno == errno.ECANCELED:  # close() ended the wait
                    raise OSError(e.errno, e.strerror,
                                  self.path(from_stage, to_stage, key)) from None
                asked = e.errno in small.FALLBACK
            except (AttributeError, UnicodeError):
                pass
        timeout = _seconds(timeout)
        if timeout is not None and timeout <= 0:
            raise FileNotFoundError(errno.ENOENT, "omnifs: no time left to wait",
                                    self.path(from_stage, to_stage, key))
        if self.small and not asked:
            buf = self._small_get(from_stage, to_stage, _key(key), timeout)
            if buf is not None:
                return buf
        p = self.path(from_stage, to_stage, key)
        self._arm(timeout)
        with open(p, "rb", buffering=0) as f:
            pl = self._direct(self._where, f.fileno())
            if pl is not None:
                buf = self._get_direct(pl, alloc)
                if buf is not None:
                    return buf
            elif self.direct:       # another node's, streamed: out of the window?
                pool = self._share(f.fileno())
                buf = None if pool is None else direct.copy_window(f.fileno(), pool, alloc or _fresh)
                if buf is not None:
                    return buf
            return self._get_read(p, f, alloc)

    def _where(self, fd):
        """Where a key's bytes are, answered before those of another node
        have all landed here (copy_out follows them)."""
        if self.soon:
            try:
                return direct.where_soon(fd)
            except OSError as e:
                if e.errno != errno.ENOTTY:
                    raise
                self.soon = False       # an older daemon: WHERE waits for all
        return direct.where(fd)

    def _get_direct(self, pl, alloc):
        if alloc is None or pl.size < ALLOC_MIN:
            buf = direct.fresh_bytearray(pl.size)
            return buf if direct.copy_out(pl, buf) else None
        head = bytearray(HEAD)
        if not direct.copy_out(pl, head):
            return None
        buf = alloc(pl.size, bytes(head))
        with memoryview(buf).cast("B") as mv:
            mv[:len(head)] = head
            ok = direct.copy_out(pl, mv[len(head):], skip=len(head))
        return buf if ok else None

    @staticmethod
    def _get_read(p, f, alloc):
        # An object's size is known at open, an open view's too (an
        # older daemon's fstat said 0 for one: then read to the end).
        size = _open_size(f)
        if alloc is not None and size >= ALLOC_MIN:
            buf = alloc(size, os.pread(f.fileno(), HEAD, 0))
        else:
            buf = direct.fresh_bytearray(size or 1 << 20)
        got = 0
        while True:
            if got == len(buf):
                if size:
                    return buf
                buf.extend(bytes(len(buf)))
            with memoryview(buf).cast("B") as view:
                n = f.readinto(view[got:])
            if not n:
                break
            got += n
        if size and got != size:
            raise OSError(errno.EIO, "omnifs: %s ended at %d of %d bytes" % (p, got, size))
        del buf[got:]
        return buf

    def get_cuda(self, from_stage, to_stage, key, timeout=None):
        """The bytes of a key as a torch uint8 tensor on a GPU, waiting as
        get() does.  Where this node's pool is GPU memory it is copied
        device to device out of the pool (omnifs.cuda: no host copy);
        otherwise, or if that fails, read and moved to the current GPU.
        Without a GPU, OSError(ENODEV) before anything is read: a read is
        a complete read, which would consume the object for nothing."""
        import torch
        p = self.path(from_stage, to_stage, key)
        if not torch.cuda.is_available():
            raise OSError(errno.ENODEV, "omnifs: get_cuda needs a GPU, and torch sees none", p)
        timeout = _seconds(timeout)
        if timeout is not None and timeout <= 0:
            raise FileNotFoundError(errno.ENOENT, "omnifs: no time left to wait", p)
        # Which GPU the pool is, asked once: health costs more than the
        # hand-over's own calls.  A pool that is no longer one (a daemon
        # restarted with another) says EOPNOTSUPP, and is asked again.
        if self._gpu_dev is None:
            pool = self.health().get("pool", {})
            self._gpu_dev = pool.get("device", -1) if pool.get("kind") == "cuda" else -1
        dev = self._gpu_dev
        self._arm(timeout)
        with open(p, "rb", buffering=0) as f:
            if dev >= 0:
                try:
                    return cuda.get_tensor(f.fileno(), dev)
                except OSError as e:
                    if e.errno == errno.EOPNOTSUPP:
                        self._gpu_dev = None
                    # bytes elsewhere, no driver: read it
            # The GPU's memory first: one that cannot hold the bytes fails
            # before a byte is read, and the object stays for the next.
            out = torch.empty(_open_size(f), dtype=torch.uint8, device="cuda")
            buf = self._get_read(p, f, None)
        if len(buf) != out.numel():     # a size _open_size() could not tell
            out = torch.empty(len(buf), dtype=torch.uint8, device="cuda")
        if buf:
            out.copy_(torch.frombuffer(buf, dtype=torch.uint8))
        return out

    def view(self, from_stage, to_stage, key, rank, of, timeout=None):
        """Rank `rank` of `of` of a KV payload's shards (SPEC §5)."""
        try:
            r, t = operator.index(rank), operator.index(of)
        except TypeError:
            r, t = -1, 0
        if not 0 <= r < t:
            raise ValueError("omnifs: a view is rank r of T with 0 <= r < T, not %r of %r"
                             % (rank, of))
        return self.get(from_stage, to_stage, "%s.rank%dof%d" % (key, r, t), timeout)

    def remove(self, from_stage, to_stage, key):
        os.unlink(self.path(from_stage, to_stage, key))

    def cleanup(self, request_id):
        """Removes every object of request_id on every node, published or
        being written, in one request to this node's daemon (README,
        "Cleaning up a request"): the keys that are the id, or start with
        it and "_" or ".", or are vllm-omni's omni_<from>_to_<to>_kv_cache_<id>.
        Returns (removed, missed): how many objects went, and how many
        other nodes could not be told now (down or silent: this node's
        daemon tells them when they are back)."""
        rid = _key(request_id).encode()
        buf = bytearray(_CLEANUP.pack(_CLEANUP_MAGIC, len(rid), 0, 0) + rid)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            ioctl.call(fd, ioctl.ioc(3, 0x18, len(buf)), buf)
        finally:
            os.close(fd)
        return _CLEANUP.unpack_from(buf)[2:]

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
