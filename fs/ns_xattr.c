/* ns_xattr.c - the user.omni.* attributes of an object (SPEC §4). */
#define _GNU_SOURCE
#include "ns_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../kvfmt/kvfmt.h"
#include "../transport/pool.h"

static const char *const state_name[] = { "writing", "publishing", "published", "dead" };

#define XA "user.omni."
static const char *const xattr_names[] = {
	XA "owner", XA "state", XA "size", XA "xxh3", XA "readers", XA "reads",
	XA "published_ns", XA "kv",
};

/* user.omni.cuda_ipc, in a pool of GPU memory: the pool's IPC handle
 * (base64 of CUipcMemHandle) and where o lies in it.  Not listed, and
 * asked only by root and the daemon's user (fs/ops.c): the handle reaches
 * the whole pool.  OMNIFS_IOC_CUDA says the same to a reader's open file,
 * whose close then counts a complete read (fs/direct.h). */
#define CUDA_IPC_EXT 16
static int cuda_ipc(struct ns *ns, const struct object *o, char *v, size_t vlen)
{
	unsigned char h[POOL_IPC_BYTES];
	char b64[sodium_base64_ENCODED_LEN(POOL_IPC_BYTES, sodium_base64_VARIANT_ORIGINAL)];
	struct ns_span sp[CUDA_IPC_EXT];
	int dev, n;

	if (pool_ipc(ns->pool, &dev, h) || (o->owner >= 0 && o->fetch != F_DONE))
		return -ENODATA;        /* not a GPU pool; or its bytes are elsewhere */
	if (obj_spans(o, 0, o->size, sp, &n, CUDA_IPC_EXT) != o->size)
		return -E2BIG;
	sodium_bin2base64(b64, sizeof(b64), h, sizeof(h), sodium_base64_VARIANT_ORIGINAL);
	int len = snprintf(v, vlen, "{\"device\":%d,\"handle\":\"%s\",\"offset\":%" PRIu64
			   ",\"size\":%" PRIu64 ",\"xxh3\":\"%016" PRIx64 "\",\"extents\":[",
			   dev, b64, n ? sp[0].off : 0, o->size, o->xxh3);
	for (int i = 0; i < n && len > 0 && (size_t)len < vlen; i++)
		len += snprintf(v + len, vlen - (size_t)len, "%s[%" PRIu64 ",%" PRIu64 "]",
				i ? "," : "", sp[i].off, sp[i].len);
	if (len > 0 && (size_t)len < vlen)
		len += snprintf(v + len, vlen - (size_t)len, "]}");
	return len > 0 && (size_t)len < vlen ? len : -E2BIG;
}

/* The value of one of xattr_names for o, or -ENODATA. */
static int xattr_value(struct ns *ns, const struct object *o, const char *name,
		       char *v, size_t vlen)
{
	int pub = o->state == OS_PUBLISHED;

	if (!strcmp(name, XA "owner"))
		return snprintf(v, vlen, "%s", o->owner < 0 ? ns->set.node_name :
				ns->set.hooks->peer_name(ns->set.hctx, o->owner));
	if (!strcmp(name, XA "state"))
		return snprintf(v, vlen, "%s", state_name[o->state]);
	if (!strcmp(name, XA "size"))
		return snprintf(v, vlen, "%" PRIu64, o->state != OS_DEAD ? o->size : 0);
	if (!strcmp(name, XA "readers"))
		return snprintf(v, vlen, "%" PRId64,
				o->readers >= 0 ? o->readers :
				policy_of(ns, o->node->parent).readers);
	if (!strcmp(name, XA "reads"))
		return snprintf(v, vlen, "%" PRIu64, o->reads);
	if (pub && !strcmp(name, XA "xxh3"))
		return snprintf(v, vlen, "%016" PRIx64, o->xxh3);
	if (pub && !strcmp(name, XA "published_ns"))
		return snprintf(v, vlen, "%" PRIu64, o->published_ns);
	if (pub && !strcmp(name, XA "cuda_ipc"))
		return cuda_ipc(ns, o, v, vlen);
	if (pub && o->kvhdr && !strcmp(name, XA "kv")) {
		struct kv_info kv;
		int rc = kv_parse(o->kvhdr, o->kvhdr_len, o->size, &kv, NULL, 0);
		if (!rc)
			rc = kv_summary(&kv, v, vlen);
		kv_free(&kv);
		return rc < 0 ? -ENODATA : rc;
	}
	return -ENODATA;
}

static struct object *xattr_obj(struct ns *ns, uint64_t ino, int *rc)
{
	struct node *n = node_by_ino(ns, ino);

	*rc = !n || n->stale ? -ENOENT : -ENODATA;
	return n && n->kind == NK_KEY && n->obj ? n->obj : NULL;
}

int ns_getxattr(struct ns *ns, uint64_t ino, const char *name, char *buf, size_t size)
{
	char v[1024];           /* user.omni.kv is the longest */
	int rc;

	/* Only the user namespace exists here.  ENOTSUP (not ENODATA) for
	 * security.* and system.* lets ls -l and cp stop asking per file. */
	if (strncmp(name, "user.", 5))
		return -ENOTSUP;
	pthread_mutex_lock(&ns->lock);
	struct object *o = xattr_obj(ns, ino, &rc);
	if (o && (rc = xattr_value(ns, o, name, v, sizeof(v))) >= 0) {
		if (size && (size_t)rc > size)
			rc = -ERANGE;
		else if (size)
			memcpy(buf, v, (size_t)rc);
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_listxattr(struct ns *ns, uint64_t ino, char *buf, size_t size)
{
	char v[1024];           /* user.omni.kv is the longest */
	size_t len = 0;
	int rc;

	pthread_mutex_lock(&ns->lock);
	struct object *o = xattr_obj(ns, ino, &rc);
	for (size_t i = 0; o && i < sizeof(xattr_names) / sizeof(*xattr_names); i++) {
		size_t n = strlen(xattr_names[i]) + 1;
		if (xattr_value(ns, o, xattr_names[i], v, sizeof(v)) < 0)
			continue;
		if (size && len + n <= size)
			memcpy(buf + len, xattr_names[i], n);
		len += n;
	}
	pthread_mutex_unlock(&ns->lock);
	if (!o)
		return rc == -ENODATA ? 0 : rc;
	return size && len > size ? -ERANGE : (int)len;
}

/* Only user.omni.readers is settable, and only before publish. */
int ns_setxattr(struct ns *ns, uint64_t ino, const char *name,
		const char *val, size_t len)
{
	char num[16];
	char *end;
	int rc;

	if (strncmp(name, XA, sizeof(XA) - 1))
		return -ENOTSUP;
	if (strcmp(name, XA "readers"))
		return -EACCES;
	if (len == 0 || len >= sizeof(num))
		return -EINVAL;
	memcpy(num, val, len);
	num[len] = 0;
	if (num[0] < '0' || num[0] > '9')
		return -EINVAL;
	long v = strtol(num, &end, 10);
	if (*end || v > INT32_MAX)
		return -EINVAL;
	pthread_mutex_lock(&ns->lock);
	struct object *o = xattr_obj(ns, ino, &rc);
	if (o && o->state != OS_WRITING)
		rc = -EACCES;
	else if (o) {
		o->readers = v;
		rc = 0;
	} else if (rc == -ENODATA)
		rc = -ENOENT;
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int ns_removexattr(struct ns *ns, uint64_t ino, const char *name)
{
	(void)ns; (void)ino;
	return strncmp(name, XA, sizeof(XA) - 1) ? -ENOTSUP : -EACCES;
}
