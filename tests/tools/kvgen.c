/* kvgen - property test of rank-shard views through real mounts.
 *
 *   kvgen SEED CASES READ-DIR WRITE-DIR...
 *
 * Each case draws a KV cache at random (format, dtype, layers, tokens,
 * heads, head_dim, missing layers, latent), cuts it into S shards that it
 * writes with plain open/write/close, round-robin over the WRITE-DIRs (one
 * per node), then reads every view rank r of T for the T that S allows
 * from READ-DIR and compares it byte for byte with the payload it expects.
 * The expected view is computed here from the whole cache with plain
 * loops and encoded with kvfmt's builders; the filesystem's view comes
 * from its planner, a different path.  Shards are kept (readers 0).
 * KVGEN_MAX_TOKENS (40) scales the caches up, to views large enough for
 * the daemon to reuse their buffers.
 * Prints "kvgen: N cases, M views" and exits 0, or says what differs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../../kvfmt/kvfmt.h"

static uint64_t rng;
static uint32_t max_tokens = 40;        /* KVGEN_MAX_TOKENS: views of MiBs */
static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

struct kcase {
	int vllm, latent;
	struct kv_spec s;               /* of a shard; heads_total is all */
	uint32_t S, H, hc, ntensors;
	uint8_t *present;
	uint8_t **full;                 /* per tensor: [H][tokens][row] */
	uint64_t row;
	char meta[64];
};

static void draw(struct kcase *c)
{
	static const uint32_t Ss[] = { 1, 2, 4, 8 };
	memset(c, 0, sizeof(*c));
	c->vllm = rnd(3) == 0;
	c->latent = !c->vllm && rnd(6) == 0;
	c->S = Ss[rnd(c->latent ? 3 : 4)];
	c->hc = c->latent ? 1 : 1 + rnd(4);
	c->H = c->latent ? 1 : c->hc * c->S;
	c->s.dtype = KV_F16 + rnd(KV_DTYPE_MAX);
	c->s.layout = c->vllm ? KV_NHD : rnd(2) ? KV_HND : KV_NHD;
	c->s.kind = c->latent ? KV_LATENT : KV_SPLIT;
	c->s.layers = 1 + rnd(4);
	c->s.tokens = 1 + rnd(max_tokens);
	c->s.head_dim = 1 + rnd(24);
	c->s.head_count = c->hc;
	c->s.heads_total = c->H;
	c->row = (uint64_t)c->s.head_dim * kv_dtype_size(c->s.dtype);
	c->ntensors = c->latent ? c->s.layers : 2 * c->s.layers;
	c->present = malloc(c->ntensors);
	c->full = calloc(c->ntensors, sizeof(*c->full));
	/* Sometimes a layer is missing (K and V both, as vllm-omni marks). */
	uint32_t ml = c->s.layers > 1 && rnd(3) == 0 ? rnd(c->s.layers) : UINT32_MAX;
	for (uint32_t i = 0; i < c->ntensors; i++) {
		c->present[i] = (c->latent ? i : i / 2) != ml;
		uint64_t n = (uint64_t)c->H * c->s.tokens * c->row;
		c->full[i] = malloc(n);
		for (uint64_t b = 0; b < n; b++)
			c->full[i][b] = (uint8_t)rnd(256);
	}
	snprintf(c->meta, sizeof(c->meta), "{\"bids\":[%u,%u],\"seed\":%u}", rnd(100), rnd(100),
		 rnd(1000));
}

/* Heads [h0, h0+n) of tensor i in a layout. */
static uint8_t *heads(const struct kcase *c, uint32_t i, uint32_t h0, uint32_t n,
		      enum kv_layout l)
{
	uint8_t *o = malloc((uint64_t)n * c->s.tokens * c->row + 1);
	for (uint32_t h = 0; h < n; h++)
		for (uint32_t t = 0; t < c->s.tokens; t++) {
			uint64_t at = l == KV_HND || c->latent ? ((uint64_t)h * c->s.tokens + t)
							       : ((uint64_t)t * n + h);
			memcpy(o + at * c->row,
			       c->full[i] + ((uint64_t)(h0 + h) * c->s.tokens + t) * c->row, c->row);
		}
	return o;
}

