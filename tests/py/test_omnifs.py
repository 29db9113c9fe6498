"""The Python package against live mounts (run by tests/integ/18-python.t,
which mounts OMNI_ONE alone and OMNI_B + OMNI_C as a two-node cluster:
b hosts stage 0, c stages 1 and 2)."""
import contextlib
import ctypes
import errno
import gc
import json
import logging
import os
import queue
import re
import struct
import subprocess
import sys
import threading
import time
import types
import uuid

import numpy as np
import pytest

import kvpy
import omnifs
from omnifs import codec
from omnifs.vllm_omni import OmniFSConnector, file_name, request_of, tp_view_hooks, use_tp_views

ONE, B, C = os.environ["OMNI_ONE"], os.environ["OMNI_B"], os.environ["OMNI_C"]


def rid():
    return "req-" + uuid.uuid4().hex[:8]


def on_time(wait, timeout, slack):
    """Checks that wait() (true when it got what it should) ends no sooner
    than timeout seconds and no later than timeout + slack.  Ending early
    is a defect every time.  Ending late may be this 2-vCPU VM leaving the
    test unscheduled for a while, which no timer of the daemon can help;
    so a late wait is tried again, and one of three must be on time: a
    timer that is late by design is late all three times."""
    took = []
    for _ in range(3):
        t = time.monotonic()
        assert wait()
        took.append(time.monotonic() - t)
        assert took[-1] >= timeout, "ended early: %s s" % took
        if took[-1] <= timeout + slack:
            return
    pytest.fail("late three times, each over %g s: %s s" % (timeout + slack, took))


def waiters_become(mount, want, s=5):
    """The node's count of waiting opens and gets, once it is want, or
    after s seconds."""
    deadline = time.monotonic() + s
    while omnifs.Mount(mount).stats()["waiters"] != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return omnifs.Mount(mount).stats()["waiters"]


@pytest.fixture(autouse=True)
def no_get_waits_on():
    """Every test ends the gets it left waiting in a daemon (a loop's fetch
    waits out its timeout_s, as long as 20 s here).  One that ended in the
    middle of a later test made that test's count of the node's waiters
    come out one short."""
    yield
    left = {m: waiters_become(m, 0) for m in (ONE, B, C)}
    assert not any(left.values()), "gets still wait after the test: %s" % left


@pytest.fixture
def one():
    with OmniFSConnector({"mount": ONE, "timeout_s": 5}) as c:
        yield c


def test_bytes_round_trip(one):
    k = rid()
    ok, n, meta = one.put("0", "1", k, b"hello omnifs")
    assert (ok, n) == (True, 12) and meta["key"] == k
    assert one.get("0", "1", k) == (b"hello omnifs", 12)


def test_large_bytes_come_back_whole_as_a_bytearray(one):
    k, data = rid(), os.urandom((3 << 20) + 5)
    assert one.put("0", "1", k, data)[0]
    got, n = one.get("0", "1", k)
    assert type(got) is bytearray and n == len(data) and got == data


def address(buf):
    import ctypes
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("size", [100 << 10, (3 << 20) + 5])
def test_large_bytes_come_back_on_a_page(size, direct):
    """A kernel copy into memory aligned unlike its source runs at half
    speed: a get's bytearray starts on a page, read (direct False) or
    copied out of the pool."""
    m, k, data = omnifs.Mount(ONE), rid(), os.urandom(size)
    m.put("0", "1", k, data)
    m.direct = m.direct and direct
    got = m.get("0", "1", k, timeout=5)
    assert type(got) is bytearray and got == data and address(got) % 4096 == 0


def test_fresh_bytearrays_are_whole_writable_and_aligned_from_64_kib():
    """On a page from 64 KiB, on a huge page beyond 32 MiB (whose first and
    last 2 MiB would otherwise be faulted in 4 KiB at a time)."""
    from omnifs import direct
    for size in (0, 1, (64 << 10) - 1, 64 << 10, (3 << 20) + 5, 32 << 20, (33 << 20) + 5):
        b = direct.fresh_bytearray(size)
        assert type(b) is bytearray and len(b) == size
        if size >= 64 << 10:
            assert address(b) % (2 << 20 if size > 32 << 20 else 4096) == 0, size
        if size <= 32 << 20:    # no more than a page or two over: malloc's heap keeps it
            assert sys.getsizeof(b) < size + (64 << 10), size
        b[:] = b"\x5a" * size
        b.extend(b"tail")
        assert b[:size] == b"\x5a" * size and b[size:] == b"tail"


def test_bytes_are_stored_as_they_are(one):
    k = rid()
    one.put("0", "1", k, bytearray(b"\x00\x01raw"))
    assert open(os.path.join(ONE, "0", "1", k), "rb").read() == b"\x00\x01raw"


def test_any_memoryview_is_its_bytes(one):
    for v in (memoryview(np.arange(3, dtype=np.int32)), memoryview(np.arange(6.0).reshape(2, 3).T)):
        k = rid()
        assert one.put("0", "1", k, v)[0]
        assert bytes(one.get("0", "1", k)[0]) == v.tobytes()


def test_bytes_that_look_like_a_header(one):
    k = rid()
    odd = codec.MAGIC + b"\x00\x00\x00\x02{}"
    assert one.put("0", "1", k, odd)[0]
    assert bytes(one.get("0", "1", k)[0]) == odd


@pytest.mark.parametrize("data", [b"", b"O", codec.MAGIC[:1] + b"MNI but not ours",
                                  codec.MAGIC[:-1], codec.MAGIC],
                         ids=["empty", "O", "first-byte", "short-magic", "magic"])
def test_bytes_that_start_like_a_header(one, data):
    """put() and get() tell raw bytes by their first byte, then the rest."""
    k = rid()
    ok, n, _ = one.put("0", "1", k, data)
    assert ok and (n == len(data)) == (data != codec.MAGIC), "only the magic is wrapped"
    got, m = one.get("0", "1", k)
    assert got == data and m == n
    assert type(got) is bytearray or data == codec.MAGIC, "raw bytes come back as they were read"


