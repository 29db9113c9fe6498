/* vllm.c - vllm-omni's KVCacheTransferData.to_bytes() payloads.
 *
 *   u32 big-endian n | n bytes of compact JSON | raw tensor bytes, no padding
 *
 * The JSON is {"rid","bids","meta","td","nl"}: td lists every key_cache
 * layer, then every value_cache layer, as {"n","i","d","s","o","b"} (name,
 * layer, torch dtype, shape [tokens, heads, head_dim], offset into the
 * data, byte length; no "i" from vllm-omni's older writer) or
 * {"n","x":true} for a missing layer.  Spelled as
 * vllm-omni's to_bytes() spells them: names "key_cache_0", dtypes
 * without "torch." ("float16"), the JSON of json.dumps(separators=(",",
 * ":")) (pyjson.c).  A view that omnifs writes in this format adds
 * "omni":{"head_first","heads_total"} (vllm-omni ignores keys it does
 * not know).
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void kv_vllm_free(void *json) { json_object_put(json); }

static int get_int(json_object *o, const char *k, int64_t lo, int64_t hi, int64_t *v)
{
	json_object *x;

	if (!json_object_object_get_ex(o, k, &x) || !json_object_is_type(x, json_type_int))
		return -1;
	*v = json_object_get_int64(x);
	return *v < lo || *v > hi ? -1 : 0;
}

static int default_name(json_object *e, uint32_t j, uint32_t nl)
{
	json_object *n;
	char dflt[32];

	kv_vllm_name(dflt, sizeof(dflt), j, nl);
	return json_object_object_get_ex(e, "n", &n) && !strcmp(json_object_get_string(n), dflt);
}

/* Entry j of td (1: a missing layer): its shape into kv (the first one sets it, the rest must
 * agree) and its place in the data region. */
static int td_entry(json_object *e, uint32_t j, uint32_t nl, struct kv_info *kv,
		    uint64_t *off, uint64_t *len, char *err, size_t errlen)
{
	json_object *x, *s;
	int64_t v[3], li, o, b;
	uint32_t layer = j % nl;

	if (!json_object_is_type(e, json_type_object) || !json_object_object_get_ex(e, "n", &x) ||
	    !json_object_is_type(x, json_type_string))
		return kv_fail(err, errlen, "td[%u] is not an entry with a name", j);
	if (json_object_object_get_ex(e, "x", &x)) {
		if (!json_object_is_type(x, json_type_boolean) || !json_object_get_boolean(x))
			return kv_fail(err, errlen, "td[%u]: \"x\" must be true", j);
		*off = *len = 0;
		return 1;
	}
	/* vllm-omni's older writer wrote no "i"; its readers still take the
	 * layer from the name then, and so do we. */
	if (json_object_object_get_ex(e, "i", NULL) ?
	    get_int(e, "i", 0, KV_MAX_LAYERS, &li) || (uint32_t)li != layer :
	    !default_name(e, j, nl))
		return kv_fail(err, errlen, "td[%u] is not layer %u", j, layer);
	if (!json_object_object_get_ex(e, "d", &x) || !json_object_is_type(x, json_type_string))
		return kv_fail(err, errlen, "td[%u] has no dtype", j);
	int d = kv_dtype_parse(json_object_get_string(x));
	if (d < 0) {
		char name[33];  /* the writer's bytes, printable, in one log line */
		const char *dn = json_object_get_string(x);
		size_t k = 0;
		for (; dn[k] && k < sizeof(name) - 1; k++)
			name[k] = dn[k] > ' ' && dn[k] < 0x7f ? dn[k] : '?';
		name[k] = 0;
		return kv_fail(err, errlen, "td[%u]: unknown dtype \"%s\"", j, name);
	}
	if (!json_object_object_get_ex(e, "s", &s) || !json_object_is_type(s, json_type_array) ||
	    json_object_array_length(s) != 3)
		return kv_fail(err, errlen, "td[%u]: shape is not [tokens, heads, head_dim]", j);
	for (int k = 0; k < 3; k++) {
		json_object *n = json_object_array_get_idx(s, (size_t)k);
		if (!json_object_is_type(n, json_type_int) || (v[k] = json_object_get_int64(n)) < 1 ||
		    v[k] > (k == 0 ? KV_MAX_TOKENS : KV_MAX_HEADS))
			return kv_fail(err, errlen, "td[%u]: shape out of range", j);
	}
	if (!kv->dtype) {
		kv->dtype = d;
		kv->tokens = (uint32_t)v[0];
		kv->head_count = (uint32_t)v[1];
		kv->head_dim = (uint32_t)v[2];
	} else if (kv->dtype != (enum kv_dtype)d || kv->tokens != v[0] ||
		   kv->head_count != v[1] || kv->head_dim != v[2]) {
		return kv_fail(err, errlen, "td[%u]: shape or dtype differs from the others", j);
	}
	if (get_int(e, "o", 0, INT64_MAX, &o) || get_int(e, "b", 1, INT64_MAX, &b))
		return kv_fail(err, errlen, "td[%u]: bad offset or length", j);
	*off = (uint64_t)o;
	*len = (uint64_t)b;
	return 0;
}

