#!/bin/bash
# 02-device.t - a pool of GPU memory (SPEC §8, pool=cuda:DEV:SIZE), and the
# same-node hand-over from it with no host copy.  On a machine with a CUDA
# device: objects from 1 B to 1 GiB of odd sizes, written in odd pieces
# (and one backwards), read back byte-exact at odd offsets, with the
# checksum an independent hash gives; a full pool is ENOSPC and takes nothing; a second process
# takes an object by the pool's IPC handle (OMNIFS_IOC_CUDA), byte-exact,
# and its close consumes it; user.omni.cuda_ipc says where, to root only;
# another node's object is pulled into the GPU pool and handed over the
# same way, and the GPU pool's objects are pulled by another node, each
# chunk checked against the sums hashed as the bytes were written; an
# object a second process placed is hashed from the sums the GPU takes
# of its blocks (hashed_by_sums), chunk sums too; get_cuda keeps working
# across a restart of its daemon with a host pool.  Elsewhere: SKIP.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib.sh"

start_node a "pool=cuda:0:1200M,readers=0,allow_other"
is "$(health a "d['pool']['kind']")" "cuda" ".omni/health says the pool is GPU memory"
is "$(health a "d['pool']['gpudirect']")" "False" "... and that no RDMA device reads it (gpudirect)"
is "$(health a "d['pool']['device']")" 0 "... of GPU 0 (device), where get_cuda's tensors go"

round_trips a
backwards a
full a 1300

# --- the hand-over: a second process, by the pool's IPC handle ------------
# take NODE NAME: reads NAME by OMNIFS_IOC_CUDA into host memory (through
# the GPU: cuMemcpyDtoH out of the opened pool) and compares with $T/NAME
take() {
	$PY - "$T/$1/0/1/$2" "$T/$2" <<'PYEOF'
import os, sys
from omnifs import cuda
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    got = cuda.get_bytes(fd)
finally:
    os.close(fd)
sys.exit(0 if bytes(got) == open(sys.argv[2], "rb").read() else "differs")
PYEOF
}
$PY - "$T/a/0/1/h" "$T/h" <<'PYEOF'
import os, sys
data = os.urandom((3 << 20) + 7)
open(sys.argv[2], "wb").write(data)
with open(sys.argv[1], "wb") as f:
    os.setxattr(f.fileno(), "user.omni.readers", b"1")
    f.write(data)
PYEOF
gets=$(stat_of a cuda_gets)
js=$(getfattr --absolute-names --only-values -n user.omni.cuda_ipc "$T/a/0/1/h" 2>/dev/null)
ok "user.omni.cuda_ipc gives the device, a 64-byte handle, the size and xxh3" $PY -c "
import base64, json, sys
d = json.loads(sys.argv[1])
assert d['device'] == 0 and len(base64.b64decode(d['handle'])) == 64, d
assert d['size'] == $(( (3 << 20) + 7 )) and d['xxh3'] == sys.argv[2], d
assert sum(n for _, n in d['extents']) == d['size'] and d['offset'] == d['extents'][0][0], d
" "$js" "$(xattr xxh3 "$T/a/0/1/h")"
if command -v setpriv >/dev/null; then
	chmod 755 "$T"     # mktemp's 0700 would refuse nobody before omnifs is asked
	nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
	ok "nobody reads the object's other attributes (user.omni.size)" \
		nobody getfattr -n user.omni.size "$T/a/0/1/h"
	ok "... but not user.omni.cuda_ipc: to root and the daemon's user only (EACCES)" sh -c \
		"$(declare -f nobody); nobody getfattr -n user.omni.cuda_ipc '$T/a/0/1/h' 2>&1 | grep -q 'Permission denied'"
else
	skip "no setpriv to ask as another user"
	skip "no setpriv to ask as another user"
