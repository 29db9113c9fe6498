/* Writes KV payloads into DIR, native (HND, NHD, latent, a missing layer)
 * and vllm-omni: the seeds of the kvfmt fuzz target. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kvfmt/kvfmt.h"

static int put(const char *dir, const char *name, const struct kv_spec *s, int vllm, int miss)
{
	const void *t[8] = { 0 };
	uint8_t *out, data[4096];
	uint64_t len;
	char path[4096];
	int rc;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 1);
	for (uint32_t i = 0; i < (s->kind == KV_LATENT ? s->layers : 2 * s->layers); i++)
		t[i] = (int)i / 2 == miss ? NULL : data;
	rc = vllm ? kv_build_vllm(s, "req-1", (const int64_t[]){ 1, 2 }, 2, "{\"a\":1}", t, &out, &len)
		  : kv_build_native(s, t, &out, &len);
	if (rc)
		return 1;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	rc = !f || fwrite(out, 1, len, f) != len;
	if (f)
		rc |= fclose(f) != 0;
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
	       put(argv[1], "vllm-missing", &vl, 1, 0);
}
