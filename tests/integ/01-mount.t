#!/bin/bash
# Mounting, .omni/ (SPEC §3), unmounting cleanly.
. "$(dirname "$0")/../lib.sh"

start_node a "pool=host:32M,node=alpha"
M=$T/a
ok "the mount is listed as fuse.omnifs" is_mounted "$M"
is "$(ls -A "$M")" ".omni" "an empty node lists only .omni"
is "$(ls "$M/.omni" | tr '\n' ' ')" "config health metrics stats transfers " ".omni has its five files"
ok "health is valid JSON with node, version, pool, peers, objects, inflight" $PY -c "
import json; d = json.load(open('$M/.omni/health'))
assert d['node'] == 'alpha' and d['version'] and d['peers'] == []
assert d['pool']['kind'] == 'host' and d['pool']['size'] == 32 << 20
assert d['pool']['used'] + d['pool']['free'] == d['pool']['size']
assert d['objects'] == 0 and d['inflight'] == 0"
# Its pages' first touches are made in the background (README, "Mounting"):
# the whole 32 MiB, by a thread that then ends.
warm_done() { [ "$(health a "d['pool']['warming']")" = False ] &&
	! grep -qx omni-warm /proc/"${NODE_PID[a]}"/task/*/comm; }
ok "the pool is warmed by a thread of its own, which ends; health stops saying warming" \
	wait_until 20 warm_done
# The pool is a file that workers map (README, "Same-node hand-over"), and
# once warm has huge pages or not as the kernel counts them (warming
# collapses it into them where the kernel can).
ok "health: the pool is shared, with huge pages as the kernel counts them" $PY -c "
import json; d = json.load(open('$M/.omni/health'))['pool']
kb = [int(l.split()[1]) for l in open('/proc/${NODE_PID[a]}/smaps_rollup') if l.startswith('ShmemPmdMapped:')]
assert d['shared'] is True and d['huge_pages'] == (kb[0] << 10 >= d['size'] // 2), (d, kb)"
# A crash's core leaves the pool out (README, "Mounting"): "dd".
ok "the pool is left out of the daemon's core dumps" $PY -c "
import json, re
size = json.load(open('$M/.omni/health'))['pool']['size']
maps = re.findall(r'^([0-9a-f]+)-([0-9a-f]+) .*memfd:omnifs-pool.*\n(?:[A-Z].*\n)*?VmFlags:(.*)',
                  open('/proc/${NODE_PID[a]}/smaps').read(), re.M)
flags = [f.split() for lo, hi, f in maps if int(hi, 16) - int(lo, 16) == size]
assert flags and 'dd' in flags[0], maps"
ok "stats are 'name: value' lines" $PY -c "
import re; lines = open('$M/.omni/stats').read().splitlines()
assert lines and all(re.fullmatch(r'[a-z_]+: \d+', l) for l in lines), lines"
for k in puts gets published consumed expired removed bytes_written bytes_read bytes_pulled bytes_served waiters errors; do
	ok "stats has $k" grep -q "^$k: " "$M/.omni/stats"
done
echo data > "$M/x/y/k"
if /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
	ok "metrics parse as Prometheus text exposition" /usr/bin/python3 -c "
from prometheus_client.parser import text_string_to_metric_families as parse
fams = {f.name: f for f in parse(open('$M/.omni/metrics').read())}
assert fams['omnifs_puts'].samples[0].value == 1, fams['omnifs_puts']
assert fams['omnifs_publish_seconds'].type == 'histogram'
assert any(s.name.endswith('_bucket') for s in fams['omnifs_publish_seconds'].samples)"
else
	skip "python3-prometheus-client not installed"
fi
ok "config shows the effective settings" grep -q "^pool: host:32MiB$" "$M/.omni/config"
ok "config names the embedded default" grep -q "^config: (embedded default)$" "$M/.omni/config"
exec 7<"$M/x/y/k"
ok "transfers lists an open object" grep -q "^x/y/k local out 0/5 " "$M/.omni/transfers"
exec 7<&-
# a key may hold a space, a newline or a backslash: one line still, escaped
k=$'a b\nc\\d'
printf data >"$M/x/y/$k"
exec 7<"$M/x/y/$k"
ok "transfers escapes a key's space, newline and backslash" grep -qxF 'x/y/a\040b\012c\134d local out 0/4 0.0' "$M/.omni/transfers"
ok "the key's tail forges no line of its own" sh -c "! grep -q '^c' '$M/.omni/transfers'"
exec 7<&-
rm "$M/x/y/$k"
ok "df shows the pool size" sh -c "df -B1 '$M' | awk 'NR==2 { exit !(\$2 == 32 * 1048576) }'"
is "$(pyerr "open(M + '/.omni/stats', 'w')")" "EACCES" ".omni files are read-only"

# SPEC §9: a user without permission gets EACCES; allow_other lets others in
chmod 755 "$T"
if id nobody >/dev/null 2>&1 && command -v runuser >/dev/null; then
	echo secret >"$M/x/y/other"
	out=$(runuser -u nobody -- cat "$M/x/y/other" 2>&1)
	ok "another user is refused without allow_other ($out)" sh -c "echo '$out' | grep -q 'Permission denied'"
	start_node o "pool=host:16M,allow_other"
	echo shared >"$T/o/x/y/k"
	is "$(runuser -u nobody -- cat "$T/o/x/y/k" 2>&1)" "shared" "with allow_other another user reads"
	ok "allow_other is in the effective config" grep -q "^allow_other: true$" "$T/o/.omni/config"
	# the same-node hand-over reaches the daemon's memory: not for others
	echo theirs >"$T/o/x/y/k"
	is "$(runuser -u nobody -- env PYTHONPATH="$SRC/contrib/python" $SYSPY - "$T/o/x/y/k" <<'EOF'
import errno, fcntl, os, sys
from omnifs import direct
fd, out = os.open(sys.argv[1], os.O_RDONLY), []
for cmd, size in ((direct.WHERE, direct.SIZE), (direct.SHARE, direct._SHR.size)):
    try:
        fcntl.ioctl(fd, cmd, bytearray(size), True)
        out.append("OK")
    except OSError as e:
        out.append(errno.errorcode[e.errno])
print(*out)
EOF
)" "EPERM EPERM" "another user may not have the pool's place (WHERE) or file (SHARE)"
else
	skip "no 'nobody' user or runuser here"; skip "no 'nobody' user"; skip "no 'nobody' user"
	skip "no 'nobody' user"
fi
pid=${NODE_PID[a]}
kill -TERM "$pid"
ok "SIGTERM unmounts and exits" wait_until 10 sh -c "! kill -0 $pid && ! grep -q ' $M ' /proc/mounts"
wait "$pid"; is "$?" "0" "daemon exit status 0"
unset "NODE_PID[a]"

mkdir -p "$T/bg"
ok "without -f the daemon returns once mounted" "$B/omnifs" -o pool=host:16M "$T/bg"
ok "and it is mounted" is_mounted "$T/bg"
ok "it serves" sh -c "echo hi > '$T/bg/a/b/c' && [ \"\$(cat '$T/bg/a/b/c')\" = hi ]"
ok "fusermount3 -u unmounts it" fusermount3 -u "$T/bg"

# --- what is at the mount point already ---------------------------------------
start_node k pool=host:16M
is "$("$B/omnifs" -o pool=host:16M "$T/k" 2>&1; echo "exit $?")" \
   "omnifs: mount point '$T/k': omnifs is mounted there already (fusermount3 -u $T/k to replace it)
exit 2" "a second daemon on a live mount: refused, in one line"
ok "... and the first still serves" sh -c "echo one > '$T/k/a/b/c' && [ \"\$(cat '$T/k/a/b/c')\" = one ]"
kill_k() { kill -9 "${NODE_PID[k]}"; wait "${NODE_PID[k]}" 2>/dev/null; unset "NODE_PID[k]"; }
kill_k
is "$(stat -f -c %T "$T/k" 2>&1)" "stat: cannot read file system information for '$T/k': Transport endpoint is not connected" \
   "a daemon killed by SIGKILL leaves its mount dead"
# remount_k MOUNTPOINT WORD WHAT: a new daemon at MOUNTPOINT ($T/k, however
# written) over k's dead mount takes it away, says so, and serves WORD.
remount_k() {
	"$B/omnifs" -o pool=host:16M "$1" 2>"$T/k.err"
	is "$?" 0 "$3"
	ok "... saying it took the dead mount away" \
	   grep -qx "omnifs: $T/k held the mount of an omnifs daemon that is gone (killed?); unmounted it" "$T/k.err"
	ok "... and serves, mounted once" sh -c "echo $2 > '$T/k/a/b/c' && [ \"\$(cat '$T/k/a/b/c')\" = $2 ] &&
		[ \$(grep -c ' $T/k ' /proc/mounts) = 1 ]"
	fusermount3 -u "$T/k"
}
remount_k "$T/k" two "a new daemon there mounts"
# The same with a slash at the end of the mount point: realpath then looks
# at the dead mount itself, and its ENOTCONN must not stop the new daemon.
start_node k pool=host:16M
kill_k
remount_k "$T/k/" three "a mount point written with a / at its end, over a dead mount: mounts"
mkdir -p "$T/other"
"$B/bench/ceilingfs" "$T/other" 16 >/dev/null 2>&1 &
other=$!
if wait_until 10 grep -q " $T/other fuse " /proc/mounts; then
	kill -9 "$other"; wait "$other" 2>/dev/null
	is "$("$B/omnifs" -o pool=host:16M "$T/other" 2>&1; echo "exit $?")" \
	   "omnifs: mount point '$T/other': a dead fuse mount is there (Transport endpoint is not connected); unmount it first
exit 2" "another filesystem's dead mount is left to its owner"
	umount -l "$T/other"
else
	skip "ceilingfs did not mount"
fi
done_testing
