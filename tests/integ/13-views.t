#!/bin/bash
# 13-views.t - KV payloads and rank-shard views (SPEC §4.2, §5, §6): torn
# payloads, user.omni.kv, views merged and sliced and checked byte for byte
# against an independent computation on one node and with shards on three,
# the bytes a view pulls, consumption by coverage, and bad views.
. "$(dirname "$0")/../lib.sh"

KVPY="import sys; sys.path.insert(0, '$(cd "$(dirname "$0")/../py" && pwd)'); import kvpy"
CASES=${KV_CASES:-200}

start_node a "pool=host:256M,node=a,wait_ms=4000"
M=$T/a/p/q

# --- payloads at publish ----------------------------------------------------
$SYSPY -c "$KVPY
import os
t = [os.urandom(2 * 4 * 16) for _ in range(4)]
open('$T/good', 'wb').write(kvpy.native(t, layers=2))
b = bytearray(kvpy.native(t, layers=2)); b[-1] ^= 1
open('$T/torn', 'wb').write(b)
b = bytearray(kvpy.native(t, layers=2)); b[20] ^= 1    # tokens: a lie
open('$T/lie', 'wb').write(b)
open('$T/cut', 'wb').write(kvpy.native(t, layers=2)[:-64])
"
cp "$T/good" "$M/good"
kv=$(xattr kv "$M/good")
is "$($PY -c "import json; d = json.loads('$kv'); print(d['format'], d['layers'], d['tokens'], d['head_count'], d['dtype'], d['layout'])")" \
   "native 2 4 2 f16 HND" "getfattr user.omni.kv summarises the header"
ok "a native payload built from FORMAT.md publishes" cmp "$T/good" "$M/good"
is "$(M=$M pyerr "f = open(M + '/torn', 'wb'); f.write(open('$T/torn', 'rb').read()); f.close()")" \
   EIO "a payload whose bytes fail a head's checksum: close gives EIO"
is "$(M=$M pyerr "os.stat(M + '/torn')")" ENOENT "... and it is not published"
is "$(M=$M pyerr "f = open(M + '/torn\nomnifs: x', 'wb'); f.write(open('$T/torn', 'rb').read()); f.close()")" \
   EIO "... nor under a name with a newline"
ok "... whose log line escapes it" grep -q '^omnifs: p/q/torn\\012omnifs:\\040x: torn KV payload' "$T/a.log"
# The same through a name the kernel kept after its object left, by the
# Python module's small PUT (one ioctl): no empty file stays behind it.
echo once >"$M/kept"
cat "$M/kept" >/dev/null
is "$(PYTHONPATH="$SRC/contrib/python" pyerr "import omnifs; omnifs.Mount('$T/a').put('p', 'q', 'kept', open('$T/torn', 'rb').read())")" \
   EIO "a torn payload's small PUT through a consumed name: EIO"
is "$(M=$M pyerr "os.stat(M + '/kept')")" ENOENT "... and no empty file is left behind that name"
is "$(M=$M pyerr "f = open(M + '/lie', 'wb'); f.write(open('$T/lie', 'rb').read()); f.close()")" \
   EIO "a header that lies about its shape: EIO"
is "$(M=$M pyerr "f = open(M + '/cut', 'wb'); f.write(open('$T/cut', 'rb').read()); f.close()")" \
   EIO "a payload cut short: EIO"
echo plain >"$M/plain"
ok "a plain object has no user.omni.kv" sh -c "! getfattr -n user.omni.kv '$M/plain' 2>/dev/null"

# --- vllm-omni payloads, byte by byte -----------------------------------------
# Every layer missing is a valid payload upstream: published, read whole,
# with nothing to view.
$SYSPY -c "$KVPY
open('$T/none', 'wb').write(kvpy.vllm([None, None], [None, None], rid='gone'))"
ok "a vllm-omni payload of missing layers only is published" \
   $PY -c "import shutil; shutil.copyfile('$T/none', '$M/none')"
ok "... and read back whole" cmp "$T/none" "$M/none"
$PY -c "import shutil; shutil.copyfile('$T/none', '$M/none2')"
is "$(M=$M pyerr "open(M + '/none2.rank0of2')")" EINVAL "... but a view of it: EINVAL"

$SYSPY -c "$KVPY
import os
tok, H, D = 3, 4, 8
full = {(l, kv): os.urandom(tok * H * D * 2) for l in range(2) for kv in 'KV'}
def part(t, h0, n):     # [tokens, H, D] -> [tokens, n, D]
    return b''.join(t[(k * H + h0) * D * 2:(k * H + h0 + n) * D * 2] for k in range(tok))
for i in range(2):      # two shards of two heads, as vllm-omni's TP ranks write them
    p = kvpy.vllm([part(full[l, 'K'], 2 * i, 2) for l in range(2)],
                  [part(full[l, 'V'], 2 * i, 2) for l in range(2)],
                  tokens=tok, heads=2, head_dim=D, rid='req-9', bids=(4, 5))
    open('$T/v.rank%dof2' % i, 'wb').write(p)
