#!/bin/bash
# 02-stream.t - a large object streams by RDMA through the reader's small
# window (fs/ns_stream.c): 1 GiB read right on a node whose pool is 40 MiB,
# reads that jump about, an rm on the owner mid-read that does not cut
# the read short, since the lease (and its windows) keep the object, and a
# window beside a pool that its own objects fill.
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1", "2"' <<EOF
wait_ms: 20000
edges:
  "0->2": { readers: 0 }
EOF
node a pool=host:1200MiB
node b pool=host:40MiB
ok "b reads a by rdma" wait_until 20 peer_is b a rdma

# pattern N PATH: N MiB, each MiB a random block stamped with its index,
# so that a MiB out of place is seen.  check PATH N [OFF...]: "same", or
# where the bytes differ; with offsets, preads of 1 MiB there.
PAT=$T/block
head -c 1M /dev/urandom >"$PAT"
pattern() {
	$PY - "$1" "$2" "$PAT" <<'PYEOF'
import sys
n, path, blk = int(sys.argv[1]), sys.argv[2], open(sys.argv[3], "rb").read()
with open(path, "wb") as f:
    for i in range(n):
        f.write(i.to_bytes(8, "little") + blk[8:])
PYEOF
}
check() {          # bounded: a read that hangs fails the test
	timeout -s KILL 300 $PY - "$PAT" "$@" <<'PYEOF'
import os, sys
blk, path, n = open(sys.argv[1], "rb").read(), sys.argv[2], int(sys.argv[3])
M = 1 << 20
def want(off, ln):
    out = b""
    while ln:
        i, o = divmod(off, M)
        k = min(ln, M - o, max(0, n * M - off))
        if not k:
            break
        out += (i.to_bytes(8, "little") + blk[8:])[o:o + k]
        off, ln = off + k, ln - k
    return out
fd = os.open(path, os.O_RDONLY)
if len(sys.argv) > 4:
    bad = [o for o in map(int, sys.argv[4:]) if os.pread(fd, M, o) != want(o, M)]
    print("same" if not bad else "differs at %s" % bad)
    sys.exit()
off = 0
while (b := os.read(fd, 4 * M)):
    if b != want(off, len(b)):
        print("differs in [%d, %d)" % (off, off + len(b)))
        sys.exit()
    off += len(b)
print("same" if off == n * M else "short: %d" % off)
PYEOF
}
used() { health "$1" "d['pool']['used'] >> 20"; }
used_is() { [ "$(used "$1")" = "$2" ]; }

pattern 1024 "$T/a/0/1/big"
is "$(check "$T/b/0/1/big" 1024)" same \
   "b, with a 40 MiB pool, reads a's 1 GiB object right, streamed by RDMA"
is "$(stat_of b bytes_pulled_rdma)" $((1024 << 20)) "... each byte READ once"
is "$(stat_of b bytes_pulled_tcp)" 0 "... none over TCP"
is "$(used b)" 0 "... and b keeps none of it"
ok "a complete read consumed it: a frees it" wait_until 20 used_is a 0

# The Python module copies it out of the window itself (OMNIFS_IOC_WINDOW).
pattern 200 "$T/a/0/1/py"
w0=$(stat_of b window_gets) r0=$(stat_of b bytes_pulled_rdma)
res=$(PYTHONPATH="$SRC/contrib/python" timeout -s KILL 300 $PY - "$T/b" "$PAT" <<'PYEOF'
import sys, omnifs
got, blk = omnifs.Mount(sys.argv[1]).get("0", "1", "py", timeout=20), open(sys.argv[2], "rb").read()
M = 1 << 20
print("same" if len(got) == 200 * M and all(
    got[i * M:(i + 1) * M] == i.to_bytes(8, "little") + blk[8:] for i in range(200)) else "differs")
PYEOF
)
is "$res" same "the module's get of a's 200 MiB object on b: byte-exact"
is "$(stat_of b window_gets)" $((w0 + 1)) "... copied out of its window"
is "$(stat_of b bytes_pulled_rdma)" $((r0 + (200 << 20))) "... its bytes READ once"
ok "... consumed: a frees it" wait_until 20 used_is a 0

# --- reads in any order, and an rm mid-read ---------------------------------------
pattern 200 "$T/a/0/2/r"
M=$((1 << 20))
is "$(check "$T/b/0/2/r" 200 0 $((5 * M)) $M $((2 * M - 100)) $((150 * M + 7)) \
      $((3 * M)) $((199 * M)) $((64 * M)))" same \
   "reads that jump back and forth, across the window's pieces, get the right bytes"
