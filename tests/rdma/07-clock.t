#!/bin/bash
# 07-clock.t - the wall clock stepped under a running cluster (SPEC §7):
# NTP correcting a VM's clock, or an admin's date -s, moves the wall
# clock by minutes or hours at once.  No wait of omnifs counts on it: a
# step back of an hour takes no peer down, stops no read by RDMA or TCP,
# and stretches no open's wait; a step forward ends none early.  This is
# in the guest's suite because only there is the clock the test's own to
# step.
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1"' c:'"2"' <<EOF
pool: host:64MiB
wait_ms: 20000
edges:
  "0->9": { wait_ms: 3000 }
EOF
node a
node b
node c transport=tcp
ok "b reads a by rdma" wait_until 20 peer_is b a rdma
ok "c reads a by tcp" wait_until 20 peer_is c a tcp

step_clock() { $PY -c "import time; time.clock_settime(time.CLOCK_REALTIME, time.time() + $1)"; }
STEPPED=0
unstep() { [ "$STEPPED" = 0 ] || step_clock $((-STEPPED)); }
CLEANUP_HOOKS+=(unstep)
downs() { cat "$T"/[abc].log | grep -c ") down"; }

head -c 3000000 /dev/urandom >"$T/y"
cp "$T/y" "$T/a/0/1/before"
cp "$T/y" "$T/a/0/2/before"
ok "b reads a's object" cmp "$T/y" "$T/b/0/1/before"
ok "c reads a's object" cmp "$T/y" "$T/c/0/2/before"
d0=$(downs)

# --- an hour back --------------------------------------------------------------
read_later "$T/b/0/1/during" "$T/y"         # waits in open across the step
ok "a reader on b waits for 0/1/during" wait_until 10 grep -q "^waiters: 1$" "$T/b/.omni/stats"
step_clock -3600 && STEPPED=-3600
# Twice dead_ms (3 s): a node that pinged its peers by the wall clock would
# send nothing for the hour, and each would see the others down by now.
sleep 7         # not a wait for anything: the time the fault needs to show
is "$(downs)" "$d0" "an hour back: no node saw a peer down"
ok "... b sees a up, by rdma" peer_is b a rdma
ok "... c sees a up, by tcp" peer_is c a tcp
cp "$T/y" "$T/a/0/1/during"
wait "$LATE"
is "$(cat "$T/late.out")" same "... the reader waiting on b since before the step reads a's new object"
cp "$T/y" "$T/a/0/2/during"
ok "... c reads a's new object over tcp" timeout 10 cmp "$T/y" "$T/c/0/2/during"
start=$SECONDS
is "$(pyerr "open('$T/b/0/9/never').read()")" ENOENT "... an open of a key nobody writes (wait_ms 3 s) ends ENOENT"
ok "... within its wait, not the hour" test $((SECONDS - start)) -lt 10

# --- and forward again -----------------------------------------------------------
read_later "$T/b/0/1/after" "$T/y"
ok "a reader on b waits for 0/1/after" wait_until 10 grep -q "^waiters: 1$" "$T/b/.omni/stats"
step_clock 3600 && STEPPED=0
sleep 4         # as above: a wait ended early would have ended by now
is "$(stat_of b waiters)" 1 "an hour forward: b's reader still waits (wait_ms 20 s)"
cp "$T/y" "$T/a/0/1/after"
wait "$LATE"
is "$(cat "$T/late.out")" same "... and reads a's object when it comes"
is "$(downs)" "$d0" "... and no node saw a peer down"

done_testing
