#!/bin/bash
# 04-faults.t - faults on the RDMA path (SPEC §4.7, §7): an owner killed
# mid-read fails that read with EIO within 10 s and nothing else, and is
# read by RDMA again once restarted, with no restart of the reader; a
# reader's node killed mid-read lets the owner go of its lease; a chunk
# that fails its hash is EIO; and a READ under a released lease's rkey
# fails where grants are windows (the read it broke goes on over TCP, and
# the queue pair is connected again), and does not where they are the
# pool's rkey.
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1", "2"' c:'"9"' <<EOF
wait_ms: 20000
edges:
  "0->2": { readers: 0 }
  "9->2": { readers: 0 }
EOF
node a pool=host:512MiB
node b pool=host:64MiB
node c pool=host:64MiB
all_rdma() { peer_is b a rdma && peer_is b c rdma; }
ok "b reads a and c by rdma" wait_until 20 all_rdma
used() { health "$1" "d['pool']['used'] >> 20"; }
used_is() { [ "$(used "$1")" = "$2" ]; }

# --- the owner killed mid-read ----------------------------------------------------
head -c 300M /dev/urandom >"$T/a/0/2/big"
head -c 3000000 /dev/urandom >"$T/y"
cp "$T/y" "$T/c/9/2/y"
ok "b hears of both" wait_until 10 sh -c "test -e '$T/b/0/2/big' && test -e '$T/b/9/2/y'"
disown "${NODE_PID[a]}"    # killed below: no "Killed" from bash
res=$(read_cut "$T/b/0/2/big" kill -9 "${NODE_PID[a]}")
is "$res" "Input/output error 1" "a read whose owner is killed mid-read: EIO within 10 s"
wait_until 10 all_gone "${NODE_PID[a]}"
umount -l "$T/a" 2>/dev/null
unset "NODE_PID[a]"
ok "c's object still reads right on b, by rdma" cmp "$T/y" "$T/b/9/2/y"
ok "b still reads c by rdma" peer_is b c rdma
is "$(health b "d['pool']['used'] - d['pool']['copies']")" 0 \
   "b's pool holds nothing but its copy of c's kept object: the window is gone"
node a pool=host:512MiB
ok "a restarted: b reads it by rdma again, b not restarted" wait_until 20 peer_is b a rdma
cp "$T/y" "$T/a/0/2/y2"
ok "a's new object reads right on b" cmp "$T/y" "$T/b/0/2/y2"

# --- the reader's node killed mid-read --------------------------------------------
# hold_read FILE: a reader reads 16 MiB of FILE and holds it open (for 60 s,
# killed before); $T/held once it has, its pid in $holder.
hold_read() {
	rm -f "$T/held"
	$PY - "$1" "$T" <<'PYEOF' &
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
os.read(fd, 16 << 20)
open(sys.argv[2] + "/held", "w").close()
time.sleep(60)
PYEOF
	holder=$!
	disown "$holder"
}
base=$(used a)
head -c 200M /dev/urandom >"$T/a/0/2/r"
hold_read "$T/b/0/2/r"
ok "a reader on b is 16 MiB into r" wait_until 30 test -e "$T/held"
ok "rm of r on a" rm "$T/a/0/2/r"
ok "a keeps r for the read under way" used_is a $((base + 200))
disown "${NODE_PID[b]}"
kill -9 "${NODE_PID[b]}"
kill -9 "$holder" 2>/dev/null
wait_until 10 all_gone "${NODE_PID[b]}"
umount -l "$T/b" 2>/dev/null
unset "NODE_PID[b]"
ok "with b's daemon killed, a lets go of r (lease and windows) once b's connection ends" \
   wait_until 15 used_is a "$base"

# --- the reader's node stopped mid-read (SIGTERM, as systemd stops it) ------------
# Its file and its pulls still open, b exits cleanly (it failed in the
# cluster's hooks, freed before the files the kernel left were let go),
# and a lets go of what b held.
node b pool=host:64MiB
ok "b is back, reading a by rdma" wait_until 20 peer_is b a rdma
head -c 200M /dev/urandom >"$T/a/0/2/r2"
hold_read "$T/b/0/2/r2"
ok "a reader on b is 16 MiB into r2" wait_until 30 test -e "$T/held"
ok "rm of r2 on a" rm "$T/a/0/2/r2"
term_node b
is "$?" 0 "b, stopped mid-read, exits with status 0"
kill -9 "$holder" 2>/dev/null
ok "... and a lets go of r2" wait_until 15 used_is a "$base"

# --- a chunk that fails its hash --------------------------------------------------
stop_node c
OMNIFS_TEST_CORRUPT=1 node c pool=host:64MiB
node b pool=host:64MiB
ok "b reads c, which grants bad hashes, by rdma" wait_until 20 peer_is b c rdma
cp "$T/y" "$T/c/9/2/bad"
is "$(M=$T/b pyerr "open(M + '/9/2/bad', 'rb').read()")" EIO "a chunk READ that fails its hash: EIO"
ok "... counted" test "$(stat_of b checksum_failures)" -ge 1

# --- a READ under a released lease ------------------------------------------------
stop_node b
OMNIFS_TEST_STALE_RKEY=1 node b pool=host:64MiB
ok "b, which will reuse a released lease's rkey, reads a by rdma" wait_until 20 peer_is b a rdma
stale() { grep "test: a READ under a released lease's rkey" "$T/b.log" | tail -1 | sed 's/.*rkey: //'; }
cp "$T/y" "$T/a/0/2/s1"
ok "b reads a's object right; its lease is released" cmp "$T/y" "$T/b/0/2/s1"
cp "$T/y" "$T/a/0/2/s2"
errors=$(stat_of b rdma_errors) tcp=$(stat_of b bytes_pulled_tcp)
ok "the next read, after a READ with the released rkey broke its pair, reads right" \
   cmp "$T/y" "$T/b/0/2/s2"
is "$(stale)" "remote access error" "with windows, a READ with a released lease's rkey fails: remote access error"
ok "... counted in rdma_errors" test "$(stat_of b rdma_errors)" -gt "$errors"
ok "... and the read went on over TCP (11-reroute.t)" test "$(stat_of b bytes_pulled_tcp)" -gt "$tcp"
rdma=$(stat_of b bytes_pulled_rdma)
cp "$T/y" "$T/a/0/2/s3"
ok "the pair is connected again: the next object reads right" cmp "$T/y" "$T/b/0/2/s3"
ok "... by RDMA" test "$(stat_of b bytes_pulled_rdma)" -gt "$rdma"
ok "b still reads a by rdma" peer_is b a rdma

stop_node a
OMNIFS_TEST_RDMA_GRANTS=pool node a pool=host:512MiB
is "$(health a "d['rdma_grants']")" pool "a told to grant the pool's rkey: health says pool"
ok "b reads a by rdma again" wait_until 20 peer_is b a rdma
cp "$T/y" "$T/a/0/2/p1"
ok "b reads a's object right under a pool grant" cmp "$T/y" "$T/b/0/2/p1"
cp "$T/y" "$T/a/0/2/p2"
ok "... and the next" cmp "$T/y" "$T/b/0/2/p2"
is "$(stale)" success "with pool grants, a READ with a released lease's rkey still reads: why windows matter"
done_testing
