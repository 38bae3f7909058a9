/* SPDX-License-Identifier: MIT */
/* Which user may see which chunk: pairs found by both halves only, kept
 * while touched or counted, and every survivor still found after mass
 * removals. */
#include "harness.h"
#include "owners.h"

enum { USERS = 7, CHUNKS = 20000 };

static struct stg_hash hash_of(uint32_t n)
{
	struct stg_hash h;
	stg_hash_compute(&n, sizeof(n), &h);
	return h;
}

static void basics(void)
{
	struct stg_owners *o;
	CHECK_EQ(stg_owners_new(&o), 0);
	struct stg_hash a = hash_of(1), b = hash_of(2);
	CHECK(!stg_owners_has(o, 1000, &a));
	CHECK_EQ(stg_owners_add(o, 1000, &a), 0);
	CHECK_EQ(stg_owners_add(o, 1000, &a), 0); /* again: one pair */
	CHECK_EQ(stg_owners_count(o), 1);
	CHECK(stg_owners_has(o, 1000, &a));
	CHECK(!stg_owners_has(o, 1001, &a)); /* another user */
	CHECK(!stg_owners_has(o, 1000, &b)); /* another chunk */
	CHECK_EQ(stg_owners_add(o, 1001, &a), 0);
	CHECK(stg_owners_has(o, 1001, &a));
	CHECK_EQ(stg_owners_count(o), 2);
	stg_owners_free(o);
	stg_owners_free(NULL);
}

/* Many users sharing chunks; a collection keeps the touched pairs, and one
 * more drops the rest, through many backward shifts. */
static void collection(void)
{
	struct stg_owners *o;
	CHECK_EQ(stg_owners_new(&o), 0);
	stg_owners_counted(o); /* no manifests */
	for (uint32_t c = 0; c < CHUNKS; c++) {
		struct stg_hash h = hash_of(c);
		for (uint32_t u = 0; u < USERS; u++)
			if ((c + u) % 3 == 0)
				CHECK_EQ(stg_owners_add(o, 1000 + u, &h), 0);
	}
	size_t all = stg_owners_count(o);
	CHECK(all > CHUNKS * USERS / 3 - USERS && all < CHUNKS * USERS / 3 + USERS);
	/* Added in this epoch: the next collection keeps everything. */
	stg_owners_gc_begin(o);
	CHECK_EQ(stg_owners_gc_end(o), 0);
	/* Marked: the chunks divisible by 5. */
	stg_owners_gc_begin(o);
	for (uint32_t c = 0; c < CHUNKS; c += 5) {
		struct stg_hash h = hash_of(c);
		for (uint32_t u = 0; u < USERS; u++)
			stg_owners_has(o, 1000 + u, &h);
	}
	/* The rest, added two epochs ago and not marked since, goes. */
	size_t dropped = stg_owners_gc_end(o);
	size_t left = stg_owners_count(o);
	CHECK(left > 0 && dropped > 0);
	CHECK_EQ(dropped + left, all);
	size_t found = 0;
	for (uint32_t c = 0; c < CHUNKS; c++) {
		struct stg_hash h = hash_of(c);
		for (uint32_t u = 0; u < USERS; u++) {
			bool want = (c + u) % 3 == 0 && c % 5 == 0;
			bool got = stg_owners_has(o, 1000 + u, &h);
			if (got != want) {
				CHECK_EQ(got, want);
				goto out;
			}
			found += got;
		}
	}
	CHECK_EQ(found, left);
	/* Counted (a manifest's held entries), a pair stays untouched; the
	 * rest goes after two collections. */
	struct stg_hash kept = hash_of(0);
	CHECK_EQ(stg_owners_ref(o, 1000, &kept), 0);
	CHECK_EQ(stg_owners_ref(o, 1000, &kept), 0);
	CHECK_EQ(stg_owners_refs(o, 1000, &kept), 2);
	for (int i = 0; i < 3; i++) {
		stg_owners_gc_begin(o);
		stg_owners_gc_end(o);
	}
	CHECK_EQ(stg_owners_count(o), 1);
	stg_owners_unref(o, 1000, &kept);
	stg_owners_gc_begin(o);
	CHECK_EQ(stg_owners_gc_end(o), 0);
	/* Its last count taken back, it goes at the next collection. */
	stg_owners_unref(o, 1000, &kept);
	stg_owners_gc_begin(o);
	CHECK_EQ(stg_owners_gc_end(o), 1);
	CHECK_EQ(stg_owners_count(o), 0);
out:
	stg_owners_free(o);
}

int main(void)
{
	basics();
	collection();
	return harness_done();
}
