/* kvfmt.c - the native KV payload: parse, verify, build, describe.
 *
 * The byte layout is kvfmt/FORMAT.md.  Parsing trusts nothing: each count
 * is bounded first, each product is checked for overflow, and every tensor
 * must lie, in table order and without overlap, between the header and the
 * declared end, which must be the object's size.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>      /* libxxhash's AVX2/AVX-512 paths, chosen at run time */
#endif

static const uint8_t kv_magic[8] = { 'O', 'M', 'N', 'I', 'K', 'V', '\r', '\n' };


static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void put(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

int kv_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* ---------------------------------------------------------------- dtypes */

static const struct { const char *name, *torch; int size; } dtypes[] = {
	[KV_F16] = { "f16", "float16", 2 },
	[KV_BF16] = { "bf16", "bfloat16", 2 },
	[KV_F32] = { "f32", "float32", 4 },
	[KV_FP8_E4M3] = { "fp8_e4m3", "float8_e4m3fn", 1 },
	[KV_FP8_E5M2] = { "fp8_e5m2", "float8_e5m2", 1 },
	[KV_I8] = { "int8", "int8", 1 },
	[KV_U8] = { "u8", "uint8", 1 },
	[KV_FP8_E4M3FNUZ] = { "fp8_e4m3fnuz", "float8_e4m3fnuz", 1 },
	[KV_FP8_E5M2FNUZ] = { "fp8_e5m2fnuz", "float8_e5m2fnuz", 1 },
	[KV_BOOL] = { "bool", "bool", 1 },
	[KV_I16] = { "i16", "int16", 2 },
	[KV_I32] = { "i32", "int32", 4 },
	[KV_I64] = { "i64", "int64", 8 },
	[KV_F64] = { "f64", "float64", 8 },
	[KV_C64] = { "c64", "complex64", 8 },
	[KV_C128] = { "c128", "complex128", 16 },
};

static int dtype_ok(unsigned d) { return d >= KV_F16 && d <= KV_DTYPE_MAX; }
const char *kv_dtype_name(enum kv_dtype d) { return dtype_ok(d) ? dtypes[d].name : "?"; }
const char *kv_dtype_torch(enum kv_dtype d) { return dtype_ok(d) ? dtypes[d].torch : "?"; }
int kv_dtype_size(enum kv_dtype d) { return dtype_ok(d) ? dtypes[d].size : 0; }

int kv_dtype_parse(const char *s)
{
	if (!strncmp(s, "torch.", 6))
		s += 6;
	for (int d = KV_F16; d <= KV_DTYPE_MAX; d++)
		if (!strcmp(s, dtypes[d].name) || !strcmp(s, dtypes[d].torch))
			return d;
	if (!strcmp(s, "half"))
		return KV_F16;
	if (!strcmp(s, "float"))
		return KV_F32;
	return -EINVAL;
}

/* ---------------------------------------------------------------- sniffing */

enum kv_format kv_sniff(const void *p, size_t n)
{
	const uint8_t *b = p;

	if (n >= sizeof(kv_magic) && !memcmp(b, kv_magic, sizeof(kv_magic)))
		return KV_FMT_NATIVE;
	if (n >= 6 && b[4] == '{' && b[5] == '"') {
		uint64_t len = (uint64_t)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3];
		if (len >= 2 && len <= KV_HDR_MAX)
			return KV_FMT_VLLM;
	}
	return KV_FMT_NONE;
}

int kv_need(const void *p, size_t n, uint64_t *need)
{
	const uint8_t *b = p;

	switch (kv_sniff(p, n)) {
	case KV_FMT_NATIVE:
		if (n < KV_HDR_FIXED)
			return -EINVAL;
		*need = le(b + 56, 8);
		return *need >= KV_HDR_FIXED && *need <= KV_HDR_MAX ? 0 : -EINVAL;
	case KV_FMT_VLLM:
		*need = 4 + ((uint64_t)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3]);
		return 0;
	default:
		return -EINVAL;
	}
}

