#!/bin/bash
# The life of an object (SPEC §4.1, 4.2, 4.5, xattrs): write, publish on last
# close, immutability, O_EXCL, holes, xattrs, rm.
. "$(dirname "$0")/../lib.sh"

start_node a "pool=host:256M,wait_ms=3000"
export M=$T/a E=$T/a/s/t

# write in any order and size; holes read as zeros
is "$(pyerr "
f = open(M + '/s/t/ooo', 'wb')
f.seek(300000); f.write(b'B' * 5000)
f.seek(0); f.write(b'A' * 1000)
f.close()")" "OK" "out-of-order writes"
ok "holes read as zeros, bytes where written" $PY -c "
d = open('$E/ooo', 'rb').read()
assert len(d) == 305000 and d[:1000] == b'A' * 1000
assert d[1000:300000] == bytes(299000) and d[300000:] == b'B' * 5000"

# publish is atomic: nothing is listed or read before the last close (its
# node sees how far the writer is: stat, user.omni.size)
exec 5>"$E/atom"
printf 'part' >&5
ok "an object being written is not listed" sh -c "! ls '$E' | grep -q atom"
is "$(xattr state "$E/atom")" "writing" "its state is 'writing'"
is "$(xattr size "$E/atom")" 4 "... its user.omni.size what was written so far"
is "$(stat -c %s:%a "$E/atom")" "4:644" "its stat: what was written so far, mode 0644 (0444 once published)"
( cat "$E/atom" >"$T/atom.out" ) &
reader=$!
ok "a reader waits for it" wait_until 5 grep -q "^waiters: 1$" "$M/.omni/stats"
printf 'ial' >&5
exec 5>&-
wait "$reader"
is "$(cat "$T/atom.out")" "partial" "the waiting reader got every byte after close"

# a writer that seeks to its end finds it there, and fstat says so: the
# kernel asks fstat without the file (Python's mmap, numpy's memmap and
# HDF5 size a file by it; it said 0 before the publish)
is "$(pyerr "
fd = os.open('$E/end', os.O_WRONLY | os.O_CREAT)
os.write(fd, b'a' * 100)
assert os.lseek(fd, 0, os.SEEK_END) == 100, os.lseek(fd, 0, os.SEEK_CUR)
assert os.fstat(fd).st_size == 100, os.fstat(fd).st_size
assert os.stat('$E/end').st_size == 100, os.stat('$E/end').st_size
os.pwrite(fd, b'h', 4999)
assert os.fstat(fd).st_size == 5000, os.fstat(fd).st_size
os.ftruncate(fd, 100)
assert os.fstat(fd).st_size == 100, os.fstat(fd).st_size
os.lseek(fd, 0, os.SEEK_END)
os.write(fd, b'z')
assert os.fstat(fd).st_size == 101, os.fstat(fd).st_size
os.close(fd)")" "OK" "a writer's fstat, stat and SEEK_END: what it wrote, holes and ftruncate too"
is "$(stat -c %s "$E/end"):$(tail -c 1 "$E/end")" "101:z" "... and it writes on from its end"

# a shell redirection dup()s its fd and closes the first one early
echo "via shell" >"$E/sh"
is "$(cat "$E/sh")" "via shell" "echo > key publishes on the last close"
{ echo one; echo two; } >"$E/sh2"
is "$(cat "$E/sh2" | tr '\n' ' ')" "one two " "a grouped redirection writes everything"
# a writer of many descriptors: its dup lies past the first page of the
# daemon's listing of them, and is found there
is "$(pyerr "
fd = os.open(M + '/s/t/manyfd', os.O_WRONLY | os.O_CREAT)
null = [os.open('/dev/null', os.O_RDONLY) for _ in range(300)]
dup = os.dup(fd)
assert dup > 300, dup
os.write(fd, b'many')
os.close(fd)
assert os.getxattr(M + '/s/t/manyfd', 'user.omni.state') == b'writing'
assert 'manyfd' not in os.listdir(M + '/s/t')
os.close(dup)
assert open(M + '/s/t/manyfd', 'rb').read() == b'many'")" "OK" \
	"a dup found among 300 descriptors holds the publish until its own close"