def test_health_counts_gets_of_every_thread(monkeypatch):
    """get() appends what it got to a list folded into health()'s counters
    (no lock in the caller's way): nothing lost between threads, or when
    folded while others append."""
    from omnifs import vllm_omni
    monkeypatch.setattr(vllm_omni, "_FOLD", 3)
    r = rid()
    with OmniFSConnector({"mount": ONE, "timeout_s": 5}) as c:
        sizes = {"%s_%d" % (r, i): i * 7 for i in range(48)}
        for k, n in sizes.items():
            assert c.put("0", "1", k, bytes(n))[0]
        keys = list(sizes)
        ts = [threading.Thread(target=lambda ks=keys[t::4]: [c.get("0", "1", k) for k in ks])
              for t in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        h = c.health()
        assert (h["gets"], h["bytes_got"]) == (48, sum(sizes.values()))
        assert (h["puts"], h["bytes_put"]) == (48, sum(sizes.values()))
        c.cleanup(r)


def test_numpy_round_trip(one):
    k = rid()
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    one.put("0", "1", k, a)
    b, n = one.get("0", "1", k)
    assert isinstance(b, np.ndarray) and b.dtype == a.dtype and b.shape == a.shape
    assert (a == b).all() and n > a.nbytes


@pytest.mark.parametrize("a", [
    np.array(3.5),                                          # 0-d stays 0-d
    np.arange(6.0).reshape(2, 3).T,                         # not contiguous
    np.zeros((0, 3), dtype=np.int16),
    np.arange(3, dtype=">i4"),
    np.array(["2026-11-28", "NaT"], dtype="datetime64[D]"),  # no buffer protocol
    np.array([(1, (2.5, 3.5))], dtype=[("a", "<i4"), ("b", "<f8", (2,))]),
    np.array(["ab", "c"]),
], ids=["0-d", "transposed", "empty", "big-endian", "datetime64", "structured", "unicode"])
def test_numpy_arrays_of_every_shape_and_dtype(one, a):
    k = rid()
    assert one.put("0", "1", k, a)[0]
    b, _ = one.get("0", "1", k)
    assert b.dtype == a.dtype and b.shape == a.shape
    assert b.tobytes() == np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("v", [np.float32(3.5), np.int64(-5), np.bool_(True),
                               np.datetime64("2026-12-05")],
                         ids=["float32", "int64", "bool", "datetime64"])
def test_numpy_scalars_alone_and_inside_plain_data(one, v):
    """A numpy scalar (an argmax, a score) is no array, and msgpack packs
    none: it comes back a numpy scalar of its type.  (Inside plain data
    np.float64 and np.str_, a float and a str, go as those.)"""
    for obj in (v, {"x": v, "l": [v]}):
        k = rid()
        assert one.put("0", "1", k, obj)[0]
        got = one.get("0", "1", k)[0]
        for g in ((got,) if obj is v else (got["x"], got["l"][0])):
            assert type(g) is type(v) and g == v


def test_an_array_of_python_objects_is_refused(one):
    assert one.put("0", "1", rid(), np.array([object()])) == (False, 0, None)


torch_cases = [
    ("bf16", lambda t: t.arange(12, dtype=t.bfloat16).reshape(3, 4)),
    ("0-dim", lambda t: t.tensor(3.5)),
    ("transposed", lambda t: t.arange(6.0).reshape(2, 3).t()),
    ("empty", lambda t: t.empty(0, 2, dtype=t.float16)),
    ("bool", lambda t: t.tensor([True, False, True])),
    ("uint8 2-d", lambda t: t.arange(6, dtype=t.uint8).reshape(2, 3)),
]


@pytest.mark.parametrize("make", [m for _, m in torch_cases], ids=[n for n, _ in torch_cases])
def test_torch_round_trip(one, make):
    torch = pytest.importorskip("torch", reason="torch is not importable here")
    k, t = rid(), make(torch)
    assert one.put("0", "1", k, t)[0]
    u, _ = one.get("0", "1", k)
    assert isinstance(u, torch.Tensor) and u.dtype == t.dtype and u.shape == t.shape
    assert torch.equal(u, t)


def test_a_1d_uint8_tensor_is_a_payload(one):
    torch = pytest.importorskip("torch", reason="torch is not importable here")
    k = rid()
    one.put("0", "1", k, torch.tensor(list(b"KV bytes"), dtype=torch.uint8))
    assert open(os.path.join(ONE, "0", "1", k), "rb").read() == b"KV bytes"


def test_arrays_inside_plain_data(one):
    """A stage's output is often a dict of arrays and plain values: without
    vllm-omni's serializer they go as msgpack extensions, raw."""
    k = rid()
    d = {"hidden": np.arange(6, dtype=np.float16).reshape(2, 3), "ids": [1, 2],
         "steps": [np.array(1.5), np.zeros(0)]}
    assert one.put("0", "1", k, d)[0]
    got = one.get("0", "1", k)[0]
    assert got["ids"] == [1, 2] and got["hidden"].dtype == np.float16
    assert (got["hidden"] == d["hidden"]).all() and got["steps"][0].shape == ()
    got["hidden"][0, 0] = 7             # writable, as a top-level array is
    torch = sys.modules.get("torch") or pytest.importorskip("torch", reason="no torch here")
    k = rid()
    t = {"h": torch.ones(2, 2, dtype=torch.bfloat16), "codes": torch.arange(4, dtype=torch.uint8)}
    assert one.put("0", "1", k, t)[0]
    got = one.get("0", "1", k)[0]
    assert torch.equal(got["h"], t["h"]) and torch.equal(got["codes"], t["codes"])


def framed(head, body=b""):
    """An object's bytes as codec frames them, header padding and all, for
    bytes that no encoder of ours would write."""
    return b"".join(bytes(p) for p in codec._framed(head, body))


def test_decode_of_damaged_bytes_is_a_value_error_and_no_more():
    """A small fuzz of codec.decode, the parser of what another node's
    worker put: mutated encodings of arrays, tensors and plain data decode
    or raise ValueError; nothing else escapes, nothing hangs or allocates
    what the bytes do not hold (the address space is capped at 1 GiB more
    than it is now meanwhile)."""
    import random
    import resource
    import warnings
    values = [np.arange(6, dtype=np.float32).reshape(2, 3), {"a": np.zeros(3), "b": [1, "x", b"y"]},
              np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8", (2,))])]
    torch = sys.modules.get("torch")
    if torch is not None:
        values += [torch.ones(2, 3, dtype=torch.bfloat16), {"t": torch.tensor(1.0)}]
    seeds = [b"".join(bytes(p) for p in codec.encode(v)) for v in values]
    rnd, soft = random.Random(21), resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        now = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (now + (1 << 30), soft[1]))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # numpy's on odd dtype spellings
            for _ in range(5000):
                b = bytearray(rnd.choice(seeds))
                for _ in range(rnd.randint(1, 6)):
                    at, op = rnd.randrange(len(b)), rnd.randrange(4)
                    if op == 0:
                        b[at] = rnd.randrange(256)
                    elif op == 1:
                        del b[at:at + rnd.randint(1, 16)]
                    elif op == 2:
                        b[at:at] = rnd.randbytes(rnd.randint(1, 8))
                    else:
                        b[at:at + 1] = rnd.choice([b"9", b"[", b"{", b'"', b",", b"-", b"0" * 12])
                try:
                    codec.decode(b)
                except ValueError:
                    pass
    finally:
        resource.setrlimit(resource.RLIMIT_AS, soft)


@pytest.mark.parametrize("raw", [
    framed({"k": "numpy", "d": "|O", "s": [1]}, b"\0" * 8),           # Python objects
    framed({"k": "numpy", "d": "<f4", "s": [3]}, b"\0" * 8),          # the wrong size
    framed({"k": "msgpack"}, bytes([0x91, 0xd4, 1, 0])),              # extension 1, not an array
    framed({"k": "numpy", "d": "<f4", "s": [1 << 40]}),                # a huge empty array
    framed({"k": "torch", "d": "float32", "s": [1 << 40]}),            # ... or tensor
    framed({"k": "torch", "d": "float32", "s": [-1]}, b"\0" * 4),
], ids=["object dtype", "short body", "bad extension", "huge array", "huge tensor", "shape -1"])
def test_bytes_no_encoder_writes_are_refused(one, raw, caplog):
    k = rid()
    with open(os.path.join(ONE, "0", "1", k), "wb") as f:
        f.write(raw)
    with caplog.at_level(logging.ERROR, logger="omnifs.vllm_omni"):
        assert one.get("0", "1", k) is None
    assert "failed" in caplog.text


def test_plain_data_round_trip(one):
    k = rid()
    d = {"a": [1, 2.5, "x", None, True], "b": {"nested": b"\x00bytes"}, "n": -7}
    one.put("0", "1", k, d)
    assert one.get("0", "1", k)[0] == d


def test_unserializable_is_false_0_none(one, caplog):
    with caplog.at_level(logging.ERROR, logger="omnifs.vllm_omni"):
        assert one.put("0", "1", rid(), object()) == (False, 0, None)
    assert "put" in caplog.text


def test_bad_names_are_false_0_none_and_none(one, caplog):
    """A key may hold "/" (file_name()), not start with "." or be empty."""
    with caplog.at_level(logging.ERROR, logger="omnifs.vllm_omni"):
        assert one.put("0", "1", "", b"x") == (False, 0, None)
        assert one.put(".hidden", "1", "k", b"x") == (False, 0, None)
        assert one.get("0", "1", ".k", timeout=1) is None
    assert caplog.text.count("failed") == 3


def test_stages_too_long_are_enametoolong_as_the_filesystem_says():
    m = omnifs.Mount(ONE)
    for args in (("s" * 65, "1", "k"), ("0", "s" * 65, "k")):
        for call in (lambda: m.put(*args, b"x"), lambda: open(os.path.join(ONE, *args), "wb")):
            with pytest.raises(OSError) as e:
                call()
            assert e.value.errno == errno.ENAMETOOLONG, args
    assert m.put("s" * 64, "1", "k" * 255, b"x") == 1     # the longest names are fine
    m.remove("s" * 64, "1", "k" * 255)
    for args in (("s" * 65 + "/", "1", "k"), ("0", "1", "a/" + "k" * 300)):
        with pytest.raises(OSError) as e:
            m.put(*args, b"x")                  # bad before long
        assert e.value.errno == errno.EINVAL, args


def test_put_of_an_existing_key_fails(one):
    k = rid()
    assert one.put("0", "1", k, b"1")[0]
    assert one.put("0", "1", k, b"2") == (False, 0, None)
    with pytest.raises(FileExistsError):
        omnifs.Mount(ONE).put("0", "1", k, b"3")


def test_get_times_out_within_10_percent(one):
    for timeout in (0.3, 1.0):
        on_time(lambda: one.get("0", "1", rid(), timeout=timeout) is None, timeout, timeout * 0.1)


def test_get_with_deadline(one):
    on_time(lambda: one.get_with_deadline("0", "1", rid(), deadline=time.monotonic() + 0.3)
            is None, 0.3, 0.03)
    assert one.get_with_deadline("0", "1", rid(), deadline=time.monotonic() - 1) is None


@pytest.mark.parametrize("size", [3, 5 << 20])     # one request, and a file's write
def test_mount_put_refuses_what_it_cannot_do_and_leaves_nothing(size):
    m, k = omnifs.Mount(ONE), rid()
    for bad in (-1, -5, 1.5, "2", True):
        with pytest.raises(ValueError, match=re.escape("readers must be an integer >= 0, not %r" % bad)):
            m.put("0", "1", k, b"x" * size, readers=bad)
    with pytest.raises(TypeError, match="put takes bytes-like data or a list of them, not str"):
        m.put("0", "1", k, "text")
    assert k not in os.listdir(os.path.join(ONE, "0", "1"))
    assert m.put("0", "1", k, b"x" * size, readers=np.int64(2)) == size
    assert os.getxattr(os.path.join(ONE, "0", "1", k), "user.omni.readers") == b"2"


def test_mount_get_raises_file_not_found():
    with pytest.raises(FileNotFoundError):
        omnifs.Mount(ONE).get("0", "1", rid(), timeout=0.1)


def test_get_cuda_without_a_gpu_leaves_the_object():
    torch = pytest.importorskip("torch", reason="torch is not importable here")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: tests/cuda checks get_cuda")
    m, k = omnifs.Mount(ONE), rid()
    m.put("0", "1", k, b"for the GPU")
    with pytest.raises(OSError) as e:
        m.get_cuda("0", "1", k, timeout=1)
    assert e.value.errno == errno.ENODEV and "needs a GPU" in str(e.value)
    assert m.get("0", "1", k, timeout=1) == b"for the GPU"


def test_mount_view_refuses_a_rank_that_is_none():
    for rank, of in ((2, 2), (-1, 2), (1.5, 2), (0, 0), ("0", 1)):
        with pytest.raises(ValueError, match="a view is rank r of T with 0 <= r < T"):
            omnifs.Mount(ONE).view("0", "1", rid(), rank, of, timeout=0.1)


def test_mount_get_refuses_a_timeout_that_is_no_time():
    for bad in ("1", float("nan"), float("inf"), [1], True):
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds or None"):
            omnifs.Mount(ONE).get("0", "1", rid(), timeout=bad)
    with pytest.raises(FileNotFoundError):      # numpy's numbers are numbers
        omnifs.Mount(ONE).get("0", "1", rid(), timeout=np.float32(0.05))


def cpu_ms(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 // os.sysconf("SC_CLK_TCK")


WAITER = """
import sys, time
from omnifs.vllm_omni import OmniFSConnector
c = OmniFSConnector({"mount": sys.argv[1], "timeout_s": 20})
print("ready", flush=True)
r = c.get("0", "1", sys.argv[2])
print(time.monotonic(), r[0].decode() if r else None, flush=True)
"""


@pytest.mark.parametrize("writer,reader", [(ONE, ONE), (B, C)], ids=["one-node", "b-to-c"])
def test_get_waits_in_open_without_polling(writer, reader):
    k = rid()
    p = subprocess.Popen([sys.executable, "-c", WAITER, reader, k], stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ))
    try:
        assert p.stdout.readline().strip() == "ready"
        before = cpu_ms(p.pid)
        deadline = time.monotonic() + 1.5       # the waiter sits in open() meanwhile
        while time.monotonic() < deadline:
            time.sleep(0.1)
        spent = cpu_ms(p.pid) - before
        with OmniFSConnector({"mount": writer}) as w:
            put_at = time.monotonic()
            assert w.put("0", "1", k, b"late")[0]
        got_at, val = p.stdout.readline().split()
        assert val == "late"
        assert float(got_at) - put_at < 1.0
        assert spent <= 20, "the waiting process used %d ms of CPU in 1.5 s" % spent
    finally:
        p.kill()
        p.wait()


def test_cross_node_round_trip():
    with OmniFSConnector({"mount": B}) as b, OmniFSConnector({"mount": C}) as c:
        k = rid()
        data = os.urandom(3 << 20)
        assert b.put("0", "1", k, data)[:2] == (True, len(data))
        assert c.get("0", "1", k) == (data, len(data))


def test_request_of():
    assert request_of("r1", "r1") and request_of("r1_0_0_1_2", "r1")
    assert request_of("r1.rank0of2", "r1") and request_of("omni_0_to_1_kv_cache_r1", "r1")
    assert not request_of("r10", "r1") and not request_of("xr1", "r1")
    assert not request_of("omni_0_to_1_kv_cache_r10", "r1")


def pool_used(mount):
    return omnifs.Mount(mount).health()["pool"]["used"]


def test_cleanup_leaves_nothing_on_any_node():
    r, other = rid(), rid()
    with OmniFSConnector({"mount": B}) as b, OmniFSConnector({"mount": C}) as c:
        c.put("1", "2", other, b"keep")
        b.put("0", "1", r + "0", b"another request's")
        used_b, used_c = pool_used(B), pool_used(C)
        b.put("0", "1", r, b"a" * 5000)
        b.put("0", "2", r + "_0_0_0_1", b"b" * 5000)
        b.put("0", "1", "omni_0_to_1_kv_cache_" + r, b"c")
        c.put("1", "2", r + ".rank0of2", b"d" * 70000)
        writing = open(os.path.join(B, "0", "1", r + "_w"), "wb", buffering=0)
        writing.write(b"e" * 9000)
        reading = open(os.path.join(B, "0", "2", r + "_0_0_0_1"), "rb", buffering=0)
        assert pool_used(B) > used_b and pool_used(C) > used_c
        assert c.cleanup(r) is True
        assert c.health()["removed"] == 5, "5 objects went"
        with pytest.raises(FileNotFoundError):
            writing.write(b"more")      # removed while being written
        writing.close()
        with reading:       # SPEC 4.5: open readers finish their reads
            assert reading.read() == b"b" * 5000
        for m in (B, C):
            for f, t in omnifs.Mount(m).edges():
                left = [k for k in omnifs.Mount(m).keys(f, t) if request_of(k, r)]
                assert left == [], (m, f, t, left)
        assert (pool_used(B), pool_used(C)) == (used_b, used_c), "every pool as before"
        assert c.cleanup(r) is False
        assert omnifs.Mount(B).cleanup(r) == (0, 0), "none left, no node missed"
        assert c.get("1", "2", other) == (b"keep", 4)
        assert c.get("0", "1", r + "0") == (b"another request's", 17)


def test_what_a_stage_puts_after_its_request_was_cleaned_up_is_not_kept(caplog):
    """A stage worker that finishes after its request was aborted: its
    puts, on any node, are refused (README, "Cleaning up a request"), and
    gets of the request's keys answer None at once."""
    r, other = rid(), rid()
    with OmniFSConnector({"mount": B, "timeout_s": 30}) as b, \
            OmniFSConnector({"mount": C, "timeout_s": 30}) as c:
        b.put("0", "1", r + "_0_0", b"before")
        assert c.cleanup(r) is True
        used_b, used_c = pool_used(B), pool_used(C)
        with caplog.at_level(logging.WARNING, logger="omnifs.vllm_omni"):
            for conn, key, data in ((b, r + "_0_1", b"late"), (c, r, b"x" * 100000),
                                    (b, "omni_0_to_1_kv_cache_" + r, b"kv"),
                                    (c, r + ".rank0of2", b"shard")):
                assert conn.put("0", "1", key, data) == (False, 0, None), key
        assert caplog.text.count("its request was cleaned up; not kept") == 4
        assert b.health()["put_failures"] == 2 and c.health()["put_failures"] == 2
        with pytest.raises(OSError) as e:
            open(os.path.join(B, "0", "1", r + "_0_2"), "wb").close()
        assert e.value.errno == errno.ECANCELED, "a plain file too"
        assert omnifs.Mount(B).stats()["refused"] >= 3
        t = time.monotonic()
        assert c.get("0", "1", r + "_0_1") is None
        assert time.monotonic() - t < 5, "a get of its key: None at once, not after 30 s"
        assert (pool_used(B), pool_used(C)) == (used_b, used_c), "nothing kept"
        for m in (B, C):
            assert [k for k in omnifs.Mount(m).keys("0", "1") if request_of(k, r)] == [], m
        assert b.put("0", "1", other + "_0_1", b"fine")[0], "another request puts as ever"
        assert c.get("0", "1", other + "_0_1") == (b"fine", 4)


def test_file_name():
    assert file_name("r1_0_0@tensor/embed.prefill") == "r1_0_0@tensor%2Fembed.prefill"
    assert file_name("a%2Fb/c%") == "a%252Fb%2Fc%25", "a % is escaped first"
    for k in ("r1", "r1.rank0of2", "omni_0_to_1_kv_cache_r1", "r1_0_0_1_2@x"):
        assert file_name(k) == k, "a key without / or % is its own name"


def test_keys_with_a_slash_or_a_percent_cross_nodes_and_clean_up():
    """vllm-omni's keys are any strings: Qwen3-Omni's tensor packets hold a
    "/" (<rid>_<stage>_<chunk>@tensor/<field>).  Each key its own object,
    also one that spells another's escape; cleanup finds them all."""
    r = rid()
    keys = [r + "_0_0@tensor/embed.prefill", r + "_0_0@tensor%2Fembed.prefill",
            r + "_0_0@tensor/a/b", r + "_%", r + "_%25"]
    with OmniFSConnector({"mount": B}) as b, OmniFSConnector({"mount": C}) as c:
        b.put("0", "1", r + "%", b"not the request's: no _ or . after its id")
        used_b = pool_used(B)
        for i, k in enumerate(keys):
            assert b.put("0", "1", k, b"%d" % i * 5000)[:2] == (True, 5000), k
        names = set(omnifs.Mount(C).keys("0", "1"))
        assert {file_name(k) for k in keys} <= names
        assert c.get("0", "1", keys[2], timeout=5) == (b"2" * 5000, 5000)
        assert c.cleanup(r) is True and c.health()["removed"] == 4, "the other 4 went"
        for m in (B, C):
            left = [n for n in omnifs.Mount(m).keys("0", "1") if n.startswith(r)]
            assert left == [r + "%25"], m
        assert pool_used(B) == used_b, "b's pool as before"
        assert c.get("0", "1", keys[0], timeout=0.2) is None
        assert c.get("0", "1", r + "%")[0].startswith(b"not the request's")


def test_qwen3_omni_tensor_packets_across_nodes():
    """A Qwen3-Omni thinker's payload as vllm-omni sends it through a
    connector that takes raw data: each tensor put under
    <rid>_<stage>_<chunk>@tensor/<field>, then a sidecar naming them under
    <rid>_<stage>_<chunk>; the talker gets the sidecar and each tensor."""
    torch = pytest.importorskip("torch", reason="torch is not importable here")
    ext, chunk = rid(), 3
    base = "%s_%d_%d" % (ext, 0, chunk)
    fields = {"embed.prefill": torch.randn(7, 16, dtype=torch.bfloat16),
              "embed.tts_bos": torch.randn(1, 16), "embed.tts_eos": torch.randn(1, 16),
              "embed.tts_pad": torch.randn(1, 16), "hidden_states.output": torch.randn(7, 16)}
    entries = [{"name": f, "dtype": str(t.dtype), "shape": list(t.shape), "device": "cpu",
                "layout": "contiguous", "transfer_key": base + "@tensor/" + f}
               for f, t in fields.items()]
    sidecar = {"packet_version": 1, "request_id": ext, "external_req_id": ext,
               "source_stage_id": 0, "target_stage_id": 1, "sidecar_put_key": base,
               "tensor_entries": entries, "metadata": {"ids": {"all": [1, 2, 3]}}}
    with OmniFSConnector({"mount": B}) as b, OmniFSConnector({"mount": C}) as c:
        assert OmniFSConnector.supports_raw_data, "what makes vllm-omni take this path"
        for e in entries:
            assert b.put("0", "1", e["transfer_key"], fields[e["name"]])[0], e["transfer_key"]
        assert b.put("0", "1", base, sidecar)[0]
        got, _ = c.get("0", "1", base)
        assert got == sidecar
        for e in got["tensor_entries"]:
            t, _ = c.get("0", "1", e["transfer_key"])
            assert isinstance(t, torch.Tensor) and str(t.dtype) == e["dtype"]
            assert torch.equal(t, fields[e["name"]]), e["name"]
        assert not [n for n in omnifs.Mount(C).keys("0", "1") if n.startswith(ext)], "consumed"


def test_cleanup_answers_the_gets_still_waiting_for_it():
    import threading
    r, got = rid(), {}
    with OmniFSConnector({"mount": C, "timeout_s": 60}) as c:
        def wait():
            t = time.monotonic()
            got["r"] = c.get("0", "1", r + "_0_1")
            got["s"] = time.monotonic() - t
        before = omnifs.Mount(C).stats()["waiters"]
        th = threading.Thread(target=wait, daemon=True)
        th.start()
        assert waiters_become(C, before + 1) == before + 1, "the get waits on c"
        assert omnifs.Mount(B).cleanup(r) == (0, 0), "nothing to remove, every node told"
        th.join(10)
        assert not th.is_alive() and got["r"] is None, "the get on c ended: the request is over"
        assert got["s"] < 10, "long before its 60 s"


def dir_ioctl_errno(path, rw, nr, buf, size=None):
    """The errno of a hand-made ioctl of buf (size bytes, or all of it,
    padded) on the directory path (0: it worked)."""
    import fcntl
    from omnifs import small
    n = len(buf) if size is None else size
    buf = bytearray(buf) + bytes(max(0, n - len(buf)))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, small.ioc(rw, nr, n), buf, True)
        return 0
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)


