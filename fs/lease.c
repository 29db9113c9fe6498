/* lease.c - leases of streamed reads: (peer, id) -> a served handle. */
#include "lease.h"
#include "htab.h"
#include "ns.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct lease {
	struct hlink link;
	const void *conn;               /* it came on; it ends with it */
	int peer, ended;
	unsigned busy;                  /* serves using h right now */
	uint64_t id, oid, size;
	struct ns_handle *h;
};

struct leases {
	pthread_mutex_t lock;
	struct ns *ns;
	struct htab tab;
	unsigned *held;                 /* per peer */
};

static uint64_t lease_key(int peer, uint64_t id)
{
	return (id ^ ((uint64_t)peer << 48)) * 0x9e3779b97f4a7c15ull;
}

int leases_create(struct leases **out, struct ns *ns, size_t npeers)
{
	struct leases *t = calloc(1, sizeof(*t));

	if (!t || !(t->held = calloc(npeers ? npeers : 1, sizeof(*t->held))) ||
	    htab_init(&t->tab, 64)) {
		if (t)
			free(t->held);
		free(t);
		return -ENOMEM;
	}
	t->ns = ns;
	pthread_mutex_init(&t->lock, NULL);
	*out = t;
	return 0;
}

static struct lease *lease_find(struct leases *t, int peer, uint64_t id)
{
	for (struct hlink *l = htab_find(&t->tab, lease_key(peer, id)); l; l = htab_next(l)) {
		struct lease *e = (struct lease *)l;
		if (e->peer == peer && e->id == id && !e->ended)
			return e;
	}
	return NULL;
}

/* Opens oid for a new lease, with the lock dropped (ns takes its own). */
static int lease_open(struct leases *t, const void *conn, int peer, uint64_t id, uint64_t oid,
		      struct lease **out)
{
	struct lease *e = calloc(1, sizeof(*e));
	int rc;

	if (!e)
		return -ENOMEM;
	*e = (struct lease){ .conn = conn, .peer = peer, .id = id, .oid = oid, .busy = 1 };
	if ((rc = ns_serve_open(t->ns, oid, &e->h, &e->size))) {
		free(e);
		return rc;
	}
	pthread_mutex_lock(&t->lock);
	if (lease_find(t, peer, id)) {
		rc = -EINVAL;           /* the same id twice at once: a confused peer */
	} else if (t->held[peer] >= LEASE_MAX) {
		rc = -EBUSY;
	} else {
		t->held[peer]++;
		htab_add(&t->tab, &e->link, lease_key(peer, id));
		*out = e;
	}
	pthread_mutex_unlock(&t->lock);
	if (rc) {
		ns_release(t->ns, e->h);
		free(e);
	}
	return rc;
}

int leases_get(struct leases *t, const void *conn, int peer, uint64_t id, uint64_t oid,
	       struct lease **out, struct ns_handle **h, uint64_t *size)
{
	int rc = 0;

	pthread_mutex_lock(&t->lock);
	struct lease *e = lease_find(t, peer, id);
	if (e && e->oid != oid)
		rc = -EINVAL;
	else if (e)
		e->busy++;
	pthread_mutex_unlock(&t->lock);
	if (!rc && !e)
		rc = lease_open(t, conn, peer, id, oid, &e);
	if (rc)
		return rc;
	*out = e;
	*h = e->h;
	*size = e->size;
	return 0;
}

/* Under the lock: 1 if e may go now (ended and unused). */
static int lease_unhook(struct leases *t, struct lease *e)
{
	if (!e->ended || e->busy)
		return 0;
	htab_del(&t->tab, &e->link);
	t->held[e->peer]--;
	return 1;
}

static void lease_free(struct leases *t, struct lease *e)
{
	ns_release(t->ns, e->h);
	free(e);
}

void leases_put(struct leases *t, struct lease *e)
{
	pthread_mutex_lock(&t->lock);
	e->busy--;
	int gone = lease_unhook(t, e);
	pthread_mutex_unlock(&t->lock);
	if (gone)
		lease_free(t, e);
}

/* Ends e, and frees it unless a serve still uses it (leases_put will). */
static void lease_end(struct leases *t, struct lease *e)
{
	int gone;

	e->ended = 1;
	gone = lease_unhook(t, e);
	pthread_mutex_unlock(&t->lock);
	if (gone)
		lease_free(t, e);
	pthread_mutex_lock(&t->lock);
}

void leases_end(struct leases *t, int peer, uint64_t id)
{
	pthread_mutex_lock(&t->lock);
	struct lease *e = lease_find(t, peer, id);
	if (e)
		lease_end(t, e);
	pthread_mutex_unlock(&t->lock);
}

int leases_ended(struct leases *t, const struct lease *e)
{
	pthread_mutex_lock(&t->lock);
	int ended = e->ended;
	pthread_mutex_unlock(&t->lock);
	return ended;
}

/* Under the lock: the first lease of conn (NULL: of any) not yet ended. */
static struct lease *lease_of(struct leases *t, const void *conn)
{
	for (size_t b = 0; b < t->tab.nb; b++)
		for (struct hlink *l = t->tab.b[b]; l; l = l->next) {
			struct lease *e = (struct lease *)l;
			if (!e->ended && (!conn || e->conn == conn))
				return e;
		}
	return NULL;
}

void leases_drop(struct leases *t, const void *conn)
{
	struct lease *e;

	pthread_mutex_lock(&t->lock);
	while ((e = lease_of(t, conn)))
		lease_end(t, e);
	pthread_mutex_unlock(&t->lock);
}

void leases_destroy(struct leases *t)
{
	if (!t)
		return;
	leases_drop(t, NULL);
	htab_fini(&t->tab);
	pthread_mutex_destroy(&t->lock);
	free(t->held);
	free(t);
}