# a descriptor handed to a child process is the child's: the parent's
# close publishes (it looks through its own descriptors only) and the
# child's writes after it fail; closed after the child is done, the
# object has both (README, "Publish")
is "$(pyerr "
import subprocess, sys
child = [sys.executable, '-c', 'import os, sys; sys.stdin.read(1); os.write(1, b\"child\")']
with open(M + '/s/t/kid', 'wb') as f:
    f.write(b'head'); f.flush()
    p = subprocess.Popen(child, stdin=subprocess.PIPE, stdout=f, stderr=subprocess.PIPE)
p.stdin.write(b'g'); p.stdin.close()
err = p.stderr.read(); p.wait()
assert b'PermissionError' in err, err
assert open(M + '/s/t/kid', 'rb').read() == b'head'
with open(M + '/s/t/kid2', 'wb') as f:
    f.write(b'head'); f.flush()
    p = subprocess.Popen(child, stdin=subprocess.PIPE, stdout=f)
    p.stdin.write(b'g'); p.stdin.close(); p.wait()
assert open(M + '/s/t/kid2', 'rb').read() == b'headchild'")" "OK" \
	"a child's copy of the writer's descriptor: the parent's close publishes, the child's writes after it fail with EACCES; closed after the child, both"

# cp holds its source open while it closes the copy: a source whose path
# ends as the key's (/saved/s/t/cp1 for s/t/cp1) is not a dup of the
# writer, and its close publishes, with the publish's answer: a KV
# payload whose bytes fail its header (SPEC 4.2) makes cp fail with EIO.
mkdir -p "$T/saved/s/t"
echo copied >"$T/saved/s/t/cp1"
cp "$T/saved/s/t/cp1" "$E/cp1"
is "$(xattr state "$E/cp1") $(cat "$E/cp1")" "published copied" \
	"cp of a file whose path ends as the key's: published when cp returns"
$SYSPY -c "import sys; sys.path.insert(0, '$SRC/tests/py'); import kvpy
b = bytearray(kvpy.native([bytes(64)] * 4, layers=2)); b[-1] ^= 1
open('$T/saved/s/t/cp2', 'wb').write(b)"
is "$(cp "$T/saved/s/t/cp2" "$E/cp2" 2>&1; echo "exit $?")" \
	"cp: failed to close '$E/cp2': Input/output error
exit 1" "... a torn KV payload's cp fails with EIO, and says so"

# O_EXCL and immutability
echo x >"$E/pub"
is "$(pyerr "os.open(M + '/s/t/pub', os.O_CREAT | os.O_EXCL | os.O_WRONLY)")" "EEXIST" "O_EXCL on a published key: EEXIST"
is "$(pyerr "os.open(M + '/s/t/fresh', os.O_CREAT | os.O_EXCL | os.O_WRONLY)")" "OK" "O_EXCL on a new key"
is "$(pyerr "os.open(M + '/s/t/fresh', os.O_CREAT | os.O_EXCL | os.O_WRONLY)")" "EEXIST" "O_EXCL on a key being written elsewhere: EEXIST"
is "$(pyerr "open(M + '/s/t/pub', 'wb')")" "EACCES" "open for write of a published object: EACCES"
is "$(pyerr "open(M + '/s/t/pub', 'ab')")" "EACCES" "append to a published object: EACCES"
is "$(pyerr "os.truncate(M + '/s/t/pub', 0)")" "EACCES" "truncate of a published object: EACCES"

