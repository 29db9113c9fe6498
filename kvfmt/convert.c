/* convert.c - native <-> vllm-omni, without loss.
 *
 * A vllm header's own keys (rid, bids, meta, anything else) travel in the
 * native metadata blob as a JSON object, with "tn" listing the tensor
 * names when they are not the defaults and "ti":false when its td entries
 * had no "i" (vllm-omni's older writer); converting back restores them in
 * their order, spelled as Python spells them (pyjson.c), so vllm -> native
 * -> vllm gives the same bytes.  The other way, a native payload's layout
 * rides in the vllm header's "omni" (vllm-omni ignores it) and an empty
 * blob stands for vllm's empty rid, bids and meta, so native -> vllm ->
 * native gives the same bytes too.  (A blob that is not a JSON object has
 * no place in vllm's header and does not survive the trip.)
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The names of a vllm header's td, or NULL when all are the defaults. */
static json_object *td_names(json_object *root, uint32_t layers)
{
	json_object *td, *names = json_object_new_array(), *n;
	int custom = 0;

	if (!json_object_object_get_ex(root, "td", &td))
		return names;
	for (size_t j = 0; j < json_object_array_length(td); j++) {
		char dflt[32];
		kv_vllm_name(dflt, sizeof(dflt), (uint32_t)j, layers);
		json_object_object_get_ex(json_object_array_get_idx(td, j), "n", &n);
		custom |= strcmp(json_object_get_string(n), dflt) != 0;
		json_object_array_add(names, json_object_get(n));
	}
	if (!custom) {
		json_object_put(names);
		return NULL;
	}
	return names;
}

/* vllm's keys for a native blob that had none, as JSON and as a tree. */
#define EMPTY_KEYS "{\"rid\":\"\",\"bids\":[],\"meta\":{}}"

static void empty_keys(json_object *root)
{
	json_object_object_add(root, "rid", json_object_new_string(""));
	json_object_object_add(root, "bids", json_object_new_array());
	json_object_object_add(root, "meta", json_object_new_object());
}

char *kv_native_keys(const char *rid, const int64_t *bids, size_t nbids)
{
	json_object *m = json_object_new_object(), *b = json_object_new_array();
	char *blob = NULL;

	if (!m || !b)
		goto free_json;
	for (size_t i = 0; i < nbids; i++)
		if (json_object_array_add(b, json_object_new_int64(bids[i])))
			goto free_json;
	json_object_object_add(m, "rid", json_object_new_string(rid));
	json_object_object_add(m, "bids", b);
	b = NULL;                       /* m's now */
	json_object_object_add(m, "meta", json_object_new_object());
	blob = kv_pyjson(m);
free_json:
	json_object_put(b);
	json_object_put(m);
	return blob;
}

/* A native blob for a vllm header's own keys: "" when they are the empty ones. */
static char *native_blob(json_object *root, uint32_t layers)
{
	json_object *m = json_object_new_object(), *names;
	char *blob;

	json_object_object_foreach(root, key, val)
		if (strcmp(key, "td") && strcmp(key, "nl") && strcmp(key, "omni"))
			json_object_object_add(m, key, json_object_get(val));
	if ((names = td_names(root, layers)))
		json_object_object_add(m, "tn", names);
	if (kv_vllm_no_layers(root))
		json_object_object_add(m, "ti", json_object_new_boolean(0));
	blob = kv_pyjson(m);
	if (blob && !strcmp(blob, EMPTY_KEYS))
		blob[0] = 0;
	json_object_put(m);
	return blob;
}

static int to_native(const struct kv_info *kv, const void *hdr, const void *const *t,
		     enum kv_layout lay, uint8_t **out, uint64_t *len)
{
	struct kv_spec s;
	char *blob = NULL;
	int rc;

	kv_spec_of(kv, hdr, &s);
	s.layout = lay;
	if (kv->format == KV_FMT_VLLM) {
		if (!(blob = native_blob(kv->json, kv->layers)))
			return -ENOMEM;
		s.meta = blob;
		s.meta_len = strlen(blob);
	}
	rc = kv_build_native(&s, t, out, len);
	free(blob);
	return rc;
}

