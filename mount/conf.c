/* conf.c - parse and check options and the cluster YAML file. */
#define _GNU_SOURCE
#include "conf.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)

static const char *const transport_names[] = { "auto", "tcp", "rdma" };

const char *conf_transport_name(enum conf_transport t)
{
	return transport_names[t];
}

void conf_defaults(struct conf *c)
{
	memset(c, 0, sizeof(*c));
	if (gethostname(c->node, sizeof(c->node)) || name_check_stage(c->node))
		snprintf(c->node, sizeof(c->node), "localhost");
	c->pool = (struct pool_spec){ POOL_HOST, 0, 1ull << 30 };
	c->transport = TRANSPORT_AUTO;
	c->dflt = (struct ns_policy){ .readers = 1, .wait_ms = 30000, .ttl_s = 0 };
	c->threads = 4;
	c->spin_us = 200;
	c->cleanup_hold_s = 600;
	c->rdma_stage = 256ull << 20;
}

void conf_free(struct conf *c)
{
	for (size_t i = 0; i < c->nnodes; i++)
		free(c->nodes[i].stages);
	free(c->nodes);
	free(c->rules);
	free(c->config_file);
	free(c->secret_file);
	free(c->state_dir);
	memset(c, 0, sizeof(*c));
}

/* A non-negative decimal integer no larger than max. */
static int parse_uint(const char *s, int64_t max, int64_t *out)
{
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* host:port or [v6]:port with a port of 1..65535. */
static int check_addr(const char *s)
{
	const char *colon = strrchr(s, ':');
	int64_t port;

	if (!colon || colon == s || strlen(s) >= 128)
		return -EINVAL;
	if (s[0] == '[' && colon[-1] != ']')
		return -EINVAL;
	if (parse_uint(colon + 1, 65535, &port) || port == 0)
		return -EINVAL;
	return 0;
}

static int set_policy(int64_t *field, const char *key, const char *val,
		      int64_t max, char *err, size_t errlen)
{
	if (parse_uint(val, max, field))
		return ERR("option '%s=%s': expected a whole number from 0 to %" PRId64,
			   key, val, max);
	return 0;
}

/* An unsigned setting from 0 to max. */
static int set_unsigned(unsigned *field, const char *key, const char *val,
			unsigned max, char *err, size_t errlen)
{
	int64_t v;

	if (parse_uint(val, max, &v))
		return ERR("option '%s=%s': expected 0 to %u", key, val, max);
	*field = (unsigned)v;
	return 0;
}

static int set_string(char **field, const char *val)
{
	char *s = strdup(val);

	if (!s)
		return -ENOMEM;
	free(*field);
	*field = s;
	return 0;
}

/* Bytes of memory the machine can give without swapping (MemAvailable). */
static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	unsigned long long kb = 0;
	char line[128];

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	if (kb)
		return kb * 1024;
	long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
}

