/* kvfmt.h - the KV payload format (SPEC §6) and rank-shard views (§5).
 *
 * Pure C, no I/O.  Two encodings are understood: omnifs' native one (byte
 * by byte in kvfmt/FORMAT.md) and vllm-omni's KVCacheTransferData bytes.
 * Both parse from untrusted bytes: every offset, size and count is checked
 * with overflow-safe arithmetic, and a header that lies is an error.
 *
 * A payload's header (native: through the padding before the tensor data;
 * vllm: the length word and the JSON) is at most KV_HDR_MAX bytes, so it
 * can travel in an announce and views need no round trip to plan.
 */
#ifndef OMNI_KVFMT_H
#define OMNI_KVFMT_H

#include <stddef.h>
#include <stdint.h>

#define KV_HDR_FIXED 96                 /* the native fixed header */
#define KV_HDR_MAX   (512u << 10)
#define KV_ALIGN     64                 /* native tensors start on this */
#define KV_VERSION   1
#define KV_MAX_LAYERS 4096
#define KV_MAX_HEADS  65536
#define KV_MAX_DIM    65536
#define KV_MAX_TOKENS (1u << 24)
#define KV_MAX_RANKS  65536           /* a view's T, and its sources' S */

enum kv_format { KV_FMT_NONE, KV_FMT_NATIVE, KV_FMT_VLLM };
/* 1-7 are SPEC §6's; 8-16 the rest of what vllm-omni's from_bytes reads
 * (AMD's fp8 KV cache is float8_e4m3fnuz).  A view only needs the size. */
enum kv_dtype { KV_F16 = 1, KV_BF16, KV_F32, KV_FP8_E4M3, KV_FP8_E5M2, KV_I8, KV_U8,
		KV_FP8_E4M3FNUZ, KV_FP8_E5M2FNUZ, KV_BOOL, KV_I16, KV_I32, KV_I64, KV_F64,
		KV_C64, KV_C128, KV_DTYPE_MAX = KV_C128 };
enum kv_layout { KV_HND = 1, KV_NHD = 2 };
enum kv_kind { KV_SPLIT = 1, KV_LATENT = 2 };  /* K and V per layer; one MLA latent */

struct kv_tensor { uint64_t off, len; };       /* len 0: a missing layer */

/* A parsed header.  Tensor i is layer i/2's K (i even) or V (i odd) for
 * KV_SPLIT, layer i for KV_LATENT.  A split tensor is [head_count, tokens,
 * head_dim] (HND) or [tokens, head_count, head_dim] (NHD); a latent one
 * is [tokens, head_dim] with head_count 1. */
struct kv_info {
	enum kv_format format;
	enum kv_dtype dtype;
	enum kv_layout layout;
	enum kv_kind kind;
	uint32_t layers, tokens, heads_total, head_first, head_count, head_dim;
	uint32_t ntensors, esize;
	uint64_t hdr_len, total, data_bytes;
	uint64_t meta_off, meta_len;    /* native: the blob, within the header */
	struct kv_tensor *t;
	uint64_t *sums;                 /* native: ntensors * head_count XXH3-64s */
	void *json;                     /* vllm: the parsed header (json-c) */
};

/* What the first bytes say: KV_FMT_NATIVE (the magic), KV_FMT_VLLM (a
 * big-endian length then '{'), or KV_FMT_NONE.  n may be short. */
enum kv_format kv_sniff(const void *p, size_t n);
/* The header length the payload declares: 0, or -EINVAL (not KV, too
 * short to say, or over KV_HDR_MAX). */
int kv_need(const void *p, size_t n, uint64_t *need);
/* Parses [0, n) of a payload of total bytes: 0, or -EINVAL with a
 * one-line reason in err, or -ENODATA for a vllm payload whose every
 * layer is missing (valid upstream, but with no shape: nothing to view).
 * kv_free() releases what it holds either way. */
int kv_parse(const void *hdr, size_t n, uint64_t total, struct kv_info *kv,
	     char *err, size_t errlen);
void kv_free(struct kv_info *kv);

/* Random access to a payload's bytes: a pointer to off and how many bytes
 * follow it contiguously (an object lives in several extents). */
typedef const void *(*kv_at_fn)(void *arg, uint64_t off, uint64_t *len);
/* Copies [off, off+len) out through at: 0 or -EIO. */
int kv_read(kv_at_fn at, void *arg, uint64_t off, uint64_t len, void *dst);
/* Checks the header hash and every (tensor, head) checksum: 0, or
 * -EBADMSG with the first bad chunk in err.  vllm payloads carry no
 * checksums: 0. */
int kv_verify(const struct kv_info *kv, kv_at_fn at, void *arg, char *err, size_t errlen);
/* The same for the (tensor, head) chunks that lie wholly in [from, to)
 * (no header hash): a payload checked piece by piece as it arrives. */
