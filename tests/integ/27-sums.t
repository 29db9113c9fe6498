#!/bin/bash
# 27-sums.t - objects hashed at publish from their blocks' sums (the GPU
# pool's kernel, transport/gpu_xxh3.cu), every step but the kernel run on
# a host pool: OMNIFS_TEST_CPU_SUMS has the CPU take the sums the kernel
# would.  Objects with no hashed prefix (written backwards; a GPU
# process's CUDA_PLACE is tests/cuda's) of sizes about every edge (a whole chunk, a last
# chunk of 1 B, of less than 4 KiB, a last stripe that reaches back
# across a block) get the xxh3 an independent hash gives, and a peer
# pulls them checking every chunk against the sums.  tests/cuda runs the
# kernel.
. "$(dirname "$0")/../lib.sh"
export PYTHONPATH=$SRC/contrib/python
$SYSPY -c "import xxhash" 2>/dev/null || { skip "no python3-xxhash for an independent hash"; done_testing; exit; }

loopback_cluster 10000 a b
echo "transport: tcp" >>"$T/omni.yaml"
OMNIFS_TEST_CPU_SUMS=1 start_node a "config=$T/omni.yaml,node=a,pool=host:128MiB"
start_node b "config=$T/omni.yaml,node=b,pool=host:128MiB"
peers_up() { [ "$(health b "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
ok "a (sums taken as the kernel would) and b see each other" wait_until 10 peers_up

# backwards NAME SIZE: SIZE random bytes in $T/NAME, written to a's
# 0/1/NAME 64 KiB at a time from the end (nothing hashed before publish)
backwards() {
	$PY - "$T/$1" "$T/a/0/1/$1" "$2" <<'PYEOF'
import os, sys
data = os.urandom(int(sys.argv[3]))
open(sys.argv[1], "wb").write(data)
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
for off in reversed(range(0, len(data), 65536)):
    os.pwrite(fd, data[off:off + 65536], off)
os.close(fd)
PYEOF
}
xxh3_of() { $SYSPY -c "import sys, xxhash; print(xxhash.xxh3_64_hexdigest(open(sys.argv[1], 'rb').read()))" "$1"; }

M=$((1 << 20))
n=0
for size in $M $((M + 1)) $((M + 100)) $((M + 5000)) $((2 * M + 4096)) $((2 * M + 4097 + 30)) \
	    $((3 * M + 777)) $((9 * M + 5)); do
	backwards "o$size" "$size"
	n=$((n + 1))
	is "$(stat_of a hashed_by_sums)" "$n" "$size B written backwards: hashed from its blocks' sums"
	is "$(xattr xxh3 "$T/a/0/1/o$size")" "$(xxh3_of "$T/o$size")" "... its xxh3 is the bytes'"
	ok "... and b pulls it byte-exact, each chunk as a's sums say" cmp "$T/o$size" "$T/b/0/1/o$size"
	rm -f "$T/o$size"
done
is "$(stat_of b checksum_failures)" 0 "no chunk b pulled failed its sum"

# sums that stop coming halfway (a GPU whose sums came out wrong stops
# giving any): the object is hashed again from its bytes
stop_node a
OMNIFS_TEST_CPU_SUMS=2 start_node a "config=$T/omni.yaml,node=a,pool=host:128MiB"
ok "a is back, its second batch of sums to fail" wait_until 10 peers_up
backwards half $((40 * M + 9))
is "$(stat_of a hashed_by_sums)" 0 "40 MiB + 9 B, its sums cut off after 32 MiB: not hashed by sums"
is "$(xattr xxh3 "$T/a/0/1/half")" "$(xxh3_of "$T/half")" "... its xxh3 the bytes', hashed from them instead"
ok "... and b pulls it byte-exact, each chunk as a's sums say" cmp "$T/half" "$T/b/0/1/half"
is "$(stat_of b checksum_failures)" 0 "... none failed"

dd if=/dev/urandom of="$T/a/0/1/small" bs=64K count=15 status=none
is "$(stat_of a hashed_by_sums)" 0 "an object under 1 MiB: hashed as it always was, not by sums"
is "$(stat_of b hashed_by_sums)" 0 "b, without OMNIFS_TEST_CPU_SUMS, takes no sums of a host pool"
is "$(stat_of b checksum_failures)" 0 "... and no chunk b pulled failed its sum"
done_testing
