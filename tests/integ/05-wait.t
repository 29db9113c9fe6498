#!/bin/bash
# Waiting opens (SPEC §4.3): an open of a key not yet published waits up to
# wait_ms, per edge; a waiter can be interrupted or killed at any time.
. "$(dirname "$0")/../lib.sh"

printf 'wait_ms: 20000\nedges:\n  "fast->x": { wait_ms: 300 }\n  "quick->x": { wait_ms: 30 }\n' >"$T/c.yaml"
start_node a "pool=host:32M,config=$T/c.yaml"
export M=$T/a
waiters() { stat_of a waiters; }
waiting() { test "$(waiters)" = "$1"; }   # polled: re-reads each time

cat "$M/p/q/k1" >"$T/k1.out" 2>&1 &
r=$!
ok "a reader waits for a key not yet written" wait_until 5 waiting 1
echo hello >"$M/p/q/k1"
ok "publishing answers it" wait_until 5 all_gone $r
wait "$r"; is "$?" "0" "the reader exits 0"
is "$(cat "$T/k1.out")" "hello" "and read every byte"
is "$(waiters)" "0" "no waiters left"

# openat2(2) keeps its flags in the caller's memory (struct open_how), not
# in a register as open(2) and openat(2) do: a reader that waits and a
# writer that creates are told apart through it all the same.
cat >"$T/oa2.py" <<'PYEOF'
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class How(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]
def openat2(path, flags):
    how = How(flags, 0o644 if flags & os.O_CREAT else 0, 0)      # else EINVAL
    fd = libc.syscall(ctypes.c_long(437), ctypes.c_long(-100), path.encode(),    # SYS_openat2, AT_FDCWD
                      ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "openat2", path)
    return fd
path, how = sys.argv[1], sys.argv[2]
try:
    if how == "read":
        fd = openat2(path, os.O_RDONLY)
        sys.stdout.write(os.read(fd, 100).decode())
    else:
        fd = openat2(path, os.O_WRONLY | os.O_CREAT | (os.O_EXCL if how == "excl" else 0))
        os.write(fd, b"via openat2")
    os.close(fd)
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
PYEOF
$PY "$T/oa2.py" "$M/p/q/oa2" read >"$T/oa2.out" 2>&1 &
r=$!
ok "openat2: a reader waits for a key not yet written" wait_until 5 waiting 1
is "$(timeout 5 $PY "$T/oa2.py" "$M/p/q/oa2" create)" "" "openat2: a writer's O_CREAT creates it at once"
ok "and its publish answers the waiting reader" wait_until 5 all_gone $r
is "$(cat "$T/oa2.out")" "via openat2" "which read every byte"
is "$(timeout 5 $PY "$T/oa2.py" "$M/p/q/oa2" excl)" "" "openat2: O_EXCL of the key its read consumed creates it"
is "$(timeout 5 $PY "$T/oa2.py" "$M/p/q/oa2" excl)" "EEXIST" "and again, now that it is published: EEXIST"
rm -f "$M/p/q/oa2"
is "$(waiters)" "0" "no waiters left"

t0=$(date +%s%N)
is "$(pyerr "open(M + '/fast/x/never', 'rb')")" "ENOENT" "wait_ms runs out: ENOENT"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
ok "after the edge's 300 ms wait_ms (took $ms ms)" test "$ms" -ge 290 -a "$ms" -lt 3000
ok "the timeout is counted" test "$(stat_of a wait_timeouts)" = 1

# three readers of one key, readers=0 so all of them read it
pids=
for i in 1 2 3; do cat "$M/p/q/many" >"$T/many.$i" & pids="$pids $!"; done
ok "three readers wait on one key" wait_until 5 waiting 3
$PY -c "
import os
f = open('$M/p/q/many', 'wb'); os.setxattr('$M/p/q/many', 'user.omni.readers', b'0'); f.write(b'm' * 100000); f.close()"
ok "all three are answered" wait_until 5 all_gone $pids
ok "all three read all bytes" sh -c "for i in 1 2 3; do [ \$(wc -c <'$T/many.'\$i) = 100000 ] || exit 1; done"

