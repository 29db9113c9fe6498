#!/bin/bash
# 30-reset.t - a connection closed under a node while its peer lives (a
# middlebox's idle timer, a conntrack flush, a flapping link: `ss -K` here)
# costs its reads a reconnect, not their bytes: each goes on from where its
# checked bytes end on the next connection, whole objects, several at once,
# a view's strided pull, a streamed one; opens meanwhile wait instead of
# failing, and the peer is never down for it.  A peer that died refuses the
# connect (or resets it), and its reads fail with EIO at once, as before
# (SPEC §4.7).
. "$(dirname "$0")/../lib.sh"

loopback_cluster 8000 a b
PA=${PORT[a]}
# a serves each DATA frame 16 KiB at a time, 1 ms apart: reads are in
# flight long enough to be cut under.
OMNIFS_TEST_TRICKLE_MS=1 start_node a "config=$T/omni.yaml,node=a,pool=host:256MiB"
start_node b "config=$T/omni.yaml,node=b,pool=host:48MiB"
peers_up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
ok "a and b see each other" wait_until 10 peers_up b
pulled() { stat_of b bytes_pulled; }
lapses() { grep -c "omnifs: peer a (127.0.0.1:$PA): .*; connecting again, its reads waiting" "$T/b.log"; }
downs() { grep -c "omnifs: peer a (127.0.0.1:$PA) down" "$T/b.log"; }
goes_on() { grep -c "omnifs: peer a (127.0.0.1:$PA): [0-9]* reads\? in flight go" "$T/b.log"; }
cut() { ss -K dst 127.0.0.1 dport = ":$PA" >/dev/null 2>&1; }
at_least() { [ "$("$1")" -ge "$2" ]; }  # at_least COUNTER N
# cut_at BYTES: once b has pulled BYTES more than at $p0, b's connection
# to a is closed under it (a reset; a's to b stays).
cut_at() {
	wait_until 20 at_least pulled $((p0 + $1)) && cut
}

# read_under_cut KEY WANT BYTES WHAT: b reads a's 0/1/KEY while its
# connection to a is closed under the read at BYTES; it must read WANT's
# bytes, and say it went on.
read_under_cut() {
	local g0 r
	p0=$(pulled) g0=$(goes_on)
	cat "$T/b/0/1/$1" >"$T/got" &
	r=$!
	ok "the connection closed under $4" cut_at "$3"
	wait "$r"
	ok "... it reads byte-exact" cmp "$2" "$T/got"
	ok "... it went on" at_least goes_on $((g0 + 1))
	rm -f "$T/got"
}

cut
if ! wait_until 5 at_least lapses 1; then
	skip "ss -K cannot cut a socket on this kernel (CONFIG_INET_DIAG_DESTROY)"
	done_testing
	exit
fi
ok "an idle connection closed: b connects again" wait_until 5 peers_up b
is "$(downs)" 0 "... and a is not down for it"

# --- one read, cut twice under it --------------------------------------------
head -c 24M /dev/urandom >"$T/x"
cp "$T/x" "$T/a/0/1/x"
ok "b hears of x" wait_until 5 test -e "$T/b/0/1/x"
p0=$(pulled) l0=$(lapses) g0=$(goes_on)
cat "$T/b/0/1/x" >"$T/got" 2>"$T/got.err" &
r=$!
ok "b's connection to a closed under the read at 4 MiB" cut_at $((4 << 20))
ok "... and again at 12 MiB" cut_at $((12 << 20))
wait "$r"
is "$?" 0 "the read ends well"
ok "... byte-exact" cmp "$T/x" "$T/got"
is "$(( $(pulled) - p0 ))" $((24 << 20)) "... no byte pulled twice"
is "$(( $(lapses) - l0 ))" 2 "b's log says twice that it connects again"
is "$(( $(goes_on) - g0 ))" 2 "... and that the read goes on"
is "$(downs)" 0 "... and a was never down"
is "$(M=$T/b pyerr "open(M + '/0/1/x', 'rb')")" ENOENT "the read was complete: x is consumed (readers: 1)"

# --- four reads at once ------------------------------------------------------------
for i in 1 2 3 4; do head -c 8M /dev/urandom >"$T/m$i"; cp "$T/m$i" "$T/a/0/1/m$i"; done
ok "b hears of them" wait_until 5 test -e "$T/b/0/1/m4"
p0=$(pulled) g0=$(goes_on)
rs=()
for i in 1 2 3 4; do cat "$T/b/0/1/m$i" >"$T/gm$i" & rs+=($!); done
ok "the connection closed under four reads" cut_at $((6 << 20))
wait "${rs[@]}"
ok "... all four byte-exact" sh -c "cmp '$T/m1' '$T/gm1' && cmp '$T/m2' '$T/gm2' && cmp '$T/m3' '$T/gm3' && cmp '$T/m4' '$T/gm4'"
is "$(( $(pulled) - p0 ))" $((32 << 20)) "... no byte pulled twice"
ok "... those in flight went on" test "$(goes_on)" -gt "$g0"

