#!/bin/bash
# Options and config (SPEC §2, §7): a bad one is a one-line error naming it,
# exit status 2, nothing mounted; the command line wins over the file.
. "$(dirname "$0")/../lib.sh"

mkdir -p "$T/m"
# refused CMDLINE-OPTS NEEDLE: exit 2, one line naming NEEDLE, no mount
refused() {
	"$B/omnifs" -o "$1" "$T/m" >"$T/err" 2>&1
	local rc=$?
	local lines; lines=$(wc -l <"$T/err")
	[ "$rc" = 2 ] && [ "$lines" = 1 ] && grep -qF -- "$2" "$T/err" && ! is_mounted "$T/m" ||
		{ echo "rc=$rc lines=$lines: $(cat "$T/err")"; return 1; }
}
ok "pool=host:12Q refused" refused pool=host:12Q "pool=host:12Q"
ok "pool=host:1 refused, saying the least there is" refused pool=host:1 "at least 4K"
ok "wait_ms=-5 refused" refused wait_ms=-5 "wait_ms=-5"
ok "readers=many refused" refused readers=many "readers=many"
ok "cleanup_hold_s=-1 refused" refused cleanup_hold_s=-1 "cleanup_hold_s=-1"
ok "cleanup_hold_s=86401 refused" refused cleanup_hold_s=86401 "expected 0 to 86400"
ok "transport=udp refused" refused transport=udp "transport=udp"
ok "listen=nohost refused" refused listen=nohost "listen=nohost"
ok "node=.x refused" refused node=.x "node=.x"
ok "unknown FUSE option refused" refused frobnicate "frobnicate"
# GPU pools: the driver is loaded at run time (transport/gpu.c); a build
# without CUDA's headers, a machine without the driver, or with only the
# toolkit's stub of it, is told so.
stub=${CUDA_HOME:-/usr/local/cuda}/lib64/stubs/libcuda.so
if grep -q "built without CUDA" "$B/omnifs"; then
	ok "a build without CUDA refuses a pinned pool, naming option and reason" \
		refused pool=pinned:1G "option 'pool=pinned:1GiB': this omnifs was built without CUDA"
	ok "... and a cuda pool likewise" refused pool=cuda:0:1G \
		"option 'pool=cuda:0:1GiB': this omnifs was built without CUDA"
	skip "a build without CUDA never loads a driver, stub or not"
elif ldconfig -p | grep -q 'libcuda\.so\.1 '; then
	skip "this machine has an NVIDIA driver (tests/cuda covers its pools)"
	skip "this machine has an NVIDIA driver"
	skip "this machine has an NVIDIA driver"
else
	ok "pinned pool without a driver refused, naming option and reason" refused pool=pinned:1G \
		"option 'pool=pinned:1GiB': no NVIDIA driver on this machine (libcuda.so.1"
	ok "cuda pool without a driver refused likewise" refused pool=cuda:0:1G \
		"option 'pool=cuda:0:1GiB': no NVIDIA driver"
	if [ -f "$stub" ]; then
		mkdir -p "$T/stub" && ln -s "$stub" "$T/stub/libcuda.so.1"
		stub_refused() { LD_LIBRARY_PATH="$T/stub" refused "$@"; }
		ok "... and with the toolkit's stub as the driver, the driver's own answer" \
			stub_refused pool=pinned:1G "the NVIDIA driver does not start: CUDA error (34)"
	else
		skip "no CUDA toolkit stub here"
	fi
fi
if [ "$(cat /sys/class/infiniband/*/ports/*/state 2>/dev/null | grep -c ACTIVE)" = 0 ]; then
	ok "transport=rdma without an RDMA device refused" refused transport=rdma "transport=rdma"
else
	skip "this machine has an active RDMA device"
fi
big=$(( $(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) * 2 / 1048576 + 1 ))GiB
ok "a pool twice the machine's memory ($big) refused before a byte is touched" \
	refused "pool=host:$big" "does not fit in this machine's available memory"
ok "pool=host:1000TiB refused" refused pool=host:1000TiB "pool=host:1000TiB"
printf 'wait_ms: 100\npool: host:1000TiB\n' >"$T/huge.yaml"
ok "... and from a config file, with file:line" refused "config=$T/huge.yaml" "$T/huge.yaml:2:"
printf 'pool: host:64M\nwait_ms: 100\npool: host:32M\n' >"$T/dup.yaml"
ok "a key given twice refused with both lines" refused "config=$T/dup.yaml" \
	"$T/dup.yaml:3: 'pool' is given twice (first at line 1)"
printf 'wait_ms: &w 100\nreaders: *w\n' >"$T/alias.yaml"
ok "an alias refused at its own line" refused "config=$T/alias.yaml" "$T/alias.yaml:2: YAML aliases"
$SYSPY -c "
print('nodes:')
for i in range(5000):
    print('  n%d: { addr: 10.%d.%d.1:7070 }' % (i, i >> 8, i & 255))" >"$T/many.yaml"