def cleanup_errno(head, body, size=None):
    """The errno of a hand-made OMNIFS_IOC_CLEANUP on B's root (0: it worked)."""
    return dir_ioctl_errno(B, 3, 0x18, omnifs._CLEANUP.pack(*head) + body, size)


def test_cleanup_refuses_an_id_that_is_no_key_and_removes_nothing():
    r = rid()
    omnifs.Mount(B).put("0", "1", r, b"x")
    M = omnifs._CLEANUP_MAGIC
    for head, body, want in [
            ((M, 0, 0, 0), b"", errno.EINVAL),                  # empty
            ((M, 3, 0, 0), b".r1", errno.EINVAL),               # leading dot
            ((M, 3, 0, 0), b"a/b", errno.EINVAL),               # a slash
            ((M, 3, 0, 0), b"a\0b", errno.EINVAL),              # a NUL
            ((M, 256, 0, 0), b"r" * 256, errno.ENAMETOOLONG),   # over 255 bytes
            ((M, 40, 0, 0), r.encode(), errno.EINVAL),          # longer than what came
            ((M + 1, len(r), 0, 0), r.encode(), errno.EINVAL)]:  # not its magic
        assert cleanup_errno(head, body) == want, (head, body)
    assert cleanup_errno((M, len(r), 0, 0), r.encode(), size=16) == errno.EINVAL, "a short buffer"
    assert r in omnifs.Mount(B).keys("0", "1"), "nothing removed"
    for bad, want in (("", errno.EINVAL), (".x", errno.EINVAL), ("a/b", errno.EINVAL),
                      ("r" * 256, errno.ENAMETOOLONG)):           # as the daemon says
        with pytest.raises(OSError) as e:
            omnifs.Mount(B).cleanup(bad)
        assert e.value.errno == want, bad
    assert omnifs.Mount(B).cleanup(r) == (1, 0)


def test_cleanup_through_a_daemon_without_the_ioctl(monkeypatch, caplog):
    r = rid()
    with OmniFSConnector({"mount": C}) as c:
        c.put("1", "2", r, b"x")
        c.put("1", "2", r + "_1", b"y")

        def old_daemon(self, request_id):
            raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")
        monkeypatch.setattr(omnifs.Mount, "cleanup", old_daemon)
        assert c.cleanup(r) is True
        assert c.health()["removed"] == 2
        assert not [k for k in omnifs.Mount(C).keys("1", "2") if request_of(k, r)]


def test_health_and_close_twice():
    c = OmniFSConnector({"mount": ONE})
    c.put("0", "1", rid(), b"x")
    h = c.health()
    assert h["status"] == "healthy" and h["puts"] == 1 and h["node"] == "a"
    c.close()
    c.close()
    assert c.health()["status"] == "unhealthy"
    assert c.put("0", "1", rid(), b"x") == (False, 0, None)
    assert c.get("0", "1", rid(), timeout=0.1) is None


def test_not_a_mount_and_bad_config():
    with pytest.raises(OSError) as e:
        OmniFSConnector({"mount": "/tmp"})
    assert e.value.errno == errno.ENOTCONN
    for bad in ({"timeout_s": 0}, {"timeout_s": float("nan")}, {"recv_timeout": float("inf")},
                {"readers": -1}):
        with pytest.raises(ValueError, match="must be > 0 and finite, readers >= 0"):
            OmniFSConnector({"mount": ONE, **bad})
    for name, bad, what in (("timeout_s", "soon", "a number"), ("timeout_s", [], "a number"),
                            ("readers", "x", "a whole number"), ("readers", 2.5, "a whole number")):
        with pytest.raises(ValueError, match=re.escape("extra %s must be %s, not %r" % (name, what, bad))):
            OmniFSConnector({"mount": ONE, name: bad})
    with OmniFSConnector({"mount": ONE, "readers": "2"}) as c:     # YAML may quote it
        assert c.readers == 2


def fds():
    return len(os.listdir("/proc/self/fd"))


def test_dropped_unclosed_they_leave_no_descriptors():
    """A Mount or a connector let go without close() closes its edges'
    descriptors all the same (a worker making one per request ran out)."""
    gc.collect()
    before = fds()
    for i in range(20):
        c, m = OmniFSConnector({"mount": ONE}), omnifs.Mount(ONE)
        k = rid()
        assert c.put("0", "1", k, b"x" * 100)[0] and c.get("0", "1", k) == (b"x" * 100, 100)
        m.put("0", "2", k, b"y")
        m.close()                   # closed, then used again: those too
        assert m.get("0", "2", k) == b"y"
        del c, m
    gc.collect()
    assert fds() == before


def test_close_of_a_connector_whose_constructor_failed(monkeypatch):
    """vllm-omni's base class calls close() from __del__, also when the
    constructor raised: nothing may come of it but the constructor's error."""
    class Closing(OmniFSConnector):
        def __del__(self):
            self.close()
    unraised = []
    monkeypatch.setattr(sys, "unraisablehook", unraised.append)
    for bad in ({"mount": "/tmp"}, {"mount": ONE, "timeout_s": 0}, {"mount": ONE, "readers": "x"}, 7):
        with pytest.raises((OSError, ValueError, TypeError)):
            Closing(bad)
        gc.collect()
    Closing.__new__(Closing).close()
    assert unraised == []


def test_other_extras_are_said_and_kept_for_vllm_omni(caplog):
    """vllm-omni's stage processors read their settings in connector.config
    (qwen3_omni's codec_chunk_frames); a typo is said in the log."""
    extra = {"mount": ONE, "timeout": 5, "codec_chunk_frames": 10}
    with caplog.at_level(logging.INFO, logger="omnifs.vllm_omni"):
        with OmniFSConnector(extra) as c:
            assert c.timeout == 30.0
            raw = getattr(c, "config", {}) or {}        # as the processors read it
            assert raw.get("extra", raw)["codec_chunk_frames"] == 10 and raw == extra
    assert "extra 'codec_chunk_frames' is not one of mount" in caplog.text
    assert "extra 'timeout' is not one of" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_registered_with_vllm_omni():
    pytest.importorskip("vllm_omni", reason="vllm_omni is not installed here")
    from vllm_omni.distributed.omni_connectors.factory import OmniConnectorFactory
    from vllm_omni.distributed.omni_connectors.utils.config import ConnectorSpec
    c = OmniConnectorFactory.create_connector(ConnectorSpec("OmniFSConnector", {"mount": ONE}))
    assert isinstance(c, OmniFSConnector)


def test_capabilities_say_one_instance_serves_both_edges():
    """vllm-omni's factory makes a middle stage's two edges one connector
    (role dual) when its class's capabilities say so; each flag the
    installed vllm-omni's ConnectorCapabilities has is set, none added."""
    import dataclasses

    from omnifs.vllm_omni import capabilities

    @dataclasses.dataclass(frozen=True)
    class Newest:               # as vllm-omni's connectors/base.py spells them
        supports_raw_data: bool = False
        supports_shared_dual: bool = False
        thread_safe_dual: bool = False

    @dataclasses.dataclass(frozen=True)
    class Before:
        supports_raw_data: bool = False
        supports_shared_dual: bool = False

    assert capabilities(Newest) == Newest(True, True, True)
    assert capabilities(Before) == Before(True, True)
    with pytest.raises(TypeError):      # not a dataclass: the import says so, keeps defaults
        capabilities(dict)
    if hasattr(OmniFSConnector, "capabilities"):    # vllm-omni installed
        caps = OmniFSConnector.capabilities
        assert caps.supports_raw_data and caps.supports_shared_dual


