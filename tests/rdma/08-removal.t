#!/bin/bash
# 08-removal.t - the RDMA device goes while the daemons run (a driver
# reload, a NIC reset, `rdma link delete`): every daemon lets go of it at
# once, so that the kernel can finish removing it (before, the removal
# waited for the daemons to exit); each says so, and its peers' bytes move
# over TCP (transport=auto) or not at all (transport=rdma), as its log and
# health say, never silently.  When the device is back, each opens it
# again and its peers' bytes move by RDMA again, nobody restarted; a
# node that does no RDMA (transport=tcp) is left as it was, and one that
# is frozen when it comes back is taken down, and read again once it runs;
# a handshake under way then, which settled its transport without the
# device, is made again.
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1"' c:'"2"' d:'"3"' <<EOF
pool: host:64MiB
readers: 0
wait_ms: 10000
EOF
# a's rdma_cm thread holds each pair peers connected to it, once its end
# is heard, before it destroys its id: when the device goes, a's tender
# ends those peers' connections meanwhile, whose ends must find the pair
# gone, or the completion queue stays, and so does the device, for good
OMNIFS_TEST_CM_HOLD_MS=2000 \
node a
# b's handshakes are held: one under way when the device comes back is
# one that settled its transport without it (the last part)
OMNIFS_TEST_HANDSHAKE_HOLD_MS=1000 \
node b pool=host:6MiB         # a view's buffer does not fit in it: it is registered memory
node c transport=rdma
node d transport=tcp
NETDEV=$(rdma link show | awk '/rxe0/ { for (i = 1; i <= NF; i++) if ($i == "netdev") print $(i + 1) }')
[ -n "$NETDEV" ] || bail "no netdev under rxe0: $(rdma link show)"
# A second device that nobody uses: librdmacm lets go of its own handle
# of a device that went only when it looks at the list of devices and
# finds another there (rdma-core's sync_devices_list), as on a GPU node
# with a NIC per GPU.  Without one, rxe's removal waits for the daemons
# to exit (README, "RDMA"); drivers that disassociate (mlx5) do not.
ip link add rxenet9 type dummy && ip addr add 10.77.9.1/24 dev rxenet9 && ip link set rxenet9 up &&
	rdma link add rxe9 type rxe netdev rxenet9 || bail "cannot add a second rxe device"