int conf_set(struct conf *c, const char *key, const char *val, char *err, size_t errlen)
{
	if (!val && strcmp(key, "allow_other"))
		return ERR("option '%s' needs a value (%s=...)", key, key);
	if (!strcmp(key, "config"))
		return set_string(&c->config_file, val);
	if (!strcmp(key, "node")) {
		if (name_check_stage(val))
			return ERR("option 'node=%s': a node name is 1-64 of [A-Za-z0-9_.-], "
				   "not starting with '.'", val);
		snprintf(c->node, sizeof(c->node), "%s", val);
		return 0;
	}
	if (!strcmp(key, "pool")) {
		struct pool_spec ps;
		uint64_t avail = mem_available();
		if (pool_spec_parse(val, &ps))
			return ERR("option 'pool=%s': expected host:SIZE, pinned:SIZE or "
				   "cuda:DEV:SIZE (SIZE like 512M or 4GiB, at least 4K)", val);
		/* Host memory is faulted in (and locked) at start: a pool the
		 * machine cannot hold would go to the OOM killer, not mount. */
		if (ps.kind != POOL_CUDA && ps.size > avail)
			return ERR("option 'pool=%s': %.1f GiB does not fit in this machine's "
				   "available memory (%.1f GiB)", val, ps.size / 1073741824.0,
				   avail / 1073741824.0);
		c->pool = ps;
		return 0;
	}
	if (!strcmp(key, "listen")) {
		if (check_addr(val))
			return ERR("option 'listen=%s': expected ADDR:PORT", val);
		snprintf(c->listen, sizeof(c->listen), "%s", val);
		return 0;
	}
	if (!strcmp(key, "transport")) {
		for (int t = 0; t < 3; t++)
			if (!strcmp(val, transport_names[t])) {
				c->transport = (enum conf_transport)t;
				return 0;
			}
		return ERR("option 'transport=%s': expected auto, tcp or rdma", val);
	}
	if (!strcmp(key, "wait_ms"))
		return set_policy(&c->dflt.wait_ms, key, val, 86400000, err, errlen);
	if (!strcmp(key, "readers"))
		return set_policy(&c->dflt.readers, key, val, INT32_MAX, err, errlen);
	if (!strcmp(key, "ttl_s"))
		return set_policy(&c->dflt.ttl_s, key, val, 315360000, err, errlen);
	if (!strcmp(key, "threads")) {
		int64_t v;
		if (parse_uint(val, 256, &v) || v < 1)
			return ERR("option 'threads=%s': expected 1 to 256", val);
		c->threads = (unsigned)v;
		return 0;
	}
	if (!strcmp(key, "spin_us"))
		return set_unsigned(&c->spin_us, key, val, 100000, err, errlen);
	if (!strcmp(key, "cleanup_hold_s"))
		return set_unsigned(&c->cleanup_hold_s, key, val, 86400, err, errlen);
	if (!strcmp(key, "secret_file")) {
		if (access(val, R_OK))
			return ERR("option 'secret_file=%s': %s", val, strerror(errno));
		return set_string(&c->secret_file, val);
	}
	if (!strcmp(key, "state_dir")) {
		/* A daemon runs from /: a relative path would move. */
		if (!val || val[0] != '/' || strlen(val) > 3000)
			return ERR("option 'state_dir=%s': expected an absolute path",
				   val ? val : "");
		return set_string(&c->state_dir, val);
	}
	if (!strcmp(key, "rdma_stage")) {
		uint64_t v = 0;
		if (strcmp(val, "0") && parse_size(val, &v))
			return ERR("option 'rdma_stage=%s': expected 0 or a SIZE like 256MiB", val);
		c->rdma_stage = v;
		return 0;
	}
	if (!strcmp(key, "allow_other")) {
		if (val && strcmp(val, "1") && strcmp(val, "true"))
			return ERR("option 'allow_other' takes no value");
		c->allow_other = 1;
		return 0;
	}
	return ERR("unknown option '%s'", key);
}

/* ---------------------------------------------------------------- YAML */

struct yctx {
	yaml_document_t *doc;
	const char *path;
	char *err;
	size_t errlen;
};

static int yline(const yaml_node_t *n) { return (int)n->start_mark.line + 1; }


#define YERR(y, n, ...) yerr(y, n, __VA_ARGS__)
static int __attribute__((format(printf, 3, 4)))
yerr(struct yctx *y, const yaml_node_t *n, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(y->err, y->errlen, "%s:%d: %s", y->path, yline(n), msg);
	return -EINVAL;
}

static const char *yscalar(const yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *ynode(struct yctx *y, int id) { return yaml_document_get_node(y->doc, id); }

/* A config file is small and flat; these bound what a hostile one costs. */
#define CONF_FILE_MAX (1u << 20)
#define CONF_DEPTH_MAX 8
#define CONF_ENTRIES_MAX 4096           /* nodes, edges */

/* A mapping's keys are given once each; 0 or -EINVAL naming the second. */
static int ydup(struct yctx *y, const yaml_node_t *map)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
		for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
			yaml_node_t *a = ynode(y, q->key), *b = ynode(y, p->key);
			const char *ka = yscalar(a), *kb = yscalar(b);
			if (ka && kb && !strcmp(ka, kb))
				return yerr(y, b, "'%s' is given twice (first at line %d)", kb,
					    yline(a));
		}
	return 0;
}

