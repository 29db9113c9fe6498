/* mntpoint.h - what is mounted at the mount point already.
 *
 * A daemon killed by SIGKILL (the OOM killer, a crash) leaves its mount
 * behind, dead: every access to it is ENOTCONN, libfuse cannot mount
 * there, and a restart failed until someone ran fusermount3 -u.  And a
 * second daemon on a live mount hid the first, its objects and its
 * waiting readers, without a word.
 */
#ifndef OMNI_MNTPOINT_H
#define OMNI_MNTPOINT_H

#include <stddef.h>

/* Resolves path into out (PATH_MAX bytes), unmounting a dead omnifs mount
 * found there first (said in the log).  0, or -errno with a one-line
 * message in err: a live omnifs mount there (-EBUSY), a dead mount of
 * another filesystem, or a path that does not resolve. */
int mntpoint_prepare(const char *path, char *out, char *err, size_t errlen);

#endif