def test_one_connector_serves_a_middle_stage():
    """The talker's one connector (role dual, the extra vllm-omni merges)
    receives from b in a polling loop while its save thread puts to the
    next stage at the same time; the last stage gets every one whole."""
    n, got, errors, stop = 40, queue.Queue(), [], threading.Event()
    data = {"req-%s-%d" % (uuid.uuid4().hex[:6], i): os.urandom(1000 + 997 * i) for i in range(n)}
    dual = {"mount": C, "timeout_s": 20, "stage_id": 1, "role": "dual",
            "recv_rank_mapping": {"from_tp": 1, "to_tp": 1}}
    with OmniFSConnector({"mount": B}) as thinker, OmniFSConnector(dual) as talker, \
            OmniFSConnector({"mount": C, "timeout_s": 20}) as vocoder:

        def receive():          # vllm-omni's recv loop: one thread, polling
            left, deadline = set(data), time.monotonic() + 60
            while left and time.monotonic() < deadline and not stop.is_set():
                generation = talker.get_wakeup_generation()
                for k in sorted(left):
                    r = talker.get("0", "1", k)
                    if r is not None:
                        left.discard(k)
                        got.put((k, r[0]))
                if left:
                    talker.wait_for_change(generation, timeout=0.05)
            got.put(None)

        def save():             # ... and its save loop, the same instance
            while (item := got.get()) is not None:
                if not talker.put("1", "2", item[0], bytes(item[1]))[0]:
                    errors.append(item[0])

        threads = [threading.Thread(target=f, daemon=True) for f in (receive, save)]
        for th in threads:
            th.start()
        try:
            for k, v in data.items():
                assert thinker.put("0", "1", k, v)[0]
            for k, v in data.items():
                assert vocoder.get("1", "2", k) == (v, len(v)), k
        finally:                # a failure above ends the loops too, before the connectors close
            stop.set()
            for th in threads:
                th.join(10)
        assert not any(th.is_alive() for th in threads)
        h = talker.health()
        assert errors == [] and (h["gets"], h["puts"]) == (n, n)
        assert h["get_failures"] == h["put_failures"] == 0


# ---- vllm-omni's receive loops ----

def test_vllm_omnis_own_extras_are_taken_quietly(caplog):
    """vllm-omni adds stage_id, role, from_stage and to_stage to every
    connector's extra (and rank mappings to a dual one's); its chunk loops
    read connector.stage_id."""
    given = {"stage_id": 2, "role": "dual", "from_stage": 1, "to_stage": 2,
             "recv_rank_mapping": {"from_tp": 2, "to_tp": 1}, "send_rank_mapping": None,
             "rank_mapping": {"from_tp": 1, "to_tp": 1}}
    with caplog.at_level(logging.INFO, logger="omnifs.vllm_omni"):
        with OmniFSConnector({"mount": ONE, **given}) as c:
            assert c.stage_id == 2
    assert caplog.text == ""
    with OmniFSConnector({"mount": ONE}) as c, OmniFSConnector({"mount": ONE, "stage_id": "1"}) as d:
        assert (c.stage_id, d.stage_id, c.nowait) == (-1, 1, False)
    for name, bad, what in (("stage_id", "one", "a whole number"), ("stage_id", 1.5, "a whole number"),
                            ("nowait", "yes", "true or false"), ("nowait", 1, "true or false")):
        with pytest.raises(ValueError, match=re.escape("extra %s must be %s, not %r" % (name, what, bad))):
            OmniFSConnector({"mount": ONE, name: bad})


def receive_loop(c, keys, until, stats):
    """vllm-omni's receive loop as its model runner runs it (a snapshot of
    the connector's wake-up generation, a get of every key it waits for,
    and a wait_for_change of 5 ms when none came), until the keys came or
    until; returns what came, and each get's time in stats."""
    got = {}
    while len(got) < len(keys) and time.monotonic() < until:
        generation = c.get_wakeup_generation()
        progress = False
        for k in keys:
            if k in got:
                continue
            t = time.monotonic()
            r = c.get("0", "1", k)
            stats.append(time.monotonic() - t)
            if r is not None:
                got[k] = (r, time.monotonic())
                progress = True
        if not progress:
            c.wait_for_change(generation, timeout=0.005)
    return got


@pytest.mark.parametrize("writer,reader", [(ONE, ONE), (B, C)], ids=["one-node", "b-to-c"])
def test_a_receive_loop_is_never_held_up_by_one_key(writer, reader):
    """In the loop a get answers at once: a request whose chunk is late (or
    never comes) holds up no other, and a chunk is had as soon as it is
    published, never a whole timeout later."""
    r, late, never = rid(), rid(), rid()
    keys = [never + "_0_0", r + "_0_0", late + "_0_3"]
    with OmniFSConnector({"mount": reader, "timeout_s": 20, "stage_id": 1}) as c, \
            OmniFSConnector({"mount": writer}) as w:
        assert w.put("0", "1", keys[1], b"there before the loop asks")[0]
        stats, put_at = [], {}

        def publish_late():
            time.sleep(0.3)
            put_at[keys[2]] = time.monotonic()
            w.put("0", "1", keys[2], b"late" * 5000)
        th = threading.Thread(target=publish_late, daemon=True)
        th.start()
        got = receive_loop(c, keys, time.monotonic() + 3, stats)
        th.join()
        assert got[keys[1]][0] == (b"there before the loop asks", 26)
        assert got[keys[2]][0] == (b"late" * 5000, 20000)
        assert got[keys[2]][1] - put_at[keys[2]] < 1.0, "had when it came"
        assert keys[0] not in got and max(stats) < 0.5, "no get waited (timeout_s is 20)"
        assert c.health()["fetching"] == 1, "only the missing key's fetch is still out"
    assert not c._ahead.counts()[0], "closed: given up"


@pytest.mark.parametrize("writer,reader", [(ONE, ONE), (B, C)], ids=["one-node", "b-to-c"])
def test_a_loops_get_of_a_key_that_is_there_returns_it(writer, reader):
    """As vllm-omni's own connectors do: a loop that gets a packet's sidecar
    and then, at once, each piece it names (Qwen3-Omni's tensor packets)
    has them all.  A key only being written is not there yet."""
    ext = rid()
    base = ext + "_0_0"
    pieces = {base + "@tensor/" + f: os.urandom(n) for f, n in
              (("embed.prefill", 3 << 20), ("embed.tts_bos", 100), ("hidden_states.output", 5000))}
    with OmniFSConnector({"mount": reader, "timeout_s": 20}) as c, \
            OmniFSConnector({"mount": writer}) as w:
        generation = c.get_wakeup_generation()
        for k, v in pieces.items():
            assert w.put("0", "1", k, v)[0]
        assert w.put("0", "1", base, {"tensor_entries": sorted(pieces)})[0]
        for _ in range(500):            # b's publish reaches c by a message
            sidecar = c.get("0", "1", base)
            if sidecar is not None:
                break
            c.wait_for_change(generation, timeout=0.01)
        assert sidecar == ({"tensor_entries": sorted(pieces)}, sidecar[1])
        for k in sidecar[0]["tensor_entries"]:
            assert c.get("0", "1", k) == (pieces[k], len(pieces[k])), k
        assert c.health()["fetching"] == 0, "nothing was fetched ahead"
        k = rid()
        with open(os.path.join(reader, "0", "1", k), "wb", buffering=0) as f:
            f.write(b"being written")
            t = time.monotonic()
            assert c.get("0", "1", k) is None, "not published: not there"
            assert time.monotonic() - t < 0.5 and c.health()["fetching"] == 1
            assert c.health()["get_timeouts"] == 0, "nor did a get wait for it here"
        assert c.wait_for_change(generation, timeout=10) is True
        assert c.get("0", "1", k) == (b"being written", 13)


def test_a_loops_wait_ends_when_its_key_comes_and_other_threads_still_wait():
    k = rid()
    with OmniFSConnector({"mount": C, "timeout_s": 0.5}) as c, OmniFSConnector({"mount": B}) as w:
        generation = c.get_wakeup_generation()
        assert c.get("0", "1", k) is None
        threading.Timer(0.2, w.put, ("0", "1", k, b"here")).start()
        t = time.monotonic()
        assert c.wait_for_change(generation, timeout=10) is True
        assert time.monotonic() - t < 2, "woken by the arrival, not the timeout"
        assert c.wait_for_change(generation, timeout=10) is True, "at once: it changed"
        assert c.get("0", "1", k) == (b"here", 4)
        assert c.wait_for_change(c.get_wakeup_generation(), timeout=0.1) is False
        other = {}

        def blocking():     # a thread that never polled: its get waits as ever
            t = time.monotonic()
            other["r"] = c.get("0", "1", rid())
            other["s"] = time.monotonic() - t
        th = threading.Thread(target=blocking)
        th.start()
        th.join(5)
        assert other["r"] is None and 0.5 <= other["s"] < 2


def wait_fetches(c, want, s=10):
    """Until the connector's (fetching, fetched) is want."""
    deadline = time.monotonic() + s
    while (c.health()["fetching"], c.health()["fetched"]) != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return (c.health()["fetching"], c.health()["fetched"])


def test_nowait_gets_answer_at_once_in_any_thread():
    k = rid()
    with OmniFSConnector({"mount": ONE, "nowait": True, "timeout_s": 20}) as c:
        t = time.monotonic()
        assert c.get("0", "1", k) is None and time.monotonic() - t < 0.5
        generation = c.get_wakeup_generation()
        omnifs.Mount(ONE).put("0", "1", k, b"now")
        assert c.wait_for_change(generation, timeout=10) is True
        assert c.get("0", "1", k) == (b"now", 3)
        t = time.monotonic()
        assert c.get("0", "1", rid(), timeout=0.3) is None, "a timeout of its own: it waits"
        assert time.monotonic() - t >= 0.3


def test_what_a_loop_gives_up_is_dropped_and_the_rest_stays():
    r, keep = rid(), rid()
    with OmniFSConnector({"mount": ONE, "nowait": True, "timeout_s": 20}) as c:
        m = omnifs.Mount(ONE)
        for k in (r + "_0_0", r + "_0_1", keep + "_0_0"):
            assert c.get("0", "1", k) is None
            m.put("0", "1", k, k.encode())
        assert wait_fetches(c, (0, 3)) == (0, 3)
        c.abandon_get(r + "_0_0")
        assert wait_fetches(c, (0, 2)) == (0, 2)
        assert c.cleanup(r) is False, "nothing left in the pool: the fetch consumed it"
        assert wait_fetches(c, (0, 1)) == (0, 1)
        assert c.get("0", "1", keep + "_0_0") == (keep.encode() + b"_0_0", len(keep) + 4)
        assert c.get("0", "1", r + "_0_1") is None, "given up: fetched again"
        assert wait_fetches(c, (0, 0)) == (0, 0), "... and over at once: the request was cleaned up"
        r2 = rid()
        assert c.get("0", "1", r2 + "_0_1") is None, "not there: fetched"
        c.abandon_get(r2 + "_0_1")
        assert c.get("0", "1", r2 + "_0_1") is None, "wanted again"
        assert c.health()["fetching"] == 1
        c.cleanup(r2)               # as a model runner ends it: no fetch waits on
        assert c.health()["fetching"] == 0


def test_a_fetch_nobody_takes_is_dropped_after_timeout_s(caplog):
    k, k2 = rid(), rid()
    with OmniFSConnector({"mount": ONE, "nowait": True, "timeout_s": 0.5}) as c:
        assert c.get("0", "1", k) is None
        omnifs.Mount(ONE).put("0", "1", k, b"unclaimed")
        assert wait_fetches(c, (0, 1)) == (0, 1)
        time.sleep(0.6)                     # past its timeout_s, then another comes
        with caplog.at_level(logging.WARNING, logger="omnifs.vllm_omni"):
            assert c.get("0", "1", k2) is None
            omnifs.Mount(ONE).put("0", "1", k2, b"claimed")
            assert wait_fetches(c, (0, 1)) == (0, 1)
        assert "%s was fetched but not taken within 0.5s; dropped" % k in caplog.text
        assert c.get("0", "1", k2) == (b"claimed", 7) and c.get("0", "1", k) is None


def test_a_fetch_without_a_thread_is_tried_again(monkeypatch, caplog):
    k = rid()
    with OmniFSConnector({"mount": ONE, "nowait": True, "timeout_s": 20}) as c:
        def no_thread(self):
            raise RuntimeError("can't start new thread")
        with monkeypatch.context() as mp, caplog.at_level(logging.ERROR, logger="omnifs.vllm_omni"):
            mp.setattr(threading.Thread, "start", no_thread)
            assert c.get("0", "1", k) is None
        assert "get 0/1/%s: can't start new thread" % k in caplog.text
        assert c.health()["fetching"] == 0
        assert c.get("0", "1", k) is None, "its fetch starts now"
        assert c.health()["fetching"] == 1
        omnifs.Mount(ONE).put("0", "1", k, b"late")
        assert wait_fetches(c, (0, 1)) == (0, 1)
        assert c.get("0", "1", k) == (b"late", 4)


