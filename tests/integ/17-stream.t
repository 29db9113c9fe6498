#!/bin/bash
# 17-stream.t - a remote object larger than 65 MiB streams to its reader
# through a small window of the reader's pool: it reads right, in order or
# not, on a node whose pool is much smaller, and nothing of it stays there.
# The owner keeps the object for the read (a lease), so an rm mid-read does
# not cut the read short; the lease ends with the read, or with the reader's
# node; a waiting open is answered by a publish, and a reader that stops
# early consumes nothing.  A bad chunk or a lost owner fails the read with EIO
# (SPEC §4, §7).
. "$(dirname "$0")/../lib.sh"

read -r PA PB < <(free_ports 2)
new_secret "$T/secret"
cat >"$T/omni.yaml" <<EOF
secret_file: $T/secret
wait_ms: 8000
nodes:
  a: { addr: 127.0.0.1:$PA, stages: ["0"] }
  b: { addr: 127.0.0.1:$PB, stages: ["1", "2"] }
edges:
  "0->2": { readers: 0 }
EOF
node() { start_node "$1" "config=$T/omni.yaml,node=$1,pool=host:${2}MiB"; }
peers_up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
node a 400
node b 40
ok "a and b see each other" wait_until 10 peers_up b
used() { health "$1" "d['pool']['used'] >> 20"; }
used_is() { [ "$(used "$1")" = "$2" ]; }

head -c 200M /dev/urandom >"$T/big"
cp "$T/big" "$T/a/0/1/big"
ok "b, with a 40 MiB pool, reads a's 200 MiB object right" cmp "$T/big" "$T/b/0/1/big"
is "$(used b)" 0 "... and keeps none of it in its pool"
ok "... a complete read: consumed (readers: 1), so a frees it" wait_until 10 used_is a 0
is "$(stat_of b bytes_pulled)" $((200 << 20)) "... each byte pulled once"

# The Python module copies a streamed object out of the reader's window
# itself (OMNIFS_IOC_WINDOW), range by range as each lands, not a FUSE read
# per MiB.  A reader killed while it holds a range gives the window back.
OMNIPY="env PYTHONPATH=$SRC/contrib/python $SYSPY"
window_gets() { stat_of b window_gets; }
cp "$T/big" "$T/a/0/1/py"
w0=$(window_gets)
$OMNIPY -c 'import sys, omnifs; sys.stdout.buffer.write(omnifs.Mount(sys.argv[1]).get("0", "1", "py", timeout=5))' \
	"$T/b" >"$T/py.out"
ok "omnifs.Mount.get on b reads a's 200 MiB object right" cmp "$T/big" "$T/py.out"
rm -f "$T/py.out"
is "$(window_gets)" $((w0 + 1)) "... copied out of its window (window_gets)"
is "$(used b)" 0 "... which b gives back"
ok "... a complete read: consumed, so a frees it" wait_until 10 used_is a 0
cp "$T/big" "$T/a/0/1/held"
$OMNIPY - "$T/b/0/1/held" "$T/held.py" <<'PYEOF' &
import os, struct, sys, time, omnifs.direct as d, omnifs.ioctl as io
fd = os.open(sys.argv[1], os.O_RDONLY)
buf = bytearray(struct.pack("<QQQQ", 0, 1, 0, 0))
io.call(fd, d.WINDOW, buf)
open(sys.argv[2], "w").write("%d %d\n" % struct.unpack("<QQQQ", buf)[1::2])
time.sleep(60)
PYEOF
HELD=$!
ok "a process holds the first range of a window on b" wait_until 10 test -s "$T/held.py"
read -r n size <"$T/held.py"
ok "... its first piece, at most 2 MiB, of the 200 MiB object" \
	test "$n" -ge 1 -a "$n" -le $((2 << 20)) -a "$size" = $((200 << 20))
kill -9 "$HELD"; wait "$HELD" 2>/dev/null
ok "... killed: b gives its window back" wait_until 10 used_is b 0
ok "... not a complete read: a keeps it, and a reader reads it whole" cmp "$T/big" "$T/b/0/1/held"
ok "... which consumes it" wait_until 10 used_is a 0

# Up to 65 MiB an object is copied whole: a 64 MiB tensor with its header
# (here the connector's 64 bytes) is handed over while it lands, not
# streamed.  So it needs room in b's pool, which is too small for it: b
# says so, and streams it all the same.
head -c $(( (64 << 20) + 64 )) /dev/urandom >"$T/t64"
cp "$T/t64" "$T/a/0/1/t64"
ok "a 64 MiB object and its header, too large for b's pool, reads on b" cmp "$T/t64" "$T/b/0/1/t64"
ok "... streamed once its copy did not fit: it is copied whole where it fits" \
	grep -q "0/1/t64: its $(( (64 << 20) + 64 )) bytes do not fit this node's pool" "$T/b.log"
