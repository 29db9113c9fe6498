#!/bin/bash
# 31-unwanted.t - a pull's bytes do not stand in the way of what a node
# wants, nor cross the network once nobody wants them.  A reply on the
# connection a large pull's bytes come back on goes out between two of its
# frames, not after the last (xport.c, conn_sendv).  A reader's node brings
# a remote object into its pool whole, and goes on after its reader
# closed, for the next one; but once the object is removed (on its owner,
# or from the reader's node) with no reader left there, the rest of its
# bytes would cross the network for nothing, and hold that node's pool
# until they had: the reader's node releases the fetch's lease at once,
# the owner stops serving it, and the pool is free again (xport.h,
# xport_release).  A read still open keeps its fetch; an object that stays
# is fetched whole, as before.  A view closed before its bytes are in
# stops its pulls the same way.
. "$(dirname "$0")/../lib.sh"

SIZE=$((32 << 20))
loopback_cluster 8000 a b
# a serves each DATA frame 16 KiB at a time, 1 ms apart: a fetch of SIZE
# takes some 2 s, long enough to act under.
OMNIFS_TEST_TRICKLE_MS=1 start_node a "config=$T/omni.yaml,node=a,pool=host:128MiB"
start_node b "config=$T/omni.yaml,node=b,pool=host:128MiB"
peers_up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
ok "a and b see each other" wait_until 10 peers_up b
used() { health b "d['pool']['used']"; }
b_empty() { [ "$(used)" = 0 ]; }
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

# --- a fetch nobody wants any more --------------------------------------
# unwanted KEY RM_DIR: a's KEY, opened on b by a reader that reads its
# first bytes and goes; then KEY is removed through RM_DIR.
unwanted() {
	local s0 e0
	s0=$(served) e0=$(stat_of b errors)
	cp "$T/x" "$T/a/0/1/$1"
	ok "b hears of $1" wait_until 10 test -e "$T/b/0/1/$1"
	ok "... a reader on b reads its first bytes, byte-exact, and goes" \
		cmp -n 4096 "$T/b/0/1/$1" "$T/x"
	ok "... b is fetching the rest" test "$(used)" -gt 0
	ok "$1 removed through $2" rm "$T/$2/0/1/$1"
	ok "... b's pool is empty again" wait_until 10 b_empty
	local s=$(( $(served) - s0 ))
	# (a few frames: the one b was taking when it heard, those on
	# their way; SIZE / 4 leaves room for a slow machine)
	ok "... a stopped serving it ($s of $SIZE bytes)" test "$s" -le $((SIZE / 4))
	is "$(stat_of b errors)" "$e0" "... and b counts no error for it"
}
unwanted k1 a
unwanted k2 b

# --- kept: a reader still open, an object that stays ----------------------
cp "$T/x" "$T/a/0/1/k3"
ok "b hears of k3" wait_until 10 test -e "$T/b/0/1/k3"
exec 7<"$T/b/0/1/k3"
ok "a reader on b holds k3 open" test "$(used)" -gt 0
rm "$T/a/0/1/k3"
ok "k3 removed on a: the open reader reads it all, byte-exact" cmp - "$T/x" <&7
exec 7<&-
ok "... and b's pool is empty after" wait_until 10 b_empty

s0=$(served)
cp "$T/x" "$T/a/0/1/k4"
ok "b hears of k4" wait_until 10 test -e "$T/b/0/1/k4"
cmp -n 4096 "$T/b/0/1/k4" "$T/x"
whole() { [ "$(( $(served) - s0 ))" = "$SIZE" ]; }
ok "k4, which stays, is fetched whole after its reader went" wait_until 20 whole
ok "... and the next reader reads it byte-exact" cmp "$T/b/0/1/k4" "$T/x"
is "$(( $(served) - s0 ))" "$SIZE" "... from b's copy"

# --- a view closed before its bytes are in ---------------------------------
# A T = 1 view of four shards on a (64 MiB in all) pulls all of them; its
# reader reads the first bytes and goes: the pulls stop with it.
"$B/tools/kvgen" shards 4 4096 8 128 4 "$T/s" || bail "kvgen shards"
for i in 0 1 2 3; do cp "$T/s.rank${i}of4" "$T/a/0/1/"; done
"$B/omnikv" view --rank 0 --of 1 -o "$T/want" "$T"/s.rank?of4 || bail "omnikv view"
VSIZE=$(stat -c %s "$T/want")
ok "b hears of the shards" wait_until 10 test -e "$T/b/0/1/s.rank3of4"
s0=$(served)
ok "a reader on b reads the view's first bytes, byte-exact, and goes" \
	cmp -n 4096 "$T/b/0/1/s.rank0of1" "$T/want"
# a serves under a lease as long as the view's fill holds it
unserved() { ! grep -q served "$T/a/.omni/transfers"; }
ok "... a serves it no more" wait_until 20 unserved
s=$(( $(served) - s0 ))
ok "... a stopped serving it ($s of $VSIZE bytes)" test "$s" -le $((VSIZE / 4))
ok "... and the next reader reads it whole, byte-exact" cmp "$T/b/0/1/s.rank0of1" "$T/want"

done_testing
