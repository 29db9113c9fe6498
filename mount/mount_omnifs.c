/* mount_omnifs.c - the mount(8) helper: mount -t fuse.omnifs and fstab.
 *
 * mount(8) runs /sbin/mount.fuse.omnifs SOURCE MOUNTPOINT [-o OPTS] ...;
 * this drops the options that belong to mount(8) and fstab, not to omnifs,
 * and runs the omnifs daemon, which returns once the mount is up.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const dropped[] = {
	"rw", "defaults", "auto", "noauto", "user", "users", "nouser", "owner",
	"_netdev", "nofail", "dev", "nodev", "suid", "nosuid", "exec", "noexec",
	"async", "sync", "atime", "noatime", "relatime", "norelatime",
	"strictatime", "lazytime", "loop",
};

/* mount -o remount: omnifs takes its options once, at mount, and a
 * second daemon on the same mount point is refused anyway; say what to
 * do instead of that refusal. */
static int remount;

static int keep(const char *o)
{
	if (!strcmp(o, "remount"))
		remount = 1;
	if (!*o || !strncmp(o, "x-", 2) || !strncmp(o, "comment=", 8))
		return 0;
	for (size_t i = 0; i < sizeof(dropped) / sizeof(*dropped); i++)
		if (!strcmp(o, dropped[i]))
			return 0;
	return 1;
}

/* Appends the options of list that omnifs takes to out, comma-separated. */
static void filter(char *list, char *out, size_t len)
{
	char *save;

	for (char *o = strtok_r(list, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
		if (!keep(o))
			continue;
		size_t used = strlen(out);
		snprintf(out + used, len - used, "%s%s", used ? "," : "", o);
	}
}

/* omnifs beside this helper (a build tree), in ../bin (PREFIX/sbin and
 * PREFIX/bin), else where it was configured to be installed. */
static void find_daemon(char *path, size_t len)
{
	static const char *const rel[] = { "%s/omnifs", "%s/../bin/omnifs" };
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0) {
		self[n] = 0;
		char *dir = dirname(self);
		for (int i = 0; i < 2; i++) {
			snprintf(path, len, rel[i], dir);
			if (access(path, X_OK) == 0)
				return;
		}
	}
	snprintf(path, len, "%s/omnifs", OMNI_BINDIR);
}

int main(int argc, char **argv)
{
	char opts[4096] = "", daemon[PATH_MAX + 16];
	const char *mnt = NULL;
	int nargs = 0, help = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			help = 1;
		} else if (!strcmp(argv[i], "-o")) {
			if (++i == argc) {      /* not mount(8)'s doing: say so, mount nothing */
				fprintf(stderr, "mount.omnifs: -o needs its options\n");
				return 2;
			}
			filter(argv[i], opts, sizeof(opts));
		} else if (!strncmp(argv[i], "-o", 2) && argv[i][2]) {
			filter(argv[i] + 2, opts, sizeof(opts));
		} else if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "-N")) {
			i++;            /* type, namespace: nothing for us */
		} else if (argv[i][0] == '-') {
			;               /* -n, -s, -v, -f: mount(8)'s own */
		} else if (++nargs == 2) {
			mnt = argv[i];  /* the first is the source, "omnifs" */
		}
	}
	if (!mnt || help) {
		fprintf(help ? stdout : stderr, "usage: mount.omnifs omnifs MOUNTPOINT [-o OPTIONS]\n"
			"  (mount(8)'s helper: runs omnifs MOUNTPOINT -o OPTIONS; see omnifs --help)\n");
		return help ? 0 : 2;
	}
	if (remount) {
		fprintf(stderr, "mount.omnifs: %s: remount is not supported; "
			"umount it and mount it again with the new options\n", mnt);
		return 2;
	}
	find_daemon(daemon, sizeof(daemon));
	char *av[] = { daemon, (char *)mnt, opts[0] ? "-o" : NULL, opts, NULL };
	execv(daemon, av);
	fprintf(stderr, "mount.omnifs: cannot run %s: %s\n", daemon, strerror(errno));
	return 1;
}
