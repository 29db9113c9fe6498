#!/bin/bash
# 03-stage.t - a GPU pool's objects READ by a peer from its RDMA stage
# (README "GPU pools", rdma_stage=), on the GPU machine itself: a
# soft-RoCE device (rdma_rxe) over a dummy interface stands for the NIC,
# both daemons on its address.  The GPU's copies into the page-locked
# stage (cuMemcpyDtoH) are what this adds to tests/rdma/06-stage.t, which
# runs every other step, on a host pool, on every machine.  Needs a CUDA
# device, and a kernel that lets us add an rxe device: elsewhere SKIP.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib.sh"

S=$(( $$ % 10000 ))
DUM=omd$S RXE=omrxe$S IP=10.79.$((S % 250)).1
rxe_down() { rdma link delete "$RXE" 2>/dev/null; ip link del "$DUM" 2>/dev/null; true; }
CLEANUP_HOOKS+=(rxe_down)
rxe_up() {
	command -v rdma >/dev/null || { echo "no rdma tool (iproute2)"; return 1; }
	modprobe rdma_rxe 2>/dev/null          # or built in
	ip link add "$DUM" type dummy || { echo "the kernel makes no dummy interface"; return 1; }
	ip addr add "$IP/24" dev "$DUM" && ip link set "$DUM" up || return 1
	rdma link add "$RXE" type rxe netdev "$DUM" ||
		{ echo "the kernel has no soft-RoCE (rdma_rxe)"; return 1; }
}
rxe_up >"$T/rxe.err" 2>&1 ||
	{ skip "no soft-RoCE device can be made here: $(tail -1 "$T/rxe.err")"; done_testing; exit; }
ok "a soft-RoCE device ($RXE) on a dummy interface" true

rdma_pair "$IP"
start_node b "config=$T/omni.yaml,node=b,pool=cuda:0:512MiB,rdma_stage=64MiB"
# rxe registers no dmabuf (ibv_reg_dmabuf_mr: EOPNOTSUPP), so b has no
# GPUDirect RDMA: its stage serves, and its log says why.
ok "a reads b's objects by rdma" wait_until 20 peer_is a b rdma
ok "b reads a's by rdma" wait_until 20 peer_is b a rdma
ok "b's log says its GPU memory is READ through a 64 MiB stage, and why" grep -q \
   "the pool is GPU memory, which $RXE does not READ (no GPUDirect RDMA: .*): a peer's read of it is copied into a 64 MiB stage" \
   "$T/b.log"
is "$(health b "d['pool']['gpudirect'], d['rdma_stage']['size']")" "False 67108864" \
   "b's health: no GPUDirect, the stage's size"

total=0
for size in 1 4097 70001 3000007 $(( (40 << 20) + 3 )); do
	put "$size" "s$size" b
	ok "$size B of b's GPU pool reads byte-exact on a" cmp "$T/s$size" "$T/a/0/1/s$size"
	# up to 64 KiB an object travels in its announce: no pull, no stage
	[ "$size" -gt 65536 ] && total=$((total + size))
done
is "$(stat_of a bytes_pulled_rdma) $(stat_of a bytes_pulled_tcp)" "$total 0" "... all by RDMA"
is "$(stat_of b bytes_staged)" "$total" "... each from its copy in b's stage"
# 70001 B and 3000007 B in one step each, 40 MiB + 3 in six of at most 8 MiB
ok "... copied in steps of at most 8 MiB, which the READs overlap" \
   test "$(stat_of b rdma_stage_steps)" -ge 8
stage_used() { [ "$(health b "d['rdma_stage']['used']")" = 0 ]; }
ok "... and the stage is empty after" wait_until 10 stage_used

put $((80 << 20)) big b
ok "an object larger than the stage reads byte-exact on a" cmp "$T/big" "$T/a/0/1/big"
is "$(stat_of a bytes_pulled_tcp)" $((80 << 20)) "... over TCP (transport=auto)"

head -c 5000011 /dev/urandom >"$T/x"
cp "$T/x" "$T/a/0/1/x"
ok "a's object reads byte-exact on b, into its GPU pool" cmp "$T/x" "$T/b/0/1/x"
is "$(stat_of b bytes_pulled_rdma)" 5000011 "... by RDMA"

# A stage that cannot be made (the memlock limit, which the stage's
# registration counts and GPU memory does not): with auto b mounts, says
# why, and its objects go over TCP; with transport=rdma it does not mount.
stop_node b
nocap 16384 "$B/omnifs" -f -o "config=$T/omni.yaml,node=b,pool=cuda:0:512MiB,rdma_stage=64MiB" \
	"$T/b" >"$T/b.log" 2>&1 &
NODE_PID[b]=$!
wait_until 60 is_mounted "$T/b" || bail "b did not mount"
ok "b without its stage mounts, and a reads b's over tcp" wait_until 20 peer_is a b tcp
ok "... b's log says why" grep -q "and there is no stage (rdma: cannot register the 64 MiB stage" "$T/b.log"
stop_node b
nocap 16384 "$B/omnifs" -f -o \
	"config=$T/omni.yaml,node=b,pool=cuda:0:512MiB,rdma_stage=64MiB,transport=rdma" \
	"$T/b" >"$T/m.out" 2>&1
rc=$?
ok "with transport=rdma it does not mount (status $rc)" test $rc -ne 0
is "$(grep -c . "$T/m.out")" 1 "... with one line"
ok "... that names the stage" grep -q "transport=rdma: rdma: cannot register the 64 MiB stage" "$T/m.out"

done_testing
