/* Unit tests for kvfmt: build, parse, verify, lies refused, names, plans
 * checked against a slice computed here, conversions. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../tap.h"
#include "../../kvfmt/kvfmt.h"

struct buf { const uint8_t *p; uint64_t n; };

static const void *at(void *arg, uint64_t off, uint64_t *len)
{
	struct buf *b = arg;

	if (off >= b->n)
		return NULL;
	*len = b->n - off;
	return b->p + off;
}

static uint8_t data[8][4096];

static void fill(void)
{
	for (int t = 0; t < 8; t++)
		for (int i = 0; i < 4096; i++)
			data[t][i] = (uint8_t)(t * 31 + i * 7 + (i >> 8));
}

static int build(const struct kv_spec *s, int vllm, int miss, uint8_t **out, uint64_t *len)
{
	const void *t[8];

	for (int i = 0; i < 8; i++)
		t[i] = i / 2 == miss ? NULL : data[i];
	return vllm ? kv_build_vllm(s, "r", (const int64_t[]){ 1 }, 1, NULL, t, out, len)
		    : kv_build_native(s, t, out, len);
}

static int parse(const uint8_t *p, uint64_t n, struct kv_info *kv)
{
	return kv_parse(p, n, n, kv, NULL, 0);
}

/* Flips byte off and says whether the payload is refused (parse or verify). */
/* Whether a plan's parsed header is what kv_parse() makes of its bytes
 * (json aside): the view's opener takes it instead of parsing. */
static int plan_info_is_parse(const struct kv_plan *p)
{
	struct kv_info v, *k = (struct kv_info *)&p->kv;
	int same = !kv_parse(p->hdr, p->hdr_len, p->size, &v, NULL, 0) &&
		   k->format == v.format && k->dtype == v.dtype && k->layout == v.layout &&
		   k->kind == v.kind && k->layers == v.layers && k->tokens == v.tokens &&
		   k->heads_total == v.heads_total && k->head_first == v.head_first &&
		   k->head_count == v.head_count && k->head_dim == v.head_dim &&
		   k->ntensors == v.ntensors && k->esize == v.esize && k->hdr_len == v.hdr_len &&
		   k->total == v.total && k->data_bytes == v.data_bytes &&
		   (v.format != KV_FMT_NATIVE || (k->meta_off == v.meta_off && k->meta_len == v.meta_len)) &&
		   !memcmp(k->t, v.t, v.ntensors * sizeof(*v.t)) &&
		   (!v.sums || !memcmp(k->sums, v.sums, (uint64_t)v.ntensors * v.head_count * 8));
	kv_free(&v);
	return same;
}

static int refused_with(uint8_t *p, uint64_t n, uint64_t off, uint8_t x)
{
	struct kv_info kv;
	struct buf b = { p, n };

	p[off] ^= x;
	int rc = parse(p, n, &kv);
	if (!rc)
		rc = kv_verify(&kv, at, &b, NULL, 0);
	kv_free(&kv);
	p[off] ^= x;
	return rc != 0;
}

