"""vllm-omni's OmniFSConnector: stage data through an omnifs mount.

A stage config names it like any OmniConnector:

    connector: {name: OmniFSConnector, extra: {mount: /mnt/omni}}

put() writes <mount>/<from>/<to>/<key> (a "/" of the key as "%2F": see
file_name()) and closes it (published, on every node); get() opens it,
waiting inside open() for it to be published, up to its timeout, and
reads it (an RDMA or TCP pull when another node wrote it).  Nothing
polls.  Without vllm_omni installed the class works alone, with the same
methods and returns.

vllm-omni's receive loops poll many requests from one thread: there a get
answers at once and a key not yet published is fetched in the background
(omnifs.ahead), the loop's wait_for_change() ending when it comes.

Heterogeneous TP by views: use_tp_views(manager) makes vllm-omni's KV
manager put one unsliced payload per sender rank, <rid>.rank<r>of<S>, and
get <rid>.rank<t>of<T> in one call, merged or sliced by omnifs.
"""
import dataclasses
import errno
import logging
import math
import operator
import os
import threading
import time

from . import Mount, codec, small
from .ahead import Ahead

try:
    from vllm_omni.distributed.omni_connectors.connectors.base import OmniConnectorBase as _Base
except Exception:       # vllm-omni absent (or broken): the connector stands alone
    _Base = object
try:                    # vllm-omni's factory reads these to share one instance
    from vllm_omni.distributed.omni_connectors.connectors.base import ConnectorCapabilities
except Exception:       # absent, or a vllm-omni from before them
    ConnectorCapabilities = None

log = logging.getLogger("omnifs.vllm_omni")
# Bytes that do not start with this byte are raw: codec.encode() leaves
# them as they are, codec.decode() returns them (one check, the cheapest).
_MAGIC0 = codec.MAGIC[0]
# get() appends the sizes it returns to a list, folded into the counters
# under the lock before a wait once this many are there, and by health().
_FOLD = 1024
_WAIT = object()        # _get_ahead(): nothing for it there, get() waits
__all__ = ["OmniFSConnector", "request_of", "file_name", "use_tp_views", "tp_view_hooks",
           "capabilities"]


def request_of(key, request_id):
    """True when key belongs to request_id: it is the id, or starts with it
    and "_" or ".", or is vllm-omni's omni_<from>_to_<to>_kv_cache_<id>
    (the daemon's rule for OMNIFS_IOC_CLEANUP, fs/names.c)."""
    if key == request_id or key.startswith(request_id + "_") or key.startswith(request_id + "."):
        return True
    return key.startswith("omni_") and key.endswith("_kv_cache_" + request_id)


def file_name(key):
    """The name a vllm-omni key has in the mount: the key itself, but "%"
    and "/" as "%25" and "%2F".  vllm-omni's keys may hold a "/" (Qwen3-Omni
    puts each tensor of a thinker's payload under
    <rid>_<stage>_<chunk>@tensor/<field>), which no file name can.  One
    name a key and one key a name, and a request's keys start with its
    id's name as they start with its id, so cleanup() finds them."""
    if "%" in key or "/" in key:
        return key.replace("%", "%25").replace("/", "%2F")
    return key


def _whole(v):
    """A YAML count: an int, or its digits as a string; not 2.5."""
    return int(v, 10) if isinstance(v, str) else operator.index(v)


def _number(name, kind, value):
    try:
        return kind(value)
    except (TypeError, ValueError):
        what = "a whole number" if kind is _whole else "a number"
        raise ValueError("OmniFSConnector: extra %s must be %s, not %r" % (name, what, value)) \
            from None


