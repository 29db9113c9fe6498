#!/bin/bash
# 10,000 concurrent waiting opens (SPEC §4.3): none holds a daemon thread,
# and every one is answered once its key is published.
. "$(dirname "$0")/../lib.sh"

N=${OMNIFS_WAITERS:-10000}
start_node a "pool=host:256M,wait_ms=300000"
export M=$T/a
"$B/tools/waiters" "$M/0/1" "$N" >"$T/waiters.out" 2>&1 &
w=$!
ok "$N opens are waiting" wait_until 120 sh -c "grep -qx 'waiters: $N' '$M/.omni/stats'"
threads=$(awk '/^Threads:/ { print $2 }' "/proc/${NODE_PID[a]}/status")
ok "the daemon runs $threads threads (< 64) while they wait" test "$threads" -lt 64
ok "health shows them" sh -c "grep -q '\"waiters\":$N' '$M/.omni/health'"
$PY -c "
import os
for i in range($N):
    with open('$M/0/1/k%d' % i, 'wb') as f:
        f.write(b'v%d' % i)"
is "$?" "0" "$N keys published"
ok "every waiting open is answered" wait_until 120 all_gone "$w"
wait "$w"; rc=$?
is "$rc" "0" "every reader got its own bytes: $(head -1 "$T/waiters.out")"
is "$(stat_of a waiters)" "0" "no waiters left"
is "$(stat_of a consumed)" "$N" "all $N consumed"
threads=$(awk '/^Threads:/ { print $2 }' "/proc/${NODE_PID[a]}/status")
ok "the daemon still runs $threads threads (< 64)" test "$threads" -lt 64
done_testing
