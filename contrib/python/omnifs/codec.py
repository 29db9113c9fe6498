"""codec - Python values as omnifs objects, and back.

Bytes-like values are stored as they are, so that a KV payload is a KV
payload to omnifs (views, integrity checks) and `cat` shows what was put;
a 1-D uint8 torch tensor is a byte buffer too (vllm-omni's to_gpu_tensor()
payload) and comes back as bytes.  Anything else gets a small header:

    b"OMNIPY\\0\\1" | u32 big-endian n | n bytes of JSON | body

(the JSON padded with spaces so that the body starts at a multiple of 64)
JSON {"k": "numpy"|"torch", "d": dtype, "s": shape} before raw array bytes
(numpy's dtype as numpy spells it, a structured one as its descr list;
"n": 1 for a numpy scalar, np.int64(5), which comes back as one);
{"k": "msgpack"} before plain data (dicts, lists, str, numbers, bytes,
nested, and arrays and tensors inside them as msgpack extension 1, which
holds such a header and bytes); {"k": "omni"} before vllm-omni's own
serializer's bytes.  Bytes that happen to start with the magic are
wrapped ({"k": "bytes"}).  Nothing from another node is ever unpickled.
"""
import json
import math
import struct
import sys

import msgpack

from . import direct

MAGIC = b"OMNIPY\0\1"


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def _numpy():
    try:
        import numpy
        return numpy
    except ImportError:
        return None


def _omni_serializer():
    try:
        from vllm_omni.distributed.omni_connectors.utils.serialization import OmniSerializer
        return OmniSerializer
    except Exception:
        return None


def _header(head):
    js = json.dumps(head, separators=(",", ":")).encode()
    # Spaces after the JSON put the body at a multiple of 64 bytes: arrays
    # come back aligned, and copies of it run at full speed (2.3x slower
    # from an odd offset here).
    js += b" " * (-(len(MAGIC) + 4 + len(js)) % 64)
    return MAGIC + struct.pack(">I", len(js)) + js


def _framed(head, body):
    return [_header(head), body]


def _torch_head(t):
    return {"k": "torch", "d": str(t.dtype).removeprefix("torch."), "s": list(t.shape)}


def on_gpu(obj):
    """(header bytes, contiguous tensor) for a torch tensor in GPU memory,
    whose bytes can go device to device into a GPU pool (Mount.put_cuda);
    None for anything else.  The object is the same as encode() makes."""
    # A tensor means torch is imported already; importing it here would
    # search the path for a missing module on every put (0.1 ms).
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor) or not obj.is_cuda:
        return None
    t = obj.detach().contiguous()
    if t.dtype == torch.uint8 and t.dim() == 1:     # a payload's bytes, as they are
        wrap = bytes(t[:len(MAGIC)].cpu().numpy()) == MAGIC
        return (_header({"k": "bytes"}) if wrap else b""), t
    return _header(_torch_head(t)), t


def encode(obj):
    """What to write: plain bytes as they are, or a list of bytes-like
    pieces, in order (Mount.put takes either)."""
    if type(obj) is bytes or type(obj) is bytearray:   # the common case, cold: few steps
        return _framed({"k": "bytes"}, obj) if obj.startswith(MAGIC) else obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        if isinstance(obj, memoryview):     # its bytes in C order, as tobytes() has them
            b = obj.cast("B") if obj.c_contiguous else memoryview(obj.tobytes())
        else:
            b = obj
        return _framed({"k": "bytes"}, b) if b[:len(MAGIC)] == MAGIC else [b]
    torch = sys.modules.get("torch")                   # as in on_gpu()
    if (torch is not None and isinstance(obj, torch.Tensor) and obj.dtype == torch.uint8
            and obj.dim() == 1):
        return encode(obj.detach().cpu().numpy().tobytes())
    if _is_array(obj):
        return _array(obj)
    ser = _omni_serializer()
    if ser is not None:
        return _framed({"k": "omni"}, ser.serialize(obj))
    return _framed({"k": "msgpack"}, msgpack.packb(obj, use_bin_type=True, default=_ext))


def _is_array(obj):
    """Arrays, tensors and numpy scalars (an argmax, a score: msgpack
    packs none of them)."""
    torch, np = sys.modules.get("torch"), _numpy()
    return ((torch is not None and isinstance(obj, torch.Tensor)) or
            (np is not None and isinstance(obj, (np.ndarray, np.generic))))


