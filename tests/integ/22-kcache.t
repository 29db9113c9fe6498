#!/bin/bash
# 22-kcache.t - what the kernel keeps: the names and attributes of published
# objects (so ls -l and rm of a big edge ask the daemon nothing per name),
# forgotten the moment an object leaves - consumed, removed here or on
# another node - so no stat, open or create ever sees a stale one
# (SPEC §3, §4).  And rm of another node's objects answers at once.
. "$(dirname "$0")/../lib.sh"

absent() { ! [ -e "$1" ]; }
size_of() { stat -c %s "$1" 2>&1; }
# keep_put PATH FILE: publishes FILE's bytes at PATH with readers 0 (kept
# until removed).
keep_put() { exec 6>"$1"; setfattr -n user.omni.readers -v 0 "$1"; cat "$2" >&6; exec 6>&-; }

start_node s "pool=host:64M"
E=$T/s/0/1

# --- consumed: forgotten at once ----------------------------------------------
printf 0123456789 >"$E/k"
is "$(size_of "$E/k")" 10 "a published object's size"
cat "$E/k" >/dev/null                   # readers 1: consumed at its close
ok "consumed: gone for [ -e ] at once" absent "$E/k"
is "$(M=$T/s pyerr "os.stat(M + '/0/1/k')")" ENOENT "... stat: ENOENT"
is "$(M=$T/s pyerr "os.getxattr(M + '/0/1/k', 'user.omni.size')")" ENOENT "... getxattr: ENOENT"
is "$(M=$T/s pyerr "open(M + '/0/1/k', 'wb').write(b'again, longer')")" OK \
	"... a plain create of the name works"
is "$(size_of "$E/k")" 13 "... and its new size shows at once"
cat "$E/k" >/dev/null                   # consumed again, through the kept name
printf abc >"$T/abc"
read_later "$E/k" "$T/abc"
waiting() { [ "$(stat_of s waiters)" = 1 ]; }
ok "a reader that opens a consumed name waits" wait_until 5 waiting
printf abc >"$E/k"
wait "$LATE"
is "$(cat "$T/late.out")" same "... and reads the next object of that name"

# --- removed and written again: the new size, never the old -------------------
printf 12345 >"$T/five"
keep_put "$E/r" "$T/five"
is "$(size_of "$E/r")" 5 "readers 0: five bytes"
rm "$E/r"
printf 123456789 >"$E/r"
is "$(size_of "$E/r")" 9 "rm, then the same name written again: nine"

# --- appended to after its object left: only what was appended, no hole where
# the old object's bytes were (the kernel appends at the size it kept) -------
printf 0123456789 >"$E/ap"
cat "$E/ap" >/dev/null                  # consumed; the kernel keeps the name
printf more >>"$E/ap"
is "$(size_of "$E/ap")" 4 "consumed, then >> of its name: four bytes"
is "$(cat "$E/ap")" more "... which are what >> wrote"
keep_put "$E/ap" "$T/five"
rm "$E/ap"
is "$(M=$T/s pyerr "f = open(M + '/0/1/ap', 'ab'); f.write(b'ab'); f.flush(); f.write(b'cd'); f.close()")" \
	OK "removed, then open(..., 'ab') and two writes"
is "$(cat "$E/ap")" abcd "... the new object holds them, in order"

# fd7_reads FILE: "same" if descriptor 7, read to its end, holds FILE's bytes.
fd7_reads() {
	$SYSPY -c '
import os, sys
data = b""
while (b := os.read(7, 1 << 16)):
    data += b
print("same" if data == open(sys.argv[1], "rb").read() else "differs")' "$1"
}

# fstat7: what fstat() of descriptor 7 says, "SIZE LINKS" or the error.
fstat7() {
	$SYSPY -c '
import errno, os
try:
    s = os.fstat(7)
    print(s.st_size, s.st_nlink)
except OSError as e:
    print(errno.errorcode[e.errno])'
}
# gone_fstat SIZE: what fstat7 says of an object that left a name the
# kernel keeps: a kernel that can be told to look its names up again
# (Linux 6.16, FUSE_NOTIFY_INC_EPOCH) asks a stat() of the name by a
# lookup, so the GETATTR is the open file's; an older one's is ENOENT.
gone_fstat() {
	if kernel_at_least 6.16; then
		echo "$1 0"
	else
		echo ENOENT
	fi
}

# --- rm here of a listed object a reader has open: the kernel forgets the
# name itself (ns tells it nothing), and the reader finishes (SPEC §4.5) --
head -c 300000 /dev/urandom >"$T/rmd"
keep_put "$E/rmd" "$T/rmd"
ls -l "$E" >/dev/null                   # its name and attributes in the kernel
exec 7<"$E/rmd"
ok "rm here of an object a file is open on" rm "$E/rmd"
ok "... gone for [ -e ] at once" absent "$E/rmd"
is "$(M=$T/s pyerr "os.stat(M + '/0/1/rmd')")" ENOENT "... stat: ENOENT"
is "$(ls "$E" | grep -c '^rmd$')" 0 "... not listed"
is "$(fstat7)" "300000 0" "... fstat of the open file (inherited): its size, no links"
is "$(fd7_reads "$T/rmd")" same "... and it still reads every byte"
exec 7<&-

