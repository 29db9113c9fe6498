"""connector.py WRITER_MOUNT READER_MOUNT - vllm-omni's OmniFSConnector,
put -> get between two processes: the reader waits in get() (in open())
before the writer puts; the time is from just before put() to get()'s
return in the reader (CLOCK_MONOTONIC is one clock for both).  The
daemons idle 20 ms between rounds.  Prints median, p99 and the speed-up
over vllm-omni's SharedMemoryConnector as measured on this machine
(issue 19: 4 KiB 0.20 ms, 1 MiB 2.8 ms, 64 MiB 221 ms, 256 MiB 953 ms),
for raw bytes (a KV manager's to_bytes() payload, returned as a bytearray)
and, from 1 MiB, for a float16 numpy array of the same size (hidden states,
tensors); both come back over huge pages.  Two rounds of each go first,
unmeasured, and the first one's time is printed apart: a worker's first
large buffers wait for memory that this VM gave back to its host (a
256 MiB get took 0.8-1.5 s, and the next rounds 60-160 ms while the
guest settled), later ones do not.  CONN_KINDS (bytes,array), CONN_MIN
and CONN_MAX (bytes) choose what runs; CONN_EDGE ("FROM TO", "0 1"
unless set) names the stages the objects go between; CONN_FDS (0) more
descriptors the writer holds open, as a GPU worker does (CUDA, NCCL,
ZMQ): a plain close looks through them all.  CONN_FLOOR ("MIB:MS ...")
the floor under a size's median, measured in the same run (bench.sh:
tcpceil putget), which each of that size's lines is then compared with.
CONN_LOOP=wake or =poll: the reader is vllm-omni's receive loop instead,
asking in turn for its chunk and 8 other requests' that do not come (a
get_wakeup_generation(), a get each, then wait_for_change(generation,
timeout=5 ms); poll: a 5 ms sleep instead, as a connector without the
wake-up makes it, with nowait gets): the time is then from put() to the
loop's get that has it."""
import os
import random
import subprocess
import sys
import time

import numpy as np

from omnifs.vllm_omni import OmniFSConnector

SHM_MS = {4 << 10: 0.20, 1 << 20: 2.8, 64 << 20: 221.0, 256 << 20: 953.0}
WARM = 2
ROUNDS = {4 << 10: 300, 1 << 20: 60, 64 << 20: 21, 256 << 20: 21}
FROM, TO = os.environ.get("CONN_EDGE", "0 1").split()
FLOOR = {int(m) << 20: float(ms)
         for m, ms in (w.split(":") for w in os.environ.get("CONN_FLOOR", "").split())}
READER = """
import sys, time
from omnifs.vllm_omni import OmniFSConnector
c = OmniFSConnector({"mount": sys.argv[1], "timeout_s": 60})
for key in sys.stdin:
    print("waiting", flush=True)
    r = c.get(sys.argv[2], sys.argv[3], key.strip())
    print(time.monotonic_ns(), r[1] if r else -1, flush=True)
"""

LOOP = """
import sys, time
from omnifs.vllm_omni import OmniFSConnector
wake = sys.argv[4] == "wake"
c = OmniFSConnector({"mount": sys.argv[1], "timeout_s": 60, "nowait": not wake})
others = ["other-%d_0_0" % i for i in range(8)]
for key in sys.stdin:
    keys = others + [key.strip()]
    print("waiting", flush=True)
    while True:
        generation = c.get_wakeup_generation() if wake else None
        r = [c.get(sys.argv[2], sys.argv[3], k) for k in keys][-1]
        if r is not None:
            break
        if wake:
            c.wait_for_change(generation, timeout=0.005)
        else:
            time.sleep(0.005)
    print(time.monotonic_ns(), r[1], flush=True)
"""


def payloads():
    kinds = os.environ.get("CONN_KINDS", "bytes,array").split(",")
    for size, rounds in ROUNDS.items():
        if not int(os.environ.get("CONN_MIN", "0")) <= size <= int(os.environ.get("CONN_MAX", 1 << 40)):
            continue
        if "bytes" in kinds:
            yield "bytes", size, rounds, os.urandom(size)
        if size >= 1 << 20 and "array" in kinds:
            yield "array", size, rounds, np.frombuffer(os.urandom(size), dtype=np.float16)


def main(wmount, rmount):
    loop = os.environ.get("CONN_LOOP")
    rd = subprocess.Popen([sys.executable, "-c", LOOP if loop else READER, rmount, FROM, TO,
                           loop or ""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(int(os.environ.get("CONN_FDS", "0")))]
    w = OmniFSConnector({"mount": wmount})
    try:
        for kind, size, rounds, data in payloads():
            ms, first = [], None
            for i in range(-WARM, rounds):
                key = "bench-%d-%s-%d-%d" % (os.getpid(), kind, size, i)
                rd.stdin.write(key + "\n")
                rd.stdin.flush()
                rd.stdout.readline()            # it is about to open
                # in open() (a loop: in its rounds, whose phase the jitter
                # varies); the daemons idle
                time.sleep(0.02 + (random.random() * 0.005 if loop else 0))
                t0 = time.monotonic_ns()
                ok, n, _ = w.put(FROM, TO, key, data)
                t1, got = rd.stdout.readline().split()
                if not ok or int(got) < size:
                    raise SystemExit("bench: %s did not come through" % key)
                if i >= 0:
                    ms.append((int(t1) - t0) / 1e6)
                elif first is None:
                    first = (int(t1) - t0) / 1e6
                try:
                    w._mount.remove(FROM, TO, key)
                except FileNotFoundError:
                    pass                        # consumed already
            ms.sort()
            med, p99 = ms[len(ms) // 2], ms[min(len(ms) - 1, int(len(ms) * 0.99))]
            label = "%d KiB" % (size >> 10) if size < 1 << 20 else "%d MiB" % (size >> 20)
            floor = "   %.2fx the floor" % (med / FLOOR[size]) if size in FLOOR else ""
            print("  %-8s %-5s median %9.3f ms   p99 %9.3f ms   %6.1fx the shm connector's %g ms"
                  "   (first %.0f ms)%s" % (label, kind, med, p99, SHM_MS[size] / med, SHM_MS[size],
                                            first, floor))
    finally:
        rd.stdin.close()
        rd.wait()
        for fd in held:
            os.close(fd)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
