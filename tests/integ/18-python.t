#!/bin/bash
# 18-python.t - the Python package (contrib/python) against live mounts:
# one node alone, and a two-node cluster over loopback TCP.  The tests are
# pytest's (tests/py/test_omnifs.py); each passing or failing test is one
# TAP line here.
. "$(dirname "$0")/../lib.sh"

$SYSPY -c "import pytest, msgpack, numpy" 2>/dev/null ||
	{ skip "Debian's python3-pytest, -msgpack or -numpy is missing"; done_testing; exit; }
read -r PB PC < <(free_ports 2)
new_secret "$T/secret"
cat >"$T/omni.yaml" <<EOF
secret_file: $T/secret
wait_ms: 20000
nodes:
  b: { addr: 127.0.0.1:$PB, stages: ["0"] }
  c: { addr: 127.0.0.1:$PC, stages: ["1", "2"] }
EOF
A_OPTS="pool=host:512M,node=a,wait_ms=20000"
start_node a "$A_OPTS"
start_node b "config=$T/omni.yaml,node=b,pool=host:512MiB"
start_node c "config=$T/omni.yaml,node=c,pool=host:512MiB"
up() { [ "$(health c "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
ok "the two-node cluster is up" wait_until 10 up

# pytest's own report, one line a test, as TAP; wide, so that a failing
# test's line says the whole of its reason (prove --failures shows it)
OMNI_ONE=$T/a OMNI_B=$T/b OMNI_C=$T/c PYTHONPATH="$SRC/contrib/python:$SRC/tests/py" COLUMNS=400 \
	$SYSPY -m pytest -p no:cacheprovider -q -rA "$SRC/tests/py" >"$T/pytest.log" 2>&1
while read -r verdict name rest; do
	case $verdict in
	PASSED) ok "$name" true ;;
	SKIPPED) skip "$name $rest" ;;
	FAILED|ERROR) ok "$name $rest" false ;;
	esac
done < <(grep -E '^(PASSED|FAILED|ERROR) [^ ]+::|^SKIPPED \[' "$T/pytest.log")
grep -qE '^(PASSED|FAILED|ERROR) [^ ]+::' "$T/pytest.log" || { cat "$T/pytest.log"; ok "pytest ran" false; }
# on stderr, so that prove shows why in CI's log too: pytest's tracebacks
# (its FAILURES and ERRORS sections), which -rA's list of passes follows
if grep -qE '^(FAILED|ERROR) [^ ]+::' "$T/pytest.log"; then
	sed -n '/^=* \(FAILURES\|ERRORS\) =*$/,/^=* \(PASSES\|warnings summary\|short test summary info\) =*$/p' \
		"$T/pytest.log" | head -200 | sed 's/^/# /' >&2
	grep -E '^(FAILED|ERROR) ' "$T/pytest.log" | sed 's/^/# /' >&2
fi

# A worker's Mount across a restart of its daemon: it maps the new pool and
# lets the old one go (its memory with it), one pool mapped at a time, and
# its small objects' requests go on the new daemon's edge.
cat >"$T/restart.py" <<'EOF'
import os, sys
import omnifs
m, data = omnifs.Mount(sys.argv[1]), os.urandom(3 << 20)

def round_trip(key):
    m.put("0", "1", key, data)
    m.put("0", "1", key + ".s", b"small")
    ok = (bytes(m.get("0", "1", key, timeout=10)) == data
          and bytes(m.get("0", "1", key + ".s", timeout=10)) == b"small")
    maps = sum("omnifs-pool" in line for line in open("/proc/self/maps"))
    print(ok, maps, m._pool[0] if m._pool and m._pool[1] else None, flush=True)

round_trip("before")
sys.stdin.readline()            # the daemon restarts meanwhile
round_trip("after")
EOF
# Two FIFOs, not a coproc: bash forgets a coproc's PID and descriptors as
# soon as it ends, which the worker may do before its last line is read.
# Opened read-write here: no open waits for the worker, and a worker gone
# early is no SIGPIPE (the reads below are bounded).
mkfifo "$T/to-worker" "$T/from-worker"
PYTHONPATH="$SRC/contrib/python" $SYSPY "$T/restart.py" "$T/a" <"$T/to-worker" \
	>"$T/from-worker" 2>&1 &
WORKER=$!
exec {TO}<>"$T/to-worker" {FROM}<>"$T/from-worker"
read -t 60 -r ok1 maps1 key1 <&$FROM
stop_node a
start_node a "$A_OPTS"
echo go >&$TO
read -t 60 -r ok2 maps2 key2 <&$FROM
exec {TO}>&- {FROM}<&-
kill "$WORKER" 2>/dev/null      # done, or stuck: the wait is bounded either way
wait "$WORKER" 2>/dev/null
is "$ok1 $maps1 $ok2 $maps2" "True 1 True 1" "a worker's Mount goes on with its restarted daemon, its pool mapped, only it"
ok "... a new pool, not the old one ($key1, then $key2)" test "$key1" != "$key2" -a "$key2" != None

# A writer that copies into the pool itself (a put of 16 MiB and more)
# has the hasher follow on another core than its own (ns_hash.c,
# hasher_place); a FUSE write leaves it to the scheduler again.
if [ "$(nproc)" -lt 2 ]; then
	skip "one CPU: no other core for the hasher"
	skip "one CPU: no other core for the hasher"
else
	cat >"$T/away.py" <<'EOF'
import os, subprocess, sys
import omnifs
pid, mnt = sys.argv[1], sys.argv[2]

def hasher_cpus():
    for t in os.listdir("/proc/%s/task" % pid):
        if open("/proc/%s/task/%s/comm" % (pid, t)).read().strip() == "omni-hash":
            for line in open("/proc/%s/task/%s/status" % (pid, t)):
                if line.startswith("Cpus_allowed_list:"):
                    cpus = set()
                    for part in line.split()[1].split(","):
                        lo, _, hi = part.partition("-")
                        cpus.update(range(int(lo), int(hi or lo) + 1))
                    return cpus
    return set()

daemon = os.sched_getaffinity(int(pid))
mine = min(os.sched_getaffinity(0) & daemon)
os.sched_setaffinity(0, {mine})
omnifs.Mount(mnt).put("0", "1", "away", os.urandom(32 << 20), readers=0)
placed = hasher_cpus()
subprocess.run(["dd", "if=/dev/zero", "of=%s/0/1/away.dd" % mnt, "bs=1M", "count=8"],
               stderr=subprocess.DEVNULL, check=True)
print(mine in placed, mine in hasher_cpus(), placed == daemon - {mine})
EOF
	got=$(PYTHONPATH="$SRC/contrib/python" $SYSPY "$T/away.py" "${NODE_PID[a]}" "$T/a" 2>&1)
	is "${got% *}" "False True" "a placed put's hasher runs off the writer's CPU, a written one anywhere ($got)"
	is "${got##* }" "True" "... the placed one on every other CPU the daemon may use"
	rm -f "$T/a/0/1/away" "$T/a/0/1/away.dd"
fi

done_testing
