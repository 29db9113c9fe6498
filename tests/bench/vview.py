"""vview.py MOUNT [ROUNDS [EDGE [TOKENS]]] - a T=1 view of 4 vllm-omni
shards, on one node, against reading the same 4 shards whole (the ceiling),
in the same run, on EDGE (0/1 by default).

The shards are token-major ([tokens, heads, head_dim] per layer: 28 layers,
TOKENS tokens (1024 by default), 8 heads of 128, f16, 2 heads a shard), so
the view of 1024 tokens is a gather of ~229k rows of 512 bytes, and one of
16 tokens (a short prompt: 1.8 MB) is mostly its open.  Each round writes
fresh shards (readers 1: consumed by the read), waits 20 ms, then reads.
Prints medians and p99, and the median of each round's view/shards ratio:
on a shared VM one read of the same bytes takes 20 or 35 ms as its threads
happen to land on one core or two, and a round's pair shares its luck.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../py"))
import kvpy  # noqa: E402

L, H, D, S = 28, 8, 128, 4


def read_all(path):
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip().split("\n")[0], file=sys.stderr)
        sys.exit(2)
    mnt, rounds = argv[1], int(argv[2]) if len(argv) > 2 else 15
    edge = argv[3] if len(argv) > 3 else "0/1"
    tok = int(argv[4]) if len(argv) > 4 else 1024
    n = H // S
    shards = [kvpy.vllm([os.urandom(tok * n * D * 2) for _ in range(L)],
                        [os.urandom(tok * n * D * 2) for _ in range(L)],
                        tokens=tok, heads=n, head_dim=D, rid="bench") for _ in range(S)]
    whole, view = [], []
    for r in range(rounds):
        for i in range(S):
            for k in ("w%d" % r, "v%d" % r):
                with open("%s/%s/%s.rank%dof%d" % (mnt, edge, k, i, S), "wb") as f:
                    os.setxattr(f.fileno(), "user.omni.readers", b"1")   # the read consumes it
                    f.write(shards[i])
        time.sleep(0.02)
        t = time.monotonic()
        for i in range(S):
            read_all("%s/%s/w%d.rank%dof%d" % (mnt, edge, r, i, S))
        whole.append(time.monotonic() - t)
        t = time.monotonic()
        read_all("%s/%s/v%d" % (mnt, edge, r))
        view.append(time.monotonic() - t)
    mw, mv = pct(whole, 0.5), pct(view, 0.5)
    paired = pct([v / w for v, w in zip(view, whole)], 0.5)
    print("  4 shards whole: median %.1f ms p99 %.1f ms; T=1 view: median %.1f ms p99 %.1f ms"
          " = %.2fx the shards, %.2fx round by round%s"
          % (mw * 1e3, pct(whole, 0.99) * 1e3, mv * 1e3, pct(view, 0.99) * 1e3, mv / mw, paired,
             " (goal <= 1.2x)" if tok == 1024 else ""))


if __name__ == "__main__":
    main(sys.argv)
