/* pyjson.c - JSON text as Python's json.dumps(obj, separators=(",", ":"))
 * writes it.
 *
 * vllm-omni writes a KV header with exactly that call, so a header that
 * omnifs re-emits (a conversion, a view) must spell it the same way or a
 * round trip changes bytes: no "\/" for "/" (json-c's habit), every byte
 * outside printable ASCII as a lowercase \uXXXX escape (ensure_ascii),
 * astral code points as surrogate pairs, and numbers as they were read
 * (json-c keeps a parsed double's text).  Keys keep their order.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <json-c/json.h>
#include <json-c/printbuf.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A printbuf that remembers a failed append (out of memory). */
struct out {
	struct printbuf *pb;
	int bad;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (printbuf_memappend(o->pb, s, (int)n) < 0)
		o->bad = 1;
}

static void put_u(struct out *o, unsigned v)
{
	char e[8];

	snprintf(e, sizeof(e), "\\u%04x", v & 0xffff);
	put(o, e, 6);
}

/* The code point of the UTF-8 sequence at s (n bytes left) and its
 * length; a byte that starts no valid sequence stands for itself. */
static unsigned utf8_next(const unsigned char *s, size_t n, size_t *len)
{
	unsigned cp = s[0];
	size_t k = cp >= 0xf0 && cp < 0xf5 ? 4 : cp >= 0xe0 ? 3 : cp >= 0xc2 ? 2 : 1;

	if (cp >= 0xf5 || k > n)
		k = 1;
	if (k > 1) {
		cp &= 0x7f >> k;
		for (size_t i = 1; i < k; i++) {
			if ((s[i] & 0xc0) != 0x80) {
				*len = 1;
				return s[0];
			}
			cp = cp << 6 | (s[i] & 0x3f);
		}
	}
	*len = k;
	return cp;
}

/* Python's short escapes, else 0. */
static char short_escape(unsigned char c)
{
	switch (c) {
	case '"': return '"';
	case '\\': return '\\';
	case '\b': return 'b';
	case '\f': return 'f';
	case '\n': return 'n';
	case '\r': return 'r';
	case '\t': return 't';
	default: return 0;
	}
}

static void put_str(struct out *o, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;

	put(o, "\"", 1);
	for (size_t i = 0, k; i < n; i += k) {
		char e[2] = { '\\', short_escape(s[i]) };
		k = 1;
		if (e[1]) {
			put(o, e, 2);
		} else if (s[i] >= 0x20 && s[i] < 0x7f) {
			while (i + k < n && s[i + k] >= 0x20 && s[i + k] < 0x7f && !short_escape(s[i + k]))
				k++;    /* a run that stands as it is: one append */
			put(o, (const char *)s + i, k);
		} else {
			unsigned cp = utf8_next(s + i, n - i, &k);
			if (cp >= 0x10000) {
				cp -= 0x10000;
				put_u(o, 0xd800 | cp >> 10);
				put_u(o, 0xdc00 | (cp & 0x3ff));
			} else {
				put_u(o, cp);
			}
		}
	}
	put(o, "\"", 1);
}

static void put_value(struct out *o, json_object *v)
{
	size_t i = 0;
	const char *t;
	char num[24];
	int64_t x;

	switch (json_object_get_type(v)) {
	case json_type_string:
		put_str(o, json_object_get_string(v), (size_t)json_object_get_string_len(v));
		break;
	case json_type_object:
		put(o, "{", 1);
		json_object_object_foreach(v, key, val) {
			if (i++)
				put(o, ",", 1);
			put_str(o, key, strlen(key));
			put(o, ":", 1);
			put_value(o, val);
		}
		put(o, "}", 1);
		break;
	case json_type_array:
		put(o, "[", 1);
		for (i = 0; i < json_object_array_length(v); i++) {
			if (i)
				put(o, ",", 1);
			put_value(o, json_object_array_get_idx(v, i));
		}
		put(o, "]", 1);
		break;
	default:        /* null, booleans, numbers: json-c writes them as read */
		if (json_object_is_type(v, json_type_int) &&
		    (x = json_object_get_int64(v)) != INT64_MAX) {
			/* the same, without json-c's buffer for each number
			 * (above INT64_MAX json-c keeps a uint64) */
			put(o, num, (size_t)snprintf(num, sizeof(num), "%" PRId64, x));
			break;
		}
		t = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
		if (t)
			put(o, t, strlen(t));
		else
			o->bad = 1;
	}
}

char *kv_pyjson(void *json)
{
	struct out o = { printbuf_new(), 0 };
	char *s = NULL;

	if (!o.pb)
		return NULL;
	put_value(&o, json);
	if (!o.bad)
		s = strndup(o.pb->buf, (size_t)o.pb->bpos);
	printbuf_free(o.pb);
	return s;
}
