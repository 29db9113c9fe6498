#!/bin/bash
# 16-replicas.t - a reader's node keeps a copy of what it pulled in its own
# pool.  Copies nobody uses make room for other reads and for writes there,
# least recently opened first; copies in use stay; a read that cannot fit
# fails at once with ENOSPC and leaves the pool as it was; an object larger
# than the pool streams through it (SPEC §4, §8).
. "$(dirname "$0")/../lib.sh"

read -r PA PB < <(free_ports 2)
new_secret "$T/secret"
cat >"$T/omni.yaml" <<EOF
secret_file: $T/secret
readers: 0
wait_ms: 8000
nodes:
  a: { addr: 127.0.0.1:$PA, stages: ["0"] }
  b: { addr: 127.0.0.1:$PB, stages: ["1"] }
EOF
start_node a "config=$T/omni.yaml,node=a,pool=host:320MiB"
start_node b "config=$T/omni.yaml,node=b,pool=host:96MiB"
up() { [ "$(health b "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
ok "b sees a" wait_until 10 up

used_b() { health b "d['pool']['used'] >> 20"; }
copies_b() { health b "d['pool']['copies'] >> 20"; }
pulled_mib() { echo $(( $(stat_of b bytes_pulled) >> 20 )); }
for k in 1 2 3; do
	head -c 40M /dev/urandom >"$T/k$k"
	cp "$T/k$k" "$T/a/0/1/k$k"
done

# --- unused copies make room, least recently opened first ------------------
ok "b reads a's first 40 MiB object" cmp "$T/k1" "$T/b/0/1/k1"
ok "... and its second" cmp "$T/k2" "$T/b/0/1/k2"
is "$(used_b)" 80 "b's 96 MiB pool holds both copies (readers: 0 keeps the objects)"
is "$(copies_b)" 80 "... and .omni/health says that 80 MiB of it are copies"
ok "... as does .omni/metrics" grep -qx "omnifs_pool_copies_bytes $((80 << 20))" "$T/b/.omni/metrics"
ok "k1 read again (opened last now)" cmp "$T/k1" "$T/b/0/1/k1"
is "$(pulled_mib)" 80 "... from b's copy, with no pull"
ok "a third 40 MiB object, with 16 MiB free, reads too" cmp "$T/k3" "$T/b/0/1/k3"
is "$(stat_of b evicted)" 1 "... by dropping one copy"
is "$(used_b)" 80 "... so b's pool holds two copies still"
ok "k1 reads once more" cmp "$T/k1" "$T/b/0/1/k1"
is "$(pulled_mib)" 120 "... without a pull: the copy dropped was k2's, the least recently opened"
ok "k2 reads again" cmp "$T/k2" "$T/b/0/1/k2"
is "$(pulled_mib)" 160 "... pulled once more"
is "$(ls "$T/b/0/1" | tr '\n' ' ')" "k1 k2 k3 " "a dropped copy's object stays listed on b"

# --- copies in use stay -----------------------------------------------------
# hold FILE...: opens each FILE, reads its first MiB, says so in $T/held,
# waits for $T/go, then reads on and says whether each matched its original.
hold() {
	$PY - "$T" "$@" <<'PYEOF' &
import os, sys, time
t, names = sys.argv[1], sys.argv[2:]
fds = [os.open(t + "/b/0/1/" + n, os.O_RDONLY) for n in names]
heads = [os.read(fd, 1 << 20) for fd in fds]
open(t + "/held", "w").close()
end = time.time() + 30
while not os.path.exists(t + "/go") and time.time() < end:
    time.sleep(0.01)
for n, fd, head in zip(names, fds, heads):
    data = head
    while (b := os.read(fd, 1 << 20)):
        data += b
    os.close(fd)
    print(n, "same" if data == open(t + "/" + n, "rb").read() else "differs")
PYEOF
	HOLDER=$!
}
release() { touch "$T/go"; wait "$HOLDER"; rm -f "$T/held" "$T/go"; }

hold k2 k1 >"$T/held.out"
ok "a reader holds k2 and k1 open mid-read" wait_until 10 test -e "$T/held"
is "$(M=$T/b pyerr "open(M + '/0/1/k3', 'rb').read()")" ENOSPC \
   "k3, with both copies in use, does not fit: ENOSPC"
ok "... b's log says why, in one line" grep -q "cannot read 0/1/k3 here: its 41943040 bytes do not fit this node's pool" "$T/b.log"
is "$(stat_of b evicted)" 2 "... and no copy in use was dropped for it"
is "$(used_b)" 80 "... nor did its failed try keep any of the pool"
release
is "$(cat "$T/held.out" | tr '\n' ' ')" "k2 same k1 same " "the held readers read their copies whole and right"
ok "k3 reads once they are closed" cmp "$T/k3" "$T/b/0/1/k3"

hold k3 >"$T/held.out"
ok "a reader holds k3 open mid-read" wait_until 10 test -e "$T/held"
ok "k2 reads, dropping the copy nobody uses" cmp "$T/k2" "$T/b/0/1/k2"
release
is "$(cat "$T/held.out")" "k3 same" "the held copy was kept: its reader read it whole and right"

# --- larger than the pool: streamed, nothing kept ------------------------------
head -c 128M /dev/urandom >"$T/big"
cp "$T/big" "$T/a/0/1/big"
evicted=$(stat_of b evicted)
ok "an object larger than b's whole pool reads right on b (streamed)" cmp "$T/big" "$T/b/0/1/big"
is "$(stat_of b evicted)" "$evicted" "... its window fit in what was free: no copy was dropped for it"
is "$(used_b)" 80 "... and it left nothing in b's pool"
ok "a reads its own big object still" cmp "$T/big" "$T/a/0/1/big"

# --- a write on the reader's node ---------------------------------------------
head -c 90M /dev/urandom >"$T/mine"
ok "b writes 90 MiB of its own into a pool full of copies" cp "$T/mine" "$T/b/1/2/mine"
ok "... and reads it back" cmp "$T/mine" "$T/b/1/2/mine"
is "$(stat_of b evicted)" $((evicted + 2)) "... the two copies made room"
is "$(stat_of b aborted)" 0 "... and nothing was aborted"
is "$(copies_b)" 0 "... and b's pool holds no copies now"

done_testing
