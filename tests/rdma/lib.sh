# tests/rdma/lib.sh - what the RDMA tests share, on top of tests/lib.sh.
#
# They run inside the soft-RoCE guest (tests/rdma/suite boots it): daemons
# listen on ports of RDMA_VM_IP, the address rxe0 is bound to, so that
# every pair of them can connect queue pairs over the one device.
. "$(dirname "$0")/../lib.sh"

[ -n "${RDMA_VM:-}" ] || { echo "1..0 # SKIP not in the RDMA guest (tests/rdma/suite runs these)"; exit 0; }
IP=$RDMA_VM_IP
# The guest's CPU is slow at faulting pages in: a 1200 MiB pool, without
# huge pages for shared memory, takes about 7 s, its registration more.
MOUNT_WAIT_S=60

# cluster NAME:STAGES... - writes $T/omni.yaml for those nodes on free ports
# of $IP (more settings may follow on stdin) and sets PORT[NAME].
declare -A PORT=()
cluster() {
	local spec name ports i=0
	read -r -a ports < <(free_ports $#)
	new_secret "$T/secret"
	{
		echo "secret_file: $T/secret"
		cat
		echo "nodes:"
		for spec; do
			name=${spec%%:*}
			PORT[$name]=${ports[$i]}
			echo "  $name: { addr: $IP:${ports[$i]}, stages: [${spec#*:}] }"
			i=$((i + 1))
		done
	} >"$T/omni.yaml"
}
# node NAME [OPTS] - starts NAME of $T/omni.yaml
node() { start_node "$1" "config=$T/omni.yaml,node=$1${2:+,$2}"; }
# peer_is NODE PEER TRANSPORT - NODE sees PEER up, moving bytes by TRANSPORT
peer_is() {
	[ "$(health "$1" "[p['state'] + ' ' + p['transport'] for p in d['peers'] if p['name'] == '$2'][0]")" = "up $3" ]
}
# peers_of NODE... - each NODE's peers as its health says them, as
# diagnostics: what a wait for transports that failed found instead
peers_of() {
	local n
	for n; do
		diag "$n's peers: $(health "$n" "'; '.join(' '.join([p['name'], p['state'], p['transport'], p.get('transport_why', p.get('down_why', ''))]) for p in d['peers'])")"
	done
}
