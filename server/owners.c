/* SPDX-License-Identifier: MIT */
/* The (uid, chunk) pairs: open addressing, linear probing, as chunkindex.c. */
#include "owners.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MIN_SLOTS 64

struct pair {
	struct stg_hash hash;
	uint32_t uid;
	uint32_t epoch; /* of the last add or mark; 0: an empty slot */
};

struct stg_owners {
	pthread_mutex_t lock;
	struct pair *slots;
	size_t nslots, count;
	uint32_t epoch; /* from 1 */
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

int stg_owners_add(struct stg_owners *o, uint32_t uid, const struct stg_hash *h)
{
	int r = 0;
	pthread_mutex_lock(&o->lock);
	size_t i = probe(o, uid, h);
	if (!o->slots[i].epoch) {
		if ((o->count + 1) * 4 > o->nslots * 3 && (r = grow(o)) < 0)
			goto out;
		i = probe(o, uid, h);
		o->slots[i] = (struct pair){.hash = *h, .uid = uid};
		o->count++;
	}
	o->slots[i].epoch = o->epoch;
out:
	pthread_mutex_unlock(&o->lock);
	return r;
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

size_t stg_owners_gc_end(struct stg_owners *o)
{
	size_t dropped = 0;
	pthread_mutex_lock(&o->lock);
	uint32_t keep_from = o->epoch - 1;
	/* A removal may pull a later pair into slot i: it is looked at again. */
	for (size_t i = 0; i < o->nslots;) {
		if (o->slots[i].epoch && o->slots[i].epoch < keep_from) {
			remove_at(o, i);
			dropped++;
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&o->lock);
	return dropped;
}

size_t stg_owners_count(struct stg_owners *o)
{
	pthread_mutex_lock(&o->lock);
	size_t n = o->count;
	pthread_mutex_unlock(&o->lock);
	return n;
}
