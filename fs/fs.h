/* fs.h - the omnifs filesystem: what mount/ starts.
 *
 * fs_serve() mounts the namespace at a mount point over a pool it is given
 * and serves it until unmounted or signalled.
 */
#ifndef OMNI_FS_H
#define OMNI_FS_H

#include <fuse_lowlevel.h>

#include "ns.h"

struct pool;
struct cluster_conf;

struct fs_params {
	const char *node_name;
	const char *mountpoint;
	const char *transport;
	const char *config_text;        /* shown in .omni/config */
	struct ns_policy dflt;
	const struct ns_rule *rules;
	size_t nrules;
	unsigned max_threads;
	unsigned spin_us;               /* how long an idle worker polls */
	unsigned cleanup_hold_s;        /* ns_settings' */
	struct pool *pool;
	const struct cluster_conf *cluster;     /* NULL: a single node */
};

/* Creates the session and mounts it; -errno with a message on stderr. */
struct fs;
int fs_mount(struct fs **out, const struct fs_params *p, struct fuse_args *args);
/* Serves requests until the session ends; returns 0 or -errno. */
int fs_serve(struct fs *fs);
/* Unmounts and frees. */
void fs_destroy(struct fs *fs);

#endif
