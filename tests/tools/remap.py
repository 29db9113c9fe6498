"""remap.py - mappings of one key while it is written again and again, for tests.

usage: remap.py DIR N

A writer puts N objects, one after another, under DIR/k (each as soon as
the last is consumed; sizes 1 to 250 bytes, each byte the size, so a
smaller one follows a larger one), while two readers read each whole (the
edge consumes an object at its first complete read: they race for it) and
a third maps each object it opens, reads it through the mapping, drops
the mapping's pages (MADV_DONTNEED) and reads it again.  The second read
must give the first's bytes, whatever came under the name meanwhile: a
mapping keeps its object (it shared the name's inode with the next one,
which changed its bytes, or shrank it under the mapping: SIGBUS).  Then
objects of 255 bytes tell the readers to stop, and what is left goes.
Prints each process's errors, then `done N` if none had any.
"""
import errno
import mmap
import os
import signal
import sys
import time

DEADLINE_S = 60                 # the whole run, however slow the machine
STOP = 255                      # an object this big: the reader that reads it stops


def reader(path, mapper, out):
    """A reader's life until it reads a STOP: a line per error on out."""
    errs = {}
    first = b""
    end = time.monotonic() + DEADLINE_S
    while len(first) != STOP and time.monotonic() < end:
        first = b""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            if e.errno != errno.ENOENT:         # the wait ran out: none came
                errs["open " + errno.errorcode[e.errno]] = 1
            continue
        try:
            if mapper:
                m = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
                first = m[:]
                time.sleep(0.001)       # not a wait: holds the mapping while the key moves on
                m.madvise(mmap.MADV_DONTNEED)
                if m[:] != first:
                    errs["the mapping changed"] = 1
                m.close()
            else:
                first = os.pread(fd, 4096, 0)
            if first and (len(first) != first[0] or first.count(first[0]) != len(first)):
                errs["torn"] = 1
        except (OSError, ValueError) as e:
            errs[str(e)] = 1
        os.close(fd)
    for e in errs:
        os.write(out, b"reader: %s\n" % e.encode())


def writer(path, n, out):
    """Puts n objects, each once the last is gone (EACCES while it is),
    then STOPs until it is killed (two readers may read one)."""
    end = time.monotonic() + DEADLINE_S
    i = 0
    while time.monotonic() < end:
        size = (i * 97) % 250 + 1 if i < n else STOP
        try:
            with open(path, "wb") as f:
                f.write(bytes([size]) * size)
            i += 1
        except OSError as e:
            if e.errno != errno.EACCES:
                os.write(out, b"writer: %s\n" % errno.errorcode[e.errno].encode())
                return
    os.write(out, b"writer: %d of %d in %d s\n" % (min(i, n), n, DEADLINE_S))


def main():
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
    path, n = os.path.join(sys.argv[1], "k"), int(sys.argv[2])
    rd, wr = os.pipe()
    kids = []
    for role in ("reader", "reader", "mapper", "writer"):
        pid = os.fork()
        if pid == 0:
            os.close(rd)
            if role == "writer":
                writer(path, n, wr)
            else:
                reader(path, role == "mapper", wr)
            os._exit(0)
        kids.append((role, pid))
    os.close(wr)
    bad = 0
    for role, pid in kids:
        if role == "writer":
            os.kill(pid, signal.SIGKILL)        # the readers are done
        _, status = os.waitpid(pid, 0)
        if status and role != "writer":
            print("%s: %s" % (role, "killed by signal %d" % os.WTERMSIG(status)
                              if os.WIFSIGNALED(status) else "exit %d" % os.WEXITSTATUS(status)))
            bad += 1
    try:
        os.unlink(path)                 # the last STOP, or a writer's
    except FileNotFoundError:
        pass
    errs = os.read(rd, 1 << 16).decode()
    sys.stdout.write(errs)
    if not bad and not errs:
        print("done %d" % n)


if __name__ == "__main__":
    main()
