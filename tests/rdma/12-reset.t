#!/bin/bash
# 12-reset.t - a node's TCP connection to its peer closed under an RDMA
# read (a reset: `ss -K` here) takes the queue pair with it, not the read:
# the node connects again at once, and the read goes on from where its
# verified bytes end (over TCP where a READ failed under the close, else
# by RDMA on the new pair), byte-exact and none pulled twice; the peer is
# never down, and the next read moves by RDMA (30-reset.t does the same
# for reads over TCP).
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1"' <<EOF
pool: host:160MiB
wait_ms: 20000
EOF
node a
# b's READs one at a time, 4 KiB each: a read is in flight long enough
# to be cut under.
OMNIFS_TEST_RDMA_DEPTH=1 OMNIFS_TEST_RDMA_READ_KIB=4 node b pool=host:128MiB
ok "b reads a by rdma" wait_until 20 peer_is b a rdma || peers_of b
PA=${PORT[a]}
cut() { ss -K dst "$IP" dport = ":$PA" >/dev/null 2>&1; }
lapses() { grep -c "omnifs: peer a ($IP:$PA): .*; connecting again, its reads waiting" "$T/b.log"; }
downs() { grep -c "omnifs: peer a ($IP:$PA) down" "$T/b.log"; }

head -c $((24 << 20)) /dev/urandom >"$T/x"
cp "$T/x" "$T/a/0/1/x"
ok "b hears of x" wait_until 10 test -e "$T/b/0/1/x"
cat "$T/b/0/1/x" >"$T/got" 2>"$T/got.err" &
r=$!
pulled() { awk '$1 == "bytes_pulled:" { print $2 }' "$T/b/.omni/stats"; }
# Cut again and again while it reads, 50 cuts at most: some land while
# its READs are in flight, and others while it connects again.
for i in $(seq 50); do kill -0 "$r" 2>/dev/null && cut; done
n=$(lapses)
wait "$r"
is "$?" 0 "a 24 MiB fetch whose connection closed under it, again and again, ends well ($n cuts)"
if [ "$(lapses)" = 0 ]; then
	skip "ss -K cannot cut a socket in this guest (CONFIG_INET_DIAG_DESTROY)"
	done_testing
	exit
fi
ok "... byte-exact" cmp "$T/x" "$T/got"
is "$(pulled)" $((24 << 20)) "... no byte pulled twice"
rdma=$(stat_of b bytes_pulled_rdma) tcp=$(stat_of b bytes_pulled_tcp)
# A READ posted before the close may still complete, and the pull after
# it waits for the new connection and its pair: where none failed under
# the close, no byte moves over TCP.
diag "by RDMA $rdma bytes, over TCP $tcp; rerouted: $(grep -c 'the rest of it over tcp' "$T/b.log")"
ok "... its first bytes by RDMA" test "$rdma" -gt 0
is "$(downs)" 0 "... and a was never down on b"
ok "b reads a by rdma again" wait_until 20 peer_is b a rdma
cp "$T/x" "$T/a/0/1/x2"
ok "the next object reads right" cmp "$T/x" "$T/b/0/1/x2"
ok "... by RDMA" test "$(stat_of b bytes_pulled_rdma)" -gt "$rdma"
is "$(stat_of b checksum_failures)" 0 "no byte failed its check, all along"
done_testing
