#!/bin/bash
# The namespace (SPEC §3): implicit stage and edge directories, name rules,
# listings that show only what holds published objects and never block.
. "$(dirname "$0")/../lib.sh"

start_node a "pool=host:32M,wait_ms=5000"
export M=$T/a
is "$(pyerr "open(M + '/0/1/req-7', 'wb').write(b'x')")" "OK" "create with no mkdir"
ok "stage and edge are directories" test -d "$M/0" -a -d "$M/0/1"
ok "any valid stage resolves" test -d "$M/thinker/talker"
is "$(ls "$M" | tr '\n' ' ')" "0 " "readdir of the root lists stages that hold objects"
is "$(ls "$M/0" | tr '\n' ' ')" "1 " "readdir of a stage lists edges that hold objects"
is "$(ls -l "$M/0/1" | awk 'NR>1 { print $5, $9 }')" "1 req-7" "ls -l shows the true size"
is "$(ls "$M/thinker")" "" "an empty implicit stage lists nothing"

s64=$(printf 'a%.0s' $(seq 64)); s65=$(printf 'a%.0s' $(seq 65))
k255=$(printf 'k%.0s' $(seq 255)); k256=$(printf 'k%.0s' $(seq 256))
is "$(pyerr "open(M + '/$s64/1/k', 'wb').close()")" "OK" "64-byte stage name"
is "$(pyerr "open(M + '/$s65/1/k', 'wb').close()")" "ENAMETOOLONG" "65-byte stage name: ENAMETOOLONG"
is "$(pyerr "open(M + '/0/$s65/k', 'wb').close()")" "ENAMETOOLONG" "65-byte edge name: ENAMETOOLONG"
is "$(pyerr "open(M + '/0/1/$k255', 'wb').close()")" "OK" "255-byte key"
is "$(pyerr "open(M + '/0/1/$k256', 'wb').close()")" "ENAMETOOLONG" "256-byte key: ENAMETOOLONG"
is "$(pyerr "open(M + '/.x/1/k', 'wb')")" "EINVAL" "stage starting with '.': EINVAL"
is "$(pyerr "open(M + '/a b/1/k', 'wb')")" "EINVAL" "stage with a space: EINVAL"
is "$(pyerr "open(M + '/0/a:b/k', 'wb')")" "EINVAL" "edge with a colon: EINVAL"
is "$(pyerr "open(M + '/0/1/.k', 'wb')")" "EINVAL" "key starting with '.': EINVAL"
is "$(pyerr "open(M + '/0/1/k\xe9 y:z', 'wb').close()")" "OK" "key with any other bytes"
is "$(pyerr "open(M + '/0/k', 'wb')")" "EISDIR" "a name in a stage is an edge"
is "$(pyerr "open(M + '/k', 'wb')")" "EISDIR" "a name in the root is a stage"
is "$(pyerr "os.mkdir(M + '/0/1/d')")" "EPERM" "no directories inside an edge"
is "$(pyerr "os.mkdir(M + '/0')")" "EEXIST" "stages exist implicitly"
is "$(pyerr "open(M + '/.omni/new', 'wb')")" "EACCES" "nothing is created in .omni"

cat "$M/0/1/pending" >/dev/null 2>&1 &
reader=$!
ok "a reader is waiting" wait_until 5 grep -q "^waiters: 1$" "$M/.omni/stats"
ok "ls -l of that edge returns at once" timeout 2 ls -l "$M/0/1"
ok "and does not list the pending key" sh -c "! ls '$M/0/1' | grep -q pending"
kill "$reader"; wait "$reader" 2>/dev/null
is "$(pyerr "os.stat(M + '/0/1/missing')")" "ENOENT" "stat of a missing key: ENOENT at once"
is "$(pyerr "os.rmdir(M + '/0/1')")" "ENOTEMPTY" "rmdir of an edge with objects: ENOTEMPTY"
is "$(pyerr "os.rmdir(M + '/thinker/talker')")" "OK" "rmdir of an empty implicit edge succeeds"
done_testing