int kv_verify_range(const struct kv_info *kv, kv_at_fn at, void *arg, uint64_t from,
		    uint64_t to, char *err, size_t errlen);
/* The one-line JSON summary of user.omni.kv; its length, or -ERANGE. */
int kv_summary(const struct kv_info *kv, char *buf, size_t size);

const char *kv_dtype_name(enum kv_dtype d);
int kv_dtype_size(enum kv_dtype d);
int kv_dtype_parse(const char *s);              /* "f16", "float16", "torch.float16"... */
const char *kv_dtype_torch(enum kv_dtype d);    /* "float16" */

/* ---- building ---- */

struct kv_spec {
	enum kv_dtype dtype;
	enum kv_layout layout;
	enum kv_kind kind;
	uint32_t layers, tokens, heads_total, head_first, head_count, head_dim;
	const void *meta;               /* native: the opaque blob */
	uint64_t meta_len;
};
/* Bytes of one tensor of the spec. */
uint64_t kv_tensor_bytes(const struct kv_spec *s);
/* A native payload from tensors[ntensors] in s->layout (NULL: missing),
 * malloc'd into *out.  0 or -EINVAL/-ENOMEM. */
int kv_build_native(const struct kv_spec *s, const void *const *tensors,
		    uint8_t **out, uint64_t *len);
/* A vllm-omni payload (NHD tensors; s->layout must say so).  rid, bids and
 * meta (a JSON object's text, or NULL for {}) go into its header. */
int kv_build_vllm(const struct kv_spec *s, const char *rid, const int64_t *bids,
		  size_t nbids, const char *meta_json, const void *const *tensors,
		  uint8_t **out, uint64_t *len);
/* Copies tensor i of a parsed payload into dst in the layout asked for
 * (transposing HND <-> NHD).  0, or -ENOENT for a missing one. */
int kv_tensor_copy(const struct kv_info *kv, kv_at_fn at, void *arg, uint32_t i,
		   enum kv_layout want, void *dst);
/* The spec a parsed payload was built from (meta points into hdr). */
void kv_spec_of(const struct kv_info *kv, const void *hdr, struct kv_spec *s);
/* Re-encodes a parsed payload in the other format, losing nothing: a
 * vllm header's keys (rid, bids, meta, names) become the native metadata
 * blob, as JSON, and come back from it.  Native payloads keep their
 * layout; vllm ones are NHD.  0, or -EINVAL/-ENOMEM/-EIO. */
int kv_convert(const struct kv_info *kv, const void *hdr, kv_at_fn at, void *arg,
	       enum kv_format to, uint8_t **out, uint64_t *len);
/* The native metadata blob for vllm-omni's keys rid and bids (and an
 * empty meta), as kv_convert writes it from a vllm header that has them,
 * so that the payload converts to that header: malloc'd JSON text, or
 * NULL. */
char *kv_native_keys(const char *rid, const int64_t *bids, size_t nbids);

/* ---- views (SPEC §5) ---- */

/* "<base>.rank<r>of<T>": 1 with *baselen, *r and *T; 0 for any other
 * name (then the name is its own base, rank 0 of 1). */
int kv_name_split(const char *name, size_t *baselen, uint32_t *r, uint32_t *T);
/* Which shards of S rank r of T reads: [*first, *first + *n).  -EINVAL
 * for r >= T or sizes that don't divide. */
int kv_view_shards(uint32_t S, uint32_t r, uint32_t T, uint32_t *first, uint32_t *n);

/* A byte range of a source, placed in the view: count pieces of len bytes
 * at soff + k*sstride, landing at doff + k*dstride. */
struct kv_seg {
	uint32_t src, count;
	uint64_t soff, sstride, doff, dstride, len;
};
/* Which heads of a source a view delivers: units [first, first + n) of
 * `of` (heads, or for a replicated latent shard, shares of it). */
struct kv_cover { uint32_t first, n, of; };
struct kv_plan {
	uint8_t *hdr;                   /* the view's header bytes */
	struct kv_info kv;              /* the same, parsed (a merge or slice: no json) */
	uint64_t hdr_len, size, data_bytes;
	struct kv_seg *seg;
	size_t nseg;
	struct kv_cover *cover;         /* per source */
	uint32_t nsrc;
};
/* Plans rank r of T over shards [first, first+nsrc) of S, src[] parsed
 * from their headers (hdr[] their bytes).  0, or -EINVAL with err. */
int kv_plan_view(const struct kv_info *src, const void *const *hdr, uint32_t nsrc,
		 uint32_t S, uint32_t r, uint32_t T, struct kv_plan *p,
		 char *err, size_t errlen);
void kv_plan_free(struct kv_plan *p);

#endif