# interrupting or killing a waiting reader answers its open at once
$PY - "$M/p/q/int" <<'PYEOF' >/dev/null 2>&1 &
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)   # jobs start with it ignored
open(sys.argv[1], "rb")
PYEOF
r=$!
wait_until 5 waiting 1
kill -INT "$r"
ok "SIGINT ends a waiting reader promptly" wait_until 3 all_gone $r
ok "and its wait is withdrawn" wait_until 3 waiting 0
$PY -c "open('$M/p/q/kill', 'rb')" 2>/dev/null &
r=$!
disown "$r"     # no "Killed" from bash
wait_until 5 waiting 1
kill -KILL "$r"
ok "SIGKILL ends a waiting reader promptly" wait_until 3 all_gone $r
ok "and its wait is withdrawn" wait_until 3 waiting 0
$PY - "$M/p/q/sig" <<'PYEOF' >"$T/sig.out" 2>&1 &
import signal, sys
signal.signal(signal.SIGUSR1, lambda *a: None)   # handled: the open restarts
print(open(sys.argv[1], "rb").read().decode())
PYEOF
r=$!
wait_until 5 waiting 1
waits=$(stat_of a waits)
kill -USR1 "$r"
ok "a handled signal restarts the open, which waits again" \
	wait_until 3 sh -c "[ \$(awk '/^waits:/ { print \$2 }' '$M/.omni/stats') = $((waits + 1)) ]"
ok "still one waiter" waiting 1
echo after-signal >"$M/p/q/sig"
wait "$r"
is "$(cat "$T/sig.out")" "after-signal" "and is answered by the publish"

is "$(pyerr "os.open(M + '/p/q/rw', os.O_RDWR)")" "ENOENT" "O_RDWR of a missing key does not wait"
is "$(pyerr "os.open(M + '/p/q/dir', os.O_RDONLY | os.O_DIRECTORY)")" "ENOENT" "O_DIRECTORY of a missing key does not wait"

# The daemon can pick a lookup up before its caller sleeps in it, when
# /proc shows no syscall yet: every plain open must still wait.
early=$($PY - "$M/quick/x" <<'PYEOF'
import sys, time
early = 0
for i in range(200):
    t = time.monotonic()
    try:
        open(f"{sys.argv[1]}/never{i}", "rb")
    except FileNotFoundError:
        pass
    early += time.monotonic() - t < 0.02
print(early)
PYEOF
)
is "$early" 0 "200 opens of missing keys each waited the edge's 30 ms"

# A thread arms its own wait for its next open (README "Waiting"): here
# 300 ms on an edge that waits 20 s, for a key and for a view alike; one
# open takes it, the next waits the edge's wait_ms again.
opens() {       # opens ARM-MS PATH...: per open "short" (< 150 ms), "0.3" (< 2 s) or the time
	$PY - "$M" "$@" <<'PYEOF'
import os, sys, time
m, arm = sys.argv[1], sys.argv[2].encode()
if arm != b"-":
    os.setxattr(m, "user.omni.wait_ms", arm)
for p in sys.argv[3:]:
    t = time.monotonic()
    try:
        open(p, "rb")
    except FileNotFoundError:
        pass
    took = time.monotonic() - t
    print("short" if took < 0.15 else "0.3" if took < 2 else "%.1f" % took, end=" ")
PYEOF
}
is "$(opens 300 "$M/p/q/armed")" "0.3 " "an armed open of a key gives up after the thread's 300 ms, not the edge's 20 s"
is "$(opens 300 "$M/p/q/view.rank1of2")" "0.3 " "... and of a view waiting for its shards"
is "$(opens 10 "$M/fast/x/first" "$M/fast/x/second")" "short 0.3 " \
   "one open takes the arming: the next waits its edge's 300 ms"
for bad in 0 -1 x 1.5 99999999999 ""; do
	is "$(pyerr "os.setxattr(M, 'user.omni.wait_ms', b'$bad')")" EINVAL "wait_ms '$bad' armed: EINVAL"
