/* SPDX-License-Identifier: MIT */
/* The server's in-memory chunk index: open addressing, linear probing. */
#include "chunkindex.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Growing by 1.5x past 85% load keeps the table between 57% and 85% full:
 * 38 to 57 bytes of memory per 32-byte entry. */
#define MIN_SLOTS 64
#define LOAD_NUM 85
#define LOAD_DEN 100

struct stg_chunkindex {
	struct stg_chunkindex_entry *slots;
	size_t nslots;
	size_t count;
	size_t limit; /* grow before count exceeds this */
};

_Static_assert(sizeof(struct stg_chunkindex_entry) == 32, "index entries are 32 bytes");

/* The hash is XXH3-128, uniform already: its first 8 bytes, mapped onto the
 * table by multiplication (Lemire's fastrange), need no further mixing. */
static size_t home_of(const struct stg_hash *h, size_t nslots)
{
	return (size_t)(((unsigned __int128)stg_get_le64(h->b) * nslots) >> 64);
}

static bool slot_empty(const struct stg_chunkindex_entry *e)
{
	return e->segment == 0;
}

static size_t limit_of(size_t nslots)
{
	return nslots / LOAD_DEN * LOAD_NUM + nslots % LOAD_DEN * LOAD_NUM / LOAD_DEN;
}

static int alloc_slots(struct stg_chunkindex *x, size_t nslots)
{
	if (nslots > SIZE_MAX / sizeof(*x->slots))
		return -ENOMEM;
	struct stg_chunkindex_entry *s = calloc(nslots, sizeof(*s));
	if (!s)
		return -ENOMEM;
	x->slots = s;
	x->nslots = nslots;
	x->limit = limit_of(nslots);
	return 0;
}

int stg_chunkindex_new(size_t hint, struct stg_chunkindex **ret)
{
	struct stg_chunkindex *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	size_t n = MIN_SLOTS;
	while (limit_of(n) < hint && n < SIZE_MAX / 2)
		n += n / 2;
	int r = alloc_slots(x, n);
	if (r < 0) {
		free(x);
		return r;
	}
	*ret = x;
	return 0;
}

void stg_chunkindex_free(struct stg_chunkindex *x)
{
	if (!x)
		return;
	free(x->slots);
	free(x);
}

static size_t probe(const struct stg_chunkindex *x, const struct stg_hash *h)
{
	size_t i = home_of(h, x->nslots);
	while (!slot_empty(&x->slots[i]) && !stg_hash_eq(&x->slots[i].hash, h))
		i = i + 1 == x->nslots ? 0 : i + 1;
	return i;
}

struct stg_chunkindex_entry *stg_chunkindex_find(const struct stg_chunkindex *x,
						 const struct stg_hash *h)
{
	size_t i = probe(x, h);
	return slot_empty(&x->slots[i]) ? NULL : &x->slots[i];
}

static int grow(struct stg_chunkindex *x)
{
	struct stg_chunkindex old = *x;
	int r = alloc_slots(x, old.nslots + old.nslots / 2);
	if (r < 0)
		return r;
	for (size_t i = 0; i < old.nslots; i++)
		if (!slot_empty(&old.slots[i]))
			x->slots[probe(x, &old.slots[i].hash)] = old.slots[i];
	free(old.slots);
	return 0;
}

int stg_chunkindex_insert(struct stg_chunkindex *x, const struct stg_chunkindex_entry *e,
			  struct stg_chunkindex_entry **ret)
{
	if (e->segment == 0)
		return -EINVAL;
	size_t i = probe(x, &e->hash);
	if (!slot_empty(&x->slots[i])) {
		*ret = &x->slots[i];
		return 0;
	}
	if (x->count + 1 > x->limit) {
		int r = grow(x);
		if (r < 0)
			return r;
		i = probe(x, &e->hash);
	}
	x->slots[i] = *e;
	x->count++;
	*ret = &x->slots[i];
	return 1;
}

bool stg_chunkindex_remove(struct stg_chunkindex *x, const struct stg_hash *h)
{
	size_t i = probe(x, h);
	if (slot_empty(&x->slots[i]))
		return false;
	/* Backward shift: pull later entries of the cluster into the hole when
	 * the hole lies between their home slot and where they sit, so that
	 * every probe sequence stays unbroken without tombstones. */
	size_t j = i;
	for (;;) {
		j = j + 1 == x->nslots ? 0 : j + 1;
		if (slot_empty(&x->slots[j]))
			break;
		size_t k = home_of(&x->slots[j].hash, x->nslots);
		bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		x->slots[i] = x->slots[j];
		i = j;
	}
	memset(&x->slots[i], 0, sizeof(x->slots[i]));
	x->count--;
	return true;
}

size_t stg_chunkindex_count(const struct stg_chunkindex *x)
{
	return x->count;
}

size_t stg_chunkindex_memory(const struct stg_chunkindex *x)
{
	return sizeof(*x) + x->nslots * sizeof(*x->slots);
}

int stg_chunkindex_foreach(struct stg_chunkindex *x,
			   int (*fn)(void *arg, struct stg_chunkindex_entry *e), void *arg)
{
	for (size_t i = 0; i < x->nslots; i++) {
		if (slot_empty(&x->slots[i]))
			continue;
		int r = fn(arg, &x->slots[i]);
		if (r)
			return r;
	}
	return 0;
}
