/* conf.h - omnifs's configuration: -o options and the YAML file (SPEC §2, §7).
 *
 * Every setting goes through conf_set(), from the command line and from the
 * file alike, so both accept and reject exactly the same values.
 */
#ifndef OMNI_CONF_H
#define OMNI_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "../fs/ns.h"
#include "../transport/pool.h"

enum conf_transport { TRANSPORT_AUTO, TRANSPORT_TCP, TRANSPORT_RDMA };

struct conf_node {
	char name[NAME_STAGE_MAX + 1];
	char addr[128];
	char (*stages)[NAME_STAGE_MAX + 1];
	size_t nstages;
	int line;
};

struct conf {
	char *config_file;
	char node[NAME_STAGE_MAX + 1];
	struct pool_spec pool;
	char listen[128];
	enum conf_transport transport;
	struct ns_policy dflt;
	char *secret_file;
	char *state_dir;                /* what is owed to peers, kept for a restart */
	int allow_other;
	unsigned threads, spin_us;
	unsigned cleanup_hold_s;        /* ns_settings' */
	uint64_t rdma_stage;            /* a GPU pool's copies for peers' READs; 0: none */
	struct ns_rule *rules;
	size_t nrules;
	struct conf_node *nodes;
	size_t nnodes;
};

/* The embedded default: this host's name, host:1GiB, no peers. */
void conf_defaults(struct conf *c);
void conf_free(struct conf *c);
/* Sets one option.  0, or -EINVAL with a one-line reason in err. */
int conf_set(struct conf *c, const char *key, const char *val, char *err, size_t errlen);
/* Loads a YAML config file.  0, or -errno with "file:line: reason" in err. */
int conf_load(struct conf *c, const char *path, char *err, size_t errlen);
/* The effective configuration as YAML (malloc'd). */
char *conf_render(const struct conf *c);
const char *conf_transport_name(enum conf_transport t);

#endif
