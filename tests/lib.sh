# lib.sh - TAP and mount helpers for the integration tests.
#
# Each test sources this, mounts real omnifs daemons under a temporary
# directory and checks them the way users do.  Whatever a test started is
# unmounted and killed on exit, pass or fail.

set -u
B=${OMNIFS_BUILD:-$(cd "$(dirname "$0")/../.." && pwd)/build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d /tmp/omnifs-test.XXXXXX)
SYSPY=/usr/bin/python3   # Debian's, with python3-prometheus-client and python3-xxhash
# Debian's too: the python3 on a user's PATH may be a pyenv shim, which
# takes 0.4 s to start, and a test that times a step would time that.
PY=${PYTHON:-$SYSPY}
# what tests and tools that speak the peer protocol by hand put in their frames
export PROTO_VERSION=$(sed -n 's/^#define PROTO_VERSION *\([0-9]*\).*/\1/p' "$SRC/transport/proto.h")
_n=0 _failed=0
declare -A NODE_PID=() NODE_NETNS=()
CLEANUP_HOOKS=()   # functions cleanup() runs after the daemons are stopped
SAN_REPORT='(Address|Leak|UndefinedBehavior)Sanitizer|runtime error:'   # grep -E: a sanitizer's report

# A failure's details go to stderr, as Test::More's do: prove shows a
# test's stderr, and only that, when it is not run verbose (make check).
ok() {  # ok DESC CMD...: passes if CMD exits 0; returns as it did
	local desc=$1; shift
	_n=$((_n + 1))
	if "$@" >"$T/.out" 2>&1; then
		echo "ok $_n - $desc"
	else
		echo "not ok $_n - $desc"
		sed 's/^/#   /' "$T/.out" | head -20 >&2
		_failed=$((_failed + 1))
		return 1
	fi
}

is() {  # is GOT WANT DESC
	_n=$((_n + 1))
	if [ "$1" = "$2" ]; then
		echo "ok $_n - $3"
	else
		echo "not ok $_n - $3"
		echo "#   got:  '$1'" >&2
		echo "#   want: '$2'" >&2
		_failed=$((_failed + 1))
		return 1
	fi
}

skip() { _n=$((_n + 1)); echo "ok $_n # SKIP $*"; }
diag() { echo "# $*"; }
done_testing() { echo "1..$_n"; [ "$_failed" = 0 ]; }
bail() { echo "Bail out! $*"; exit 1; }

# wait_until SECONDS CMD...: polls CMD every 20 ms; fails after SECONDS.
wait_until() {
	local deadline=$(( $(date +%s%N) + $1 * 1000000000 )); shift
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s%N)" -lt "$deadline" ] || return 1
		sleep 0.02
	done
}

all_gone() { local p; for p; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
is_mounted() { grep -q " $1 fuse.omnifs " /proc/mounts; }
kernel_at_least() { [ "$(printf '%s\n' "$1" "$(uname -r)" | sort -V | head -1)" = "$1" ]; }

# How long a daemon may take to mount: it faults its whole pool in first.
MOUNT_WAIT_S=${MOUNT_WAIT_S:-10}
# start_node NAME [OPTS]: mounts omnifs at $T/NAME in the foreground of a
# background job; its log is $T/NAME.log.
start_node() {
	local name=$1 opts=${2:-pool=host:64M}
	mkdir -p "$T/$name"
	if [ -n "${NODE_NETNS[$name]:-}" ]; then    # only its network is elsewhere
		nsenter --net="/run/netns/${NODE_NETNS[$name]}" \
			"$B/omnifs" -f -o "$opts" "$T/$name" >"$T/$name.log" 2>&1 &
	else
		"$B/omnifs" -f -o "$opts" "$T/$name" >"$T/$name.log" 2>&1 &
	fi
	NODE_PID[$name]=$!
	wait_until "$MOUNT_WAIT_S" is_mounted "$T/$name" || { cat "$T/$name.log"; bail "node $name did not mount"; }
}

# nocap KIB CMD...: runs CMD without CAP_IPC_LOCK, under a memlock limit of
# KIB, so that what it locks and registers counts against the limit.
nocap() {
	local kib=$1; shift
	setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock -- \
		bash -c "ulimit -l $kib; exec \"\$@\"" -- "$@"
}

stop_node() {
	local name=$1 pid=${NODE_PID[$1]:-}
	fusermount3 -u "$T/$name" 2>/dev/null || umount -l "$T/$name" 2>/dev/null
	if [ -n "$pid" ]; then
		wait_until 10 sh -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null || true
		unset "NODE_PID[$name]"
	fi
}

# term_node NAME: stops NAME's daemon as systemd does (SIGTERM; SIGKILL if
# it is not gone within 15 s) and returns its exit status.
term_node() {
	local pid=${NODE_PID[$1]}
	kill -TERM "$pid"
	wait_until 15 all_gone "$pid" || kill -9 "$pid"
	wait "$pid"
	local rc=$?
	unset "NODE_PID[$1]"
	return $rc
}

# new_secret FILE: a fresh cluster secret, mode 600 as omnifs wants it.
new_secret() { head -c 48 /dev/urandom | base64 >"$1" && chmod 600 "$1"; }

# free_ports N: N loopback TCP ports nobody listens on now, on one line.
free_ports() {
	$PY -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])' "$1"
}

