#!/bin/bash
# 14-omnikv.t - the omnikv tool (SPEC §6): inspect, verify, convert both
# ways without loss, view offline the bytes the filesystem gives, and pack
# vLLM's paged caches (.npy) in each block layout.
. "$(dirname "$0")/../lib.sh"

KVPY="import sys; sys.path.insert(0, '$SRC/tests/py'); import kvpy"
K=$B/omnikv
cd "$T" || bail "no $T"

$SYSPY -c "$KVPY
import os, json
meta = json.dumps({'rid': 'req-3', 'bids': [5, 8], 'meta': {'x': 1}}, separators=(',', ':')).encode()
t = [os.urandom(2 * 4 * 16) for _ in range(4)]
open('n.kv', 'wb').write(kvpy.native(t, layers=2, meta=meta))
b = bytearray(open('n.kv', 'rb').read()); b[-3] ^= 4
open('bad.kv', 'wb').write(b)
keys = [os.urandom(4 * 2 * 16) for _ in range(3)]
vals = [os.urandom(4 * 2 * 16) if l != 1 else None for l in range(3)]
keys[1] = None
open('v.kv', 'wb').write(kvpy.vllm(keys, vals, rid='req-4', bids=(1, 2, 3)))
# what json.dumps makes of text that json-c would write otherwise: '/',
# non-ASCII, astral code points, floats as repr() spells them
open('u.kv', 'wb').write(kvpy.vllm(keys, vals, rid='chat/7\u00e9\U0001F600',
    meta={'path': 'a/b', 'f': 1e-05, 't': 0.1, 'n': None, 'big': 2 ** 63 + 1}))
"
echo plain >plain

ok "inspect describes a native payload" sh -c "'$K' inspect n.kv | grep -q 'native KV payload, f16 HND K and V'"
is "$("$K" inspect --json v.kv | $PY -c 'import json,sys; d=json.load(sys.stdin); print(d["format"], d["layers"], d["missing_tensors"])')" \
   "vllm-omni 3 2" "inspect --json of a vllm-omni payload with a missing layer"
"$K" verify n.kv >/dev/null; is $? 0 "verify: intact, exit 0"
"$K" verify bad.kv 2>/dev/null; is $? 1 "verify: a flipped bit, exit 1"
"$K" verify plain 2>/dev/null; is $? 2 "verify: not KV, exit 2"
"$K" inspect 2>/dev/null; is $? 2 "a usage error exits 2"
"$K" inspect "$T" 2>"$T/err"; is $? 2 "inspect of a directory exits 2"
is "$(cat "$T/err")" "omnikv: $T: Is a directory" "... and says why"
"$K" bogus 2>"$T/err"; is $? 2 "an unknown command exits 2"
is "$(head -1 "$T/err")" "omnikv: unknown command 'bogus'" "... and names it"

"$K" convert --to native v.kv v.native && "$K" convert --to vllm v.native v.back
ok "vllm-omni -> native -> vllm-omni gives the same bytes" cmp v.kv v.back
ok "the native one verifies" "$K" verify v.native
"$K" convert --to vllm n.kv n.vllm && "$K" convert --to native n.vllm n.back &&
	"$K" convert --to vllm n.back n.vllm2
ok "native -> vllm-omni -> native keeps tensors and metadata" cmp n.vllm n.vllm2
ok "native -> vllm-omni -> native gives the same bytes" cmp n.kv n.back
"$K" convert --to native u.kv u.native && "$K" convert --to vllm u.native u.back
ok "vllm-omni -> native -> vllm-omni keeps json.dumps' spelling, escapes and floats" cmp u.kv u.back
is "$($SYSPY -c "import json; print(json.loads(open('n.vllm','rb').read()[4:4 + int.from_bytes(open('n.vllm','rb').read()[:4], 'big')])['rid'])")" \
   req-3 "rid and bids travel from the native metadata into vllm-omni's header"

# --- views offline are the filesystem's ----------------------------------------
$SYSPY -c "$KVPY
import os
for i in range(2):
    t = [os.urandom(3 * 5 * 16) for _ in range(4)]
    open('s.rank%dof2' % i, 'wb').write(kvpy.native(t, layers=2, tokens=5, heads_total=6,
        head_first=3 * i, head_count=3, layout=kvpy.NHD))
"
start_node a "pool=host:64M,node=a,readers=0"   # shards stay for every view
mkdir -p "$T/a/p/q" 2>/dev/null
for i in 0 1; do cp "s.rank${i}of2" "$T/a/p/q/"; done
for v in "0 1" "1 2" "1 6"; do
	set -- $v
	"$K" view --rank "$1" --of "$2" -o "off.$1.$2" s.rank0of2 s.rank1of2
	ok "omnikv view --rank $1 --of $2 gives the filesystem's bytes" cmp "off.$1.$2" "$T/a/p/q/s.rank$1of$2"
done
"$K" view --rank 0 --of 4 s.rank0of2 s.rank1of2 2>/dev/null; is $? 2 "a view that cannot be made: exit 2"

