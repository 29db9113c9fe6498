/* vfile.h - the contents of .omni/ (SPEC §3). */
#ifndef OMNI_VFILE_H
#define OMNI_VFILE_H

#include <stddef.h>

struct ns;
struct pool;
struct stats;

struct vfile_ctx {
	struct ns *ns;
	struct pool *pool;
	struct stats *st;
	const char *node_name;
	const char *transport;          /* as configured */
	const char *config_text;        /* the effective configuration */
	struct cluster *cl;             /* NULL: a single node */
};

/* Renders the virtual file called name into a malloc'd buffer; sets *len.
 * NULL with errno set on failure. */
char *vfile_render(const struct vfile_ctx *c, const char *name, size_t *len);

#endif