fi
ok "OMNIFS_IOC_SHARE: a GPU pool is not a file to map (EOPNOTSUPP)" $PY - "$T/a/0/1/h" <<'PYEOF'
import errno, os, sys
from omnifs import direct
with open(sys.argv[1], "rb") as f:       # no read: not consumed
    try:
        direct.Pool(f.fileno())
        sys.exit("shared")
    except OSError as e:
        sys.exit(0 if e.errno == errno.EOPNOTSUPP else errno.errorcode[e.errno])
PYEOF
ok "a second process takes 3 MiB + 7 B device to device by the IPC handle, byte-exact" take a h
is "$(stat_of a cuda_gets)" $((gets + 1)) "... counted as cuda_gets"
ok "... and its close consumed it (readers 1)" wait_until 5 sh -c "! [ -e '$T/a/0/1/h' ]"

# --- and the other way: a second process fills a new object itself ---------
# OMNIFS_IOC_CUDA_PLACE, then copies into the opened pool; its close
# publishes, hashed from the device.
sums=$(stat_of a hashed_by_sums)
place $(( (5 << 20) + 13 )) p a
ok "a second process places 5 MiB + 13 B into the pool itself; they read back byte-exact" \
	cmp "$T/a/0/1/p" "$T/p"
xxh3_is "$T/p" "$T/a/0/1/p" "... with the checksum of its bytes, hashed from the device"
is "$(stat_of a cuda_puts)" 1 "... counted as cuda_puts"
is "$(stat_of a hashed_by_sums)" $((sums + 1)) "... hashed from its blocks' sums, which the GPU took"
ok "CUDA_PLACE after a write is EBUSY, and the object is still written as it goes" $PY - "$T/a/0/1/pw" <<'PYEOF'
import errno, os, sys
from omnifs import cuda
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
os.write(fd, b"abc")
try:
    cuda.place(fd, 10)
    sys.exit("placed after a write")
except OSError as e:
    assert e.errno == errno.EBUSY, e
os.close(fd)
assert open(sys.argv[1], "rb").read() == b"abc"
PYEOF

ok "CUDA_PLACE's OMNIFS_PLACE_SOLE: the close publishes though a dup is open; other flags EINVAL" \
	$PY - "$T/a/0/1/ps" <<'PYEOF'
import errno, os, sys
from omnifs import cuda
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
try:
    cuda._ask(fd, cuda.PLACE_IOC, 3, 2)
    sys.exit("flag 2 taken")
except OSError as e:
    assert e.errno == errno.EINVAL, e
cuda.place(fd, 3)                       # says SOLE
os.pwrite(fd, b"xyz", 0)
dup = os.dup(fd)                        # what a sole writer says it never does
os.close(fd)
assert os.path.basename(sys.argv[1]) in os.listdir(os.path.dirname(sys.argv[1])), "not published"
os.close(dup)
assert open(sys.argv[1], "rb").read() == b"xyz"
PYEOF

TORCH=$($PY -c "import torch; assert torch.cuda.is_available(); print(1)" 2>/dev/null)
if [ "$TORCH" ]; then
	ok "Mount.put_cuda publishes a GPU tensor copied into the pool device to device" $PY - "$T" <<'PYEOF'
import sys, torch, omnifs
m = omnifs.Mount(sys.argv[1] + "/a")
x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
assert m.put_cuda("0", "1", "pt", x, head=b"hd") == 2 + (4 << 20)
got = open(sys.argv[1] + "/a/0/1/pt", "rb").read()
assert got[:2] == b"hd" and got[2:] == bytes(x.cpu().numpy()), "differs"
PYEOF
	puts=$(stat_of a cuda_puts)
	ok "the connector puts GPU tensors device to device; get gives them back" $PY - "$T" <<'PYEOF'