# xattrs of a published object
dd if=/dev/urandom of="$T/rand" bs=1M count=3 status=none
dd if="$T/rand" of="$E/big" bs=1M status=none
is "$(xattr size "$E/big")" "3145728" "user.omni.size"
is "$(xattr state "$E/big")" "published" "user.omni.state"
is "$(xattr owner "$E/big")" "$(hostname)" "user.omni.owner is this node"
is "$(xattr readers "$E/big")" "1" "user.omni.readers defaults to 1"
is "$(xattr reads "$E/big")" "0" "user.omni.reads starts at 0"
ok "user.omni.xxh3 is 16 hex digits" sh -c "xattr() { getfattr --absolute-names --only-values -n user.omni.xxh3 \"\$1\"; }; xattr '$E/big' | grep -Eq '^[0-9a-f]{16}$'"
now=$(date +%s%N)
pub=$(xattr published_ns "$E/big")
ok "user.omni.published_ns is recent wall-clock ns" test $((now - pub)) -ge 0 -a $((now - pub)) -lt 60000000000
ok "getfattr -d lists them all" sh -c "getfattr --absolute-names -d '$E/big' | grep -c user.omni | grep -qx 7"
exec 6>"$E/unset"
is "$(xattr readers "$E/unset")" "1" "user.omni.readers while written and never set: the edge's (1)"
exec 6>&-
is "$(getfattr --absolute-names -d "$E" 2>&1; echo "exit $?")" "exit 0" "a directory has no attributes: getfattr -d lists none"
# Requests an object cannot honour are refused, and change nothing.
cat >"$T/libc.py" <<'PYEOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(rc):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return rc
PYEOF
is "$(pyerr "exec(open('$T/libc.py').read())
fd = os.open(M + '/s/t/fa', os.O_WRONLY | os.O_CREAT)
os.write(fd, b'abc')
try:
    call(libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(1 << 20)))   # FALLOC_FL_KEEP_SIZE
finally:
    os.close(fd)")" "ENOTSUP" "fallocate keeping the size (or punching a hole): EOPNOTSUPP"
is "$(pyerr "os.rmdir(M + '/s/t/fa')")" "ENOTDIR" "rmdir of an object: ENOTDIR"
is "$(pyerr "exec(open('$T/libc.py').read())
call(libc.getxattr((M + '/s/t/fa').encode(), b'user.omni.xxh3', ctypes.create_string_buffer(4), 4))")" \
   "ERANGE" "getxattr into a buffer too small for the value: ERANGE"
is "$(cat "$E/fa")" "abc" "... and the object is as written"
if $SYSPY -c "import xxhash" 2>/dev/null; then
	xxh() { $SYSPY -c "import sys, xxhash; print(xxhash.xxh3_64_hexdigest(open(sys.argv[1],'rb').read()))" "$1"; }
	is "$(xattr xxh3 "$E/big")" "$(xxh "$T/rand")" "xxh3 matches an independent hash"
	# large objects are hashed while they are written; rewrites and
	# truncation behind the hashed prefix must still give the true hash
	dd if=/dev/urandom of="$T/r24" bs=1M count=24 status=none
	dd if="$T/r24" of="$E/h24" bs=1M status=none
	is "$(xattr xxh3 "$E/h24")" "$(xxh "$T/r24")" "xxh3 of a 24 MiB sequential write"
	$SYSPY -c "
import os, sys
d = bytearray(open('$T/r24', 'rb').read())
f = open('$E/h24b', 'wb', buffering=0)
f.write(d[:20 << 20])
f.seek(1000); f.write(b'rewritten'); d[1000:1009] = b'rewritten'
f.seek(20 << 20); f.write(d[20 << 20:]); f.close()
open('$T/r24b', 'wb').write(d)"
	is "$(xattr xxh3 "$E/h24b")" "$(xxh "$T/r24b")" "xxh3 after a rewrite behind the hashed prefix"
	$SYSPY -c "
