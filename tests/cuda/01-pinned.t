#!/bin/bash
# 01-pinned.t - a pinned pool (SPEC §8): host memory that CUDA page-locks
# for every device, so that GPU copies in and out of it run by DMA.  On a
# machine with a CUDA device: it mounts and says so, objects from 1 B to
# 1 GiB of odd sizes, written in odd pieces, read back byte-exact at odd
# offsets, with the checksum an independent hash gives; a full pool is
# ENOSPC and takes nothing; another node reads a pinned pool's object and
# pulls into its own pinned pool.  A device pool is refused in one line
# until fs/ serves one.  Elsewhere: SKIP.
. "$(dirname "$0")/../lib.sh"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU 0'; then
	echo "1..0 # SKIP no CUDA device"
	exit 0
fi
diag "$(nvidia-smi -L | head -1)"
start_node a "pool=pinned:1200M,readers=0"
is "$(health a "d['pool']['kind']")" "pinned" ".omni/health says the pool is pinned"
ok "the log names the pool" grep -q "pool pinned" "$T/a.log"

# put SIZE NAME: SIZE random bytes in $T/NAME, written to a/0/1/NAME in
# pieces of 777,777 bytes (odd sizes, odd offsets)
put() {
	head -c "$1" /dev/urandom >"$T/$2"
	dd if="$T/$2" of="$T/a/0/1/$2" bs=777777 status=none
}
# reads back at odd offsets, out of order, and compares with the source
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
for size in 1 4095 4097 $(( (1 << 20) + 13 )) $(( (64 << 20) - 1 )) $(( 1 << 30 )); do
	put "$size" "o$size"
	ok "$size B written in odd pieces reads back byte-exact" cmp "$T/o$size" "$T/a/0/1/o$size"
	ok "... and at odd offsets, out of order" odd_reads "o$size" "$T/a/0/1/o$size"
	is "$(xattr size "$T/a/0/1/o$size")" "$size" "... user.omni.size"
	if $SYSPY -c "import xxhash" 2>/dev/null || $PY -c "import xxhash" 2>/dev/null; then
		hpy=$($SYSPY -c "import xxhash" 2>/dev/null && echo "$SYSPY" || echo "$PY")
		is "$(xattr xxh3 "$T/a/0/1/o$size")" \
		   "$($hpy -c "import sys, xxhash; print(xxhash.xxh3_64_hexdigest(open(sys.argv[1],'rb').read()))" "$T/o$size")" \
		   "... its xxh3, as an independent hash says"
	else
		skip "no xxhash module for an independent hash"
	fi
	rm -f "$T/a/0/1/o$size"
	[ "$size" -ge $((64 << 20)) ] && rm -f "$T/o$size"
done

used() { health a "d['pool']['used']"; }
used_is() { [ "$(used)" = "$1" ]; }
before=$(used)
dd if=/dev/zero of="$T/a/0/1/full" bs=1M count=1300 2>"$T/dd.err"
ok "an object larger than the pool: ENOSPC" grep -q "No space left on device" "$T/dd.err"
ok "... nothing of it published" sh -c "! [ -e '$T/a/0/1/full' ]"
ok "... and the pool as it was" wait_until 5 used_is "$before"

# --- across nodes: b pulls a's object into its own pinned pool (TCP) -------
stop_node a
loopback_cluster 10000 a b
echo "transport: tcp" >>"$T/omni.yaml"
start_node a "config=$T/omni.yaml,node=a,pool=pinned:256M"
start_node b "config=$T/omni.yaml,node=b,pool=pinned:256M"
peers_up() { [ "$(health b "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
ok "a and b, both pinned, see each other" wait_until 10 peers_up
put $((48 << 20)) x
ok "b reads a's 48 MiB object into its pinned pool, byte-exact" cmp "$T/x" "$T/b/0/1/x"
is "$(stat_of b bytes_pulled)" $((48 << 20)) "... pulled once, over TCP"

mkdir -p "$T/m"
"$B/omnifs" -o pool=cuda:0:64M "$T/m" >"$T/err" 2>&1
is "$?" 2 "a device pool: exit 2 ..."
ok "... one line naming the option and the reason" sh -c \
	"[ \$(wc -l <'$T/err') = 1 ] && grep -qF \"option 'pool=cuda:0:64MiB': device memory pools are not served yet\" '$T/err'"
done_testing
