/* htab.h - an intrusive chained hash table keyed by 64-bit hashes.
 *
 * Entries embed a struct hlink.  Several entries may share a key (a hash of
 * a name, say): htab_find() returns the first and the caller walks on with
 * htab_next().  Not thread-safe; the owner locks.
 */
#ifndef OMNI_HTAB_H
#define OMNI_HTAB_H

#include <stddef.h>
#include <stdint.h>

struct hlink {
	struct hlink *next;
	uint64_t key;
};

struct htab {
	struct hlink **b;
	size_t nb, n;
};

int htab_init(struct htab *t, size_t nb);      /* nb: a power of two */
void htab_fini(struct htab *t);
void htab_add(struct htab *t, struct hlink *l, uint64_t key);
void htab_del(struct htab *t, struct hlink *l);
struct hlink *htab_find(const struct htab *t, uint64_t key);
struct hlink *htab_next(const struct hlink *l);

#endif
