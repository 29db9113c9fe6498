"""viewchurn.py - views opened while their shards come and go, for tests.

usage: viewchurn.py EDGE_DIR SECONDS [READ_EDGE_DIR]

For SECONDS, two writers publish vllm-omni shards of six bases (S of 1, 2
or 4 ranks, some consumed by one read) and now and then remove some, while
four readers open views of them (any T of 1 to 8, or the bare base), read
them whole or in part, and close them, and ask for their summaries
(user.omni.kv); the readers on READ_EDGE_DIR if given (the same edge on
another node).  What can happen to an open or a summary meanwhile is
expected (ENOENT, EIO, EINVAL, EEXIST, EACCES, ENODATA); any other error
stops it with exit status 1: ESTALE too, which no caller sees (an open
through a name the kernel kept is served on it), and any error of a read
of a view that opened, whose sources are held for it (SPEC §4.5).  At the
end it prints one line: `writes N views M refused R`.
"""
import errno
import multiprocessing
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../py"))
import kvpy  # noqa: E402

TOK, H, D, L = 8, 8, 16, 4
EXPECTED = (errno.ENOENT, errno.EIO, errno.EINVAL, errno.EEXIST, errno.EACCES,
            errno.ENODATA)


def writer(edge, secs, seed):
    rnd, n, end = random.Random(seed), 0, time.monotonic() + secs
    while time.monotonic() < end:
        base, S = "b%d" % rnd.randrange(6), rnd.choice((1, 2, 4))
        for k in range(S):
            t = [os.urandom(TOK * (H // S) * D * 2) for _ in range(2 * L)]
            try:
                with open("%s/%s.rank%dof%d" % (edge, base, k, S), "wb") as f:
                    if rnd.random() < 0.5:
                        os.setxattr(f.fileno(), "user.omni.readers", b"1")
                    f.write(kvpy.vllm(t[:L], t[L:], tokens=TOK, heads=H // S, head_dim=D,
                                      rid=base))
                n += 1
            except OSError as e:
                if e.errno not in EXPECTED:
                    raise
        if rnd.random() < 0.3:
            for name in os.listdir(edge):
                if name.startswith(base + ".") and rnd.random() < 0.5:
                    try:
                        os.unlink(os.path.join(edge, name))
                    except OSError as e:
                        if e.errno not in EXPECTED:
                            raise
    return n


def reader(edge, secs, seed):
    rnd, views, refused, end = random.Random(seed), 0, 0, time.monotonic() + secs
    while time.monotonic() < end:
        base, T = "b%d" % rnd.randrange(6), rnd.choice((1, 2, 4, 8))
        name = base if T == 1 and rnd.random() < 0.5 else "%s.rank%dof%d" % (base, rnd.randrange(T), T)
        try:
            if rnd.random() < 0.2:      # its summary, planned without opening it
                os.getxattr(os.path.join(edge, name), "user.omni.kv")
            fd = os.open(os.path.join(edge, name), os.O_RDONLY)
        except OSError as e:
            if e.errno not in EXPECTED:
                raise
            refused += 1
            continue
        try:
            while os.read(fd, rnd.choice((4096, 1 << 16, 1 << 20))) and rnd.random() > 0.05:
                pass            # now and then a partial read
        except OSError as e:
            raise OSError(e.errno, "a read of %s: %s" % (name, e.strerror)) from e
        finally:
            os.close(fd)
        views += 1
    return views, refused


def main(argv):
    if len(argv) not in (3, 4) or argv[1] in ("-h", "--help"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    edge, secs = argv[1], float(argv[2])
    redge = argv[3] if len(argv) > 3 else edge
    with multiprocessing.Pool(6) as pool:
        ws = [pool.apply_async(writer, (edge, secs, i)) for i in range(2)]
        rs = [pool.apply_async(reader, (redge, secs, 100 + i)) for i in range(4)]
        try:
            writes = sum(w.get() for w in ws)
            got = [r.get() for r in rs]
        except OSError as e:
            print("viewchurn: %s" % e, file=sys.stderr)
            sys.exit(1)
    print("writes %d views %d refused %d" % (writes, sum(v for v, _ in got), sum(r for _, r in got)))


if __name__ == "__main__":
    main(sys.argv)
