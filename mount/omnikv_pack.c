/* omnikv_pack.c - `omnikv pack`: one request's KV out of vLLM's paged
 * caches (numpy .npy files) into a payload.
 *
 * A .npy file is "\x93NUMPY", a version, a header length and a Python dict
 * literal {'descr': '<f2', 'fortran_order': False, 'shape': (...), } padded
 * with spaces, then the array in C order.  Only what vLLM's caches use is
 * read: little-endian or byte-sized dtypes, C order.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kvfmt/kvfmt.h"
#include "omnikv.h"

#define NPY_DIMS 5

struct npy {
	uint8_t *buf;
	const uint8_t *data;
	int dtype, ndim;
	uint64_t shape[NPY_DIMS], n;
};

static int npy_fail(const char *path, const char *why)
{
	fprintf(stderr, "omnikv: %s: %s\n", path, why);
	return -1;
}

/* The dtype of a descr: vLLM's f16/f32/int8/uint8 (bf16 and fp8 are saved
 * as '<u2' / '|u1' views and named with --dtype). */
static int npy_dtype(const char *d)
{
	static const struct { const char *descr; int dtype; } m[] = {
		{ "<f2", KV_F16 }, { "<f4", KV_F32 }, { "|i1", KV_I8 }, { "|u1", KV_U8 },
		{ "<u2", KV_BF16 },
	};
	for (size_t i = 0; i < sizeof(m) / sizeof(*m); i++)
		if (!strncmp(d, m[i].descr, 3) && d[3] == '\'')
			return m[i].dtype;
	return -1;
}

static int npy_load(const char *path, struct npy *a)
{
	uint64_t size;

	memset(a, 0, sizeof(*a));
	if (omnikv_slurp(path, &a->buf, &size))
		return -1;
	if (size < 12)
		return npy_fail(path, "not a .npy file");
	const uint8_t *b = a->buf;
	if (memcmp(b, "\x93NUMPY", 6) || b[6] < 1 || b[6] > 3)
		return npy_fail(path, "not a .npy file");
	uint64_t hl = b[6] == 1 ? (uint64_t)(b[8] | b[9] << 8) : (uint64_t)(b[8] | b[9] << 8 | b[10] << 16 | (uint64_t)b[11] << 24);
	uint64_t ho = b[6] == 1 ? 10 : 12;
	if (hl > (uint64_t)size - ho)
		return npy_fail(path, "header past the end");
	char *h = strndup((const char *)b + ho, hl), *p;
	int ok = h && (p = strstr(h, "'descr': '")) && (a->dtype = npy_dtype(p + 10)) > 0 &&
		 strstr(h, "'fortran_order': False") && (p = strstr(h, "'shape': ("));
	for (p = ok ? p + 10 : NULL; ok && *p != ')';) {
		char *e;
		unsigned long long v = strtoull(p, &e, 10);
		if (e == p || a->ndim == NPY_DIMS || !v || v > (1ull << 32)) {
			ok = 0;
			break;
		}
		a->shape[a->ndim++] = v;
		p = e;
		while (*p == ',' || *p == ' ')
			p++;
	}
	free(h);
	if (!ok)
		return npy_fail(path, "not a C-order array of a dtype omnikv knows");
	a->n = 1;
	for (int i = 0; i < a->ndim; i++)
		a->n *= a->shape[i];
	a->data = b + ho + hl;
	if (a->n * (uint64_t)kv_dtype_size(a->dtype) != (uint64_t)size - ho - hl)
		return npy_fail(path, "its shape does not match its size");
	return 0;
}

struct packopt {
	const char *cache, *rid, *out;
	int to_vllm, dtype;
	uint32_t tokens, head_first, heads_total;
	int64_t *blocks;
	size_t nblocks;
};