done
# A writer's open of a key that a reader on this node waits for: the kernel
# keeps the reader's name and asks whether it still stands; a yes for an
# O_CREAT open lets that open create (one LOOKUP, not two: README "What
# happens, exactly").  O_EXCL and plain O_WRONLY keep their meaning.
writer_lookups() {      # writer_lookups KEY FLAGS: LOOKUPs of an open, then write and close it
	$PY - "$M" "$1" "$2" <<'PYEOF'
import os, sys
m, key, flags = sys.argv[1], sys.argv[2], eval(sys.argv[3], vars(os))
path = m + "/p/q/" + key
def lookups():
    with open(m + "/.omni/stats") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("lookups: "))
a = lookups(); b = lookups()        # what reading the counter costs
fd = os.open(path, flags)
c = lookups()
os.write(fd, key.encode())
os.setxattr(path, "user.omni.readers", b"0")    # the reader's read leaves it
os.close(fd)
# SPEC 4.2: published before close returns, though the reader is woken after
seen = os.stat(path).st_size == len(key) and os.getxattr(path, "user.omni.state") == b"published"
print(c - b - (b - a), "published" if seen else "not-yet")
os.remove(path)
PYEOF
}
for how in "O_WRONLY|O_CREAT|O_TRUNC" "O_WRONLY|O_CREAT" "O_WRONLY|O_CREAT|O_EXCL"; do
	k=w$(echo "$how" | tr -dc 'A-Z' | tr 'A-Z' 'a-z')
	cat "$M/p/q/$k" >"$T/$k.out" 2>&1 &
	r=$!
	wait_until 5 waiting 1
	n=$(writer_lookups "$k" "$how")
	if [ "$how" = "O_WRONLY|O_CREAT|O_EXCL" ]; then
		is "$n" "2 published" "$how of a key a reader waits for: created (the kernel asks twice)"
	else
		is "$n" "1 published" "$how of a key a reader waits for: created after one LOOKUP"
	fi
	ok "... and the reader has it" wait_until 5 all_gone $r
	wait "$r"
	is "$(cat "$T/$k.out")" "$k" "... every byte"
done
cat "$M/p/q/rdcreat" >"$T/rdcreat.out" 2>&1 &
r=$!
wait_until 5 waiting 1
is "$(timeout 5 $PY -c "import os; os.close(os.open('$M/p/q/rdcreat', os.O_RDONLY | os.O_CREAT)); print('OK')")" \
   OK "O_RDONLY|O_CREAT of a key a reader waits for creates it, as of any key"
ok "... and the reader has it" wait_until 5 all_gone $r
wait "$r"
is "$(wc -c <"$T/rdcreat.out")" 0 "... empty"
# Many at once: the daemon remembers one creating thread at a time, and
# the others' opens ask /proc instead.
pids=
for i in $(seq 20); do cat "$M/p/q/par$i" >"$T/par$i.out" & pids="$pids $!"; done
ok "20 readers wait" wait_until 10 waiting 20
$PY - "$M" <<'PYEOF'
import os, sys, threading
def put(i):
    with open("%s/p/q/par%d" % (sys.argv[1], i), "wb") as f:
        f.write(b"%d" % i * 1000)
ts = [threading.Thread(target=put, args=(i,)) for i in range(1, 21)]
for t in ts: t.start()
for t in ts: t.join()
PYEOF
ok "20 writers at once, each to a key its reader waits for: all answered" wait_until 10 all_gone $pids
for p in $pids; do wait "$p"; done
is "$($PY -c "import sys; print(sum(open('$T/par%d.out' % i, 'rb').read() != b'%d' % i * 1000 for i in range(1, 21)))")" 0 \
   "... each with its own bytes"
cat "$M/p/q/nocreat" >/dev/null 2>&1 &
r=$!
wait_until 5 waiting 1
is "$(pyerr "os.open(M + '/p/q/nocreat', os.O_WRONLY)")" "ENOENT" "O_WRONLY without O_CREAT of a key a reader waits for: ENOENT"
ok "... and the reader still waits" waiting 1
echo done >"$M/p/q/nocreat"
ok "until a writer comes" wait_until 5 all_gone $r
wait "$r"
done_testing
