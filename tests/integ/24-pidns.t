#!/bin/bash
# 24-pidns.t - a daemon in a pid namespace of its own, its users outside
# it (README, "Pid namespaces"), as a container without hostPID runs it:
# FUSE gives their requests pid 0, so the daemon cannot read their /proc.
# It says so once; a shell's redirection still writes the whole object
# (published at the release, not at the first close); an open of a
# missing key is ENOENT at once and arming a wait ESRCH; and the Python
# module's get still waits for a key put later, small or not, and gives
# up when asked.
. "$(dirname "$0")/../lib.sh"

unshare -p -f true 2>/dev/null || { skip "cannot make a pid namespace here"; done_testing; exit; }
mkdir -p "$T/a"
unshare -p -f --kill-child "$B/omnifs" -f -o pool=host:64MiB,node=a,wait_ms=5000 "$T/a" \
	>"$T/a.log" 2>&1 &
NODE_PID[a]=$!
wait_until "$MOUNT_WAIT_S" is_mounted "$T/a" || { cat "$T/a.log"; bail "a did not mount"; }

echo hello >"$T/a/0/1/sh"
# Published at the release, which the kernel sends after close returns.
ok "a shell's redirection (open, dup2, close, write, close) publishes the object" \
   wait_until 5 test -e "$T/a/0/1/sh"
is "$(cat "$T/a/0/1/sh")" hello "... whole"
is "$(grep -c "outside this daemon's pid namespace (pid 0)" "$T/a.log")" 1 \
   "the daemon says once that it cannot see its callers, and why"
start=$SECONDS
is "$(pyerr "open('$T/a/0/1/missing')")" ENOENT "an open of a missing key: ENOENT"
ok "... at once, not after wait_ms (5 s)" test $((SECONDS - start)) -lt 4
is "$(pyerr "os.setxattr('$T/a', 'user.omni.wait_ms', b'1000')")" ESRCH "arming a wait: ESRCH"

PYTHONPATH="$SRC/contrib/python" $PY - "$T/a" >"$T/py.out" 2>&1 <<'PYEOF'
import sys, threading, time
import omnifs

m = omnifs.Mount(sys.argv[1])
for name, size in (("small", 100), ("large", 300 << 10)):
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    later = threading.Timer(0.5, m.put, ("0", "1", name, data))
    later.start()
    t = time.monotonic()
    got = m.get("0", "1", name, timeout=5)
    print(name, "same" if got == data else "differs", "waited" if time.monotonic() - t >= 0.4 else "early")
    later.join()
t = time.monotonic()
try:
    m.get("0", "1", "never", timeout=0.5)
    print("never came back")
except FileNotFoundError:
    took = time.monotonic() - t
    print("never", "in time" if 0.5 <= took < 0.55 + 0.5 else "took %.2f s" % took)
PYEOF
is "$(sed -n 1p "$T/py.out")" "small same waited" "Python's get of 100 B put 0.5 s later waits for it"
is "$(sed -n 2p "$T/py.out")" "large same waited" "... and of 300 KiB"
is "$(sed -n 3p "$T/py.out")" "never in time" "... and gives up when its timeout (0.5 s) is out"
[ "$(wc -l <"$T/py.out")" = 3 ] || diag "$(cat "$T/py.out")"

done_testing