ok "... consumed, so a frees it" wait_until 10 used_is a 0
head -c $(( (65 << 20) + 1 )) /dev/urandom >"$T/t65"
cp "$T/t65" "$T/a/0/1/t65"
ok "an object one byte over 65 MiB streams: b reads it through its small pool" cmp "$T/t65" "$T/b/0/1/t65"
ok "... without trying a copy first" sh -c "! grep -q '0/1/t65:' '$T/b.log'"
ok "... consumed, so a frees it" wait_until 10 used_is a 0

# --- a waiting open, a reader that stops early -------------------------------
read_later "$T/b/0/1/late" "$T/big"
waiting() { [ "$(stat_of b waiters)" = 1 ]; }
ok "an open on b of a key not yet written waits" wait_until 10 waiting
cp "$T/big" "$T/a/0/1/late"
timeout -s KILL 120 tail --pid="$LATE" -f /dev/null
kill -9 "$LATE" 2>/dev/null      # only if it outlived the bound
is "$(cat "$T/late.out")" same "... a's publish answers it, and it streams the object whole and right"
ok "... and consumes it (readers: 1)" wait_until 10 used_is a 0

cp "$T/big" "$T/a/0/1/half"
is "$(timeout -s KILL 120 $PY -c '
import sys
with open(sys.argv[1], "rb") as f:
    print(len(f.read(100 << 20)))' "$T/b/0/1/half")" $((100 << 20)) "a reader on b reads half of a streamed object and closes"
is "$(xattr reads "$T/a/0/1/half")" 0 "... which consumes nothing: a keeps it, with no read counted"
ok "... and the next reader reads it whole" cmp "$T/big" "$T/b/0/1/half"
ok "... which consumes it" wait_until 10 used_is a 0

# --- reads in any order -------------------------------------------------------
cp "$T/big" "$T/a/0/2/r"        # readers: 0, kept until rm
is "$(timeout -s KILL 120 $PY - "$T/b/0/2/r" "$T/big" <<'PYEOF'
import os, sys
want = open(sys.argv[2], "rb").read()
fd = os.open(sys.argv[1], os.O_RDONLY)
M = 1 << 20
# forward, back, across the window's 2 MiB pieces, far ahead, the end, past it
cases = [(0, M), (5 * M, M), (M, M), (2 * M - 100, M), (4 * M - 1, 2),
         (150 * M + 7, M), (3 * M, M), (200 * M - 10, M), (200 * M, M), (64 * M, 4096)]
bad = [c for c in cases if os.pread(fd, c[1], c[0]) != want[c[0]:c[0] + c[1]]]
print("same" if not bad else "differs at %s" % bad)
PYEOF
)" same "reads that jump back and forth, across pieces and past the end, get the right bytes"
is "$(used b)" 0 "... and leave nothing in b's pool"
is "$(timeout -s KILL 120 $PY - "$T/b/0/2/r" "$T/big" <<'PYEOF'
import hashlib, sys, threading
want = hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest()
got = []
def read():
    h = hashlib.sha256()
    with open(sys.argv[1], "rb", buffering=0) as f:
        while (b := f.read(1 << 20)):
            h.update(b)
    got.append(h.hexdigest())
ts = [threading.Thread(target=read) for _ in range(2)]
for t in ts: t.start()
for t in ts: t.join()
print(" ".join("same" if g == want else "differs" for g in got))
PYEOF
)" "same same" "two readers on b at once each read it whole and right"
is "$(timeout -s KILL 120 $PY - "$T/b/0/2/r" "$T/big" <<'PYEOF'
import os, random, sys, threading
want = open(sys.argv[2], "rb").read()
fd = os.open(sys.argv[1], os.O_RDONLY)
bad = []
def reads(seed):
    rnd = random.Random(seed)
    for _ in range(150):
        off = rnd.randrange(0, len(want) - (1 << 20))
        if os.pread(fd, 1 << 20, off) != want[off:off + (1 << 20)]:
            bad.append(off)
ts = [threading.Thread(target=reads, args=(i,)) for i in range(3)]
for t in ts: t.start()
for t in ts: t.join()
print("same" if not bad else "differs at %d offsets" % len(bad))
PYEOF
)" same "three threads reading one open file at random places at once get the right bytes"

# --- rm mid-read: the read finishes -------------------------------------------
# hold FILE: reads FILE's first 16 MiB, says so in $T/held, waits for
# $T/go, reads on; prints "same", "differs" or the error.
hold() {
	$PY - "$1" "$T" <<'PYEOF' &
import os, sys, time
path, t = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDONLY)
data = os.read(fd, 16 << 20)
open(t + "/held", "w").close()
end = time.time() + 30
while not os.path.exists(t + "/go") and time.time() < end:
    time.sleep(0.01)
try:
    while (b := os.read(fd, 1 << 20)):
        data += b
    print("same" if data == open(t + "/big", "rb").read() else "differs")
