#!/bin/bash
# `make run` mounts a single node with the embedded default at ./omni in the
# foreground, says how to use it, and unmounts cleanly on Ctrl-C and SIGTERM.
. "$(dirname "$0")/../lib.sh"

san=; [ "${B##*/}" = build-san ] && san=SAN=1
if is_mounted "$SRC/omni"; then
	skip "./omni is already mounted (a make run is in progress)"
	done_testing; exit
fi
for sig in INT TERM; do
	# Background jobs of a script start with SIGINT ignored, and a daemon
	# keeps an ignored signal ignored; a terminal's Ctrl-C finds it default.
	setsid $PY -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' make -s -C "$SRC" run $san >"$T/run.out" 2>&1 &
	pid=$!
	ok "make run mounts ./omni" wait_until 60 is_mounted "$SRC/omni"
	ok "it prints how to use it" grep -q "in another shell try" "$T/run.out"
	ok "the embedded default: host:1GiB, no config" sh -c "grep -q '^pool: host:1GiB$' '$SRC/omni/.omni/config' &&
		grep -q '^config: (embedded default)$' '$SRC/omni/.omni/config'"
	ok "it serves" sh -c "echo hi >'$SRC/omni/0/1/k' && [ \"\$(cat '$SRC/omni/0/1/k')\" = hi ]"
	if [ $sig = INT ]; then
		kill -INT -- "-$pid"    # Ctrl-C: the whole foreground group
	else
		pkill -TERM -f "omnifs -f omni" -s "$pid"
	fi
	ok "SIG$sig unmounts it" wait_until 10 sh -c "! grep -q ' $SRC/omni ' /proc/mounts"
	ok "and the daemon is gone" wait_until 10 sh -c "! pgrep -s $pid -f 'omnifs -f omni'"
	wait_until 10 all_gone "$pid" || kill -9 -- "-$pid"
	wait "$pid" 2>/dev/null
done
done_testing
