/* main.c - omnifs [-f] [-d] [-o opt[,opt...]] <mountpoint>
 *
 * Options are checked before anything is mounted: a bad one is a one-line
 * error that names it, exit status 2.  Without -f the daemon forks first
 * and the parent waits for the child's verdict, so the exit status and the
 * error reach whoever ran the mount, and the pool is allocated (and locked)
 * in the process that uses it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <fuse_lowlevel.h>

#include "conf.h"
#include "mntpoint.h"
#include "../fs/fs.h"
#include "../transport/pool.h"
#include "../fs/cluster.h"
#include "../transport/auth.h"
#include "../transport/rdma_probe.h"

#define EXIT_USAGE 2

struct args {
	char *mountpoint;
	int foreground, debug, help, version;
	char **ours;            /* our -o key=value options, in order */
	size_t nours;
};

enum { KEY_HELP, KEY_VERSION, KEY_FG, KEY_DEBUG };

static const struct fuse_opt opt_spec[] = {
	FUSE_OPT_KEY("-h", KEY_HELP), FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION), FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("-f", KEY_FG), FUSE_OPT_KEY("-d", KEY_DEBUG),
	FUSE_OPT_KEY("debug", KEY_DEBUG),
	FUSE_OPT_END
};

static const char *const our_keys[] = {
	"config", "node", "pool", "listen", "transport", "wait_ms", "readers",
	"ttl_s", "secret_file", "state_dir", "threads", "spin_us", "allow_other",
	"rdma_stage", "cleanup_hold_s",
};

static int is_ours(const char *arg)
{
	size_t n = strcspn(arg, "=");

	for (size_t i = 0; i < sizeof(our_keys) / sizeof(*our_keys); i++)
		if (strlen(our_keys[i]) == n && !strncmp(arg, our_keys[i], n))
			return 1;
	return 0;
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *out)
{
	struct args *a = data;

	(void)out;
	switch (key) {
	case KEY_HELP: a->help = 1; return 0;
	case KEY_VERSION: a->version = 1; return 0;
	case KEY_FG: a->foreground = 1; return 0;
	case KEY_DEBUG: a->debug = a->foreground = 1; return 1;
	case FUSE_OPT_KEY_NONOPT:
		if (a->mountpoint) {
			fprintf(stderr, "omnifs: unexpected argument '%s'\n", arg);
			return -1;
		}
		a->mountpoint = strdup(arg);
		return 0;
	case FUSE_OPT_KEY_OPT:
		if (!is_ours(arg))
			return 1;       /* a FUSE option: libfuse checks it */
		char **v = realloc(a->ours, (a->nours + 1) * sizeof(*v));
		if (!v || !(v[a->nours] = strdup(arg)))
			return -1;
		a->ours = v;
		a->nours++;
		/* allow_other is FUSE's too: keep it for the mount */
		return strcmp(arg, "allow_other") ? 0 : 1;
	}
	return 1;
}

static void usage(void)
{
	printf("usage: omnifs [-f] [-d] [-o opt[,opt...]] <mountpoint>\n\n"
	       "options (also settable in the config file; the command line wins):\n"
	       "  config=FILE       cluster YAML file\n"
	       "  node=NAME         this node's name (default: the host name, or its\n"
	       "                    first label where the config names that)\n"
	       "  pool=host:SIZE | pinned:SIZE | cuda:DEV:SIZE   (default host:1GiB)\n"
	       "  listen=ADDR:PORT  peer port\n"
	       "  transport=auto|tcp|rdma\n"
	       "  wait_ms=N         how long an open waits for a key (default 30000)\n"
	       "  readers=N         complete reads before an object is deleted (default 1)\n"
	       "  ttl_s=N           delete unconsumed objects N s after publish (0: off)\n"
	       "  cleanup_hold_s=N  refuse new objects of a request for N s after its\n"
	       "                    cleanup (default 600, 0: off)\n"
	       "  secret_file=FILE  cluster secret\n"
	       "  state_dir=DIR     keep what peers are owed there, for a restart (default: none)\n"
	       "  threads=N         FUSE worker threads (default 4)\n"
	       "  spin_us=N         how long an idle worker polls for the next request (default 200)\n"
	       "  rdma_stage=SIZE   host memory that peers' RDMA READs of a cuda pool are\n"
	       "                    copied into where there is no GPUDirect RDMA; 0: over tcp\n"
	       "                    then (default 256MiB)\n"
	       "  allow_other       let other users use the mount\n"
	       "  -f                stay in the foreground\n"
	       "  -d                debug: foreground, log every request\n");
}

static int named(const struct conf *c, const char *name)
{
	for (size_t i = 0; i < c->nnodes; i++)
		if (!strcmp(c->nodes[i].name, name))
			return 1;
	return 0;
}