/* The payload of heads [h0, h0+n) in layout l (a shard, or a view). */
static int encode(const struct kcase *c, uint32_t h0, uint32_t n, enum kv_layout l,
		  int shard, const char *meta, uint8_t **out, uint64_t *len)
{
	struct kv_spec s = c->s;
	const void **t = calloc(c->ntensors, sizeof(*t));
	int rc;

	s.layout = l;
	s.head_first = c->latent ? 0 : h0;
	s.head_count = n;
	for (uint32_t i = 0; i < c->ntensors; i++)
		t[i] = c->present[i] ? heads(c, i, h0, n, l) : NULL;
	if (c->vllm) {
		/* vllm-omni's shards don't say their heads; views do. */
		if (shard) {
			s.head_first = 0;
			s.heads_total = n;
		}
		int64_t bids[2] = { 7, 9 };
		rc = kv_build_vllm(&s, "req-1", bids, 2, meta ? meta : c->meta, t, out, len);
	} else {
		s.meta = c->meta;
		s.meta_len = strlen(c->meta);
		rc = kv_build_native(&s, t, out, len);
	}
	for (uint32_t i = 0; i < c->ntensors; i++)
		free((void *)t[i]);
	free(t);
	return rc;
}

static int put_file(const char *path, const uint8_t *b, uint64_t n)
{
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	if (fd < 0)
		return -errno;
	int rc = fsetxattr(fd, "user.omni.readers", "0", 1, 0) ? -errno : 0;
	for (uint64_t done = 0; !rc && done < n;) {
		ssize_t w = write(fd, b + done, n - done > (1 << 20) ? 1 << 20 : n - done);
		if (w <= 0)
			rc = -errno;
		else
			done += (uint64_t)w;
	}
	if (close(fd) && !rc)
		rc = -errno;
	return rc;
}

static int get_file(const char *path, uint8_t **b, uint64_t *n)
{
	int fd = open(path, O_RDONLY);
	size_t cap = 1 << 16;
	if (fd < 0)
		return -errno;
	*b = malloc(cap);
	*n = 0;
	for (;;) {
		if (*n == cap)
			*b = realloc(*b, cap *= 2);
		ssize_t r = read(fd, *b + *n, cap - *n);
		if (r < 0) {
			int e = errno;
			close(fd);
			return -e;
		}
		if (!r)
			break;
		*n += (uint64_t)r;
	}
	close(fd);
	return 0;
}

static int one_case(int k, const char *rdir, char **wdirs, int nw, int *views)
{
	struct kcase c;
	char path[4096];
	int rc = 0;

	draw(&c);
	int bare = c.S == 1 && rnd(2);          /* a lone shard may be just <key> */
	for (uint32_t j = 0; j < c.S && !rc; j++) {
		uint8_t *b;
		uint64_t n;
		/* A latent payload is replicated: every shard is the same one. */
		if ((rc = encode(&c, c.latent ? 0 : j * c.hc, c.hc, c.s.layout, 1, NULL, &b, &n)))
			break;
		if (bare)
			snprintf(path, sizeof(path), "%s/c%d", wdirs[j % nw], k);
		else
			snprintf(path, sizeof(path), "%s/c%d.rank%uof%u", wdirs[j % nw], k, j, c.S);
		if ((rc = put_file(path, b, n)))
			fprintf(stderr, "kvgen: case %d: write %s: %s\n", k, path, strerror(-rc));
		free(b);
	}
	static const uint32_t Ts[] = { 1, 2, 4, 8, 16 };
	for (size_t ti = 0; !rc && ti < sizeof(Ts) / sizeof(*Ts); ti++) {
		uint32_t T = Ts[ti], f, n;
		if (kv_view_shards(c.S, 0, T, &f, &n) ||
		    (!c.latent && T > c.S && c.hc % (T / c.S)))
			continue;
		for (uint32_t r = 0; r < T && !rc; r++) {
			uint32_t h0, nh;
			kv_view_shards(c.S, r, T, &f, &n);
			if (c.latent) {
				h0 = 0;
				nh = 1;
			} else if (T <= c.S) {
				h0 = f * c.hc;
				nh = n * c.hc;
			} else {
				nh = c.hc / (T / c.S);
				h0 = f * c.hc + (r % (T / c.S)) * nh;
			}
			uint8_t *want, *got = NULL;
			uint64_t wn, gn = 0;
			/* A view keeps its sources' format; native views are HND.
			 * T == S is the shard itself, as written. */
			enum kv_layout l = c.vllm ? KV_NHD : T == c.S || c.latent ? c.s.layout : KV_HND;
			/* A vllm slice carries vllm-omni's own mark of one (SPEC §6). */
			int slice = c.vllm && T > c.S;
			char meta[256];
			if (slice)
				snprintf(meta, sizeof(meta), "%.*s,\"tp_head_slice\":{\"applied\":true,"
					 "\"side\":\"sender\",\"target_rank\":%u,\"source_rank\":%u,"
					 "\"from_tp\":%u,\"to_tp\":%u,\"offset_in_shard\":%u,"
					 "\"num_slices\":%u}}", (int)strlen(c.meta) - 1, c.meta, r, f,
					 c.S, T, r % (T / c.S), T / c.S);
			if ((rc = encode(&c, h0, nh, l, T == c.S || c.latent, slice ? meta : NULL,
					 &want, &wn)))
				break;
			if (T == 1 && bare)
				snprintf(path, sizeof(path), "%s/c%d", rdir, k);
			else if (T == 1 && rnd(2))
				snprintf(path, sizeof(path), "%s/c%d", rdir, k);   /* <key> alone */
			else
				snprintf(path, sizeof(path), "%s/c%d.rank%uof%u", rdir, k, r, T);
			if ((rc = get_file(path, &got, &gn))) {
				fprintf(stderr, "kvgen: case %d: read %s: %s\n", k, path, strerror(-rc));
			} else if (gn != wn || memcmp(got, want, wn)) {
				uint64_t at = 0;
				while (at < gn && at < wn && got[at] == want[at])
					at++;
				fprintf(stderr, "kvgen: case %d (%s %s S=%u hc=%u layers=%u tokens=%u "
					"dim=%u dtype=%s): %s: %llu bytes, want %llu; first difference at %llu\n",
					k, c.vllm ? "vllm" : "native", c.latent ? "latent" :
					c.s.layout == KV_HND ? "HND" : "NHD", c.S, c.hc, c.s.layers,
					c.s.tokens, c.s.head_dim, kv_dtype_name(c.s.dtype), path,
					(unsigned long long)gn, (unsigned long long)wn,
					(unsigned long long)at);
				rc = -EBADMSG;
			}
			(*views)++;
			free(want);
			free(got);
		}
	}
	for (uint32_t i = 0; i < c.ntensors; i++)
		free(c.full[i]);
	free(c.full);
	free(c.present);
	return rc;
}

