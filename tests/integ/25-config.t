#!/bin/bash
# 25-config.t - every node must run the same cluster config (SPEC §7): a
# node whose config says other stages (a rolling update half done, a copy
# edited on one host) routes announces and asks by another map of who
# hosts what.  The handshake carries a digest of the nodes, addresses and
# stages: a node that meets a peer whose config differs says so in one
# log line and in .omni/health, and goes on serving; the order the file
# lists them in does not count.
. "$(dirname "$0")/../lib.sh"

read -r PA PB < <(free_ports 2)
new_secret "$T/secret"
cat >"$T/omni.yaml" <<YAML
secret_file: $T/secret
pool: host:64MiB
nodes:
  a: { addr: 127.0.0.1:$PA, stages: ["0", "2"] }
  b: { addr: 127.0.0.1:$PB, stages: ["1"] }
YAML
# the same, listed in another order
cat >"$T/same.yaml" <<YAML
nodes:
  b: { addr: 127.0.0.1:$PB, stages: ["1"] }
  a: { addr: 127.0.0.1:$PA, stages: ["2", "0"] }
pool: host:64MiB
secret_file: $T/secret
YAML
# b's copy, edited: it thinks b hosts 2 as well
sed 's/stages: \["1"\]/stages: ["1", "2"]/' "$T/omni.yaml" >"$T/other.yaml"

up() { [ "$(health "$1" "[p['state'] for p in d['peers']][0]")" = up ]; }
both_up() { up a && up b; }
differs() { health "$1" "[p.get('config_differs', False) for p in d['peers']][0]"; }

start_node a "config=$T/omni.yaml,node=a"
start_node b "config=$T/same.yaml,node=b"
ok "a and b, the same config listed in another order, see each other up" wait_until 10 both_up
is "$(differs a) $(differs b)" "False False" "... and neither says the configs differ"
ok "... nor logs it" sh -c "! grep -q 'another cluster config' '$T/a.log' '$T/b.log'"

stop_node b
start_node b "config=$T/other.yaml,node=b"
ok "b with an edited config: both still see each other up" wait_until 10 both_up
is "$(differs a) $(differs b)" "True True" "... and each says, in its health, that the other's config differs"
ok "... and in one log line" \
   grep -qx "omnifs: peer b (127.0.0.1:$PB) runs another cluster config than this node (its nodes, addresses or stages differ): every node must run the same one" "$T/a.log"
echo served >"$T/a/0/1/k"
is "$(timeout 10 cat "$T/b/0/1/k")" served "... and they go on serving"

stop_node b
start_node b "config=$T/omni.yaml,node=b"
ok "b with a's config again: both up" wait_until 10 both_up
is "$(differs a) $(differs b)" "False False" "... and neither says the configs differ"

done_testing
