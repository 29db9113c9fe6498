"""samekey.py - two writers of one key on two nodes that close at once, for tests.

usage: samekey.py ROOT EDGE SIZE N WRITERS READERS

N keys on EDGE (`<from>/<to>`), each written with SIZE bytes by a process
on each of the two WRITERS nodes (ROOT/<node> is a node's mount; plain
O_CREAT, as a shell's > does, or O_EXCL with EXCL=1 in the environment)
that both hold their bytes before either closes, then close together.
One close must publish and the other fail with EEXIST, and every node of
READERS must read the winner's bytes.  Prints a line per key that broke
the rule, then `done K`, K the keys that kept it.
"""
import errno
import os
import sys


def writer(path, node, size, excl, ready, go, out):
    """A forked writer's life: says how its close went, or what failed
    before it (its open, a write), on out."""
    fd = -1
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | excl)
        os.write(fd, node.encode() * size)
    except OSError as e:
        os.write(out, b"%s %d\n" % (node.encode(), e.errno))
        if fd >= 0:
            os.close(fd)                # nothing to publish: it failed
            fd = -1
    os.write(ready, b"r")
    os.read(go, 1)                      # both hold their bytes: close now
    try:
        if fd >= 0:
            os.close(fd)
            os.write(out, b"%s ok\n" % node.encode())
    except OSError as e:
        os.write(out, b"%s %d\n" % (node.encode(), e.errno))
    os._exit(0)


def race(root, edge, size, key, pair, excl):
    """The two closes' outcomes, [(node, "ok" | errno), ...], sorted."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    out_r, out_w = os.pipe()
    kids = []
    for node in pair:
        pid = os.fork()
        if pid == 0:
            writer("%s/%s/%s/%s" % (root, node, edge, key), node, size, excl,
                   ready_w, go_r, out_w)
        kids.append(pid)
    os.close(ready_w)
    ready = b""
    while len(ready) < len(pair):       # b"" if a writer died: go anyway
        got = os.read(ready_r, len(pair))
        if not got:
            break
        ready += got
    os.write(go_w, b"xx")
    for pid in kids:
        os.waitpid(pid, 0)
    os.close(out_w)
    said = sorted(tuple(l.split()) for l in os.read(out_r, 1000).decode().splitlines())
    for fd in (ready_r, out_r, go_r, go_w):
        os.close(fd)
    return said


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return
    if len(sys.argv) != 7:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    root, edge, size, n, pair, readers = sys.argv[1:]
    size, n = int(size), int(n)
    excl = os.O_EXCL if os.environ.get("EXCL") == "1" else 0
    bad = 0
    for i in range(n):
        key = "%s%s%d_%d" % ("x" if excl else "", pair, size, i)
        said = race(root, edge, size, key, pair, excl)
        won = [node for node, what in said if what == "ok"]
        lost = [node for node, what in said if what == str(errno.EEXIST)]
        seen = {}
        for node in readers:
            try:
                with open("%s/%s/%s/%s" % (root, node, edge, key), "rb") as f:
                    seen[node] = f.read()
            except OSError as e:
                seen[node] = e.strerror
        if (len(won), len(lost)) != (1, 1) or \
           any(v != won[0].encode() * size for v in seen.values()):
            bad += 1
            print("# %s: closes %s, reads %s" % (key, said, {k: v[:1] for k, v in seen.items()}))
    print("done", n - bad)


if __name__ == "__main__":
    main()