f = open('$E/h24c', 'wb', buffering=0)
f.write(open('$T/r24', 'rb').read()); f.truncate(5 << 20); f.close()
open('$T/r24c', 'wb').write(open('$T/r24', 'rb').read()[:5 << 20])"
	is "$(xattr xxh3 "$E/h24c")" "$(xxh "$T/r24c")" "xxh3 after truncating behind the hashed prefix"
	ok "and the bytes read back" sh -c "cmp '$T/r24b' '$E/h24b' && cmp '$T/r24c' '$E/h24c' && cat '$E/h24' >/dev/null"
else
	skip "python xxhash module not installed"
fi
ok "3 MiB read back byte for byte" cmp "$T/rand" "$E/big"

# setxattr user.omni.readers before close; bad values; read-only attributes
exec 6>"$E/r3"
is "$(pyerr "os.setxattr(M + '/s/t/r3', 'user.omni.readers', b'x')")" "EINVAL" "readers=x: EINVAL"
is "$(pyerr "os.setxattr(M + '/s/t/r3', 'user.omni.readers', b'-1')")" "EINVAL" "readers=-1: EINVAL"
is "$(pyerr "os.setxattr(M + '/s/t/r3', 'user.omni.readers', b'3')")" "OK" "readers=3 before close"
is "$(pyerr "os.setxattr(M + '/s/t/r3', 'user.omni.size', b'3')")" "EACCES" "other omni attributes are read-only"
is "$(pyerr "os.setxattr(M + '/s/t/r3', 'user.other', b'3')")" "ENOTSUP" "foreign attributes are not kept"
echo r >&6; exec 6>&-
is "$(pyerr "os.setxattr(M + '/s/t/r3', 'user.omni.readers', b'5')")" "EACCES" "readers after publish: EACCES"
is "$(pyerr "os.removexattr(M + '/s/t/r3', 'user.omni.readers')")" "EACCES" "omni attributes cannot be removed"
is "$(pyerr "os.removexattr(M + '/s/t/r3', 'user.other')")" "ENOTSUP" "nor foreign ones, none being kept"
ok "setfattr -x fails too" sh -c "! setfattr -x user.omni.readers '$E/r3' 2>/dev/null"
for i in 1 2; do cat "$E/r3" >/dev/null; done
is "$(xattr reads "$E/r3")" "2" "two complete reads counted"
cat "$E/r3" >/dev/null
ok "the third read consumed it" sh -c "! ls '$E' | grep -qx r3"

# readers=0 keeps it until rm
exec 6>"$E/keep"; setfattr -n user.omni.readers -v 0 "$E/keep"; echo k >&6; exec 6>&-
for i in 1 2 3; do cat "$E/keep" >/dev/null; done
is "$(xattr reads "$E/keep")" "3" "readers=0: still there after 3 reads"
ok "rm deletes it" rm "$E/keep"
ok "it is gone" sh -c "! ls '$E' | grep -qx keep"
is "$(pyerr "os.unlink(M + '/s/t/keep')")" "ENOENT" "rm of a missing key: ENOENT"

# rm while a reader has it open: the reader finishes
dd if="$T/rand" of="$E/held" bs=1M status=none
exec 7<"$E/held"
rm "$E/held"
ok "removed key is no longer listed" sh -c "! ls '$E' | grep -qx held"
ok "an open reader still reads every byte" cmp "$T/rand" - <&7
exec 7<&-
removed=$(stat_of a removed)
ok "rm is counted" test "$removed" -ge 2

# an object rm'd while being written is never published
exec 8>"$E/gone"; echo a >&8; rm "$E/gone"; echo b >&8 2>/dev/null; exec 8>&-
ok "a key removed during writing never publishes" sh -c "! ls '$E' | grep -qx gone"

# O_TRUNC of an object being written
is "$(pyerr "
f = open(M + '/s/t/tr', 'wb'); f.write(b'long text'); f.flush()
g = open(M + '/s/t/tr', 'wb'); g.write(b'short'); g.close(); f.close()")" "OK" "two writers, second truncates"
is "$(cat "$E/tr")" "short" "O_TRUNC by the second writer applies; last close publishes"

