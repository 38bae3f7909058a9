/* SPDX-License-Identifier: MIT */
/* The (uid, chunk) pairs: open addressing, linear probing, as chunkindex.c;
 * each with its count of held manifest entries, and the pairs without one
 * listed for collection (as store-refs.c does for chunks). */
#include "owners.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MIN_SLOTS 64

struct pair {
	struct stg_hash hash;
	uint32_t uid;
	uint32_t epoch; /* of the last add or has; 0: an empty slot */
	uint32_t refs;  /* held manifest entries */
};

struct key {
	struct stg_hash hash;
	uint32_t uid;
};

struct stg_owners {
	pthread_mutex_t lock;
	struct pair *slots;
	size_t nslots, count;
	uint32_t epoch; /* from 1 */
	/* Pairs whose count is 0: candidates for collection. */
	struct key *zeros;
	size_t nzeros, capzeros;
	bool zeros_incomplete; /* one could not be listed: look at all */
	bool counted;          /* the manifests' references are in */
	bool broken;           /* a count was lost: forget nothing */
};

/* The hash is uniform already; the uid, multiplied by a large odd constant,
 * spreads one chunk's users apart. */
static size_t home_of(const struct stg_hash *h, uint32_t uid, size_t nslots)
{
	uint64_t k = stg_get_le64(h->b) ^ ((uint64_t)uid * 0x9e3779b97f4a7c15ull);
	return (size_t)(((unsigned __int128)k * nslots) >> 64);
}

static size_t next_slot(const struct stg_owners *o, size_t i)
{
	return i + 1 == o->nslots ? 0 : i + 1;
}

static size_t probe(const struct stg_owners *o, uint32_t uid, const struct stg_hash *h)
{
	size_t i = home_of(h, uid, o->nslots);
	while (o->slots[i].epoch &&
	       (o->slots[i].uid != uid || !stg_hash_eq(&o->slots[i].hash, h)))
		i = next_slot(o, i);
	return i;
}

int stg_owners_new(struct stg_owners **ret)
{
	struct stg_owners *o = calloc(1, sizeof(*o));
	if (!o || !(o->slots = calloc(MIN_SLOTS, sizeof(*o->slots)))) {
		free(o);
		return -ENOMEM;
	}
	o->nslots = MIN_SLOTS;
	o->epoch = 1;
	pthread_mutex_init(&o->lock, NULL);
	*ret = o;
	return 0;
}

void stg_owners_free(struct stg_owners *o)
{
	if (!o)
		return;
	pthread_mutex_destroy(&o->lock);
	free(o->slots);
	free(o->zeros);
	free(o);
}

/* Doubles the table past 3/4 full. */
static int grow(struct stg_owners *o)
{
	size_t n = o->nslots * 2;
	struct pair *old = o->slots, *s = calloc(n, sizeof(*s));
	if (!s)
		return -ENOMEM;
	size_t oldn = o->nslots;
	o->slots = s;
	o->nslots = n;
	for (size_t i = 0; i < oldn; i++)
		if (old[i].epoch)
			s[probe(o, old[i].uid, &old[i].hash)] = old[i];
	free(old);
	return 0;
}

static void candidate(struct stg_owners *o, uint32_t uid, const struct stg_hash *h)
{
	if (!o->counted || o->broken)
		return; /* listed from the table once counted */
	if (STG_GROW(o->zeros, o->capzeros, o->nzeros + 1) < 0) {
		o->zeros_incomplete = true;
		return;
	}
	o->zeros[o->nzeros++] = (struct key){*h, uid};
}

/* The slot of (uid, h), made if absent. Returns it or -ENOMEM. */
static ptrdiff_t find_or_make(struct stg_owners *o, uint32_t uid, const struct stg_hash *h,
			      bool *ret_made)
{
	size_t i = probe(o, uid, h);
	*ret_made = !o->slots[i].epoch;
	if (!*ret_made)
		return (ptrdiff_t)i;
	if ((o->count + 1) * 4 > o->nslots * 3 && grow(o) < 0)
		return -ENOMEM;
	i = probe(o, uid, h);
	o->slots[i] = (struct pair){.hash = *h, .uid = uid, .epoch = o->epoch};
	o->count++;
	return (ptrdiff_t)i;
}

