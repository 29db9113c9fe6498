/* rangeset.h - which bytes of an object a reader has seen.
 *
 * A complete read (SPEC §4.4) is every byte read by one open file
 * description; readers may read in any order, so the set keeps merged
 * half-open intervals.  Sequential readers keep it at one interval.
 */
#ifndef OMNI_RANGESET_H
#define OMNI_RANGESET_H

#include <stdint.h>

struct range { uint64_t lo, hi; };

struct rangeset {
	struct range *r;
	unsigned n, cap;
	struct range one;       /* inline storage for the common case */
};

void rangeset_init(struct rangeset *s);
void rangeset_fini(struct rangeset *s);
int rangeset_add(struct rangeset *s, uint64_t lo, uint64_t hi);
/* 1 if [lo, hi) is wholly in the set. */
int rangeset_covers(const struct rangeset *s, uint64_t lo, uint64_t hi);

#endif