# --- a reader still reading an object another reader consumed ----------------
head -c 300000 /dev/urandom >"$T/rand"
cp "$T/rand" "$E/held"
exec 7<"$E/held"
cat "$E/held" >/dev/null                # another reader consumes it
ok "consumed: its name is gone though a file is still open on it" absent "$E/held"
is "$(fstat7)" "$(gone_fstat 300000)" "... that file's fstat: $(gone_fstat 300000)"
ok "... and the name is still gone" absent "$E/held"
is "$(fd7_reads "$T/rand")" same "... and that file still reads every byte"
exec 7<&-

# --- ls -l lists true sizes; foreign attribute spaces are not supported -------
for i in 1 2 3; do head -c $((i * 1000)) /dev/zero >"$E/l$i"; done
is "$(ls -l "$E" | awk '$NF ~ /^l[0-9]$/ { printf "%s=%s ", $NF, $5 }')" "l1=1000 l2=2000 l3=3000 " \
	"ls -l: every object with its size"
is "$(M=$T/s pyerr "os.getxattr(M + '/0/1/l1', 'security.selinux')")" ENOTSUP \
	"security.*: ENOTSUP (so ls -l stops asking)"
is "$(M=$T/s pyerr "os.getxattr(M + '/0/1/l1', 'system.posix_acl_access')")" ENOTSUP \
	"system.*: ENOTSUP"
is "$(M=$T/s pyerr "os.getxattr(M + '/0/1/l1', 'user.other')")" ENODATA "user.other: ENODATA"
stop_node s

# --- two nodes: names b keeps, of objects a owns -------------------------------
loopback_cluster 3000 a b
for n in a b; do start_node $n "config=$T/omni.yaml,node=$n"; done
up() { [ "$(health "$1" "sum(p['state'] == 'up' for p in d['peers'])")" = 1 ]; }
both_up() { up a && up b; }
ok "the two are up" wait_until 10 both_up
for i in $(seq 200); do printf "m$i" >"$T/a/0/1/m$i"; done
printf xyz >"$T/a/0/1/y"
ok "b lists a's 201 objects" wait_until 10 sh -c "[ \$(ls '$T/b/0/1' | wc -l) = 201 ]"
is "$(ls -l "$T/b/0/1" | awk '$NF == "m77" { print $5 }')" 3 "b's ls -l: their true sizes"
cat "$T/a/0/1/y" >/dev/null             # consumed on its owner
ok "consumed on a: b's name of it goes" wait_until 5 absent "$T/b/0/1/y"
removed=$(stat_of a removed)
rm "$T"/b/0/1/m*
ok "rm on b of a's 200: gone on b at once" sh -c "[ \$(ls '$T/b/0/1' | wc -l) = 0 ] && ! [ -e '$T/b/0/1/m7' ]"
ok "... and on a" wait_until 10 sh -c "[ \$(ls '$T/a/0/1' | wc -l) = 0 ]"
is "$(stat_of a removed)" $((removed + 200)) "a counted 200 removals"
is "$(M=$T/b pyerr "os.unlink(M + '/0/1/m7')")" ENOENT "rm again on b: ENOENT"
head -c 100000 /dev/urandom >"$T/far"
keep_put "$T/a/0/1/far" "$T/far"
ok "b sees a's new object" wait_until 5 test -e "$T/b/0/1/far"
exec 7<"$T/b/0/1/far"
ok "rm on b of a's object a file on b is open on" rm "$T/b/0/1/far"
is "$(fstat7)" "100000 0" "... fstat of the open file: its size, no links"
is "$(fd7_reads "$T/far")" same "... and it reads every byte"
exec 7<&-
keep_put "$T/a/0/1/far" "$T/far"
ok "a writes it again; b sees it" wait_until 5 test -e "$T/b/0/1/far"
exec 7<"$T/b/0/1/far"
rm "$T/a/0/1/far"
ok "rm on a of an object a file on b is open on: b's name goes" wait_until 5 absent "$T/b/0/1/far"
is "$(fstat7)" "$(gone_fstat 100000)" "... b's file's fstat: $(gone_fstat 100000)"
is "$(M=$T/b pyerr "os.stat(M + '/0/1/far')")" ENOENT "... b's stat of the name: ENOENT"
is "$(fd7_reads "$T/far")" same "... and b's file reads every byte"
exec 7<&-
printf new >"$T/b/0/1/m7"               # b's own now, same name
ok "b writes the name again; a sees b's" wait_until 5 sh -c "[ \"\$(cat '$T/a/0/1/m7')\" = new ]"

done_testing
