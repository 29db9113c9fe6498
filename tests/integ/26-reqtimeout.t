#!/bin/bash
# 26-reqtimeout.t - the kernel's FUSE request timeout (Linux 6.14 on): an
# admin's /proc/sys/fs/fuse/default_request_timeout makes the kernel abort
# a mount whose daemon leaves a request unanswered that long, and a
# waiting open is such a request.  The daemon reads it at start, says so,
# and ends every wait before it (ENOENT, as a wait_ms does), so the mount
# and its objects survive; the Python module waits again for what is left
# of its own timeout.  The sysctl is the machine's: it is set only while
# the daemon mounts (the kernel reads it then) and put back at once.
. "$(dirname "$0")/../lib.sh"

SYSCTL=/proc/sys/fs/fuse/default_request_timeout
[ -w "$SYSCTL" ] || { skip "no $SYSCTL here (Linux before 6.14)"; done_testing; exit; }
OLD=$(cat "$SYSCTL")
put_back() { echo "$OLD" >"$SYSCTL"; }
CLEANUP_HOOKS+=(put_back)
echo 15 >"$SYSCTL"
start_node a pool=host:64MiB,node=a,wait_ms=60000
stat "$T/a/.omni" >/dev/null    # answered after INIT, where the kernel reads it
put_back
is "$(cat "$SYSCTL")" "$OLD" "the sysctl is put back once the daemon has mounted"
ok "the daemon says how long its opens may wait" grep -qx "omnifs: the kernel aborts this mount if a request waits 15 s for its answer (/proc/sys/fs/fuse/default_request_timeout): opens wait at most 13 s" "$T/a.log"

start=$SECONDS
is "$(pyerr "open('$T/a/0/1/never')")" ENOENT "an open of a key nobody writes (wait_ms 60 s) ends ENOENT"
took=$((SECONDS - start))
ok "... after 13 s, before the kernel's 15 (took $took s)" test "$took" -ge 12 -a "$took" -le 14
ok "the mount is alive after it" sh -c "echo alive >'$T/a/0/1/k' && [ \"\$(cat '$T/a/0/1/k')\" = alive ]"
ok "... and its daemon too" kill -0 "${NODE_PID[a]}"

PYTHONPATH="$SRC/contrib/python" $PY - "$T/a" >"$T/py.out" 2>&1 <<'PYEOF'
import sys, threading, time
import omnifs

m = omnifs.Mount(sys.argv[1])
later = threading.Timer(16, m.put, ("0", "1", "late", b"x" * 100))
later.start()
t = time.monotonic()
got = m.get("0", "1", "late", timeout=25)
print("same" if got == b"x" * 100 else "differs", "after %d s" % round(time.monotonic() - t))
PYEOF
is "$(cat "$T/py.out")" "same after 16 s" "Python's get(timeout=25) of a key put 16 s later waits across the daemon's 13 s"
ok "... and the mount is alive still" kill -0 "${NODE_PID[a]}"

done_testing