/* ---------------------------------------------------------------- parsing */

/* Shape fields common to both formats: bounded, and the tensor size
 * computed without overflow. */
int kv_shape_check(struct kv_info *kv, char *err, size_t errlen)
{
	uint64_t b;

	if (!dtype_ok(kv->dtype))
		return kv_fail(err, errlen, "unknown dtype %d", (int)kv->dtype);
	if (kv->layout != KV_HND && kv->layout != KV_NHD)
		return kv_fail(err, errlen, "unknown layout %d", (int)kv->layout);
	if (kv->kind != KV_SPLIT && kv->kind != KV_LATENT)
		return kv_fail(err, errlen, "unknown kind %d", (int)kv->kind);
	if (!kv->layers || kv->layers > KV_MAX_LAYERS || !kv->tokens ||
	    kv->tokens > KV_MAX_TOKENS || !kv->head_dim || kv->head_dim > KV_MAX_DIM ||
	    !kv->head_count || kv->heads_total > KV_MAX_HEADS)
		return kv_fail(err, errlen, "layers, tokens, heads or head_dim out of range");
	if (kv->head_first > kv->heads_total || kv->head_count > kv->heads_total - kv->head_first)
		return kv_fail(err, errlen, "heads %u+%u exceed the total %u",
			       kv->head_first, kv->head_count, kv->heads_total);
	if (kv->kind == KV_LATENT && (kv->head_count != 1 || kv->heads_total != 1))
		return kv_fail(err, errlen, "a latent payload has one head");
	kv->esize = (uint32_t)dtypes[kv->dtype].size;
	kv->ntensors = kv->kind == KV_SPLIT ? 2 * kv->layers : kv->layers;
	b = (uint64_t)kv->head_count * kv->tokens;      /* < 2^40: no overflow below */
	if (__builtin_mul_overflow(b, (uint64_t)kv->head_dim * kv->esize, &b))
		return kv_fail(err, errlen, "a tensor's size overflows");
	return 0;
}

static uint64_t tensor_bytes(const struct kv_info *kv)
{
	return (uint64_t)kv->head_count * kv->tokens * kv->head_dim * kv->esize;
}

/* The tensors lie in order, apart, inside [from, total); missing ones are
 * (0, 0).  Also sums their bytes. */
static int kv_tensors_check(struct kv_info *kv, uint64_t from, char *err, size_t errlen)
{
	uint64_t want = tensor_bytes(kv), end = from;

	kv->data_bytes = 0;
	for (uint32_t i = 0; i < kv->ntensors; i++) {
		const struct kv_tensor *t = &kv->t[i];
		if (!t->len && !t->off)
			continue;
		if (t->len != want)
			return kv_fail(err, errlen, "tensor %u holds %llu bytes, its shape %llu",
				       i, (unsigned long long)t->len, (unsigned long long)want);
		if (t->off < end || t->off > kv->total || t->len > kv->total - t->off)
			return kv_fail(err, errlen, "tensor %u at %llu overlaps or lies outside the payload",
				       i, (unsigned long long)t->off);
		end = t->off + t->len;
		kv->data_bytes += t->len;
	}
	if (!kv->data_bytes)    /* its shape could not be said in vllm-omni's format */
		return kv_fail(err, errlen, "every layer is missing");
	return 0;
}

