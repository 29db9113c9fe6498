#!/bin/bash
# 10-samekey.t - a publish claimed where the edge's publishes meet, with
# the bytes moved by RDMA READ: a reader waiting on the claim's node is
# woken by the claim and READs the object from the writer's pool while the
# writer's close still waits for the claim's answer; two writers of one key
# on two nodes closing at once: one close fails with EEXIST, and readers on
# both nodes READ the winner's bytes.
. "$(dirname "$0")/lib.sh"

cluster a:'"0"' b:'"1"' c:'"2"' <<EOF
pool: host:128MiB
wait_ms: 20000
edges:
  "0->1": { readers: 0 }
EOF
for n in a b c; do node $n; done
all_up() { peer_is a b rdma && peer_is b a rdma && peer_is c a rdma && peer_is c b rdma && peer_is a c rdma && peer_is b c rdma; }
ok "three nodes see each other, by rdma" wait_until 30 all_up || peers_of a b c

# A reader on b (the host of 1: the claims of 0->1 go there) waits for a
# 4 MiB key; a's writer closes; the reader's bytes come by READ.
head -c 4194304 /dev/urandom >"$T/x"
pulled=$(stat_of b bytes_pulled_rdma)
read_later "$T/b/0/1/x" "$T/x"
waiting() { [ "$(stat_of b waiters)" -ge 1 ]; }
ok "a reader waits on b" wait_until 10 waiting
cp "$T/x" "$T/a/0/1/x"
ok "the reader ends" wait_until 20 all_gone "$LATE"
is "$(cat "$T/late.out")" same "the claimed object reads byte-exact on b"
is "$(( $(stat_of b bytes_pulled_rdma) - pulled ))" 4194304 "... by RDMA READ"
is "$(stat_of b bytes_pulled_tcp)" 0 "... none of it over TCP"
is "$(stat_of b peer_claims)" 1 "... the publish was claimed at b"

race() { $PY "$SRC/tests/tools/samekey.py" "$T" 0/1 "$@" abc; }  # race SIZE N WRITERS
is "$(race 1048576 5 ac | tee "$T/race.out" | tail -n 1)" "done 5" \
   "writers on a and c of one 1 MiB key: one wins, every node READs its bytes" || cat "$T/race.out"
is "$(race 1048576 5 ab | tee "$T/race.out" | tail -n 1)" "done 5" \
   "... a writer on the claim's node itself against one on a" || cat "$T/race.out"
is "$(stat_of a bytes_pulled_tcp)$(stat_of b bytes_pulled_tcp)$(stat_of c bytes_pulled_tcp)" 000 \
   "no byte went over TCP"
diag "pulled by rdma: a $(stat_of a bytes_pulled_rdma) b $(stat_of b bytes_pulled_rdma) c $(stat_of c bytes_pulled_rdma)"
done_testing