static int to_vllm(const struct kv_info *kv, const void *hdr, const void *const *t,
		   uint8_t **out, uint64_t *len)
{
	json_object *m = NULL, *root, *names = NULL;
	uint8_t *present = malloc(kv->ntensors);
	int rc = -ENOMEM, flags = 0;

	if (kv->kind != KV_SPLIT) {
		free(present);
		return -EINVAL;         /* vllm-omni has no latent payloads */
	}
	if (kv->meta_len) {
		char *txt = strndup((const char *)hdr + kv->meta_off, kv->meta_len);
		m = txt ? json_tokener_parse(txt) : NULL;
		free(txt);
	}
	root = json_object_new_object();
	if (m && json_object_is_type(m, json_type_object)) {
		json_object_object_foreach(m, key, val) {
			if (!strcmp(key, "tn"))
				names = val;
			else if (!strcmp(key, "ti"))
				flags |= KVH_NO_I;
			else
				json_object_object_add(root, key, json_object_get(val));
		}
	} else {
		empty_keys(root);
	}
	struct kv_info v = *kv;
	v.layout = KV_NHD;
	for (uint32_t i = 0; present && i < kv->ntensors; i++)
		present[i] = t[i] != NULL;
	flags |= (kv->head_first || kv->heads_total != kv->head_count ? KVH_HEADS : 0) |
		 (kv->layout == KV_HND ? KVH_HND : 0);
	char *js = present ? kv_vllm_header(root, &v, present, names, flags) : NULL;
	json_object_put(root);
	json_object_put(m);
	if (js) {
		uint64_t jl = strlen(js), total = 4 + jl + kv->data_bytes;
		uint64_t tb = (uint64_t)kv->head_count * kv->tokens * kv->head_dim * kv->esize;
		uint8_t *b = malloc(total), *d = b ? b + 4 + jl : NULL;
		if (b) {
			b[0] = (uint8_t)(jl >> 24); b[1] = (uint8_t)(jl >> 16);
			b[2] = (uint8_t)(jl >> 8); b[3] = (uint8_t)jl;
			memcpy(b + 4, js, jl);
			for (uint32_t j = 0; j < kv->ntensors; j++) {
				uint32_t i = j < kv->layers ? 2 * j : 2 * (j - kv->layers) + 1;
				if (t[i]) {
					memcpy(d, t[i], tb);
					d += tb;
				}
			}
			*out = b;
			*len = total;
			rc = 0;
		}
		free(js);
	}
	free(present);
	return rc;
}

int kv_convert(const struct kv_info *kv, const void *hdr, kv_at_fn at, void *arg,
	       enum kv_format to, uint8_t **out, uint64_t *len)
{
	enum kv_layout lay = to == KV_FMT_VLLM ? KV_NHD : kv->layout;
	json_object *om, *l;

	if (to == KV_FMT_NATIVE && kv->format == KV_FMT_VLLM &&     /* it was native HND */
	    json_object_object_get_ex(kv->json, "omni", &om) &&
	    json_object_object_get_ex(om, "layout", &l) &&
	    !strcmp(json_object_get_string(l), "HND"))
		lay = KV_HND;
	uint64_t tb = (uint64_t)kv->head_count * kv->tokens * kv->head_dim * kv->esize;
	void **t = calloc(kv->ntensors, sizeof(*t));
	int rc = t ? 0 : -ENOMEM;

	for (uint32_t i = 0; !rc && i < kv->ntensors; i++) {
		if (!kv->t[i].len)
			continue;
		if (!(t[i] = malloc(tb)))
			rc = -ENOMEM;
		else
			rc = kv_tensor_copy(kv, at, arg, i, lay, t[i]);
	}
	if (!rc)
		rc = to == KV_FMT_VLLM ? to_vllm(kv, hdr, (const void *const *)t, out, len)
				       : to_native(kv, hdr, (const void *const *)t, lay, out, len);
	for (uint32_t i = 0; t && i < kv->ntensors; i++)
		free(t[i]);
	free(t);
	return rc;
}