is "$(used b)" 0 "... and leave nothing in b's pool"
two() {
	timeout -s KILL 300 $PY - "$T/b/0/2/r" "$PAT" <<'PYEOF'
import sys, threading
blk, M = open(sys.argv[2], "rb").read(), 1 << 20
got = []
def read():
    ok, i = True, 0
    with open(sys.argv[1], "rb", buffering=0) as f:
        while (b := f.read(M)):
            ok &= b == i.to_bytes(8, "little") + blk[8:]
            i += 1
    got.append("same" if ok and i == 200 else "differs")
ts = [threading.Thread(target=read) for _ in range(2)]
for t in ts: t.start()
for t in ts: t.join()
print(*got)
PYEOF
}
is "$(two)" "same same" "two readers on b at once each read it whole and right"
three() {
	timeout -s KILL 300 $PY - "$T/b/0/2/r" "$PAT" <<'PYEOF'
import os, random, sys, threading
blk, M = open(sys.argv[2], "rb").read(), 1 << 20
fd = os.open(sys.argv[1], os.O_RDONLY)
bad = []
def want(off):
    i, o = divmod(off, M)
    a = i.to_bytes(8, "little") + blk[8:]
    b = (i + 1).to_bytes(8, "little") + blk[8:]
    return (a + b)[o:o + M]
def reads(seed):
    rnd = random.Random(seed)
    for _ in range(60):
        off = rnd.randrange(0, 199 * M)
        if os.pread(fd, M, off) != want(off):
            bad.append(off)
ts = [threading.Thread(target=reads, args=(i,)) for i in range(3)]
for t in ts: t.start()
for t in ts: t.join()
print("same" if not bad else "differs at %d offsets" % len(bad))
PYEOF
}
is "$(three)" same "three threads reading one open file at random places at once get the right bytes"

$PY - "$T/b/0/2/r" "$T" "$PAT" >"$T/held.out" <<'PYEOF' &
import os, sys, time
path, t, blk = sys.argv[1], sys.argv[2], open(sys.argv[3], "rb").read()
M = 1 << 20
fd = os.open(path, os.O_RDONLY)
data = [os.read(fd, 16 * M)]
open(t + "/held", "w").close()
end = time.time() + 60
while not os.path.exists(t + "/go") and time.time() < end:
    time.sleep(0.01)
try:
    while (b := os.read(fd, M)):
        data.append(b)
    data = b"".join(data)
    ok = len(data) == 200 * M and all(data[i * M:(i + 1) * M] == i.to_bytes(8, "little") + blk[8:]
                                      for i in range(200))
    print("same" if ok else "differs")
except OSError as e:
    print(os.strerror(e.errno))
PYEOF
holder=$!
ok "a reader on b is 16 MiB into r" wait_until 30 test -e "$T/held"
ok "rm of r on its owner a" rm "$T/a/0/2/r"
ok "... r leaves b's listing" wait_until 10 sh -c "! test -e '$T/b/0/2/r'"
is "$(used a)" 200 "... but a keeps its bytes for the read under way"
touch "$T/go"
wait_until 120 all_gone "$holder" || kill -9 "$holder"
wait "$holder"
is "$(cat "$T/held.out")" same "the reader reads the rest, right, after the rm"
ok "a lets go of r once the reader closes (its lease's windows too)" wait_until 10 used_is a 0
# A pool full of b's own objects: the window is host memory beside it,
# registered for the READs as the pool is.
head -c 38M /dev/urandom >"$T/mine"
ok "b fills its 40 MiB pool with 38 MiB of its own" cp "$T/mine" "$T/b/1/2/mine"
pattern 100 "$T/a/0/2/beside"
r0=$(stat_of b bytes_pulled_rdma)
is "$(check "$T/b/0/2/beside" 100)" same "... a's 100 MiB object reads right through a window beside it"
is "$(stat_of b windows_outside_pool)" 1 "... which .omni/stats counts"
is "$(stat_of b bytes_pulled_rdma)" $((r0 + (100 << 20))) "... its bytes READ into it by RDMA"
is "$(stat_of b bytes_pulled_tcp)" 0 "still no byte over TCP"
is "$(stat_of b rdma_errors)" 0 "no RDMA error all along"
done_testing
