#!/bin/bash
# 20-stale.t - a listing never brings back an object its owner said is
# gone (SPEC §4.5, §4.7): the GONE and a listing answered just before it
# travel on two connections, and the listing may come second.
. "$(dirname "$0")/../lib.sh"

loopback_cluster 4000 a b
up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
start_node a "config=$T/omni.yaml,node=a,pool=host:64MiB"
OMNIFS_TEST_LIST_DELAY_MS=1000 start_node b "config=$T/omni.yaml,node=b,pool=host:64MiB"
both_up() { up a && up b; }
ok "a and b are up" wait_until 10 both_up

echo gone-soon >"$T/a/0/9/x"            # b hosts 1, not 9: b hears of it by listing
ls "$T/b/0/9" >"$T/ls1" &
LS=$!
ok "b asked a for 0/9 and holds a's answer" wait_until 5 grep -q "holding a listing" "$T/b.log"
is "$(cat "$T/a/0/9/x")" gone-soon "a's reader consumes x meanwhile"
wait "$LS"
is "$(cat "$T/ls1")" "" "the late listing does not show x on b"
is "$(ls "$T/b/0/9")" "" "... nor does the next ls"
is "$(M=$T/b pyerr "os.stat(M + '/0/9/x')")" ENOENT "and stat on b says it is not there"

# --- a peer's slow answer holds up only the request that waits for it -----
echo local >"$T/b/1/9/y"
held() { [ "$(grep -c "holding a listing" "$T/b.log")" -gt "$1" ]; }
n0=$(grep -c "holding a listing" "$T/b.log")
ls "$T/b/0/9" >/dev/null &
LS=$!
ok "b's ls asks a again, and b holds the answer" wait_until 5 held "$n0"
is "$(cat "$T/b/1/9/y")" local "meanwhile b serves a read of its own object"
ok "... before that listing is answered" kill -0 "$LS"
wait "$LS"
done_testing