static void native(void)
{
	struct kv_spec s = { KV_F16, KV_HND, KV_SPLIT, 2, 4, 8, 2, 2, 8, "meta!", 5 };
	struct kv_info kv;
	uint8_t *p;
	uint64_t n;
	char err[160];

	is(build(&s, 0, -1, &p, &n), 0, "builds a native payload");
	is(kv_sniff(p, n), KV_FMT_NATIVE, "sniffed as native");
	is(kv_parse(p, n, n, &kv, err, sizeof(err)), 0, "parses");
	ok(kv.layers == 2 && kv.tokens == 4 && kv.heads_total == 8 && kv.head_first == 2 &&
	   kv.head_count == 2 && kv.head_dim == 8 && kv.ntensors == 4, "every field as built");
	ok(kv.hdr_len % KV_ALIGN == 0 && kv.t[0].off == kv.hdr_len && kv.t[1].off % KV_ALIGN == 0,
	   "tensors start aligned, after the header");
	ok(!memcmp(p + kv.meta_off, "meta!", 5), "the metadata blob is kept");
	struct buf b = { p, n };
	is(kv_verify(&kv, at, &b, err, sizeof(err)), 0, "verifies");
	struct kv_info k2;
	is(parse(p, n - 1, &k2), -EINVAL, "an object one byte short: refused");
	kv_free(&k2);
	ok(refused_with(p, n, n - 1, 1), "a flipped data bit: refused (its head's checksum)");
	ok(refused_with(p, n, 20, 1), "tokens that lie: refused");
	ok(refused_with(p, n, 40, 1), "a tensor count that does not multiply out: refused");
	ok(refused_with(p, n, 12, 0x40), "an unknown dtype: refused");
	ok(refused_with(p, n, 28, 0x80), "heads past the total: refused");
	ok(refused_with(p, n, 96 + 7, 0x80), "a tensor offset past the end: refused");
	ok(refused_with(p, n, 96 + 16, 0x10), "a tensor that overlaps the one before: refused");
	ok(refused_with(p, n, 56, 0x80), "a header length past the limit: refused");
	ok(refused_with(p, n, 8, 2), "another version: refused");
	ok(refused_with(p, n, 100, 0) == 0, "(the untouched payload passes)");
	ok(refused_with(p, n, kv.meta_off, 1), "a changed metadata byte: refused (header hash)");
	char sum[1024];
	ok(kv_summary(&kv, sum, sizeof(sum)) > 0 && strstr(sum, "\"head_first\":2"), "summary JSON");
	is(kv_summary(&kv, sum, 10), -ERANGE, "summary into a short buffer: -ERANGE");
	kv_free(&kv);
	free(p);

	s.layout = KV_NHD;
	is(build(&s, 0, 1, &p, &n), 0, "builds NHD with a missing layer");
	is(parse(p, n, &kv), 0, "parses");
	b = (struct buf){ p, n };
	ok(kv.t[2].len == 0 && kv.t[3].len == 0 && !kv_verify(&kv, at, &b, NULL, 0),
	   "missing tensors are (0, 0) and it verifies");
	kv_free(&kv);
	free(p);

	struct kv_spec lat = { KV_FP8_E5M2, KV_HND, KV_LATENT, 3, 5, 1, 0, 1, 32, NULL, 0 };
	is(build(&lat, 0, -1, &p, &n), 0, "builds a latent (MLA) payload");
	is(parse(p, n, &kv), 0, "parses, one tensor per layer");
	is(kv.ntensors, 3, "three tensors");
	kv_free(&kv);
	free(p);
	struct kv_spec bad = lat;
	bad.head_count = 2;
	bad.heads_total = 2;
	is(build(&bad, 0, -1, &p, &n), -EINVAL, "a latent payload of two heads: refused");
}

