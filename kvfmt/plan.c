/* plan.c - rank-shard views (SPEC §5) as byte ranges of their sources.
 *
 * A view is a header synthesized here plus pieces of its sources' tensors:
 * merge (T < S) concatenates whole shards along the heads, slice (T > S)
 * takes one shard's head range.  Native views are HND, so each (tensor,
 * source) is one range when the source is HND too; a vllm view stays NHD
 * like its sources, so a slice takes a piece of every token's row.  A
 * latent (MLA) payload is replicated: its view is a copy of one shard.
 * The (tensor, head) checksums of a native view are its sources', since a
 * head's bytes hash the same in either layout.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

struct planner {
	struct kv_plan *p;
	size_t cap;
};

/* Appends a segment, merging it into the last where both ends continue. */
static int seg_add(struct planner *pl, struct kv_seg s)
{
	struct kv_plan *p = pl->p;

	if (s.count > 1 && s.sstride == s.len && s.dstride == s.len) {
		s.len *= s.count;
		s.count = 1;
	}
	if (s.count == 1)
		s.sstride = s.dstride = s.len;
	if (p->nseg) {
		struct kv_seg *l = &p->seg[p->nseg - 1];
		if (l->count == 1 && s.count == 1 && l->src == s.src &&
		    l->soff + l->len == s.soff && l->doff + l->len == s.doff) {
			l->len += s.len;
			l->sstride = l->dstride = l->len;
			return 0;
		}
	}
	if (p->nseg == pl->cap) {
		size_t cap = pl->cap ? 2 * pl->cap : 64;
		struct kv_seg *n = realloc(p->seg, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		p->seg = n;
		pl->cap = cap;
	}
	p->seg[p->nseg++] = s;
	return 0;
}

/* A vllm-omni payload's request id ("rid"), or NULL. */
static const char *vllm_rid(const struct kv_info *kv)
{
	json_object *x;

	if (kv->format != KV_FMT_VLLM || !kv->json ||
	    !json_object_object_get_ex(kv->json, "rid", &x) || !json_object_is_type(x, json_type_string))
		return NULL;
	return json_object_get_string(x);
}

/* A request id for an error message: its first RID_SAY bytes, those
 * below ' ' as '?' (the payload says it: a newline must not end the line
 * the message is logged on); "?" for none. */
#define RID_SAY 40
static const char *rid_say(const char *rid, char out[static RID_SAY + 1])
{
	size_t n = 0;

	for (; rid && rid[n] && n < RID_SAY; n++)
		out[n] = (unsigned char)rid[n] < ' ' || rid[n] == 0x7f ? '?' : rid[n];
	out[n] = 0;
	return rid ? out : "?";
}

/* The sources agree on everything but their heads, which follow on; and
 * vllm-omni's, on the request they belong to. */
static int sources_check(const struct kv_info *src, uint32_t nsrc, uint32_t S,
			 uint32_t first, char *err, size_t errlen)
{
	const struct kv_info *a = &src[0];

	for (uint32_t k = 0; k < nsrc; k++) {
		const struct kv_info *b = &src[k];
		if (b->format != a->format || b->dtype != a->dtype || b->layout != a->layout ||
		    b->kind != a->kind || b->layers != a->layers || b->tokens != a->tokens ||
		    b->head_dim != a->head_dim || b->head_count != a->head_count)
			return kv_fail(err, errlen, "shard %u's shape differs from shard %u's",
				       first + k, first);
		for (uint32_t i = 0; i < a->ntensors; i++)
			if (!a->t[i].len != !b->t[i].len)
				return kv_fail(err, errlen, "shards %u and %u miss different layers",
					       first, first + k);
		const char *ra = vllm_rid(a), *rb = vllm_rid(b);
		char pa[RID_SAY + 1], pb[RID_SAY + 1];
		if ((ra || rb) && (!ra || !rb || strcmp(ra, rb)))
			return kv_fail(err, errlen, "shard %u is of request '%s', shard %u of '%s'",
				       first, rid_say(ra, pa), first + k, rid_say(rb, pb));
		if (a->kind == KV_LATENT)
			continue;
		/* vllm shards don't say which heads they hold: their names do. */
		uint32_t hf = b->format == KV_FMT_VLLM && !b->head_first && b->heads_total == b->head_count
			      ? (first + k) * b->head_count : b->head_first;
		uint32_t ht = b->format == KV_FMT_VLLM && b->heads_total == b->head_count
			      ? b->head_count * S : b->heads_total;
		if (ht != b->head_count * S || hf != (first + k) * b->head_count)
			return kv_fail(err, errlen, "shard %u holds heads %u+%u of %u, not its share of %u",
				       first + k, b->head_first, b->head_count, b->heads_total, S);
	}
	return 0;
}

/* A view that is one source as it is: a latent one (replicated), or
 * T == S under another name (<key> for <key>.rank0of1). */
static int plan_copy(const struct kv_info *src, const void *const *hdr, uint32_t nsrc,
		       uint32_t S, uint32_t r, uint32_t T, struct planner *pl)
{
	struct kv_plan *p = pl->p;
	int rc;

	if (!(p->hdr = malloc(src->hdr_len)))
		return -ENOMEM;
	memcpy(p->hdr, hdr[0], src->hdr_len);
	p->hdr_len = src->hdr_len;
	p->size = src->total;
	if ((rc = kv_parse(p->hdr, p->hdr_len, p->size, &p->kv, NULL, 0)))
		return rc;
	for (uint32_t i = 0; i < src->ntensors; i++)
		if (src->t[i].len && (rc = seg_add(pl, (struct kv_seg){ 0, 1, src->t[i].off,
				src->t[i].len, src->t[i].off, src->t[i].len, src->t[i].len })))
			return rc;
	for (uint32_t k = 0; k < nsrc; k++)     /* the replicas it stands for */
		p->cover[k] = T <= S ? (struct kv_cover){ 0, 1, 1 }
				     : (struct kv_cover){ r % (T / S), 1, T / S };
	if (src->kind == KV_SPLIT)
		p->cover[0] = (struct kv_cover){ 0, src->head_count, src->head_count };
	p->data_bytes = src->data_bytes;
	return 0;
}

/* The view's shape: heads [lf, lf + nh) of each source, concatenated. */
static int view_shape(const struct kv_info *src, uint32_t nsrc, uint32_t S, uint32_t first,
		      uint32_t r, uint32_t T, struct kv_info *v, uint32_t *lf, uint32_t *nh,
		      char *err, size_t errlen)
{
	uint32_t hc = src->head_count;

	*v = *src;
	v->t = NULL;
	v->sums = NULL;
	v->json = NULL;
	v->data_bytes = 0;
	v->meta_len = src->format == KV_FMT_NATIVE ? src->meta_len : 0;
	v->heads_total = hc * S;
	if (T <= S) {
		*lf = 0;
		*nh = hc;
		v->head_count = hc * nsrc;
		v->head_first = first * hc;
	} else {
		uint32_t k = T / S;
		if (hc % k)
			return kv_fail(err, errlen, "%u heads per shard do not split %u ways", hc, k);
		*nh = hc / k;
		*lf = (r % k) * *nh;
		v->head_count = *nh;
		v->head_first = first * hc + *lf;
	}
	return 0;
}

/* Segments of tensor i from source k into the view v. */
static int plan_tensor(const struct kv_info *s, uint32_t k, uint32_t i, uint32_t lf,
		       uint32_t nh, const struct kv_info *v, uint32_t vh0, struct planner *pl)
{
	uint64_t row = (uint64_t)s->head_dim * s->esize, tok = s->tokens;
	uint64_t so = s->t[i].off, d = v->t[i].off;
	int rc = 0;

	if (v->layout == KV_NHD)        /* a vllm view: every token's row */
		return seg_add(pl, (struct kv_seg){ k, (uint32_t)tok, so + lf * row,
			s->head_count * row, d + vh0 * row, v->head_count * row, nh * row });
	if (s->layout == KV_HND)
		return seg_add(pl, (struct kv_seg){ k, 1, so + lf * tok * row, 0,
			d + vh0 * tok * row, 0, nh * tok * row });
	for (uint32_t h = 0; !rc && h < nh; h++)        /* NHD into HND: gather each head */
		rc = seg_add(pl, (struct kv_seg){ k, (uint32_t)tok, so + (lf + h) * row,
			s->head_count * row, d + (vh0 + h) * tok * row, row, row });
	return rc;
}

/* A slice's mark in its meta, as vllm-omni's sender writes it when it
 * slices for a larger receiver TP: without it, a vllm-omni receiver
 * slices the view again.  meta is copied first: it is the source's. */
static int mark_slice(json_object *root, uint32_t S, uint32_t r, uint32_t T)
{
	json_object *meta, *copy = NULL, *m;

	if (!json_object_object_get_ex(root, "meta", &meta) ||
	    !json_object_is_type(meta, json_type_object))
		return 0;       /* vllm-omni's metadata is a dict; leave others be */
	if (json_object_deep_copy(meta, &copy, NULL) || !(m = json_object_new_object())) {
		json_object_put(copy);
		return -ENOMEM;
	}
	json_object_object_add(m, "applied", json_object_new_boolean(1));
	json_object_object_add(m, "side", json_object_new_string("sender"));
	json_object_object_add(m, "target_rank", json_object_new_int((int)r));
	json_object_object_add(m, "source_rank", json_object_new_int((int)(r / (T / S))));
	json_object_object_add(m, "from_tp", json_object_new_int((int)S));
	json_object_object_add(m, "to_tp", json_object_new_int((int)T));
	json_object_object_add(m, "offset_in_shard", json_object_new_int((int)(r % (T / S))));
	json_object_object_add(m, "num_slices", json_object_new_int((int)(T / S)));
	json_object_object_add(copy, "tp_head_slice", m);
	json_object_object_add(root, "meta", copy);
	return 0;
}

/* The view's header: native (tables laid out, sums carried over) or
 * vllm (the first source's JSON with td, nl and the head range redone,
 * and a slice marked as vllm-omni marks one). */
static int view_header(const struct kv_info *src, const void *const *hdr, uint32_t nsrc,
		       struct kv_info *v, const uint8_t *present, uint32_t lf, uint32_t nh,
		       uint32_t S, uint32_t r, uint32_t T, struct kv_plan *p)
{
	int rc;

	if (src->format == KV_FMT_NATIVE) {
		v->layout = KV_HND;
		if ((rc = kv_native_layout(v, present)))
			return rc;
		for (uint32_t i = 0; i < v->ntensors; i++)
			for (uint32_t k = 0; k < nsrc; k++)
				for (uint32_t h = 0; h < nh; h++)
					v->sums[(uint64_t)i * v->head_count + k * nh + h] =
						src[k].sums[(uint64_t)i * src->head_count + lf + h];
		if (!(p->hdr = malloc(v->hdr_len)))
			return -ENOMEM;
		kv_native_header(v, (const uint8_t *)hdr[0] + src->meta_off, p->hdr);
		p->hdr_len = v->hdr_len;
		p->size = v->total;
		return 0;
	}
	json_object *root = json_object_new_object(), *td, *names = json_object_new_array();
	json_object_object_foreach((json_object *)src->json, key, val)
		if (strcmp(key, "td") && strcmp(key, "nl") && strcmp(key, "omni"))
			json_object_object_add(root, key, json_object_get(val));
	if (json_object_object_get_ex(src->json, "td", &td))
		for (size_t j = 0; j < json_object_array_length(td); j++) {
			json_object *n;
			json_object_object_get_ex(json_object_array_get_idx(td, j), "n", &n);
			json_object_array_add(names, json_object_get(n));
		}
	char *js = NULL;
	if (T <= S || !mark_slice(root, S, r, T))
		js = kv_vllm_header(root, v, present, names,
				    (v->head_first || v->heads_total != v->head_count ? KVH_HEADS : 0) |
				    (kv_vllm_no_layers(src->json) ? KVH_NO_I : 0));
	json_object_put(names);
	json_object_put(root);
	if (!js)
		return -ENOMEM;
	uint64_t jl = strlen(js), off = 4 + jl;
	p->hdr_len = off;
	if (!(p->hdr = malloc(off)) || !(v->t = calloc(v->ntensors, sizeof(*v->t)))) {
		free(js);
		return -ENOMEM;
	}
	p->hdr[0] = (uint8_t)(jl >> 24); p->hdr[1] = (uint8_t)(jl >> 16);
	p->hdr[2] = (uint8_t)(jl >> 8); p->hdr[3] = (uint8_t)jl;
	memcpy(p->hdr + 4, js, jl);
	free(js);
	uint64_t tb = (uint64_t)v->head_count * v->tokens * v->head_dim * v->esize;
	for (uint32_t j = 0; j < v->ntensors; j++) {    /* td order: K's, then V's */
		uint32_t i = j < v->layers ? 2 * j : 2 * (j - v->layers) + 1;
		if (present[i]) {
			v->t[i] = (struct kv_tensor){ off, tb };
			off += tb;
			v->data_bytes += tb;
		}
	}
	p->size = off;
	return 0;
}

static int plan_split(const struct kv_info *src, const void *const *hdr, uint32_t nsrc,
		      uint32_t S, uint32_t first, uint32_t r, uint32_t T, struct planner *pl,
		      char *err, size_t errlen)
{
	struct kv_plan *p = pl->p;
	struct kv_info v = { 0 };
	uint8_t *present = malloc(src->ntensors);
	uint32_t lf = 0, nh = 0;
	int rc;

	if (!present)
		return -ENOMEM;
	for (uint32_t i = 0; i < src->ntensors; i++)
		present[i] = src->t[i].len != 0;
	if ((rc = view_shape(src, nsrc, S, first, r, T, &v, &lf, &nh, err, errlen)) ||
	    (rc = view_header(src, hdr, nsrc, &v, present, lf, nh, S, r, T, p)))
		goto free_v;
	for (uint32_t i = 0; i < src->ntensors; i++)
		for (uint32_t k = 0; present[i] && !rc && k < nsrc; k++)
			rc = plan_tensor(&src[k], k, i, lf, nh, &v, k * nh, pl);
	for (uint32_t k = 0; k < nsrc; k++)
		p->cover[k] = (struct kv_cover){ lf, nh, src->head_count };
	p->data_bytes = v.data_bytes;
	v.hdr_len = p->hdr_len;
	v.total = p->size;
	p->kv = v;              /* the view's own: its opener needs no parse */
	memset(&v, 0, sizeof(v));
free_v:
	kv_free(&v);
	free(present);
	return rc;
}

int kv_plan_view(const struct kv_info *src, const void *const *hdr, uint32_t nsrc,
		 uint32_t S, uint32_t r, uint32_t T, struct kv_plan *p,
		 char *err, size_t errlen)
{
	struct planner pl = { p, 0 };
	uint32_t first, n;
	int rc;

	memset(p, 0, sizeof(*p));
	if (kv_view_shards(S, r, T, &first, &n))
		return kv_fail(err, errlen, "rank %u of %u cannot be made from %u shards", r, T, S);
	if (n != nsrc)
		return kv_fail(err, errlen, "rank %u of %u needs %u shards, %u given", r, T, n, nsrc);
	if ((rc = sources_check(src, nsrc, S, first, err, errlen)))
		return rc;
	if (!(p->cover = calloc(nsrc, sizeof(*p->cover))))
		return -ENOMEM;
	p->nsrc = nsrc;
	rc = src->kind == KV_LATENT || T == S ? plan_copy(src, hdr, nsrc, S, r, T, &pl)
					      : plan_split(src, hdr, nsrc, S, first, r, T, &pl, err, errlen);
	if (rc)
		kv_plan_free(p);
	return rc;
}

void kv_plan_free(struct kv_plan *p)
{
	kv_free(&p->kv);
	free(p->hdr);
	free(p->seg);
	free(p->cover);
	memset(p, 0, sizeof(*p));
}