except OSError as e:
    print(os.strerror(e.errno))
PYEOF
	HOLDER=$!
}
go() { touch "$T/go"; wait "$HOLDER"; rm -f "$T/held" "$T/go"; }

hold "$T/b/0/2/r" >"$T/held.out"
ok "a reader on b is 16 MiB into r" wait_until 10 test -e "$T/held"
ok "rm of r on its owner a" rm "$T/a/0/2/r"
gone_b() { [ ! -e "$T/b/0/2/r" ]; }
ok "... r leaves b's listing" wait_until 10 gone_b
is "$(used a)" 200 "... but a keeps its bytes for the read under way"
go
is "$(cat "$T/held.out")" same "the reader reads the rest, right, after the rm"
ok "a lets go of r once the reader closes" wait_until 10 used_is a 0

# --- the reader's node dies mid-read: its owner lets go -----------------------
cp "$T/big" "$T/a/0/2/r2"
hold "$T/b/0/2/r2" >"$T/held.out"
ok "a reader on b is 16 MiB into r2" wait_until 10 test -e "$T/held"
ok "rm of r2 on a" rm "$T/a/0/2/r2"
disown "${NODE_PID[b]}"    # killed below: no "Killed" from bash
kill -9 "${NODE_PID[b]}"
wait_until 10 all_gone "${NODE_PID[b]}"
umount -l "$T/b" 2>/dev/null
unset "NODE_PID[b]"
go
ok "with b's daemon killed, a lets go of r2 once b's connection ends" wait_until 10 used_is a 0
node b 40
ok "b restarted rejoins" wait_until 10 peers_up b

# --- a bad chunk, a lost owner -----------------------------------------------
stop_node a
OMNIFS_TEST_CORRUPT=1 node a 400
ok "a, sending bad hashes, rejoins" wait_until 10 peers_up b
cp "$T/big" "$T/a/0/2/bad"
is "$(M=$T/b pyerr "open(M + '/0/2/bad', 'rb').read()")" EIO "a streamed chunk that fails its hash: EIO"
ok "... counted" test "$(stat_of b checksum_failures)" -ge 1
cp "$T/big" "$T/a/0/2/badpy"
is "$(M=$T/b pyerr "sys.path.insert(0, '$SRC/contrib/python'); import omnifs; omnifs.Mount(M).get('0', '2', 'badpy', timeout=5)")" \
	EIO "... and to omnifs.Mount.get, which copies out of the window"
rm -f "$T/a/0/2/badpy"
stop_node a
OMNIFS_TEST_SERVE_DELAY_MS=20 node a 400
ok "a, slow, rejoins" wait_until 10 peers_up b
cp "$T/big" "$T/a/0/2/slow"
disown "${NODE_PID[a]}"    # killed below: no "Killed" from bash
res=$(read_cut "$T/b/0/2/slow" kill -9 "${NODE_PID[a]}")
is "$res" "Input/output error 1" "a streamed read whose owner is killed mid-read gets EIO within 10 s"
wait_until 10 all_gone "${NODE_PID[a]}"
umount -l "$T/a" 2>/dev/null
unset "NODE_PID[a]"
is "$(used b)" 0 "... and b's pool is empty again"

# An rm that reaches the owner before a reader's first pull: the owner has
# not taken the object for that read yet (its lease), so the open fails
# with ENOENT, as it would have a moment earlier, instead of succeeding for
# its first read to fail with EIO.  b hears of the rm late (its GONE held).
stop_node b
OMNIFS_TEST_GONE_HOLD_MS=3000 node b 40
node a 400
ok "a and b are up again" wait_until 10 peers_up b
cp "$T/big" "$T/a/0/2/late"
ok "b knows of a's late" wait_until 5 stat "$T/b/0/2/late"
rm "$T/a/0/2/late"
is "$(M=$T/b pyerr "open(M + '/0/2/late', 'rb').read(1)")" ENOENT \
   "an open on b of it after a removed it, before b hears so: ENOENT"
ok "... and b's window is given back" wait_until 10 used_is b 0

# The same for an open that waits for its key: b hears of a's publish late
# (its ANNOUNCE held), after a's rm of it.
stop_node b
OMNIFS_TEST_HOLD_MS=2000 node b 40
ok "a and b are up, once more" wait_until 10 peers_up b
M=$T/b pyerr "open(M + '/0/0/held', 'rb').read(1)" >"$T/held.out" &
HELD=$!
ok "an open on b of a's key not yet written waits" wait_until 10 waiting
cp "$T/big" "$T/a/0/0/held"
rm "$T/a/0/0/held"
timeout -s KILL 60 tail --pid="$HELD" -f /dev/null
is "$(cat "$T/held.out")" ENOENT "a's publish answers it once b hears of it, and a's rm: ENOENT"
ok "... and b's window is given back" wait_until 10 used_is b 0

done_testing
