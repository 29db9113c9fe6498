#!/bin/bash
# 12-netns.t - three daemons, each in its own network namespace joined to a
# bridge by a veth pair: reads across real interfaces, and a node whose
# link is cut mid-transfer and restored (SPEC §4.7, §7).
. "$(dirname "$0")/../lib.sh"

command -v nsenter >/dev/null && ip netns list >/dev/null 2>&1 ||
	{ skip "no ip netns or nsenter here"; done_testing; exit; }
S=$(( $$ % 10000 ))
BR=omb$S
netns_down() {
	local n
	for n in a b c; do ip netns del "om$S$n" 2>/dev/null; done
	ip link del "$BR" 2>/dev/null
	true
}
CLEANUP_HOOKS+=(netns_down)
netns_up() {
	local i=1 n
	ip link add "$BR" type bridge && ip link set "$BR" up || return 1
	for n in a b c; do
		ip netns add "om$S$n" &&
		ip link add "o$S$n" type veth peer name "o$S${n}p" &&
		ip link set "o$S$n" netns "om$S$n" &&
		ip link set "o$S${n}p" master "$BR" up &&
		ip -n "om$S$n" addr add "10.78.$((S % 250)).$i/24" dev "o$S$n" &&
		ip -n "om$S$n" link set "o$S$n" up &&
		ip -n "om$S$n" link set lo up || return 1
		NODE_NETNS[$n]="om$S$n"
		i=$((i + 1))
	done
}
netns_up || { skip "cannot create network namespaces and a bridge here"; done_testing; exit; }
ok "three network namespaces on a bridge" true

NET=10.78.$((S % 250))
new_secret "$T/secret"
cat >"$T/omni.yaml" <<YAML
secret_file: $T/secret
state_dir: $T/state
pool: host:128MiB
readers: 0
nodes:
  a: { addr: $NET.1:7070, stages: ["0"] }
  b: { addr: $NET.2:7070, stages: ["1"] }
  c: { addr: $NET.3:7070, stages: ["2"] }
YAML
peers_up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = "$2" ]; }
all_up() { local n; for n in a b c; do peers_up $n 2 || return 1; done; }
# a serves each removal and complete read it is told 0.4 s late, so that
# the last section can look at b's log while a has not answered yet.
OMNIFS_TEST_SERVE_DELAY_MS=40 OMNIFS_TEST_TOLD_HOLD_MS=400 start_node a "config=$T/omni.yaml,node=a"
for n in b c; do start_node $n "config=$T/omni.yaml,node=$n"; done
ok "every node sees its peers up across the bridge" wait_until 15 all_up

head -c $((5 << 20)) /dev/urandom >"$T/r5"
cp "$T/r5" "$T/a/0/1/kept"
ok "b reads a's object over the veth pairs" cmp "$T/r5" "$T/b/0/1/kept"
ok "c reads it too (asking)" cmp "$T/r5" "$T/c/0/1/kept"

# --- a's link is cut in the middle of a transfer ---------------------------
head -c $((40 << 20)) /dev/urandom >"$T/a/0/1/cut"
res=$(read_cut "$T/b/0/1/cut" ip link set "o${S}ap" down)
is "$res" "Input/output error 1" "a reader on b whose owner's link is cut mid-read gets EIO within 10 s"
ok "b sees a down" wait_until 10 peers_up b 1
empty() { [ -z "$(ls "$T/$1")" ]; }
ok "a's objects leave b's listing" wait_until 10 empty b/0/1
is "$(health b "[p['state'] for p in d['peers'] if p['name'] == 'a'][0]")" down "b's health says a is down"
echo "b and c carry on" >"$T/b/1/2/on"
is "$(cat "$T/c/1/2/on")" "b and c carry on" "the rest of the cluster keeps working"
ok "a still has its own objects" cmp "$T/r5" "$T/a/0/1/kept"

# --- the link comes back ----------------------------------------------------
ip link set "o${S}ap" up
ok "a rejoins with nobody restarted" wait_until 15 all_up
ok "a's surviving object is listed on b again" wait_until 10 test -e "$T/b/0/1/kept"
ok "and reads whole" cmp "$T/r5" "$T/b/0/1/kept"
ok "c sees b's object from a's side too" cmp <(echo "b and c carry on") "$T/a/1/2/on"

