#!/bin/bash
# 11-reroute.t - a queue pair that fails under a read (a fabric that drops
# RoCE, a READ in error) costs that read its speed, not its bytes (SPEC §7,
# §9): under auto the rest of it comes over TCP from where its verified
# bytes end, byte-exact, none pulled twice, and the log says so; the next
# read connects the pair again.  A whole object's fetch, a streamed read
# and rank-shard views, with pairs dropped under each.  A pair that does
# not connect again leaves the peer up, by TCP, while it is tried again as
# one that did not connect at the handshake is (09-qpretry.t).  Under
# transport=rdma such a read fails with EIO and no byte moves over TCP.
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1"' c:'"2"' <<EOF
pool: host:192MiB
wait_ms: 20000
edges:
  "0->1": { readers: 0 }
  "0->2": { readers: 0 }
EOF
node a
# b's and c's pairs break at every 37th READ (of 256 KiB: every 9.25 MiB),
# as the completion of a READ in error breaks one: a count that no pull's
# READs divide (a streamed read's are 8 each), so that it breaks under one.
# c's next connect after a break fails (OMNIFS_TEST_RDMA_DARK).
OMNIFS_TEST_RDMA_DROP=37 node b pool=host:128MiB
OMNIFS_TEST_RDMA_DROP=37 OMNIFS_TEST_RDMA_DARK=1 node c pool=host:64MiB,transport=rdma
both_rdma() { peer_is b a rdma && peer_is c a rdma; }
ok "b and c read a by rdma" wait_until 20 both_rdma || peers_of b c
drops() { grep -c "test: the fabric dropped its READs" "$T/$1.log"; }
rerouted() { grep -c "omnifs: peer a: its RDMA queue pair failed under a read: the rest of it over tcp" "$T/$1.log"; }

# --- a whole object's fetch -------------------------------------------------------
head -c $((24 << 20)) /dev/urandom >"$T/x"
cp "$T/x" "$T/a/0/1/x"
ok "a 24 MiB object of a reads byte-exact on b, its pair dropped under the read" \
   cmp "$T/x" "$T/b/0/1/x"
is "$(drops b)" 1 "... once"
ok "... and b's log says the rest of the read went over tcp" test "$(rerouted b)" -ge 1
rdma=$(stat_of b bytes_pulled_rdma) tcp=$(stat_of b bytes_pulled_tcp)
ok "... its first bytes by RDMA ($rdma), the rest over TCP ($tcp)" test "$rdma" -gt 0 -a "$tcp" -gt 0
is "$(stat_of b bytes_pulled)" $((24 << 20)) "... no byte pulled twice"
ok "... counted in rdma_errors" test "$(stat_of b rdma_errors)" -ge 1
ok "b still sees a up, by rdma" peer_is b a rdma

cp "$T/x" "$T/a/0/1/x2"
ok "the next object reads right too" cmp "$T/x" "$T/b/0/1/x2"
ok "... its first bytes by RDMA: the pair connected again" \
   test "$(stat_of b bytes_pulled_rdma)" -gt "$rdma"

# --- a streamed read ----------------------------------------------------------------
head -c $((80 << 20)) /dev/urandom >"$T/y"
cp "$T/y" "$T/a/0/1/y"
d0=$(drops b) rdma=$(stat_of b bytes_pulled_rdma) tcp=$(stat_of b bytes_pulled_tcp)
ok "an 80 MiB object, streamed to its reader on b, reads byte-exact" cmp "$T/y" "$T/b/0/1/y"
ok "... with pairs dropped under it" test "$(drops b)" -ge $((d0 + 2))
rdma=$(( $(stat_of b bytes_pulled_rdma) - rdma )) tcp=$(( $(stat_of b bytes_pulled_tcp) - tcp ))
ok "... its bytes by RDMA ($rdma) and over TCP ($tcp)" test "$rdma" -gt 0 -a "$tcp" -gt 0
rm "$T/a/0/1/y"

