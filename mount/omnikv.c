/* omnikv - KV payloads (SPEC §6) on the command line.
 *
 *   omnikv inspect [--json] FILE
 *   omnikv verify FILE                    exit 0: intact, 1: damaged, 2: not KV
 *   omnikv convert --to native|vllm IN OUT
 *   omnikv view --rank R --of T [-o OUT] SHARD...
 *   omnikv pack --cache 2nbhd|n2bhd|kv --blocks I,J,... --tokens N [--to native|vllm]
 *               [--dtype D] [--head-first F --heads-total H] [--rid R] OUT NPY...
 *
 * view gives the bytes the filesystem's <key>.rank<R>of<T> gives, offline,
 * from shard files named <key>.rank<i>of<S>.  pack gathers one request's
 * tokens out of vLLM's paged caches saved with numpy.save: one .npy per
 * layer shaped [2, blocks, block, heads, dim] (2nbhd) or [blocks, 2,
 * block, heads, dim] (n2bhd), or a K and a V .npy per layer shaped
 * [blocks, block, heads, dim] (kv).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../kvfmt/kvfmt.h"
#include "omnikv.h"

struct file { uint8_t *p; uint64_t n; };

#define VIEW_FILES_MAX 1024

int omnikv_slurp(const char *path, uint8_t **p, uint64_t *n)
{
	FILE *fp = fopen(path, "rb");
	struct stat st;
	long size = -1;

	*p = NULL;
	/* A directory opens, and seeks to an end that is no size */
	if (fp && !fstat(fileno(fp), &st) && S_ISDIR(st.st_mode))
		errno = EISDIR;
	else if (fp && !fseek(fp, 0, SEEK_END) && (size = ftell(fp)) >= 0 && fseek(fp, 0, SEEK_SET))
		size = -1;
	if (size >= 0 && (*p = malloc(size ? (size_t)size : 1)) &&
	    fread(*p, 1, (size_t)size, fp) == (size_t)size) {
		fclose(fp);
		*n = (uint64_t)size;
		return 0;
	}
	fprintf(stderr, "omnikv: %s: %s\n", path, size >= 0 && *p && !ferror(fp) ?
		"shorter than its size says" : strerror(errno));    /* malloc's: ENOMEM */
	if (fp)
		fclose(fp);
	free(*p);
	*p = NULL;
	return -1;
}

static int spit(const char *path, const uint8_t *p, uint64_t n)
{
	FILE *fp = path && strcmp(path, "-") ? fopen(path, "wb") : stdout;
	int bad = !fp || fwrite(p, 1, n, fp) != n;

	if (fp && fp != stdout)
		bad |= fclose(fp) != 0;
	if (bad)
		fprintf(stderr, "omnikv: %s: %s\n", path ? path : "-", strerror(errno));
	return bad ? -1 : 0;
}

static const void *at(void *arg, uint64_t off, uint64_t *len)
{
	struct file *f = arg;

	if (off >= f->n)
		return NULL;
	*len = f->n - off;
	return f->p + off;
}

/* Reads and parses a payload; 2 (the exit status) on failure. */
static int load(const char *path, struct file *f, struct kv_info *kv)
{
	char err[160];

	if (omnikv_slurp(path, &f->p, &f->n))
		return 2;
	if (kv_parse(f->p, f->n, f->n, kv, err, sizeof(err))) {
		fprintf(stderr, "omnikv: %s: %s\n", path, err);
		kv_free(kv);
		free(f->p);
		f->p = NULL;
		return 2;
	}
	return 0;
}

static int cmd_inspect(int argc, char **argv)
{
	int json = argc > 1 && !strcmp(argv[1], "--json");
	struct file f;
	struct kv_info kv;
	char sum[1024];

	if (argc != 2 + json) {
		return omnikv_usage("inspect");
	}
	if (load(argv[1 + json], &f, &kv))
		return 2;
	if (json) {
		kv_summary(&kv, sum, sizeof(sum));
		printf("%s\n", sum);
	} else {
		uint32_t missing = 0;
		for (uint32_t i = 0; i < kv.ntensors; i++)
			missing += !kv.t[i].len;
		printf("%s: %s KV payload, %s %s %s\n", argv[1], kv.format == KV_FMT_NATIVE ?
		       "native" : "vllm-omni", kv_dtype_name(kv.dtype),
		       kv.layout == KV_HND ? "HND" : "NHD", kv.kind == KV_SPLIT ? "K and V" : "latent");
		printf("  layers %u, tokens %u, heads %u..%u of %u, head_dim %u\n", kv.layers,
		       kv.tokens, kv.head_first, kv.head_first + kv.head_count - 1, kv.heads_total,
		       kv.head_dim);
		printf("  %u tensors (%u missing), %llu data bytes, %llu header bytes\n", kv.ntensors,
		       missing, (unsigned long long)kv.data_bytes, (unsigned long long)kv.hdr_len);
	}
	kv_free(&kv);
	free(f.p);
	return 0;
}