# What the file API does beyond read and write (README, "Objects").
echo mapped >"$E/mm"
head -c 3000001 /dev/urandom >"$T/mp"
# A shared mmap, read or written: the kernel lets a file served with
# direct_io be mapped so from Linux 6.6 on (FUSE_DIRECT_IO_ALLOW_MMAP,
# fs/kinit.h); an older one says ENODEV.
if kernel_at_least 6.6; then
	cp "$T/mp" "$E/ms"
	is "$(pyerr "
import hashlib, mmap
m = mmap.mmap(os.open(M + '/s/t/ms', os.O_RDONLY), 0, prot=mmap.PROT_READ)
print(hashlib.sha256(m).hexdigest())")" "$(sha256sum <"$T/mp" | cut -d' ' -f1)
OK" "a shared mmap reads the object's bytes (Python's ACCESS_READ, safetensors)"
	ok "... and, read whole, consumes it" wait_until 5 test ! -e "$E/ms"
	is "$(pyerr "
import numpy as np
np.save(M + '/s/t/a.npy', np.arange(300000, dtype=np.float32))
a = np.load(M + '/s/t/a.npy', mmap_mode='r')
print(bool((a == np.arange(300000)).all()), a.shape)")" "True (300000,)
OK" "numpy's np.load(mmap_mode='r')"
	is "$(pyerr "
import numpy as np
a = np.memmap(M + '/s/t/w.f32', dtype=np.float32, mode='w+', shape=(300000,))
a[:] = np.arange(300000, dtype=np.float32); a.flush(); del a
print(bool((np.fromfile(M + '/s/t/w.f32', dtype=np.float32) == np.arange(300000)).all()))")" "True
OK" "numpy's memmap(mode='w+') publishes what was written through it"
	# C maps and closes its descriptor, then writes through the
	# mapping: the close was not the last one, the munmap is.
	is "$(pyerr "
import ctypes, hashlib
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
n, p = 3000001, M + '/s/t/cm'
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
os.ftruncate(fd, n)
a = libc.mmap(None, n, 3, 1, fd, 0)      # PROT_READ|PROT_WRITE, MAP_SHARED
assert a not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
os.close(fd)
ctypes.memmove(a, open('$T/mp', 'rb').read(), n)
print(os.getxattr(p, 'user.omni.state').decode())
assert libc.munmap(a, n) == 0
print(os.getxattr(p, 'user.omni.state').decode())")" "writing
published
OK" "C's mmap, close, then writes: published at the munmap, not the close"
	is "$(sha256sum <"$E/cm")" "$(sha256sum <"$T/mp")" "... with the bytes written through the mapping"
else
	is "$(pyerr "import mmap; mmap.mmap(os.open(M + '/s/t/mm', os.O_RDONLY), 0, prot=mmap.PROT_READ)")" \
	   ENODEV "a shared mmap: ENODEV on Linux before 6.6 (numpy's mmap_mode='r')"
	for i in 1 2 3 4 5; do skip "a shared mmap needs Linux 6.6"; done
