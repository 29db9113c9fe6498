#!/bin/bash
# 01-read.t - a remote read is a one-sided RDMA READ from the owner's pool
# (SPEC §1, §7, §8): byte-exact, with the counters showing that no data
# byte went over TCP; a waiting open answered by a publish on another node;
# consumption; and rank-shard views assembled by READs of exactly their
# data bytes.
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1", "2"' <<EOF
pool: host:256MiB
wait_ms: 20000
edges:
  "0->2": { readers: 0 }
EOF
node a
node b
ok "b sees a up, and reads it by rdma" wait_until 20 peer_is b a rdma
ok "a sees b up, by rdma too" wait_until 20 peer_is a b rdma
is "$(health b "d.get('rdma_device'), d.get('rdma_grants')")" "rxe0 window" \
   "health names the device, and grants by memory window (rxe has type 2)"
ok "b's log says which transport a's bytes take, and why" \
   grep -q "peer a ($IP:${PORT[a]}) up, transport rdma (rxe0, grants by window)" "$T/b.log"

head -c 5000000 /dev/urandom >"$T/x"
cp "$T/x" "$T/a/0/1/x"
ok "a 5 MB object written on a reads byte-exact on b" cmp "$T/x" "$T/b/0/1/x"
is "$(stat_of b bytes_pulled_rdma)" 5000000 "... its bytes came by RDMA"
is "$(stat_of b bytes_pulled_tcp)" 0 "... and none of them over TCP"
is "$(stat_of b bytes_pulled)" 5000000 "... bytes_pulled counts them once"
ok "... in READs (rdma_reads)" test "$(stat_of b rdma_reads)" -ge 5
metric() { awk -v k="omnifs_$2_total" '$1 == k { print $2 }' "$T/$1/.omni/metrics"; }
is "$(metric b bytes_pulled_rdma) $(metric b bytes_pulled_tcp) $(metric b rdma_errors)" "5000000 0 0" \
   "... and .omni/metrics says the same"
is "$(stat_of a bytes_served)" 0 "the owner sent no byte itself"
used_is() { [ "$(health "$1" "d['pool']['used']")" = "$2" ]; }
ok "a complete read consumed it: a frees it" wait_until 10 used_is a 0

# --- a waiting open, answered by a publish on the other node -------------------
read_later "$T/b/0/1/late" "$T/x"
waiting() { [ "$(stat_of b waiters)" = 1 ]; }
ok "an open on b of a key not yet written waits" wait_until 10 waiting
cp "$T/x" "$T/a/0/1/late"
wait_until 30 all_gone "$LATE" || kill -9 "$LATE"
wait "$LATE"
is "$(cat "$T/late.out")" same "a's publish answers it, and the bytes come right"
is "$(stat_of b bytes_pulled_tcp)" 0 "... still none over TCP"

# --- kept objects, read again -------------------------------------------------
head -c 3000001 /dev/urandom >"$T/k"
cp "$T/k" "$T/a/0/2/k"
ok "an object kept by its owner (readers: 0) reads right" cmp "$T/k" "$T/b/0/2/k"
ok "... and right again" cmp "$T/k" "$T/b/0/2/k"

# --- the Python module's get copies behind the READs ----------------------------
head -c $((24 << 20)) /dev/urandom >"$T/g"
cp "$T/g" "$T/a/0/2/g"
gets=$(stat_of b direct_gets)
res=$(PYTHONPATH="$SRC/contrib/python" timeout -s KILL 300 $PY - "$T/b" "$T/g" <<'PYEOF'
import sys
import omnifs
from omnifs import direct
early, real = [], direct.landed
def landed(pl, upto):
    real(pl, upto)
    early.append(pl.have < pl.size)
direct.landed = landed
got = omnifs.Mount(sys.argv[1]).get("0", "2", "g", timeout=20)
print(bytes(got) == open(sys.argv[2], "rb").read(), bool(early), early[:1] == [True])
PYEOF
)
is "${res% *}" "True True" "the module's get of a's 24 MiB object on b: byte-exact, each range once landed"
diag "its copy began before the last READ landed: ${res##* }"
is "$(stat_of b direct_gets)" $((gets + 1)) "... handed over from b's pool"
is "$(stat_of b bytes_pulled_tcp)" 0 "... its bytes by RDMA"