# rank 3 of 4 is heads 3..3: the second shard's second head.
# It carries the mark vllm-omni's sender puts on a slice for a larger TP
# (kv_transfer_manager's _slice_transfer_data_for_target), so that a
# vllm-omni receiver does not slice it again.
mark = {'applied': True, 'side': 'sender', 'target_rank': 3, 'source_rank': 1, 'from_tp': 2,
        'to_tp': 4, 'offset_in_shard': 1, 'num_slices': 2}
want = kvpy.vllm([part(full[l, 'K'], 3, 1) for l in range(2)],
                 [part(full[l, 'V'], 3, 1) for l in range(2)], tokens=tok, heads=1,
                 head_dim=D, rid='req-9', bids=(4, 5), meta={'tp_head_slice': mark},
                 extra={'omni': {'head_first': 3, 'heads_total': 4}})
open('$T/v.want', 'wb').write(want)
whole = kvpy.vllm([full[l, 'K'] for l in range(2)], [full[l, 'V'] for l in range(2)],
                  tokens=tok, heads=H, head_dim=D, rid='req-9', bids=(4, 5))
open('$T/v.whole', 'wb').write(whole)
"
for i in 0 1; do $PY -c "import shutil, os; shutil.copyfile('$T/v.rank${i}of2', '$M/v.rank${i}of2')"; done
ok "rank 3 of 4 of vllm-omni shards is their slice, in vllm-omni's format" cmp "$T/v.want" "$M/v.rank3of4"
# Decoded by vllm-omni's from_bytes rules (kvpy.vllm_decode): every view
# of T from S, merged or sliced, gives heads r*H/T... of each layer.
$SYSPY -c "$KVPY
import itertools, os
tok, H, D = 3, 8, 4
full = {(l, kv): os.urandom(tok * H * D * 2) for l in range(3) for kv in 'KV'}
def part(t, h0, n):
    return b''.join(t[(k * H + h0) * D * 2:(k * H + h0 + n) * D * 2] for k in range(tok))
for S in (1, 2, 4, 8):
    for i in range(S):
        n = H // S
        open('$T/d%d.rank%dof%d' % (S, i, S), 'wb').write(kvpy.vllm(
            [part(full[l, 'K'], i * n, n) if l != 1 else None for l in range(3)],
            [part(full[l, 'V'], i * n, n) if l != 1 else None for l in range(3)],
            tokens=tok, heads=n, head_dim=D, rid='rq', bids=(7,), meta={'seq_len': tok}))
