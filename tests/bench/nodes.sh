#!/bin/bash
# tests/bench/nodes.sh BUILD - what a put costs as the cluster grows: a 4 KiB
# Mount.put (an O_CREAT|O_EXCL create, as every put of the connector) from
# node n0 to an edge whose reading stage lives on the last node, with 2 and
# with 8 daemons on loopback ports.  The put claims its publish at the one
# host of <to> (peer message CLAIM), one round trip whatever the cluster's
# size, so the ratio of 8 nodes to 2 is the figure (goal: <= 1.3x; several
# daemons share this machine's cores).  Both clusters are up together and
# take the puts in turns; daemons idle 20 ms before each put, as between
# requests; medians and p99 of 200 each.
set -u
B=$1
BENCH_NAME=nodes . "$(dirname "$0")/lib.sh"
PKG=$(cd "$(dirname "$0")/../../contrib/python" && pwd)

# cluster N: N daemons n0..n(N-1) under $T/N, node i hosting stage si, all up
cluster() {
	local n=$1 i ports
	read -r -a ports < <(free_ports "$n")
	mkdir -p "$T/$n"
	head -c 48 /dev/urandom | base64 >"$T/$n/secret" && chmod 600 "$T/$n/secret"
	{ echo "secret_file: $T/$n/secret"; echo "pool: host:64MiB"; echo "readers: 0"; echo "nodes:"
	  for i in $(seq 0 $((n - 1))); do
		echo "  n$i: { addr: 127.0.0.1:${ports[$i]}, stages: [\"s$i\"] }"
	  done; } >"$T/$n/omni.yaml"
	for i in $(seq 0 $((n - 1))); do
		mkdir -p "$T/$n/n$i"
		"$B/omnifs" -f -o "config=$T/$n/omni.yaml,node=n$i" "$T/$n/n$i" 2>"$T/$n/n$i.log" &
		MNTS+=("$T/$n/n$i")
		wait_mount "$T/$n/n$i" || { cat "$T/$n/n$i.log"; exit 1; }
	done
	warmed $(for i in $(seq 0 $((n - 1))); do echo "$T/$n/n$i"; done) >/dev/null
	for _ in $(seq 500); do
		[ "$(grep -o '"state":"up"' "$T/$n/n0/.omni/health" | wc -l)" = $((n - 1)) ] && return 0
		sleep 0.02
	done
	echo "nodes: n0 does not see its $((n - 1)) peers up"; exit 1
}

# puts: "median p99 median p99" in us of n0's puts to s0 -> s(N-1) on the
# cluster of 2 and on the cluster of 8, one put on each in turn, so that a
# slow minute of the host falls on both alike (the ratio is the figure)
puts() {
	/usr/bin/python3 - "$PKG" "$T/2/n0" s1 "$T/8/n0" s7 <<'PY'
import os, sys, time
sys.path.insert(0, sys.argv[1])
import omnifs
ms = [(omnifs.Mount(sys.argv[2]), sys.argv[3], []), (omnifs.Mount(sys.argv[4]), sys.argv[5], [])]
d = os.urandom(4096)
for i in range(201):
    for m, to, xs in ms:
        time.sleep(0.02)
        t = time.monotonic_ns()
        m.put("s0", to, "put-%d" % i, d)
        if i:                   # the first of each: this process's warm-up
            xs.append(time.monotonic_ns() - t)
print(" ".join("%.1f %.1f" % (xs[100] / 1e3, xs[197] / 1e3) for xs in (sorted(x) for _, _, x in ms)))
PY
}

cluster 2
cluster 8
read -r M2 P2 M8 P8 < <(puts)
printf '4 KiB put to an edge read on another node (O_EXCL: claimed at the host of <to>; 20 ms idle, 200 puts on each, in turns):\n'
printf '  2 nodes: median %.1f us  p99 %.1f us\n' "$M2" "$P2"
printf '  8 nodes: median %.1f us  p99 %.1f us  (%s of 2 nodes; goal <= 130%%)\n' "$M8" "$P8" \
	"$(ratio "$M8" "$M2" | tr -d ' ')"
