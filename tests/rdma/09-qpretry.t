#!/bin/bash
# 09-qpretry.t - a queue pair that does not connect at the handshake (the
# owner's rdma_cm slow or refusing, a fabric hiccup) is tried again on the
# same connection, 1 s later, then twice as late after each failure (30 s
# at most): the peer's bytes move over TCP meanwhile (transport=rdma: not
# at all), as its log and health say, and by RDMA once it connects, no
# connection made again.  Before, such a peer stayed on TCP for as long
# as its connection lived.
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1"' c:'"2"' <<EOF
pool: host:64MiB
wait_ms: 10000
EOF
# a refuses the first three queue pairs connected to it: b's and c's
# first, and one of their tries again.
OMNIFS_TEST_RDMA_REJECTS=3 node a
node b
node c transport=rdma

rejected() { [ "$(grep -c "omnifs: test: a queue pair rejected" "$T/a.log")" = 3 ]; }
ok "a rejects three queue pairs" wait_until 20 rejected
# the third is a try again: for 2 s its reader's health says so
why_of() { health "$1" "[p.get('transport_why', '') for p in d['peers'] if p['name'] == 'a'][0]"; }
retrying() { why_of b | grep -qF "(try 2; the next in 2 s)" || why_of c | grep -qF "(try 2; the next in 2 s)"; }
ok "... and its reader's health says which try failed, and when the next is" wait_until 10 retrying
ok "b's log says a is read over tcp, and why" \
	grep -q "peer a ($IP:${PORT[a]}) up, transport tcp (its RDMA queue pair did not connect: RDMA_CM_EVENT_REJECTED)" "$T/b.log"
ok "c's (transport=rdma) says a cannot be read, and why" \
	grep -q "peer a ($IP:${PORT[a]}) up, transport none: its RDMA queue pair did not connect: RDMA_CM_EVENT_REJECTED" "$T/c.log"
both_rdma() { peer_is b a rdma && peer_is c a rdma; }
ok "b and c read a by rdma once a pair connects" wait_until 20 both_rdma || peers_of b c
for n in b c; do
	ok "$n's log says so" grep -q "omnifs: peer a ($IP:${PORT[a]}): transport rdma now (rxe0, grants by window; its queue pair connected, try [23])" "$T/$n.log"
	ok "... on the connection it had: a never went down" sh -c "! grep -q 'peer a .* down' '$T/$n.log'"
done
tries=$(cat "$T/b.log" "$T/c.log" | sed -n 's/.*queue pair connected, try \([0-9]\))$/\1/p' | sort | tr '\n' ' ')
is "$tries" "2 3 " "one of them tried once again, the other twice"

head -c 3000000 /dev/urandom >"$T/x"
cp "$T/x" "$T/a/0/1/x"
cp "$T/x" "$T/a/0/2/x"
rdma0=$(stat_of b bytes_pulled_rdma)
ok "b reads a's object" cmp "$T/x" "$T/b/0/1/x"
ok "... by rdma" test "$(stat_of b bytes_pulled_rdma)" -ge $((rdma0 + 3000000))
ok "c reads a's object" cmp "$T/x" "$T/c/0/2/x"
done_testing