def test_a_key_given_up_while_it_is_looked_at_is_not_fetched():
    from omnifs.ahead import Ahead
    fetched = threading.Event()
    a = Ahead(lambda f, t, k: fetched.set(), 1.0,
              here=lambda f, t, k: a.drop(lambda key: key == k))    # abandon_get, meanwhile
    assert a.take("0", "1", "k") is None
    assert not fetched.wait(0.3) and a.counts() == (0, 0)


def test_close_ends_a_loops_wait(caplog):
    """And the wait of its fetch in the daemon, with it: the fetch's
    thread ends, quietly, instead of waiting out timeout_s."""
    w0 = omnifs.Mount(ONE).stats()["waiters"]
    c, k = OmniFSConnector({"mount": ONE, "timeout_s": 30}), rid()
    generation = c.get_wakeup_generation()
    assert c.get("0", "1", k) is None
    assert waiters_become(ONE, w0 + 1) == w0 + 1, "the fetch waits in the daemon"
    threading.Timer(0.2, c.close).start()
    t = time.monotonic()
    with caplog.at_level(logging.INFO, logger="omnifs.vllm_omni"):
        assert c.wait_for_change(generation, timeout=10) is False
        assert time.monotonic() - t < 2
        assert waiters_become(ONE, w0) == w0, "the fetch still waits after close()"
        for th in [t for t in threading.enumerate() if t.name == "omnifs-ahead"]:
            th.join(5)
            assert not th.is_alive(), "the fetch's thread outlives close()"
    assert c.get_wakeup_generation() is None and c.health()["fetching"] == 0
    assert c.health()["get_failures"] == 0
    assert "ended by close()" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    c.reap_consumed()


def test_mount_close_ends_its_waiting_gets():
    m, k, w0 = omnifs.Mount(ONE), rid(), omnifs.Mount(ONE).stats()["waiters"]
    out = queue.Queue()

    def get():
        try:
            out.put(m.get("0", "1", k, timeout=30))
        except OSError as e:
            out.put(e)
    th = threading.Thread(target=get)
    th.start()
    assert waiters_become(ONE, w0 + 1) == w0 + 1, "the get waits in the daemon"
    t = time.monotonic()
    m.close()
    e = out.get(timeout=10)
    assert time.monotonic() - t < 2
    th.join(5)
    assert isinstance(e, OSError) and e.errno == errno.ECANCELED, e
    assert e.filename == m.path("0", "1", k)
    assert waiters_become(ONE, w0) == w0
    omnifs.Mount(ONE).put("0", "1", k, b"after close")   # the Mount is still usable
    assert m.get("0", "1", k, timeout=5) == b"after close"