/* Token t's row of K (kv 0) or V (1) of layer l, from the layer's arrays. */
static const uint8_t *token_row(const struct packopt *o, struct npy *a, int l, int kv,
				uint32_t t, uint64_t rowb, uint64_t *bs)
{
	struct npy *x;
	uint64_t blk, slot, nb;

	if (!strcmp(o->cache, "kv")) {          /* [blocks, block, heads, dim] each */
		x = &a[2 * l + kv];
		nb = x->shape[0], *bs = x->shape[1];
		blk = (uint64_t)o->blocks[t / *bs], slot = t % *bs;
		return blk >= nb ? NULL : x->data + ((blk * *bs + slot) * rowb);
	}
	x = &a[l];
	int two_first = !strcmp(o->cache, "2nbhd");
	nb = x->shape[two_first ? 1 : 0], *bs = x->shape[2];
	blk = (uint64_t)o->blocks[t / *bs], slot = t % *bs;
	if (blk >= nb)
		return NULL;
	uint64_t i = two_first ? ((kv * nb + blk) * *bs + slot) : ((blk * 2 + kv) * *bs + slot);
	return x->data + i * rowb;
}

static int pack(struct packopt *o, struct npy *a, int layers)
{
	struct npy *x = &a[0];
	int kvp = !strcmp(o->cache, "kv");
	uint32_t heads = (uint32_t)x->shape[kvp ? 2 : 3], dim = (uint32_t)x->shape[kvp ? 3 : 4];
	int dtype = o->dtype ? o->dtype : x->dtype;
	uint64_t rowb = (uint64_t)heads * dim * kv_dtype_size(x->dtype), bs;
	struct kv_spec s = { dtype, KV_NHD, KV_SPLIT, (uint32_t)layers, o->tokens,
			     o->heads_total ? o->heads_total : heads, o->head_first, heads, dim,
			     NULL, 0 };
	const void **t;
	uint8_t *out;
	uint64_t len;
	int rc = 0;

	if (kv_dtype_size(dtype) != kv_dtype_size(x->dtype))
		return npy_fail(o->out, "--dtype does not match the arrays' element size");
	if (!(t = calloc(2 * (size_t)layers, sizeof(*t))))
		return npy_fail(o->out, strerror(ENOMEM));
	for (int l = 0; l < layers && !rc; l++)
		for (int kv = 0; kv < 2 && !rc; kv++) {
			uint8_t *d = malloc(o->tokens * rowb);
			if (!(t[2 * l + kv] = d)) {
				rc = npy_fail(o->out, strerror(ENOMEM));
				break;
			}
			for (uint32_t k = 0; k < o->tokens && !rc; k++) {
				if (k / (x->shape[kvp ? 1 : 2]) >= o->nblocks) {
					rc = npy_fail(o->out, "fewer blocks than the tokens need");
					break;
				}
				const uint8_t *row = token_row(o, a, l, kv, k, rowb, &bs);
				if (!row)
					rc = npy_fail(o->out, "a block id past the cache");
				else
					memcpy(d + k * rowb, row, rowb);
			}
		}
	if (!rc) {
		char *meta = NULL;
		if (o->to_vllm) {
			rc = kv_build_vllm(&s, o->rid, o->blocks, o->nblocks, NULL, t, &out, &len);
		} else if (!(meta = kv_native_keys(o->rid, o->blocks, o->nblocks))) {
			rc = -ENOMEM;
		} else {        /* vllm-omni's keys, so that it converts to its format */
			s.meta = meta;
			s.meta_len = strlen(meta);
			rc = kv_build_native(&s, t, &out, &len);
		}
		if (rc)
			fprintf(stderr, "omnikv: cannot build: %s\n", strerror(-rc));
		free(meta);
	}
	if (!rc) {
		FILE *fp = fopen(o->out, "wb");
		int bad = !fp || fwrite(out, 1, len, fp) != len;
		if ((fp && fclose(fp)) || bad)
			rc = npy_fail(o->out, strerror(errno));
		free(out);
	}
	for (int i = 0; i < 2 * layers; i++)
		free((void *)t[i]);
	free(t);
	return rc;
}

/* --blocks I,J,...: vLLM's block ids, whole numbers, added to o's; 0, or
 * -1 having said why. */