static void vllm(void)
{
	struct kv_spec s = { KV_BF16, KV_NHD, KV_SPLIT, 2, 3, 2, 0, 2, 4, NULL, 0 };
	struct kv_info kv;
	uint8_t *p;
	uint64_t n;

	is(build(&s, 1, -1, &p, &n), 0, "builds a vllm-omni payload");
	is(kv_sniff(p, n), KV_FMT_VLLM, "sniffed as vllm-omni");
	is(parse(p, n, &kv), 0, "parses");
	ok(kv.layout == KV_NHD && kv.layers == 2 && kv.tokens == 3 && kv.head_count == 2 &&
	   kv.dtype == KV_BF16, "shape and dtype from td");
	ok(strstr((char *)p + 4, "\"d\":\"bfloat16\"") != NULL,
	   "dtype as vllm-omni writes it (no torch. prefix)");
	ok(strstr((char *)p + 4, "{\"n\":\"value_cache_1\",\"i\":1,") != NULL,
	   "tensors named as vllm-omni names them");
	uint64_t hl = kv.hdr_len;
	kv_free(&kv);
	is(parse(p, n - 1, &kv), -EINVAL, "data one byte short: refused");
	kv_free(&kv);
	uint8_t *q = malloc(n + 1);
	memcpy(q, p, n);
	q[n] = 0;
	is(parse(q, n + 1, &kv), -EINVAL, "one trailing byte: refused");
	kv_free(&kv);
	char *o = strstr((char *)q + 4, "\"o\":");
	o[4] = '9';             /* an offset that leaves a gap */
	is(parse(q, n, &kv), -EINVAL, "an offset that is not packed: refused");
	kv_free(&kv);
	memcpy(q, p, n);
	q[3] ^= 0x01;           /* the JSON length */
	is(parse(q, n, &kv), -EINVAL, "a JSON length that lies: refused");
	kv_free(&kv);
	memcpy(q, p, n);
	q[hl - 1] = ' ';        /* the closing brace */
	is(parse(q, n, &kv), -EINVAL, "JSON cut short: refused");
	kv_free(&kv);
	free(q);
	free(p);
	is(build(&s, 1, 0, &p, &n), 0, "builds one with a missing layer");
	ok(strstr((char *)p + 4, "{\"n\":\"key_cache_0\",\"x\":true}") != NULL,
	   "written as {\"n\",\"x\":true}");
	is(parse(p, n, &kv), 0, "and parses");
	kv_free(&kv);
	free(p);
}

/* A vllm-omni payload from its JSON header's text and data bytes. */
static uint8_t *vllm_raw(const char *js, uint64_t data, uint64_t *n)
{
	uint64_t jl = strlen(js);
	uint8_t *p = calloc(1, 4 + jl + data);

	p[0] = (uint8_t)(jl >> 24); p[1] = (uint8_t)(jl >> 16); p[2] = (uint8_t)(jl >> 8); p[3] = (uint8_t)jl;
	memcpy(p + 4, js, jl);
	for (uint64_t i = 0; i < data; i++)
		p[4 + jl + i] = (uint8_t)(i * 7);
	*n = 4 + jl + data;
	return p;
}

static void all_missing(void)
{
	const char *js = "{\"rid\":\"r\",\"bids\":[],\"meta\":{},\"td\":[{\"n\":\"key_cache_0\",\"x\":true},"
			 "{\"n\":\"value_cache_0\",\"x\":true}],\"nl\":1}";
	struct kv_info kv;
	uint64_t n;
	uint8_t *p = vllm_raw(js, 0, &n);

	is(parse(p, n, &kv), -ENODATA, "every layer missing: valid, but nothing to view (ENODATA)");
	kv_free(&kv);
	free(p);
	p = vllm_raw(js, 1, &n);
	is(parse(p, n, &kv), -EINVAL, "every layer missing and a byte of data: refused");
	kv_free(&kv);
	free(p);
}

static void names(void)
{
	size_t bl;
	uint32_t r, T;

	ok(kv_name_split("req.7.rank3of8", &bl, &r, &T) && bl == 5 && r == 3 && T == 8,
	   "<base>.rank<r>of<T>");
	ok(!kv_name_split("req", &bl, &r, &T) && bl == 3 && r == 0 && T == 1, "a bare key is rank 0 of 1");
	ok(!kv_name_split("x.rank01of2", &bl, &r, &T), "leading zeros are not a rank");
	ok(!kv_name_split("x.rank1of0", &bl, &r, &T), "of 0 is not a rank");
	ok(!kv_name_split(".rank1of2", &bl, &r, &T), "no base, no rank");
	uint32_t f, n;
	ok(!kv_view_shards(4, 1, 2, &f, &n) && f == 2 && n == 2, "merge: rank 1 of 2 from 4 is 2..3");
	ok(!kv_view_shards(2, 3, 8, &f, &n) && f == 0 && n == 1, "slice: rank 3 of 8 from 2 is shard 0");
	is(kv_view_shards(4, 0, 3, &f, &n), -EINVAL, "3 and 4: EINVAL");
	is(kv_view_shards(4, 2, 2, &f, &n), -EINVAL, "r >= T: EINVAL");
	ok(!kv_view_shards(1, 0, KV_MAX_RANKS, &f, &n) && f == 0 && n == 1,
	   "a slice 65536 ways of a replicated shard");
	is(kv_view_shards(1, 0, KV_MAX_RANKS + 1, &f, &n), -EINVAL, "... 65537 ways: EINVAL");
	is(kv_view_shards(KV_MAX_RANKS + 1, 0, 1, &f, &n), -EINVAL, "a merge of 65537: EINVAL");
}

