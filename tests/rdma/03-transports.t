#!/bin/bash
# 03-transports.t - nothing falls back silently (SPEC §2): transport=auto
# uses RDMA with each peer where both ends have it and TCP with the others,
# saying which in the log and in health; transport=tcp never touches the
# device; transport=rdma moves no byte over TCP, refusing a peer that
# cannot do RDMA both ways, and fails the mount where there is no device or
# the pool cannot be registered (the memlock limit).
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1"' c:'"2"' <<EOF
pool: host:64MiB
wait_ms: 10000
EOF
node a
node b
# c runs transport=tcp under strace: it must never open the RDMA device.
# (LeakSanitizer cannot work under ptrace: not for this daemon, in SAN=1.)
mkdir -p "$T/c"
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 strace -f -e trace=openat,open -o "$T/c.strace" \
	"$B/omnifs" -f -o "config=$T/omni.yaml,node=c,transport=tcp" "$T/c" >"$T/c.log" 2>&1 &
NODE_PID[c]=$!
wait_until 20 is_mounted "$T/c" || bail "c did not mount"

ok "auto: a reads b by rdma" wait_until 20 peer_is a b rdma
ok "auto: a reads c by tcp" wait_until 20 peer_is a c tcp
is "$(health a "[p.get('transport_why') for p in d['peers'] if p['name'] == 'c'][0]")" \
   "c offers no RDMA" "... and health says why"
ok "a's log says so, one line per peer" \
   grep -q "peer c ($IP:${PORT[c]}) up, transport tcp (c offers no RDMA)" "$T/a.log"
ok "c, transport=tcp, reads a by tcp" wait_until 20 peer_is c a tcp
is "$(health c "d.get('rdma_device', 'none')")" none "c has no RDMA device in use"
ok "c never opened an RDMA device" sh -c "! grep -E 'infiniband|rdma_cm|uverbs' '$T/c.strace'"

# A queue pair comes with the token of an authenticated connection, or not at all.
cm_port=$(sed -n 's/.*rdma_cm port \([0-9]*\)$/\1/p' "$T/a.log")
is "$("$B/tools/rdmaconnect" "$IP" "$cm_port")" rejected "a stranger's queue pair with no token: rejected"
is "$("$B/tools/rdmaconnect" "$IP" "$cm_port" "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')")" \
   rejected "... and with a token a never gave: rejected"
ok "a still reads b by rdma" peer_is a b rdma

head -c 3000000 /dev/urandom >"$T/x"
cp "$T/x" "$T/b/1/0/x"          # owned by b, announced to a (stage 0)
cp "$T/x" "$T/c/2/0/y"          # owned by c
ok "a reads b's object right" cmp "$T/x" "$T/a/1/0/x"
ok "a reads c's object right" cmp "$T/x" "$T/a/2/0/y"
is "$(stat_of a bytes_pulled_rdma) $(stat_of a bytes_pulled_tcp)" "3000000 3000000" \
   "... b's bytes by RDMA, c's over TCP"
cp "$T/x" "$T/a/0/2/z"
ok "c reads a's object right, over TCP" cmp "$T/x" "$T/c/0/2/z"
is "$(stat_of c bytes_pulled_tcp)" 3000000 "... counted as such"
# The CPU time of a's RDMA threads (omni-rdma*), in ms: they wait on the
# completion channel and rdma_cm's events, and spin no core while idle.
rdma_ms() {
	local t ms=0
	for t in /proc/"${NODE_PID[a]}"/task/*; do
		case $(cat "$t/comm") in omni-rdma*)
			ms=$((ms + $(awk '{ print ($14 + $15) * 10 }' "$t/stat")));;
		esac
	done
	echo $ms
}
c0=$(rdma_ms)
sleep 10        # the measurement itself: a's daemon left idle, its queue pairs up
used_ms=$(( $(rdma_ms) - c0 ))
ok "idle, a's RDMA threads spin no core: $used_ms ms of CPU in 10 s" test "$used_ms" -le 20

# --- transport=rdma: a peer without RDMA is refused, both ways ------------------
stop_node a
node a transport=rdma
ok "a, transport=rdma, reads b by rdma" wait_until 20 peer_is a b rdma
ok "a reads nothing of c: transport none" wait_until 20 peer_is a c none
ok "a's log says why, and what follows" grep -q "peer c ($IP:${PORT[c]}) up, transport none: c offers no RDMA, and transport=rdma moves no byte over TCP; reads of its objects fail with EIO" "$T/a.log"
cp "$T/x" "$T/c/2/0/y2"
ok "a hears of c's object" wait_until 10 test -e "$T/a/2/0/y2"
is "$(M=$T/a pyerr "open(M + '/2/0/y2', 'rb').read()")" EIO "... and reading it is EIO"
cp "$T/x" "$T/a/0/2/z2"
is "$(M=$T/c pyerr "open(M + '/0/2/z2', 'rb').read()")" EIO "c's read of a's object: EIO, a serves no TCP pull"
ok "a's log says it refused" grep -q "peer c asked to pull over TCP; refused (transport=rdma)" "$T/a.log"
cp "$T/x" "$T/b/1/0/x2"
ok "b's objects still read right on a" cmp "$T/x" "$T/a/1/0/x2"
stop_node a

# --- mount-time errors ------------------------------------------------------------
read -r PL < <(free_ports 1)
cat >"$T/lo.yaml" <<EOF
secret_file: $T/secret
nodes:
  l: { addr: 127.0.0.1:$PL, stages: ["0"] }
  m: { addr: 127.0.0.1:1, stages: ["1"] }
EOF
mkdir -p "$T/l"
"$B/omnifs" -f -o "config=$T/lo.yaml,node=l,transport=rdma" "$T/l" >"$T/l.out" 2>&1
is "$?" 2 "transport=rdma on an address no RDMA device has: exit status 2"
is "$(wc -l <"$T/l.out")" 1 "... one line"
ok "... naming the option and the address" grep -q "transport=rdma: rdma: no RDMA device has the listen address 127.0.0.1:$PL" "$T/l.out"
ok "... nothing mounted" sh -c "! grep -q ' $T/l ' /proc/mounts"
start_node l "config=$T/lo.yaml,node=l"
ok "auto there mounts, and says every peer moves over tcp" \
   grep -q "no RDMA device has the listen address 127.0.0.1:$PL; every peer's bytes move over tcp" "$T/l.log"
stop_node l

# The memlock limit: without CAP_IPC_LOCK the pool's registration counts.
mkdir -p "$T/a"
nocap 1024 "$B/omnifs" -f -o "config=$T/omni.yaml,node=a,transport=rdma" "$T/a" >"$T/m.out" 2>&1
rc=$?
ok "transport=rdma with memlock 1 MiB and a 64 MiB pool: the mount fails (status $rc)" test $rc -ne 0
is "$(grep -c . "$T/m.out")" 1 "... with one line"
ok "... that names the limit" grep -q "the memlock limit is 1024 KiB (raise ulimit -l or LimitMEMLOCK= to the pool's size)" "$T/m.out"
nocap 1024 "$B/omnifs" -f -o "config=$T/omni.yaml,node=a" "$T/a" >"$T/a.log" 2>&1 &
NODE_PID[a]=$!
wait_until 20 is_mounted "$T/a" || bail "a did not mount"
ok "auto with that limit mounts, says why, and reads b over tcp" wait_until 20 peer_is a b tcp
ok "... the line names the limit" grep -q "memlock limit is 1024 KiB" "$T/a.log"
done_testing