/* Whether this node is among the config's nodes: as node= names it, or
 * else by its host name, or that name's first label (a host that calls
 * itself gpu-3.example.com in a config that says gpu-3).  0 or -ENOENT. */
static int find_node(struct conf *c, const struct args *a)
{
	char *dot = strchr(c->node, '.');

	if (named(c, c->node))
		return 0;
	for (size_t i = 0; i < a->nours; i++)
		if (!strncmp(a->ours[i], "node=", 5))
			return -ENOENT;
	if (!dot || dot == c->node)
		return -ENOENT;
	*dot = 0;
	if (named(c, c->node))
		return 0;
	*dot = '.';
	return -ENOENT;
}

/* Builds the configuration: defaults, then the file, then the command
 * line.  0, or -EINVAL with the message printed. */
static int configure(struct conf *c, const struct args *a, uint8_t key[AUTH_KEY])
{
	char err[512];

	conf_defaults(c);
	for (size_t i = 0; i < a->nours; i++)
		if (!strncmp(a->ours[i], "config=", 7) &&
		    conf_set(c, "config", a->ours[i] + 7, err, sizeof(err)))
			goto fail;
	if (c->config_file && conf_load(c, c->config_file, err, sizeof(err)))
		goto fail;
	for (size_t i = 0; i < a->nours; i++) {
		char *eq = strchr(a->ours[i], '=');
		char key[32];
		snprintf(key, sizeof(key), "%.*s", eq ? (int)(eq - a->ours[i]) : 31, a->ours[i]);
		if (conf_set(c, key, eq ? eq + 1 : NULL, err, sizeof(err)))
			goto fail;
	}
	if (c->nnodes && find_node(c, a)) {
		snprintf(err, sizeof(err), "%s: node '%s' is not among its nodes "
			 "(set node=NAME)", c->config_file, c->node);
		goto fail;
	}
	if (c->transport == TRANSPORT_RDMA && rdma_active_devices() <= 0) {
		snprintf(err, sizeof(err), "option 'transport=rdma': no usable RDMA device "
			 "on this node (use transport=tcp or auto)");
		goto fail;
	}
	if (c->nnodes > 1 && auth_load(c->secret_file, key, err, sizeof(err)))
		goto fail;
	return 0;
fail:
	fprintf(stderr, "omnifs: %s\n", err);
	return -EINVAL;
}

/* Forks; the parent waits for the child's status byte and exits with it. */
static int daemonize(int *status_fd)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		unsigned char st = 1;
		close(p[1]);
		if (read(p[0], &st, 1) != 1)
			st = 1;         /* the child died before saying */
		_exit(st);
	}
	close(p[0]);
	setsid();
	*status_fd = p[1];
	return 0;
}

static void report(int *status_fd, unsigned char st)
{
	if (*status_fd < 0)
		return;
	if (st == 0) {          /* mounted: detach from the terminal */
		int null = open("/dev/null", O_RDWR);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
			close(null);
		}
	}
	if (write(*status_fd, &st, 1) != 1)
		st = 1;
	close(*status_fd);
	*status_fd = -1;
}

/* The cluster's part of the configuration, when there are peers. */
static struct cluster_node *cluster_nodes(const struct conf *c)
{
	struct cluster_node *v = calloc(c->nnodes, sizeof(*v));

	for (size_t i = 0; v && i < c->nnodes; i++)
		v[i] = (struct cluster_node){ c->nodes[i].name, c->nodes[i].addr,
					      (const char (*)[NAME_STAGE_MAX + 1])c->nodes[i].stages,
					      c->nodes[i].nstages };
	return v;
}

/* Peers, waiting opens' /proc reads and FUSE all take descriptors; the
 * soft limit (often 1024) is a default, the hard one what we may use. */