import sys, torch
from omnifs.vllm_omni import OmniFSConnector
c = OmniFSConnector({"mount": sys.argv[1] + "/a"})
x = torch.randn(64, 1024, dtype=torch.float16, device="cuda")
raw = torch.randint(0, 256, (3 << 20,), dtype=torch.uint8, device="cuda")
assert c.put("0", "1", "ct", x)[0] and c.put("0", "1", "cr", raw)[0]
y, _ = c.get("0", "1", "ct")
assert torch.equal(y, x.cpu()), "tensor differs"
b, _ = c.get("0", "1", "cr")
assert bytes(b) == bytes(raw.cpu().numpy()), "payload differs"
PYEOF
	is "$(stat_of a cuda_puts)" $((puts + 2)) "... both counted as cuda_puts"
	put $((16 << 20)) t a
	ok "Mount.get_cuda gives a GPU tensor of the bytes, copied out of the pool" $PY - "$T" <<'PYEOF'
import sys, torch, omnifs
t = omnifs.Mount(sys.argv[1] + "/a").get_cuda("0", "1", "t")
assert t.is_cuda and t.dtype == torch.uint8
assert bytes(t.cpu().numpy()) == open(sys.argv[1] + "/t", "rb").read()
PYEOF
else
	for t in 1 2 3 4; do skip "torch with CUDA is not importable here"; done
fi

# get_cuda asks health which GPU the pool is once per Mount: a worker
# whose daemon comes back with a host pool still gets its bytes, and asks
# again.  It waits on a fifo, its descriptors closed, while a is
# restarted below.
mkfifo "$T/go"
[ "$TORCH" ] && $PY - "$T" >"$T/again.out" 2>&1 <<'PYEOF' &
import sys, omnifs
m = omnifs.Mount(sys.argv[1] + "/a")
def get(k, data):
    m.put("0", "1", k, data)
    assert bytes(m.get_cuda("0", "1", k).cpu().numpy()) == data, k
get("g1", b"one" * 1000)
assert m._gpu_dev == 0, m._gpu_dev
m.close()                                       # the cache stays
print("ready", flush=True)
open(sys.argv[1] + "/go").read()                # a has a host pool now
get("g2", b"two" * 1000)                         # EOPNOTSUPP: read instead
assert m._gpu_dev is None, m._gpu_dev
get("g3", b"three" * 1000)
assert m._gpu_dev == -1, m._gpu_dev
print("same")
PYEOF
AGAIN=$!
[ "$TORCH" ] && wait_until 30 grep -q ready "$T/again.out"

# --- across nodes: b's pool is GPU memory, a's is host memory (TCP) ---------
stop_node a
two_nodes host:256M cuda:0:256M
if [ "$TORCH" ]; then
	timeout 10 sh -c "echo > '$T/go'"
	wait_until 60 all_gone "$AGAIN" || kill "$AGAIN" 2>/dev/null
	wait "$AGAIN"
	is "$(tail -1 "$T/again.out")" same "get_cuda after its daemon came back with a host pool: the bytes, and health asked again"
else
	skip "torch with CUDA is not importable here"
fi
put $((48 << 20)) x a
ok "b reads a's 48 MiB object into its GPU pool, byte-exact" cmp "$T/x" "$T/b/0/1/x"
put $((5 << 20)) y a
ok "a GPU process on b takes a's object out of b's GPU pool by the IPC handle" take b y
# b hashed what it was written as the bytes passed (no read back from the
# GPU): a's pull checks every chunk against b's sums
put $(( (40 << 20) + 3 )) z b
ok "a reads b's 40 MiB object out of b's GPU pool, byte-exact" cmp "$T/z" "$T/a/0/1/z"
is "$(stat_of a checksum_failures)" 0 "... every chunk as b's sums say"
# placed by a GPU process on b: hashed from the GPU's sums, with the
# chunk sums a's pull checks
sums=$(stat_of b hashed_by_sums)
place $(( (9 << 20) + 5 )) q b
is "$(stat_of b hashed_by_sums)" $((sums + 1)) "b hashed a placed 9 MiB + 5 B object from the GPU's sums of its blocks"
xxh3_is "$T/q" "$T/b/0/1/q" "... its xxh3 is the bytes'"
ok "a reads it byte-exact" cmp "$T/q" "$T/a/0/1/q"
is "$(stat_of a checksum_failures)" 0 "... each chunk as b's sums say"
done_testing