/* An edge rule: "FROM->TO": { readers, wait_ms, ttl_s }. */
static int load_edge(struct yctx *y, struct conf *c, yaml_node_t *k, yaml_node_t *v)
{
	const char *name = yscalar(k), *arrow = name ? strstr(name, "->") : NULL;
	struct ns_rule r = { .p = { -1, -1, -1 } };
	char e[200];
	int rc;

	if (!arrow || arrow - name > NAME_STAGE_MAX)
		return YERR(y, k, "edge '%s': expected \"FROM->TO\"", name ? name : "?");
	snprintf(r.from, sizeof(r.from), "%.*s", (int)(arrow - name), name);
	snprintf(r.to, sizeof(r.to), "%s", arrow + 2);
	if (name_check_stage(r.from) || name_check_stage(r.to))
		return YERR(y, k, "edge '%s': stage names are 1-64 of [A-Za-z0-9_.-]", name);
	if (v->type != YAML_MAPPING_NODE)
		return YERR(y, v, "edge '%s': expected a mapping of readers, wait_ms, ttl_s", name);
	if ((rc = ydup(y, v)))
		return rc;
	for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
		yaml_node_t *pk = ynode(y, p->key), *pv = ynode(y, p->value);
		const char *key = yscalar(pk), *val = yscalar(pv);
		struct conf tmp = { 0 };
		if (!key || !val)
			return YERR(y, pk, "edge '%s': expected scalar settings", name);
		int64_t *f = !strcmp(key, "readers") ? &r.p.readers :
			     !strcmp(key, "wait_ms") ? &r.p.wait_ms :
			     !strcmp(key, "ttl_s") ? &r.p.ttl_s : NULL;
		if (!f)
			return YERR(y, pk, "edge '%s': unknown key '%s'", name, key);
		if (conf_set(&tmp, key, val, e, sizeof(e)))
			return YERR(y, pv, "%s", e);
		*f = !strcmp(key, "readers") ? tmp.dflt.readers :
		     !strcmp(key, "wait_ms") ? tmp.dflt.wait_ms : tmp.dflt.ttl_s;
	}
	for (size_t i = 0; i < c->nrules; i++)
		if (!strcmp(c->rules[i].from, r.from) && !strcmp(c->rules[i].to, r.to))
			return YERR(y, k, "edge '%s' is given twice", name);
	struct ns_rule *nr = realloc(c->rules, (c->nrules + 1) * sizeof(*nr));
	if (!nr)
		return -ENOMEM;
	c->rules = nr;
	c->rules[c->nrules++] = r;
	return 0;
}

static int load_stages(struct yctx *y, struct conf_node *cn, yaml_node_t *v)
{
	if (v->type != YAML_SEQUENCE_NODE)
		return YERR(y, v, "node '%s': stages must be a list", cn->name);
	size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	cn->stages = calloc(n ? n : 1, sizeof(*cn->stages));
	if (!cn->stages)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		yaml_node_t *s = ynode(y, v->data.sequence.items.start[i]);
		if (!yscalar(s) || name_check_stage(yscalar(s)))
			return YERR(y, s, "node '%s': bad stage name", cn->name);
		snprintf(cn->stages[i], sizeof(cn->stages[i]), "%s", yscalar(s));
	}
	cn->nstages = n;
	return 0;
}

/* A cluster node: NAME: { addr: HOST:PORT, stages: [..] }. */
static int load_node(struct yctx *y, struct conf *c, yaml_node_t *k, yaml_node_t *v)
{
	const char *name = yscalar(k);
	struct conf_node *cn;
	int rc;

	if (!name || name_check_stage(name))
		return YERR(y, k, "bad node name '%s'", name ? name : "?");
	for (size_t i = 0; i < c->nnodes; i++)
		if (!strcmp(c->nodes[i].name, name))
			return YERR(y, k, "node '%s' is named twice (first at line %d)",
				    name, c->nodes[i].line);
	if (v->type != YAML_MAPPING_NODE)
		return YERR(y, v, "node '%s': expected { addr: HOST:PORT, stages: [...] }", name);
	if ((rc = ydup(y, v)))
		return rc;
	cn = realloc(c->nodes, (c->nnodes + 1) * sizeof(*cn));
	if (!cn)
		return -ENOMEM;
	c->nodes = cn;
	cn = &c->nodes[c->nnodes++];
	memset(cn, 0, sizeof(*cn));
	snprintf(cn->name, sizeof(cn->name), "%s", name);
	cn->line = yline(k);
	for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
		yaml_node_t *pk = ynode(y, p->key), *pv = ynode(y, p->value);
		const char *key = yscalar(pk);
		if (key && !strcmp(key, "addr")) {
			if (!yscalar(pv) || check_addr(yscalar(pv)))
				return YERR(y, pv, "node '%s': addr must be HOST:PORT", name);
			snprintf(cn->addr, sizeof(cn->addr), "%s", yscalar(pv));
		} else if (key && !strcmp(key, "stages")) {
			if ((rc = load_stages(y, cn, pv)))
				return rc;
		} else {
			return YERR(y, pk, "node '%s': unknown key '%s'", name, key ? key : "?");
		}
	}
	if (!cn->addr[0])
		return YERR(y, k, "node '%s' has no addr", name);
	for (size_t i = 0; i + 1 < c->nnodes; i++)
		if (!strcmp(c->nodes[i].addr, cn->addr))
			return YERR(y, k, "node '%s' has the same addr as '%s' (line %d)",
				    name, c->nodes[i].name, c->nodes[i].line);
	return 0;
}