# --- views --------------------------------------------------------------------------
# Many pulls at once, each asking a's grant while pairs break under them:
# b again, its pairs broken at every 5th READ.
stop_node b
OMNIFS_TEST_RDMA_DROP=5 node b pool=host:128MiB
ok "b, back, reads a by rdma" wait_until 20 peer_is b a rdma
"$B/tools/kvgen" shards 4 2048 8 128 4 "$T/s" || bail "kvgen shards"
for i in 0 1 2 3; do cp "$T/s.rank${i}of4" "$T/a/0/1/"; done
ok "b hears of the shards" wait_until 10 test -e "$T/b/0/1/s.rank3of4"
for v in 0:1 1:2 3:8 0:1 1:2 0:1; do
	r=${v%:*} n=${v#*:}
	"$B/omnikv" view --rank "$r" --of "$n" -o "$T/want" "$T"/s.rank?of4 || bail "omnikv view"
	d0=$(drops b)
	ok "the view s.rank${r}of$n reads byte-exact on b" cmp "$T/want" "$T/b/0/1/s.rank${r}of$n"
	diag "pairs dropped under it: $(( $(drops b) - d0 ))"
done
ok "... pairs were dropped under them" test "$(drops b)" -ge 6
is "$(stat_of b checksum_failures)" 0 "no byte that failed a check, all along"

# --- a fabric that stays dark -------------------------------------------------------
# b again: after a pair of it breaks, the next two connects of it fail, as
# ones that time out in a fabric that drops RoCE do.  a stays up all along.
rm "$T"/a/0/1/s.rank?of4 "$T/a/0/1/x2"
stop_node b
OMNIFS_TEST_RDMA_DROP=37 OMNIFS_TEST_RDMA_DARK=2 node b pool=host:128MiB
ok "b, back, reads a by rdma" wait_until 20 peer_is b a rdma
cp "$T/x" "$T/a/0/1/d1"
ok "an object whose read breaks its pair reads right" cmp "$T/x" "$T/b/0/1/d1"
cp "$T/x" "$T/a/0/1/d2"
tcp=$(stat_of b bytes_pulled_tcp)
ok "the next, whose pair does not connect again, reads right" cmp "$T/x" "$T/b/0/1/d2"
is "$(( $(stat_of b bytes_pulled_tcp) - tcp ))" $((24 << 20)) "... all of it over TCP"
ok "... b's log says a moves over tcp now, and why" grep -qF "omnifs: peer a ($IP:${PORT[a]}): transport tcp now (its RDMA queue pair failed and did not connect again: test: the fabric is dark (OMNIFS_TEST_RDMA_DARK) (try 1; the next in 1 s))" "$T/b.log"
ok "b reads a by rdma again once its pair connects" wait_until 20 peer_is b a rdma
ok "... tried again on the same connection, as at a handshake" \
   grep -qF "omnifs: peer a ($IP:${PORT[a]}): transport rdma now (rxe0, grants by window; its queue pair connected, try 3)" "$T/b.log"
ok "... a never went down" sh -c "! grep -q 'peer a .* down' '$T/b.log'"
rm "$T/a/0/1/d1" "$T/a/0/1/d2"
rdma=$(stat_of b bytes_pulled_rdma)
cp "$T/x" "$T/a/0/1/d3"
ok "the next object reads right" cmp "$T/x" "$T/b/0/1/d3"
ok "... its first bytes by RDMA" test "$(stat_of b bytes_pulled_rdma)" -gt "$rdma"

# --- transport=rdma: no byte over TCP -----------------------------------------------
cp "$T/x" "$T/a/0/2/z"
is "$(M=$T/c pyerr "open(M + '/0/2/z', 'rb').read()")" EIO \
   "transport=rdma: a read whose pair is dropped under it fails with EIO"
is "$(stat_of c bytes_pulled_tcp)" 0 "... and no byte of it moved over TCP"
is "$(rerouted c)" 0 "... nor does c's log say so"
is "$(M=$T/c pyerr "open(M + '/0/2/z', 'rb').read()")" EIO \
   "... and where the pair does not connect again (dark once), the next read too"
ok "... c's log says a moves no byte now, and why" grep -qF "omnifs: peer a ($IP:${PORT[a]}): transport none now (its RDMA queue pair failed and did not connect again: test: the fabric is dark (OMNIFS_TEST_RDMA_DARK) (try 1; the next in 1 s))" "$T/c.log"
ok "c reads a by rdma again once its pair connects" wait_until 20 peer_is c a rdma
head -c $((4 << 20)) /dev/urandom >"$T/w"
cp "$T/w" "$T/a/0/2/w"
ok "... and a's next object reads right" cmp "$T/w" "$T/c/0/2/w"
is "$(stat_of c bytes_pulled_tcp)" 0 "... no byte of any read over TCP, all along"
done_testing
