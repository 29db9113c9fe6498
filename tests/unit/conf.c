/* Unit tests for options and the YAML config (SPEC §2, §7). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include "../tap.h"
#include "../../mount/conf.h"

static char err[512];

static int set(struct conf *c, const char *k, const char *v)
{
	return conf_set(c, k, v, err, sizeof(err));
}

static void test_options(void)
{
	struct conf c;

	conf_defaults(&c);
	ok(c.pool.size == 1ull << 30 && c.pool.kind == POOL_HOST, "default pool host:1GiB");
	ok(c.dflt.wait_ms == 30000 && c.dflt.readers == 1 && c.dflt.ttl_s == 0, "default policy");
	is(set(&c, "pool", "host:512M"), 0, "pool=host:512M");
	is(c.pool.size, 512 << 20, "pool size set");
	is(set(&c, "wait_ms", "250"), 0, "wait_ms=250");
	is(set(&c, "readers", "0"), 0, "readers=0");
	is(set(&c, "transport", "tcp"), 0, "transport=tcp");
	is(set(&c, "listen", "127.0.0.1:7070"), 0, "listen");
	is(set(&c, "listen", "[::1]:7070"), 0, "listen v6");
	is(set(&c, "node", "a-1"), 0, "node");
	ok(set(&c, "spin_us", "0") == 0 && c.spin_us == 0, "spin_us=0 turns polling off");
	ok(c.cleanup_hold_s == 600, "cleanup_hold_s is 600 by default");
	ok(set(&c, "cleanup_hold_s", "0") == 0 && c.cleanup_hold_s == 0, "cleanup_hold_s=0: off");
	ok(set(&c, "state_dir", "/var/lib/omnifs") == 0 && !strcmp(c.state_dir, "/var/lib/omnifs"),
	   "state_dir=/var/lib/omnifs");
	ok(c.rdma_stage == 256ull << 20, "rdma_stage is 256 MiB by default");
	ok(set(&c, "rdma_stage", "1GiB") == 0 && c.rdma_stage == 1ull << 30, "rdma_stage=1GiB");
	ok(set(&c, "rdma_stage", "0") == 0 && c.rdma_stage == 0, "rdma_stage=0: no stage");
	struct { const char *k, *v, *needle; } bad[] = {
		{ "pool", "host:1X", "pool=host:1X" }, { "pool", "ram:1G", "pool" },
		{ "pool", "host:1000TiB", "does not fit in this machine's available memory" },
		{ "wait_ms", "-1", "wait_ms" }, { "wait_ms", "1e3", "wait_ms" },
		{ "readers", "two", "readers" }, { "ttl_s", "", "ttl_s" },
		{ "transport", "udp", "transport=udp" }, { "listen", "nohost", "listen" },
		{ "listen", "h:0", "listen" }, { "listen", "h:70000", "listen" },
		{ "node", ".x", "node" }, { "node", "a/b", "node" },
		{ "secret_file", "/nonexistent/s", "secret_file" }, { "bogus", "1", "bogus" },
		{ "threads", "0", "threads" }, { "readers", NULL, "readers" },
		{ "spin_us", "-1", "spin_us" }, { "spin_us", "100001", "spin_us" },
		{ "cleanup_hold_s", "86401", "cleanup_hold_s=86401': expected 0 to 86400" },
		{ "cleanup_hold_s", "x", "cleanup_hold_s" }, { "cleanup_hold_s", NULL, "cleanup_hold_s" },
		{ "state_dir", "var/lib/omnifs", "expected an absolute path" },
		{ "state_dir", NULL, "state_dir" },
		{ "rdma_stage", "-1", "expected 0 or a SIZE" },
		{ "rdma_stage", "lots", "rdma_stage" }, { "rdma_stage", NULL, "rdma_stage" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		err[0] = 0;
		int rc = set(&c, bad[i].k, bad[i].v);
		ok(rc == -EINVAL && strstr(err, bad[i].needle) && !strchr(err, '\n'),
		   "%s=%s rejected: %s", bad[i].k, bad[i].v ? bad[i].v : "(none)", err);
	}
	is(c.dflt.wait_ms, 250, "a rejected value changes nothing");
	is(c.pool.size, 512 << 20, "a rejected pool changes nothing");
	ok(c.rdma_stage == 0, "a rejected rdma_stage changes nothing");
	conf_free(&c);
}

/* Each file gets its own name in the caller's path[]: a shared static
 * one let load() reuse it while a secret file was still to be unlinked,
 * and that file stayed in /tmp after every run. */
static void write_tmp(char path[static 64], const char *text)
{
	snprintf(path, 64, "/tmp/omnifs-conf-XXXXXX");
	int fd = mkstemp(path);
	if (fd < 0 || write(fd, text, strlen(text)) < 0)
		path[0] = 0;
	if (fd >= 0)
		close(fd);
}