# --- a get through the module copies behind its pull, and fails with it -------
# omnifs.Mount.get asks WHERE_SOON: each range is copied once LANDED says it
# is here, while the rest is still on the wire (a serves a MiB per 40 ms).
# A pull cut midway fails the get with EIO, never with part of the bytes.
module_get() {  # MNT KEY [CMD...]: crc32 and whether copying began before the last byte, or the errno
	PYTHONPATH="$SRC/contrib/python" $SYSPY - "$@" <<'PYEOF'
import errno, subprocess, sys, zlib
import omnifs
from omnifs import direct
seen, real = [], direct.landed
def landed(pl, upto):
    real(pl, upto)
    seen.append(pl.have < pl.size)
    if sys.argv[3:] and len(seen) == 1:
        subprocess.run(sys.argv[3:], check=True)
direct.landed = landed
try:
    print(zlib.crc32(omnifs.Mount(sys.argv[1]).get("0", "1", sys.argv[2], timeout=10)), seen[0])
except OSError as e:
    print(errno.errorcode[e.errno])
PYEOF
}
crc() { $SYSPY -c "import sys, zlib; print(zlib.crc32(open(sys.argv[1], 'rb').read()))" "$1"; }
head -c $((12 << 20)) /dev/urandom >"$T/r12"
cp "$T/r12" "$T/a/0/1/soon"
is "$(module_get "$T/b" soon)" "$(crc "$T/r12") True" \
   "a get on b copies a's object as it lands, byte-exact"
head -c $((40 << 20)) /dev/urandom >"$T/a/0/1/cut2"
is "$(module_get "$T/b" cut2 ip link set "o${S}ap" down)" EIO \
   "a get on b whose owner's link is cut mid-pull: EIO, no bytes"
ok "b sees a down" wait_until 10 peers_up b 1
ip link set "o${S}ap" up
ok "a rejoins" wait_until 15 all_up
# b's complete reads of a's objects, owed while a was cut off, are said and
# answered: b's log of what it owes goes.
b_owes_nothing() { ! test -e "$T/state/b.owed"; }
ok "b has told a what it owed, and a has answered" wait_until 15 b_owes_nothing

# --- words on a connection that dies before they arrive are told again --------
# Just after b's link is cut, b reads a's object of one read (its bytes came
# with its announce) and removes another of a's: both words go out on a
# connection b still thinks up, and die with it.  Once the link is back, a
# hears both (and counts the read once), and neither comes back on b.
owe_a() {       # owe_a ONCE GONE: b's link cut, b reads ONCE and removes GONE
	$SYSPY -c "
import os, sys
for k in sys.argv[1:]:
    with open('$T/a/0/1/' + k, 'wb') as f:
        os.setxattr(f.fileno(), 'user.omni.readers', b'1')
        f.write(b'one read\n')
" "$1" "$2"
	ok "b hears of a's objects" wait_until 5 test -e "$T/b/0/1/$1" -a -e "$T/b/0/1/$2"
	ip link set "o${S}bp" down
	is "$(cat "$T/b/0/1/$1")" "one read" "b reads a's object of one read as its link is cut"
	ok "... and removes another of a's" rm "$T/b/0/1/$2"
	ok "b sees a down" wait_until 10 peers_up b 0
}
owe_a once gone
ip link set "o${S}bp" up
ok "b rejoins" wait_until 15 all_up
ok "a hears of the read: its object is used up" wait_until 10 sh -c "! test -e '$T/a/0/1/once'"
ok "a hears of the removal" wait_until 10 sh -c "! test -e '$T/a/0/1/gone'"
ok "neither is listed on b again" wait_until 10 sh -c "! test -e '$T/b/0/1/once' -o -e '$T/b/0/1/gone'"
ok "... and b's log of what it owes is gone" wait_until 15 b_owes_nothing

# --- ... and outlive a restart of b ------------------------------------------
# The same words, but b dies (kill -9) while its link is down: they are
# kept in its state_dir, and its next run says them once a is back.
owe_a once2 gone2
owed_a() { [ "$(health b "[p['owed'] for p in d['peers'] if p['name'] == 'a'][0]")" = 2 ]; }
ok "b's health says it owes a two messages" wait_until 5 owed_a
ok "... and keeps them in its state_dir" test -s "$T/state/b.owed"
disown "${NODE_PID[b]}"    # killed: no "Killed" from bash
kill -9 "${NODE_PID[b]}"
stop_node b
start_node b "config=$T/omni.yaml,node=b"
ok "b's next run owes a the read and the removal" \
   grep -q "omnifs: 2 messages that an earlier run owed its peers" "$T/b.log"
held=$(grep -c "test: holding the" "$T/a.log")
ip link set "o${S}bp" up
ok "b says them to a, which holds the first" \
   wait_until 15 sh -c "[ \$(grep -c 'test: holding the' '$T/a.log') -gt $held ]"
ok "... and b's log keeps them until a has answered" test -s "$T/state/b.owed"
ok "b rejoins" wait_until 15 all_up
ok "a hears of the read that b's earlier run made" wait_until 10 sh -c "! test -e '$T/a/0/1/once2'"
ok "a hears of the removal" wait_until 10 sh -c "! test -e '$T/a/0/1/gone2'"
ok "b owes nothing any more: its log is gone" wait_until 15 b_owes_nothing

done_testing
