#!/bin/bash
# 28-samekey.t - two writers of one key on two nodes, closing at once: one
# publishes, the other's close fails with EEXIST, and every node reads the
# one that won.  A node publishes by claiming the key where the edge's
# publishes meet (the first node of the config that hosts the reading
# stage; where none does, one picked by the edge's name): here four nodes,
# a hosting 0, b and c both hosting 1 (b first), d hosting 2, and edges
# into 1 (two hosts), 2 (one) and 9 (none).  Without the claims, both
# closes succeeded and each node kept its own bytes under the name.
. "$(dirname "$0")/../lib.sh"

read -r -a ports < <(free_ports 4)
new_secret "$T/secret"
printf 'secret_file: %s\nwait_ms: 3000\nnodes:\n' "$T/secret" >"$T/omni.yaml"
i=0
for n in a:0 b:1 c:1 d:2; do
	printf '  %s: { addr: 127.0.0.1:%s, stages: ["%s"] }\n' "${n%:*}" "${ports[$i]}" "${n#*:}" >>"$T/omni.yaml"
	i=$((i + 1))
done
for n in a b c d; do start_node "$n" "config=$T/omni.yaml,node=$n,readers=0,pool=host:64M"; done
up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = 3 ]; }
all_up() { up a && up b && up c && up d; }
ok "four nodes see each other" wait_until 15 all_up

# race EDGE SIZE N WRITERS: tests/tools/samekey.py, readers on every node
race() { $PY "$SRC/tests/tools/samekey.py" "$T" "$@" abcd; }

check() {  # check DESC EDGE SIZE N WRITERS
	local desc=$1; shift
	is "$(race "$@" | tee "$T/race.out" | tail -n 1)" "done $3" "$desc" || cat "$T/race.out"
}
check "edge into one host (d), writers on a and b: one close EEXIST, all read the other" \
	0/2 100 10 ab
check "... objects over 64 KiB (their bytes are pulled, not in the claim)" 0/2 200000 4 ab
check "... a writer on the host itself against one elsewhere" 0/2 100 10 ad
check "edge into two hosts (b first): writers on a and c" 0/1 100 10 ac
check "... on the two hosts, c's loss seen by c (it asks for b's)" 0/1 100 10 bc
check "edge into a stage no node hosts: writers on a and c" 0/9 100 10 ac
EXCL=1 check "O_EXCL writers (SPEC 4.1: EEXIST if the key exists anywhere) on a and b" 0/2 100 10 ab
# A reader waiting on the losing node: the winner's announce came to it
# (for the reader) while its own writer's object was there, and was
# refused; the lost claim has it ask again, and the reader gets b's
# bytes, not ENOENT after wait_ms (3 s).
is "$($PY - "$T" <<'PYEOF'
import os, sys, threading, time
T = sys.argv[1]
got = {}
def read():
    with open(T + "/a/0/2/waited", "rb") as f:
        got["r"] = f.read()
    got["at"] = time.monotonic()
r = threading.Thread(target=read)
r.start()
time.sleep(0.2)
wa = os.open(T + "/a/0/2/waited", os.O_WRONLY | os.O_CREAT)
os.write(wa, b"a")
wb = os.open(T + "/b/0/2/waited", os.O_WRONLY | os.O_CREAT)
os.write(wb, b"b")
os.close(wb)
time.sleep(0.1)
try:
    os.close(wa)
    print("a's close published")
except OSError as e:
    t = time.monotonic()
    r.join()
    print(e.strerror, got["r"], got["at"] - t < 2)
PYEOF
)" "File exists b'b' True" "a reader on the losing node gets the winner's bytes at once"
# The first close wins, also over a writer that has not closed: a worker
# hung with its key open, whose request was retried on another node.
# hung W P EDGE: W's writer holds a key open, a reader on W waits for it,
# and P writes and closes it.  Prints P's close, the hung writer's next
# write (once W's reader has the winner, or 2 s on) and close, what W's
# reader got (and whether within 2 s of P's close), then what each node
# reads.  P's close publishes, the hung writer's writes
# and close fail with EEXIST, and every node reads P's bytes at once.
# Before, on the node where the claims meet (d, the host of 2) P's close
# failed with EEXIST, and the key was published nowhere once the hung
# writer was killed; on another host (c; b hosts 1 first) the reader
# waited for the hung writer, and got ENOENT after wait_ms (3 s).
hung() {
	$PY - "$T" "$@" <<'PYEOF'
import os, sys, threading, time
T, W, P, edge = sys.argv[1:]
path = lambda n: "%s/%s/%s/hung%s%s" % (T, n, edge, W, P)
hung = os.open(path(W), os.O_WRONLY | os.O_CREAT)
os.write(hung, W.encode())
got = {}
def read():
    try:
        with open(path(W), "rb") as f:
            got["r"] = f.read().decode()
    except OSError as e:
        got["r"] = e.strerror
r = threading.Thread(target=read)
r.start()
time.sleep(0.2)
out = []
def step(what):
    try:
        what()
        out.append("ok")
    except OSError as e:
        out.append(e.strerror)
def publish():
    with open(path(P), "wb") as f:
        f.write(P.encode())
step(publish)
r.join(2)                       # the reader has P's before the hung one goes
fast = not r.is_alive()         # (W has heard of the publish: the announce
step(lambda: os.write(hung, W.encode()))        # comes after P's close)
step(lambda: os.close(hung))
r.join()
out += [got["r"], str(fast)]
for n in "abcd":
    try:
        with open(path(n), "rb") as f:
            out.append(f.read().decode())
    except OSError as e:
        out.append(e.strerror)
print(" ".join(out))
PYEOF
}
is "$(hung d a 0/2)" "ok File exists File exists a True a a a a" \
	"a hung writer where the claims meet loses to a close elsewhere: the first close wins"