static int cmd_verify(int argc, char **argv)
{
	struct file f;
	struct kv_info kv;
	char err[160];

	if (argc != 2) {
		return omnikv_usage("verify");
	}
	if (load(argv[1], &f, &kv))
		return 2;
	int rc = kv_verify(&kv, at, &f, err, sizeof(err));
	if (rc)
		fprintf(stderr, "omnikv: %s: %s\n", argv[1], err);
	else
		printf("%s: intact%s\n", argv[1], kv.format == KV_FMT_VLLM ?
		       " (vllm-omni payloads carry no checksums: its layout checks out)" : "");
	kv_free(&kv);
	free(f.p);
	return rc ? 1 : 0;
}

static int cmd_convert(int argc, char **argv)
{
	struct file f;
	struct kv_info kv;
	uint8_t *out;
	uint64_t len;

	if (argc != 5 || strcmp(argv[1], "--to") ||
	    (strcmp(argv[2], "native") && strcmp(argv[2], "vllm"))) {
		return omnikv_usage("convert");
	}
	if (load(argv[3], &f, &kv))
		return 2;
	int rc = kv_convert(&kv, f.p, at, &f, strcmp(argv[2], "vllm") ? KV_FMT_NATIVE : KV_FMT_VLLM,
			    &out, &len);
	if (rc)
		fprintf(stderr, "omnikv: %s: cannot convert: %s\n", argv[3],
			rc == -EINVAL ? "vllm-omni has no latent payloads" : strerror(-rc));
	else
		rc = spit(argv[4], out, len), free(out);
	kv_free(&kv);
	free(f.p);
	return rc ? 1 : 0;
}

static const struct command {
	const char *name;
	int (*fn)(int, char **);
	const char *usage;              /* after "omnikv NAME " */
} commands[] = {
	{ "inspect", cmd_inspect, "[--json] FILE" },
	{ "verify", cmd_verify, "FILE       exit 0: intact, 1: damaged, 2: not KV" },
	{ "convert", cmd_convert, "--to native|vllm IN OUT" },
	{ "view", omnikv_view, "--rank R --of T [-o OUT] SHARD..." },
	{ "pack", omnikv_pack, "--cache 2nbhd|n2bhd|kv --blocks I,J,... --tokens N\n"
	  "                   [--to native|vllm] [--dtype D] [--head-first F --heads-total H]\n"
	  "                   [--rid R] OUT NPY..." },
};
#define NCOMMANDS (sizeof(commands) / sizeof(*commands))

static void usage_of(FILE *f, const struct command *c, const char *lead)
{
	fprintf(f, "%somnikv %s %s\n", lead, c->name, c->usage);
}

int omnikv_usage(const char *cmd)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, cmd))
			usage_of(stderr, &commands[i], "usage: ");
	return 2;
}

int omnikv_number(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);      /* which takes "-1" and " 1": not ours */
	if (*s < '0' || *s > '9' || errno || *end || v < lo || v > hi) {
		fprintf(stderr, "omnikv: %s '%s': expected a whole number from %llu to %llu\n", opt, s,
			(unsigned long long)lo, (unsigned long long)hi);
		return -1;
	}
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	int help = argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));

	for (size_t i = 0; argc > 1 && i < NCOMMANDS; i++) {
		if (strcmp(argv[1], commands[i].name))
			continue;
		if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")))
			return usage_of(stdout, &commands[i], "usage: "), 0;
		return commands[i].fn(argc - 1, argv + 1);
	}
	if (argc > 1 && !help)
		fprintf(stderr, "omnikv: unknown command '%s'\n", argv[1]);
	for (size_t i = 0; i < NCOMMANDS; i++)
		usage_of(help ? stdout : stderr, &commands[i], i ? "       " : "usage: ");
	return help ? 0 : 2;
}

