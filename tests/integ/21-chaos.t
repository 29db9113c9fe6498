#!/bin/bash
# 21-chaos.t - three nodes under writers and readers that check every
# byte, while peers are killed (SIGKILL, SIGTERM) and restarted, stopped
# and continued, their connections reset under them (`ss -K`: a fault
# that must cost no read or write anything), and strangers flood their
# ports (issue 20).  At the end:
# no wrong byte, every key read or failed with an errno SPEC §9 documents,
# and failed only where a fault explains it (or a cleanup of its request,
# which the faults include: the write refused or cut short, the read
# answered ENOENT); every daemon that SIGTERM
# stopped gone with status 0, every pool empty, and each daemon's threads
# and descriptors back where they were.
# CHAOS_SECS (default 30) sets how long the faults go on; `make soak`
# runs it for SOAK_SECS with the fuzzers beside it.
. "$(dirname "$0")/../lib.sh"

SECS=${CHAOS_SECS:-30}
SEED=${CHAOS_SEED:-$RANDOM}
RANDOM=$SEED
diag "chaos for $SECS s, seed $SEED"
loopback_cluster 8000 a b c
echo "state_dir: $T/state" >>"$T/omni.yaml"     # a killed node's next run pays its debts
declare -A THREADS=() FDS=()
node() { start_node "$1" "config=$T/omni.yaml,node=$1,pool=host:256MiB"; }
up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = 2 ]; }
all_up() { up a && up b && up c; }
count() { ls "/proc/${NODE_PID[$1]}/$2" | wc -l; }
baseline() { THREADS[$1]=$(count "$1" task); FDS[$1]=$(daemon_fds "${NODE_PID[$1]}"); }
for n in a b c; do node $n; done
ok "three nodes up" wait_until 10 all_up
for n in a b c; do baseline $n; done

# --- the workers: writer on one node, reader of its keys on another -------
ROUNDS=0 WORKERS=()
declare -A OUT=()       # a worker's pid: the file its lines go to
workers() {     # one round of four pairs, ROUNDS as the key prefix
	local r=$ROUNDS n=${CHAOS_KEYS:-60}
	WORKERS=()
	for pair in "a 0 1 b" "b 1 2 c" "c 2 0 a" "a 0 2 c"; do
		set -- $pair
		$SYSPY "$SRC/tests/tools/chaos.py" write "$T/$1" "$2" "$3" "r$r-$1$3" "$n" "$SEED" \
			>"$T/w.$r.$1$3" 2>>"$T/workers.err" &
		WORKERS+=($!) OUT[$!]=$T/w.$r.$1$3
		$SYSPY "$SRC/tests/tools/chaos.py" read "$T/$4" "$2" "$3" "r$r-$1$3" "$n" "$SEED" \
			"$T/w.$r.$1$3" >"$T/r.$r.$1$3.$4" 2>>"$T/workers.err" &
		WORKERS+=($!) OUT[$!]=$T/r.$r.$1$3.$4
	done
	ROUNDS=$((ROUNDS + 1))
}
working() { ! all_gone "${WORKERS[@]}"; }
workers