# --- a view's strided pull --------------------------------------------------------
# 8 MiB of view, half a second at a's trickle: the close lands while
# its pulls run.
"$B/tools/kvgen" shards 4 8192 8 128 4 "$T/s" || bail "kvgen shards"
for i in 0 1 2 3; do cp "$T/s.rank${i}of4" "$T/a/0/1/"; done
"$B/omnikv" view --rank 3 --of 8 -o "$T/want" "$T"/s.rank?of4 || bail "omnikv view"
ok "b hears of the shards" wait_until 5 test -e "$T/b/0/1/s.rank3of4"
read_under_cut s.rank3of8 "$T/want" $((1 << 20)) "a view that slices a shard"
rm "$T"/a/0/1/s.rank?of4

# --- a streamed read: larger than b's pool ----------------------------------------
head -c 96M /dev/urandom >"$T/big"
cp "$T/big" "$T/a/0/1/big"
ok "b hears of big" wait_until 5 test -e "$T/b/0/1/big"
read_under_cut big "$T/big" $((40 << 20)) "a read that streams through b's window"

# --- opens while it connects again ---------------------------------------------------
for i in 1 2 3; do echo "y$i" >"$T/a/0/1/y$i"; done
ok "b hears of y1..y3" wait_until 5 test -e "$T/b/0/1/y3"
cut
is "$(cat "$T/b/0/1/y1" "$T/b/0/1/y2" "$T/b/0/1/y3" 2>&1 | tr '\n' ' ')" "y1 y2 y3 " \
   "opens right after the close wait for the connection: none fails"
is "$(downs)" 0 "a was never down on b, all along"
is "$(stat_of b checksum_failures)" 0 "... nor did a byte fail its check"
ok "b's pool is empty" wait_until 5 sh -c "[ \$($PY -c \"import json; print(json.load(open('$T/b/.omni/health'))['pool']['used'])\") = 0 ]"

# --- a dies under a read: the connect is refused, the read fails at once ------------
cp "$T/x" "$T/a/0/1/x"
ok "b hears of x again" wait_until 5 test -e "$T/b/0/1/x"
p0=$(pulled)
( cat "$T/b/0/1/x" >/dev/null 2>"$T/dead.err"; echo "rc=$?" >>"$T/dead.err" ) &
r=$!
ok "b reads x" wait_until 10 at_least pulled $((p0 + 1))
kill -KILL "${NODE_PID[a]}"; wait "${NODE_PID[a]}" 2>/dev/null
ok "a killed under the read: it fails within 5 s" wait_until 5 all_gone "$r"
ok "... with EIO" grep -q "Input/output error" "$T/dead.err"
# (Refused, or reset where a's listener was still being closed.)
ok "... b's log says a is down: connecting again failed" \
   grep -q "omnifs: peer a (127.0.0.1:$PA) down: connecting: " "$T/b.log"
stop_node a

# --- a peer that closes each connection a read comes on: the read fails --------
# a back, serving each DATA frame 2 s late: the connection is closed under
# the read again and again before any of its bytes lands.  After the
# fourth close with none landing between, the read fails with EIO rather
# than wait for good.
OMNIFS_TEST_SERVE_DELAY_MS=2000 start_node a "config=$T/omni.yaml,node=a,pool=host:256MiB"
ok "a is back" wait_until 10 peers_up b
head -c 4M /dev/urandom >"$T/s"
cp "$T/s" "$T/a/0/1/s"
ok "b hears of s" wait_until 5 test -e "$T/b/0/1/s"
( cat "$T/b/0/1/s" >/dev/null 2>"$T/stuck.err"; echo "rc=$?" >>"$T/stuck.err" ) &
r=$!
ok "a serves b's read of s" wait_until 5 grep -q "^0/1/s served out" "$T/a/.omni/transfers"
g0=$(goes_on)
for i in 1 2 3; do
	cut
	wait_until 5 at_least goes_on $((g0 + i)) || break
done
is "$(( $(goes_on) - g0 ))" 3 "closed under it three times, it goes on each time"
cut
ok "the fourth time, with no byte between, it fails" wait_until 5 all_gone "$r"
ok "... with EIO" grep -q "Input/output error" "$T/stuck.err"
ok "... and b's log says why" grep -q "omnifs: peer a (127.0.0.1:$PA): a read failed: its connection closed under it 4 times, no byte of it landing between" "$T/b.log"
is "$(downs)" 1 "... and a is not down for it (once, when it was killed)"
stop_node a

# --- what health says meanwhile ------------------------------------------------------
# a back, holding each handshake 2 s: b's connect after a close takes that
# long, and b's health says a is being connected to, not down, and why.
OMNIFS_TEST_HANDSHAKE_HOLD_MS=2000 start_node a "config=$T/omni.yaml,node=a,pool=host:256MiB"
ok "a is back" wait_until 10 peers_up b
a_state() { health b "d['peers'][0]['state'] + ': ' + d['peers'][0].get('down_why', '')"; }
is "$(a_state)" "up: " "b's health says a is up"
d0=$(downs)
cut
a_connecting() { [[ "$(a_state)" == "connecting: "?*"; connecting again" ]]; }
ok "... after the close, connecting, and why" wait_until 2 a_connecting
ok "... then up again" wait_until 5 peers_up b
is "$(downs)" "$d0" "... and never down"

done_testing