static int native_parse(const uint8_t *p, size_t n, uint64_t total, struct kv_info *kv,
			char *err, size_t errlen)
{
	uint64_t ntab, nsums, tab_end, sums_end, meta_end;
	int rc;

	if (n < KV_HDR_FIXED)
		return kv_fail(err, errlen, "header shorter than %d bytes", KV_HDR_FIXED);
	if (le(p + 8, 2) != KV_VERSION)
		return kv_fail(err, errlen, "version %u, this build reads %d",
			       (unsigned)le(p + 8, 2), KV_VERSION);
	if (le(p + 10, 2) != KV_HDR_FIXED || p[15] || le(p + 44, 4) || le(p + 80, 8) || le(p + 88, 8))
		return kv_fail(err, errlen, "reserved header fields are not zero");
	kv->format = KV_FMT_NATIVE;
	kv->dtype = p[12];
	kv->layout = p[13];
	kv->kind = p[14];
	kv->layers = (uint32_t)le(p + 16, 4);
	kv->tokens = (uint32_t)le(p + 20, 4);
	kv->heads_total = (uint32_t)le(p + 24, 4);
	kv->head_first = (uint32_t)le(p + 28, 4);
	kv->head_count = (uint32_t)le(p + 32, 4);
	kv->head_dim = (uint32_t)le(p + 36, 4);
	kv->meta_len = le(p + 48, 8);
	kv->hdr_len = le(p + 56, 8);
	kv->total = le(p + 64, 8);
	if ((rc = kv_shape_check(kv, err, errlen)))
		return rc;
	if (le(p + 40, 4) != kv->ntensors)
		return kv_fail(err, errlen, "%u tensors declared, the shape makes %u",
			       (unsigned)le(p + 40, 4), kv->ntensors);
	if (kv->total != total)
		return kv_fail(err, errlen, "header says %llu bytes, the object has %llu",
			       (unsigned long long)kv->total, (unsigned long long)total);
	ntab = (uint64_t)kv->ntensors * 16;
	nsums = (uint64_t)kv->ntensors * kv->head_count;
	tab_end = KV_HDR_FIXED + ntab;
	sums_end = tab_end + nsums * 8;                 /* < 2^48 */
	kv->meta_off = sums_end;
	if (kv->hdr_len > KV_HDR_MAX || kv->hdr_len % KV_ALIGN || kv->meta_len > KV_HDR_MAX ||
	    (meta_end = sums_end + kv->meta_len) > kv->hdr_len || kv->hdr_len > total)
		return kv_fail(err, errlen, "tables and metadata do not fit the %llu-byte header",
			       (unsigned long long)kv->hdr_len);
	if (n < kv->hdr_len)
		return kv_fail(err, errlen, "header cut short");
	for (uint64_t i = meta_end; i < kv->hdr_len; i++)
		if (p[i])
			return kv_fail(err, errlen, "padding after the metadata is not zero");
	if (!(kv->t = calloc(kv->ntensors, sizeof(*kv->t))) ||
	    !(kv->sums = malloc(nsums * sizeof(*kv->sums))))
		return -ENOMEM;
	for (uint32_t i = 0; i < kv->ntensors; i++) {
		kv->t[i].off = le(p + KV_HDR_FIXED + 16 * (uint64_t)i, 8);
		kv->t[i].len = le(p + KV_HDR_FIXED + 16 * (uint64_t)i + 8, 8);
	}
	for (uint64_t i = 0; i < nsums; i++)
		kv->sums[i] = le(p + tab_end + 8 * i, 8);
	return kv_tensors_check(kv, kv->hdr_len, err, errlen);
}

int kv_parse(const void *hdr, size_t n, uint64_t total, struct kv_info *kv,
	     char *err, size_t errlen)
{
	memset(kv, 0, sizeof(*kv));
	if (err && errlen)
		err[0] = 0;
	switch (kv_sniff(hdr, n)) {
	case KV_FMT_NATIVE:
		return native_parse(hdr, n, total, kv, err, errlen);
	case KV_FMT_VLLM:
		return kv_vllm_parse(hdr, n, total, kv, err, errlen);
	default:
		return kv_fail(err, errlen, "not a KV payload");
	}
}

void kv_free(struct kv_info *kv)
{
	free(kv->t);
	free(kv->sums);
	if (kv->json)
		kv_vllm_free(kv->json);
	memset(kv, 0, sizeof(*kv));
}

/* ---------------------------------------------------------------- checksums */