/* Slices of one native shard, checked against the heads copied here. */
static void plans(void)
{
	struct kv_spec s = { KV_F16, KV_NHD, KV_SPLIT, 1, 3, 4, 0, 4, 2, NULL, 0 };
	struct kv_info kv, v;
	struct kv_plan p;
	uint8_t *src, hnd[4 * 3 * 4];
	uint64_t n;

	build(&s, 0, -1, &src, &n);
	parse(src, n, &kv);
	const void *h[1] = { src };
	is(kv_plan_view(&kv, h, 1, 1, 1, 2, &p, NULL, 0), 0, "plans rank 1 of 2 of one NHD shard");
	ok(plan_info_is_parse(&p), "the plan's parsed header is its header's parse (native)");
	uint8_t *view = calloc(1, p.size);
	memcpy(view, p.hdr, p.hdr_len);
	for (size_t i = 0; i < p.nseg; i++)
		for (uint32_t k = 0; k < p.seg[i].count; k++)
			memcpy(view + p.seg[i].doff + k * p.seg[i].dstride,
			       src + p.seg[i].soff + k * p.seg[i].sstride, p.seg[i].len);
	struct buf b = { view, p.size };
	ok(!parse(view, p.size, &v) && !kv_verify(&v, at, &b, NULL, 0), "the view parses and verifies");
	ok(v.layout == KV_HND && v.head_first == 2 && v.head_count == 2 && v.heads_total == 4,
	   "it is HND and says it holds heads 2..3 of 4");
	/* K of the view: heads 2, 3 of data[0] (NHD [3 tokens][4 heads][2 dims] of f16). */
	for (int hd = 0; hd < 2; hd++)
		for (int t = 0; t < 3; t++)
			memcpy(hnd + (hd * 3 + t) * 4, data[0] + (t * 4 + 2 + hd) * 4, 4);
	ok(!memcmp(view + v.t[0].off, hnd, 24), "its K bytes are heads 2..3, gathered per head");
	is(p.data_bytes, 48, "data bytes: K and V of two heads");
	ok(p.cover[0].first == 2 && p.cover[0].n == 2 && p.cover[0].of == 4, "it covers heads 2..3 of 4");
	kv_free(&v);
	kv_plan_free(&p);
	free(view);
	is(kv_plan_view(&kv, h, 1, 1, 0, 8, &p, NULL, 0), -EINVAL, "4 heads do not split 8 ways");
	struct kv_spec s2 = s;
	s2.head_first = 1;
	s2.heads_total = 8;
	uint8_t *other;
	build(&s2, 0, -1, &other, &n);
	struct kv_info kv2;
	parse(other, n, &kv2);
	struct kv_info two[2] = { kv, kv2 };
	const void *h2[2] = { src, other };
	is(kv_plan_view(two, h2, 2, 2, 0, 1, &p, NULL, 0), -EINVAL,
	   "shards whose heads don't follow on: refused");
	kv_free(&kv2);
	free(other);
	kv_free(&kv);
	free(src);
}

