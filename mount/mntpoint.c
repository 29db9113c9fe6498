/* mntpoint.c - what is mounted at the mount point already (mntpoint.h).
 *
 * /proc/self/mounts, read with getmntent(3), says what is mounted where
 * (the last entry for a directory is the one on top).  A dead mount is
 * told by the ENOTCONN that looking at it gives, and only one of ours is
 * taken away: another filesystem's dead mount is its owner's to clear.
 */
#define _GNU_SOURCE
#include "mntpoint.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <mntent.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/wait.h>

#define OURS "fuse.omnifs"

extern char **environ;

/* The type of the mount on top at dir, or "" where nothing is mounted. */
static void mounted_type(const char *dir, char *type, size_t len)
{
	FILE *f = setmntent("/proc/self/mounts", "r");
	struct mntent *m;

	type[0] = 0;
	if (!f)
		return;
	while ((m = getmntent(f)))
		if (!strcmp(m->mnt_dir, dir))
			snprintf(type, len, "%s", m->mnt_type);
	endmntent(f);
}

/* path made absolute without looking at its last part, which a dead
 * mount answers with ENOTCONN: its parent resolved, and its name. */
static int resolve_dead(const char *path, char *out)
{
	char *d = strdup(path), *b = strdup(path), parent[PATH_MAX];
	int rc = 0;

	if (!d || !b) {
		rc = -ENOMEM;
	} else if (!realpath(dirname(d), parent)) {
		rc = -errno;
	} else {
		const char *name = basename(b);
		if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, "/"))
			rc = -ENOTCONN;
		else if (snprintf(out, PATH_MAX, "%s/%s", strcmp(parent, "/") ? parent : "",
				  name) >= PATH_MAX)
			rc = -ENAMETOOLONG;
	}
	free(d);
	free(b);
	return rc;
}

/* Detaches the dead mount at dir: as root by umount2, else by the
 * setuid fusermount3, which lets a user unmount what the user mounted. */
static int unmount_dead(const char *dir)
{
	char *argv[] = { "fusermount3", "-u", "-z", (char *)dir, NULL };
	pid_t pid;
	int st;

	if (!umount2(dir, MNT_DETACH))
		return 0;
	if (errno != EPERM)
		return -errno;
	if (posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ) ||
	    waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		return -EPERM;
	return 0;
}

/* Whether the mount at dir is a dead one: 1, or 0.  statfs, because the
 * kernel answers a stat from attributes it keeps, where statfs always
 * asks the daemon (a stopped daemon would hold it up, as it holds up
 * libfuse's own look at the mount point). */
static int dead(const char *dir)
{
	struct statfs st;

	return statfs(dir, &st) && errno == ENOTCONN;
}

int mntpoint_prepare(const char *path, char *out, char *err, size_t errlen)
{
	char type[64];
	int rc;

	/* realpath looks at the last part only where the path ends in a
	 * slash: a dead mount's ENOTCONN may come now or from dead(). */
	if (!realpath(path, out) && ((rc = -errno) != -ENOTCONN || resolve_dead(path, out)))
		goto fail;
	mounted_type(out, type, sizeof(type));
	if (strcmp(type, OURS)) {
		/* Only a FUSE mount is looked at: a statfs of an autofs one
		 * (x-systemd.automount) would wait for the very mount that
		 * this is. */
		if (strncmp(type, "fuse", 4) || !dead(out))
			return 0;
		snprintf(err, errlen, "mount point '%s': a dead %s mount is there "
			 "(Transport endpoint is not connected); unmount it first", path,
			 *type ? type : "FUSE");
		return -ENOTCONN;
	}
	if (!dead(out)) {
		snprintf(err, errlen, "mount point '%s': omnifs is mounted there already "
			 "(fusermount3 -u %s to replace it)", path, out);
		return -EBUSY;
	}
	if ((rc = unmount_dead(out))) {
		snprintf(err, errlen, "mount point '%s': the mount of an omnifs daemon that is gone "
			 "is there, and it could not be unmounted: %s", path, strerror(-rc));
		return rc;
	}
	fprintf(stderr, "omnifs: %s held the mount of an omnifs daemon that is gone "
		"(killed?); unmounted it\n", out);
	if (realpath(path, out))
		return 0;
	rc = -errno;
fail:
	snprintf(err, errlen, "mount point '%s': %s", path, strerror(-rc));
	return rc;
}