/* kvgen shards LAYERS TOKENS HEADS DIM S DIR/KEY: S native f16 HND shards
 * of random bytes, DIR/KEY.rank<i>of<S>, for the benchmark. */
static int shards(char **argv)
{
	struct kv_spec s = { KV_F16, KV_HND, KV_SPLIT, (uint32_t)atoi(argv[0]),
			     (uint32_t)atoi(argv[1]), (uint32_t)atoi(argv[2]), 0, 0,
			     (uint32_t)atoi(argv[3]), NULL, 0 };
	uint32_t S = (uint32_t)atoi(argv[4]);
	char path[4096];

	if (!S || s.heads_total % S)
		return 2;
	s.head_count = s.heads_total / S;
	uint64_t tb = kv_tensor_bytes(&s);
	uint8_t *t = malloc(tb);
	const void **ts = calloc(2 * s.layers, sizeof(*ts));
	for (uint32_t i = 0; i < S; i++) {
		uint8_t *out;
		uint64_t n;
		for (uint64_t b = 0; b < tb; b++)
			t[b] = (uint8_t)rnd(256);
		for (uint32_t k = 0; k < 2 * s.layers; k++)
			ts[k] = t;      /* the same bytes per tensor: only sizes matter here */
		s.head_first = i * s.head_count;
		if (kv_build_native(&s, ts, &out, &n))
			return 1;
		snprintf(path, sizeof(path), "%s.rank%uof%u", argv[5], i, S);
		FILE *f = fopen(path, "wb");
		if (!f || fwrite(out, 1, n, f) != n || fclose(f))
			return 1;
		free(out);
	}
	free(t);
	free(ts);
	return 0;
}

int main(int argc, char **argv)
{
	rng = 88172645463325252ull;
	if (argc == 8 && !strcmp(argv[1], "shards"))
		return shards(argv + 2);
	if (argc < 5) {
		int help = argc == 2 && !strcmp(argv[1], "--help");
		fprintf(help ? stdout : stderr, "usage: kvgen SEED CASES READ-DIR WRITE-DIR...\n"
			"       kvgen shards LAYERS TOKENS HEADS DIM S DIR/KEY\n");
		return help ? 0 : 2;
	}
	rng = strtoull(argv[1], NULL, 0) * 2654435761u + 1;
	if (getenv("KVGEN_MAX_TOKENS"))
		max_tokens = (uint32_t)strtoul(getenv("KVGEN_MAX_TOKENS"), NULL, 10) ?: 40;
	int cases = atoi(argv[2]), views = 0;
	for (int k = 0; k < cases; k++)
		if (one_case(k, argv[3], argv + 4, argc - 4, &views))
			return 1;
	printf("kvgen: %d cases, %d views\n", cases, views);
	return 0;
}
