/* minfuse.h - how the bench's minimal filesystems (ceilingfs, edgefs) run:
 * libfuse's own multithreaded loop, as a plain libfuse filesystem would,
 * so that they measure FUSE and not a loop of ours. */
#ifndef OMNI_BENCH_MINFUSE_H
#define OMNI_BENCH_MINFUSE_H

#include <fuse_lowlevel.h>

/* Mounts ops at mnt and serves until unmounted or signalled: 0, or 1. */
static inline int minfuse_run(struct fuse_args *args, const struct fuse_lowlevel_ops *ops,
			      size_t opsize, const char *mnt)
{
	struct fuse_session *se = fuse_session_new(args, ops, opsize, NULL);
	struct fuse_loop_config *cfg;
	int rc = 1;

	if (!se)
		return 1;
	if (fuse_set_signal_handlers(se))
		goto destroy;
	if (fuse_session_mount(se, mnt))
		goto signals;
	if ((cfg = fuse_loop_cfg_create())) {
		fuse_loop_cfg_set_max_threads(cfg, 8);
		rc = fuse_session_loop_mt(se, cfg) ? 1 : 0;
		fuse_loop_cfg_destroy(cfg);
	}
	fuse_session_unmount(se);
signals:
	fuse_remove_signal_handlers(se);
destroy:
	fuse_session_destroy(se);
	return rc;
}

#endif
