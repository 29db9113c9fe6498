# tests/cuda/lib.sh - what the GPU tests share, sourced after tests/lib.sh:
# SKIP where there is no CUDA device; objects of odd sizes, written in odd
# pieces and read back; a pool that is full; two nodes.
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU 0'; then
	echo "1..0 # SKIP no CUDA device"
	exit 0
fi
diag "$(nvidia-smi -L | head -1)"
export PYTHONPATH=$SRC/contrib/python
HPY=$($SYSPY -c "import xxhash" 2>/dev/null && echo "$SYSPY" || echo "$PY")  # one with xxhash

# xxh3_is FILE OBJ DESC: OBJ's user.omni.xxh3 is what an independent hash
# of FILE's bytes says (SKIP where no Python has xxhash)
xxh3_is() {
	if $HPY -c "import xxhash" 2>/dev/null; then
		is "$(xattr xxh3 "$2")" "$($HPY -c "import sys, xxhash
print(xxhash.xxh3_64_hexdigest(open(sys.argv[1], 'rb').read()))" "$1")" "$3"
	else
		skip "no xxhash module for an independent hash"
	fi
}

# put SIZE NAME NODE: SIZE random bytes in $T/NAME, written to
# NODE/0/1/NAME in pieces of 777,777 bytes (odd sizes, odd offsets)
put() {
	head -c "$1" /dev/urandom >"$T/$2"
	dd if="$T/$2" of="$T/$3/0/1/$2" bs=777777 status=none
}

# place SIZE NAME NODE: SIZE random bytes in $T/NAME, which a second
# process places into NODE's GPU pool as NODE/0/1/NAME itself
# (OMNIFS_IOC_CUDA_PLACE, then its own copy in); the close publishes
place() {
	$PY - "$T/$3/0/1/$2" "$T/$2" "$1" <<'PYEOF'
import os, sys
from omnifs import cuda
data = os.urandom(int(sys.argv[3]))
open(sys.argv[2], "wb").write(data)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
cuda.put_bytes(fd, data)
os.close(fd)
PYEOF
}

# odd_reads NAME PATH: PATH read at odd offsets, out of order, is $T/NAME
odd_reads() {
	$PY - "$T/$1" "$2" <<'PYEOF'
import os, sys
src, obj = open(sys.argv[1], "rb").read(), sys.argv[2]
fd = os.open(obj, os.O_RDONLY)
n = len(src)
for off in sorted({0, 1, n // 3, n // 2 + 7, max(0, n - 4099), max(0, n - 1)}, reverse=True):
    for ln in (1, 4097, 1 << 20):
        if os.pread(fd, ln, off) != src[off:off + ln]:
            sys.exit("differs at %d+%d" % (off, ln))
os.close(fd)
PYEOF
}

# round_trips NODE: objects of 1 B to 1 GiB through NODE's pool (readers 0)
round_trips() {
	local size
	for size in 1 4095 4097 $(( (1 << 20) + 13 )) $(( (64 << 20) - 1 )) $(( 1 << 30 )); do
		put "$size" "o$size" "$1"
		ok "$size B written in odd pieces reads back byte-exact" cmp "$T/o$size" "$T/$1/0/1/o$size"
		ok "... and at odd offsets, out of order" odd_reads "o$size" "$T/$1/0/1/o$size"
		is "$(xattr size "$T/$1/0/1/o$size")" "$size" "... user.omni.size"
		xxh3_is "$T/o$size" "$T/$1/0/1/o$size" "... its xxh3, as an independent hash says"
		rm -f "$T/$1/0/1/o$size" "$T/o$size"
	done
}

# backwards NODE: an object written in 1 MiB pieces from its end to its
# start (a write that does not extend the hashed prefix goes to the
# hasher, which reads the pool back) has the xxh3 an independent hash says
backwards() {
	head -c $(( (9 << 20) + 5 )) /dev/urandom >"$T/back"
	$PY - "$T/back" "$T/$1/0/1/back" <<'PYEOF'
import os, sys
src = open(sys.argv[1], "rb").read()
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
for off in reversed(range(0, len(src), 1 << 20)):
    os.pwrite(fd, src[off:off + (1 << 20)], off)
os.close(fd)
PYEOF
	ok "an object written backwards reads back byte-exact" cmp "$T/back" "$T/$1/0/1/back"
	xxh3_is "$T/back" "$T/$1/0/1/back" "... and its xxh3 is the bytes'"
	rm -f "$T/$1/0/1/back" "$T/back"
}

# full NODE MIB: an object of MIB MiB does not fit NODE's pool
full() {
	local before
	used_is() { [ "$(health "$1" "d['pool']['used']")" = "$2" ]; }
	before=$(health "$1" "d['pool']['used']")
	dd if=/dev/zero of="$T/$1/0/1/full" bs=1M count="$2" 2>"$T/dd.err"
	ok "an object larger than the pool: ENOSPC" grep -q "No space left on device" "$T/dd.err"
	ok "... nothing of it published" sh -c "! [ -e '$T/$1/0/1/full' ]"
	ok "... and the pool as it was" wait_until 5 used_is "$1" "$before"
}

# two_nodes POOL_A POOL_B: nodes a and b on loopback ports, TCP between
# them, a with POOL_A and b with POOL_B, seeing each other
two_nodes() {
	loopback_cluster 10000 a b
	echo "transport: tcp" >>"$T/omni.yaml"
	start_node a "config=$T/omni.yaml,node=a,pool=$1"
	start_node b "config=$T/omni.yaml,node=b,pool=$2"
	peers_up() { [ "$(health b "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
	ok "a ($1) and b ($2) see each other" wait_until 10 peers_up
}

# rdma_pair IP: $T/omni.yaml for nodes a (stage "0") and b (stage "1")
# on two free ports of IP, the address of an RDMA device's interface, and
# a mounted with a host pool; the test mounts b with its GPU pool.
rdma_pair() {
	local pa pb
	read -r pa pb < <(free_ports 2)
	new_secret "$T/secret"
	cat >"$T/omni.yaml" <<YAML
secret_file: $T/secret
readers: 0
nodes:
  a: { addr: $1:$pa, stages: ["0"] }
  b: { addr: $1:$pb, stages: ["1"] }
YAML
	start_node a "config=$T/omni.yaml,node=a,pool=host:256MiB"
}

# peer_is NODE PEER TRANSPORT: NODE sees PEER up, moving bytes by TRANSPORT
peer_is() {
	[ "$(health "$1" "[p['state'] + ' ' + p['transport'] for p in d['peers'] if p['name'] == '$2'][0]")" = "up $3" ]
}