static void convert(void)
{
	struct kv_spec s = { KV_F32, KV_NHD, KV_SPLIT, 2, 2, 2, 0, 2, 2, NULL, 0 };
	struct kv_info kv, nat;
	uint8_t *p, *q, *r;
	uint64_t n, qn, rn;

	build(&s, 1, 1, &p, &n);
	parse(p, n, &kv);
	struct buf b = { p, n };
	is(kv_convert(&kv, p, at, &b, KV_FMT_NATIVE, &q, &qn), 0, "vllm-omni -> native");
	ok(!parse(q, qn, &nat), "which parses");
	struct buf c = { q, qn };
	is(kv_convert(&nat, q, at, &c, KV_FMT_VLLM, &r, &rn), 0, "-> vllm-omni again");
	ok(rn == n && !memcmp(r, p, n), "the same bytes as at first");
	kv_free(&nat);
	kv_free(&kv);
	free(p);
	free(q);
	free(r);

	/* As Python's json.dumps writes it: "/" bare, non-ASCII escaped,
	 * floats as repr() spells them, keys in their order. */
	const char *js = "{\"rid\":\"chat/7\\u00e9\\ud83d\\ude00\\n\\\"\\u007f\",\"bids\":[3,1],"
		"\"meta\":{\"z\":1e-05,\"a\":0.1,\"t\":1.0,\"n\":null,\"b\":[true,false],"
		"\"big\":12345678901234567890,\"max\":9223372036854775807,\"neg\":-42,"
		"\"min\":-9223372036854775808},"
		"\"td\":[{\"n\":\"key_cache_0\",\"i\":0,\"d\":\"float16\",\"s\":[1,2,2],\"o\":0,\"b\":8},"
		"{\"n\":\"value_cache_0\",\"i\":0,\"d\":\"float16\",\"s\":[1,2,2],\"o\":8,\"b\":8}],"
		"\"nl\":1}";
	p = vllm_raw(js, 16, &n);
	is(parse(p, n, &kv), 0, "a header as Python writes it parses");
	b = (struct buf){ p, n };
	kv_convert(&kv, p, at, &b, KV_FMT_NATIVE, &q, &qn);
	parse(q, qn, &nat);
	c = (struct buf){ q, qn };
	kv_convert(&nat, q, at, &c, KV_FMT_VLLM, &r, &rn);
	ok(rn == n && !memcmp(r, p, n), "vllm -> native -> vllm: the same bytes, escapes and all");
	if (rn != n || memcmp(r, p, n))
		printf("# got %.*s\n", (int)(rn - 16 - 4), (char *)r + 4);
	kv_free(&nat);
	kv_free(&kv);
	free(p);
	free(q);
	free(r);

	/* the blob omnikv pack writes: vllm-omni's keys, spelled as above */
	const int64_t bids[] = { 4, 0, 9223372036854775807 };
	char *keys = kv_native_keys("r\"\\/\xc3\xa9", bids, 3);
	is_str(keys, "{\"rid\":\"r\\\"\\\\/\\u00e9\",\"bids\":[4,0,9223372036854775807],\"meta\":{}}",
	       "a request's keys as vllm-omni's header has them");
	free(keys);

	/* native HND (the layout omnifs writes views in) and back */
	for (int lay = KV_HND; lay <= KV_NHD; lay++) {
		struct kv_spec h = { KV_F16, (enum kv_layout)lay, KV_SPLIT, 2, 3, 4, 2, 2, 2, NULL, 0 };
		build(&h, 0, 0, &p, &n);
		parse(p, n, &kv);
		b = (struct buf){ p, n };
		kv_convert(&kv, p, at, &b, KV_FMT_VLLM, &q, &qn);
		parse(q, qn, &nat);
		c = (struct buf){ q, qn };
		kv_convert(&nat, q, at, &c, KV_FMT_NATIVE, &r, &rn);
		ok(rn == n && !memcmp(r, p, n), "native %s -> vllm -> native: the same bytes",
		   lay == KV_HND ? "HND" : "NHD");
		kv_free(&nat);
		kv_free(&kv);
		free(p);
		free(q);
		free(r);
	}
}