is "$(hung c a 0/1)" "ok File exists File exists a True a a a a" \
	"... one on another host of <to>: it loses to the announce, and its reader has the winner"
is "$(hung c b 0/1)" "ok File exists File exists b True b b b b" \
	"... and to a close on the node where the claims meet"
# A small put is an O_EXCL create: one being written anywhere refuses it.
is "$($PY - "$T" "$SRC/contrib/python" <<'PYEOF'
import os, sys
T = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import omnifs
hung = os.open(T + "/d/0/2/hung2", os.O_WRONLY | os.O_CREAT)
try:
    m = omnifs.Mount(T + "/a")
    assert m._small_put("0", "2", b"hung2", [memoryview(b"a")], 1, None), "not a small put"
    print("put ok")
except OSError as e:
    print(e.strerror)
os.write(hung, b"d")
os.close(hung)
with open(T + "/b/0/2/hung2", "rb") as f:
    print(f.read().decode())
PYEOF
)" "File exists
d" "... but a small put (O_EXCL) loses to it, and the writer there publishes"
# A writer that never publishes (killed, or its close fails) while
# another node's object of its key is published or comes later: readers
# on the writer's node get that object, waiting or not, instead of
# ENOENT after wait_ms (3 s).  On c, a host of 1, a's announce was
# refused while c's object was being written (and a host asks nobody);
# on b, which hosts no 2, the readers waited for b's own object, and no
# node was told that they wait.
# unpublished W HOW P FIRST: W's writer holds key open; with FIRST=pub P
# publishes it before W's writer is killed (HOW kill) or fails to close
# (HOW torn: its bytes are a KV payload that fails its header, EIO; a
# full pool, ENOSPC, goes the same way, but a reader of a pool still
# full may get ENOSPC itself), with FIRST=drop after; a reader
# on W waits from before the drop, another opens after it all.  Prints
# what the two read and whether the first got it within 2 s.
unpublished() {
	$PY - "$T" "$SRC/tests/py" "$@" <<'PYEOF'
import os, signal, sys, threading, time
T, py, W, how, P, first = sys.argv[1:]
sys.path.insert(0, py)
import kvpy
torn = bytearray(kvpy.native([os.urandom(128)] * 4, layers=2))
torn[-1] ^= 1
edge = "0/1" if W == "c" else "0/2"
key = "un%s%s%s" % (W, how, first)
path = lambda n: "%s/%s/%s/%s" % (T, n, edge, key)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    fd = os.open(path(W), os.O_WRONLY | os.O_CREAT)
    os.write(fd, torn if how == "torn" else W.encode())
    os.write(ready_w, b"r")
    signal.sigtimedwait([signal.SIGUSR1], 30)  # bounded, should this script die
    try:
        os.close(fd)
    except OSError:
        pass
    os._exit(0)
os.read(ready_r, 1)
got = {}
def read(name):
    t = time.monotonic()
    try:
        with open(path(W), "rb") as f:
            got[name] = f.read()
    except OSError as e:
        got[name] = e.strerror
    got[name + "_s"] = time.monotonic() - t
r = threading.Thread(target=read, args=("waiting",))
r.start()
def publish():
    with open(path(P), "wb") as f:
        f.write(P.encode())
if first == "pub":
    publish()
time.sleep(0.2)
os.kill(pid, signal.SIGKILL if how == "kill" else signal.SIGUSR1)
os.waitpid(pid, 0)
if first == "drop":
    time.sleep(0.2)
    publish()
r.join()
read("after")
print(got["waiting"], got["after"], got["waiting_s"] < 2)
PYEOF
}
is "$(unpublished c kill a pub)" "b'a' b'a' True" \
   "a host's writer killed after another node's publish of its key: the host's readers get that one"
is "$(unpublished c torn a pub)" "b'a' b'a' True" "... its close failed (EIO, a torn KV payload): the same"
is "$(unpublished b kill c pub)" "b'c' b'c' True" \
   "a writer killed on a node hosting no <to>, after another's publish: its node's readers get that one"
is "$(unpublished b torn c pub)" "b'c' b'c' True" "... its close failed: the same"
is "$(unpublished b kill c drop)" "b'c' b'c' True" "... and one published after it went: the same"
is "$(stat_of a peer_claims)$(stat_of c peer_claims)" "00" \
	"the claims went where the edges' publishes meet, not to a or c"

done_testing
