#!/bin/bash
# 29-reask.t - a reader whose key's object leaves while it waits for it
# (SPEC §4.3, §4.5) finds the key's next object, on a node that hears of
# no publish on that edge: c hosts no stage 1, so it learns of 0/1's
# objects only by asking.  The record c took from an owner can be older
# than the key's object elsewhere (an rm at its owner that c has not heard
# yet, a peer's answer that was stale when it came); when it goes, c asks
# the peers again.  Before, c's reader waited out wait_ms (8 s here) and
# failed with ENOENT, or failed with ENOENT at once, while b held the key.
. "$(dirname "$0")/../lib.sh"

loopback_cluster 8000 a b c
up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = 2 ]; }
all_up() { up a && up b && up c; }
OMNIFS_TEST_SERVE_DELAY_MS=1000 start_node a "config=$T/omni.yaml,node=a,pool=host:64MiB"
for n in b c; do start_node $n "config=$T/omni.yaml,node=$n,pool=host:64MiB"; done
ok "three nodes see each other" wait_until 10 all_up

# read_on NODE KEY [SECS]: what a read of NODE's 0/1/KEY gives (its first
# line, or the errno's name), and "soon" if it came within SECS (4) s,
# else "late".
read_on() {
	timeout 20 $SYSPY - "$T/$1/0/1/$2" "${3:-4}" <<'PYEOF'
import errno, sys, time
t = time.monotonic()
try:
    what = open(sys.argv[1], "rb").read().split(b"\n")[0].decode()
except OSError as e:
    what = errno.errorcode.get(e.errno, str(e.errno))
print(what, "soon" if time.monotonic() - t < float(sys.argv[2]) else "late")
PYEOF
}

# --- the owner's GONE while c's reader waits for the first bytes -------------
# a serves each chunk a second late, so c's reader still waits for v's
# first bytes when a removes v.  Then b writes the key: c asked the peers
# again at the GONE, and b tells c of its publish.
head -c 200000 /dev/urandom >"$T/v"
cp "$T/v" "$T/a/0/1/k1"
ok "c finds a's k1 by asking" stat "$T/c/0/1/k1"
read_on c k1 >"$T/k1.out" &
RD=$!
waits() { [ "$(stat_of c waiters)" -ge 1 ]; }
ok "c's reader waits for k1's bytes" wait_until 5 waits
rm "$T/a/0/1/k1"
gone_on_c() { [ "$(stat_of c waiters)" -ge 1 ] && ! test -e "$T/c/0/1/k1"; }
ok "a removes it; c hears so, its reader still waiting" wait_until 5 gone_on_c
echo from-b >"$T/b/0/1/k1"
wait_until 15 all_gone "$RD"
is "$(cat "$T/k1.out")" "from-b soon" "... b writes k1: c's reader reads b's, within 4 s (wait_ms: 8 s)"

# --- a pull that finds the object gone ---------------------------------------
# c hears a's GONEs 3 s late: it still has a's k2 when b has its own, and
# its pull of a's finds it gone (over 64 KiB: a lookup's answer brings no
# bytes).
stop_node c
OMNIFS_TEST_GONE_HOLD_MS=3000 start_node c "config=$T/omni.yaml,node=c,pool=host:64MiB"
ok "c is back, hearing GONEs late" wait_until 10 all_up
for n in a b; do { echo "from-$n"; cat "$T/v"; } >"$T/k2.$n"; done
cp "$T/k2.a" "$T/a/0/1/k2"
ok "c finds a's k2 by asking" stat "$T/c/0/1/k2"
rm "$T/a/0/1/k2"
cp "$T/k2.b" "$T/b/0/1/k2"
is "$(read_on c k2 2)" "from-b soon" \
   "c's read of k2, a's gone at a, b's published: b's, at once (< 2 s, before the held GONE)"
is "$(read_on c k2 2)" "ENOENT late" "... consumed by it: the next read waits, and ENOENT"
done_testing