/* Views of vllm-omni shards: a slice carries vllm-omni's tp_head_slice. */
static void vllm_views(void)
{
	struct kv_spec s = { KV_F16, KV_NHD, KV_SPLIT, 1, 2, 4, 0, 4, 2, NULL, 0 };
	const void *t[2] = { data[0], data[1] };
	struct kv_info kv[2], v;
	struct kv_plan p;
	uint8_t *src[2];
	uint64_t n[2];

	for (int k = 0; k < 2; k++) {
		kv_build_vllm(&s, "r", NULL, 0, "{\"seq_len\":2,\"f\":1e-05}", t, &src[k], &n[k]);
		parse(src[k], n[k], &kv[k]);
	}
	const void *h[2] = { src[0], src[1] };
	is(kv_plan_view(&kv[1], &h[1], 1, 2, 3, 4, &p, NULL, 0), 0, "plans rank 3 of 4 from shard 1 of 2");
	ok(plan_info_is_parse(&p), "the plan's parsed header is its header's parse (a vllm slice)");
	const char *mark = "\"meta\":{\"seq_len\":2,\"f\":1e-05,\"tp_head_slice\":{\"applied\":true,\"side\":\"sender\","
			   "\"target_rank\":3,\"source_rank\":1,\"from_tp\":2,\"to_tp\":4,"
			   "\"offset_in_shard\":1,\"num_slices\":2}}";
	ok(memmem(p.hdr, p.hdr_len, mark, strlen(mark)) != NULL,
	   "the slice's meta says tp_head_slice applied, as vllm-omni's sender writes it");
	is(kv_parse(p.hdr, p.hdr_len, p.size, &v, NULL, 0), 0, "its header parses");
	kv_free(&v);
	ok(memmem(src[1], n[1], "tp_head_slice", 13) == NULL, "the shard itself is left as it was");
	kv_plan_free(&p);
	is(kv_plan_view(kv, h, 2, 2, 0, 1, &p, NULL, 0), 0, "plans the merge of both");
	ok(plan_info_is_parse(&p), "... and of a vllm merge");
	ok(memmem(p.hdr, p.hdr_len, "tp_head_slice", 13) == NULL, "a merge carries no slice mark");
	kv_plan_free(&p);
	is(kv_plan_view(&kv[1], &h[1], 1, 2, 1, 2, &p, NULL, 0), 0, "plans rank 1 of 2 as it is");
	ok(plan_info_is_parse(&p), "... and of a view that is one shard");
	kv_plan_free(&p);
	for (int k = 0; k < 2; k++) {
		kv_free(&kv[k]);
		free(src[k]);
	}
}

/* What vllm-omni's readers take besides what its writer writes today:
 * every dtype its from_bytes accepts ... */
static void upstream_dtypes(void)
{
	static const struct { const char *name; int size; } up[] = {
		{ "bool", 1 }, { "uint8", 1 }, { "int8", 1 }, { "int16", 2 }, { "int32", 4 },
		{ "int64", 8 }, { "float16", 2 }, { "float32", 4 }, { "float64", 8 },
		{ "bfloat16", 2 }, { "complex64", 8 }, { "complex128", 16 },
		{ "float8_e4m3fn", 1 }, { "float8_e4m3fnuz", 1 }, { "float8_e5m2", 1 },
		{ "float8_e5m2fnuz", 1 },
	};
	for (size_t i = 0; i < sizeof(up) / sizeof(up[0]); i++) {
		int d = kv_dtype_parse(up[i].name);
		ok(d > 0 && !strcmp(kv_dtype_torch(d), up[i].name) && kv_dtype_size(d) == up[i].size,
		   "dtype %s: %d byte(s), written back as it came", up[i].name, up[i].size);
	}

	char err[160];
	const char *js = "{\"rid\":\"r\",\"bids\":[1],\"meta\":{},\"td\":["
		"{\"n\":\"key_cache_0\",\"d\":\"float4\\n\",\"s\":[2,2,2],\"o\":0,\"b\":4},"
		"{\"n\":\"value_cache_0\",\"d\":\"float4\\n\",\"s\":[2,2,2],\"o\":4,\"b\":4}],"
		"\"nl\":1}";
	struct kv_info kv;
	uint64_t n;
	uint8_t *p = vllm_raw(js, 8, &n);

	is(kv_parse(p, n, n, &kv, err, sizeof(err)), -EINVAL, "a dtype vllm-omni does not read: refused");
	is_str(err, "td[0]: unknown dtype \"float4?\"", "... naming it, in one printable line");
	kv_free(&kv);
	free(p);
}

