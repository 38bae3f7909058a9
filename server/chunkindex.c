/* SPDX-License-Identifier: MIT */
/* The server's in-memory chunk index: 256 Robin Hood tables of packed slots. */
#include "chunkindex.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* A slot: the hash's bytes 1..15 (byte 0 picks the table), segment,
 * offset, the length with the epoch in its top 5 bits, and the references. */
#define TAIL 15
#define SLOT 28
#define SEGMENT_AT 15
#define OFFSET_AT 19
#define LEN_AT 23
#define REFS_AT 27
#define LEN_BITS 27

#define TABLES 256
#define MIN_SLOTS 8
/* Kept between 88% and 94% full: Robin Hood probing keeps lookups, the
 * misses included, to a few slots at that load. */
#define LOAD_NUM 94
#define LOAD_DEN 100

_Static_assert(STG_CHUNKINDEX_LEN_LIMIT == 1u << LEN_BITS, "the length's bits");
_Static_assert(STG_CHUNKINDEX_EPOCHS == 1u << (32 - LEN_BITS), "the epoch's bits");

struct table {
	uint8_t *slots;
	size_t n, count, limit;
};

struct stg_chunkindex {
	struct table t[TABLES];
	size_t count;
	size_t memory, peak; /* bytes of slots */
};

static struct table *table_of(const struct stg_chunkindex *x, const struct stg_hash *h)
{
	return (struct table *)&x->t[h->b[0]];
}

/* The hash is XXH3-128, uniform already: bytes 1..8, mapped onto the table
 * by multiplication (Lemire's fastrange), need no further mixing. */
static size_t home_of(const uint8_t *tail, size_t n)
{
	return (size_t)(((unsigned __int128)stg_get_le64(tail) * n) >> 64);
}

static uint8_t *slot_at(const struct table *t, size_t i)
{
	return t->slots + i * SLOT;
}

static bool slot_empty(const uint8_t *s)
{
	return stg_get_le32(s + SEGMENT_AT) == 0;
}

static size_t next(const struct table *t, size_t i)
{
	return i + 1 == t->n ? 0 : i + 1;
}

/* How far slot i's entry sits from its home. */
static size_t displacement(const struct table *t, size_t i)
{
	size_t home = home_of(slot_at(t, i), t->n);
	return i >= home ? i - home : i + t->n - home;
}

static void pack(uint8_t *s, const struct stg_chunkindex_entry *e)
{
	memcpy(s, e->hash.b + 1, TAIL);
	stg_put_le32(s + SEGMENT_AT, e->segment);
	stg_put_le32(s + OFFSET_AT, e->offset);
	stg_put_le32(s + LEN_AT, e->len | (e->epoch % STG_CHUNKINDEX_EPOCHS) << LEN_BITS);
	s[REFS_AT] = e->refs;
}

static void unpack(const uint8_t *s, uint8_t first, struct stg_chunkindex_entry *ret)
{
	ret->hash.b[0] = first;
	memcpy(ret->hash.b + 1, s, TAIL);
	ret->segment = stg_get_le32(s + SEGMENT_AT);
	ret->offset = stg_get_le32(s + OFFSET_AT);
	uint32_t v = stg_get_le32(s + LEN_AT);
	ret->len = v & (STG_CHUNKINDEX_LEN_LIMIT - 1);
	ret->epoch = v >> LEN_BITS;
	ret->refs = s[REFS_AT];
}

/* The slot holding h, or -1. A probe stops at the first entry nearer its
 * home than h would be there: h would have displaced it. */
static ptrdiff_t find(const struct table *t, const struct stg_hash *h)
{
	if (t->n == 0)
		return -1;
	size_t i = home_of(h->b + 1, t->n);
	for (size_t d = 0;; d++, i = next(t, i)) {
		const uint8_t *s = slot_at(t, i);
		if (slot_empty(s) || displacement(t, i) < d)
			return -1;
		if (memcmp(s, h->b + 1, TAIL) == 0)
			return (ptrdiff_t)i;
	}
}

/* Places a packed slot known to be absent; the table has room. */
static void place(struct table *t, const uint8_t *packed)
{
	uint8_t carry[SLOT], tmp[SLOT];
	memcpy(carry, packed, SLOT);
	size_t i = home_of(carry, t->n);
	for (size_t d = 0;; d++, i = next(t, i)) {
		uint8_t *s = slot_at(t, i);
		if (slot_empty(s)) {
			memcpy(s, carry, SLOT);
			return;
		}
		size_t sd = displacement(t, i);
		if (sd < d) {
			memcpy(tmp, s, SLOT);
			memcpy(s, carry, SLOT);
			memcpy(carry, tmp, SLOT);
			d = sd;
		}
	}
}

static size_t limit_of(size_t n)
{
	return n / LOAD_DEN * LOAD_NUM + n % LOAD_DEN * LOAD_NUM / LOAD_DEN;
}

/* Grows one table to n slots: only its old and new slots coexist. */
static int grow_to(struct stg_chunkindex *x, struct table *t, size_t n)
{
	if (n > SIZE_MAX / SLOT)
		return -ENOMEM;
	uint8_t *slots = calloc(n, SLOT);
	if (!slots)
		return -ENOMEM;
	struct table old = *t;
	*t = (struct table){slots, n, old.count, limit_of(n)};
	x->memory += n * SLOT;
	if (x->memory > x->peak)
		x->peak = x->memory;
	for (size_t i = 0; i < old.n; i++)
		if (!slot_empty(slot_at(&old, i)))
			place(t, slot_at(&old, i));
	free(old.slots);
	x->memory -= old.n * SLOT;
	return 0;
}