/* Calls fn on each contiguous run of [off, off+len), read through at. */
static int walk(kv_at_fn at, void *arg, uint64_t off, uint64_t len,
		void (*fn)(void *ctx, const void *b, uint64_t n), void *ctx)
{
	while (len) {
		uint64_t have;
		const void *b = at(arg, off, &have);
		if (!b || !have)
			return -EIO;
		if (have > len)
			have = len;
		fn(ctx, b, have);
		off += have;
		len -= have;
	}
	return 0;
}

static void hash_run(void *ctx, const void *b, uint64_t n) { XXH3_64bits_update(ctx, b, n); }

/* XXH3 of count pieces of len bytes at off + k*stride, read through at. */
static int hash_pieces(kv_at_fn at, void *arg, uint64_t off, uint64_t len,
		       uint64_t stride, uint64_t count, uint64_t *out)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	for (uint64_t k = 0; k < count; k++)
		if (walk(at, arg, off + k * stride, len, hash_run, &st))
			return -EIO;
	*out = XXH3_64bits_digest(&st);
	return 0;
}

/* Where head h of tensor i lies: pieces of one head's row. */
static void head_span(const struct kv_info *kv, uint32_t i, uint32_t h, uint64_t *off,
		      uint64_t *len, uint64_t *stride, uint64_t *count)
{
	uint64_t row = (uint64_t)kv->head_dim * kv->esize;

	if (kv->layout == KV_HND || kv->kind == KV_LATENT) {
		*len = row * kv->tokens;
		*off = kv->t[i].off + h * *len;
		*stride = *len;
		*count = 1;
	} else {
		*len = row;
		*off = kv->t[i].off + h * row;
		*stride = row * kv->head_count;
		*count = kv->tokens;
	}
}

static uint64_t kv_header_hash(const uint8_t *hdr, uint64_t len)
{
	uint8_t zero[8] = { 0 };
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, hdr, 72);
	XXH3_64bits_update(&st, zero, 8);
	XXH3_64bits_update(&st, hdr + 80, len - 80);
	return XXH3_64bits_digest(&st);
}

int kv_verify(const struct kv_info *kv, kv_at_fn at, void *arg, char *err, size_t errlen)
{
	uint8_t *hdr;
	int rc;

	if (kv->format != KV_FMT_NATIVE)
		return 0;
	if (!(hdr = malloc(kv->hdr_len)))
		return -ENOMEM;
	rc = kv_read(at, arg, 0, kv->hdr_len, hdr);
	if (!rc && kv_header_hash(hdr, kv->hdr_len) != le(hdr + 72, 8)) {
		kv_fail(err, errlen, "the header fails its checksum");
		rc = -EBADMSG;
	}
	free(hdr);
	return rc ? rc : kv_verify_range(kv, at, arg, 0, UINT64_MAX, err, errlen);
}

int kv_verify_range(const struct kv_info *kv, kv_at_fn at, void *arg, uint64_t from,
		    uint64_t to, char *err, size_t errlen)
{
	if (kv->format != KV_FMT_NATIVE)
		return 0;
	for (uint32_t i = 0; i < kv->ntensors; i++)
		for (uint32_t hd = 0; hd < kv->head_count; hd++) {
			uint64_t off, len, stride, count, sum = 0;
			uint64_t want = kv->sums[(uint64_t)i * kv->head_count + hd];
			if (kv->t[i].len) {     /* a missing tensor's sums must be 0 */
				head_span(kv, i, hd, &off, &len, &stride, &count);
				if (off < from || off + (count - 1) * stride + len > to)
					continue;
				if (hash_pieces(at, arg, off, len, stride, count, &sum))
					return -EIO;
			}
			if (sum != want) {
				kv_fail(err, errlen, "layer %u %s head %u fails its checksum",
					kv->kind == KV_SPLIT ? i / 2 : i,
					kv->kind == KV_LATENT ? "latent" : i % 2 ? "V" : "K",
					kv->head_first + hd);
				return -EBADMSG;
			}
		}
	return 0;
}