"
decodes() {     # S T: every rank of T from S decodes to its heads
	$SYSPY -c "$KVPY
S, T = $1, $2
import os
tok, H, D = 3, 8, 4
raw = {i: open('$T/d%d.rank%dof%d' % (S, i, S), 'rb').read() for i in range(S)}
shard = {i: kvpy.vllm_decode(raw[i]) for i in range(S)}
for r in range(T):
    v = kvpy.vllm_decode(open('$M/dv%d.rank%dof%d' % (S, r, T), 'rb').read())
    n = H // T
    for c in ('key_cache', 'value_cache'):
        assert v[c][1] is None, 'layer 1 is missing'
        for l in (0, 2):
            d, s, b = v[c][l]
            assert d == 'float16' and s == [tok, n, D], (d, s)
            want = b''
            for k in range(tok):    # heads r*n .. r*n+n-1 of the whole, token k
                for h in range(r * n, r * n + n):
                    src = h // (H // S)
                    sb = shard[src][c][l][2]
                    hs = h % (H // S)
                    want += sb[(k * (H // S) + hs) * D * 2:(k * (H // S) + hs + 1) * D * 2]
            assert b == want, (S, T, r, c, l)
    sl = v['metadata'].get('tp_head_slice')
    assert (sl is not None) == (T > S), sl
    if sl:
        assert sl == {'applied': True, 'side': 'sender', 'target_rank': r,
                      'source_rank': r // (T // S), 'from_tp': S, 'to_tp': T,
                      'offset_in_shard': r % (T // S), 'num_slices': T // S}, sl
    assert v['metadata']['seq_len'] == tok and v['request_id'] == 'rq'
"
}
for S in 1 2 4 8; do
	for T_ in 1 2 4 8; do
		$PY -c "
import shutil
for i in range($S):
    shutil.copyfile('$T/d$S.rank%dof$S' % i, '$M/dv$S.rank%dof$S' % i)"
		ok "S=$S T=$T_: every view decodes by vllm-omni's rules to its heads" decodes "$S" "$T_"
		rm -f "$M"/dv$S.rank*of$S 2>/dev/null
	done
done
ok "<key> alone merges them into the whole" cmp "$T/v.whole" "$M/v"
# A view of up to 16 MiB of this node's shards is filled before its open
# is answered; a larger one (32 MiB here) fills on a thread of its own
# while it is read (view.c, small_local): both byte-exact.
$SYSPY -c "$KVPY
import os
tok, H, D = 8192, 4, 128
full = {(l, kv): os.urandom(tok * H * D * 2) for l in range(2) for kv in 'KV'}
def part(t, h0, n):
    return b''.join(t[(k * H + h0) * D * 2:(k * H + h0 + n) * D * 2] for k in range(tok))
for i in range(2):
    open('$T/L.rank%dof2' % i, 'wb').write(kvpy.vllm(
        [part(full[l, 'K'], 2 * i, 2) for l in range(2)],
        [part(full[l, 'V'], 2 * i, 2) for l in range(2)], tokens=tok, heads=2, head_dim=D))
open('$T/L.whole', 'wb').write(kvpy.vllm([full[l, 'K'] for l in range(2)],
                                         [full[l, 'V'] for l in range(2)], tokens=tok, heads=H,
                                         head_dim=D))
"
for i in 0 1; do $PY -c "import shutil; shutil.copyfile('$T/L.rank${i}of2', '$M/L.rank${i}of2')"; done
ok "a 32 MiB merge, filled while it is read, is the whole" cmp "$T/L.whole" "$M/L"
# A view's size, though no object has it: by stat, by fstat while it is
# open, and by lseek to its end (numpy.fromfile sizes its array so).
for i in 0 1; do $PY -c "import shutil; shutil.copyfile('$T/L.rank${i}of2', '$M/Z.rank${i}of2')"; done
size=$(stat -c %s "$T/L.whole")
is "$(stat -c %s "$M/Z")" "$size" "stat gives a view its size before it is open"
is "$(stat -c %s "$M/Z.rank1of4")" "$($PY -c "print(len(open('$M/Z.rank1of4', 'rb').read()))")" \
   "... a slice's too: what it reads to"
is "$($PY -c "
import os
with open('$M/Z', 'rb') as f:
    print(os.fstat(f.fileno()).st_size, f.seek(0, os.SEEK_END))")" "$size $size" "fstat and lseek(SEEK_END) of an open view: its size"
rm -f "$M"/Z.rank*of2
# Read from its end first: those reads wait for bands the fill has not
# reached yet, each woken once its own range is in.
for i in 0 1; do $PY -c "import shutil; shutil.copyfile('$T/L.rank${i}of2', '$M/R.rank${i}of2')"; done
is "$($PY -c "
import os
whole = open('$T/L.whole', 'rb').read()
fd = os.open('$M/R', os.O_RDONLY)        # a view's size is known once it is open: not by stat
step = 1 << 20
got = {off: os.pread(fd, step, off) for off in reversed(range(0, len(whole), step))}
os.close(fd)
print(b''.join(got[o] for o in sorted(got)) == whole)")" True \
   "... and read from its end first, ahead of the fill: byte-exact"
rm -f "$M"/L.rank*of2 "$T"/L.*
ok "every head of both shards was delivered once: both consumed" \
   sh -c "! test -e '$M/v.rank0of2' && ! test -e '$M/v.rank1of2'"

# --- views through the filesystem, property test -------------------------------
out=$("$B/tools/kvgen" 11 "$CASES" "$M" "$M" 2>&1); rc=$?
ok "views byte-exact against an independent computation, one node ($out)" test $rc = 0
diag "$out"
# Views of MiBs, one after another: the daemon reuses their buffers, whose
# alignment gaps must read as zeros again.
out=$(KVGEN_MAX_TOKENS=3000 "$B/tools/kvgen" 12 16 "$T/a/p/big" "$T/a/p/big" 2>&1); rc=$?
ok "large views one after another, buffers reused: byte-exact ($out)" test $rc = 0

# --- bad views -----------------------------------------------------------------
$SYSPY -c "$KVPY
import os
for i in range(2):
    t = [os.urandom(1 * 4 * 16) for _ in range(2)]
    open('$T/b.rank%dof2' % i, 'wb').write(kvpy.native(t, heads_total=2, head_first=i, head_count=1))
"
cp "$T/b.rank0of2" "$M/b.rank0of2"; cp "$T/b.rank1of2" "$M/b.rank1of2"
is "$(M=$M pyerr "open(M + '/b.rank2of2')")" EINVAL "rank r >= T: EINVAL"
is "$(M=$M pyerr "open(M + '/b.rank0of3')")" EINVAL "T that neither divides nor is divided by S: EINVAL"
is "$(M=$M pyerr "open(M + '/b.rank0of4')")" EINVAL "one head per shard cannot split in two: EINVAL"
# A latent (MLA) shard is replicated to any T, up to 65536 (SPEC §5): past
# that a view's reads would be counted in more units than any view has.
$SYSPY -c "$KVPY
import os
open('$T/l', 'wb').write(kvpy.native([os.urandom(4 * 16)], latent=True, heads_total=1, head_count=1))
"
cp "$T/l" "$M/l"
is "$(M=$M pyerr "open(M + '/l.rank65535of65536', 'rb').read()")" OK "a latent shard's view 65536 ways reads"
is "$(M=$M pyerr "open(M + '/l.rank0of65537')")" EINVAL "... 65537 ways: EINVAL"
$SYSPY -c "$KVPY
import os
for i, rid in enumerate(('req-A', 'req-B')):
    open('$M/mix.rank%dof2' % i, 'wb').write(kvpy.vllm([os.urandom(3 * 2 * 8 * 2)], [os.urandom(3 * 2 * 8 * 2)],
                                                      tokens=3, heads=2, head_dim=8, rid=rid))"
is "$(M=$M pyerr "open(M + '/mix')")" EINVAL "vllm-omni shards of two requests make no view: EINVAL"
ok "... and a log line says why" grep -q "shard 0 is of request 'req-A', shard 1 of 'req-B'" "$T/a.log"
# A log line is one line, whatever a key or a payload's rid holds.
$SYSPY -c "$KVPY
import os
for i, rid in enumerate(('req\nA', 'req-B')):
    open('$M/mix\nomnifs: forged.rank%dof2' % i, 'wb').write(kvpy.vllm([os.urandom(3 * 2 * 8 * 2)], [os.urandom(3 * 2 * 8 * 2)],
                                                      tokens=3, heads=2, head_dim=8, rid=rid))"
is "$(M=$M pyerr "open(M + '/mix\nomnifs: forged')")" EINVAL "... nor do shards named with a newline, one of a rid with a newline"
ok "... and the log says so in one line, the newlines escaped" \
	grep -q "^omnifs: mix\\\\012omnifs:\\\\040forged: not a view: shard 0 is of request 'req?A', shard 1 of 'req-B'$" "$T/a.log"
ok "... no line of the log starts with what they held" sh -c "! grep -q '^omnifs: forged\\|^A' '$T/a.log'"
echo x >"$M/n.rank0of2"; echo y >"$M/n.rank1of2"
is "$(M=$M pyerr "open(M + '/n')")" EINVAL "a view of objects that are not KV payloads: EINVAL"
ok "views are not listed" sh -c "! ls '$M' | grep -qx 'b'"
ok "... but stat and getfattr see them" sh -c "getfattr -n user.omni.kv '$M/b' >/dev/null"

# --- consumption by coverage ----------------------------------------------------
$SYSPY -c "$KVPY
import os
for i in range(2):
    t = [os.urandom(2 * 4 * 16) for _ in range(2)]
    open('$T/c.rank%dof2' % i, 'wb').write(kvpy.native(t, heads_total=4, head_first=2 * i, head_count=2))
"
cp "$T/c.rank0of2" "$M/c.rank0of2"; cp "$T/c.rank1of2" "$M/c.rank1of2"
cat "$M/c.rank0of4" >/dev/null
ok "a slice delivered half of shard 0's heads: it stays" test -e "$M/c.rank0of2"
cat "$M/c.rank1of4" >/dev/null
ok "the other half too: shard 0 is consumed" sh -c "! test -e '$M/c.rank0of2'"
ok "shard 1 untouched" test -e "$M/c.rank1of2"
head -c 10 "$M/c.rank3of4" >/dev/null
cat "$M/c.rank2of4" >/dev/null
ok "a partial read of a view delivers nothing" test -e "$M/c.rank1of2"
# The read that completes a view counts then, before its reader's close
# (whose file so needs no FLUSH), as the read of an object does.
$SYSPY -c "$KVPY
import os
for i in range(2):
    t = [os.urandom(2 * 4 * 16) for _ in range(2)]
    open('$M/d.rank%dof2' % i, 'wb').write(kvpy.native(t, heads_total=4, head_first=2 * i, head_count=2))
"
is "$($PY - "$M/d.rank0of1" "$M/d.rank0of2" <<'PYEOF'
import os, sys
f = open(sys.argv[1], "rb", buffering=0)
print(len(f.read()) > 0, os.path.exists(sys.argv[2]), end=" ")
f.close()
print(os.path.exists(sys.argv[2]))
PYEOF
)" "True False False" "a view's complete read consumes its shards before its reader's close"

# --- an open of a view waits for its shards ----------------------------------------
$PY -c "import sys; sys.stdout.buffer.write(open('$M/w.rank0of1', 'rb').read())" >"$T/w.got" 2>&1 &
wpid=$!
$SYSPY -c "$KVPY
import os
t = [os.urandom(2 * 4 * 16) for _ in range(2)]
for i in range(2):
    open('$T/w.rank%dof2' % i, 'wb').write(kvpy.native(t, heads_total=4, head_first=2 * i, head_count=2))
"
sleep_until_waiting() { [ "$(stat_of a waiters)" -ge 1 ]; }
ok "the view's open waits" wait_until 5 sleep_until_waiting
cp "$T/w.rank0of2" "$M/w.rank0of2"
# Its job, waiting for the other shard now, keeps off the CPU of the
# thread that opened it (view.c, step_aside): there the FUSE thread that
# serves its reads is likely to run while the job copies.
view_cpus() {
	$SYSPY - "${NODE_PID[a]}" <<'EOF'
import os, sys
pid = sys.argv[1]
for t in os.listdir("/proc/%s/task" % pid):
    try:
        if open("/proc/%s/task/%s/comm" % (pid, t)).read().strip() == "omni-view":
            job, daemon = os.sched_getaffinity(int(t)), os.sched_getaffinity(int(pid))
            print(len(job), len(daemon), job < daemon)
    except OSError:
        pass    # a thread that has just ended
EOF
}
has_view_job() { [ -n "$(view_cpus)" ]; }
if [ "$(nproc)" -lt 2 ]; then
	skip "one CPU: nowhere else for a view's job"
else
	wait_until 3 has_view_job      # within the open's wait_ms (4 s)
	read -r njob ndaemon subset < <(view_cpus)
	ok "... its job may run on every CPU of the daemon's but one ($njob of $ndaemon)" \
	   test "$subset" = True -a "$njob" = "$((ndaemon - 1))"
fi
cp "$T/w.rank1of2" "$M/w.rank1of2"
wait_until 10 all_gone $wpid || kill $wpid 2>/dev/null
wait $wpid
ok "... and is answered once both shards are published" \
   sh -c "[ \$(wc -c <'$T/w.got') -gt 200 ] && head -c 8 '$T/w.got' | grep -q OMNIKV"
cp "$T/w.rank0of2" "$M/u.rank0of2"
is "$(M=$M pyerr "open(M + '/u')")" ENOENT "a view whose other shard never comes: ENOENT after wait_ms"

stop_node a

# --- views while their shards come and go -----------------------------------------
# Readers close views, and their releases are served, while other threads
# are still sending the replies to their reads, and shards are consumed or
# removed between a view's lookup and its open (under SAN=1 the daemon is
# sanitized: a use after free or a crash ends it).
start_node v "pool=host:128M,node=v,wait_ms=200"
mkdir -p "$T/v/0/2"
out=$(timeout 60 $SYSPY "$SRC/tests/tools/viewchurn.py" "$T/v/0/2" 5 2>&1); rc=$?
ok "5 s of views opened, read and closed while their shards come and go ($out)" test $rc = 0
ok "... the daemon is still up" kill -0 "${NODE_PID[v]}"
rm -f "$T"/v/0/2/*
is "$(grep -o '"used":[0-9]*' "$T/v/.omni/health")" '"used":0' "... and once the shards are removed its pool is empty"
stop_node v

# The same with the writers on v and the readers on w: a view of shards on
# another node holds them from its open on (a read of it must not fail
# because the owner removed one), and its opens through names the kernel
# kept see no ESTALE.
read -r PV PW < <(free_ports 2)
new_secret "$T/vsecret"
cat >"$T/vw.yaml" <<EOF
secret_file: $T/vsecret
pool: host:128MiB
wait_ms: 200
nodes:
  v: { addr: 127.0.0.1:$PV, stages: ["2"] }
  w: { addr: 127.0.0.1:$PW, stages: ["2"] }
EOF
for n in v w; do start_node $n "config=$T/vw.yaml,node=$n"; done
vw_up() { [ "$(health w "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
ok "v and w up" wait_until 10 vw_up
mkdir -p "$T/v/0/2"
out=$(timeout 60 $SYSPY "$SRC/tests/tools/viewchurn.py" "$T/v/0/2" 5 "$T/w/0/2" 2>&1); rc=$?
ok "5 s of views on w of shards on v that come and go ($out)" test $rc = 0
rm -f "$T"/v/0/2/*
vw_empty() { [ "$(health v "d['pool']['used']")" = 0 ] && [ "$(health w "d['pool']['used']")" = 0 ]; }
ok "... and once the shards are removed both pools are empty" wait_until 10 vw_empty
# w stopped (SIGTERM) with a view of v's shards open and part read: it
# closes the view itself before its peers go (its sources back to v, its
# buffers freed; under SAN=1 what it left would be reported, and its exit
# status 1).
"$B/tools/kvgen" shards 2 64 4 64 2 "$T/v/0/2/held" >/dev/null
$SYSPY - "$T/w/0/2/held" "$T/held.ready" <<'PYEOF' & hr=$!
import sys, time
f = open(sys.argv[1], "rb")
f.read(100)
open(sys.argv[2], "w").close()
time.sleep(30)                  # killed by the test long before
PYEOF
ok "a reader on w holds a view of v's shards, part read" wait_until 5 test -e "$T/held.ready"
term_node w
is "$?" 0 "w, stopped with the view open, exits with status 0"
kill "$hr" 2>/dev/null; wait "$hr" 2>/dev/null
rm -f "$T"/v/0/2/held*
v_empty() { [ "$(health v "d['pool']['used']")" = 0 ]; }
ok "... and v's pool is empty once the shards are removed" wait_until 10 v_empty
stop_node v
stop_node w

# --- three nodes ----------------------------------------------------------------
read -r PA PB PC < <(free_ports 3)
new_secret "$T/secret"
cat >"$T/omni.yaml" <<EOF
secret_file: $T/secret
pool: host:256MiB
wait_ms: 8000
nodes:
  a: { addr: 127.0.0.1:$PA, stages: ["q"] }
  b: { addr: 127.0.0.1:$PB, stages: ["q"] }
  c: { addr: 127.0.0.1:$PC, stages: ["z"] }    # c finds shards by asking
edges:
  "p->q": { readers: 0 }
EOF
for n in a b c; do start_node $n "config=$T/omni.yaml,node=$n"; done
all_up() { local n; for n in a b c; do [ "$(health $n "sum(p['state'] == 'up' for p in d['peers'])")" = 2 ] || return 1; done; }
ok "three nodes up" wait_until 10 all_up

# A lookup of a key that is nowhere, on c (which hosts no <to> of the
# edge, so hears no announces of it), asks the others, then lists only
# what could be a view's shards by that name (<key>.rank...): not the
# whole edge, which cost such a lookup 8 ms with 20k objects on it.
for i in $(seq 20); do echo x >"$T/a/p/q/many$i"; done
objects0=$(health c "d['objects']")
ok "a stat on c of a key that is nowhere: ENOENT" sh -c "! stat '$T/c/p/q/nowhere' 2>/dev/null"
is "$(health c "d['objects']")" "$objects0" "... and c has learnt none of the edge's 20 other objects"
rm -f "$T"/a/p/q/many*

out=$("$B/tools/kvgen" 12 "$CASES" "$T/c/p/q" "$T/a/p/q" "$T/b/p/q" "$T/c/p/q" 2>&1); rc=$?
ok "views byte-exact with shards on three nodes, read on one that asks ($out)" test $rc = 0
diag "$out"

# Exactly the view's data bytes cross the network: shards on a and b, read on c.
$SYSPY -c "$KVPY
import os
for i in range(4):
    t = [os.urandom(4 * 64 * 128 * 2) for _ in range(8)]
    open('$T/x.rank%dof4' % i, 'wb').write(kvpy.native(t, layers=4, tokens=64, head_dim=128,
        heads_total=16, head_first=4 * i, head_count=4))
"
for i in 0 1; do cp "$T/x.rank${i}of4" "$T/a/p/q/x.rank${i}of4"; done
for i in 2 3; do cp "$T/x.rank${i}of4" "$T/b/p/q/x.rank${i}of4"; done
seen_on_c() { test -e "$T/c/p/q/x.rank3of4"; }
ok "c hears of the shards" wait_until 5 seen_on_c
for T_ in 1 2 8; do
	before=$(stat_of c bytes_pulled)
	data=$($PY -c "import json; print(json.loads('''$(getfattr --absolute-names --only-values -n user.omni.kv "$T/c/p/q/x.rank0of$T_")''')['data_bytes'])")
	cat "$T/c/p/q/x.rank0of$T_" >/dev/null
	is "$(( $(stat_of c bytes_pulled) - before ))" "$data" "rank 0 of $T_ on c pulls its $data data bytes, no more"
done
# An open view's bytes lie in the pool (memory that is in already, where a
# fresh buffer costs a fault a page), over whatever the pool held there,
# and its close gives the room back.
"$B/omnikv" view --rank 0 --of 1 -o "$T/x.view" "$T"/x.rank?of4
pool_used() { health c "d['pool']['used']"; }
u0=$(pool_used)
exec 3<"$T/c/p/q/x.rank0of1"
u1=$(pool_used)
ok "an open view of $(stat -c %s "$T/x.view") B lies in c's pool (+$((u1 - u0)) B)" \
	test $((u1 - u0)) -ge "$(stat -c %s "$T/x.view")"
ok "... reads as omnikv view makes it" cmp "$T/x.view" /dev/fd/3
exec 3<&-
room_back() { [ "$(pool_used)" = "$u0" ]; }
ok "... and its close gives the room back" wait_until 5 room_back
# vllm-omni shards (NHD): a slice is a strided pull of every token's row.
$SYSPY -c "$KVPY
import os
for i in range(2):
    open('$T/y.rank%dof2' % i, 'wb').write(kvpy.vllm([os.urandom(64 * 4 * 32 * 2) for _ in range(3)],
        [os.urandom(64 * 4 * 32 * 2) for _ in range(3)], tokens=64, heads=4, head_dim=32))
"
cp "$T/y.rank0of2" "$T/a/p/q/"; cp "$T/y.rank1of2" "$T/b/p/q/"
ok "c hears of the vllm-omni shards" wait_until 5 test -e "$T/c/p/q/y.rank1of2"
before=$(stat_of c bytes_pulled)
data=$(getfattr --absolute-names --only-values -n user.omni.kv "$T/c/p/q/y.rank3of8" |
	$PY -c "import json, sys; print(json.load(sys.stdin)['data_bytes'])")
cat "$T/c/p/q/y.rank3of8" >/dev/null
is "$(( $(stat_of c bytes_pulled) - before ))" "$data" "a slice of vllm-omni shards pulls its $data data bytes, no more"
before=$(stat_of a bytes_pulled)
cat "$T/a/p/q/x.rank0of8" >/dev/null
is "$(( $(stat_of a bytes_pulled) - before ))" 0 "a view of a's own shard pulls nothing"

# A view's pulls land in their own buffer, not through the fetch's path:
# a chunk that fails its hash must fail the view's read there too.
stop_node a
ok "c drops a's shards" wait_until 10 sh -c "! test -e '$T/c/p/q/x.rank0of4'"
OMNIFS_TEST_CORRUPT=1 start_node a "config=$T/omni.yaml,node=a"
ok "a restarted rejoins" wait_until 10 all_up
for i in 0 1; do cp "$T/x.rank${i}of4" "$T/a/p/q/x.rank${i}of4"; done
ok "c hears of them again" wait_until 5 test -e "$T/c/p/q/x.rank1of4"
bad=$(stat_of c checksum_failures)
is "$(M=$T/c pyerr "open(M + '/p/q/x.rank0of2', 'rb').read()")" EIO \
	"a view whose pulled chunk fails its hash: EIO on c"
ok "... counted" test "$(stat_of c checksum_failures)" -gt "$bad"

# A view's sources on another node are taken for it (their owner's lease)
# when its first pulls reach them, so an rm there before that must fail
# the view's open with ENOENT, as it would have a moment earlier, not
# succeed for its reads to fail.  c hears of the rm late (its GONE held).
stop_node c
OMNIFS_TEST_GONE_HOLD_MS=3000 start_node c "config=$T/omni.yaml,node=c"
ok "c restarted rejoins" wait_until 10 all_up
used_b=$(health b "d['pool']['used']")
$SYSPY -c "$KVPY
import os
for i in range(2):
    t = [os.urandom(4 * 64 * 128 * 2) for _ in range(8)]
    open('$T/b/p/q/g.rank%dof2' % i, 'wb').write(kvpy.native(t, layers=4, tokens=64, head_dim=128,
        heads_total=8, head_first=4 * i, head_count=4))
"
ok "c hears of b's shards" wait_until 5 test -e "$T/c/p/q/g.rank1of2"
rm "$T/b/p/q/g.rank1of2"
is "$(M=$T/c pyerr "open(M + '/p/q/g.rank0of1', 'rb')")" ENOENT \
	"a view's open on c after b removed a shard, before c hears so: ENOENT"
is "$(M=$T/c pyerr "open(M + '/p/q/g.rank0of4', 'rb').read()")" OK \
	"... while a view of the shard that is left reads"

# ... and a view that has opened holds them: an rm at their owner since
# does not cut its read short.
$SYSPY -c "$KVPY
import os
for i in range(2):
    t = [os.urandom(4 * 64 * 128 * 2) for _ in range(8)]
    open('$T/h.rank%dof2' % i, 'wb').write(kvpy.native(t, layers=4, tokens=64, head_dim=128,
        heads_total=8, head_first=4 * i, head_count=4))
"
"$B/omnikv" view --rank 0 --of 1 -o "$T/h.view" "$T"/h.rank?of2
for i in 0 1; do cp "$T/h.rank${i}of2" "$T/b/p/q/"; done
ok "c hears of b's other shards" wait_until 5 test -e "$T/c/p/q/h.rank1of2"
exec 3<"$T/c/p/q/h.rank0of1"
rm "$T"/b/p/q/h.rank?of2
ok "a view opened on c, its shards removed at b since, reads whole and right" \
	sh -c "cmp '$T/h.view' - <&3"
exec 3<&-
used_is() { [ "$(health "$1" "d['pool']['used']")" = "$2" ]; }
ok "... c's pool is empty again" wait_until 10 used_is c 0
rm "$T/b/p/q/g.rank0of2"
ok "... and b's holds what it held before, once the shard is removed" \
	wait_until 10 used_is b "$used_b"

# --- a view whose shards' owner is lost while it lands ------------------------
# SPEC §4.7 for views: the reads of a view on c, its shards on b, fail with
# EIO when b dies (at once: the connection closes) or freezes (once b has
# been silent for dead_ms, 3 s), never hang, and c keeps nothing of it.  b
# serves each chunk 200 ms late, so the view is still landing when the
# fault comes, one MiB into its read.
$SYSPY -c "$KVPY
import os
for i in range(2):
    t = [os.urandom(1024 * 4 * 128 * 2) for _ in range(8)]
    open('$T/lost.rank%dof2' % i, 'wb').write(kvpy.native(t, layers=4, tokens=1024, head_dim=128,
        heads_total=8, head_first=4 * i, head_count=4))
"
# view_lost NAME SIGNAL SECS: reads 1 MiB of c's view NAME.rank0of1,
# sends b SIGNAL, reads on; prints what the rest of the read gave, and
# "late" if that came SECS seconds or more after the signal.  A read that
# hangs is cut at 30 s (and prints nothing).
view_lost() {
	timeout 30 $SYSPY - "$T/c/p/q/$1.rank0of1" "${NODE_PID[b]}" "$2" "$3" <<'PYEOF'
import errno, os, signal, sys, time
with open(sys.argv[1], "rb", buffering=0) as f:
    f.read(1 << 20)
    os.kill(int(sys.argv[2]), getattr(signal, sys.argv[3]))
    t = time.monotonic()
    try:
        while f.read(1 << 20):
            pass
        what = "OK"
    except OSError as e:
        what = errno.errorcode.get(e.errno, str(e.errno))
    print(what + (" late" if time.monotonic() - t >= float(sys.argv[4]) else ""))
PYEOF
}
# b's pool is warm before it is killed: a daemon killed while its thread
# of idle priority warms the pool closes its connections only once that
# thread has had a core, which on a busy machine can be seconds (README,
# "Mounting"); c then sees b go by its silence.
warm_b() { [ "$(health b "d['pool']['warming']")" = False ]; }
lost_shards() {
	stop_node b
	OMNIFS_TEST_SERVE_DELAY_MS=200 start_node b "config=$T/omni.yaml,node=b"
	# c hosts no q: it learns of each shard by asking (the stats do)
	wait_until 10 all_up && wait_until 30 warm_b && cp "$T"/lost.rank?of2 "$T/b/p/q/" &&
		wait_until 5 test -e "$T/c/p/q/lost.rank0of2" &&
		wait_until 5 test -e "$T/c/p/q/lost.rank1of2"
}
ok "b serves slowly, and c hears of its shards" lost_shards
disown "${NODE_PID[b]}"    # killed by view_lost: no "Killed" from bash
is "$(view_lost lost SIGKILL 2)" EIO "a view on c whose shards' owner dies while it lands: EIO at once (< 2 s)"
ok "... c is still up" kill -0 "${NODE_PID[c]}"
ok "... and keeps nothing of it" wait_until 10 used_is c 0
ok "b back, serving slowly, c hears of its shards again" lost_shards
is "$(view_lost lost SIGSTOP 10)" EIO "... whose owner freezes: EIO once b has been silent for dead_ms (3 s; < 10 s)"
kill -CONT "${NODE_PID[b]}"
ok "... and c keeps nothing of it either" wait_until 10 used_is c 0

# --- a view waiting for a shard, the shard it holds lost ----------------------
# c's view of two shards holds the first (b's) while it waits for the
# second; b dies: the view cannot be made any more, and its open fails
# with EIO then, not with ENOENT at the end of its wait (8 s).
ok "b back, c hears of its shards again" lost_shards
cp "$T/lost.rank0of2" "$T/b/p/q/half.rank0of2"
ok "c hears of the first shard" wait_until 5 test -e "$T/c/p/q/half.rank0of2"
$SYSPY - "$T/c/p/q/half.rank0of1" >"$T/half.out" <<'PYEOF' &
import errno, sys, time
try:
    open(sys.argv[1], "rb")
    print("opened")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)), time.monotonic())
PYEOF
half=$!
view_waits() { [ "$(stat_of c waiters)" -ge 1 ]; }
ok "c's view waits for the second shard" wait_until 5 view_waits
t0=$($PY -c "import time; print(time.monotonic())")
disown "${NODE_PID[b]}"    # no "Killed" from bash
kill -9 "${NODE_PID[b]}"
wait_until 10 all_gone "$half"
read -r what t1 <"$T/half.out"
is "$what" EIO "... its first shard's owner killed: the view's open fails with EIO"
ok "... at once (< 3 s), not at its wait_ms (8 s)" awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 3) }'
is "$(stat_of c waiters)" 0 "... and no waiter is left on c"

# --- a view of shards lost before its open --------------------------------------
# b's shards went with it: a new open of a view of them fails with EIO at
# once, as the shards' own opens do, not with ENOENT at its wait_ms (8 s);
# until they are written again.
for v in lost.rank0of1 lost lost.rank1of4 half.rank0of1; do
	is "$(M=$T/c/p/q timeout 5 $SYSPY -c "
import errno, os, time
t = time.monotonic()
try:
    open(os.environ['M'] + '/$v', 'rb')
    print('opened')
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)), 'late' if time.monotonic() - t > 3 else 'soon')")" \
		"EIO soon" "a new open on c of $v, its shards' owner dead: EIO at once"
done
stop_node b         # (its mount, left by the kill)
start_node b "config=$T/omni.yaml,node=b"
ok "b back" wait_until 10 all_up
cp "$T"/lost.rank?of2 "$T/b/p/q/"
ok "... the shards written again on b, c hears of them" wait_until 5 test -e "$T/c/p/q/lost.rank1of2"
"$B/omnikv" view --rank 0 --of 1 -o "$T/lost.view" "$T"/lost.rank?of2
ok "... and its view of them reads as omnikv view makes it" \
	sh -c "cmp '$T/lost.view' '$T/c/p/q/lost.rank0of1'"
done_testing