# --- the faults ------------------------------------------------------------
# Each is logged, "KIND NODE START END" (wall clock, as the workers'), so
# that the reckoning can tell an error a fault explains from one it does not.
now() { date +%s.%3N; }
STOPPED=
cont_all() {    # also a cleanup hook, which runs after stop_node forgot the pid
	local pid=${NODE_PID[${STOPPED:-none}]:-}
	[ -z "$pid" ] || kill -CONT "$pid" 2>/dev/null
	STOPPED=
}
CLEANUP_HOOKS+=(cont_all)
end=$(( $(date +%s) + SECS ))
kills=0 terms=0 stops=0 floods=0 cleans=0 resets=0 BADEXIT=
while [ "$(date +%s)" -lt "$end" ]; do
	n=$(printf 'a\nb\nc' | sed -n "$((RANDOM % 3 + 1))p")
	t0=$(now)
	case $((RANDOM % 7)) in
	0)      diag "kill -9 $n, restart"
		disown "${NODE_PID[$n]}"   # no "Killed" from bash
		kill -9 "${NODE_PID[$n]}"
		stop_node "$n"
		node "$n"
		wait_until 10 all_up
		baseline "$n"
		echo "kill $n $t0 $(now)" >>"$T/faults"
		kills=$((kills + 1)) ;;
	4)      diag "SIGTERM $n (as systemd stops it), restart"
		term_node "$n" || BADEXIT+="$n:$? "
		stop_node "$n"
		node "$n"
		wait_until 10 all_up
		baseline "$n"
		echo "kill $n $t0 $(now)" >>"$T/faults"   # its objects go as a killed node's
		terms=$((terms + 1)) ;;
	1|2)    diag "stop $n for a while"
		kill -STOP "${NODE_PID[$n]}"; STOPPED=$n
		sleep $((RANDOM % 4 + 1))      # the fault's length, not a wait for anything
		cont_all
		echo "stop $n $t0 $(now)" >>"$T/faults"
		stops=$((stops + 1)) ;;
	3)      diag "strangers at $n"
		$SYSPY "$SRC/tests/tools/strangers.py" "127.0.0.1:${PORT[$n]}" 100 2 >/dev/null
		echo "flood $n $t0 $(now)" >>"$T/faults"
		floods=$((floods + 1)) ;;
	5)      # a key of this round's that a writer on any node is at or
		# near: its write may be ahead (refused: ECANCELED), under way
		# (cut short: ENOENT), or just done (its reader: ENOENT)
		r=$((ROUNDS - 1)) j=$((RANDOM % 4))
		for _ in 1 2 3 4; do   # a writer not done yet, if there is one
			w=$(printf 'a1\nb2\nc0\na2' | sed -n "$((j % 4 + 1))p") j=$((j + 1))
			[ "$(wc -l <"$T/w.$r.$w")" -lt "${CHAOS_KEYS:-60}" ] && break
		done
		i=$(( $(wc -l <"$T/w.$r.$w") + RANDOM % 4 - 1 ))
		i=$(( i < 0 ? 0 : i >= ${CHAOS_KEYS:-60} ? ${CHAOS_KEYS:-60} - 1 : i ))
		k="r$r-$w-$i"  # as workers() names them
		diag "cleanup of $k from $n: $(clean_req "$n" "$k")"
		echo "$k $n $t0 $(now)" >>"$T/cleanups"
		cleans=$((cleans + 1)) ;;
	6)      # not in the faults file: no error may come of it
		diag "reset $n's connections"
		ss -K "( dport = :${PORT[$n]} or sport = :${PORT[$n]} )" >/dev/null 2>&1
		wait_until 10 all_up
		resets=$((resets + 1)) ;;
	esac
	working || workers        # a new round once the last one is done