/* ---------------------------------------------------------------- summary */

int kv_summary(const struct kv_info *kv, char *buf, size_t size)
{
	uint32_t missing = 0;

	for (uint32_t i = 0; i < kv->ntensors; i++)
		missing += !kv->t[i].len;
	int n = snprintf(buf, size,
		"{\"format\":\"%s\",\"version\":%d,\"dtype\":\"%s\",\"layout\":\"%s\","
		"\"kind\":\"%s\",\"layers\":%u,\"tokens\":%u,\"heads_total\":%u,"
		"\"head_first\":%u,\"head_count\":%u,\"head_dim\":%u,\"tensors\":%u,"
		"\"missing_tensors\":%u,\"header_bytes\":%llu,\"data_bytes\":%llu,"
		"\"meta_bytes\":%llu,\"checksums\":%s}",
		kv->format == KV_FMT_NATIVE ? "native" : "vllm-omni", KV_VERSION,
		kv_dtype_name(kv->dtype), kv->layout == KV_HND ? "HND" : "NHD",
		kv->kind == KV_SPLIT ? "kv" : "latent", kv->layers, kv->tokens,
		kv->heads_total, kv->head_first, kv->head_count, kv->head_dim,
		kv->ntensors, missing, (unsigned long long)kv->hdr_len,
		(unsigned long long)kv->data_bytes, (unsigned long long)kv->meta_len,
		kv->format == KV_FMT_NATIVE ? "\"xxh3-64 per layer, K|V, head\"" : "null");
	return n < 0 || (size_t)n >= size ? -ERANGE : n;
}

/* ---------------------------------------------------------------- building */

uint64_t kv_tensor_bytes(const struct kv_spec *s)
{
	return (uint64_t)s->head_count * s->tokens * s->head_dim * kv_dtype_size(s->dtype);
}

/* A spec checked as a parse would check its header. */
static int kv_spec_check(const struct kv_spec *s, struct kv_info *kv)
{
	memset(kv, 0, sizeof(*kv));
	kv->dtype = s->dtype;
	kv->layout = s->layout;
	kv->kind = s->kind;
	kv->layers = s->layers;
	kv->tokens = s->tokens;
	kv->heads_total = s->heads_total;
	kv->head_first = s->head_first;
	kv->head_count = s->head_count;
	kv->head_dim = s->head_dim;
	return kv_shape_check(kv, NULL, 0);
}

static const void *buf_at(void *arg, uint64_t off, uint64_t *len)
{
	const uint64_t *b = arg;        /* { base pointer, length } */

	if (off >= b[1])
		return NULL;
	*len = b[1] - off;
	return (const uint8_t *)(uintptr_t)b[0] + off;
}

/* Writes the fixed header, tables and metadata of kv (tensor offsets and
 * sums filled in) into hdr[0, kv->hdr_len), hash last. */
void kv_native_header(const struct kv_info *kv, const void *meta, uint8_t *hdr)
{
	uint64_t tab_end = KV_HDR_FIXED + 16 * (uint64_t)kv->ntensors;

	memset(hdr, 0, kv->hdr_len);
	memcpy(hdr, kv_magic, 8);
	put(hdr + 8, KV_VERSION, 2);
	put(hdr + 10, KV_HDR_FIXED, 2);
	hdr[12] = (uint8_t)kv->dtype;
	hdr[13] = (uint8_t)kv->layout;
	hdr[14] = (uint8_t)kv->kind;
	put(hdr + 16, kv->layers, 4);
	put(hdr + 20, kv->tokens, 4);
	put(hdr + 24, kv->heads_total, 4);
	put(hdr + 28, kv->head_first, 4);
	put(hdr + 32, kv->head_count, 4);
	put(hdr + 36, kv->head_dim, 4);
	put(hdr + 40, kv->ntensors, 4);
	put(hdr + 48, kv->meta_len, 8);
	put(hdr + 56, kv->hdr_len, 8);
	put(hdr + 64, kv->total, 8);
	for (uint32_t i = 0; i < kv->ntensors; i++) {
		put(hdr + KV_HDR_FIXED + 16 * (uint64_t)i, kv->t[i].off, 8);
		put(hdr + KV_HDR_FIXED + 16 * (uint64_t)i + 8, kv->t[i].len, 8);
	}
	for (uint64_t i = 0; i < (uint64_t)kv->ntensors * kv->head_count; i++)
		put(hdr + tab_end + 8 * i, kv->sums[i], 8);
	if (kv->meta_len)
		memcpy(hdr + kv->meta_off, meta, kv->meta_len);
	put(hdr + 72, kv_header_hash(hdr, kv->hdr_len), 8);
}