CLEANUP_HOOKS+=(devices_back)
devices_back() {
	[ -n "${KEEPLOGS:-}" ] && cp "$T"/*.log "$KEEPLOGS"/
	rdma link show | grep -q '^link rxe0/' || rdma link add rxe0 type rxe netdev "$NETDEV"
	rdma link delete rxe9
	ip link delete rxenet9
}

all_rdma() { peer_is b a rdma && peer_is a b rdma && peer_is c a rdma; }
ok "b and c read a by rdma" wait_until 20 all_rdma || peers_of a b c
head -c 3000000 /dev/urandom >"$T/x"
cp "$T/x" "$T/a/0/1/x1" && cp "$T/x" "$T/a/0/2/x1"
ok "b reads a's object" cmp "$T/x" "$T/b/0/1/x1"
ok "c reads a's object" cmp "$T/x" "$T/c/0/2/x1"
cp "$T/x" "$T/a/0/3/x1"
d_tcp() { peer_is d a tcp && peer_is a d tcp; }
ok "d (transport=tcp) and a see each other up, by tcp" wait_until 20 d_tcp
ok "d reads a's object" cmp "$T/x" "$T/d/0/3/x1"
# A view's buffers are registered with the device, and kept for the next.
"$B/tools/kvgen" shards 4 512 8 128 2 "$T/s" || bail "kvgen shards"
"$B/omnikv" view --rank 0 --of 1 -o "$T/s.view" "$T"/s.rank?of2
for i in 0 1; do cp "$T/s.rank${i}of2" "$T/a/0/1/"; done
ok "b reads a view of a's shards" wait_until 10 cmp "$T/s.view" "$T/b/0/1/s.rank0of1"
tcp0=$(stat_of b bytes_pulled_tcp)

# --- the device goes -----------------------------------------------------------
# unplug DESC - rdma link delete rxe0, which finishes within 15 s (while a
# daemon holds the device it waits, in the kernel, for good)
unplug() {
	rdma link delete rxe0 >"$T/delete.out" 2>&1 &
	DELETE=$!
	ok "$1" wait_until 15 deleted ||
		{ peers_of a b c; bail "rdma link delete rxe0 waits still: a daemon holds the device"; }
	wait "$DELETE"
}
deleted() { ! kill -0 "$DELETE" 2>/dev/null; }
unplug "rdma link delete rxe0 finishes within 15 s, three daemons running"
is "$?" 0 "... and succeeds"
ok "... no daemon left a completion queue in use" sh -c "! grep -q 'still in use' '$T'/*.log"
for n in a b c; do
	ok "$n's log says the device went" grep -q "omnifs: rdma: rxe0 was removed: " "$T/$n.log"
done
ok "... with auto: peers are read over tcp until it is back" \
	grep -q "rxe0 was removed: peers' objects are read over tcp until it is back" "$T/b.log"
ok "... with transport=rdma: they cannot be read" \
	grep -q "rxe0 was removed: peers' objects cannot be read (transport=rdma) until it is back" \
	"$T/c.log"
b_tcp() { peer_is b a tcp && peer_is a b tcp; }
ok "b and a see each other up, by tcp" wait_until 15 b_tcp
is "$(health b "[p['transport_why'] for p in d['peers'] if p['name'] == 'a'][0]")" \
   "rxe0 was removed" "b's health says why a is read over tcp"
is "$(health b "d.get('rdma_gone'), d.get('rdma_device')")" "rxe0 was removed None" \
   "b's health says the device went, and names none in use"
cp "$T/x" "$T/a/0/1/x2" && cp "$T/x" "$T/a/0/2/x2"
ok "b reads a's new object byte-exact" cmp "$T/x" "$T/b/0/1/x2"
ok "... over tcp" test "$(stat_of b bytes_pulled_tcp)" -ge $((tcp0 + 3000000))
c_none() { peer_is c a none; }
ok "c (transport=rdma) sees a up, by nothing" wait_until 15 c_none
is "$(M=$T/c pyerr "open(M + '/0/2/x2', 'rb').read()")" EIO "... and reads of a's objects fail: EIO"

# --- it comes back, under reads ----------------------------------------------------
# b reads a's object and a reads b's, over and over, while the device comes
# back and every daemon connects again: no read may fail or differ.
head -c 1000000 /dev/urandom >"$T/y" && cp "$T/y" "$T/b/1/0/y1"
reads() {       # reads NAME FILE COPY: until $T/stop, each read compared
	while [ ! -e "$T/stop" ]; do
		if cmp -s "$2" "$3"; then echo >>"$T/$1.reads"; else echo "$(date +%T.%N)" >>"$T/$1.failed"; fi
	done
}
count() { [ -e "$T/$1" ] && wc -l <"$T/$1" || echo 0; }
: >"$T/b.reads" && : >"$T/a.reads"
reads b "$T/x" "$T/b/0/1/x2" & READERS=($!)
reads a "$T/y" "$T/a/1/0/y1" & READERS+=($!)
CLEANUP_HOOKS+=(stop_readers)
stop_readers() { touch "$T/stop"; wait "${READERS[@]}" 2>/dev/null; }
ok "rxe0 is added again" rdma link add rxe0 type rxe netdev "$NETDEV"
ok "every daemon opens it again: b and c read a by rdma, a reads b, nobody restarted" \
	wait_until 30 all_rdma || peers_of a b c
for n in a b c; do
	ok "$n's log says it is back" grep -q "omnifs: rdma: rxe0 is back" "$T/$n.log"
done
is "$(grep -c 'peer d .*connecting again' "$T/a.log" "$T/b.log" "$T/c.log" | grep -vc ':0$')" 0 \
   "no node connects again to d, which does no RDMA"
is "$(grep -c 'connecting again' "$T/d.log")" 0 "... nor d to them: nobody asked it"
nb=$(count b.reads) na=$(count a.reads)
more() { [ "$(count b.reads)" -ge $((nb + 5)) ] && [ "$(count a.reads)" -ge $((na + 5)) ]; }
ok "reads go on after" wait_until 20 more
stop_readers
is "$(count b.failed) $(count a.failed)" "0 0" \
   "no read failed or differed while the device came back ($(count b.reads) by b, $(count a.reads) by a)"
is "$(health b "d.get('rdma_gone'), d.get('rdma_device')")" "None rxe0" "b's health names it again"
rdma0=$(stat_of b bytes_pulled_rdma) tcp1=$(stat_of b bytes_pulled_tcp)
cp "$T/x" "$T/a/0/1/x3"
ok "b reads a's next object byte-exact" cmp "$T/x" "$T/b/0/1/x3"
is "$(( $(stat_of b bytes_pulled_rdma) - rdma0 )) $(( $(stat_of b bytes_pulled_tcp) - tcp1 ))" \
   "3000000 0" "... by rdma, none of it over tcp"
rdma0=$(stat_of b bytes_pulled_rdma)
ok "b reads the view again, into a buffer it kept from before" cmp "$T/s.view" "$T/b/0/1/s.rank0of1"
ok "... by rdma" test "$(stat_of b bytes_pulled_rdma)" -gt "$rdma0"
is "$(stat_of b bytes_pulled_tcp)" "$tcp1" "... none of it over tcp"
ok "c reads a's object again" cmp "$T/x" "$T/c/0/2/x2"
ok "a's first object still reads on b" cmp "$T/x" "$T/b/0/1/x1"
cp "$T/x" "$T/a/0/3/x2"
ok "d reads a's next object, by tcp as before" cmp "$T/x" "$T/d/0/3/x2"
ok "... d's peers never went down for it" sh -c "! grep -q 'peer a .* down' '$T/d.log'"

# --- it comes back while a peer is frozen ------------------------------------------
# a lets go of its connection to b for the rejoin, and b, stopped, does not
# answer the next one (down: connecting: ...; or, where a request to b was
# in flight, which the rejoin waits for, down: silent too long): a takes b
# down, as any peer that stops answering, and reads b by RDMA again once b
# runs, whatever b's threads find first then.
unplug "rxe0 goes again"
is "$?" 0 "... and succeeds"
ok "... b and a see each other up, by tcp" wait_until 15 b_tcp
downs=$(grep -c "omnifs: peer b (.*) down: " "$T/a.log")
b_down() { [ "$(grep -c "omnifs: peer b (.*) down: " "$T/a.log")" -gt "$downs" ]; }
kill -STOP "${NODE_PID[b]}"
ok "rxe0 is added again, b stopped" rdma link add rxe0 type rxe netdev "$NETDEV"
ok "a takes b down when b does not answer" wait_until 30 b_down
kill -CONT "${NODE_PID[b]}"
ok "... b runs again: b and c read a by rdma, a reads b" wait_until 30 all_rdma || peers_of a b c
cp "$T/y" "$T/b/1/0/y2"
ok "a reads b's new object" cmp "$T/y" "$T/a/1/0/y2"
cp "$T/x" "$T/a/0/1/x4"
ok "b reads a's new object" cmp "$T/x" "$T/b/0/1/x4"

done_testing