done
diag "$kills kills, $terms SIGTERMs, $stops stops, $resets resets, $floods floods, $cleans cleanups; $ROUNDS rounds of workers"
is "$BADEXIT" "" "every daemon stopped by SIGTERM under load exits with status 0"
ok "every node is back up" wait_until 15 all_up
idle() { ! working; }
# Where each worker that is still running waits, and what the daemons'
# threads do meanwhile: on stderr, so that a hang in CI can be read.  For
# a reader, also its last outcomes and how many of its keys the writer's
# node still holds (a reader slow on keys that are there is a bug too).
hung() {
	local p n a w
	echo "# replay: CHAOS_SEED=$SEED CHAOS_SECS=$SECS $0"
	for p in "${WORKERS[@]}"; do
		kill -0 "$p" 2>/dev/null || continue
		# chaos.py OP MOUNT FROM TO PREFIX N SEED [WRITER-OUT]
		mapfile -d '' -t a <"/proc/$p/cmdline"
		echo "# ${a[2]} ${a[3]##*/} ${a[4]} ${a[5]} ${a[6]}, after '$(tail -n1 "${OUT[$p]}")':"
		echo "#   waits in $(cat "/proc/$p/wchan"); $(tr '\n' ' ' <"/proc/$p/stack" 2>/dev/null | head -c 300)"
		[ "${a[2]}" = read ] || continue
		w=${a[9]##*.} w=${w:0:1}   # w.ROUND.<writer's node><to>
		echo "#   its last lines: $(tail -n 6 "${OUT[$p]}" | tr '\n' ';')"
		echo "#   $w holds $(timeout 2 ls "$T/$w/${a[4]}/${a[5]}" | grep -c "^${a[6]}-") of ${a[6]}-*"
		echo "#   its writer's last lines: $(tail -n 8 "${a[9]}" | tr '\n' ';')"
	done
	echo "# the faults (kind node start end): $(tr '\n' ';' <"$T/faults" 2>/dev/null)"
	echo "# every omnifs process (a killed one that lingers keeps its mount's requests):"
	ps -eo pid,stat,wchan:32,args | grep "[o]mnifs -f.* $T/" | sed 's/^/#   /'
	for n in a b c; do
		echo "# $n (pid ${NODE_PID[$n]})'s log:"; tail -n 16 "$T/$n.log" | sed 's/^/#   /'
		echo "# $n's waiters: $(timeout 2 grep -E '^(waiters|waits|wait_timeouts):' \
			"$T/$n/.omni/stats" | tr '\n' ' ')"
		command -v gdb >/dev/null || continue
		timeout 20 gdb -batch -p "${NODE_PID[$n]}" -ex 'thread apply all bt 10' 2>/dev/null |
			grep -E '^(Thread|#)' | sed 's/^/#   /'
	done
} >&2
ok "the workers finish" wait_until 60 idle || hung

# --- the reckoning ------------------------------------------------------------
cat "$T"/w.* >"$T/written"
cat "$T"/r.* >"$T/read"
wrong=$(grep -c WRONG "$T/read")
is "$wrong" 0 "no reader got a wrong byte"
grep WRONG "$T/read" | head -5 | while read -r l; do diag "$l"; done
keys=$((ROUNDS * 4 * ${CHAOS_KEYS:-60}))
is "$(wc -l <"$T/written") $(wc -l <"$T/read")" "$keys $keys" "every key has a writer's and a reader's outcome"
odd() { grep -vE " (ok|$2)\$" "$T/$1"; }
is "$(odd written 'NOMOUNT|ENOTCONN|ECONNABORTED|EIO|ENOSPC|ECANCELED|ENOENT' | head -3)" "" \
   "writes: ok, or ENOTCONN/EIO/ENOSPC where the daemon died (NOMOUNT: not mounted then), ECANCELED/ENOENT by a cleanup"
is "$(odd read 'UNWRITTEN|NOMOUNT|ENOENT|ENOTCONN|ECONNABORTED|EIO' | head -3)" "" \
   "reads: ok, or EIO/ENOENT (owner lost), ENOTCONN (own daemon died), or not written"
# An error is a bug, even with an errno the SPEC allows, unless a fault
# explains it: the owner killed after the write began (its objects die
# with it), or any fault of the owner or the reader while the read ran,
# give or take the time a peer takes to be declared dead and found again.
# A stop loses nothing: a read that starts after the owner is back must
# succeed.
unexplained() {
	$SYSPY - "$T" <<'PYEOF'
import glob, os, sys
T, MARGIN = sys.argv[1], 5.0
path = os.path.join(T, "faults")
faults = [(k, n, float(a), float(b)) for k, n, a, b in
          (l.split() for l in open(path))] if os.path.exists(path) else []
path = os.path.join(T, "cleanups")
cleaned = {}            # key: when its first cleanup began
for k, n, a, b in (l.split() for l in open(path)) if os.path.exists(path) else ():
    cleaned[k] = min(float(a), cleaned.get(k, float(a)))
def explained(key, owner, reader, wrote, t0, t1):
    if key in cleaned and cleaned[key] <= t1:
        return True     # its request is over: no wait, nothing to read
    for kind, node, a, b in faults:
        if a - MARGIN > t1:
            continue
        if kind == "kill" and node == owner and b + MARGIN >= wrote:
            return True
        if node in (owner, reader) and b + MARGIN >= t0:
            return True
    return False
def lines(path):
    return {f[0]: f for f in (l.rstrip("\n").split(None, 3) for l in open(path)) if len(f) == 4}
for rpath in sorted(glob.glob(os.path.join(T, "r.*.*.*"))):
    _, rnd, pair, reader = os.path.basename(rpath).split(".")
    owner = pair[0]
    wrote = lines(os.path.join(T, "w.%s.%s" % (rnd, pair)))
    for key, t0, t1, what in lines(rpath).values():
        if what in ("ok", "UNWRITTEN", "NOMOUNT") or what.startswith("WRONG"):
            continue
        t0, t1 = float(t0), float(t1)
        w = float(wrote[key][1])    # read only once its writer said ok
        if not explained(key, owner, reader, w, t0, t1):
            print("%s on %s: %s after %.1f s, written on %s %.1f s before it; faults %s" % (
                key, reader, what, t1 - t0, owner, t0 - w,
                " ".join("%s:%s@%.1f" % (k, n, a - t0) for k, n, a, b in faults
                         if abs(a - t0) < 20)))
PYEOF
}
is "$(unexplained | head -3)" "" "reads: every error comes with a fault that explains it"
# A write's ECANCELED or ENOENT: only from a cleanup of its key that began
# before the write ended.
uncleaned() {
	awk 'FILENAME == ARGV[1] { if (!($1 in c) || $3 + 0 < c[$1]) c[$1] = $3 + 0; next }
	     ($4 == "ECANCELED" || $4 == "ENOENT") && !($1 in c && c[$1] <= $3 + 0)' \
		<(cat "$T/cleanups" 2>/dev/null) "$T/written"
}
is "$(uncleaned | head -3)" "" "writes: every ECANCELED or ENOENT comes with a cleanup of its key"
for f in written read; do
	diag "$f: $(awk '{ n[$4]++ } END { for (k in n) printf "%s %d  ", k, n[k] }' "$T/$f")"
done
[ -s "$T/workers.err" ] && sed 's/^/# /' "$T/workers.err" | head -5
for n in a b c; do      # what was written and never read, removed
	find "$T/$n" -mindepth 3 -maxdepth 3 -path "$T/$n/.omni" -prune -o -type f -print0 |
		xargs -0 -r rm -f 2>/dev/null
done
empty() { local n; for n in a b c; do [ "$(health $n "d['pool']['used']")" = 0 ] || return 1; done; }
ok "every pool is empty" wait_until 10 empty
settled() {
	local n
	for n in a b c; do
		[ "$(count $n task)" -le "${THREADS[$n]}" ] && [ "$(daemon_fds "${NODE_PID[$n]}")" -le "${FDS[$n]}" ] || return 1
	done
}
ok "threads and descriptors back to where they were" wait_until 10 settled
ok "the /proc files the FUSE threads keep stay within 24 a thread" \
	eval 'kept_within ${NODE_PID[a]} && kept_within ${NODE_PID[b]} && kept_within ${NODE_PID[c]}'
for n in a b c; do diag "$n: threads $(count $n task) (start ${THREADS[$n]}), fds $(daemon_fds "${NODE_PID[$n]}") (start ${FDS[$n]}), kept /proc files $(find "/proc/${NODE_PID[$n]}/fd" -mindepth 1 -lname '/proc/*' | wc -l)"; done
done_testing
