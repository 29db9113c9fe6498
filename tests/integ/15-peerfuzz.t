#!/bin/bash
# 15-peerfuzz.t - a peer that holds the secret and then sends hostile
# requests (tests/tools/peerfuzz.c) for PEERFUZZ_SECS seconds: the daemon
# behind the port lives, refuses what is malformed, and goes on serving
# its real peers (SPEC §7).  Under SAN=1 a crash or a leak in the daemon
# fails the test through its log.  `make fuzz` runs it for FUZZ_SECS.
. "$(dirname "$0")/../lib.sh"

SECS=${PEERFUZZ_SECS:-5}
SEED=${PEERFUZZ_SEED:-$RANDOM}
read -r PA PB PF < <(free_ports 3)
new_secret "$T/secret"
cat >"$T/omni.yaml" <<EOF
secret_file: $T/secret
pool: host:64MiB
wait_ms: 2000
nodes:
  a: { addr: 127.0.0.1:$PA, stages: ["0"] }
  b: { addr: 127.0.0.1:$PB, stages: ["1"] }
  f: { addr: 127.0.0.1:$PF, stages: ["2"] }
edges:
  "0->1": { readers: 0 }
EOF
for n in a b; do start_node $n "config=$T/omni.yaml,node=$n"; done
peer_up() { [ "$(health "$1" "[p['state'] for p in d['peers'] if p['name'] == '$2'][0]")" = up ]; }
both_up() { peer_up a b && peer_up b a; }
ok "a and b see each other up" wait_until 10 both_up

# Targets for the fuzzer's lookups, pulls, consumes and removes.
head -c $((3 << 20)) /dev/urandom >"$T/a/0/1/k1"
head -c 2000 /dev/urandom >"$T/a/0/1/x.rank0of2"
echo small >"$T/a/0/2/k2"
head -c $((1 << 20)) /dev/urandom >"$T/b/1/0/k1"

diag "peerfuzz for $SECS s, seed $SEED"
out=$("$B/tools/peerfuzz" "127.0.0.1:$PA" "$T/secret" f "$SECS" "$SEED")
rc=$?
diag "$out"
is "$rc" 0 "after $SECS s of hostile requests, a still answers a PING on a new connection"
alive=0
kill -0 "${NODE_PID[a]}" 2>/dev/null && alive=1
is "$alive" 1 "a's daemon is alive"
if [ "$alive" = 0 ]; then
	wait "${NODE_PID[a]}"
	diag "it exited with status $?; its log, less the bad frames:"
	grep -v "sent a bad frame" "$T/a.log" | tail -40 | sed 's/^/#   /'
fi
ok "a refused the malformed frames and counted them" test "$(stat_of a peer_bad_frames)" -gt 0
ok "a's health still parses" health a "d['node']"
ok "a still lists its edge" ls -l "$T/a/0/1"

# a's real peers are served as before.
head -c $((2 << 20 | 77)) /dev/urandom >"$T/after"
cp "$T/after" "$T/a/0/1/after"
ok "an object written on a afterwards reads whole on b" cmp "$T/after" "$T/b/0/1/after"
cp "$T/after" "$T/b/1/0/back"
ok "and one written on b reads whole on a" cmp "$T/after" "$T/a/1/0/back"
ok "b still sees a up" peer_up b a

stop_node a
stop_node b
ok "a's log has no sanitizer report" sh -c "! grep -qE '(Address|Leak|UndefinedBehavior)Sanitizer|runtime error:' '$T/a.log'"
done_testing