def test_unwait_ends_the_gets_of_one_open_edge():
    """OMNIFS_IOC_UNWAIT ends the GETs waiting through its descriptor
    (not another's of the same edge), then every GET through it at once;
    a PUT through it still publishes."""
    from omnifs import small
    edge, k, w0 = os.path.join(ONE, "0", "1"), rid(), omnifs.Mount(ONE).stats()["waiters"]
    fds = [os.open(edge, os.O_RDONLY | os.O_DIRECTORY) for _ in range(2)]
    out = [queue.Queue(), queue.Queue()]

    def get(i):
        try:
            out[i].put(small.get(fds[i], k, 30000))
        except OSError as e:
            out[i].put(e)
    ths = [threading.Thread(target=get, args=(i,)) for i in range(2)]
    try:
        for th in ths:
            th.start()
        assert waiters_become(ONE, w0 + 2) == w0 + 2, "both gets wait"
        assert small.unwait(fds[0]) == 1
        e = out[0].get(timeout=5)
        assert isinstance(e, OSError) and e.errno == errno.ECANCELED, e
        assert waiters_become(ONE, w0 + 1) == w0 + 1, "the other descriptor's get waits on"
        t = time.monotonic()
        with pytest.raises(OSError) as later:
            small.get(fds[0], rid(), 30000)
        assert later.value.errno == errno.ECANCELED and time.monotonic() - t < 1
        assert small.unwait(fds[0]) == 0
        small.put(fds[0], k.encode(), [b"through the unwaited one"], 24)
        assert out[1].get(timeout=5) == b"through the unwaited one"
        root = os.open(ONE, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(OSError) as notty:
                small.unwait(root)
            assert notty.value.errno == errno.ENOTTY
        finally:
            os.close(root)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                small.unwait(fd)
            os.close(fd)
        for th in ths:
            th.join(5)


def test_unwait_leaves_no_get_behind_that_raced_it():
    """GETs that reach the daemon before, while and after an UNWAIT of
    their descriptor runs are all ended: 8 threads send theirs 0-2 ms after
    they start, the UNWAIT goes 0-2 ms after them, in 20 rounds; every
    thread is back within 5 s, with ECANCELED (a GET that slipped past
    would wait out its 30 s).  Fails with the daemon's two looks at the
    flag left out (the later GETs wait)."""
    from omnifs import small
    edge, rng = os.path.join(ONE, "0", "1"), np.random.default_rng(7)
    for rnd in range(20):
        fd, got = os.open(edge, os.O_RDONLY | os.O_DIRECTORY), queue.Queue()
        naps = rng.random(9) * 0.002

        def get(i):
            time.sleep(naps[i])
            try:
                got.put(small.get(fd, rid(), 30000))
            except OSError as e:
                got.put(e.errno)
        ths = [threading.Thread(target=get, args=(i,)) for i in range(8)]
        try:
            for th in ths:
                th.start()
            time.sleep(naps[8])
            small.unwait(fd)
            for th in ths:
                th.join(5)
            assert not any(th.is_alive() for th in ths), "a GET slipped past, round %d" % rnd
            assert [got.get() for _ in ths] == [errno.ECANCELED] * 8
        finally:
            with contextlib.suppress(OSError):
                small.unwait(fd)
            for th in ths:
                th.join(35)
            os.close(fd)


# ---- KV with heterogeneous TP, by views ----

TOK, H, D = 5, 8, 4


def head_rows(whole, h0, n, es=2):
    """[TOK, n, D] bytes of heads h0.. of a [TOK, H, D] tensor of es-byte elements."""
    return b"".join(whole[(k * H + h0) * D * es:(k * H + h0 + n) * D * es] for k in range(TOK))


@pytest.mark.parametrize("S", [1, 2, 4, 8])
@pytest.mark.parametrize("T", [1, 2, 4, 8])
def test_kv_shards_through_views(S, T):
    r = rid()
    full = {(l, kv): os.urandom(TOK * H * D * 2) for l in range(2) for kv in "KV"}
    with OmniFSConnector({"mount": B}) as snd, OmniFSConnector({"mount": C}) as rcv:
        for i in range(S):          # sender rank i puts its unsliced shard
            hooks = tp_view_hooks(S, T, i)
            n = H // S
            payload = kvpy.vllm([head_rows(full[l, "K"], i * n, n) for l in range(2)],
                                [head_rows(full[l, "V"], i * n, n) for l in range(2)],
                                tokens=TOK, heads=n, head_dim=D, rid=r, bids=(3,),
                                meta={"seq_len": TOK})
            (key,) = hooks["kv_send_key_builder"](r, "0", "1")
            assert snd.put("0", "1", key, payload)[0]
        for t in range(T):          # receiver rank t gets its heads in one call
            mgr = use_tp_views(types.SimpleNamespace(
                _tp_topo=types.SimpleNamespace(source_tp_size=S, target_tp_size=T, local_rank=t)))
            [(key, _)] = mgr.kv_recv_key_builder(r, "0", "1")
            got = rcv.get("0", "1", key)
            assert got is not None, key
            data = mgr.kv_payload_slicer(mgr.kv_payload_merger([kvpy.vllm_decode(got[0])]))
            n = H // T
            for l in range(2):
                for kv, c in (("K", "key_cache"), ("V", "value_cache")):
                    d, shape, b = data[c][l]
                    assert d == "float16" and shape == [TOK, n, D]
                    assert b == head_rows(full[l, kv], t * n, n), (S, T, t, c, l)
            sl = data["metadata"].get("tp_head_slice")
            assert (sl is not None) == (T > S)
            if sl:
                assert sl["applied"] is True and sl["target_rank"] == t
        assert not [k for k in omnifs.Mount(C).keys("0", "1") if request_of(k, r)], \
            "every shard consumed by the views"


# What vllm-omni writes besides float16 with "i": its older to_bytes()
# (no "i"), dtypes such as AMD's fp8 KV cache, and the payload contract
# its receiver checks (the metadata a view must keep).
@pytest.mark.parametrize("dtype,layer_keys", [(8, False), (9, True), (16, True), (10, False)])
@pytest.mark.parametrize("S,T", [(2, 1), (1, 2)])
def test_kv_views_of_what_vllm_omni_also_writes(dtype, layer_keys, S, T):
    r, es = rid(), kvpy.ESIZE[dtype]
    meta = {"_kv_payload_contract": 1, "num_layers": 2, "seq_len": TOK, "block_size": 4}
    full = {(l, kv): os.urandom(TOK * H * D * es) for l in range(2) for kv in "KV"}
    with OmniFSConnector({"mount": B}) as snd, OmniFSConnector({"mount": C}) as rcv:
        for i in range(S):
            n = H // S
            payload = kvpy.vllm([head_rows(full[l, "K"], i * n, n, es) for l in range(2)],
                                [head_rows(full[l, "V"], i * n, n, es) for l in range(2)],
                                dtype=dtype, tokens=TOK, heads=n, head_dim=D, rid=r,
                                bids=(3, 9), meta=meta, layer_keys=layer_keys)
            (key,) = tp_view_hooks(S, T, i)["kv_send_key_builder"](r, "0", "1")
            assert snd.put("0", "1", key, payload)[0], "published"
        for t in range(T):
            [(key, _)] = tp_view_hooks(S, T, t)["kv_recv_key_builder"](r, "0", "1")
            got = rcv.get("0", "1", key)
            assert got is not None, key
            raw = got[0]
            td = json.loads(bytes(raw[4:4 + struct.unpack(">I", raw[:4])[0]]))["td"]
            assert all(("i" in e) == layer_keys for e in td), "written as the shards were"
            data = kvpy.vllm_decode(raw)
            n = H // T
            for l in range(2):
                for kv, c in (("K", "key_cache"), ("V", "value_cache")):
                    assert data[c][l] == (kvpy.TORCH[dtype], [TOK, n, D],
                                          head_rows(full[l, kv], t * n, n, es)), (c, l)
            # vllm-omni's validate_payload_contract(): the metadata as sent
            # (a slice adds only its mark), the request, every layer, seq_len.
            got_meta = dict(data["metadata"])
            got_meta.pop("tp_head_slice", None)
            assert got_meta == meta and data["request_id"] == r
            assert len(data["key_cache"]) == meta["num_layers"]
            assert all(k[1][0] == meta["seq_len"] for k in data["key_cache"] + data["value_cache"])


def test_tp_hooks_refuse_bad_topology():
    with pytest.raises(ValueError):
        tp_view_hooks(3, 2, 0)


# ---- the same-node hand-over (omnifs.direct, fs/direct.h) ----

def counters(mount):
    s = omnifs.Mount(mount).stats()
    return s["direct_gets"], s["direct_puts"]


@pytest.mark.parametrize("size", [64 << 10, (1 << 20) + 13, 5 << 20])
def test_same_node_hand_over_is_byte_exact_and_consumes(size):
    m, k, data = omnifs.Mount(ONE), rid(), os.urandom(size)
    g0, p0 = counters(ONE)
    assert m.put("0", "1", k, [data[:7], data[7:]], readers=2) == size  # an odd first piece
    assert counters(ONE) == (g0, p0 + 1), "the put went direct"
    assert open(os.path.join(ONE, "0", "1", k), "rb").read() == data     # cat sees it
    assert k in m.keys("0", "1")
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    assert counters(ONE)[0] == g0 + 1, "the get went direct"
    assert k not in m.keys("0", "1"), "its second complete read consumed it"


def test_hand_over_checks_its_integrity_like_a_write():
    m, k, data = omnifs.Mount(ONE), rid(), os.urandom(3 << 20)
    m.put("0", "1", k, data, readers=0)
    import xxhash
    got = os.getxattr(os.path.join(ONE, "0", "1", k), "user.omni.xxh3").decode()
    assert int(got, 16) == xxhash.xxh3_64_intdigest(data), "hashed at publish"
    m.remove("0", "1", k)


def placed_calls(monkeypatch):
    """The OMNIFS_IOC_PLACED calls this process makes, as they go."""
    import fcntl
    from omnifs import direct
    seen, real = [], fcntl.ioctl

    def spy(fd, cmd, *a):
        if cmd == direct.PLACED:
            seen.append(int.from_bytes(a[0], "little"))
        return real(fd, cmd, *a)
    monkeypatch.setattr(fcntl, "ioctl", spy)
    return seen


@pytest.mark.parametrize("mount", ["one", "cluster"])
def test_a_large_hand_over_is_hashed_as_it_lands(monkeypatch, mount):
    """Over 2 PLACED_STEPs, a put says each step is in as it lands, and
    the daemon's hash of the steps (xxh3 and chunk sums) is the bytes':
    checked by the xattr here, and by another node's pull of it."""
    import xxhash
    from omnifs import direct
    size = 3 * direct.PLACED_STEP + 13
    data = os.urandom(size)
    src, dst = (ONE, ONE) if mount == "one" else (B, C)
    m, k = omnifs.Mount(src), rid()
    seen = placed_calls(monkeypatch)
    m.put("0", "1", k, [data[:7], data[7:]], readers=1)  # an odd first piece
    assert seen == [direct.PLACED_STEP * i for i in (1, 2, 3)]
    got = os.getxattr(os.path.join(src, "0", "1", k), "user.omni.xxh3").decode()
    assert int(got, 16) == xxhash.xxh3_64_intdigest(data)
    bad = omnifs.Mount(dst).stats()["checksum_failures"]
    assert bytes(omnifs.Mount(dst).get("0", "1", k, timeout=5)) == data
    assert omnifs.Mount(dst).stats()["checksum_failures"] == bad


def test_a_large_get_is_byte_exact_from_any_offset():
    """copy_out fills a buffer from any offset of the object, checked by
    the daemon's cookie in the same call."""
    from omnifs import direct
    m, k, data = omnifs.Mount(ONE), rid(), os.urandom((40 << 20) + 5)
    m.put("0", "1", k, data, readers=0)
    p = os.path.join(ONE, "0", "1", k)
    with open(p, "rb") as f:
        pl = direct.where(f.fileno())
        buf = bytearray(len(data) - 3)
        assert direct.copy_out(pl, buf, skip=3) and buf == data[3:]
        pl.cookie ^= 1                                  # still checked
        assert not direct.copy_out(pl, bytearray(len(data)))
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    m.remove("0", "1", k)


def test_a_copy_never_leaves_the_calling_thread(monkeypatch):
    """A get's fresh pages are faulted in by the thread that asked (another
    CPU's can cost ten times as much), and a put's copy goes there too."""
    from omnifs import direct
    me, seen = threading.get_ident(), set()
    real = direct._memmove

    def spy(dst, src):
        seen.add(threading.get_ident())
        return real(dst, src)
    monkeypatch.setattr(direct, "_memmove", spy)
    m, k, data = omnifs.Mount(ONE), rid(), os.urandom(64 << 20)
    m.put("0", "1", k, data, readers=0)
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    assert seen == {me}
    m.remove("0", "1", k)


def test_the_pool_is_mapped_once_and_copies_are_memmoves(monkeypatch):
    """Where the daemon shares its pool (OMNIFS_IOC_SHARE), a Mount maps it
    once and moves every byte of its direct puts and gets with memmove,
    none with process_vm_*: from odd offsets too."""
    from omnifs import direct

    def no_vm(*a):
        raise AssertionError("a process_vm_ call")
    monkeypatch.setattr(direct, "_vm", no_vm)
    m, k, data = omnifs.Mount(ONE), rid(), os.urandom((40 << 20) + 5)
    g0, p0 = counters(ONE)
    m.put("0", "1", k, [data[:7], data[7:]], readers=0)   # an odd first piece
    pool = m._pool[1]
    assert pool is not None, "mapped"
    assert pool.addr % (2 << 20) == 0, "at a multiple of 2 MiB, as the daemon maps it"
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    assert m._pool[1] is pool, "once"
    assert counters(ONE) == (g0 + 1, p0 + 1), "both went direct"
    with open(os.path.join(ONE, "0", "1", k), "rb") as f:
        pl = direct.where(f.fileno())
        pl.pool = pool
        buf = bytearray(len(data) - 3)
        assert direct.copy_out(pl, buf, skip=3) and buf == data[3:]
    assert pool.local([(pool.base - 1, 2)]) is None, "nothing before the pool"
    assert pool.local([(pool.base + pool.size - 1, 2)]) is None, "nor after it"
    m.close()
    assert m._pool is None, "close lets the mapping go"
    at = "%x-" % pool.addr
    del pool, pl
    gc.collect()
    with open("/proc/self/maps") as f:
        assert not any(line.startswith(at) for line in f), "unmapped once nothing holds it"
    m.remove("0", "1", k)


def _vmflags(addr):
    """The VmFlags of this process's mapping that starts at addr."""
    at = None
    with open("/proc/self/smaps") as f:
        for line in f:
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                at = int(line.split("-", 1)[0], 16)
            elif line.startswith("VmFlags:") and at == addr:
                return line.split()[1:]
    return None


def test_a_workers_core_leaves_the_pool_out():
    """A worker's mapping of the pool is left out of its core dumps
    (MADV_DONTDUMP: "dd" in /proc/self/smaps), as the daemon's is: it is
    the node's memory for every stage, gigabytes, not the worker's."""
    m, k = omnifs.Mount(ONE), rid()
    m.put("0", "1", k, os.urandom(2 << 20), readers=0)
    pool = m._pool[1]
    assert pool is not None, "mapped"
    assert "dd" in _vmflags(pool.addr)
    m.remove("0", "1", k)
    m.close()


def test_a_pool_file_that_is_not_the_daemons_is_never_used(monkeypatch):
    """The file a Mount opens is checked by the cookie after the pool in
    it (another pid namespace would open some other process's): on a
    mismatch, and wherever the pool cannot be mapped, the copies go by
    process_vm_* instead, byte-exact."""
    from omnifs import direct, ioctl
    real = ioctl.call

    def forged(fd, cmd, buf, *a):   # the answer names a cookie not in the file
        real(fd, cmd, buf, *a)
        if cmd == direct.SHARE:
            buf[-1] ^= 0x40
    monkeypatch.setattr(ioctl, "call", forged)
    m, k, data = omnifs.Mount(ONE), rid(), os.urandom((2 << 20) + 3)
    g0, p0 = counters(ONE)
    m.put("0", "1", k, data, readers=1)
    assert m._pool is not None and m._pool[1] is None, "not mapped"
    with open(os.path.join(ONE, "0", "1", k), "rb") as f:     # no read: not consumed
        with pytest.raises(OSError) as e:
            direct.Pool(f.fileno())
    assert e.value.errno == errno.ESTALE
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    assert counters(ONE) == (g0 + 1, p0 + 1), "both went direct all the same"


def test_placed_refuses_what_it_cannot_mean():
    """OMNIFS_IOC_PLACED: EINVAL on a writer that did not place or past the
    end, EBADF on a reader; and the object is published whole after it."""
    import fcntl
    import struct
    from omnifs import direct
    m, k = omnifs.Mount(ONE), rid()
    p = os.path.join(ONE, "0", "1", k)

    def placed(fd, upto):
        try:
            fcntl.ioctl(fd, direct.PLACED, struct.pack("<Q", upto))
            return 0
        except OSError as e:
            return e.errno
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        assert placed(fd, 0) == errno.EINVAL, "not placed"
        pl = direct.place(fd, 5 << 20)
        assert placed(fd, (5 << 20) + 1) == errno.EINVAL, "past the end"
        data = os.urandom(5 << 20)
        assert direct.copy_in(pl, [data])
        assert placed(fd, 5 << 20) == 0
    finally:
        os.close(fd)
    with open(p, "rb") as f:
        assert placed(f.fileno(), 1) == errno.EBADF
        assert f.read() == data                 # and that read consumed it
    assert k not in m.keys("0", "1")


@pytest.mark.parametrize("sole", [0, 1])
def test_a_sole_writer_publishes_at_its_close_without_looking_for_dups(sole):
    """PLACE's OMNIFS_PLACE_SOLE: the writer promised never to dup its
    descriptor, so the daemon takes its close for the last one (and skips
    the look through /proc/PID/fd that costs ~3 us a descriptor).  Without
    it a dup()ed descriptor still open keeps the object unpublished."""
    from omnifs import direct
    m, k = omnifs.Mount(ONE), rid()
    data = os.urandom(1 << 20)
    fd = os.open(os.path.join(ONE, "0", "1", k), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    assert direct.copy_in(direct._ask(fd, direct.PLACE, len(data), sole), [data])
    dup = os.dup(fd)                        # what a sole writer says it never does
    os.close(fd)
    try:
        assert (k in m.keys("0", "1")) == bool(sole)
    finally:
        os.close(dup)
    assert bytes(m.get("0", "1", k, timeout=5)) == data


def test_place_refuses_flags_it_does_not_know_and_changes_nothing():
    from omnifs import direct
    m, k = omnifs.Mount(ONE), rid()
    used = pool_used(ONE)
    fd = os.open(os.path.join(ONE, "0", "1", k), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with pytest.raises(OSError) as e:
            direct._ask(fd, direct.PLACE, 10, 2)
        assert e.value.errno == errno.EINVAL and os.fstat(fd).st_size == 0
        assert pool_used(ONE) == used
        assert direct.copy_in(direct.place(fd, 5), [b"fresh"]), "still a fresh object"
    finally:
        os.close(fd)
    assert bytes(m.get("0", "1", k, timeout=5)) == b"fresh"


def test_cuda_place_is_for_gpu_pools_only():
    """OMNIFS_IOC_CUDA_PLACE on a host pool: EOPNOTSUPP, nothing taken; the
    writer then writes as any other, and PLACE still works after it."""
    from omnifs import cuda, direct
    m, k = omnifs.Mount(ONE), rid()
    p = os.path.join(ONE, "0", "1", k)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with pytest.raises(OSError) as e:
            cuda.place(fd, 1 << 20)
        assert e.value.errno == errno.EOPNOTSUPP
        data = os.urandom(1 << 20)
        assert direct.copy_in(direct.place(fd, len(data)), [data])
    finally:
        os.close(fd)
    assert m.get("0", "1", k) == data


def test_arrays_come_back_aligned_over_their_own_buffer(one):
    k = rid()
    a = np.random.default_rng(1).standard_normal((512, 1024)).astype(np.float16)
    assert one.put("0", "1", k, a)[0]
    b, n = one.get("0", "1", k)
    assert b.dtype == a.dtype and b.shape == a.shape and (a == b).all()
    assert b.ctypes.data % 64 == 0, "the body starts at a multiple of 64"


def test_large_get_buffers_start_on_a_huge_page():
    """codec.alloc, arrays and bytes alike: on a page, and beyond 32 MiB on
    a huge page, so that no 4 KiB page of them is faulted in by itself."""
    head = codec._header({"k": "numpy", "d": "<f2", "s": [1]})
    for size, align in ((1 << 20, 4096), ((33 << 20) + 6, 2 << 20)):
        a = codec.alloc(size, head)
        assert isinstance(a, np.ndarray) and len(a) == size and a.ctypes.data % align == 0
        b = codec.alloc(size, b"raw bytes")
        assert type(b) is bytearray and len(b) == size and address(b) % align == 0
        a[:] = 7
        b[:] = bytes(size)


def test_small_puts_write_and_everything_works_without_direct():
    m, k, data = omnifs.Mount(ONE), rid(), os.urandom(200 << 10)
    m.direct = False
    g0, p0 = counters(ONE)
    m.put("0", "1", k, data)
    m.put("0", "1", k + "s", b"tiny")
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    assert bytes(m.get("0", "1", k + "s", timeout=5)) == b"tiny"
    assert counters(ONE) == (g0, p0), "nothing went direct"


@pytest.mark.parametrize("size", [100, 1 << 20])
def test_a_put_that_fails_midway_leaves_nothing(monkeypatch, size):
    """Placed but never filled (or half written): the close must not
    publish the pool's old bytes under the key."""
    from omnifs import direct
    m, k = omnifs.Mount(ONE), rid()
    m.small = False             # one request cannot fail midway
    used = pool_used(ONE)

    def broken(*a):
        raise RuntimeError("the worker died here")
    monkeypatch.setattr(direct, "copy_in", broken)
    monkeypatch.setattr(os, "write", broken)
    with pytest.raises(RuntimeError):
        m.put("0", "1", k, os.urandom(size))
    monkeypatch.undo()
    assert k not in m.keys("0", "1") and pool_used(ONE) == used
    with pytest.raises(FileNotFoundError):
        m.get("0", "1", k, timeout=0.2)


def test_a_wrong_daemon_is_never_trusted():
    """The cookie: a pid that is some other process (another pid namespace)
    must not be read from or written to."""
    from omnifs import direct
    m, k = omnifs.Mount(ONE), rid()
    m.put("0", "1", k, os.urandom(1 << 20), readers=0)
    with open(os.path.join(ONE, "0", "1", k), "rb") as f:
        pl = direct.where(f.fileno())
        pl.cookie ^= 1
        assert not direct.copy_out(pl, bytearray(pl.size))
        pl.cookie ^= 1
        pl.pid = os.getpid()        # a process that is not the daemon
        assert not direct.copy_out(pl, bytearray(pl.size))
    m.remove("0", "1", k)


def ioctl_errno(path, flags, cmd, size=0):
    import fcntl
    from omnifs import direct
    fd = os.open(path, flags, 0o644)
    try:
        buf = bytearray(direct.SIZE)
        direct._HEAD.pack_into(buf, 0, direct.MAGIC, 0, size, 0, 0, 0, 0, 0)
        fcntl.ioctl(fd, cmd, buf, True)
        return 0
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)


def test_place_refuses_what_it_cannot_do_and_changes_nothing():
    from omnifs import direct
    m, k = omnifs.Mount(ONE), rid()
    p = os.path.join(ONE, "0", "1", k)
    used = pool_used(ONE)
    # more than the pool: ENOSPC, and the object is still empty and writable
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with pytest.raises(OSError) as e:
        direct.place(fd, 1 << 40)
    assert e.value.errno == errno.ENOSPC and os.fstat(fd).st_size == 0
    os.write(fd, b"after")
    with pytest.raises(OSError) as e:       # written to already: not fresh
        direct.place(fd, 10)
    assert e.value.errno == errno.EBUSY
    os.close(fd)
    assert bytes(m.get("0", "1", k, timeout=5)) == b"after"
    assert pool_used(ONE) == used
    # WHERE on a writer, PLACE on a reader: EBADF; an unknown command: ENOTTY
    m.put("0", "1", k, b"x", readers=0)
    assert ioctl_errno(p, os.O_RDONLY, direct.PLACE, 10) == errno.EBADF
    assert ioctl_errno(p, os.O_RDONLY, direct.WHERE + 1) == errno.ENOTTY
    m.remove("0", "1", k)
    assert ioctl_errno(p + "w", os.O_WRONLY | os.O_CREAT | os.O_EXCL, direct.WHERE) == errno.EBADF
    m.remove("0", "1", k + "w")
    assert ioctl_errno(os.path.join(ONE, ".omni", "stats"), os.O_RDONLY, direct.WHERE) \
        == errno.EOPNOTSUPP
    assert ioctl_errno(os.path.join(ONE, ".omni", "stats"), os.O_RDONLY, direct.SHARE) \
        == errno.EOPNOTSUPP


def test_the_gpu_hand_over_is_for_gpu_pools_only():
    """OMNIFS_IOC_CUDA and user.omni.cuda_ipc on a host pool: EOPNOTSUPP
    and ENODATA, nothing consumed (tests/cuda runs them on a GPU pool)."""
    from omnifs import cuda
    m, k = omnifs.Mount(ONE), rid()
    m.put("0", "1", k, b"gpu?")                             # readers 1
    p = os.path.join(ONE, "0", "1", k)
    for path in (p, os.path.join(ONE, ".omni", "stats")):
        fd = os.open(path, os.O_RDONLY)
        try:
            with pytest.raises(OSError) as e:
                cuda.where(fd)
            assert e.value.errno == errno.EOPNOTSUPP, path
        finally:
            os.close(fd)
    with pytest.raises(OSError) as e:
        os.getxattr(p, "user.omni.cuda_ipc")
    assert e.value.errno == errno.ENODATA
    assert bytes(m.get("0", "1", k, timeout=5)) == b"gpu?"  # not consumed before


def test_another_nodes_object_is_pulled_first():
    """Pulled whole into the reader's pool, then handed over there: the
    WHERE waits for the pull, as a read would, instead of reading behind
    it a FUSE request per MiB."""
    k, data = rid(), os.urandom(2 << 20)
    omnifs.Mount(B).put("0", "1", k, data)
    pulled = omnifs.Mount(C).stats()["bytes_pulled"]
    direct_gets = counters(C)[0]
    assert bytes(omnifs.Mount(C).get("0", "1", k, timeout=5)) == data
    assert omnifs.Mount(C).stats()["bytes_pulled"] >= pulled + len(data)
    assert counters(C)[0] == direct_gets + 1, "handed over once here"


def test_a_get_copies_another_nodes_object_as_it_lands(monkeypatch):
    """WHERE_SOON answers while the pull runs, and each range is copied
    once LANDED says it is here (12-netns.t, where the owner serves
    slowly, shows the copy starting before the last byte lands, and a
    pull cut midway failing the get)."""
    k, data = rid(), os.urandom(9 << 20)
    omnifs.Mount(B).put("0", "1", k, data)
    from omnifs import direct
    asked, real = [], direct.landed

    def landed(pl, upto):
        real(pl, upto)
        asked.append((upto, pl.have))
    monkeypatch.setattr(direct, "landed", landed)
    m, g0 = omnifs.Mount(C), counters(C)[0]
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    assert m.soon, "the daemon answers WHERE_SOON"
    assert counters(C)[0] == g0 + 1, "handed over once here"
    assert asked[-1][1] == len(data) and all(h >= u for u, h in asked)


def window(fd, off, want=1):
    """OMNIFS_IOC_WINDOW on fd: (len, pool_off, size)."""
    from omnifs import direct, ioctl
    buf = bytearray(direct._WIN.pack(off, want, 0, 0))
    ioctl.call(fd, direct.WINDOW, buf)
    return direct._WIN.unpack(buf)[1:]


def test_a_streamed_get_is_copied_out_of_its_window():
    """Another node's object over 65 MiB streams through a window of the
    reader's pool; the module copies each range out of it as it lands
    (OMNIFS_IOC_WINDOW), and a read of all of it consumes it."""
    from omnifs import direct
    k, data = rid(), os.urandom((65 << 20) + 4096)
    b, c = omnifs.Mount(B), omnifs.Mount(C)
    b.put("0", "1", k, data)
    w0 = c.stats()["window_gets"]
    with open(c.path("0", "1", k), "rb", buffering=0) as f:
        n, at, size = window(f.fileno(), 0, 64)
        assert size == len(data) and 64 <= n <= 2 << 20
        pool = direct.Pool(f.fileno())
        assert ctypes.string_at(pool.addr + at, n) == data[:n], "there in the pool"
        with pytest.raises(OSError) as e:
            os.read(f.fileno(), 10)
        assert e.value.errno == errno.EBUSY, "its own read would wait for its copy"
        with pytest.raises(OSError) as e:
            window(f.fileno(), size + 1)
        assert e.value.errno == errno.EINVAL, "past the end"
        assert window(f.fileno(), size)[0] == 0, "nothing at the end"
    assert k in b.keys("0", "1"), "a part read consumes nothing"
    assert c.stats()["window_gets"] == w0
    assert bytes(c.get("0", "1", k, timeout=5)) == data
    assert c.stats()["window_gets"] == w0 + 1, "copied out of its window"
    deadline = time.monotonic() + 5
    while k in b.keys("0", "1") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert k not in b.keys("0", "1"), "read whole: consumed"


def test_window_refuses_what_it_cannot_mean():
    from omnifs import direct
    m, k = omnifs.Mount(ONE), rid()
    m.put("0", "1", k, os.urandom(1 << 20), readers=0)
    p = m.path("0", "1", k)
    assert ioctl_errno(p, os.O_RDONLY, direct.WINDOW) == errno.EOPNOTSUPP, "not streamed"
    assert ioctl_errno(p + ".w", os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                       direct.WINDOW) == errno.EBADF, "a writer's"
    assert ioctl_errno(os.path.join(ONE, ".omni", "health"), os.O_RDONLY,
                       direct.WINDOW) == errno.EOPNOTSUPP, "an .omni file's"
    for key in (k, k + ".w"):
        m.remove("0", "1", key)


def epochs():
    """Whether this kernel can be told to look up every name it keeps
    again (Linux 6.16, FUSE_NOTIFY_INC_EPOCH): then an open file's fstat()
    after its object left elsewhere says its size and no links, and
    otherwise ENOENT (README, "Consume")."""
    return tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2]) >= (6, 16)