/* The optional head range of an omnifs view. */
static int omni_heads(json_object *root, struct kv_info *kv, char *err, size_t errlen)
{
	json_object *om;
	int64_t f, t;

	kv->head_first = 0;
	kv->heads_total = kv->head_count;
	if (!json_object_object_get_ex(root, "omni", &om) ||
	    (!json_object_object_get_ex(om, "head_first", NULL) &&
	     !json_object_object_get_ex(om, "heads_total", NULL)))
		return 0;       /* all heads (a converted payload may say only its layout) */
	if (get_int(om, "head_first", 0, KV_MAX_HEADS, &f) ||
	    get_int(om, "heads_total", 1, KV_MAX_HEADS, &t))
		return kv_fail(err, errlen, "bad \"omni\" head range");
	kv->head_first = (uint32_t)f;
	kv->heads_total = (uint32_t)t;
	return 0;
}

static int td_parse(json_object *root, struct kv_info *kv, char *err, size_t errlen)
{
	json_object *td;
	int64_t nl;
	uint64_t offs[2] = { 0, 0 }, end = 0;
	int rc;

	if (get_int(root, "nl", 1, KV_MAX_LAYERS, &nl))
		return kv_fail(err, errlen, "\"nl\" missing or out of range");
	if (!json_object_object_get_ex(root, "td", &td) || !json_object_is_type(td, json_type_array) ||
	    json_object_array_length(td) != 2 * (size_t)nl)
		return kv_fail(err, errlen, "\"td\" must list 2 x nl entries");
	kv->layers = (uint32_t)nl;
	kv->ntensors = 2 * kv->layers;
	if (!(kv->t = calloc(kv->ntensors, sizeof(*kv->t))))
		return -ENOMEM;
	/* td is all K then all V; kv->t interleaves them per layer. */
	for (uint32_t j = 0; j < kv->ntensors; j++) {
		uint32_t i = j < kv->layers ? 2 * j : 2 * (j - kv->layers) + 1;
		rc = td_entry(json_object_array_get_idx(td, j), j, kv->layers, kv,
			      &offs[0], &offs[1], err, errlen);
		if (rc < 0)
			return rc;
		if (rc)
			continue;
		if (offs[0] != end)     /* packed in td order, no gaps */
			return kv_fail(err, errlen, "td[%u] at %llu, the data before it ends at %llu",
				       j, (unsigned long long)offs[0], (unsigned long long)end);
		if (offs[1] > kv->total - kv->hdr_len || offs[0] > kv->total - kv->hdr_len - offs[1])
			return kv_fail(err, errlen, "td[%u] lies past the end of the payload", j);
		kv->t[i] = (struct kv_tensor){ kv->hdr_len + offs[0], offs[1] };
		end = offs[0] + offs[1];
	}
	if (!kv->dtype) {       /* valid upstream, but it has no shape to view */
		if (kv->total != kv->hdr_len)
			return kv_fail(err, errlen, "every layer is missing, yet data follows");
		kv_fail(err, errlen, "every layer is missing");
		return -ENODATA;
	}
	if (end != kv->total - kv->hdr_len)
		return kv_fail(err, errlen, "%llu bytes of data, the tensors make %llu",
			       (unsigned long long)(kv->total - kv->hdr_len), (unsigned long long)end);
	if ((rc = omni_heads(root, kv, err, errlen)) || (rc = kv_shape_check(kv, err, errlen)))
		return rc;
	uint64_t want = (uint64_t)kv->head_count * kv->tokens * kv->head_dim * kv->esize;
	kv->data_bytes = end;
	for (uint32_t i = 0; i < kv->ntensors; i++)
		if (kv->t[i].len && kv->t[i].len != want)
			return kv_fail(err, errlen, "tensor %u holds %llu bytes, its shape %llu", i,
				       (unsigned long long)kv->t[i].len, (unsigned long long)want);
	return 0;
}

