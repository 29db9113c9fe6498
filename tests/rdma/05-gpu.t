#!/bin/bash
# 05-gpu.t - a node whose pool is GPU memory, with an RDMA device (SPEC §8,
# README "GPU pools"): rxe reads no GPU memory (it registers no dmabuf:
# no GPUDirect RDMA), so that node reads its peers' objects by RDMA READs into
# registered host memory and copies them into its pool, whole or streamed,
# and its own objects are copied into its stage (page-locked host memory)
# for its peers' READs, or go over TCP with rdma_stage=0; its log says
# which.  Needs a CUDA device in the guest: elsewhere SKIP.  06-stage.t
# runs the stage on every machine, with a host pool.
. "$(dirname "$0")/lib.sh"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU 0'; then
	echo "1..0 # SKIP no CUDA device"
	exit 0
fi

cluster a:'"0"' b:'"1"' <<EOF
pool: host:256MiB
readers: 0
EOF
node a
node b pool=cuda:0:256MiB,rdma_stage=64MiB
ok "b reads a's objects by rdma" wait_until 20 peer_is b a rdma
ok "a reads b's by rdma too" wait_until 20 peer_is a b rdma
ok "b's log says how" grep -q "the pool is GPU memory, which rxe0 does not READ (no GPUDirect RDMA: .*): a peer's read of it is copied into a 64 MiB stage" "$T/b.log"
is "$(health b "d.get('rdma_grants'), d['pool']['gpudirect'], d['rdma_stage']['size']")" \
   "window False 67108864" "b's health: it grants windows over its stage, no GPUDirect"

head -c 20000001 /dev/urandom >"$T/x"
cp "$T/x" "$T/a/0/1/x"
ok "a's 20 MB object reads byte-exact on b, through b's GPU pool" cmp "$T/x" "$T/b/0/1/x"
is "$(stat_of b bytes_pulled_rdma) $(stat_of b bytes_pulled_tcp)" "20000001 0" \
   "... its bytes came by RDMA, none over TCP"
head -c $((80 << 20)) /dev/urandom >"$T/y"
cp "$T/y" "$T/a/0/1/y"
ok "an 80 MiB one streams to b byte-exact" cmp "$T/y" "$T/b/0/1/y"
is "$(stat_of b bytes_pulled_tcp)" 0 "... by RDMA too"

head -c 3000007 /dev/urandom >"$T/z"
cp "$T/z" "$T/b/1/0/z"
ok "b's object reads byte-exact on a" cmp "$T/z" "$T/a/1/0/z"
is "$(stat_of a bytes_pulled_rdma) $(stat_of a bytes_pulled_tcp)" "3000007 0" "... by RDMA"
is "$(stat_of b bytes_staged)" 3000007 "... from its copy in b's stage"
stage_used() { [ "$(health b "d['rdma_stage']['used']")" = 0 ]; }
ok "... which goes with the read's lease" wait_until 10 stage_used

stop_node b
node b pool=cuda:0:256MiB,rdma_stage=0
ok "with rdma_stage=0, a reads b's over tcp" wait_until 20 peer_is a b tcp
ok "... and b's log says why" grep -q "(no GPUDirect RDMA: .*), and there is no stage (rdma_stage=0)" "$T/b.log"
cp "$T/z" "$T/b/1/0/z2"
ok "b's object reads byte-exact on a" cmp "$T/z" "$T/a/1/0/z2"
is "$(stat_of a bytes_pulled_tcp)" 3000007 "... over TCP"

done_testing