def test_a_get_whose_object_leaves_after_its_open_still_reads_it(monkeypatch):
    """The owner removes the object between the reader's open and its
    fstat(), which the kernel asks without the file; the get reads every
    byte either way."""
    k, data = rid(), os.urandom(1 << 20)
    omnifs.Mount(B).put("0", "1", k, data, readers=0)
    m = omnifs.Mount(C)
    m.small = m.direct = False          # the plain open and read
    real, seen = os.fstat, []

    def fstat(fd):
        if not seen:
            omnifs.Mount(B).remove("0", "1", k)
            deadline = time.monotonic() + 5
            while os.path.exists(m.path("0", "1", k)) and time.monotonic() < deadline:
                time.sleep(0.01)
            try:
                st = real(fd)
                seen.append((st.st_size, st.st_nlink))
            except FileNotFoundError:
                seen.append("ENOENT")
        return real(fd)
    monkeypatch.setattr(os, "fstat", fstat)
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    assert seen == [(len(data), 0) if epochs() else "ENOENT"]
    assert not os.path.exists(m.path("0", "1", k)), "the name stays gone"


def test_a_daemon_without_where_soon_is_asked_where(monkeypatch):
    from omnifs import direct

    def older(fd):
        raise OSError(errno.ENOTTY, os.strerror(errno.ENOTTY))
    monkeypatch.setattr(direct, "where_soon", older)
    k, data = rid(), os.urandom(3 << 20)
    omnifs.Mount(B).put("0", "1", k, data)
    m, g0 = omnifs.Mount(C), counters(C)[0]
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    assert not m.soon and counters(C)[0] == g0 + 1, "WHERE instead, still direct"


def test_landed_refuses_what_it_cannot_mean():
    from omnifs import direct
    m, k, data = omnifs.Mount(ONE), rid(), os.urandom(1 << 20)
    m.put("0", "1", k, data, readers=0)
    p = m.path("0", "1", k)
    g0 = counters(ONE)[0]
    with open(p, "rb", buffering=0) as f:
        pl = direct.where_soon(f.fileno())
        assert pl.have == pl.size == len(data), "this node's own: all here"
        pl.have = 0
        direct.landed(pl, len(data))
        assert pl.have == len(data), "LANDED of all: answered at once"
        pl.have = 0
        with pytest.raises(OSError) as e:
            direct.landed(pl, len(data) + 1)
        assert e.value.errno == errno.EINVAL, "past the end"
    assert counters(ONE)[0] == g0 + 1, "counted once"
    for i, cmd in enumerate((direct.WHERE_SOON, direct.LANDED)):
        assert ioctl_errno("%s.w%d" % (p, i), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                           cmd) == errno.EBADF, "a writer's"
    assert ioctl_errno(os.path.join(ONE, ".omni", "health"), os.O_RDONLY,
                       direct.LANDED) == errno.EOPNOTSUPP, "an .omni file's"
    for key in (k, k + ".w0", k + ".w1"):
        m.remove("0", "1", key)


# ---- small objects in one request (omnifs.small, fs/direct.h) ----

def small_counters(mount):
    s = omnifs.Mount(mount).stats()
    return s["small_gets"], s["small_puts"]


@pytest.fixture(params=["native", "ctypes"])
def small_path(request, monkeypatch):
    """Each small-request test twice: through omnifs._small, which make python
    builds, and through the ctypes path used where it was not built."""
    from omnifs import small
    assert small.native is not None, "omnifs._small was not built (make python builds it)"
    if request.param == "ctypes":
        monkeypatch.setattr(small, "native", None)
    return request.param


def pure(code, path):
    """code, run through the ctypes path where path says so."""
    return ("import omnifs.small; omnifs.small.native = None\n" if path == "ctypes" else "") + code


def small_errno(path, cmd_nr, head, body=b"", size=None):
    """The errno of a hand-made small ioctl on path (0: it worked)."""
    from omnifs import small
    return dir_ioctl_errno(path, 1 if cmd_nr == 0x12 else 3, cmd_nr, small._HEAD.pack(*head) + body, size)


