#!/bin/bash
# Faults on one node: a writer killed mid-write, a full pool, and random
# sequences of operations with hostile names and values.
. "$(dirname "$0")/../lib.sh"

start_node a "pool=host:16M,wait_ms=500"
export M=$T/a E=$T/a/w/r
used() { health a "d['pool']['used']"; }

$PY - "$E/killed" <<'PYEOF' &
import sys, time
f = open(sys.argv[1], "wb", buffering=0)
f.write(b"x" * (4 << 20))
time.sleep(60)
PYEOF
w=$!
ok "a writer is mid-write" wait_until 5 sh -c "grep -q '^w/r/killed local in 4194304/' '$M/.omni/transfers'"
kill -KILL "$w"; wait "$w" 2>/dev/null
ok "the killed writer's space comes back" wait_until 5 sh -c "[ \$($PY -c \"import json; print(json.load(open('$M/.omni/health'))['pool']['used'])\") = 0 ]"
is "$(stat_of a aborted)" "1" "its object is counted as aborted"
is "$(pyerr "open(M + '/w/r/killed', 'rb')")" "ENOENT" "and never publishes"
is "$(stat_of a published)" "0" "nothing was published"

$PY -c "
import os
f = open('$E/exited', 'wb', buffering=0); f.write(b'bye')
os._exit(0)"
is "$(cat "$E/exited")" "bye" "a writer that exits without close publishes"

dd if=/dev/zero of="$E/full" bs=1M count=32 2>"$T/dd.err"
is "$?" "1" "dd of 32 MiB into a 16 MiB pool fails"
ok "with ENOSPC" grep -q "No space left on device" "$T/dd.err"
is "$(pyerr "open(M + '/w/r/full', 'rb')")" "ENOENT" "the object is not published"
ok "its space comes back" wait_until 5 sh -c "[ \$($PY -c \"import json; print(json.load(open('$M/.omni/health'))['pool']['used'])\") = 0 ]"
# One writer's impossible requests take nothing from the others (issue 20).
$PY - "$E" <<'PYEOF' >"$T/greedy.out" 2>&1
import errno, json, os, sys
E = sys.argv[1]
used = lambda: json.load(open(E + "/../../.omni/health"))["pool"]["used"]
fd = os.open(E + "/greedy", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
os.write(fd, b"g" * 1000)
before = used()
def fails(what, f, *args):
    try:
        f(*args)
        print(what, "did not fail")
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EFBIG):
            print(what, "failed with", errno.errorcode[e.errno])
    if used() != before:
        print(what, "left the pool at", used(), "not", before)
fails("ftruncate to 1 TiB", os.ftruncate, fd, 1 << 40)
fails("ftruncate to 2^63-1", os.ftruncate, fd, (1 << 63) - 1)
fails("posix_fallocate of 1 GiB", os.posix_fallocate, fd, 0, 1 << 30)
fails("posix_fallocate of 20 MiB", os.posix_fallocate, fd, 0, 20 << 20)
hold = os.open(E + "/hold", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
os.write(hold, b"h" * (8 << 20))
before = used()
fails("pwrite at 10 MiB, 8 MiB being taken", os.pwrite, fd, b"x", 10 << 20)
os.close(hold)
os.unlink(E + "/hold")
before = used()
fd2 = os.open(E + "/greedy2", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
fails("pwrite at 1 TiB", os.pwrite, fd2, b"x", 1 << 40)
with open(E + "/other", "wb") as f:    # the greedy one still open
    f.write(b"o" * (12 << 20))
for f in (fd, fd2):
    try:
        os.close(f)
        print("close after a failed write did not fail")
    except OSError as e:        # SPEC §4.1: not published
        assert e.errno == errno.ENOSPC, e
print("done")
PYEOF
is "$(cat "$T/greedy.out")" done \
   "ftruncate, posix_fallocate and pwrite past the pool fail with ENOSPC and take nothing; another writer fits 12 MiB"
is "$(cat "$E/other" | wc -c)" $((12 << 20)) "and reads back"
is "$(pyerr "open(M + '/w/r/greedy', 'rb')")" "ENOENT" "the writer that got ENOSPC from write is not published"
ok "the pool is empty again" wait_until 5 sh -c "[ \$($PY -c \"import json; print(json.load(open('$M/.omni/health'))['pool']['used'])\") = 0 ]"
$PY -c "
import os
fd = os.open('$E/alloc', os.O_WRONLY | os.O_CREAT | os.O_EXCL)
os.posix_fallocate(fd, 0, 3 << 20)
os.pwrite(fd, b'end', (3 << 20) - 3)
os.close(fd)"
is "$(stat -c %s "$E/alloc")" $((3 << 20)) "posix_fallocate within the pool reserves and sizes the object"
is "$(cat "$E/alloc" | tail -c 3)" end "and it reads back"

ok "a 15 MiB object fits afterwards" dd if=/dev/zero of="$E/fits" bs=1M count=15 status=none
ok "and reads back" sh -c "[ \$(wc -c <'$E/fits') = 15728640 ]"

# Random operations with random names, offsets and values: the daemon must
# answer every one of them with data or an errno, and stay consistent.
$PY - "$M" <<'PYEOF' >"$T/fuzz.out" 2>&1
import errno, os, random, sys
M = sys.argv[1]
rnd = random.Random(1234)
def name():
    n = rnd.choice([0, 1, 3, 64, 65, 255, 256])
    return bytes(rnd.choice(b"abc./\x01\xff -_") for _ in range(n)).decode("latin-1")
ops = 0
for i in range(3000):
    p = "/".join([M, rnd.choice(["0", "1", name()]), rnd.choice(["1", name()]), name()])
    op = rnd.randrange(8)
    try:
        if op == 0:
            with open(p, "wb") as f:
                f.seek(rnd.randrange(0, 1 << 20)); f.write(os.urandom(rnd.randrange(0, 65536)))
        elif op == 1:
            with open(p, "rb", buffering=0) as f:
                f.seek(rnd.randrange(0, 1 << 20)); f.read(rnd.randrange(0, 1 << 20))
        elif op == 2: os.unlink(p)
        elif op == 3: os.stat(p)
        elif op == 4: os.setxattr(p, "user.omni.readers", os.urandom(rnd.randrange(0, 20)))
        elif op == 5: os.listdir(os.path.dirname(p))
        elif op == 6: os.getxattr(p, rnd.choice(["user.omni.size", "user.omni.xxh3", "user.x", "trusted.y"]))
        else: os.truncate(p, rnd.randrange(0, 1 << 20))
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.EINVAL, errno.ENAMETOOLONG, errno.EACCES, errno.EEXIST,
                           errno.ENOTSUP, errno.ENODATA, errno.EISDIR, errno.ENOTDIR, errno.EPERM,
                           errno.ENOSPC, errno.ERANGE):
            print("unexpected", op, p.encode("latin-1")[:80], e); sys.exit(1)
    ops += 1
print("ops", ops)
PYEOF
is "$?" "0" "3000 random operations get data or an expected errno"
ok "the daemon is alive" kill -0 "${NODE_PID[a]}"
ok "health still parses" health a "d['node']"
done_testing