# --- many at once --------------------------------------------------------------
mkdir -p "$T/many"
for i in $(seq 40); do
	head -c $((70000 + RANDOM * 90)) /dev/urandom >"$T/many/m$i"
	cp "$T/many/m$i" "$T/a/0/2/m$i"
done
ok "b hears of 40 objects" wait_until 20 test -e "$T/b/0/2/m40"
is "$(timeout -s KILL 300 $PY - "$T/b/0/2" "$T/many" <<'PYEOF'
import os, random, sys, threading
src, want = sys.argv[1], sys.argv[2]
names = sorted(os.listdir(want))
bad = []
def reader(seed):
    order = names[:]
    random.Random(seed).shuffle(order)
    for n in order:
        if open(os.path.join(src, n), "rb").read() != open(os.path.join(want, n), "rb").read():
            bad.append(n)
ts = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
for t in ts: t.start()
for t in ts: t.join()
print("same" if not bad else "differs: %s" % sorted(set(bad)))
PYEOF
)" same "8 readers on b, each reading 40 objects of a in its own order, all at once: every byte right"
is "$(stat_of b bytes_pulled_tcp)" 0 "... none of them over TCP"

# --- views --------------------------------------------------------------------
out=$("$B/tools/kvgen" 21 "${KV_CASES:-40}" "$T/b/0/2" "$T/a/0/2" 2>&1); rc=$?
ok "views of shards on a, read on b, byte-exact against an independent computation ($out)" \
   test $rc = 0
"$B/tools/kvgen" shards 4 256 8 128 4 "$T/s" || bail "kvgen shards"
used_a=$(health a "d['pool']['used']")
for i in 0 1 2 3; do cp "$T/s.rank${i}of4" "$T/a/0/2/"; done
ok "b hears of the shards" wait_until 10 test -e "$T/b/0/2/s.rank3of4"
kvdata() { getfattr --absolute-names --only-values -n user.omni.kv "$1" |
	$PY -c 'import json, sys; print(json.load(sys.stdin)["data_bytes"])'; }
for v in s.rank0of1 s.rank1of2 s.rank5of8; do
	before=$(stat_of b bytes_pulled_rdma)
	data=$(kvdata "$T/b/0/2/$v")
	cat "$T/b/0/2/$v" >/dev/null
	is "$(( $(stat_of b bytes_pulled_rdma) - before ))" "$data" "$v pulls its $data data bytes by RDMA, no more"
done
is "$(stat_of b bytes_pulled_tcp)" 0 "no view byte came over TCP"
# A view holds its sources at their owner from its open on (the READs'
# grant takes the lease): an rm there since does not cut its read short.
"$B/omnikv" view --rank 0 --of 1 -o "$T/s.view" "$T"/s.rank?of4
exec 3<"$T/b/0/2/s.rank0of1"
rm "$T"/a/0/2/s.rank?of4
ok "a view opened on b, its shards removed at a since, reads whole and right" \
   sh -c "cmp '$T/s.view' - <&3"
exec 3<&-
ok "... and a's pool holds what it held before them" wait_until 10 used_is a "$used_a"
is "$(stat_of b rdma_errors)" 0 "no RDMA error all along"

# An rm at the owner before the view's first READs: its open fails with
# ENOENT, as it would have a moment earlier.  b hears of the rm late.
stop_node b
OMNIFS_TEST_GONE_HOLD_MS=5000 node b
ok "b, back, reads a by rdma" wait_until 20 peer_is b a rdma
for i in 0 1 2 3; do cp "$T/s.rank${i}of4" "$T/a/0/2/"; done
ok "b hears of the shards again" wait_until 10 test -e "$T/b/0/2/s.rank3of4"
rm "$T/a/0/2/s.rank2of4"
is "$(M=$T/b pyerr "open(M + '/0/2/s.rank0of1', 'rb')")" ENOENT \
   "a view's open on b after a removed a shard, before b hears so: ENOENT"
rm -f "$T"/a/0/2/s.rank?of4
done_testing
