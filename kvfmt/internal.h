/* internal.h - what kvfmt's files share; not part of its interface. */
#ifndef OMNI_KVFMT_INTERNAL_H
#define OMNI_KVFMT_INTERNAL_H

#include "kvfmt.h"

int kv_fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int kv_shape_check(struct kv_info *kv, char *err, size_t errlen);
int kv_native_layout(struct kv_info *kv, const uint8_t *present);
void kv_native_header(const struct kv_info *kv, const void *meta, uint8_t *hdr);

int kv_vllm_parse(const uint8_t *p, size_t n, uint64_t total, struct kv_info *kv,
		  char *err, size_t errlen);
void kv_vllm_free(void *json);
/* The JSON text of a vllm header: root's keys, then td and nl for kv's
 * shape (names from an array, or the defaults; each entry's "i" unless
 * KVH_NO_I), then "omni" with what vllm-omni's format cannot say: the
 * head range (KVH_HEADS) and, for a payload converted from native HND,
 * its layout (KVH_HND).  root is changed; the text is malloc'd. */
enum { KVH_HEADS = 1, KVH_HND = 2, KVH_NO_I = 4 };
char *kv_vllm_header(void *root, const struct kv_info *kv, const uint8_t *present,
		     void *names, int flags);
/* 1 when no td entry of a parsed vllm header carries "i" (vllm-omni's
 * older to_bytes()), so that what omnifs writes from it carries none. */
int kv_vllm_no_layers(void *root);
/* A json-c tree as Python's json.dumps(o, separators=(",", ":")) writes
 * it (pyjson.c): malloc'd, or NULL. */
char *kv_pyjson(void *json);
/* "key_cache_<layer>" or "value_cache_<layer>": vllm-omni's tensor names
 * for entry j of td. */
void kv_vllm_name(char *buf, size_t size, uint32_t j, uint32_t layers);

#endif