static int load_section(struct yctx *y, struct conf *c, yaml_node_t *k, yaml_node_t *v,
			int (*one)(struct yctx *, struct conf *, yaml_node_t *, yaml_node_t *))
{
	int rc;

	if (v->type != YAML_MAPPING_NODE)
		return YERR(y, v, "'%s' must be a mapping", yscalar(k));
	if (v->data.mapping.pairs.top - v->data.mapping.pairs.start > CONF_ENTRIES_MAX)
		return YERR(y, k, "'%s' has more than %d entries", yscalar(k), CONF_ENTRIES_MAX);
	for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++)
		if ((rc = one(y, c, ynode(y, p->key), ynode(y, p->value))))
			return rc;
	return 0;
}

static int load_top(struct yctx *y, struct conf *c, yaml_node_t *root)
{
	char e[256];
	int rc;

	if (!root)
		return 0;       /* an empty file: the defaults */
	if (root->type != YAML_MAPPING_NODE)
		return YERR(y, root, "expected a mapping of settings");
	if ((rc = ydup(y, root)))
		return rc;
	for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
		yaml_node_t *k = ynode(y, p->key), *v = ynode(y, p->value);
		const char *key = yscalar(k);
		if (!key)
			return YERR(y, k, "expected a setting name");
		if (!strcmp(key, "nodes"))
			rc = load_section(y, c, k, v, load_node);
		else if (!strcmp(key, "edges"))
			rc = load_section(y, c, k, v, load_edge);
		else if (!strcmp(key, "config"))
			rc = YERR(y, k, "'config' cannot be set inside a config file");
		else if (!yscalar(v))
			rc = YERR(y, v, "'%s' expects a single value", key);
		else if (conf_set(c, key, yscalar(v), e, sizeof(e)))
			rc = YERR(y, v, "%s", e);
		else
			rc = 0;
		if (rc)
			return rc;
	}
	return 0;
}

/* Before the document is built: no alias (its errors would point at the
 * anchor, and a config has no use for one) and no nesting deeper than a
 * config's.  0, or -EINVAL with "file:line: reason"; a syntax error is
 * left for the loader to tell. */
static int yprescan(FILE *f, const char *path, char *err, size_t errlen)
{
	yaml_parser_t p;
	yaml_token_t t;
	int depth = 0, rc = 0, end = 0;

	yaml_parser_initialize(&p);
	yaml_parser_set_input_file(&p, f);
	while (!rc && !end && yaml_parser_scan(&p, &t)) {
		int line = (int)t.start_mark.line + 1;
		switch (t.type) {
		case YAML_BLOCK_SEQUENCE_START_TOKEN:
		case YAML_BLOCK_MAPPING_START_TOKEN:
		case YAML_FLOW_SEQUENCE_START_TOKEN:
		case YAML_FLOW_MAPPING_START_TOKEN:
			if (++depth > CONF_DEPTH_MAX)
				rc = ERR("%s:%d: nested deeper than %d levels", path, line,
					 CONF_DEPTH_MAX);
			break;
		case YAML_BLOCK_END_TOKEN:
		case YAML_FLOW_SEQUENCE_END_TOKEN:
		case YAML_FLOW_MAPPING_END_TOKEN:
			depth--;
			break;
		case YAML_ALIAS_TOKEN:
			rc = ERR("%s:%d: YAML aliases (*%s) are not supported; write the value out",
				 path, line, (const char *)t.data.alias.value);
			break;
		case YAML_STREAM_END_TOKEN:
			end = 1;
			break;
		default:
			break;
		}
		yaml_token_delete(&t);
	}
	yaml_parser_delete(&p);
	rewind(f);
	return rc;
}