/* Lays out a native payload of kv's shape: header length, tensor offsets
 * (present[i] says which exist), total. */
int kv_native_layout(struct kv_info *kv, const uint8_t *present)
{
	uint64_t tb = tensor_bytes(kv), off;

	kv->format = KV_FMT_NATIVE;
	kv->meta_off = KV_HDR_FIXED + 16 * (uint64_t)kv->ntensors +
		       8 * (uint64_t)kv->ntensors * kv->head_count;
	kv->hdr_len = (kv->meta_off + kv->meta_len + KV_ALIGN - 1) / KV_ALIGN * KV_ALIGN;
	if (kv->meta_len > KV_HDR_MAX || kv->hdr_len > KV_HDR_MAX)
		return -EINVAL;
	if (!(kv->t = calloc(kv->ntensors, sizeof(*kv->t))) ||
	    !(kv->sums = calloc((uint64_t)kv->ntensors * kv->head_count, 8)))
		return -ENOMEM;
	off = kv->hdr_len;
	kv->data_bytes = 0;
	for (uint32_t i = 0; i < kv->ntensors; i++) {
		if (!present[i])
			continue;
		kv->t[i] = (struct kv_tensor){ off, tb };
		off = (off + tb + KV_ALIGN - 1) / KV_ALIGN * KV_ALIGN;
		kv->data_bytes += tb;
	}
	kv->total = off;
	return 0;
}

/* The sums of every (tensor, head) of a payload whose bytes are in buf. */
static int native_sums(struct kv_info *kv, const uint8_t *buf)
{
	uint64_t arg[2] = { (uintptr_t)buf, kv->total };

	for (uint32_t i = 0; i < kv->ntensors; i++)
		for (uint32_t h = 0; kv->t[i].len && h < kv->head_count; h++) {
			uint64_t off, len, stride, count;
			head_span(kv, i, h, &off, &len, &stride, &count);
			if (hash_pieces(buf_at, arg, off, len, stride, count,
					&kv->sums[(uint64_t)i * kv->head_count + h]))
				return -EIO;
		}
	return 0;
}

int kv_build_native(const struct kv_spec *s, const void *const *tensors,
		    uint8_t **out, uint64_t *len)
{
	struct kv_info kv;
	uint8_t *present = NULL, *buf = NULL;
	int rc;

	if ((rc = kv_spec_check(s, &kv)))
		return rc;
	kv.meta_len = s->meta_len;
	if (!(present = malloc(kv.ntensors)))
		return -ENOMEM;
	rc = -EINVAL;           /* a payload of no tensors says nothing */
	for (uint32_t i = 0; i < kv.ntensors; i++)
		if ((present[i] = tensors[i] != NULL))
			rc = 0;
	if (rc || (rc = kv_native_layout(&kv, present)))
		goto free_kv;
	rc = -ENOMEM;
	if (!(buf = calloc(1, kv.total)))
		goto free_kv;
	for (uint32_t i = 0; i < kv.ntensors; i++)
		if (tensors[i])
			memcpy(buf + kv.t[i].off, tensors[i], kv.t[i].len);
	if ((rc = native_sums(&kv, buf)))
		goto free_buf;
	kv_native_header(&kv, s->meta, buf);
	*out = buf;
	*len = kv.total;
	buf = NULL;
free_buf:
	free(buf);
free_kv:
	kv_free(&kv);
	free(present);
	return rc;
}

