#!/bin/bash
# 23-resolve.t - peers named by host name (SPEC §7).  A peer's name is
# looked up at start and again each time the node dials it while it is
# down: a node mounts though a peer's name does not resolve yet (a
# Kubernetes pod's DNS record comes with the pod) and finds the peer once
# it does, and a peer that comes back at another address (a pod
# rescheduled) is found there.  Each daemon runs in a mount namespace of
# its own, with the test's hosts file over /etc/hosts; the test reaches
# its mount through /proc/PID/root.
. "$(dirname "$0")/../lib.sh"

command -v unshare >/dev/null || { skip "no unshare here"; done_testing; exit; }
read -r PA PB < <(free_ports 2)
new_secret "$T/secret"
cat >"$T/omni.yaml" <<YAML
secret_file: $T/secret
pool: host:64MiB
readers: 0
wait_ms: 10000
nodes:
  a: { addr: omni-a.test:$PA, stages: ["0"] }
  b: { addr: omni-b.test:$PB, stages: ["1"] }
YAML
printf '127.0.0.1 omni-a.test\n' >"$T/hosts"      # b's name: not yet

# [CONF=FILE] node_ns NAME: starts NAME in a mount namespace where $T/hosts is
# /etc/hosts, mounted at $T/mnt/NAME there; $T/NAME leads to the mount.
declare -A NS_PID=()
node_ns() {
	local name=$1
	mkdir -p "$T/mnt/$name"
	unshare -m sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' - "$T/hosts" \
		"$B/omnifs" -f -o "config=${CONF:-$T/omni.yaml},node=$name" "$T/mnt/$name" >"$T/$name.log" 2>&1 &
	NS_PID[$name]=$!
	rm -f "$T/$name"
	ln -s "/proc/${NS_PID[$name]}/root$T/mnt/$name" "$T/$name"
	wait_until "$MOUNT_WAIT_S" grep -q " $T/mnt/$name fuse.omnifs " "/proc/${NS_PID[$name]}/mounts" ||
		{ cat "$T/$name.log"; bail "node $name did not mount"; }
}
# stop_ns NAME: SIGTERM, as systemd stops it; the mount goes with it.
stop_ns() {
	local pid=${NS_PID[$1]}
	kill "$pid" 2>/dev/null
	wait_until 10 sh -c "! kill -0 $pid 2>/dev/null" || kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	unset "NS_PID[$1]"
}
stop_all_ns() { local n; for n in "${!NS_PID[@]}"; do stop_ns "$n"; done; }
CLEANUP_HOOKS+=(stop_all_ns)
up() { [ "$(health "$1" "[p['state'] for p in d['peers']][0]")" = up ]; }
both_up() { up a && up b; }

# --- a peer's name that does not resolve yet ------------------------------------
node_ns a
ok "a mounts though b's name does not resolve" test -d "$T/a/.omni"
ok "... and says so, once" test "$(grep -c "peer b (omni-b.test:$PB): cannot resolve its name" "$T/a.log")" = 1
down_why() { health "$1" "[p.get('down_why', '') for p in d['peers']][0]"; }
is "$(down_why a)" "cannot resolve its name (Name or service not known)" "... and so does its health"
printf '127.0.0.1 omni-a.test\n127.0.0.1 omni-b.test\n' >"$T/hosts"
node_ns b
ok "once it resolves, a and b see each other up" wait_until 10 both_up
ok "... a's log says where b is" grep -q "peer b (omni-b.test:$PB) is at 127.0.0.1:$PB$" "$T/a.log"
head -c 3000000 /dev/urandom >"$T/y"
cp "$T/y" "$T/a/0/1/one"
ok "b reads a's object" cmp "$T/y" "$T/b/0/1/one"
cp "$T/y" "$T/b/1/0/two"
ok "a reads b's object" cmp "$T/y" "$T/a/1/0/two"

# --- the peer comes back at another address ---------------------------------------
stop_ns b
refused() { [ "$(down_why a)" = "connecting: Connection refused" ]; }
ok "b stopped: a's health says why it is down" wait_until 5 refused
printf '127.0.0.1 omni-a.test\n127.0.0.2 omni-b.test\n' >"$T/hosts"
node_ns b
ok "b, back at 127.0.0.2, and a see each other up" wait_until 10 both_up
ok "... a's log says b moved" \
   grep -q "peer b (omni-b.test:$PB) is at 127.0.0.2:$PB now (was 127.0.0.1:$PB)" "$T/a.log"
cp "$T/y" "$T/a/0/1/three"
ok "b reads a's new object" cmp "$T/y" "$T/b/0/1/three"
cp "$T/y" "$T/b/1/0/four"
ok "a reads b's new object, from b's new address" cmp "$T/y" "$T/a/1/0/four"
is "$(health a "[p['addr'] for p in d['peers']][0]")" "omni-b.test:$PB" "a's health names b as configured"
is "$(down_why a)" "" "... and, b up, says no why"
ok "no node warned of a loopback address: all are on it" sh -c "! grep -q 'loopback' '$T/a.log' '$T/b.log'"

# --- a node's own name on loopback, a peer elsewhere ---------------------------------
stop_ns a
stop_ns b
printf '127.0.1.1 omni-a.test\n' >"$T/hosts"     # as Debian's installer maps the host's name
sed "s/omni-b.test:$PB/192.0.2.1:$PB/" "$T/omni.yaml" >"$T/far.yaml"
CONF=$T/far.yaml node_ns a
ok "a node bound to a loopback address, its peer elsewhere, says the peer cannot reach it" \
   grep -q "listen=omni-a.test:$PA is 127.0.1.1:$PA, a loopback address, and peer b (192.0.2.1:$PB) is elsewhere" "$T/a.log"

done_testing
