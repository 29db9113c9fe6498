/* A libFuzzer target for kvfmt's parsers, native and vllm-omni: whatever
 * the bytes, parsing answers 0 or -EINVAL and never reads past them; a
 * payload that parses verifies without crashing, describes itself, plans
 * views of itself, and converts to the other format into a payload that
 * parses again (run under ASan and UBSan). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kvfmt/kvfmt.h"

struct buf { const uint8_t *p; size_t n; };

static const void *at(void *arg, uint64_t off, uint64_t *len)
{
	struct buf *b = arg;

	if (off >= b->n)
		return NULL;
	*len = b->n - off;
	return b->p + off;
}

static void views(const struct kv_info *kv, const uint8_t *hdr)
{
	static const uint32_t Ts[] = { 1, 2, 4 };
	const void *h[1] = { hdr };

	for (size_t i = 0; i < sizeof(Ts) / sizeof(*Ts); i++) {
		struct kv_plan p;
		if (kv_plan_view(kv, h, 1, 1, Ts[i] - 1, Ts[i], &p, NULL, 0))
			continue;
		if (p.hdr_len > p.size)
			__builtin_trap();
		for (size_t s = 0; s < p.nseg; s++)      /* every piece inside both ends */
			if (p.seg[s].soff + (uint64_t)(p.seg[s].count - 1) * p.seg[s].sstride +
			    p.seg[s].len > kv->total ||
			    p.seg[s].doff + (uint64_t)(p.seg[s].count - 1) * p.seg[s].dstride +
			    p.seg[s].len > p.size)
				__builtin_trap();
		struct kv_info v;       /* the view's opener takes p.kv for this */
		if (kv_parse(p.hdr, p.hdr_len, p.size, &v, NULL, 0) || v.ntensors != p.kv.ntensors ||
		    memcmp(v.t, p.kv.t, v.ntensors * sizeof(*v.t)))
			__builtin_trap();
		kv_free(&v);
		kv_plan_free(&p);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct buf b = { data, size };
	struct kv_info kv;
	uint64_t need;
	char err[160], sum[1024];

	if (kv_need(data, size, &need) || need > size)
		return 0;
	if (!kv_parse(data, size, size, &kv, err, sizeof(err))) {
		kv_verify(&kv, at, &b, err, sizeof(err));
		if (kv_summary(&kv, sum, sizeof(sum)) < 0)
			__builtin_trap();
		views(&kv, data);
		uint8_t *out;
		uint64_t len;
		enum kv_format to = kv.format == KV_FMT_NATIVE ? KV_FMT_VLLM : KV_FMT_NATIVE;
		if (kv.data_bytes <= (8u << 20) && !kv_convert(&kv, data, at, &b, to, &out, &len)) {
			struct kv_info again;
			if (kv_parse(out, len, len, &again, err, sizeof(err)))
				__builtin_trap();      /* we wrote something we can't read */
			kv_free(&again);
			free(out);
		}
	}
	kv_free(&kv);
	return 0;
}