int stg_owners_add(struct stg_owners *o, uint32_t uid, const struct stg_hash *h)
{
	bool made;
	pthread_mutex_lock(&o->lock);
	ptrdiff_t i = find_or_make(o, uid, h, &made);
	if (i >= 0)
		o->slots[i].epoch = o->epoch;
	if (made && i >= 0)
		candidate(o, uid, h);
	pthread_mutex_unlock(&o->lock);
	return i < 0 ? (int)i : 0;
}

int stg_owners_ref(struct stg_owners *o, uint32_t uid, const struct stg_hash *h)
{
	bool made;
	pthread_mutex_lock(&o->lock);
	ptrdiff_t i = find_or_make(o, uid, h, &made);
	if (i >= 0)
		o->slots[i].refs++;
	pthread_mutex_unlock(&o->lock);
	return i < 0 ? (int)i : 0;
}

void stg_owners_unref(struct stg_owners *o, uint32_t uid, const struct stg_hash *h)
{
	pthread_mutex_lock(&o->lock);
	size_t i = probe(o, uid, h);
	if (o->slots[i].epoch && o->slots[i].refs > 0 && --o->slots[i].refs == 0)
		candidate(o, uid, h);
	pthread_mutex_unlock(&o->lock);
}

bool stg_owners_has(struct stg_owners *o, uint32_t uid, const struct stg_hash *h)
{
	pthread_mutex_lock(&o->lock);
	size_t i = probe(o, uid, h);
	bool found = o->slots[i].epoch != 0;
	if (found)
		o->slots[i].epoch = o->epoch;
	pthread_mutex_unlock(&o->lock);
	return found;
}

void stg_owners_gc_begin(struct stg_owners *o)
{
	pthread_mutex_lock(&o->lock);
	o->epoch++;
	pthread_mutex_unlock(&o->lock);
}

/* Empties slot i, pulling later pairs of its cluster back (backward shift,
 * as chunkindex.c), so that every probe sequence stays unbroken. */
static void remove_at(struct stg_owners *o, size_t i)
{
	for (size_t j = next_slot(o, i); o->slots[j].epoch; j = next_slot(o, j)) {
		size_t k = home_of(&o->slots[j].hash, o->slots[j].uid, o->nslots);
		bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		o->slots[i] = o->slots[j];
		i = j;
	}
	memset(&o->slots[i], 0, sizeof(o->slots[i]));
	o->count--;
}

static void find_candidates(struct stg_owners *o)
{
	o->nzeros = 0;
	o->zeros_incomplete = false;
	for (size_t i = 0; i < o->nslots; i++)
		if (o->slots[i].epoch && o->slots[i].refs == 0)
			candidate(o, o->slots[i].uid, &o->slots[i].hash);
}

void stg_owners_counted(struct stg_owners *o)
{
	pthread_mutex_lock(&o->lock);
	o->counted = true;
	find_candidates(o);
	pthread_mutex_unlock(&o->lock);
}

size_t stg_owners_gc_end(struct stg_owners *o)
{
	size_t dropped = 0;
	pthread_mutex_lock(&o->lock);
	if (!o->counted || o->broken) {
		free(o->zeros);
		o->zeros = NULL;
		o->nzeros = o->capzeros = 0;
		pthread_mutex_unlock(&o->lock);
		return 0;
	}
	if (o->zeros_incomplete)
		find_candidates(o);
	uint32_t keep_from = o->epoch - 1;
	size_t kept = 0;
	for (size_t j = 0; j < o->nzeros; j++) {
		struct key k = o->zeros[j];
		size_t i = probe(o, k.uid, &k.hash);
		if (!o->slots[i].epoch || o->slots[i].refs != 0)
			continue;
		if (o->slots[i].epoch >= keep_from) {
			o->zeros[kept++] = k;
			continue;
		}
		remove_at(o, i);
		dropped++;
	}
	o->nzeros = kept;
	pthread_mutex_unlock(&o->lock);
	return dropped;
}

void stg_owners_refs_lost(struct stg_owners *o)
{
	pthread_mutex_lock(&o->lock);
	o->broken = true;
	pthread_mutex_unlock(&o->lock);
}

uint32_t stg_owners_refs(struct stg_owners *o, uint32_t uid, const struct stg_hash *h)
{
	pthread_mutex_lock(&o->lock);
	size_t i = probe(o, uid, h);
	uint32_t n = o->slots[i].epoch ? o->slots[i].refs : 0;
	pthread_mutex_unlock(&o->lock);
	return n;
}

size_t stg_owners_count(struct stg_owners *o)
{
	pthread_mutex_lock(&o->lock);
	size_t n = o->count;
	pthread_mutex_unlock(&o->lock);
	return n;
}
