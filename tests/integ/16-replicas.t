#!/bin/bash
# 16-replicas.t - a reader's node keeps a copy of what it pulled in its own
# pool.  Copies nobody uses make room for other reads and for writes there,
# least recently opened first; copies in use stay; an object whose copy
# cannot fit streams through a window of the pool, as one larger than the
# pool does, and leaves the pool as it was; one whose window cannot fit
# either takes it beside the pool, up to a quarter of the pool's size;
# beyond, its open waits for one: ENOSPC at its deadline, unless the object
# goes meanwhile (then as an open of the key: ENOENT, or EIO for an owner
# lost) (SPEC §4, §8).
. "$(dirname "$0")/../lib.sh"

read -r PA PB < <(free_ports 2)
new_secret "$T/secret"
cat >"$T/omni.yaml" <<EOF
secret_file: $T/secret
readers: 0
wait_ms: 8000
nodes:
  a: { addr: 127.0.0.1:$PA, stages: ["0"] }
  b: { addr: 127.0.0.1:$PB, stages: ["1"] }
EOF
start_node a "config=$T/omni.yaml,node=a,pool=host:320MiB"
start_node b "config=$T/omni.yaml,node=b,pool=host:96MiB"
up() { [ "$(health b "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
ok "b sees a" wait_until 10 up

used_b() { health b "d['pool']['used'] >> 20"; }
copies_b() { health b "d['pool']['copies'] >> 20"; }
pulled_mib() { echo $(( $(stat_of b bytes_pulled) >> 20 )); }
for k in 1 2 3; do
	head -c 40M /dev/urandom >"$T/k$k"
	cp "$T/k$k" "$T/a/0/1/k$k"
done

# --- unused copies make room, least recently opened first ------------------
ok "b reads a's first 40 MiB object" cmp "$T/k1" "$T/b/0/1/k1"
ok "... and its second" cmp "$T/k2" "$T/b/0/1/k2"
is "$(used_b)" 80 "b's 96 MiB pool holds both copies (readers: 0 keeps the objects)"
is "$(copies_b)" 80 "... and .omni/health says that 80 MiB of it are copies"
ok "... as does .omni/metrics" grep -qx "omnifs_pool_copies_bytes $((80 << 20))" "$T/b/.omni/metrics"
ok "k1 read again (opened last now)" cmp "$T/k1" "$T/b/0/1/k1"
is "$(pulled_mib)" 80 "... from b's copy, with no pull"
ok "a third 40 MiB object, with 16 MiB free, reads too" cmp "$T/k3" "$T/b/0/1/k3"
is "$(stat_of b evicted)" 1 "... by dropping one copy"
is "$(used_b)" 80 "... so b's pool holds two copies still"
ok "k1 reads once more" cmp "$T/k1" "$T/b/0/1/k1"
is "$(pulled_mib)" 120 "... without a pull: the copy dropped was k2's, the least recently opened"
ok "k2 reads again" cmp "$T/k2" "$T/b/0/1/k2"
is "$(pulled_mib)" 160 "... pulled once more"
is "$(ls "$T/b/0/1" | tr '\n' ' ')" "k1 k2 k3 " "a dropped copy's object stays listed on b"

# --- copies in use stay -----------------------------------------------------
# hold FILE...: opens each FILE, reads its first MiB, says so in $T/held,
# waits for $T/go, then reads on and says whether each matched its original.
hold() {
	$PY - "$T" "$@" <<'PYEOF' &
import os, sys, time
t, names = sys.argv[1], sys.argv[2:]
fds = [os.open(t + "/b/0/1/" + n, os.O_RDONLY) for n in names]
heads = [os.read(fd, 1 << 20) for fd in fds]
open(t + "/held", "w").close()
end = time.time() + 30
while not os.path.exists(t + "/go") and time.time() < end:
    time.sleep(0.01)
for n, fd, head in zip(names, fds, heads):
    data = head
    while (b := os.read(fd, 1 << 20)):
        data += b
    os.close(fd)
    print(n, "same" if data == open(t + "/" + n, "rb").read() else "differs")
PYEOF
	HOLDER=$!
}
release() { touch "$T/go"; wait "$HOLDER"; rm -f "$T/held" "$T/go"; }

hold k2 k1 >"$T/held.out"
ok "a reader holds k2 and k1 open mid-read" wait_until 10 test -e "$T/held"
head -c 40M /dev/urandom >"$T/k4"
cp "$T/k4" "$T/a/0/1/k4"
pulled=$(pulled_mib)
ok "k4, with both copies in use, does not fit: it streams through the 16 MiB free" \
	cmp "$T/k4" "$T/b/0/1/k4"
ok "... b's log says why, in one line" grep -q "0/1/k4: its 41943040 bytes do not fit this node's pool (16777216 free, counting unused copies): streamed to its readers" "$T/b.log"
is "$(stat_of b evicted)" 2 "... and no copy in use was dropped for it"
is "$(used_b)" 80 "... nor does it keep any of the pool"
ok "k4 reads so again" cmp "$T/k4" "$T/b/0/1/k4"
is "$(pulled_mib)" $((pulled + 80)) "... pulled each time: nothing of it stays"
release
is "$(cat "$T/held.out" | tr '\n' ' ')" "k2 same k1 same " "the held readers read their copies whole and right"
ok "k3 reads once they are closed" cmp "$T/k3" "$T/b/0/1/k3"

hold k3 >"$T/held.out"
ok "a reader holds k3 open mid-read" wait_until 10 test -e "$T/held"
ok "k2 reads, dropping the copy nobody uses" cmp "$T/k2" "$T/b/0/1/k2"
release
is "$(cat "$T/held.out")" "k3 same" "the held copy was kept: its reader read it whole and right"

# --- larger than the pool: streamed, nothing kept ------------------------------
head -c 128M /dev/urandom >"$T/big"
cp "$T/big" "$T/a/0/1/big"
evicted=$(stat_of b evicted)
ok "an object larger than b's whole pool reads right on b (streamed)" cmp "$T/big" "$T/b/0/1/big"
is "$(stat_of b evicted)" "$evicted" "... its window fit in what was free: no copy was dropped for it"
is "$(used_b)" 80 "... and it left nothing in b's pool"
ok "a reads its own big object still" cmp "$T/big" "$T/a/0/1/big"

# --- a write on the reader's node ---------------------------------------------
head -c 90M /dev/urandom >"$T/mine"
ok "b writes 90 MiB of its own into a pool full of copies" cp "$T/mine" "$T/b/1/2/mine"
ok "... and reads it back" cmp "$T/mine" "$T/b/1/2/mine"
is "$(stat_of b evicted)" $((evicted + 2)) "... the two copies made room"
is "$(stat_of b aborted)" 0 "... and nothing was aborted"
is "$(copies_b)" 0 "... and b's pool holds no copies now"

# --- a pool held by objects of its own -------------------------------------------
free_b() { health b "d['pool']['free'] >> 20"; }
is "$(free_b)" 6 "b's pool has 6 MiB free"
ok "a large object streams through a window of what is free" cmp "$T/big" "$T/b/0/1/big"
ok "... as does one whose copy cannot fit" cmp "$T/k1" "$T/b/0/1/k1"
is "$(free_b)" 6 "... and they leave the pool as it was"
head -c 3M /dev/urandom >"$T/mine2"
ok "b writes 3 MiB more of its own" cp "$T/mine2" "$T/b/1/2/mine2"
# No room for a window of two pieces: up to a quarter of the pool's size
# (24 MiB, six windows of 4 MiB) is taken beside it, then ENOSPC.
ok "an object whose window of two pieces cannot fit reads through one beside the pool" \
	cmp "$T/k2" "$T/b/0/1/k2"
is "$(stat_of b windows_outside_pool)" 1 "... which .omni/stats counts (windows_outside_pool)"
is "$(PYTHONPATH="$SRC/contrib/python" $SYSPY -c 'import sys, omnifs
sys.stdout.buffer.write(omnifs.Mount(sys.argv[1]).get("0", "1", "k2", timeout=5))' "$T/b" | cmp - "$T/k2" && echo same)" \
	same "... and omnifs.Mount.get, which reads it (no window in the pool to copy out of)"
# Six readers hold them all; a seventh open waits for one of them (until
# its wait_ms, then ENOSPC), and is served as soon as one closes.
$PY - "$T/b" "$T/k2" >"$T/seven.out" <<'PYEOF2'
import errno, json, os, sys, threading, time
M, want = sys.argv[1], open(sys.argv[2], "rb").read()
def stat(name):
    return int([l.split()[1] for l in open(M + "/.omni/stats") if l.startswith(name + ":")][0])
fs = [open(M + "/0/1/k2", "rb", buffering=0) for _ in range(6)]
assert all(f.read(1) for f in fs)
print(json.load(open(M + "/.omni/health"))["pool"]["outside"] >> 20)
t0 = time.monotonic()
os.setxattr(M, "user.omni.wait_ms", b"700")     # its own deadline
try:
    open(M + "/0/1/k2", "rb")
except OSError as e:
    print(errno.errorcode[e.errno], 0.6 < time.monotonic() - t0 < 5)
got = []
th = threading.Thread(target=lambda: got.append(open(M + "/0/1/k2", "rb").read()), daemon=True)
w0, end = stat("waiters"), time.monotonic() + 10
th.start()
while stat("waiters") == w0 and time.monotonic() < end:
    time.sleep(0.01)
print("waits" if stat("waiters") > w0 else "does not wait")
fs.pop().close()
th.join(30)
print("served" if got == [want] else "not served")
[f.close() for f in fs]
PYEOF2
is "$(cat "$T/seven.out")" "24
ENOSPC True
waits
served" "six readers at once have their windows beside it (24 MiB); a seventh waits until its wait_ms, then ENOSPC; one that waits is served when one of the six closes"
is "$(stat_of b aborted)" 0 "... and nothing of b's own was dropped for them"
is "$(stat_of b errors)" 1 "... the refused one is counted in errors"
ok "... and b's log says why, in one line" grep -q "0/1/k2: no room for a window to stream it to a reader, in the pool or beside it (25165824 bytes beside it, a quarter of the pool's size): ENOSPC" "$T/b.log"
is "$(health b "d['pool']['outside']")" 0 "... their closes give the memory back"
ok "... which give them back: it reads again" cmp "$T/k2" "$T/b/0/1/k2"
is "$(free_b)" 3 "... and b's pool is as it was"
# window_wait KEY WAIT_MS CMD...: six readers of KEY hold every window
# beside b's pool, a seventh open (its own wait WAIT_MS) waits for one,
# then CMD runs: prints the seventh's answer, the seconds it took after
# CMD, and how the six reads ended; cut at 60 s (then it prints nothing).
window_wait() {
	timeout 60 $PY - "$T/b" "$@" <<'PYEOF'
import errno, os, subprocess, sys, threading, time
M, key, wait_ms, cmd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def stat(name):
    return int([l.split()[1] for l in open(M + "/.omni/stats") if l.startswith(name + ":")][0])
def outcome(read):
    try:
        read()
        return "read"
    except OSError as e:
        return errno.errorcode[e.errno]
def read_on(fd):
    while os.read(fd, 1 << 20):
        pass
fds = [os.open(M + "/0/1/" + key, os.O_RDONLY) for _ in range(6)]
assert all(os.read(fd, 1 << 20) for fd in fds)
got = []
def seventh():
    os.setxattr(M, "user.omni.wait_ms", wait_ms.encode())
    got.append(outcome(lambda: open(M + "/0/1/" + key, "rb").read()))
w0, end = stat("waiters"), time.monotonic() + 10
th = threading.Thread(target=seventh, daemon=True)
th.start()
while stat("waiters") == w0 and time.monotonic() < end:
    time.sleep(0.01)
t = time.monotonic()
subprocess.run(cmd, check=True)
th.join(30)
print(got[0] if got else "still waiting", round(time.monotonic() - t, 1))
print(*sorted(set(outcome(lambda: read_on(fd)) for fd in fds)))
[os.close(fd) for fd in fds]
PYEOF
}
# An open waiting for a window of an object that is removed then waits
# for the key's next object, as an open made after the rm would.
read -r -d '' res < <(window_wait k1 1500 rm "$T/b/0/1/k1")
set -- $res
is "$1" ENOENT "an open waiting for a window of an object that is rm'd: ENOENT at its deadline (not ENOSPC)"
ok "... not before it" awk -v s="$2" 'BEGIN { exit !(s >= 1.0 && s < 10) }'
is "$3" read "... and the six that had it open read it to its end"
is "$(health b "d['pool']['outside']")" 0 "... then give their windows back"

rm "$T/b/1/2/mine2"
head -c 2M /dev/urandom >"$T/mine2"
cp "$T/mine2" "$T/b/1/2/mine2"
# Reads of a piece's length that start mid-piece need two pieces at once
# (a window of one waited for ever: the reader runs in the background, and
# a wait for it that runs out ends the test, whose cleanup frees it).
$PY - "$T" >"$T/across.out" <<'PYEOF' &
import sys
T = sys.argv[1]
want = open(T + "/k2", "rb").read()
with open(T + "/b/0/1/k2", "rb", buffering=0) as f:
    got = bytearray()
    f.read(12345)
    got += want[:12345]
    while (b := f.read(2 << 20)):
        got += b
print("same" if got == want else "differs")
PYEOF
timeout 60 tail --pid=$! -f /dev/null
is "$(cat "$T/across.out")" same "... with 4 MiB free it streams through two pieces, reads across them too"

# Windows beside the pool are given back when their owner dies mid-read,
# and an open waiting for one fails then, as a new open of the key would.
head -c 2M /dev/urandom >"$T/mine3"
cp "$T/mine3" "$T/b/1/2/mine3"
cat >"$T/cut.sh" <<EOF
$PY -c "import json; print(json.load(open('$T/b/.omni/health'))['pool']['outside'] >> 20)" >"$T/outside.out"
kill -9 ${NODE_PID[a]}
EOF
disown "${NODE_PID[a]}"    # killed by cut.sh: no "Killed" from bash
read -r -d '' res < <(window_wait k3 8000 bash "$T/cut.sh")
set -- $res
is "$(cat "$T/outside.out")" 24 "six reads with 2 MiB free in b's pool hold 24 MiB of windows beside it"
is "$3" EIO "... their owner killed mid-read: EIO"
is "$1" EIO "... and a seventh open, waiting for a window, fails with EIO too"
ok "... at once, not at its wait_ms (8 s)" awk -v s="$2" 'BEGIN { exit !(s < 5) }'
is "$(health b "d['pool']['outside']")" 0 "... and the windows are given back"

done_testing