@pytest.mark.parametrize("size", [0, 1, 4096, "room"])
def test_small_objects_go_in_one_request_each(size, small_path):
    from omnifs import small
    m, k = omnifs.Mount(ONE), rid()
    data = os.urandom(small.MAX - small.HEAD - len(k) if size == "room" else size)
    size = len(data)
    g0, p0 = small_counters(ONE)
    assert m.put("0", "1", k, [data[:3], data[3:]], readers=2) == size
    assert small_counters(ONE) == (g0, p0 + 1), "the put was one request"
    p = os.path.join(ONE, "0", "1", k)
    assert os.stat(p).st_size == size and open(p, "rb").read() == data    # cat sees it
    import xxhash
    assert int(os.getxattr(p, "user.omni.xxh3"), 16) == xxhash.xxh3_64_intdigest(data)
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    assert small_counters(ONE)[0] == g0 + 1, "the get was one request"
    assert k not in m.keys("0", "1"), "its second complete read consumed it"
    m.put("0", "1", k + "x", b"a")
    with pytest.raises(FileExistsError):
        m.put("0", "1", k + "x", b"b")
    assert bytes(m.get("0", "1", k + "x", timeout=5)) == b"a"


def test_a_small_get_of_a_larger_object_consumes_nothing_and_reads_it(small_path, monkeypatch):
    m, k, data = omnifs.Mount(ONE), rid(), os.urandom(40000)
    m.put("0", "1", k, data)
    g0, _ = small_counters(ONE)
    from omnifs import small
    with pytest.raises(OSError) as e:
        small.get(m._edge("0", "1"), k, 1000)
    assert e.value.errno == errno.E2BIG
    assert k in m.keys("0", "1"), "still there for its reader"
    asked, real = [], small.get
    monkeypatch.setattr(small, "get", lambda *a: asked.append(a[1]) or real(*a))
    assert bytes(m.get("0", "1", k, timeout=5)) == data
    assert asked == [k], "asked once, then opened and read"
    assert small_counters(ONE)[0] == g0 and k not in m.keys("0", "1")


def test_a_small_put_counts_a_keys_bytes_not_its_characters(small_path):
    """A key of multi-byte characters leaves less room in the one request:
    the largest put that fits goes small, one byte more is written."""
    from omnifs import small
    m, k = omnifs.Mount(ONE), rid() + "-ключ-κλειδί"
    fits = small.MAX - small.HEAD - len(k.encode())
    _, p0 = small_counters(ONE)
    for key, size, went_small in ((k, fits, 1), (k + "2", fits - 1, 1), (k + "3", fits, 0)):
        data = os.urandom(size)
        m.put("0", "1", key, data)
        assert small_counters(ONE)[1] == p0 + went_small, key
        p0 += went_small
        assert bytes(m.get("0", "1", key, timeout=5)) == data
    assert m.small, "the small requests are still in use"


def test_a_keys_limit_is_255_bytes_not_characters(small_path):
    """SPEC §3: keys of up to 255 bytes; checked before any request, and
    ENAMETOOLONG past them, as the filesystem says."""
    m = omnifs.Mount(ONE)
    for bad in ("k" * 256, "é" * 128, "ключ" * 32):       # 256 bytes each
        for call in (lambda: m.put("0", "1", bad, b"x"), lambda: m.get("0", "1", bad, timeout=5),
                     lambda: open(os.path.join(ONE, "0", "1", bad), "wb")):
            with pytest.raises(OSError) as e:
                call()
            assert e.value.errno == errno.ENAMETOOLONG, bad
    k = rid()
    k += "é" * ((255 - len(k)) // 2)                    # 254 or 255 bytes
    assert len(k.encode()) >= 254
    m.put("0", "1", k, b"longest")
    assert bytes(m.get("0", "1", k, timeout=5)) == b"longest"


def test_an_open_edges_one_step_paths_say_what_the_whole_ones_say(small_path):
    """put() and get() on an edge open already go in one step where they can
    (no key check of their own: the daemon's): every failure there is the
    same exception as on a fresh Mount, a get's timeout is waited once, and
    nothing stays."""
    from omnifs import small
    k, used = rid(), pool_used(ONE)
    warm = omnifs.Mount(ONE)
    warm.put("0", "1", k, b"opens the edge")
    assert ("0", "1") in warm._edges
    puts, errs = small_counters(ONE)[1], []
    for key in ("a/b", ".x", "", "k\0", "k" * 256, "é" * 128, 3, None, "\ud800"):
        for m in (omnifs.Mount(ONE), warm):
            for call in (lambda: m.put("0", "1", key, b"x"),
                         lambda: m.get("0", "1", key, timeout=5)):
                with pytest.raises(Exception) as e:
                    call()
                errs.append((type(e.value), getattr(e.value, "errno", None), str(e.value)))
        assert errs[:2] == errs[2:], key
        errs.clear()
    assert small_counters(ONE)[1] == puts, "no bad key made a request"
    for m in (omnifs.Mount(ONE), warm):
        with pytest.raises(FileExistsError) as e:
            m.put("0", "1", k, b"again")
        assert e.value.filename == os.path.join(ONE, "0", "1", k)
        never = []
        on_time(lambda: never.append(pytest.raises(FileNotFoundError, m.get, "0", "1",
                                                   k + "-never", timeout=0.3)) is None,
                0.3, 0.08)                                  # it waited once
        assert never[-1].value.filename == os.path.join(ONE, "0", "1", k + "-never")
    assert warm.get("0", "1", k, timeout=5) == b"opens the edge"
    warm.put("0", "1", k, b"kept for two", readers=2)            # readers: the whole path
    for _ in range(2):
        assert warm.get("0", "1", k, timeout=5) == b"kept for two"
    big = os.urandom(small.MAX)                              # over the small request's room
    warm.put("0", "1", k, big)
    assert bytes(warm.get("0", "1", k, timeout=5)) == big
    assert k not in warm.keys("0", "1") and pool_used(ONE) == used


GETTER = ("import sys, omnifs\n"
          "sys.stdout.buffer.write(omnifs.Mount(sys.argv[1]).get('0', '1', sys.argv[2], timeout=10))")


@contextlib.contextmanager
def getter(mount, key, code=GETTER):
    """A process running code (a get of key from mount), handed over once it
    waits there, and killed at the end if still running."""
    w0 = omnifs.Mount(mount).stats()["waiters"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(omnifs.__path__[0]))
    r = subprocess.Popen([sys.executable, "-c", code, mount, key], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    try:
        waiters_become(mount, w0 + 1)
        yield r
    finally:
        if r.poll() is None:
            r.kill()
            r.communicate()


def test_a_small_get_waits_for_a_later_put_and_times_out_on_time(small_path):
    m, k = omnifs.Mount(ONE), rid()
    with getter(ONE, k, pure(GETTER, small_path)) as r:
        m.put("0", "1", k, b"later")
        assert r.communicate(timeout=10)[0] == b"later" and r.returncode == 0
    on_time(lambda: bool(pytest.raises(FileNotFoundError, m.get, "0", "1", k, timeout=0.3)),
            0.3, 0.08)


def test_a_waiting_get_lets_the_other_threads_run(small_path):
    # fcntl.ioctl of a buffer over 1 KiB holds the GIL (CPython < 3.14):
    # a get waiting in it froze the whole worker for its timeout.
    import threading
    m, k = omnifs.Mount(ONE), rid()
    waiting = threading.Thread(target=lambda: pytest.raises(FileNotFoundError, m.get,
                                                            "0", "1", k, timeout=2))
    w0 = m.stats()["waiters"]
    waiting.start()
    waiters_become(ONE, w0 + 1)
    t0 = time.monotonic()
    time.sleep(0.05)
    took = time.monotonic() - t0
    assert m.stats()["waiters"] == w0 + 1, "the get still waits"
    assert took < 1, "this thread slept 50 ms in %.2f s beside it" % took
    waiting.join(10)


def test_an_interrupted_small_get_leaves_no_waiter(small_path):
    m, k = omnifs.Mount(ONE), rid()
    w0 = m.stats()["waiters"]
    # Python takes SIGINT only where it was not ignored at its start, and
    # make check run as a background job starts everything with it ignored.
    code = ("import signal, sys, omnifs\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "omnifs.Mount(sys.argv[1]).get('0', '1', sys.argv[2], timeout=30)")
    with getter(ONE, k, pure(code, small_path)) as r:
        assert m.stats()["waiters"] == w0 + 1
        r.send_signal(2)
        assert b"KeyboardInterrupt" in r.communicate(timeout=5)[1]
    assert waiters_become(ONE, w0) == w0
    m.put("0", "1", k, b"for a later reader")
    assert m.get("0", "1", k, timeout=1) == b"for a later reader"


def test_small_requests_refuse_bad_input_and_change_nothing(small_path):
    from omnifs import small
    m, k = omnifs.Mount(ONE), rid()
    edge, used = os.path.join(ONE, "0", "1"), pool_used(ONE)
    kb = k.encode()

    def head(magic=small.MAGIC, klen=len(kb), size=1, readers=-1, wait=0):
        return (magic, klen, size, readers, wait, 0)
    assert small_errno(edge, 0x12, head(magic=1), kb + b"x") == errno.EINVAL
    assert small_errno(edge, 0x12, head(size=2), kb + b"x") == errno.EINVAL    # size != bytes
    assert small_errno(edge, 0x12, head(klen=0), kb + b"x") == errno.EINVAL
    assert small_errno(edge, 0x12, head(klen=999), kb + b"x") == errno.EINVAL
    assert small_errno(edge, 0x12, head(klen=3, size=1), b"a/bx") == errno.EINVAL
    assert small_errno(edge, 0x12, head(klen=1, size=1), b".x") == errno.EINVAL
    assert small_errno(edge, 0x12, head(readers=-2), kb + b"x") == errno.EINVAL
    assert small_errno(edge, 0x13, head(wait=-1, size=0), kb, 4096) == errno.EINVAL
    assert small_errno(edge, 0x14, head(), kb + b"x") == errno.ENOTTY        # no such command
    assert small_errno(ONE, 0x12, head(), kb + b"x") == errno.ENOTTY          # the root
    assert small_errno(os.path.join(ONE, "0"), 0x12, head(), kb + b"x") == errno.ENOTTY
    assert k not in m.keys("0", "1") and pool_used(ONE) == used
    # more than the pool has left: ENOSPC, and nothing stays
    fill = rid()
    fd = os.open(os.path.join(edge, fill), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        os.posix_fallocate(fd, 0, m.health()["pool"]["size"] - used - 4096)
        os.close(fd)
        with pytest.raises(OSError) as e:
            m.put("0", "1", k, os.urandom(12000))
        assert e.value.errno == errno.ENOSPC and k not in m.keys("0", "1")
    finally:
        m.remove("0", "1", fill)
    assert pool_used(ONE) == used


def test_the_c_small_requests_refuse_bad_arguments_and_change_nothing():
    from omnifs import _small, small
    m, k = omnifs.Mount(ONE), rid()
    fd, used = m._edge("0", "1"), pool_used(ONE)
    for call in (lambda: _small.put(fd, k.encode(), b"x"), lambda: _small.get(fd, k.encode()),
                 lambda: _small.put(fd, k, b"x", -1), lambda: _small.get(fd, k, 0),
                 lambda: _small.put(fd, k.encode(), 3, -1), lambda: _small.put("3", b"k", b"x", -1)):
        with pytest.raises(TypeError):
            call()
    for call, err in ((lambda: _small.put(fd, k.encode(), bytes(small.MAX), -1), errno.E2BIG),
                      (lambda: _small.get(fd, bytes(small.MAX), 0), errno.ENAMETOOLONG),
                      (lambda: _small.put(-1, k.encode(), b"x", -1), errno.EBADF),
                      (lambda: _small.get(fd, k.encode(), -1), errno.EINVAL),
                      (lambda: _small.put(fd, k.encode(), b"x", -2), errno.EINVAL)):
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == err
    assert k not in m.keys("0", "1") and pool_used(ONE) == used
    _small.put(fd, k.encode(), memoryview(b"xyz")[1:], 1)      # any bytes-like
    assert _small.get(fd, k.encode(), 1000) == bytearray(b"yz") and k not in m.keys("0", "1")


def test_small_objects_across_nodes(small_path):
    k, data = rid(), os.urandom(5000)
    b, c = omnifs.Mount(B), omnifs.Mount(C)
    g0 = small_counters(C)[0]
    b.put("0", "1", k, data)
    assert bytes(c.get("0", "1", k, timeout=5)) == data, "announced with its bytes"
    assert small_counters(C)[0] == g0 + 1
    with getter(C, k + "later", pure(GETTER, small_path)) as r:   # waiting on c before b puts it
        b.put("0", "1", k + "later", data)
        assert r.communicate(timeout=10)[0] == data
    assert small_counters(C)[0] == g0 + 2
    # larger than announces carry: EREMOTE, then pulled by a read
    big = os.urandom(100 << 10)
    with getter(C, k + "big", pure(GETTER, small_path)) as r:
        b.put("0", "1", k + "big", big)
        assert r.communicate(timeout=10)[0] == big
    assert small_counters(C)[0] == g0 + 2
