/* Writes KV payloads into DIR, native (HND, NHD, latent, a missing layer)
 * and vllm-omni (also as its older writer wrote them, without "i"): the
 * seeds of the kvfmt fuzz target. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kvfmt/kvfmt.h"

static int save(const char *dir, const char *name, const uint8_t *p, uint64_t len)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	int rc = !f || fwrite(p, 1, len, f) != len;
	if (f)
		rc |= fclose(f) != 0;
	return rc;
}

/* vllm-omni's older to_bytes(): td entries without "i"; AMD's fp8 */
static int put_older(const char *dir)
{
	static const char js[] = "{\"rid\":\"r\",\"bids\":[1],\"meta\":{},\"td\":["
		"{\"n\":\"key_cache_0\",\"d\":\"float8_e4m3fnuz\",\"s\":[2,2,2],\"o\":0,\"b\":8},"
		"{\"n\":\"value_cache_0\",\"d\":\"float8_e4m3fnuz\",\"s\":[2,2,2],\"o\":8,\"b\":8}],"
		"\"nl\":1}";
	uint8_t p[4 + sizeof(js) - 1 + 16] = { 0, 0, 0, sizeof(js) - 1 };

	memcpy(p + 4, js, sizeof(js) - 1);
	return save(dir, "vllm-older", p, sizeof(p));
}

static int put(const char *dir, const char *name, const struct kv_spec *s, int vllm, int miss)
{
	const void *t[8] = { 0 };
	uint8_t *out, data[4096];
	uint64_t len;
	int rc;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 1);
	for (uint32_t i = 0; i < (s->kind == KV_LATENT ? s->layers : 2 * s->layers); i++)
		t[i] = (int)i / 2 == miss ? NULL : data;
	rc = vllm ? kv_build_vllm(s, "req-1", (const int64_t[]){ 1, 2 }, 2, "{\"a\":1}", t, &out, &len)
		  : kv_build_native(s, t, &out, &len);
	if (rc)
		return 1;
	rc = save(dir, name, out, len);
	free(out);
	return rc;
}

int main(int argc, char **argv)
{
	struct kv_spec hnd = { KV_F16, KV_HND, KV_SPLIT, 2, 4, 4, 0, 2, 8, "meta", 4 };
	struct kv_spec nhd = { KV_BF16, KV_NHD, KV_SPLIT, 3, 5, 2, 0, 2, 4, NULL, 0 };
	struct kv_spec lat = { KV_FP8_E4M3, KV_HND, KV_LATENT, 2, 3, 1, 0, 1, 16, NULL, 0 };
	struct kv_spec vl = { KV_F32, KV_NHD, KV_SPLIT, 2, 3, 2, 0, 2, 4, NULL, 0 };

	if (argc != 2) {
		fprintf(stderr, "usage: kvseeds DIR\n");
		return 2;
	}
	return put(argv[1], "hnd", &hnd, 0, -1) | put(argv[1], "nhd", &nhd, 0, 1) |
	       put(argv[1], "latent", &lat, 0, -1) | put(argv[1], "vllm", &vl, 1, -1) |
	       put(argv[1], "vllm-missing", &vl, 1, 0) | put_older(argv[1]);
}