/* ---------------------------------------------------------------- view */

/* The shards of S that rank r of T needs, loaded and parsed: 0, or 2. */
static int view_sources(char **files, int nfiles, uint32_t r, uint32_t T, uint32_t *S,
			uint32_t *n, struct file *src, struct kv_info *kv)
{
	uint32_t first, idx[VIEW_FILES_MAX];

	*S = 0;
	for (int i = 0; i < nfiles; i++) {     /* the names say S and which each is */
		const char *base = strrchr(files[i], '/');
		size_t bl;
		uint32_t ss;
		kv_name_split(base ? base + 1 : files[i], &bl, &idx[i], &ss);
		if (*S && ss != *S) {
			fprintf(stderr, "omnikv: %s: not a shard of %u\n", files[i], *S);
			return 2;
		}
		*S = ss;
	}
	if (kv_view_shards(*S, r, T, &first, n) || *n > VIEW_FILES_MAX) {
		fprintf(stderr, "omnikv: rank %u of %u cannot be made from %u shards\n", r, T, *S);
		return 2;
	}
	for (uint32_t k = 0; k < *n; k++) {
		int i = 0;
		while (i < nfiles && idx[i] != first + k)
			i++;
		if (i == nfiles) {
			fprintf(stderr, "omnikv: shard %u of %u is not given\n", first + k, *S);
			return 2;
		}
		if (load(files[i], &src[k], &kv[k]))
			return 2;
	}
	return 0;
}

int omnikv_view(int argc, char **argv)
{
	static struct file src[VIEW_FILES_MAX];
	static struct kv_info kv[VIEW_FILES_MAX];
	const void *hdr[VIEW_FILES_MAX];
	uint64_t r = UINT64_MAX, T = 0;
	uint32_t S, n = 0;
	const char *out = "-";
	struct kv_plan p;
	char err[160];
	int c, bad = 0, rc = 2;

	optind = 1;
	static const struct option lo[] = { { "rank", 1, 0, 'r' }, { "of", 1, 0, 'T' }, { 0, 0, 0, 0 } };
	while ((c = getopt_long(argc, argv, "o:", lo, NULL)) != -1) {
		switch (c) {
		case 'r': bad = omnikv_number("--rank", optarg, 0, KV_MAX_RANKS - 1, &r); break;
		case 'T': bad = omnikv_number("--of", optarg, 1, KV_MAX_RANKS, &T); break;
		case 'o': out = optarg; break;
		default: return omnikv_usage("view");
		}
		if (bad)
			return 2;
	}
	int nfiles = argc - optind;
	if (!T || r == UINT64_MAX || nfiles < 1 || nfiles > VIEW_FILES_MAX)
		return omnikv_usage("view");
	if (r >= T) {
		fprintf(stderr, "omnikv: --rank %llu --of %llu: the ranks of %llu are 0 to %llu\n",
			(unsigned long long)r, (unsigned long long)T, (unsigned long long)T,
			(unsigned long long)T - 1);
		return 2;
	}
	if (view_sources(argv + optind, nfiles, (uint32_t)r, (uint32_t)T, &S, &n, src, kv))
		goto free_sources;
	for (uint32_t k = 0; k < n; k++)
		hdr[k] = src[k].p;
	if (kv_plan_view(kv, hdr, n, S, (uint32_t)r, (uint32_t)T, &p, err, sizeof(err))) {
		fprintf(stderr, "omnikv: %s\n", err);
		goto free_sources;
	}
	uint8_t *v = calloc(1, p.size);
	if (v) {
		memcpy(v, p.hdr, p.hdr_len);
		for (size_t s = 0; s < p.nseg; s++)
			for (uint32_t k = 0; k < p.seg[s].count; k++)
				memcpy(v + p.seg[s].doff + k * p.seg[s].dstride,
				       src[p.seg[s].src].p + p.seg[s].soff + k * p.seg[s].sstride,
				       p.seg[s].len);
		rc = spit(out, v, p.size) ? 1 : 0;
		free(v);
	}
	kv_plan_free(&p);
free_sources:
	for (uint32_t k = 0; k < VIEW_FILES_MAX; k++) {
		kv_free(&kv[k]);
		free(src[k].p);
		src[k].p = NULL;
	}
	return rc;
}
