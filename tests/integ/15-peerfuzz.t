#!/bin/bash
# 15-peerfuzz.t - a peer that holds the secret and then misbehaves
# (tests/tools/peerfuzz.c), PEERFUZZ_SECS seconds each way: first as a
# client that sends hostile requests to a's port, then as the server of a
# node that a connects to and that answers a's requests with hostile
# replies and DATA.  Meanwhile a and b move real objects.  a must live,
# refuse what is malformed, and go on serving b (SPEC §7).  Under SAN=1 a
# crash or a leak in a daemon fails the test through its log.
# `make fuzz` runs it for FUZZ_SECS.
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

# Real traffic, on the keys the fuzzer names too, so that its removes,
# consumes and announces race with real writes and pulls; and requests
# from a to f: lookups and listings of an edge a does not host, reads of
# what f claims to have, publishes that a announces to f, O_EXCL creates
# that ask f, small puts that a claims at f.  Errors are
# expected (f removes what we read, and lies); only the daemons' fate
# counts.  traffic ID runs until $T/stop; several run at once.
traffic() {
	local id=$1 n=0 f
	while [ ! -e "$T/stop" ]; do
		echo $((n += 1)) >"$T/rounds$id"
		for k in k1 k2; do
			rm -f "$T/a/0/1/$k"
			head -c $((300000 + RANDOM)) /dev/urandom >"$T/a/0/1/$k"
			cat "$T/b/0/1/$k" "$T/a/1/0/k1"
		done
		stat "$T/a/1/2/q$id-$n" && ls -l "$T/a/1/2" "$T/a/0/1"
		for f in "$T"/a/1/2/* "$T"/a/0/1/*; do cat "$f"; done
		rm -f "$T/a/0/2/p$id" "$T/a/0/2/x$id"
		echo "$n" >"$T/a/0/2/p$id"
		# an O_EXCL create there: a asks f, 2's host, whether it exists
		(set -C; echo "$n" >"$T/a/0/2/x$id")
		# a asks f to clean up a request, and claims a small put at f,
		# 2's one host: f answers anything
		[ $((n % 4)) = 0 ] && PYTHONPATH="$SRC/contrib/python" $SYSPY -c \
			"import contextlib, omnifs, sys; m = omnifs.Mount(sys.argv[1]); m.cleanup('k2')
with contextlib.suppress(OSError): m.remove('0', '2', 's$id')
m.put('0', '2', 's$id', b'small')" "$T/a"
	done >/dev/null 2>&1     # what they print is not TAP
}

# a_lives WHAT: a survived WHAT, and serves b both ways as before.
a_lives() {
	local alive=0
	kill -0 "${NODE_PID[a]}" 2>/dev/null && alive=1
	is "$alive" 1 "a's daemon is alive after $1"
	if [ "$alive" = 0 ]; then
		wait "${NODE_PID[a]}"
		diag "it exited with status $?; its log, less the bad frames:"
		grep -v "sent a bad frame" "$T/a.log" | tail -40 | sed 's/^/#   /'
		return
	fi
	ok "... its health parses" health a "d['node']"
	ok "... it lists its edge" ls -l "$T/a/0/1"
	head -c $((2 << 20 | RANDOM)) /dev/urandom >"$T/after"
	rm -f "$T/a/0/1/after" "$T/b/1/0/back"
	cp "$T/after" "$T/a/0/1/after"
	ok "... an object written on a reads whole on b" cmp "$T/after" "$T/b/0/1/after"
	cp "$T/after" "$T/b/1/0/back"
	ok "... and one written on b reads whole on a" cmp "$T/after" "$T/a/1/0/back"
	ok "... b sees a up" peer_up b a
}

# fuzz ARGS...: peerfuzz ARGS for SECS with the traffic running; sets rc.
fuzz() {
	local tp=() id
	rm -f "$T/stop" "$T"/rounds*
	for id in 1 2 3 4 5 6; do
		traffic $id &
		tp+=($!)
	done
	diag "peerfuzz $1 for $SECS s, seed $SEED"
	out=$("$B/tools/peerfuzz" "$@" "$T/secret" f "$SECS" "$SEED")
	rc=$?
	diag "$out"
	touch "$T/stop"
	ok "the traffic ends" wait_until 20 all_gone "${tp[@]}"
	diag "meanwhile $(cat "$T"/rounds* | awk '{ n += $1 } END { print n }') rounds of traffic"
}

# --- f as a client: hostile requests to a's port ---------------------------
fuzz "127.0.0.1:$PA"
is "$rc" 0 "after $SECS s of hostile requests, a answers a PING, and a lookup of a bad name with EINVAL"
ok "a refused the malformed frames and counted them" test "$(stat_of a peer_bad_frames)" -gt 0
lines=$(grep -c "sent a bad frame" "$T/a.log")
ok "it logged them at most once a second ($lines lines for $(stat_of a peer_bad_frames))" \
   test "$lines" -le $((SECS + 2))
ok "... each line saying how many it left out" grep -q "more since the last such line" "$T/a.log"
a_lives "hostile requests"

# --- f as a server: hostile answers to a's requests -------------------------
fuzz -l "127.0.0.1:$PF"
is "$rc" 0 "a connected to f and asked it things"
a_lives "hostile answers"

stop_node a
stop_node b
ok "a's log has no sanitizer report" sh -c "! grep -qE '$SAN_REPORT' '$T/a.log'"
done_testing