fi
cp "$T/mp" "$E/mp"
is "$(pyerr "
import hashlib, mmap
m = mmap.mmap(os.open(M + '/s/t/mp', os.O_RDONLY), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
print(hashlib.sha256(m).hexdigest())")" "$(sha256sum <"$T/mp" | cut -d' ' -f1)
OK" "a private mmap reads the object's bytes (numpy's mmap_mode='c', torch.load's mmap)"
# A mapping outlives its object, as on any filesystem: the name written
# again takes a new inode, and the mapping keeps its pages and its size
# (it shared the name's inode, so a smaller next object made it SIGBUS).
# MADV_DONTNEED makes each read of the mapping fault again.
is "$(pyerr "
import mmap
p = M + '/s/t/remap'
open(p, 'wb').write(b'a' * 8192)
m = mmap.mmap(os.open(p, os.O_RDONLY), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
assert m[:] == b'a' * 8192
assert not os.path.exists(p), 'not consumed'
open(p, 'wb').write(b'b' * 100)
assert os.stat(p).st_size == 100, os.stat(p)
m.madvise(mmap.MADV_DONTNEED)
assert m[:] == b'a' * 8192, 'the mapping changed'
assert open(p, 'rb').read() == b'b' * 100, 'a new reader'
m.madvise(mmap.MADV_DONTNEED)
assert m[4096:] == b'a' * 4096")" "OK" "a mapping of a consumed object keeps its bytes when the name is written again smaller"
is "$(pyerr "
import mmap
p = M + '/s/t/remap2'
open(p, 'wb').write(b'a' * 8192)
fd = os.open(p, os.O_RDONLY)
m = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
os.unlink(p)
open(p, 'wb').write(b'b' * 100)
old, new = os.fstat(fd), os.stat(p)
assert (old.st_size, old.st_nlink, new.st_size) == (8192, 0, 100), (old, new)
assert old.st_ino != new.st_ino, (old, new)
m.madvise(mmap.MADV_DONTNEED)
assert m[:] == b'a' * 8192, 'the mapping changed'
assert os.pread(fd, 8192, 0) == b'a' * 8192, 'its file changed'
assert open(p, 'rb').read() == b'b' * 100, 'a new reader'")" "OK" \
   "rm of a mapped object, the name written again: its file and mapping keep theirs, fstat too"
# The same while readers race for each object of one key written again and
# again: a reader that lost the race (another consumed the object) may map
# it yet, and the opens of the next one come meanwhile (tests/tools/remap.py).
is "$($PY "$SRC/tests/tools/remap.py" "$M/s/remap" 1000 | tail -n 3)" "done 1000" \
   "1000 objects of one key, raced for by two readers and a mapping: each mapping keeps its bytes"
mode=$(stat -c %a "$E/mm") mtime=$(stat -c %Y "$E/mm")
ok "chmod, chown and utimes succeed (cp -p, rsync --inplace)" \
	$PY -c "import os; p='$E/mm'; os.chmod(p, 0o600); os.chown(p, 0, 0); os.utime(p, (1, 1))"
is "$(stat -c '%a %Y' "$E/mm")" "$mode $mtime" "... and change nothing: mode and publish time stay"
# Names change only by rm and a new write; nothing but keys exists.
for op in "os.rename(p, p + '2')" "os.link(p, p + '2')" "os.symlink('mm', p + '2')" \
	  "os.mkfifo(p + '2')" "os.rename(M + '/s/t', M + '/s/u')"; do
	is "$(pyerr "p = M + '/s/t/mm'; $op")" EPERM "$op: EPERM"
done
ok "... and nothing new is there" sh -c "! ls '$E' | grep -qx mm2"
is "$(cat "$E/mm")" mapped "and the object reads as before"

# rsync writes a hidden name and renames it, unless --inplace (README).
if command -v rsync >/dev/null; then
	printf 'synced\n' >"$T/rs"
	ok "rsync --inplace -t writes a key" rsync --inplace -t "$T/rs" "$E/rs"
	is "$(cat "$E/rs")" synced "... which reads back"
	ok "a plain rsync fails, and leaves nothing" sh -c "! rsync -q '$T/rs' '$E/rs2' 2>/dev/null && ! ls -A '$E' | grep -q rs2"
else
	skip "rsync is not installed"; skip "rsync is not installed"; skip "rsync is not installed"
fi

ok "used pool space returns when objects go" sh -c "
	rm -f '$E'/* ; $PY -c \"import json; d=json.load(open('$M/.omni/health')); assert d['pool']['used'] == 0 and d['objects'] == 0, d\""
done_testing