ok "5000 nodes refused" refused "config=$T/many.yaml" "'nodes' has more than 4096 entries"
{ echo "wait_ms: 100"; head -c $((2 << 20)) /dev/zero | tr '\0' '#'; echo; } >"$T/huge2.yaml"
ok "a 2 MiB config file refused" refused "config=$T/huge2.yaml" "a config file may have at most 1048576"
ok "missing config file refused" refused config=/nonexistent/omnifs.yaml "/nonexistent/omnifs.yaml"
printf 'pool: host:64M\nwait_ms: 100\nfrobs: 3\n' >"$T/bad.yaml"
ok "unknown key refused with file:line" refused "config=$T/bad.yaml" "$T/bad.yaml:3: unknown option 'frobs'"
printf 'pool: host:64M\nedges:\n  "0->1": { readers: x }\n' >"$T/bad2.yaml"
ok "bad edge value refused with file:line" refused "config=$T/bad2.yaml" "$T/bad2.yaml:3:"
printf 'pool: [unclosed\n' >"$T/bad3.yaml"
ok "YAML syntax error refused with file:line" refused "config=$T/bad3.yaml" "$T/bad3.yaml:"
printf 'nodes:\n  a: { addr: 127.0.0.1:7070 }\n' >"$T/nodes.yaml"
ok "a node missing from nodes refused" refused "config=$T/nodes.yaml,node=zzz" "node 'zzz' is not among its nodes"
# Without node=, the host name says which node: whole, or its first label.
as_host() { local h=$1; shift; unshare -u sh -c 'hostname "$1" && shift && exec "$@"' - "$h" "$@"; }
if as_host a.example.com true 2>/dev/null; then
	ok "a host named a.example.com is node a of a config that says a" \
		as_host a.example.com "$B/omnifs" -o "config=$T/nodes.yaml" "$T/m"
	is "$(health m "d['node']")" a "... so its health says"
	fusermount3 -u "$T/m"
	is "$(as_host b.example.com "$B/omnifs" -o "config=$T/nodes.yaml" "$T/m" 2>&1; echo "exit $?")" \
	   "omnifs: $T/nodes.yaml: node 'b.example.com' is not among its nodes (set node=NAME)
exit 2" "a host named b.example.com is refused, by its whole name"
	ok "node=a.example.com is refused: a name given is taken whole" \
		refused "config=$T/nodes.yaml,node=a.example.com" "node 'a.example.com' is not among its nodes"
else
	skip "no UTS namespace here"; skip "no UTS namespace"; skip "no UTS namespace"; skip "no UTS namespace"
fi
ok "a relative state_dir refused" refused state_dir=state "option 'state_dir=state': expected an absolute path"
ok "a bad rdma_stage refused" refused rdma_stage=lots "option 'rdma_stage=lots': expected 0 or a SIZE like 256MiB"
new_secret "$T/secret"
read -r PA PB < <(free_ports 2)
printf 'secret_file: %s\ntransport: tcp\nnodes:\n  a: { addr: 127.0.0.1:%s }\n  b: { addr: 127.0.0.1:%s }\n' \
	"$T/secret" "$PA" "$PB" >"$T/two.yaml"
ok "a state_dir that cannot be made refused" refused "config=$T/two.yaml,node=a,state_dir=/proc/omnifs" \
	"option 'state_dir=/proc/omnifs': No such file or directory"

"$B/omnifs" "$T/nonexistent-dir" >"$T/err" 2>&1
is "$?" "2" "missing mount point: exit 2"
is "$("$B/omnifs" 2>&1; echo "exit $?")" "omnifs: no mount point (try omnifs -h)
exit 2" "no mount point given: one line, exit 2"
mkdir -p "$T/m2"
is "$("$B/omnifs" "$T/m" "$T/m2" 2>&1; echo "exit $?")" "omnifs: unexpected argument '$T/m2'
exit 2" "two mount points: the second named, exit 2"
ok "... and nothing mounted" sh -c "! grep -q ' $T/m' /proc/mounts"
"$B/omnifs" -h >"$T/out" 2>&1
ok "-h prints usage" grep -q "usage: omnifs" "$T/out"
ok "-V prints the version" sh -c "'$B/omnifs' -V | grep -q '^omnifs [0-9]'"
# Every program answers --help with its usage, on stdout, exit 0.
for p in "$B/omnifs" "$B/mount.omnifs" "$B/omnikv" "$B"/tools/* "$B"/bench/*; do
	[ -x "$p" ] || continue
	ok "${p#"$B"/} --help: its usage" sh -c "'$p' --help 2>/dev/null | grep -q '^usage: '"
done

# The file sets wait_ms and readers, the command line overrides wait_ms.
printf 'pool: host:16M\nwait_ms: 111\nreaders: 3\nttl_s: 0\ncleanup_hold_s: 2\nedges:\n  "0->1": { readers: 2 }\n' >"$T/good.yaml"
start_node a "config=$T/good.yaml,wait_ms=222"
ok "command line wins: wait_ms 222" grep -q "^wait_ms: 222$" "$T/a/.omni/config"
ok "file applies: readers 3" grep -q "^readers: 3$" "$T/a/.omni/config"
ok "file applies: pool 16MiB" grep -q "^pool: host:16MiB$" "$T/a/.omni/config"
ok "edge rule shown" grep -qF '"0->1": { readers: 2 }' "$T/a/.omni/config"
echo v >"$T/a/0/1/k"
is "$(xattr readers "$T/a/0/1/k")" "2" "edge rule applies to its edge"
echo v >"$T/a/0/2/k"
is "$(xattr readers "$T/a/0/2/k")" "3" "other edges get the default"

# cleanup_hold_s: how long a node refuses new objects of a request it
# cleaned up (README, "Cleaning up a request"); 2 s here.
ok "file applies: cleanup_hold_s 2" grep -q "^cleanup_hold_s: 2$" "$T/a/.omni/config"
is "$(clean_req a r1)" "0 0" "a cleanup of r1"
( echo late >"$T/a/0/1/r1_late" ) 2>"$T/late"
ok "... a put of its key right after it: refused, Operation canceled" grep -q "Operation canceled" "$T/late"
put_late() { ( echo late >"$T/a/0/1/r1_late" ) 2>/dev/null; }
ok "... and taken once its 2 s are over" wait_until 10 put_late
is "$(cat "$T/a/0/1/r1_late")" late "... and read"
done_testing