static int load(struct conf *c, const char *text)
{
	char p[64];
	write_tmp(p, text);
	conf_defaults(c);
	err[0] = 0;
	int rc = conf_load(c, p, err, sizeof(err));
	unlink(p);
	return rc;
}

static void test_yaml(void)
{
	struct conf c;

	is(load(&c, "pool: host:256MiB\nwait_ms: 60000\nreaders: 2\nttl_s: 5\n"
		    "transport: tcp\nedges:\n  \"0->1\": { readers: 3, wait_ms: 100 }\n"
		    "  a->b:\n    ttl_s: 9\n"), 0, "full config loads: %s", err);
	ok(c.pool.size == 256ull << 20 && c.dflt.wait_ms == 60000 && c.dflt.readers == 2 &&
	   c.dflt.ttl_s == 5 && c.transport == TRANSPORT_TCP, "top-level settings applied");
	ok(c.nrules == 2 && !strcmp(c.rules[0].from, "0") && !strcmp(c.rules[0].to, "1") &&
	   c.rules[0].p.readers == 3 && c.rules[0].p.wait_ms == 100 && c.rules[0].p.ttl_s == -1,
	   "edge rule 0->1");
	ok(c.nrules == 2 && c.rules[1].p.ttl_s == 9 && c.rules[1].p.readers == -1, "edge rule a->b");
	char *r = conf_render(&c);
	ok(r && strstr(r, "pool: host:256MiB") && strstr(r, "\"0->1\": { readers: 3, wait_ms: 100 }"),
	   "rendered config shows the effective values");
	free(r);
	conf_free(&c);

	char sp[64], yaml[512];
	write_tmp(sp, "s3cret\n");
	snprintf(yaml, sizeof(yaml), "secret_file: %s\nnodes:\n  a: { addr: 10.0.0.1:7070, stages: [\"0\"] }\n"
		 "  b: { addr: 10.0.0.2:7070, stages: [\"1\", \"2\"] }\n", sp);
	is(load(&c, yaml), 0, "nodes load: %s", err);
	ok(c.nnodes == 2 && c.nodes[1].nstages == 2 && !strcmp(c.nodes[1].stages[1], "2"), "nodes parsed");
	conf_free(&c);
	unlink(sp);

	struct { const char *text, *needle; } bad[] = {
		{ "pool: host:256MiB\nbogus: 1\n", ":2: unknown option 'bogus'" },
		{ "wait_ms: soon\n", ":1: option 'wait_ms=soon'" },
		{ "pool: [1, 2]\n", ":1: 'pool' expects a single value" },
		{ "edges:\n  \"0-1\": { readers: 1 }\n", ":2: edge '0-1'" },
		{ "edges:\n  \"0->1\": { color: red }\n", ":2: edge '0->1': unknown key 'color'" },
		{ "edges:\n  \"0->1\": { readers: 1 }\n  \"0->1\": { readers: 2 }\n", ":3: edge '0->1' is given twice" },
		{ "nodes:\n  a: { addr: h:1 }\n  b: { addr: h:1 }\n", ":3: node 'b' has the same addr" },
		{ "nodes:\n  a: { addr: h:1 }\n  a: { addr: h:2 }\n", ":3: node 'a' is named twice" },
		{ "nodes:\n  a: { addr: h:1 }\n  b: { addr: h:2 }\n", "secret_file is required" },
		{ "nodes:\n  a: { stages: [x] }\n", ":2: node 'a' has no addr" },
		{ "pool: host:1G\n  bad indent: [\n", "" },
		{ "- a\n- b\n", ":1: expected a mapping" },
		{ "config: /x\n", ":1: 'config' cannot be set" },
		{ "pool: host:64M\nwait_ms: 5\npool: host:32M\n", ":3: 'pool' is given twice (first at line 1)" },
		{ "nodes:\n  a: { addr: h:1,\n       addr: h:2 }\n", ":3: 'addr' is given twice (first at line 2)" },
		{ "edges:\n  \"0->1\": { readers: 1, readers: 2 }\n", ":2: 'readers' is given twice" },
		{ "wait_ms: &w 100\n\nreaders: *w\n", ":3: YAML aliases (*w) are not supported" },
		{ "nodes: { a: { addr: [[[[[[[[1]]]]]]]] } }\n", ":1: nested deeper than 8 levels" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		int rc = load(&c, bad[i].text);
		ok(rc == -EINVAL && strstr(err, "/tmp/omnifs-conf-") && strstr(err, bad[i].needle) &&
		   !strchr(err, '\n'), "bad config %zu: %s", i, err);
		conf_free(&c);
	}
	conf_defaults(&c);
	ok(conf_load(&c, "/nonexistent.yaml", err, sizeof(err)) == -ENOENT &&
	   strstr(err, "/nonexistent.yaml"), "missing file named: %s", err);
	conf_free(&c);
	is(load(&c, ""), 0, "empty file: defaults");
	conf_free(&c);
}

int main(void)
{
	test_options();
	test_yaml();
	return done_testing();
}