# loopback_cluster WAIT_MS NODE... : $T/omni.yaml for NODEs on free
# loopback ports, node i hosting stage i (a: "0", b: "1", ...), with a
# fresh $T/secret; each node's port in PORT[NODE].
declare -A PORT=()
loopback_cluster() {
	local wait=$1 i=0 n ports; shift
	read -r -a ports < <(free_ports $#)
	new_secret "$T/secret"
	printf 'secret_file: %s\nwait_ms: %s\nnodes:\n' "$T/secret" "$wait" >"$T/omni.yaml"
	for n; do
		PORT[$n]=${ports[$i]}
		printf '  %s: { addr: 127.0.0.1:%s, stages: ["%s"] }\n' "$n" "${ports[$i]}" "$i" >>"$T/omni.yaml"
		i=$((i + 1))
	done
}

stat_of() { awk -v k="$2:" '$1 == k { print $2 }' "$T/$1/.omni/stats"; }   # stat_of NODE COUNTER
xattr() { getfattr --absolute-names --only-values -n "user.omni.$1" "$2" 2>/dev/null; }
# daemon_fds PID: PID's descriptors, less the /proc files of its callers
# that its FUSE threads keep open (fs/caller.c): what a leak would grow
daemon_fds() { find "/proc/$1/fd" -mindepth 1 ! -lname '/proc/*' | wc -l; }
# kept_within PID: whether those kept /proc files stay within their bound,
# 8 tasks of 3 files for each FUSE thread
kept_within() {
	local kept fuse
	kept=$(find "/proc/$1/fd" -mindepth 1 -lname '/proc/*' | wc -l)
	fuse=$(grep -lx omni-fuse /proc/"$1"/task/*/comm | wc -l)
	[ "$kept" -le $((24 * fuse)) ]
}
# clean_req NODE ID: a cleanup of request ID from NODE's mount, as the
# connector makes it (README, "Cleaning up a request"): "removed missed",
# or its error
clean_req() {
	PYTHONPATH="$SRC/contrib/python" timeout 60 $SYSPY -c \
		"import omnifs, sys; print(*omnifs.Mount(sys.argv[1]).cleanup(sys.argv[2]))" "$T/$1" "$2" 2>&1
}
health() { $PY -c "import json,sys; d=json.load(open('$T/$1/.omni/health')); print($2)"; }

# pyerr CODE: runs Python CODE with M set to the mount; prints OK or the errno name.
pyerr() {
	M=${M:-} $PY - "$1" <<'PYEOF'
import errno, os, sys
M = os.environ.get("M", "")
try:
    exec(sys.argv[1])
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
PYEOF
}

# read_later PATH WANT: a reader that opens PATH (which waits while the
# key is not published) and reads it whole; "same" or "differs" (from the
# file WANT) lands in $T/late.out.  Its pid is in LATE.
read_later() {
	$PY - "$1" "$2" >"$T/late.out" <<'PYEOF' &
import sys
data = open(sys.argv[1], "rb").read()       # waits: not published yet
print("same" if data == open(sys.argv[2], "rb").read() else "differs")
PYEOF
	LATE=$!
}

# read_cut FILE CMD...: reads FILE's first MiB, runs CMD (a fault), reads on;
# prints the error the reads ended with and 1 if it came within 10 s.
read_cut() {
	$PY - "$@" <<'PYEOF'
import os, subprocess, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
os.read(fd, 1 << 20)
subprocess.run(sys.argv[2:], check=True)
t = time.time()
try:
    while os.read(fd, 1 << 20):
        pass
    print("read it all")
except OSError as e:
    print("%s %d" % (os.strerror(e.errno), time.time() - t < 10))
PYEOF
}

cleanup() {
	local name rc=$? log
	for name in "${!NODE_PID[@]}"; do
		stop_node "$name"
	done
	for name in "${CLEANUP_HOOKS[@]}"; do
		"$name"
	done
	# A daemon's sanitizer report must fail the test that provoked it,
	# and show in a quiet prove's output too (stderr), since $T goes.
	for log in "$T"/*.log; do
		[ -f "$log" ] || continue
		if grep -qE "$SAN_REPORT" "$log"; then
			echo "# sanitizer report from ${log##*/}:"
			sed -nE "/$SAN_REPORT/,\$p" "$log" |
				head -60 | sed 's/^/#   /'
			rc=1
		fi >&2
	done
	# A file that failed shows the end of each daemon's log beside its
	# failures, so that a CI run, whose $T is gone, says what the daemons
	# saw (a log's last lines are where a wrong turn shows).
	if [ "$_failed" != 0 ] || [ "$rc" != 0 ]; then
		for log in "$T"/*.log; do
			[ -f "$log" ] || continue
			echo "# the last lines of ${log##*/}:"
			tail -n 25 "$log" | sed 's/^/#   /'
		done >&2
	fi
	# OMNIFS_TEST_LOGS=DIR keeps each daemon's log, as TEST.NODE.log,
	# for a run whose $T is gone by the time anyone looks (a GPU machine's)
	if [ -n "${OMNIFS_TEST_LOGS:-}" ]; then
		for log in "$T"/*.log; do
			[ -f "$log" ] && cp "$log" "$OMNIFS_TEST_LOGS/$(basename "$0" .t).${log##*/}"
		done
	fi
	# anything else a test mounted under $T
	grep -o " $T/[^ ]*" /proc/mounts 2>/dev/null | while read -r m; do umount -l "$m"; done
	jobs -p | xargs -r kill -9 2>/dev/null
	pkill -9 -f "omnifs.* $T/" 2>/dev/null    # daemons that detached
	rm -rf "$T"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