/* ... and td entries without "i" (its older to_bytes, still read for
 * rolling upgrades). */
static void upstream_older_writer(void)
{
	const char *js = "{\"rid\":\"r\",\"bids\":[1],\"meta\":{},\"td\":["
		"{\"n\":\"key_cache_0\",\"d\":\"float8_e4m3fnuz\",\"s\":[2,2,2],\"o\":0,\"b\":8},"
		"{\"n\":\"value_cache_0\",\"d\":\"float8_e4m3fnuz\",\"s\":[2,2,2],\"o\":8,\"b\":8}],"
		"\"nl\":1}";
	struct kv_info kv, nat;
	struct kv_plan pl;
	uint8_t *p, *q, *r;
	uint64_t n, qn, rn;

	p = vllm_raw(js, 16, &n);
	is(parse(p, n, &kv), 0, "td entries without \"i\" parse (vllm-omni's older writer)");
	ok(kv.dtype == KV_FP8_E4M3FNUZ && kv.esize == 1 && kv.head_count == 2, "... float8_e4m3fnuz");
	struct buf b = { p, n }, c;
	kv_convert(&kv, p, at, &b, KV_FMT_NATIVE, &q, &qn);
	parse(q, qn, &nat);
	c = (struct buf){ q, qn };
	kv_convert(&nat, q, at, &c, KV_FMT_VLLM, &r, &rn);
	ok(rn == n && !memcmp(r, p, n), "vllm -> native -> vllm: the same bytes, still without \"i\"");
	kv_free(&nat);
	free(q);
	free(r);
	const void *h = p;
	is(kv_plan_view(&kv, &h, 1, 1, 1, 2, &pl, NULL, 0), 0, "plans rank 1 of 2 from it");
	const char *fnuz = "\"d\":\"float8_e4m3fnuz\"";
	ok(memmem(pl.hdr, pl.hdr_len, "\"i\":", 4) == NULL &&
	   memmem(pl.hdr, pl.hdr_len, fnuz, strlen(fnuz)) != NULL,
	   "the slice is written as its shard was: no \"i\", the same dtype");
	kv_plan_free(&pl);
	kv_free(&kv);
	memcpy(strstr((char *)p + 4, "value_cache_0"), "value_cache_1", 13);
	is(parse(p, n, &kv), -EINVAL, "without \"i\", a name that is not its place: refused");
	kv_free(&kv);
	free(p);
}

/* One entry without "i", one with it and a name of its own (found by
 * tests/fuzz/kv.c): the view writes "i" for both, and parses again. */
static void upstream_mixed_layers(void)
{
	const char *js = "{\"rid\":\"r\",\"bids\":[1],\"meta\":{},\"td\":["
		"{\"n\":\"key_cache_0\",\"d\":\"float16\",\"s\":[2,2,2],\"o\":0,\"b\":16},"
		"{\"n\":\"v\",\"i\":0,\"d\":\"float16\",\"s\":[2,2,2],\"o\":16,\"b\":16}],"
		"\"nl\":1}";
	struct kv_info kv;
	struct kv_plan pl;
	uint64_t n;
	uint8_t *p = vllm_raw(js, 32, &n);
	const void *h = p;

	is(parse(p, n, &kv), 0, "a td half with \"i\", half without, parses");
	is(kv_plan_view(&kv, &h, 1, 1, 0, 2, &pl, NULL, 0), 0, "plans rank 0 of 2 from it");
	ok(plan_info_is_parse(&pl), "whose header parses as planned");
	kv_plan_free(&pl);
	kv_free(&kv);
	free(p);
}

int main(void)
{
	fill();
	native();
	vllm();
	names();
	plans();
	convert();
	all_missing();
	vllm_views();
	upstream_dtypes();
	upstream_older_writer();
	upstream_mixed_layers();
	return done_testing();
}
