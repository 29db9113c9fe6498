#!/bin/bash
# tests/bench/nodes.sh BUILD - what a put costs as the cluster grows: a 4 KiB
# Mount.put (an O_CREAT|O_EXCL create, as every put of the connector) from
# node n0 to an edge whose reading stage lives on the last node, with 2 and
# with 8 daemons on loopback ports.  The put claims its publish at the one
# host of <to> (peer message CLAIM), one round trip whatever the cluster's
# size, so the ratio of 8 nodes to 2 is the figure (goal: <= 1.3x; several
# daemons share this machine's cores).  Daemons idle 20 ms before each put, as between
# requests; medians and p99 of 200.
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

# puts N: "median p99" in us of n0's puts to s0 -> s(N-1)
puts() {
	/usr/bin/python3 - "$PKG" "$T/$1/n0" "s$(($1 - 1))" <<'PY'
import os, sys, time
sys.path.insert(0, sys.argv[1])
import omnifs
m, to, d, xs = omnifs.Mount(sys.argv[2]), sys.argv[3], os.urandom(4096), []
for i in range(200):
    time.sleep(0.02)
    t = time.monotonic_ns()
    m.put("s0", to, "put-%d" % i, d)
    xs.append(time.monotonic_ns() - t)
xs.sort()
print("%.1f %.1f" % (xs[100] / 1e3, xs[197] / 1e3))
PY
}

cluster 2
read -r M2 P2 < <(puts 2)
cluster 8
read -r M8 P8 < <(puts 8)
printf '4 KiB put to an edge read on another node (O_EXCL: claimed at the host of <to>; 20 ms idle, 200 puts):\n'
printf '  2 nodes: median %.1f us  p99 %.1f us\n' "$M2" "$P2"
printf '  8 nodes: median %.1f us  p99 %.1f us  (%s of 2 nodes; goal <= 130%%)\n' "$M8" "$P8" \
	"$(ratio "$M8" "$M2" | tr -d ' ')"
