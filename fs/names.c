/* names.c - stage and key name rules. */
#include "names.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int name_check_stage(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || name[0] == '.')
		return -EINVAL;
	if (n > NAME_STAGE_MAX)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
			return -EINVAL;
	}
	return 0;
}

int name_check_key(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || name[0] == '.' || strchr(name, '/'))
		return -EINVAL;
	if (n > NAME_KEY_MAX)
		return -ENAMETOOLONG;
	return 0;
}

static const char kv[] = "_kv_cache_";

int name_of_request(const char *key, const char *id)
{
	size_t n = strlen(id), k = strlen(key);

	if (!strncmp(key, id, n) && (!key[n] || key[n] == '_' || key[n] == '.'))
		return 1;
	return !strncmp(key, "omni_", 5) && k >= sizeof(kv) - 1 + n &&
	       !memcmp(key + k - n - (sizeof(kv) - 1), kv, sizeof(kv) - 1) &&
	       !strcmp(key + k - n, id);
}

size_t name_request_ids(const char *key, struct name_span *out)
{
	size_t k = strlen(key), n = 0;

	if (k > NAME_KEY_MAX)
		return 0;
	for (size_t i = 1; i <= k; i++)
		if (!key[i] || key[i] == '_' || key[i] == '.')
			out[n++] = (struct name_span){ 0, (unsigned short)i };
	/* Every "_kv_cache_" holds a '_', so these are fewer than the
	 * prefixes cut before each. */
	if (!strncmp(key, "omni_", 5))
		for (const char *p = key; (p = strstr(p, kv)); p++)
			if (p + sizeof(kv) - 1 < key + k)
				out[n++] = (struct name_span){
					(unsigned short)(p - key + sizeof(kv) - 1),
					(unsigned short)(key + k - p - (sizeof(kv) - 1)) };
	return n;
}

size_t name_stem(const char *key, const char **stem)
{
	const char *s = key;

	/* After the last "_kv_cache_": an id with one inside it, or right
	 * after one, is never looked up by its stem. */
	if (!strncmp(key, "omni_", 5))
		for (const char *p = key; (p = strstr(p, kv)); p++)
			s = p + sizeof(kv) - 1;
	size_t n = strlen(s);
	*stem = s;
	return n < NAME_STEM ? n : NAME_STEM;
}

int name_stem_finds(const char *id)
{
	return strlen(id) >= NAME_STEM && strncmp(id, "omni", 4) && !strstr(id, "kv_cache_");
}

const char *name_escape(const char *name, char out[static NAME_ESC_MAX])
{
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)name; *p && n + 5 <= NAME_ESC_MAX; p++)
		if (*p <= ' ' || *p == 0x7f || *p == '\\')
			n += (size_t)snprintf(out + n, 5, "\\%03o", *p);
		else
			out[n++] = (char)*p;
	out[n] = 0;
	return out;
}
