/* names.h - what a stage name and a key may be (SPEC §3). */
#ifndef OMNI_NAMES_H
#define OMNI_NAMES_H

#include <stddef.h>

#define NAME_STAGE_MAX 64
#define NAME_KEY_MAX 255

/* 0, -EINVAL (bad byte, empty, leading '.') or -ENAMETOOLONG. */
int name_check_stage(const char *name);
int name_check_key(const char *name);

/* 1 if key belongs to request id (a valid key itself): it is id, or id
 * followed by '_' or '.' and more (every key builder of vllm-omni puts
 * the request first; views add ".rank<r>of<T>"), or vllm-omni's
 * "omni_<from>_to_<to>_kv_cache_<id>". */
int name_of_request(const char *key, const char *id);
/* The ids key would belong to by name_of_request: each prefix of it that
 * ends before a '_' or a '.', key itself, and for "omni_..." what follows
 * each "_kv_cache_" in it; each as [off, off + len) of key, into out
 * (room for NAME_KEY_MAX + 1).  How many. */
struct name_span { unsigned short off, len; };
size_t name_request_ids(const char *key, struct name_span *out);

/* So that finding a request's keys need not look at every key, keys are
 * indexed by their stem: their first NAME_STEM bytes, or for vllm-omni's
 * KV keys those of the id they end with.  name_stem() gives a key's (its
 * length).  All keys of an id are under the id's own stem if it is at
 * least NAME_STEM bytes long, does not start with "omni" and holds no
 * "kv_cache_" (name_stem_finds() says whether); for any other id, every
 * key must be looked at. */
#define NAME_STEM 12
size_t name_stem(const char *key, const char **stem);
int name_stem_finds(const char *id);

/* A name as a line of text shows it: its spaces, control bytes and '\'
 * as \ooo, as /proc/mounts writes them, so that a key (any byte but '/'
 * and NUL) can neither split a line of .omni/transfers or the log nor
 * forge one.  out holds NAME_ESC_MAX bytes; longer names are cut. */
#define NAME_ESC_MAX (4 * (2 * NAME_STAGE_MAX + NAME_KEY_MAX + 2) + 1)
const char *name_escape(const char *name, char out[static NAME_ESC_MAX]);

#endif