def _array(obj):
    """A tensor's or array's header and bytes, framed: any shape (0-d stays
    0-d, which view() and ascontiguousarray() would not keep) and any dtype
    but Python objects."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        t = obj.detach().contiguous().cpu()
        raw = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b""
        return _framed(_torch_head(t), memoryview(raw).cast("B"))
    np = _numpy()
    a = np.asarray(obj, order="C")
    if a.dtype.hasobject:
        raise TypeError("numpy arrays of Python objects are not sent raw")
    d = a.dtype.str if a.dtype.fields is None else np.lib.format.dtype_to_descr(a.dtype)
    raw = a.reshape(-1).view(np.uint8) if a.size else b""
    head = {"k": "numpy", "d": d, "s": list(a.shape)}
    if isinstance(obj, np.generic):
        head["n"] = 1
    return _framed(head, memoryview(raw).cast("B"))


EXT_ARRAY = 1       # msgpack extension: an array or tensor inside plain data


def _ext(obj):
    """msgpack's hook for what it cannot pack: arrays and tensors, framed
    as at the top level; anything else is the TypeError msgpack raises."""
    if not _is_array(obj):
        raise TypeError("can not serialize %r object" % type(obj).__name__)
    return msgpack.ExtType(EXT_ARRAY, b"".join(bytes(p) for p in _array(obj)))


def _frames_array(b):
    """Whether bytes start as encode() frames an array or a tensor."""
    return b.startswith(MAGIC) and b[len(MAGIC) + 4:len(MAGIC) + 16] in (
        b'{"k":"numpy"', b'{"k":"torch"')


def _unext(code, data):
    """An array inside plain data, in writable memory as a top-level one;
    only an array: another kind here (msgpack again) could nest without end."""
    if code != EXT_ARRAY:
        return msgpack.ExtType(code, data)
    if not _frames_array(data):
        raise ValueError("omnifs: msgpack extension %d is not an array" % code)
    return decode(bytearray(data))


def alloc(size, head):
    """The buffer a large get fills, chosen by the object's first bytes:
    arrays get numpy's memory (huge pages: no fault per 4 KiB page), the
    rest a bytearray over huge pages too, which decode() returns as it is
    for raw bytes."""
    np = _numpy()
    if np is not None and _frames_array(head):
        align = direct.fresh_align(size)        # as fresh_bytearray's
        raw = np.empty(size + 2 * align, dtype=np.uint8)
        at = -raw.ctypes.data % align
        direct.advise_huge(raw.ctypes.data + at, size, align)
        return raw[at:at + size]
    return direct.fresh_bytearray(size)


def decode(buf):
    """The value of an object's bytes (buf: a bytearray, kept where it can).
    Bytes no encode() wrote (they may come from another node) are a
    ValueError, whatever part of them is wrong."""
    if type(buf) is bytearray and not buf.startswith(MAGIC):
        return buf                  # raw bytes, the common case: one check
    try:
        return _decode(buf)
    except ValueError:
        raise
    except (KeyError, IndexError, TypeError, SyntaxError, RuntimeError) as e:
        # numpy's and torch's own complaints about a dtype or shape, a
        # missing field, nesting too deep for the JSON or msgpack decoder
        raise ValueError("omnifs: not an object omnifs encoded: %s: %s"
                         % (type(e).__name__, e)) from None


def _decode(buf):
    mv = memoryview(buf)
    if bytes(mv[:len(MAGIC)]) != MAGIC:
        return buf
    if len(mv) < len(MAGIC) + 4:
        raise ValueError("omnifs: a cut header")
    n = struct.unpack(">I", mv[len(MAGIC):len(MAGIC) + 4])[0]
    start = len(MAGIC) + 4
    if n > len(mv) - start:
        raise ValueError("omnifs: a header longer than the object")
    head = json.loads(bytes(mv[start:start + n]))
    body = mv[start + n:]
    k = head.get("k") if isinstance(head, dict) else None
    if k == "bytes":
        return bytes(body)
    if k == "msgpack":
        return msgpack.unpackb(body, raw=False, strict_map_key=False, ext_hook=_unext)
    if k == "numpy":
        np = _numpy()
        if np is None:
            raise ValueError("omnifs: a numpy array, and numpy is not installed")
        dt = _numpy_dtype(np, head["d"])
        a = np.frombuffer(body, dtype=dt).reshape(_shape(head, len(body), dt.itemsize))
        return a[()] if head.get("n") == 1 and a.shape == () else a
    if k == "torch":
        torch = _torch()
        if torch is None:
            raise ValueError("omnifs: a torch tensor, and torch is not installed")
        dt = getattr(torch, str(head["d"]), None)
        if not isinstance(dt, torch.dtype):
            raise ValueError("omnifs: unknown torch dtype %r" % head["d"])
        shape = _shape(head, len(body), torch.empty((), dtype=dt).element_size())
        if not len(body):
            return torch.empty(shape, dtype=dt)
        # body is a view of the read's own bytearray: no copy
        return torch.frombuffer(body, dtype=torch.uint8).view(dt).reshape(shape)
    if k == "omni":
        ser = _omni_serializer()
        if ser is None:
            raise ValueError("omnifs: vllm-omni's serializer wrote this, and vllm_omni is absent")
        return ser.deserialize(body)
    raise ValueError("omnifs: unknown kind %r" % (k,))


def _shape(head, nbytes, itemsize):
    """A header's shape, if it holds nbytes of itemsize elements: one
    from another node that lies must not make an empty body a huge
    allocation."""
    s = head.get("s")
    if (not isinstance(s, list) or not all(type(n) is int and n >= 0 for n in s) or
            math.prod(s) * itemsize != nbytes):
        raise ValueError("omnifs: shape %r does not fit %d bytes" % (s, nbytes))
    return tuple(s)


def _fields(d):
    """A structured dtype's descr as JSON gives it back: lists where numpy
    had tuples (a field, its shape, a (title, name) pair)."""
    return [(tuple(f[0]) if isinstance(f[0], list) else f[0],
             f[1] if isinstance(f[1], str) else _fields(f[1]), *map(tuple, f[2:])) for f in d]


def _numpy_dtype(np, d):
    """A header's dtype, which came from another node: never one of
    Python objects (frombuffer would refuse it anyway, less clearly)."""
    dt = np.dtype(d) if isinstance(d, str) else np.lib.format.descr_to_dtype(_fields(d))
    if dt.hasobject:
        raise ValueError("omnifs: an array of Python objects")
    return dt
