/* Unit tests for stage and key names (SPEC §3). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "../tap.h"
#include "../../fs/names.h"

/* Whether id is among the spans name_request_ids gives for key. */
static int among_ids(const char *key, const char *id)
{
	struct name_span sp[NAME_KEY_MAX + 1];
	size_t n = name_request_ids(key, sp), len = strlen(id);

	for (size_t i = 0; i < n; i++)
		if (sp[i].len == len && !memcmp(key + sp[i].off, id, len))
			return 1;
	return 0;
}

/* name_request_ids gives exactly the ids name_of_request says a key
 * belongs to: keys and ids made of pieces that meet at every rule's
 * edges ('_', '.', "omni_", "_kv_cache_", ids inside ids). */
static void test_request_ids(void)
{
	static const char *const piece[] = {
		"r", "r1", "_", ".", "omni_", "_kv_cache_", "kv_cache_", "0", "to", "x",
	};
	char key[NAME_KEY_MAX + 1], id[64];
	int agree = 1, tried = 0, belongs = 0;

	srand(21);
	for (int t = 0; t < 200000 && agree; t++) {
		size_t k = 0, n = 0;
		for (int i = 1 + rand() % 8; i > 0; i--)
			k += (size_t)snprintf(key + k, sizeof(key) - k, "%s", piece[rand() % 10]);
		for (int i = 1 + rand() % 3; i > 0; i--)
			n += (size_t)snprintf(id + n, sizeof(id) - n, "%s", piece[rand() % 10]);
		if (name_check_key(key) || name_check_key(id))
			continue;
		tried++;
		belongs += name_of_request(key, id);
		agree = name_of_request(key, id) == among_ids(key, id);
	}
	ok(agree && tried > 100000 && belongs > 1000,
	   "a key's possible request ids are the ones it belongs to (%d of %d; last %s, %s)",
	   belongs, tried, key, id);
	memset(key, '_', NAME_KEY_MAX);
	key[0] = 'r';
	key[NAME_KEY_MAX] = 0;
	struct name_span sp[NAME_KEY_MAX + 1];
	is(name_request_ids(key, sp), NAME_KEY_MAX, "a key of 255 with 254 '_': 255 ids, within room");
	ok(among_ids("omni_0_to_1_kv_cache_r1", "r1") &&
	   among_ids("omni_0_to_1_kv_cache_r1", "omni") &&
	   !among_ids("omni_0_to_1_kv_cache_r1", "1_kv_cache_r1"), "a KV key's ids");
}

int main(void)
{
	char s64[65], s65[66], k255[256], k256[257];

	memset(s64, 'a', 64); s64[64] = 0;
	memset(s65, 'a', 65); s65[65] = 0;
	memset(k255, 'k', 255); k255[255] = 0;
	memset(k256, 'k', 256); k256[256] = 0;
	is(name_check_stage("thinker"), 0, "plain stage");
	is(name_check_stage("0"), 0, "digit stage");
	is(name_check_stage("a.b-c_D9"), 0, "all allowed bytes");
	is(name_check_stage(s64), 0, "64-byte stage");
	is(name_check_stage(s65), -ENAMETOOLONG, "65-byte stage");
	is(name_check_stage(""), -EINVAL, "empty stage");
	is(name_check_stage(".x"), -EINVAL, "leading dot");
	is(name_check_stage("a b"), -EINVAL, "space");
	is(name_check_stage("a:b"), -EINVAL, "colon");
	is(name_check_stage("\xc3\xa9"), -EINVAL, "non-ASCII");
	is(name_check_key("req-7"), 0, "plain key");
	is(name_check_key("a b:c\xc3\xa9\x01"), 0, "any byte but / and NUL");
	is(name_check_key(k255), 0, "255-byte key");
	is(name_check_key(k256), -ENAMETOOLONG, "256-byte key");
	is(name_check_key(""), -EINVAL, "empty key");
	is(name_check_key(".hidden"), -EINVAL, "leading dot key");
	is(name_check_key("a/b"), -EINVAL, "slash");
	char esc[NAME_ESC_MAX], kfull[4 * NAME_KEY_MAX + 1];
	is_str(name_escape("0/1/req-7.rank0of2", esc), "0/1/req-7.rank0of2", "a plain name as it is");
	is_str(name_escape("a b\nc\\d\t\x7f\xc3\xa9", esc), "a\\040b\\012c\\134d\\011\\177\xc3\xa9",
	       "space, newline, '\\', tab, DEL escaped; UTF-8 kept");
	memset(k255, '\n', 255);
	memset(kfull, 0, sizeof(kfull));
	for (int i = 0; i < 255; i++)
		memcpy(kfull + 4 * i, "\\012", 4);
	is_str(name_escape(k255, esc), kfull, "a key of 255 newlines fits");
	ok(name_of_request("r1", "r1"), "a request's own key");
	ok(name_of_request("r1_0_0_1_2", "r1"), "id then '_'");
	ok(name_of_request("r1.rank0of2", "r1"), "id then '.' (a rank shard)");
	ok(name_of_request("omni_0_to_1_kv_cache_r1", "r1"), "vllm-omni's KV key");
	ok(!name_of_request("r10", "r1"), "a longer id is another request");
	ok(!name_of_request("xr1", "r1"), "the id inside a key is not enough");
	ok(!name_of_request("r", "r1"), "a shorter key");
	ok(!name_of_request("omni_0_to_1_kv_cache_r10", "r1"), "KV key of another request");
	ok(!name_of_request("omni_0_to_1_kv_cache_xr1", "r1"), "KV key ending in the id");
	ok(!name_of_request("omni_0_to_1_kv_cache_", "r1"), "a KV key without the id");
	const char *st;
	is(name_stem("0_0123456789abcdef_0_0_1", &st), NAME_STEM, "a key's stem: its first bytes");
	ok(!strncmp(st, "0_0123456789", NAME_STEM), "... from its start");
	is(name_stem("omni_0_to_1_kv_cache_0_0123456789abcdef", &st), NAME_STEM, "a KV key's...");
	ok(!strncmp(st, "0_0123456789", NAME_STEM), "... its request's");
	is(name_stem("r1", &st), 2, "a short key is all stem");
	ok(name_stem_finds("0_0123456789abcdef"), "a long id is found by its stem");
	ok(!name_stem_finds("0_012345678"), "one shorter than the stem is not");
	ok(!name_stem_finds("omni_0123456789"), "nor one that starts as KV keys do");
	ok(!name_stem_finds("0123456789_kv_cache_1"), "nor one holding kv_cache_");
	test_request_ids();
	return done_testing();
}
