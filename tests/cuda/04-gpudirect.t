#!/bin/bash
# 04-gpudirect.t - GPUDirect RDMA (README "GPU pools"): a GPU pool is
# registered with the RDMA device through a dmabuf of its memory, so that
# a peer's READs take its objects from GPU memory itself: no stage, no
# copy, no limit of the stage's size.  The same node with
# OMNIFS_TEST_NO_GPUDIRECT serves through its stage instead.  Needs a
# CUDA device and a hardware RDMA device with an active port whose
# interface has an IPv4 address (rxe and siw register no dmabuf; 03-stage.t
# runs the stage over rxe); elsewhere SKIP.  Where the driver, the GPU or
# the device refuse the dmabuf, SKIP with the reason b's log gives.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib.sh"

# A hardware device (one with a PCI device behind it), an active port, and
# the IPv4 address of its interface: "DEV IP".
hw_rdma_ip() {
	local d p nd ip
	for d in /sys/class/infiniband/*; do
		[ -e "$d/device" ] || continue
		for p in "$d"/ports/*; do
			[ "$(cat "$p/state" 2>/dev/null)" = "4: ACTIVE" ] || continue
			nd=$(cat "$p/gid_attrs/ndevs/0" 2>/dev/null || ls "$d/device/net" 2>/dev/null | head -1)
			[ -n "$nd" ] || continue
			ip=$(ip -4 -o addr show dev "$nd" 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }')
			[ -n "$ip" ] && { echo "${d##*/} $ip"; return 0; }
		done
	done
	return 1
}
if ! read -r DEV IP < <(hw_rdma_ip); then
	echo "1..0 # SKIP no hardware RDMA device with an active port and an IPv4 address"
	exit 0
fi
diag "RDMA device $DEV at $IP"

rdma_pair "$IP"
start_node b "config=$T/omni.yaml,node=b,pool=cuda:0:512MiB,rdma_stage=64MiB"
ok "a reads b's objects by rdma" wait_until 20 peer_is a b rdma
if [ "$(health b "d['pool']['gpudirect']")" != True ]; then
	skip "no GPUDirect RDMA with $DEV here: $(grep -o 'no GPUDirect RDMA: .*)' "$T/b.log" | head -1)"
	done_testing
	exit
fi
ok "b's log says peers READ its GPU memory itself" grep -q \
   "pool registered by a dmabuf of the GPU's memory (GPUDirect RDMA" "$T/b.log"
is "$(health b "'rdma_stage' in d")" False "... and b made no stage"

total=0
for size in 70001 3000007 $(( (100 << 20) + 3 )); do
	put "$size" "g$size" b
	ok "$size B of b's GPU pool reads byte-exact on a" cmp "$T/g$size" "$T/a/0/1/g$size"
	total=$((total + size))
done
is "$(stat_of a bytes_pulled_rdma) $(stat_of a bytes_pulled_tcp)" "$total 0" \
   "... all by RDMA, 100 MiB too (more than any stage would hold)"
is "$(stat_of b bytes_staged)" 0 "... READ from GPU memory, nothing copied to a stage"
# A new object in the same extents after a's read: the NIC sees the
# device's new bytes (the pool's memory operations are synchronous).
rm -f "$T/b/0/1/g70001"
put 70001 again b
ok "a new object in freed GPU memory reads byte-exact on a" cmp "$T/again" "$T/a/0/1/again"

stop_node b
OMNIFS_TEST_NO_GPUDIRECT=1 start_node b "config=$T/omni.yaml,node=b,pool=cuda:0:512MiB,rdma_stage=64MiB"
ok "without GPUDirect, b serves through its stage" wait_until 20 peer_is a b rdma
ok "... and its log says why" grep -q \
   "(no GPUDirect RDMA: OMNIFS_TEST_NO_GPUDIRECT): a peer's read of it is copied into a 64 MiB stage" \
   "$T/b.log"
is "$(health b "d['pool']['gpudirect'], d['rdma_stage']['size']")" "False 67108864" \
   "... its health says so"
put 3000007 s b
ok "3000007 B of b's GPU pool reads byte-exact on a" cmp "$T/s" "$T/a/0/1/s"
is "$(stat_of b bytes_staged)" 3000007 "... from its copy in b's stage"

done_testing
