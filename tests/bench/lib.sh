# tests/bench/lib.sh - what the benchmarks share, sourced by bench.sh, gpu.sh and
# rdma.sh (which runs in the RDMA guest, where the repository is shared at
# the same path): a scratch directory $T and the mounts in MNTS, undone at
# exit however the run ends, and the helpers that turn runs into figures.
T=$(mktemp -d "/tmp/omnifs-${BENCH_NAME:-bench}.XXXXXX")
MNTS=()
cleanup() {
	for m in "${MNTS[@]}"; do fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
	jobs -p | xargs -r kill 2>/dev/null; wait 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# free_ports N [ADDR]: N TCP ports nobody listens on now (on ADDR, or
# 127.0.0.1), on one line
free_ports() {
	python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind((sys.argv[2], 0))
print(*[s.getsockname()[1] for s in ss])' "$1" "${2-127.0.0.1}"
}
wait_mount() { for _ in $(seq 500); do grep -q " $1 " /proc/mounts && return 0; sleep 0.02; done; return 1; }
# warmed MNT...: seconds from now until every MNT's pool is warm (README,
# "Mounting"), so that no figure after includes its warming
warmed() {
	local t0 m
	t0=$(date +%s%N)
	for m; do
		for _ in $(seq 1200); do grep -q '"warming":true' "$m/.omni/health" || break; sleep 0.1; done
	done
	awk -v d=$(( $(date +%s%N) - t0 )) 'BEGIN { printf "%.1f", d / 1e9 }'
}
# huge MNT: whether MNT's pool is mapped with huge pages, as its health says
huge() { grep -o '"huge_pages":[a-z]*' "$1/.omni/health" | sed 's/.*://; s/true/huge pages/; s/false/small pages/'; }
best() { sort -g | tail -1; }
# best_low: "best lowest" - the lowest says how noisy the machine was
best_low() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print hi, lo }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# pct FILE...: "median p90 p99" of the samples in FILEs, one a line (as
# tests/tools/handoff picks them from its own)
pct() { cat "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int(NR / 2) + 1], v[int(NR * 9 / 10) + 1], v[int(NR * 99 / 100) + 1] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%5.0f%%", (b > 0 ? 100 * a / b : 0) }'; }
# dd_gibs DD-ARGS...: GiB/s by dd's own clock (which runs through the close)
dd_gibs() {
	LC_ALL=C dd "$@" 2>&1 | awk '/copied/ { for (i = 1; i <= NF; i++) if ($(i+1) == "s,") s = $i;
		printf "%.3f\n", $1 / s / 1073741824 }'
}

# write_read DIR NAME MIB: "write read" GiB/s, best of ROUNDS
write_read() {
	local w r i
	w=$(for i in $(seq "$ROUNDS"); do
		rm -f "$1/$2" 2>/dev/null
		dd_gibs if=/dev/zero of="$1/$2" bs=1M count="$3"
	done | best)
	r=$(for i in $(seq "$ROUNDS"); do dd_gibs if="$1/$2" of=/dev/null bs=1M; done | best)
	rm -f "$1/$2" 2>/dev/null
	echo "$w $r"
}