int conf_load(struct conf *c, const char *path, char *err, size_t errlen)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	struct yctx y = { &doc, path, err, errlen };
	FILE *f = fopen(path, "r");
	int rc;

	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && st.st_size > CONF_FILE_MAX) {
		snprintf(err, errlen, "%s: %lld bytes; a config file may have at most %u",
			 path, (long long)st.st_size, CONF_FILE_MAX);
		fclose(f);
		return -EFBIG;
	}
	if ((rc = yprescan(f, path, err, errlen))) {
		fclose(f);
		return rc;
	}
	yaml_parser_initialize(&parser);
	yaml_parser_set_input_file(&parser, f);
	if (!yaml_parser_load(&parser, &doc)) {
		snprintf(err, errlen, "%s:%zu: %s", path, parser.problem_mark.line + 1,
			 parser.problem ? parser.problem : "YAML syntax error");
		rc = -EINVAL;
		goto close_parser;
	}
	rc = load_top(&y, c, yaml_document_get_root_node(&doc));
	if (!rc && c->nnodes > 1 && !c->secret_file) {
		snprintf(err, errlen, "%s: secret_file is required when nodes has more "
			 "than one entry", path);
		rc = -EINVAL;
	}
	yaml_document_delete(&doc);
close_parser:
	yaml_parser_delete(&parser);
	fclose(f);
	return rc;
}

char *conf_render(const struct conf *c)
{
	char *buf = NULL, pool[64];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	pool_spec_format(&c->pool, pool, sizeof(pool));
	fprintf(f, "config: %s\nnode: %s\npool: %s\nlisten: %s\ntransport: %s\n",
		c->config_file ? c->config_file : "(embedded default)", c->node, pool,
		c->listen[0] ? c->listen : "(none)", conf_transport_name(c->transport));
	fprintf(f, "wait_ms: %" PRId64 "\nreaders: %" PRId64 "\nttl_s: %" PRId64 "\n",
		c->dflt.wait_ms, c->dflt.readers, c->dflt.ttl_s);
	fprintf(f, "cleanup_hold_s: %u\n", c->cleanup_hold_s);
	fprintf(f, "secret_file: %s\nstate_dir: %s\nallow_other: %s\nthreads: %u\nspin_us: %u\n",
		c->secret_file ? c->secret_file : "(none)", c->state_dir ? c->state_dir : "(none)",
		c->allow_other ? "true" : "false", c->threads, c->spin_us);
	fprintf(f, "rdma_stage: %" PRIu64 "MiB\n", c->rdma_stage >> 20);
	fprintf(f, "nodes:%s\n", c->nnodes ? "" : " {}");
	for (size_t i = 0; i < c->nnodes; i++) {
		fprintf(f, "  %s: { addr: %s, stages: [", c->nodes[i].name, c->nodes[i].addr);
		for (size_t s = 0; s < c->nodes[i].nstages; s++)
			fprintf(f, "%s\"%s\"", s ? ", " : "", c->nodes[i].stages[s]);
		fprintf(f, "] }\n");
	}
	fprintf(f, "edges:%s\n", c->nrules ? "" : " {}");
	for (size_t i = 0; i < c->nrules; i++) {
		const struct ns_policy *p = &c->rules[i].p;
		fprintf(f, "  \"%s->%s\": {", c->rules[i].from, c->rules[i].to);
		const char *sep = " ";
		if (p->readers >= 0) { fprintf(f, "%sreaders: %" PRId64, sep, p->readers); sep = ", "; }
		if (p->wait_ms >= 0) { fprintf(f, "%swait_ms: %" PRId64, sep, p->wait_ms); sep = ", "; }
		if (p->ttl_s >= 0) fprintf(f, "%sttl_s: %" PRId64, sep, p->ttl_s);
		fprintf(f, " }\n");
	}
	fclose(f);
	return buf;
}
