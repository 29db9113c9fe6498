# tests/bench/lib.sh - what the benchmarks share, sourced by bench.sh and
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

wait_mount() { for _ in $(seq 500); do grep -q " $1 " /proc/mounts && return 0; sleep 0.02; done; return 1; }
best() { sort -g | tail -1; }
# best_low: "best lowest" - the lowest says how noisy the machine was
best_low() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print hi, lo }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%5.0f%%", (b > 0 ? 100 * a / b : 0) }'; }
