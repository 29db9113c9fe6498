#!/bin/bash
# make install (PREFIX, DESTDIR), the mount helper, mount -t fuse.omnifs and
# an fstab line.  The installed tree is overlaid on /usr in a private mount
# namespace, so the host's own /usr stays untouched.
. "$(dirname "$0")/../lib.sh"

R=$T/root
san=; [ "${B##*/}" = build-san ] && san=SAN=1
ok "make install DESTDIR=... PREFIX=/usr" make -s -C "$SRC" install $san DESTDIR="$R" PREFIX=/usr
ok "installs the daemon" test -x "$R/usr/bin/omnifs"
ok "installs the helper" test -x "$R/usr/sbin/mount.omnifs"
is "$(readlink "$R/sbin/mount.fuse.omnifs")" "/usr/sbin/mount.omnifs" "links mount.fuse.omnifs for mount(8)"
ok "installs an example config" test -f "$R/etc/omnifs/omnifs.yaml"
PKG=$(find "$R" -path '*-packages/omnifs/__init__.py' -printf '%h\n' | head -1)
ok "installs the Python package" test -n "$PKG"
is "$(PYTHONPATH=${PKG%/omnifs} /usr/bin/python3 -c 'import omnifs.small as s; print(s.native.__file__)' 2>&1)" \
	"$(ls "$PKG"/_small.*.so 2>&1)" "... with its small requests in C, built and used"
ok "... and not the extension's source" test ! -e "$PKG/_small.c"
ok "the example config is valid" "$R/usr/bin/omnifs" -o "config=$R/etc/omnifs/omnifs.yaml,pool=host:8M" "$T/nonexistent" 2>&1 |
	grep -q "mount point"

printf 'pool: host:16M\nwait_ms: 1000\n' >"$T/c.yaml"
mkdir -p "$T/h" "$T/m" "$T/f"
ok "the helper mounts as mount(8) calls it, dropping fstab-only options" \
	"$B/mount.omnifs" omnifs "$T/h" -o "rw,noauto,_netdev,x-systemd.automount,config=$T/c.yaml"
ok "the helper's mount serves" sh -c "echo v >'$T/h/a/b/k' && [ \"\$(cat '$T/h/a/b/k')\" = v ] &&
	grep -q '^pool: host:16MiB' '$T/h/.omni/config'"
"$B/mount.omnifs" omnifs "$T/h" -o rw,remount,ro 2>"$T/err"
is "$?" "2" "mount -o remount through the helper: exit 2"
ok "... saying it is not supported" grep -q "remount is not supported" "$T/err"
ok "... and the mount is as it was" sh -c "grep ' $T/h fuse.omnifs rw,' /proc/mounts &&
	echo w >'$T/h/a/b/k2' && [ \"\$(cat '$T/h/a/b/k2')\" = w ]"
ok "it unmounts" fusermount3 -u "$T/h"
"$B/mount.omnifs" omnifs "$T/h" -o "config=$T/c.yaml,pool=host:1Q" 2>"$T/err"
is "$?" "2" "a bad option through the helper: exit 2"
ok "with the option named" grep -q "pool=host:1Q" "$T/err"
"$B/mount.omnifs" omnifs "$T/h" -o 2>"$T/err"
is "$?$(mountpoint -q "$T/h" && echo " mounted")" "2" "a -o without options through the helper: exit 2, nothing mounted"
fusermount3 -u "$T/h" 2>/dev/null        # only if it did mount

cat >"$T/ns.sh" <<NSEOF
set -e
mount -t overlay overlay -o lowerdir=$R/usr/bin:/usr/bin /usr/bin
mount -t overlay overlay -o lowerdir=$R/sbin:$R/usr/sbin:/usr/sbin /usr/sbin
mount -t fuse.omnifs omnifs $T/m -o config=$T/c.yaml
echo via-mount-t >$T/m/x/y/k
cat $T/m/x/y/k
grep " $T/m fuse.omnifs " /proc/mounts >/dev/null
umount $T/m
echo "omnifs $T/f fuse.omnifs config=$T/c.yaml,_netdev,noauto 0 0" >$T/fstab
mount -T $T/fstab $T/f
echo via-fstab >$T/f/x/y/k
cat $T/f/x/y/k
umount $T/f
NSEOF
if unshare -m --propagation private true 2>/dev/null; then
	out=$(unshare -m --propagation private bash "$T/ns.sh" 2>&1)
	is "$?" "0" "mount -t fuse.omnifs and an fstab line work after install"
	is "$(echo "$out" | tr '\n' ' ')" "via-mount-t via-fstab " "both mounts served"
else
	skip "no private mount namespace here (unshare -m)"
	skip "no private mount namespace here (unshare -m)"
fi
done_testing
