#!/bin/bash
# 13-unwanted.t - an RDMA fetch that nobody wants any more stops (xport.h,
# xport_release): once the object is removed with no reader left on the
# reader's node, that node posts no more READs of it, its pool is free
# again at once, and no error is counted or logged for it; the pull is
# not taken over by TCP either.  An object that stays is fetched whole
# after its reader went, as before.  A view closed before its bytes are
# in stops its READs the same way.
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1"' <<EOF
pool: host:128MiB
wait_ms: 20000
EOF
node a
# b READs 4 KiB at a time, one at once: a fetch takes long enough to act
# under.  (A fetch: an object of at most 64 MiB; a larger one is streamed
# to its readers a window at a time, and its reader's close ends that.)
OMNIFS_TEST_RDMA_DEPTH=1 OMNIFS_TEST_RDMA_READ_KIB=4 node b
ok "b reads a by rdma" wait_until 20 peer_is b a rdma
SIZE=$((48 << 20))
head -c "$SIZE" /dev/urandom >"$T/x"
used() { health b "d['pool']['used']"; }
b_empty() { [ "$(used)" = 0 ]; }
pulled() { stat_of b bytes_pulled_rdma; }

p0=$(pulled)
cp "$T/x" "$T/a/0/1/k1"
ok "b hears of k1" wait_until 20 test -e "$T/b/0/1/k1"
ok "a reader on b reads k1's first bytes, byte-exact, and goes" cmp -n 4096 "$T/b/0/1/k1" "$T/x"
rm "$T/a/0/1/k1"
ok "k1 removed on a: b's pool is empty again" wait_until 20 b_empty
p=$(( $(pulled) - p0 ))
ok "... b stopped reading it ($p of $SIZE bytes)" test "$p" -lt $((SIZE / 2))
is "$(stat_of b errors) $(stat_of b rdma_errors) $(stat_of b bytes_pulled_tcp)" "0 0 0" \
   "... with no error, and no byte over TCP"
quiet() { ! grep -E "fail|over tcp|go on" "$T/b.log"; }
ok "... and nothing in b's log about it" quiet

p0=$(pulled)
cp "$T/x" "$T/a/0/1/k2"
ok "b hears of k2" wait_until 20 test -e "$T/b/0/1/k2"
cmp -n 4096 "$T/b/0/1/k2" "$T/x"
whole() { [ "$(( $(pulled) - p0 ))" = "$SIZE" ]; }
ok "k2, which stays, is fetched whole after its reader went" wait_until 60 whole ||
	diag "pulled $(( $(pulled) - p0 )) of $SIZE; b's pool holds $(used)"
ok "... and the next reader reads it byte-exact" cmp "$T/b/0/1/k2" "$T/x"

# A view closed before its bytes are in: a T = 1 view of four shards on a
# (32 MiB in all), its reader reads the first bytes and goes.
"$B/tools/kvgen" shards 4 2048 8 128 4 "$T/s" || bail "kvgen shards"
for i in 0 1 2 3; do cp "$T/s.rank${i}of4" "$T/a/0/1/"; done
"$B/omnikv" view --rank 0 --of 1 -o "$T/want" "$T"/s.rank?of4 || bail "omnikv view"
VSIZE=$(stat -c %s "$T/want")
ok "b hears of the shards" wait_until 20 test -e "$T/b/0/1/s.rank3of4"
p0=$(pulled)
ok "a reader on b reads the view's first bytes, byte-exact, and goes" \
	cmp -n 4096 "$T/b/0/1/s.rank0of1" "$T/want"
# a grants the reads under a lease as long as the view's fill holds it
unserved() { ! grep -q served "$T/a/.omni/transfers"; }
ok "... a holds the shards for it no more" wait_until 20 unserved
p=$(( $(pulled) - p0 ))
ok "... b stopped reading them ($p of $VSIZE bytes)" test "$p" -lt $((VSIZE / 2))
ok "... and the next reader reads it whole, byte-exact" cmp "$T/b/0/1/s.rank0of1" "$T/want"

done_testing