class OmniFSConnector(_Base):
    """vllm-omni's OmniConnectorBase over an omnifs mount."""

    supports_raw_data = True

    EXTRA = ("mount", "timeout_s", "recv_timeout", "readers", "nowait")
    # What vllm-omni adds to a connector's extra itself (its factory and
    # utils/initialization.py): the stage this worker is, its role, and
    # the TP mapping of a connector that both receives and sends.
    GIVEN = ("stage_id", "role", "from_stage", "to_stage", "rank_mapping",
             "recv_rank_mapping", "send_rank_mapping")
    # Until the constructor has made its Mount: vllm-omni's base class
    # calls close() from __del__, also of one whose constructor raised.
    _mount = None
    _closed = True
    _ahead = None

    def __init__(self, config=None):
        config = dict(config or {})
        for k in sorted(set(config) - set(self.EXTRA) - set(self.GIVEN), key=str):
            # vllm-omni's stage processors read their own settings in the
            # connector's config (codec_chunk_frames, ...); or a typo: said.
            log.info("OmniFSConnector: extra %r is not one of %s; kept in .config for "
                     "vllm-omni", k, ", ".join(self.EXTRA))
        self.config = config    # as vllm-omni's connectors keep theirs
        self.mount_path = str(config.get("mount", "/mnt/omni"))
        self.timeout = _number("timeout_s", float,
                               config.get("timeout_s", config.get("recv_timeout", 30.0)))
        readers = config.get("readers")
        self.readers = None if readers is None else _number("readers", _whole, readers)
        if not 0 < self.timeout < math.inf or (self.readers is not None and self.readers < 0):
            raise ValueError("OmniFSConnector: timeout_s must be > 0 and finite, readers >= 0")
        # vllm-omni's chunk loops read it (stage_id - 1 is where chunks come from)
        self.stage_id = _number("stage_id", _whole, config.get("stage_id", -1))
        self.nowait = config.get("nowait", False)
        if type(self.nowait) is not bool:
            raise ValueError("OmniFSConnector: extra nowait must be true or false, not %r"
                             % (self.nowait,))
        self._polling = threading.local()
        self._mount = Mount(self.mount_path)
        self._lock = threading.Lock()
        self._got = []
        self._n = {"puts": 0, "gets": 0, "put_failures": 0, "get_timeouts": 0,
                   "get_failures": 0, "bytes_put": 0, "bytes_got": 0, "removed": 0}
        self._closed = False
        if self.nowait:
            self._fetches()

    def _count(self, what, n=1, bytes_what=None, nbytes=0):
        with self._lock:
            self._n[what] += n
            if bytes_what:
                self._n[bytes_what] += nbytes

    # ---- OmniConnectorBase ----

    # put() and get() of a small object are what a 4 KiB hand-off runs,
    # after the worker idled: with the caches cold every Python step here
    # costs 2-6 us (of some 0.2 ms), so the common case, raw bytes, takes
    # the fewest: a type and one byte checked, a list appended to.

    def put(self, from_stage, to_stage, put_key, data):
        """(True, bytes written, metadata) or (False, 0, None) and a log line."""
        try:
            if self._closed:
                raise OSError(errno.EBADF, "the connector is closed")
            name = file_name(str(put_key))
            if type(data) is bytes and (not data or data[0] != _MAGIC0):
                n = self._mount.put(str(from_stage), str(to_stage), name, data, self.readers)
            else:
                n = self._put_any(str(from_stage), str(to_stage), name, data)
        except Exception as e:
            if getattr(e, "errno", None) == errno.ECANCELED:     # README, "Cleaning up"
                log.warning("OmniFSConnector: put %s/%s/%s: its request was cleaned up; "
                            "not kept", from_stage, to_stage, put_key)
            else:
                log.error("OmniFSConnector: put %s/%s/%s failed: %s",
                          from_stage, to_stage, put_key, e)
            self._count("put_failures")
            return False, 0, None
        self._count("puts", 1, "bytes_put", n)
        return True, n, {"mount": self.mount_path, "key": str(put_key), "size": n}

    def _put_any(self, from_stage, to_stage, key, data):
        """put() of anything but raw bytes: its size."""
        gpu = None if isinstance(data, (bytes, bytearray)) else codec.on_gpu(data)
        if gpu is not None:         # device to device where the pool is GPU memory
            return self._mount.put_cuda(from_stage, to_stage, key, gpu[1],
                                        readers=self.readers, head=gpu[0])
        return self._mount.put(from_stage, to_stage, key, codec.encode(data), self.readers)

    def get(self, from_stage, to_stage, get_key, metadata=None, timeout=None):
        """(object, bytes read), or None when the key is not published within
        timeout (the connector's if None) or the read failed.  In a polling
        loop (one that called get_wakeup_generation(), or any caller with
        extra nowait) a get without a timeout answers at once: a key not
        here yet is fetched in the background, for a later get."""
        if self._ahead is not None:
            got = self._get_ahead(from_stage, to_stage, get_key, timeout)
            if got is not _WAIT:
                return got
        wait = self.timeout if timeout is None else timeout
        if len(self._got) >= _FOLD:
            self._fold()
        try:
            if self._closed:
                raise OSError(errno.EBADF, "the connector is closed")
            raw = self._mount.get(str(from_stage), str(to_stage), file_name(str(get_key)),
                                  timeout=wait, alloc=codec.alloc)
            obj = (raw if type(raw) is bytearray and (not raw or raw[0] != _MAGIC0)
                   else codec.decode(raw))
        except FileNotFoundError:
            self._count("get_timeouts")
            return None
        except Exception as e:
            if self._closed and getattr(e, "errno", None) == errno.ECANCELED:
                log.info("OmniFSConnector: get %s/%s/%s: ended by close()",
                         from_stage, to_stage, get_key)
                return None
            log.error("OmniFSConnector: get %s/%s/%s failed: %s", from_stage, to_stage, get_key, e)
            self._count("get_failures")
            return None
        n = len(raw)
        self._got.append(n)     # one step, thread-safe without the lock
        return obj, n

    def _fold(self):
        """Counts the gets whose sizes get() appended to _got."""
        with self._lock:
            k = len(self._got)      # others may append meanwhile: theirs stay
            self._n["gets"] += k
            self._n["bytes_got"] += sum(self._got[:k])
            del self._got[:k]

    def get_with_deadline(self, from_stage, to_stage, get_key, metadata=None, *, deadline):
        """get() until a time.monotonic() deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            self._count("get_timeouts")
            return None
        return self.get(from_stage, to_stage, get_key, metadata, timeout=left)

    # ---- vllm-omni's receive loops ----

    def _get_ahead(self, from_stage, to_stage, get_key, timeout):
        """get() where fetches ahead exist: what a polling get answers at
        once, or what was fetched for a waiting one, or _WAIT."""
        k = (str(from_stage), str(to_stage), str(get_key))
        if timeout is None and (self.nowait or getattr(self._polling, "on", False)):
            return self._ahead.take(*k)
        got = self._ahead.held(*k)
        return _WAIT if got is None else got

    def _fetches(self):
        with self._lock:
            if self._ahead is None:
                self._ahead = Ahead(lambda f, t, k: self.get(f, t, k, timeout=self.timeout),
                                    self.timeout, self._here)
                if self._closed:
                    self._ahead.close()
            return self._ahead

    def _here(self, from_stage, to_stage, get_key):
        """What a polling get of a key published already answers: its
        object, or None.  A stat answers at once where an open would wait;
        a published object's mode has no write bits (one being written
        here does), and its get then waits at most the shortest wait, 1 ms,
        for a key that another reader consumed meanwhile."""
        try:
            st = os.stat(self._mount.path(from_stage, to_stage, file_name(get_key)))
        except (OSError, ValueError):
            return None
        if st.st_mode & 0o222:
            return None
        return self.get(from_stage, to_stage, get_key, timeout=0.001)

    def get_wakeup_generation(self):
        """Called by a receive loop before each round of get()s: from then
        on this thread's gets do not wait (see get()).  A number for
        wait_for_change(); None once the connector is closed."""
        if self._closed:
            return None
        self._polling.on = True
        return self._fetches().generation

    def wait_for_change(self, generation, *, timeout):
        """Waits until a key that a polling get asked for has come since
        generation (True), or timeout seconds (False)."""
        return self._fetches().wait(generation, timeout)

    def abandon_get(self, get_key):
        """Gives up what a polling get of this key fetches or fetched."""
        if self._ahead is not None:
            key = str(get_key)
            self._ahead.drop(lambda k: k == key)

    def reap_consumed(self):
        """Nothing to do: the daemon frees each object its readers consumed."""

    def cleanup(self, request_id):
        """Removes every object of request_id, on every node, in one
        request to the daemon; True if any."""
        rid = str(request_id)
        if self._ahead is not None:
            self._ahead.drop(lambda k: request_of(k, rid))
        try:
            removed, missed = self._mount.cleanup(file_name(rid))
        except OSError as e:
            if e.errno not in small.NEVER:
                log.error("OmniFSConnector: cleanup %s: %s", rid, e)
                return False
            removed, missed = self._cleanup_by_listing(file_name(rid)), 0
        if missed:
            log.warning("OmniFSConnector: cleanup %s: %d node(s) could not be told now; "
                        "they are told when they are back", rid, missed)
        self._count("removed", removed)
        return removed > 0

    def _cleanup_by_listing(self, rid):
        """cleanup() through a daemon without OMNIFS_IOC_CLEANUP: every
        edge listed, each name of the request's (rid: its file_name)
        removed."""
        removed = 0
        try:
            edges = self._mount.edges()
        except OSError as e:
            log.error("OmniFSConnector: cleanup %s: %s", rid, e)
            return 0
        for f, t in edges:
            for key in self._mount.keys(f, t):
                if not request_of(key, rid):
                    continue
                try:
                    self._mount.remove(f, t, key)
                    removed += 1
                except FileNotFoundError:
                    pass        # consumed or removed meanwhile
                except OSError as e:
                    log.error("OmniFSConnector: cleanup %s/%s/%s: %s", f, t, key, e)
        return removed

    def health(self):
        self._fold()
        with self._lock:
            out = dict(self._n)
        out["mount"] = self.mount_path
        out["fetching"], out["fetched"] = self._ahead.counts() if self._ahead else (0, 0)
        try:
            h = self._mount.health()
            out["node"] = h.get("node")
            out["status"] = "healthy" if not self._closed else "unhealthy"
            out["omnifs"] = h
        except Exception as e:
            out["status"] = "unhealthy"
            out["error"] = str(e)
        return out

    def close(self):
        """Idempotent.  Objects already put stay for their readers."""
        self._closed = True
        if self._ahead is not None:
            self._ahead.close()
        if self._mount is not None:
            self._mount.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- heterogeneous TP by views ----

def tp_view_hooks(from_tp, to_tp, rank):
    """vllm-omni KV-manager hooks for sender TP from_tp and receiver TP to_tp,
    for this worker's rank: a dict of kv_send_key_builder, kv_recv_key_builder,
    kv_payload_merger and kv_payload_slicer."""
    S, T, r = int(from_tp), int(to_tp), int(rank)
    if S < 1 or T < 1 or r < 0 or max(S, T) % min(S, T):
        raise ValueError("omnifs: TP %d -> %d does not divide" % (S, T))

    def send_keys(request_id, from_stage, to_stage):
        return ["%s.rank%dof%d" % (request_id, r, S)]

    def recv_keys(request_id, from_stage, to_stage):
        return [("%s.rank%dof%d" % (request_id, r, T), None)]

    def merger(payloads):       # omnifs merged them: one payload comes
        if len(payloads) != 1:
            raise ValueError("omnifs: views give one payload, got %d" % len(payloads))
        return payloads[0]

    def slicer(payload):        # ... and sliced them
        return payload

    return {"kv_send_key_builder": send_keys, "kv_recv_key_builder": recv_keys,
            "kv_payload_merger": merger, "kv_payload_slicer": slicer}


def use_tp_views(manager, from_tp=None, to_tp=None, rank=None):
    """Sets the hooks on a vllm-omni OmniKVTransferManager, from its own TP
    topology unless given."""
    topo = getattr(manager, "_tp_topo", None)
    S = from_tp if from_tp is not None else topo.source_tp_size
    T = to_tp if to_tp is not None else topo.target_tp_size
    r = rank if rank is not None else topo.local_rank
    for name, fn in tp_view_hooks(S, T, r).items():
        setattr(manager, name, fn)
    return manager


def capabilities(caps_class):
    """vllm-omni's ConnectorCapabilities of this connector: raw data, and
    one instance for both edges of a middle stage, its get() and put()
    run by two threads at once (what the receive and save loops of one
    worker do); each flag the installed vllm-omni has."""
    have = {f.name for f in dataclasses.fields(caps_class)}
    flags = ("supports_raw_data", "supports_shared_dual", "thread_safe_dual")
    return caps_class(**{f: True for f in flags if f in have})


if ConnectorCapabilities is not None:
    try:
        OmniFSConnector.capabilities = capabilities(ConnectorCapabilities)
    except TypeError as e:  # a shape we do not know: the base class's defaults
        log.warning("OmniFSConnector: vllm-omni's ConnectorCapabilities not understood (%s); "
                    "each middle stage gets two connectors", e)


def _register():
    try:
        from vllm_omni.distributed.omni_connectors.factory import OmniConnectorFactory
    except Exception:
        return
    if "OmniFSConnector" in OmniConnectorFactory.list_registered_connectors():
        return
    try:    # with its class, the factory makes a middle stage one instance ("dual")
        OmniConnectorFactory.register_connector("OmniFSConnector", OmniFSConnector,
                                                connector_cls=OmniFSConnector)
    except TypeError:       # a vllm-omni from before connector_cls: one per edge
        OmniConnectorFactory.register_connector("OmniFSConnector", OmniFSConnector)


_register()