# --- pack from vLLM's paged caches ---------------------------------------------
$SYSPY -c "$KVPY
import os, struct, json
L, NB, BS, H, D = 2, 6, 4, 2, 8
blocks, tokens = [4, 1, 3], 10
def npy(path, shape, data):
    h = \"{'descr': '<f2', 'fortran_order': False, 'shape': (%s), }\" % ''.join('%d, ' % s for s in shape)
    h += ' ' * ((64 - (10 + len(h) + 1) % 64) % 64) + '\n'
    open(path, 'wb').write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode() + data)
cache = {(l, kv): os.urandom(NB * BS * H * D * 2) for l in range(L) for kv in range(2)}
row = H * D * 2
for l in range(L):
    npy('k%d.npy' % l, (NB, BS, H, D), cache[l, 0])
    npy('v%d.npy' % l, (NB, BS, H, D), cache[l, 1])
    npy('a%d.npy' % l, (2, NB, BS, H, D), cache[l, 0] + cache[l, 1])
    npy('b%d.npy' % l, (NB, 2, BS, H, D), b''.join(cache[l, kv][n * BS * row:(n + 1) * BS * row]
                                                    for n in range(NB) for kv in range(2)))
def gather(c):
    return b''.join(c[(blocks[t // BS] * BS + t % BS) * row:(blocks[t // BS] * BS + t % BS + 1) * row]
                    for t in range(tokens))
t = [gather(cache[l, kv]) for l in range(L) for kv in range(2)]
meta = json.dumps({'rid': 'r9', 'bids': blocks, 'meta': {}}, separators=(',', ':')).encode()
open('want.kv', 'wb').write(kvpy.native(t, layers=L, tokens=tokens, heads_total=H, head_count=H,
                                        head_dim=D, layout=kvpy.NHD, meta=meta))
"
"$K" pack --cache kv --blocks 4,1,3 --tokens 10 --rid r9 p.kv.kv k0.npy v0.npy k1.npy v1.npy
ok "pack of K/V pairs gathers the request's tokens" cmp want.kv p.kv.kv
"$K" pack --cache 2nbhd --blocks 4,1,3 --tokens 10 --rid r9 p.a.kv a0.npy a1.npy
ok "pack of [2, blocks, block, heads, dim]: the same payload" cmp want.kv p.a.kv
"$K" pack --cache n2bhd --blocks 4,1,3 --tokens 10 --rid r9 p.b.kv b0.npy b1.npy
ok "pack of [blocks, 2, block, heads, dim]: the same payload" cmp want.kv p.b.kv
"$K" pack --cache kv --blocks 4,9,3 --tokens 10 p.x k0.npy v0.npy k1.npy v1.npy 2>/dev/null
is $? 1 "a block id past the cache: refused"
"$K" pack --cache 2nbhd --blocks 4,1,3 --tokens 10 p.y k0.npy 2>/dev/null
is $? 1 "an array of another layout: refused"
"$K" pack --cache 2nbhd --blocks 4,1,3 --tokens 10 p.y "$T" 2>"$T/err"
is "$?:$(cat "$T/err")" "1:omnikv: $T: Is a directory" "an array that is a directory: refused, and why"
"$K" pack --cache kv --blocks 4,1,3 --tokens 10 --to vllm p.v k0.npy v0.npy k1.npy v1.npy
ok "pack --to vllm writes a vllm-omni payload" sh -c "'$K' inspect p.v | grep -q vllm-omni"
# Any request id, and every block id, reach vllm-omni's header as given.
ids=4,1,3,$(seq -s, 1000 2999)
"$K" pack --cache kv --blocks "$ids" --tokens 10 --rid 'chat"7\/é' p.r k0.npy v0.npy k1.npy v1.npy &&
	"$K" convert --to vllm p.r p.rv
is "$($SYSPY -c "import json; b = open('p.rv', 'rb').read(); h = json.loads(b[4:4 + int.from_bytes(b[:4], 'big')])
print(h['rid'] == 'chat\"7\\\\/\u00e9', ','.join(map(str, h['bids'])) == '$ids')")" "True True" \
   "a request id with quotes and escapes, and 2003 block ids, come out of pack whole"
# A bad command line says what is wrong, exits 2 and writes nothing.
for bad in "--blocks x" "--blocks 4,,1" "--blocks 4,-1" "--tokens 10x" "--to vlm" "--dtype f17" \
	   "--head-first 1.5" "--heads-total 0" "--cache kx"; do
	args="--cache kv --blocks 4,1,3 --tokens 10 $bad"
	timeout 10 "$K" pack $args p.bad k0.npy v0.npy k1.npy v1.npy 2>"$T/err"
	is "$?$(test -e p.bad && echo " written")" 2 "pack $bad: exit 2, nothing written"
	ok "... and says which option" grep -q -- "^omnikv: ${bad%% *} " "$T/err"
done
for bad in "--rank x --of 2" "--rank 1 --of 2x" "--rank 2 --of 2" "--rank 0 --of 0"; do
	"$K" view $bad -o v.bad s.rank0of2 s.rank1of2 2>"$T/err"
	is "$?$(test -e v.bad && echo " written")" 2 "view $bad: exit 2, nothing written"
	ok "... and says which option" grep -q -- "^omnikv: --" "$T/err"
done
for c in inspect verify convert view pack; do
	ok "omnikv $c --help says its usage" sh -c "'$K' $c --help | grep -q '^usage: omnikv $c '"
done
done_testing