int kv_vllm_parse(const uint8_t *p, size_t n, uint64_t total, struct kv_info *kv,
		  char *err, size_t errlen)
{
	uint64_t jl = (uint64_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
	struct json_tokener *tok;
	json_object *root;

	kv->format = KV_FMT_VLLM;
	kv->layout = KV_NHD;
	kv->kind = KV_SPLIT;
	kv->hdr_len = 4 + jl;
	kv->total = total;
	if (kv->hdr_len > KV_HDR_MAX || kv->hdr_len > total)
		return kv_fail(err, errlen, "a %llu-byte JSON header does not fit", (unsigned long long)jl);
	if (n < kv->hdr_len)
		return kv_fail(err, errlen, "header cut short");
	if (!(tok = json_tokener_new()))
		return -ENOMEM;
	root = json_tokener_parse_ex(tok, (const char *)p + 4, (int)jl);
	int bad = !root || json_tokener_get_error(tok) != json_tokener_success ||
		  json_tokener_get_parse_end(tok) != jl ||
		  !json_object_is_type(root, json_type_object);
	json_tokener_free(tok);
	if (bad) {
		json_object_put(root);
		return kv_fail(err, errlen, "the header is not one JSON object");
	}
	kv->json = root;
	return td_parse(root, kv, err, errlen);
}

/* ---------------------------------------------------------------- building */

void kv_vllm_name(char *buf, size_t size, uint32_t j, uint32_t layers)
{
	snprintf(buf, size, "%s_cache_%u", j < layers ? "key" : "value", j % layers);
}

int kv_vllm_no_layers(void *root)
{
	json_object *td, *e;
	int present = 0;

	if (!json_object_object_get_ex(root, "td", &td))
		return 0;
	/* all or nothing: an entry without "i" has the default name, one
	 * with it may have any (which only "i" then places) */
	for (size_t j = 0; j < json_object_array_length(td); j++) {
		if (json_object_object_get_ex(e = json_object_array_get_idx(td, j), "x", NULL))
			continue;
		if (json_object_object_get_ex(e, "i", NULL))
			return 0;
		present = 1;
	}
	return present;
}

/* A header from root (whose "td" and "nl" are replaced) for tensors of
 * kv's shape, present[i] saying which exist: the JSON text, malloc'd. */
char *kv_vllm_header(void *root, const struct kv_info *kv, const uint8_t *present,
		     void *names, int flags)
{
	json_object *td = json_object_new_array(), *om;
	uint64_t tb = (uint64_t)kv->head_count * kv->tokens * kv->head_dim * kv->esize, off = 0;

	for (uint32_t j = 0; td && j < kv->ntensors; j++) {
		uint32_t i = j < kv->layers ? 2 * j : 2 * (j - kv->layers) + 1;
		json_object *e = json_object_new_object(), *sh = json_object_new_array();
		char dflt[32];
		kv_vllm_name(dflt, sizeof(dflt), j, kv->layers);
		json_object *nm = names ? json_object_array_get_idx(names, j) : NULL;
		json_object_object_add(e, "n", nm ? json_object_get(nm) : json_object_new_string(dflt));
		if (!present[i]) {
			json_object_object_add(e, "x", json_object_new_boolean(1));
			json_object_put(sh);
		} else {
			if (!(flags & KVH_NO_I))
				json_object_object_add(e, "i", json_object_new_int(j % kv->layers));
			/* str(dtype).removeprefix("torch."), as vllm-omni writes it */
			json_object_object_add(e, "d", json_object_new_string(kv_dtype_torch(kv->dtype)));
			json_object_array_add(sh, json_object_new_int64(kv->tokens));
			json_object_array_add(sh, json_object_new_int64(kv->head_count));
			json_object_array_add(sh, json_object_new_int64(kv->head_dim));
			json_object_object_add(e, "s", sh);
			json_object_object_add(e, "o", json_object_new_int64((int64_t)off));
			json_object_object_add(e, "b", json_object_new_int64((int64_t)tb));
			off += tb;
		}
		json_object_array_add(td, e);
	}
	json_object_object_add(root, "td", td);
	json_object_object_add(root, "nl", json_object_new_int((int)kv->layers));
	if ((flags & (KVH_HEADS | KVH_HND)) && (om = json_object_new_object())) {
		if (flags & KVH_HEADS) {
			json_object_object_add(om, "head_first", json_object_new_int((int)kv->head_first));
			json_object_object_add(om, "heads_total",
					       json_object_new_int((int)kv->heads_total));
		}
		if (flags & KVH_HND)
			json_object_object_add(om, "layout", json_object_new_string("HND"));
		json_object_object_add(root, "omni", om);
	}
	return kv_pyjson(root);
}

int kv_build_vllm(const struct kv_spec *s, const char *rid, const int64_t *bids,
		  size_t nbids, const char *meta_json, const void *const *tensors,
		  uint8_t **out, uint64_t *len)
{
	struct kv_info kv = { 0 };
	json_object *root, *arr, *meta = meta_json ? json_tokener_parse(meta_json) : json_object_new_object();
	uint8_t present[2 * KV_MAX_LAYERS];
	int rc = -EINVAL;

	if (s->kind != KV_SPLIT || s->layout != KV_NHD || !meta ||
	    !json_object_is_type(meta, json_type_object)) {
		json_object_put(meta);
		return -EINVAL;
	}
	root = json_object_new_object();
	arr = json_object_new_array();
	json_object_object_add(root, "rid", json_object_new_string(rid ? rid : ""));
	for (size_t i = 0; i < nbids; i++)
		json_object_array_add(arr, json_object_new_int64(bids[i]));
	json_object_object_add(root, "bids", arr);
	json_object_object_add(root, "meta", meta);
	kv.dtype = s->dtype; kv.layout = KV_NHD; kv.kind = KV_SPLIT;
	kv.layers = s->layers; kv.tokens = s->tokens; kv.head_dim = s->head_dim;
	kv.head_count = s->head_count; kv.heads_total = s->heads_total; kv.head_first = s->head_first;
	if (kv_shape_check(&kv, NULL, 0))
		goto put_root;
	for (uint32_t i = 0; i < kv.ntensors; i++)
		present[i] = tensors[i] != NULL;
	int heads = s->head_first || s->heads_total != s->head_count;
	char *js = kv_vllm_header(root, &kv, present, NULL, heads ? KVH_HEADS : 0);
	uint64_t tb = kv_tensor_bytes(s), jl = js ? strlen(js) : 0, total = 4 + jl;
	rc = -ENOMEM;
	if (!js)
		goto put_root;
	for (uint32_t i = 0; i < kv.ntensors; i++)
		total += present[i] ? tb : 0;
	uint8_t *buf = malloc(total), *d = buf + 4 + jl;
	if (buf) {
		buf[0] = (uint8_t)(jl >> 24); buf[1] = (uint8_t)(jl >> 16);
		buf[2] = (uint8_t)(jl >> 8); buf[3] = (uint8_t)jl;
		memcpy(buf + 4, js, jl);
		for (uint32_t j = 0; j < kv.ntensors; j++) {
			uint32_t i = j < kv.layers ? 2 * j : 2 * (j - kv.layers) + 1;
			if (tensors[i]) {
				memcpy(d, tensors[i], tb);
				d += tb;
			}
		}
		*out = buf;
		*len = total;
		rc = 0;
	}
	free(js);
put_root:
	json_object_put(root);
	return rc;
}