static int parse_blocks(struct packopt *o, const char *list)
{
	size_t n = 1;
	char *copy = strdup(list), *item = copy;
	int rc = 0;

	for (const char *p = list; *p; p++)
		n += *p == ',';
	int64_t *b = copy ? realloc(o->blocks, (o->nblocks + n) * sizeof(*b)) : NULL;
	if (!b) {
		free(copy);
		fprintf(stderr, "omnikv: %s\n", strerror(ENOMEM));
		return -1;
	}
	o->blocks = b;
	for (char *next; item && !rc; item = next) {     /* n items, n - 1 commas */
		uint64_t id;
		if ((next = strchr(item, ',')))
			*next++ = 0;
		if (!(rc = omnikv_number("--blocks", item, 0, INT64_MAX, &id)))
			o->blocks[o->nblocks++] = (int64_t)id;
	}
	free(copy);
	return rc;
}

static int bad_word(const char *opt, const char *val, const char *want)
{
	fprintf(stderr, "omnikv: %s '%s': expected %s\n", opt, val, want);
	return -1;
}

/* The command line into o: 0, or -1 having said why. */
static int pack_options(int argc, char **argv, struct packopt *o)
{
	static const struct option lo[] = {
		{ "cache", 1, 0, 'c' }, { "blocks", 1, 0, 'b' }, { "tokens", 1, 0, 'n' },
		{ "to", 1, 0, 't' }, { "dtype", 1, 0, 'd' }, { "head-first", 1, 0, 'f' },
		{ "heads-total", 1, 0, 'H' }, { "rid", 1, 0, 'r' }, { 0, 0, 0, 0 } };
	uint64_t v = 0;                 /* what a refused number leaves: unused */
	int c, rc = 0;

	optind = 1;
	while (!rc && (c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->cache = optarg;
			if (strcmp(optarg, "kv") && strcmp(optarg, "2nbhd") && strcmp(optarg, "n2bhd"))
				rc = bad_word("--cache", optarg, "2nbhd, n2bhd or kv");
			break;
		case 'r': o->rid = optarg; break;
		case 'b': rc = parse_blocks(o, optarg); break;
		case 'n': rc = omnikv_number("--tokens", optarg, 1, KV_MAX_TOKENS, &v);
			  o->tokens = (uint32_t)v; break;
		case 'f': rc = omnikv_number("--head-first", optarg, 0, KV_MAX_HEADS - 1, &v);
			  o->head_first = (uint32_t)v; break;
		case 'H': rc = omnikv_number("--heads-total", optarg, 1, KV_MAX_HEADS, &v);
			  o->heads_total = (uint32_t)v; break;
		case 't':
			o->to_vllm = !strcmp(optarg, "vllm");
			if (!o->to_vllm && strcmp(optarg, "native"))
				rc = bad_word("--to", optarg, "native or vllm");
			break;
		case 'd':
			if ((o->dtype = kv_dtype_parse(optarg)) < 0)
				rc = bad_word("--dtype", optarg, "a dtype such as float16, bfloat16, float32");
			break;
		default: rc = -1;
		}
	}
	return rc;
}

int omnikv_pack(int argc, char **argv)
{
	struct packopt o = { .rid = "" };

	if (pack_options(argc, argv, &o)) {
		free(o.blocks);
		return 2;
	}
	int kvp = o.cache && !strcmp(o.cache, "kv"), nf = argc - optind - 1;
	if (!o.cache || !o.tokens || !o.nblocks || nf < 1 || (kvp && nf % 2)) {
		free(o.blocks);
		return omnikv_usage("pack");
	}
	o.out = argv[optind];
	struct npy *a = calloc((size_t)nf, sizeof(*a));
	int rc = a ? 0 : npy_fail(o.out, strerror(ENOMEM));
	for (int i = 0; i < nf && !rc; i++) {
		rc = npy_load(argv[optind + 1 + i], &a[i]);
		if (!rc && (a[i].ndim != (kvp ? 4 : 5) || (!kvp && a[i].shape[strcmp(o.cache, "2nbhd") ? 1 : 0] != 2) ||
			    memcmp(a[i].shape, a[0].shape, sizeof(a->shape)) || a[i].dtype != a[0].dtype))
			rc = npy_fail(argv[optind + 1 + i], "its shape is not the cache layout asked for, or differs from the first");
	}
	if (!rc)
		rc = pack(&o, a, kvp ? nf / 2 : nf);
	for (int i = 0; a && i < nf; i++)
		free(a[i].buf);
	free(a);
	free(o.blocks);
	return rc ? 1 : 0;
}