static void nofile_raise(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* glibc gives the free memory at the top of a thread's heap back to the
 * kernel as soon as it passes 128 KiB, so work that allocates a few
 * hundred KiB and frees it (a view's open: json-c trees of its shards'
 * headers, on a thread of its own) faulted every page in again, each
 * time.  A fault costs about 1 us on bare metal and up to 20 us in a VM
 * like ours: a T=1 view of 4 short vllm-omni shards took 100 faults and
 * 2 ms more to open.  So each heap keeps 1 MiB.  Setting it switches
 * off glibc's moving mmap threshold; 4 MiB keeps buffers of a listing
 * or a KV header (<= 512 KiB) in the heaps as that threshold would. */
static void malloc_tune(void)
{
	mallopt(M_TOP_PAD, 1 << 20);
	mallopt(M_MMAP_THRESHOLD, 4 << 20);
}

static int serve(struct conf *c, struct fuse_args *fargs, const char *mnt, int status_fd,
		 const uint8_t key[AUTH_KEY])
{
	struct pool *pool;
	struct fs *fs;
	char err[256], *text = conf_render(c);
	struct fs_params p = {
		.node_name = c->node, .mountpoint = mnt,
		.transport = conf_transport_name(c->transport), .config_text = text,
		.dflt = c->dflt, .rules = c->rules, .nrules = c->nrules,
		.max_threads = c->threads, .spin_us = c->spin_us,
		.cleanup_hold_s = c->cleanup_hold_s,
	};
	struct cluster_node *nodes = NULL;
	static const enum xport_mode mode[] = {
		[TRANSPORT_AUTO] = XPORT_AUTO, [TRANSPORT_TCP] = XPORT_TCP, [TRANSPORT_RDMA] = XPORT_RDMA,
	};
	struct cluster_conf cc = { .self = c->node, .listen = c->listen, .key = key,
				   .nnodes = c->nnodes, .mode = mode[c->transport],
				   .state_dir = c->state_dir, .rdma_stage = c->rdma_stage };
	int rc = 1;

	nofile_raise();
	malloc_tune();
	if (!text)
		goto out;
	if (c->nnodes > 1) {
		if (!(nodes = cluster_nodes(c)))
			goto free_text;
		cc.nodes = nodes;
		p.cluster = &cc;
	}
	int prc = pool_create(&pool, &c->pool, err, sizeof(err));
	if (prc) {
		fprintf(stderr, "omnifs: %s\n", err);
		/* No driver, no such device, no CUDA in this build: the
		 * option asks for what this machine does not have. */
		if (prc == -ENODEV || prc == -ENOTSUP)
			rc = EXIT_USAGE;
		goto free_text;
	}
	if (!pool_cpu(pool))
		fprintf(stderr, "omnifs: the pool is GPU %d's memory: reads and writes copy "
			"through host memory, GPU processes here take objects by its IPC handle, "
			"and peers READ it by GPUDirect RDMA where the RDMA device can (the rdma "
			"line says)\n", c->pool.dev);
	p.pool = pool;
	cc.pool = pool;         /* registered with the RDMA device, if one is used */
	int mrc = fs_mount(&fs, &p, fargs);
	if (mrc) {
		rc = mrc == -EINVAL ? EXIT_USAGE : 1;
		goto free_pool;
	}
	if (status_fd < 0)      /* in the foreground: say so; a daemon is silent */
		fprintf(stderr, "omnifs: node %s mounted at %s (pool %s, %s)\n", c->node, mnt,
			pool_kind_name(c->pool.kind), c->config_file ? c->config_file : "embedded default");
	report(&status_fd, 0);
	rc = fs_serve(fs) ? 1 : 0;
	fs_destroy(fs);
free_pool:
	pool_destroy(pool);
free_text:
	free(nodes);
	free(text);
out:
	report(&status_fd, (unsigned char)rc);
	return rc;
}

int main(int argc, char **argv)
{
	struct fuse_args fargs = FUSE_ARGS_INIT(argc, argv);
	struct args a = { 0 };
	struct conf c;
	char mnt[PATH_MAX];
	int status_fd = -1, rc = EXIT_USAGE;
	uint8_t key[AUTH_KEY] = { 0 };

	if (fuse_opt_parse(&fargs, &a, opt_spec, opt_proc) == -1)
		goto free_args;
	if (a.help || a.version) {
		if (a.help)
			usage();
		else
			printf("omnifs %s, libfuse %s\n", OMNI_VERSION, fuse_pkgversion());
		rc = 0;
		goto free_args;
	}
	if (!a.mountpoint) {
		fprintf(stderr, "omnifs: no mount point (try omnifs -h)\n");
		goto free_args;
	}
	char err[PATH_MAX + 256];
	if (mntpoint_prepare(a.mountpoint, mnt, err, sizeof(err))) {
		fprintf(stderr, "omnifs: %s\n", err);
		goto free_args;
	}
	if (configure(&c, &a, key))
		goto free_conf;
	if (fuse_opt_add_arg(&fargs, "-ofsname=omnifs,subtype=omnifs,max_read=1048576"))
		goto free_conf;
	if (!a.foreground && daemonize(&status_fd)) {
		perror("omnifs: fork");
		rc = 1;
		goto free_conf;
	}
	rc = serve(&c, &fargs, mnt, status_fd, key);
free_conf:
	conf_free(&c);
free_args:
	for (size_t i = 0; i < a.nours; i++)
		free(a.ours[i]);
	free(a.ours);
	free(a.mountpoint);
	fuse_opt_free_args(&fargs);
	return rc;
}
