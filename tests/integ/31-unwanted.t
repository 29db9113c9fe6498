#!/bin/bash
# 31-unwanted.t - a pull's bytes do not stand in the way of what a node
# wants: a reply on the connection a large pull's bytes come back on goes
# out between two of its frames, not after the last (xport.c, conn_sendv).
. "$(dirname "$0")/../lib.sh"

SIZE=$((32 << 20))
loopback_cluster 8000 a b
# a serves each DATA frame 16 KiB at a time, 1 ms apart: a pull of SIZE
# takes some 2 s, long enough to act under.
OMNIFS_TEST_TRICKLE_MS=1 start_node a "config=$T/omni.yaml,node=a,pool=host:128MiB"
start_node b "config=$T/omni.yaml,node=b,pool=host:128MiB"
peers_up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
ok "a and b see each other" wait_until 10 peers_up b
served() { stat_of a bytes_served; }
head -c "$SIZE" /dev/urandom >"$T/x"

# --- a reply goes between a pull's frames ---------------------------------
# b's listing of a's edge 0/2 (which b does not host: a LIST to a) is
# answered on the connection k5's bytes come back on, while they come:
# after the frame a is sending (1 MiB, some 70 ms here), not after the
# pull's end or a run of its frames (xport.c, conn_sendv).
mkdir -p "$T/a/0/2" && echo hi >"$T/a/0/2/there"
cp "$T/x" "$T/a/0/1/k5"
ok "b hears of k5" wait_until 10 test -e "$T/b/0/1/k5"
exec 7<"$T/b/0/1/k5"
s0=$(served)
ok "b lists a's edge 0/2 while k5 comes" test "$(ls "$T/b/0/2")" = there
s=$(( $(served) - s0 ))
ok "... answered between two of its frames ($s bytes served meanwhile)" test "$s" -le $((3 << 20))
ok "... and k5 reads byte-exact" cmp - "$T/x" <&7
exec 7<&-


done_testing
