#!/bin/bash
# 01-pinned.t - a pinned pool (SPEC §8): host memory that CUDA page-locks
# for every device, so that GPU copies in and out of it run by DMA.  On a
# machine with a CUDA device: it mounts and says so, objects from 1 B to
# 1 GiB of odd sizes, written in odd pieces, read back byte-exact at odd
# offsets, with the checksum an independent hash gives; a full pool is
# ENOSPC and takes nothing; the connector puts a GPU tensor through the
# host; another node reads a pinned pool's object and
# pulls into its own pinned pool.  Elsewhere: SKIP.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib.sh"

start_node a "pool=pinned:1200M,readers=0"
is "$(health a "d['pool']['kind']")" "pinned" ".omni/health says the pool is pinned"
ok "the log names the pool" grep -q "pool pinned" "$T/a.log"
is "$(health a "d['pool']['shared']")" "True" "... and that workers of this node map it"
ok "a same-node get copies out of the pinned pool through that mapping" $PY - "$T/a" <<'PYEOF'
import os, sys
import omnifs
m, data = omnifs.Mount(sys.argv[1]), os.urandom((8 << 20) + 5)
m.put("0", "1", "mapped", data)
assert bytes(m.get("0", "1", "mapped", timeout=5)) == data
assert m._pool is not None and m._pool[1] is not None, "mapped"
m.remove("0", "1", "mapped")
PYEOF

round_trips a
full a 1300

# A GPU tensor put where the pool is host memory: no device-to-device
# place there (EOPNOTSUPP), so the connector copies it to the host.
if $PY -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
	ok "the connector puts a GPU tensor into a host pool through the host" $PY - "$T" <<'PYEOF'
import sys, torch
from omnifs.vllm_omni import OmniFSConnector
c = OmniFSConnector({"mount": sys.argv[1] + "/a"})
x = torch.randn(256, 512, dtype=torch.bfloat16, device="cuda")
assert c.put("0", "1", "g", x)[0]
y, _ = c.get("0", "1", "g")
assert torch.equal(y, x.cpu())
PYEOF
	is "$(stat_of a cuda_puts)" 0 "... not counted as cuda_puts"
else
	for t in 1 2; do skip "torch with CUDA is not importable here"; done
fi

# --- across nodes: b pulls a's object into its own pinned pool (TCP) -------
stop_node a
two_nodes pinned:256M pinned:256M
put $((48 << 20)) x a
ok "b reads a's 48 MiB object into its pinned pool, byte-exact" cmp "$T/x" "$T/b/0/1/x"
is "$(stat_of b bytes_pulled)" $((48 << 20)) "... pulled once, over TCP"

done_testing