/* Grows one table by a sixteenth. */
static int grow(struct stg_chunkindex *x, struct table *t)
{
	return grow_to(x, t, t->n < MIN_SLOTS ? MIN_SLOTS : t->n + (t->n / 16 > 1 ? t->n / 16 : 1));
}

static size_t isqrt(size_t v)
{
	size_t lo = 0, hi = v < 2 ? v : v / 2;
	while (lo < hi) {
		size_t mid = lo + (hi - lo + 1) / 2;
		if (mid <= v / mid)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

int stg_chunkindex_reserve(struct stg_chunkindex *x, size_t n)
{
	/* Each table gets its share and a margin for the hash's spread (2
	 * standard deviations: the odd table grows once more), filled to 92%
	 * at most. */
	size_t share = n / TABLES;
	size_t want = share + 2 * isqrt(share) + 1;
	size_t slots = want * 100 / 92 + 1;
	for (size_t i = 0; i < TABLES; i++) {
		if (x->t[i].limit >= want)
			continue;
		int r = grow_to(x, &x->t[i], slots);
		if (r < 0)
			return r;
	}
	return 0;
}

int stg_chunkindex_new(struct stg_chunkindex **ret)
{
	struct stg_chunkindex *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	*ret = x;
	return 0;
}

void stg_chunkindex_free(struct stg_chunkindex *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < TABLES; i++)
		free(x->t[i].slots);
	free(x);
}

bool stg_chunkindex_get(const struct stg_chunkindex *x, const struct stg_hash *h,
			struct stg_chunkindex_entry *ret)
{
	const struct table *t = table_of(x, h);
	ptrdiff_t i = find(t, h);
	if (i < 0)
		return false;
	if (ret)
		unpack(slot_at(t, (size_t)i), h->b[0], ret);
	return true;
}

int stg_chunkindex_insert(struct stg_chunkindex *x, const struct stg_chunkindex_entry *e,
			  struct stg_chunkindex_entry *ret_existing)
{
	if (e->segment == 0 || e->len >= STG_CHUNKINDEX_LEN_LIMIT)
		return -EINVAL;
	struct table *t = table_of(x, &e->hash);
	ptrdiff_t i = find(t, &e->hash);
	if (i >= 0) {
		if (ret_existing)
			unpack(slot_at(t, (size_t)i), e->hash.b[0], ret_existing);
		return 0;
	}
	if (t->count + 1 > t->limit) {
		int r = grow(x, t);
		if (r < 0)
			return r;
	}
	uint8_t s[SLOT];
	pack(s, e);
	place(t, s);
	t->count++;
	x->count++;
	return 1;
}

bool stg_chunkindex_set(struct stg_chunkindex *x, const struct stg_chunkindex_entry *e)
{
	struct table *t = table_of(x, &e->hash);
	ptrdiff_t i = find(t, &e->hash);
	if (i < 0 || e->segment == 0 || e->len >= STG_CHUNKINDEX_LEN_LIMIT)
		return false;
	pack(slot_at(t, (size_t)i), e);
	return true;
}

bool stg_chunkindex_touch(struct stg_chunkindex *x, const struct stg_hash *h, uint32_t epoch)
{
	struct table *t = table_of(x, h);
	ptrdiff_t i = find(t, h);
	if (i < 0)
		return false;
	uint8_t *s = slot_at(t, (size_t)i);
	uint32_t v = stg_get_le32(s + LEN_AT) & (STG_CHUNKINDEX_LEN_LIMIT - 1);
	stg_put_le32(s + LEN_AT, v | (epoch % STG_CHUNKINDEX_EPOCHS) << LEN_BITS);
	return true;
}

bool stg_chunkindex_remove(struct stg_chunkindex *x, const struct stg_hash *h)
{
	struct table *t = table_of(x, h);
	ptrdiff_t found = find(t, h);
	if (found < 0)
		return false;
	/* Backward shift: the entries after it that sit past their home move
	 * one slot back, so that no probe ever meets a hole it should pass. */
	size_t i = (size_t)found;
	for (size_t j = next(t, i); !slot_empty(slot_at(t, j)) && displacement(t, j) > 0;
	     i = j, j = next(t, j))
		memcpy(slot_at(t, i), slot_at(t, j), SLOT);
	memset(slot_at(t, i), 0, SLOT);
	t->count--;
	x->count--;
	return true;
}

size_t stg_chunkindex_count(const struct stg_chunkindex *x)
{
	return x->count;
}

size_t stg_chunkindex_memory(const struct stg_chunkindex *x)
{
	return sizeof(*x) + x->memory;
}

size_t stg_chunkindex_memory_peak(const struct stg_chunkindex *x)
{
	return sizeof(*x) + x->peak;
}

int stg_chunkindex_foreach(const struct stg_chunkindex *x,
			   int (*fn)(void *arg, const struct stg_chunkindex_entry *e), void *arg)
{
	for (size_t k = 0; k < TABLES; k++) {
		const struct table *t = &x->t[k];
		for (size_t i = 0; i < t->n; i++) {
			const uint8_t *s = slot_at(t, i);
			if (slot_empty(s))
				continue;
			struct stg_chunkindex_entry e;
			unpack(s, (uint8_t)k, &e);
			int r = fn(arg, &e);
			if (r)
				return r;
		}
	}
	return 0;
}
