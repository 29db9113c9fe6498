#!/bin/bash
# 01-pinned.t - a pinned pool (SPEC §8): host memory that CUDA page-locks
# for every device, so that GPU copies in and out of it run by DMA.  On a
# machine with a CUDA device: it mounts and says so, objects from 1 B to
# 1 GiB of odd sizes, written in odd pieces, read back byte-exact at odd
# offsets, with the checksum an independent hash gives; a full pool is
# ENOSPC and takes nothing; another node reads a pinned pool's object and
# pulls into its own pinned pool.  Elsewhere: SKIP.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib.sh"

start_node a "pool=pinned:1200M,readers=0"
is "$(health a "d['pool']['kind']")" "pinned" ".omni/health says the pool is pinned"
ok "the log names the pool" grep -q "pool pinned" "$T/a.log"

round_trips a
full a 1300

# --- across nodes: b pulls a's object into its own pinned pool (TCP) -------
stop_node a
two_nodes pinned:256M pinned:256M
put $((48 << 20)) x a
ok "b reads a's 48 MiB object into its pinned pool, byte-exact" cmp "$T/x" "$T/b/0/1/x"
is "$(stat_of b bytes_pulled)" $((48 << 20)) "... pulled once, over TCP"

done_testing
