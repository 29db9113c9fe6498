#!/bin/bash
# 19-strangers.t - hostile clients without the secret (SPEC §7): 500 slow
# connections that dribble a byte at a time and come back as soon as they
# are closed cannot hold the node's threads or descriptors, nor keep a
# restarted peer out, nor stop cross-node reads.
. "$(dirname "$0")/../lib.sh"

loopback_cluster 8000 a b
PA=${PORT[a]}
node() { start_node "$1" "config=$T/omni.yaml,node=$1,pool=host:64MiB"; }
up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
both_up() { up a && up b; }
threads() { ls "/proc/${NODE_PID[a]}/task" | wc -l; }
fds() { daemon_fds "${NODE_PID[a]}"; }
node a
node b
ok "a and b see each other up" wait_until 10 both_up
threads0=$(threads) fds0=$(fds)

# --- one stranger that dribbles: closed at its handshake's deadline ---------
out=$($SYSPY "$SRC/tests/tools/strangers.py" 127.0.0.1:$PA 1 4)
held=$(echo "$out" | awk '{ print $6 }')
ok "a connection dribbling a byte every 0.2 s is closed within 2.5 s ($held s)" \
	awk -v h="$held" 'BEGIN { exit !(h > 0 && h <= 2.5) }'

# --- 500 of them, coming back as soon as they are closed -----------------
$SYSPY "$SRC/tests/tools/strangers.py" 127.0.0.1:$PA 500 14 >"$T/strangers.out" 2>&1 &
ATTACK=$!
CLEANUP_HOOKS+=(stop_attack)
stop_attack() { kill "$ATTACK" 2>/dev/null; wait "$ATTACK" 2>/dev/null; }
many() { [ "$(stat_of a peer_strangers_closed)" -gt 20 ]; }
ok "the strangers are being closed" wait_until 10 many
most=0
sample() { local n; n=$(threads); [ "$n" -gt "$most" ] && most=$n; true; }
sample
stop_node b
node b
for _ in $(seq 1 10); do sample; sleep 0.1; done
ok "b, restarted, is back up on both sides within 5 s" wait_until 5 both_up
sample
head -c $((2 << 20 | 77)) /dev/urandom >"$T/blob"
cp "$T/blob" "$T/a/0/1/k1"
ok "b reads a's 2 MiB object meanwhile" cmp "$T/blob" "$T/b/0/1/k1"
echo from-b >"$T/b/1/2/k2"
is "$(cat "$T/a/1/2/k2")" from-b "and a reads b's"
echo local >"$T/a/0/3/k3"
is "$(cat "$T/a/0/3/k3")" local "a local write and read go on"
sample
ok "a's threads stayed under 64 (most: $most, at start: $threads0)" test "$most" -lt 64
wait "$ATTACK"
ATTACK=
diag "$(cat "$T/strangers.out")"
ok "the hostile client saw its connections closed" \
	grep -qE 'closed_by_peer [1-9][0-9]{2,}' "$T/strangers.out"
settled() { [ "$(threads)" -le "$threads0" ] && [ "$(fds)" -le "$fds0" ]; }
ok "afterwards a's threads and descriptors are back to where they were" wait_until 5 settled
ok "the log says why strangers were closed" \
	grep -q "did not prove it holds the secret within 2000 ms" "$T/a.log"
lines=$(grep -c "did not prove\|too many connections in their handshake" "$T/a.log")
ok "at most a line a second of it ($lines lines)" test "$lines" -le 40
done_testing