void kv_spec_of(const struct kv_info *kv, const void *hdr, struct kv_spec *s)
{
	*s = (struct kv_spec){ kv->dtype, kv->layout, kv->kind, kv->layers, kv->tokens,
			       kv->heads_total, kv->head_first, kv->head_count, kv->head_dim,
			       kv->format == KV_FMT_NATIVE ? (const uint8_t *)hdr + kv->meta_off : NULL,
			       kv->format == KV_FMT_NATIVE ? kv->meta_len : 0 };
}

static void copy_run(void *ctx, const void *b, uint64_t n)
{
	uint8_t **d = ctx;

	memcpy(*d, b, n);
	*d += n;
}

/* Copies [off, off+len) of a payload out through at. */
int kv_read(kv_at_fn at, void *arg, uint64_t off, uint64_t len, void *dst)
{
	uint8_t *d = dst;

	return walk(at, arg, off, len, copy_run, &d);
}

/* Where token t of head h of a tensor lies in a layout, from its start. */
static uint64_t row_at(const struct kv_info *kv, enum kv_layout l, uint32_t h, uint32_t t)
{
	uint64_t row = (uint64_t)kv->head_dim * kv->esize;

	return (l == KV_HND || kv->kind == KV_LATENT ? (uint64_t)h * kv->tokens + t
						     : (uint64_t)t * kv->head_count + h) * row;
}

int kv_tensor_copy(const struct kv_info *kv, kv_at_fn at, void *arg, uint32_t i,
		   enum kv_layout want, void *dst)
{
	uint64_t row = (uint64_t)kv->head_dim * kv->esize;

	if (i >= kv->ntensors || !kv->t[i].len)
		return -ENOENT;
	if (want == kv->layout || kv->kind == KV_LATENT)
		return kv_read(at, arg, kv->t[i].off, kv->t[i].len, dst);
	for (uint32_t h = 0; h < kv->head_count; h++)
		for (uint32_t t = 0; t < kv->tokens; t++)
			if (kv_read(at, arg, kv->t[i].off + row_at(kv, kv->layout, h, t), row,
				    (uint8_t *)dst + row_at(kv, want, h, t)))
				return -EIO;
	return 0;
}

/* ---------------------------------------------------------------- names */

static int parse_u32(const char *s, size_t n, uint32_t *v)
{
	uint64_t x = 0;

	if (!n || n > 9 || (s[0] == '0' && n > 1))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(s[i] - '0');
	}
	*v = (uint32_t)x;
	return 0;
}

int kv_name_split(const char *name, size_t *baselen, uint32_t *r, uint32_t *T)
{
	const char *dot = strrchr(name, '.'), *of;

	*baselen = strlen(name);
	*r = 0;
	*T = 1;
	if (!dot || dot == name || strncmp(dot, ".rank", 5) || !(of = strstr(dot + 5, "of")))
		return 0;
	if (parse_u32(dot + 5, (size_t)(of - dot - 5), r) ||
	    parse_u32(of + 2, strlen(of + 2), T) || !*T) {
		*r = 0;
		*T = 1;
		return 0;
	}
	*baselen = (size_t)(dot - name);
	return 1;
}

int kv_view_shards(uint32_t S, uint32_t r, uint32_t T, uint32_t *first, uint32_t *n)
{
	if (!S || !T || r >= T || S > KV_MAX_RANKS || T > KV_MAX_RANKS)
		return -EINVAL;
	if (T <= S) {
		if (S % T)
			return -EINVAL;
		*n = S / T;
		*first = r * *n;
	} else {
		if (T % S)
			return -EINVAL;
		*n = 1;
		*first = r / (T / S);
	}
	return 0;
}
