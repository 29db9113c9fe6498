"""kvpy - KV payloads built byte by byte in Python, for the tests.

An independent writer of kvfmt/FORMAT.md (native) and of vllm-omni's
KVCacheTransferData.to_bytes() layout, so a test checks the C code
against the documents, not against itself.
"""
import json
import struct

import xxhash

# FORMAT.md's dtype codes: their sizes and torch's names for them.
ESIZE = {1: 2, 2: 2, 3: 4, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1, 9: 1, 10: 1, 11: 2, 12: 4, 13: 8,
         14: 8, 15: 8, 16: 16}
TORCH = {1: "float16", 2: "bfloat16", 3: "float32", 4: "float8_e4m3fn",
         5: "float8_e5m2", 6: "int8", 7: "uint8", 8: "float8_e4m3fnuz",
         9: "float8_e5m2fnuz", 10: "bool", 11: "int16", 12: "int32", 13: "int64",
         14: "float64", 15: "complex64", 16: "complex128"}
HND, NHD = 1, 2


def rows(tensor, layout, heads, tokens, row):
    """{(h, t): bytes} of one tensor's bytes in a layout."""
    out = {}
    for h in range(heads):
        for t in range(tokens):
            i = h * tokens + t if layout == HND else t * heads + h
            out[h, t] = tensor[i * row:(i + 1) * row]
    return out


def native(tensors, dtype=1, layout=HND, layers=1, tokens=4, heads_total=2,
           head_first=0, head_count=2, head_dim=8, meta=b"", latent=False):
    """tensors: a list (K0, V0, K1, V1... or one per layer) of bytes or None."""
    row = head_dim * ESIZE[dtype]
    nt = layers if latent else 2 * layers
    sums = []
    for t in tensors:
        for h in range(head_count):
            if t is None:
                sums.append(0)
                continue
            r = rows(t, layout, head_count, tokens, row)
            sums.append(xxhash.xxh3_64_intdigest(b"".join(r[h, k] for k in range(tokens))))
    meta_off = 96 + 16 * nt + 8 * nt * head_count
    hdr_len = (meta_off + len(meta) + 63) // 64 * 64
    offs, off = [], hdr_len
    for t in tensors:
        if t is None:
            offs.append((0, 0))
        else:
            offs.append((off, len(t)))
            off = (off + len(t) + 63) // 64 * 64
    total = off
    h = bytearray(hdr_len)
    struct.pack_into("<8sHHBBBBIIIIIIII", h, 0, b"OMNIKV\r\n", 1, 96, dtype, layout,
                     2 if latent else 1, 0, layers, tokens, heads_total, head_first,
                     head_count, head_dim, nt, 0)
    struct.pack_into("<QQQ", h, 48, len(meta), hdr_len, total)
    for i, (o, n) in enumerate(offs):
        struct.pack_into("<QQ", h, 96 + 16 * i, o, n)
    for i, s in enumerate(sums):
        struct.pack_into("<Q", h, 96 + 16 * nt + 8 * i, s)
    h[meta_off:meta_off + len(meta)] = meta
    hh = xxhash.xxh3_64_intdigest(bytes(h[:72]) + bytes(8) + bytes(h[80:]))
    struct.pack_into("<Q", h, 72, hh)
    body = bytearray(total)
    body[:hdr_len] = h
    for t, (o, n) in zip(tensors, offs):
        if t is not None:
            body[o:o + n] = t
    return bytes(body)


def vllm(keys, values, dtype=1, tokens=4, heads=2, head_dim=8, rid="r1", bids=(1, 2),
         meta=None, extra=None, layer_keys=True):
    """keys, values: per layer bytes ([tokens, heads, head_dim]) or None.

    Spelled as vllm-omni's KVCacheTransferData.to_bytes() spells it:
    names key_cache_<l> / value_cache_<l>, dtypes without "torch.", the
    header as json.dumps(..., separators=(",", ":")) writes it.  Without
    layer_keys, as its older to_bytes() wrote it: no "i"."""
    nl = len(keys)
    td, data, off = [], b"", 0
    for j, t in enumerate(list(keys) + list(values)):
        name = ("key_cache_%d" if j < nl else "value_cache_%d") % (j % nl)
        if t is None:
            td.append({"n": name, "x": True})
            continue
        e = {"n": name, "i": j % nl, "d": TORCH[dtype],
             "s": [tokens, heads, head_dim], "o": off, "b": len(t)}
        if not layer_keys:
            del e["i"]
        td.append(e)
        data += t
        off += len(t)
    h = {"rid": rid, "bids": list(bids), "meta": {} if meta is None else meta, "td": td,
         "nl": nl}
    if extra:
        h.update(extra)
    js = json.dumps(h, separators=(",", ":")).encode()
    return struct.pack(">I", len(js)) + js + data


# The dtypes vllm-omni's from_bytes accepts (its _SAFE_TORCH_DTYPES), by name.
UPSTREAM_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                   "float64", "bfloat16", "complex64", "complex128", "float8_e4m3fn",
                   "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"}


def vllm_decode(raw):
    """A payload decoded by vllm-omni's KVCacheTransferData.from_bytes rules:
    {"request_id", "block_ids", "metadata", "key_cache": [...], "value_cache": [...]}
    with each tensor as (dtype name, shape, bytes) or None.  Raises ValueError
    where upstream raises; a tensor whose name has neither prefix is dropped,
    as upstream drops it."""
    raw = memoryview(raw)
    if len(raw) < 4:
        raise ValueError("missing 4-byte header length")
    n = struct.unpack(">I", raw[:4])[0]
    if n > len(raw) - 4:
        raise ValueError("header_len exceeds buffer size")
    h = json.loads(bytes(raw[4:4 + n]))
    data = raw[4 + n:]
    nl = h["nl"]
    out = {"request_id": h["rid"], "block_ids": h["bids"], "metadata": h["meta"],
           "key_cache": [None] * nl, "value_cache": [None] * nl}
    for info in h["td"]:
        if info.get("x"):
            continue
        o, b = info["o"], info["b"]
        if o < 0 or b < 0 or o + b > len(data):
            raise ValueError("tensor span out of range")
        if str(info["d"]) not in UPSTREAM_DTYPES:
            raise ValueError("Unsupported dtype in KV payload: %s" % info["d"])
        name = info["n"]
        layer = info.get("i")
        if layer is None:
            for pre in ("key_cache_", "value_cache_"):
                if name.startswith(pre):
                    layer = int(name[len(pre):])
        if not isinstance(layer, int) or not 0 <= layer < nl:
            raise ValueError("Invalid layer index in KV payload: %s" % layer)
        t = (info["d"], list(info["s"]), bytes(data[o:o + b]))
        if name.startswith("key_cache_"):
            out["key_cache"][layer] = t
        elif name.startswith("value_cache_"):
            out["value_cache"][layer] = t
    return out
