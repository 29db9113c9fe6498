"""chaos.py - writers and readers whose bytes say whether they are right.

usage: chaos.py write MOUNT FROM TO PREFIX N SEED
       chaos.py read  MOUNT FROM TO PREFIX N SEED WRITER-OUT

Key i is PREFIX-i; its size and bytes derive from the key alone, so a
reader on any node can check every byte.  One line per key on stdout,
`KEY START END OUTCOME` (START, END: the wall clock in seconds around the
attempt, to set beside the faults' times), where OUTCOME is `ok`, an
errno's name, `NOMOUNT` when MOUNT was not mounted then or stopped being
that mount during a failed attempt (its daemon being restarted), or
`WRONG ...` for bytes that are not the key's (never allowed).  A writer
that loses its mount (its daemon killed) goes on with the next key, as a
real worker would.  A reader follows its writer's lines (WRITER-OUT): it
opens a key once its writer has tried it, and says `KEY UNWRITTEN` for one
the writer could not write, so that no read waits out wait_ms for a key
that will never come.  Nor for one whose owner was killed after writing
it (the `faults` file beside WRITER-OUT, whose name, w.ROUND.<owner><to>,
names the owner): a node that started after that kill cannot know the key
was lost, so the reader arms a short wait for that open (user.omni.wait_ms).
"""
import errno
import os
import random
import sys
import time


def usage():
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    sys.exit(2)


def content(key):
    rnd = random.Random(key)
    size = rnd.choice([0, 1, 4095, 65536, 65537]) if rnd.random() < 0.3 else \
        rnd.randrange(1, 3 << 20)
    return rnd.randbytes(size)


def write(path, data):
    """In MiB pieces, in one of three ways the key chooses: in order;
    appending (O_APPEND: each write goes at the object's end as the daemon
    knows it); or last piece first, each at its offset (holes, until the
    first pieces come)."""
    how = random.Random(os.path.basename(path) + "/how").choice(("order", "append", "reverse"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                 (os.O_APPEND if how == "append" else 0), 0o644)
    try:
        pieces = [(at, memoryview(data)[at:at + (1 << 20)]) for at in range(0, len(data), 1 << 20)]
        for at, view in reversed(pieces) if how == "reverse" else pieces:
            while view:
                n = os.pwrite(fd, view, at) if how == "reverse" else os.write(fd, view)
                view, at = view[n:], at + n
    finally:
        os.close(fd)            # publishes, or says why not


def read(path):
    with open(path, "rb", buffering=0) as f:
        return f.read()


def writer_said(out, key, deadline):
    """The writer's outcome for key and when it ended, once its line is there."""
    while time.monotonic() < deadline:
        with open(out) as f:
            for line in f:
                if not line.endswith("\n"):
                    break               # being written
                fields = line.split(None, 3)
                if fields[0] == key:
                    return fields[3].rstrip("\n"), float(fields[2])
        time.sleep(0.02)
    return "LATE", 0.0


def owner_killed_since(writer_out, when):
    """Whether the writer's node was killed after `when` (the faults file)."""
    owner = os.path.basename(writer_out).split(".")[2][0]
    try:
        with open(os.path.join(os.path.dirname(writer_out), "faults")) as f:
            return any(k == "kill" and n == owner and float(a) >= when - 1.0
                       for k, n, a, _ in (line.split() for line in f if len(line.split()) == 4))
    except OSError:
        return False


def mount_dev(mnt):
    """The device of what is mounted at mnt, or None."""
    try:
        return os.stat(mnt).st_dev if os.path.ismount(mnt) else None
    except OSError:
        return None             # a dead daemon's mount answers ENOTCONN


def say(key, t0, t1, out):
    print("%s %.3f %.3f %s" % (key, t0, t1, out), flush=True)


def main(argv):
    if len(argv) != 8 + (len(argv) > 2 and argv[1] == "read") or argv[1] not in ("write", "read"):
        usage()
    op, mnt, frm, to, prefix, n, seed = argv[1:8]
    rnd = random.Random(seed)
    for i in range(int(n)):
        key = "%s-%d" % (prefix, i)
        path = os.path.join(mnt, frm, to, key)
        want = content(key)
        if op == "read":
            said, wrote = writer_said(argv[8], key, time.monotonic() + 120)
            if said != "ok":
                say(key, time.time(), time.time(), "UNWRITTEN")
                continue
        t0 = time.time()
        dev = mount_dev(mnt)
        if dev is None:
            say(key, t0, t0, "NOMOUNT")
            time.sleep(0.1)
            continue
        try:
            if op == "read" and owner_killed_since(argv[8], wrote):
                os.setxattr(mnt, "user.omni.wait_ms", b"500")
            if op == "write":
                write(path, want)
                out = "ok"
            else:
                got = read(path)
                out = "ok" if got == want else "WRONG %d bytes, want %d" % (len(got), len(want))
        except OSError as e:
            out = errno.errorcode.get(e.errno, str(e.errno))
            # Its daemon went while we were at it: the path may even have
            # been resolved in the bare directory under the mount (ENOENT).
            if mount_dev(mnt) != dev:
                out = "NOMOUNT"
        say(key, t0, time.time(), out)
        time.sleep(rnd.random() * 0.05)


if __name__ == "__main__":
    main(sys.argv)
