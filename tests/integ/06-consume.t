#!/bin/bash
# Consumption (SPEC §4.4) and expiry (§4.6): `readers` complete reads delete
# an object; a partial or interrupted read consumes nothing; TTLs expire.
. "$(dirname "$0")/../lib.sh"

printf 'wait_ms: 1000\nedges:\n  "0->2": { readers: 2 }\n  "0->t": { ttl_s: 1 }\n' >"$T/c.yaml"
start_node a "pool=host:64M,config=$T/c.yaml"
export M=$T/a E=$T/a/0/1
listed() { ls "$M/$1" 2>/dev/null | grep -qx "$2"; }

echo one >"$E/a"
cat "$E/a" >/dev/null
ok "readers=1: one complete read deletes it" sh -c "! ls '$E' | grep -qx a"
is "$(stat_of a consumed)" "1" "counted as consumed"
is "$(pyerr "open(M + '/0/1/a', 'rb')")" "ENOENT" "a consumed key: ENOENT (after wait_ms)"

# The kernel keeps a consumed object's name (it was published).  An open
# through it is served there: no ESTALE and second lookup, which the
# kernel tries only once (an rm between the two reached the caller as
# ESTALE).  A writer's O_CREAT creates on it; a reader waits on it.
echo one >"$E/again"
cat "$E/again" >/dev/null
l0=$(stat_of a lookups)
l1=$(stat_of a lookups)
per=$(( l1 - l0 ))                      # reading .omni/stats asks its own
$PY -c "open('$E/again', 'wb').write(b'two')"
is "$(( $(stat_of a lookups) - l1 ))" "$per" "a writer's O_CREAT through a consumed name asks no lookup"
is "$(cat "$E/again")" two "... and publishes its new bytes"
polls=0
waits() { polls=$((polls + 1)); [ "$(stat_of a waiters)" = 1 ]; }
l0=$(stat_of a lookups)
$PY -c "print(open('$E/again').read())" >"$T/again.out" &
RD=$!
ok "a reader through a consumed name waits" wait_until 5 waits
l2=$(stat_of a lookups)
is "$(pyerr "os.stat(M + '/0/1/again')")" ENOENT "... while stat says it is not there"
echo three >"$E/again"
wait "$RD"
is "$(cat "$T/again.out")" three "... and reads the next object under it"
is "$(( l2 - l0 ))" "$(( (polls + 1) * per ))" "... having asked no lookup"
is "$(pyerr "open(M + '/0/1/again', 'rb')")" ENOENT "a reader through it that is not answered: ENOENT (wait_ms)"
is "$(pyerr "os.stat(M + '/0/1/again')")" ENOENT "... and stat still says so"
# ... and a writer killed there leaves no trace: stat says ENOENT, not
# an empty file behind the kept name.
echo four >"$E/again"
cat "$E/again" >/dev/null
$PY -c "import os; f = open('$E/again', 'wb'); f.write(b'partial'); os.kill(os.getpid(), 9)" 2>/dev/null
is "$(pyerr "os.stat(M + '/0/1/again')")" ENOENT "a writer killed through a consumed name leaves no empty file"
is "$(pyerr "open(M + '/0/1/again', 'rb')")" ENOENT "... nor anything to read"

# The read that completes a reader's counts then, not at its close (which
# so has nothing to tell the daemon: no FLUSH, one round trip less): the
# object is gone from the edge while the reader still has it open, and its
# bytes stay the reader's until it closes.
echo early >"$E/early"
is "$($PY - "$E/early" <<'PYEOF'
import os, sys
f = open(sys.argv[1], "rb", buffering=0)
assert f.read(6) == b"early\n"
print(os.path.exists(sys.argv[1]), end=" ")
print(os.pread(f.fileno(), 5, 0).decode(), end=" ")
f.close()
print(os.path.exists(sys.argv[1]))
PYEOF
)" "False early False" "a complete read consumes before the reader's close; its file still reads"

head -c 1000000 /dev/urandom >"$E/half"
$PY -c "f = open('$E/half', 'rb', buffering=0); assert len(f.read(500000)) == 500000; f.close()"
ok "a partial read leaves it" listed 0/1 half
is "$(xattr reads "$E/half")" "0" "and counts no read"
$PY -c "
f = open('$E/half', 'rb', buffering=0)
f.seek(500000); a = f.read(); f.seek(0); b = f.read(500000); f.close()
assert len(a) == len(b) == 500000"
ok "a complete read in any order consumes it" sh -c "! ls '$E' | grep -qx half"

head -c 8000000 /dev/urandom >"$E/slow"
$PY - "$E/slow" <<'PYEOF' &
import sys, time
f = open(sys.argv[1], "rb", buffering=0)
f.read(1 << 20)
time.sleep(60)
PYEOF
r=$!
ok "a reader is mid-read" wait_until 5 sh -c "grep -q '^0/1/slow local out 1048576/' '$M/.omni/transfers'"
kill -KILL "$r"; wait "$r" 2>/dev/null
ok "after the reader is killed the object stays" wait_until 3 sh -c "! grep -q slow '$M/.omni/transfers'"
ok "still listed" listed 0/1 slow
is "$(xattr reads "$E/slow")" "0" "with no read counted"
ok "the next reader reads it whole" sh -c "[ \$(wc -c <'$E/slow') = 8000000 ]"

echo two >"$M/0/2/b"
cat "$M/0/2/b" >/dev/null
ok "readers: 2 on the edge: one read leaves it" listed 0/2 b
is "$(xattr reads "$M/0/2/b")" "1" "with one read counted"
cat "$M/0/2/b" >/dev/null
ok "the second read deletes it" sh -c "! ls '$M/0/2' | grep -qx b"

echo t >"$M/0/t/ttl"
echo t >"$M/0/t/read"
cat "$M/0/t/read" >/dev/null
ok "ttl_s: 1 expires an unconsumed object" wait_until 5 sh -c "! ls '$M/0/t' | grep -qx ttl"
is "$(stat_of a expired)" "1" "counted as expired (a consumed one is not)"
echo t >"$M/0/1/nottl"
ok "objects on other edges do not expire" listed 0/1 nottl
done_testing
