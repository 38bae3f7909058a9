/* SPDX-License-Identifier: MIT */
/* The server's chunk index: lookups, backward-shift deletion against a
 * reference model, and memory per entry at a million entries. */
#include "chunkindex.h"
#include "harness.h"

static void random_hash(struct stg_hash *h)
{
	uint64_t a = harness_random(), b = harness_random();
	memcpy(h->b, &a, 8);
	memcpy(h->b + 8, &b, 8);
}

static struct stg_chunkindex_entry entry_of(const struct stg_hash *h, uint32_t n)
{
	return (struct stg_chunkindex_entry){
		.hash = *h, .segment = n + 1, .offset = n * 3, .len = n * 7, .epoch = n};
}

static void basics(void)
{
	struct stg_chunkindex *x;
	CHECK_EQ(stg_chunkindex_new(0, &x), 0);
	struct stg_hash a, b;
	random_hash(&a);
	random_hash(&b);
	struct stg_chunkindex_entry ea = entry_of(&a, 1), *e;
	CHECK(stg_chunkindex_find(x, &a) == NULL);
	CHECK_EQ(stg_chunkindex_insert(x, &ea, &e), 1);
	CHECK(e && stg_hash_eq(&e->hash, &a) && e->segment == 2 && e->offset == 3);
	struct stg_chunkindex_entry other = entry_of(&a, 9);
	CHECK_EQ(stg_chunkindex_insert(x, &other, &e), 0);
	CHECK_EQ(e->segment, 2); /* the first one stays */
	struct stg_chunkindex_entry zero = {.hash = b};
	CHECK_EQ(stg_chunkindex_insert(x, &zero, &e), -EINVAL);
	CHECK_EQ(stg_chunkindex_count(x), 1);
	CHECK(stg_chunkindex_find(x, &b) == NULL);
	CHECK(!stg_chunkindex_remove(x, &b));
	CHECK(stg_chunkindex_remove(x, &a));
	CHECK(stg_chunkindex_find(x, &a) == NULL);
	CHECK_EQ(stg_chunkindex_count(x), 0);
	stg_chunkindex_free(x);
	stg_chunkindex_free(NULL);
}

static int count_entries(void *arg, struct stg_chunkindex_entry *e)
{
	(void)e;
	(*(size_t *)arg)++;
	return 0;
}

/* Random inserts and removes over a small key universe, so that clusters
 * form, wrap around the table's end and shrink again, checked after every
 * operation against a plain array. Keys share their first 8 bytes in
 * groups: those land on the same home slot. */
static void against_reference(void)
{
	enum { KEYS = 3000, OPS = 200000 };
	static struct stg_hash keys[KEYS];
	static bool present[KEYS];
	for (int i = 0; i < KEYS; i++) {
		random_hash(&keys[i]);
		if (i % 4 && i > 0)
			memcpy(keys[i].b, keys[i - 1].b, 8);
	}
	struct stg_chunkindex *x;
	CHECK_EQ(stg_chunkindex_new(0, &x), 0);
	size_t n = 0;
	int bad = 0;
	for (int op = 0; op < OPS; op++) {
		int k = (int)(harness_random() % KEYS);
		struct stg_chunkindex_entry *e;
		if (harness_random() % 100 < 55) {
			struct stg_chunkindex_entry ent = entry_of(&keys[k], (uint32_t)k);
			int r = stg_chunkindex_insert(x, &ent, &e);
			bad += r != (present[k] ? 0 : 1);
			n += !present[k];
			present[k] = true;
		} else {
			bad += stg_chunkindex_remove(x, &keys[k]) != present[k];
			n -= present[k];
			present[k] = false;
		}
		/* Every key is found exactly when present, with its own value. */
		if (op % 97 == 0 || op > OPS - 100) {
			for (int i = 0; i < KEYS; i++) {
				e = stg_chunkindex_find(x, &keys[i]);
				if (present[i])
					bad += !e || e->segment != (uint32_t)i + 1 || e->len != (uint32_t)i * 7;
				else
					bad += e != NULL;
			}
		}
		bad += stg_chunkindex_count(x) != n;
	}
	size_t seen = 0;
	CHECK_EQ(stg_chunkindex_foreach(x, count_entries, &seen), 0);
	CHECK_EQ(seen, n);
	CHECK_EQ(bad, 0);
	stg_chunkindex_free(x);
}

static void memory_per_entry(void)
{
	enum { N = 1000000 };
	struct stg_chunkindex *x;
	CHECK_EQ(stg_chunkindex_new(0, &x), 0);
	struct stg_hash *keys = malloc(N * sizeof(*keys));
	double worst = 0;
	for (uint32_t i = 0; i < N; i++) {
		random_hash(&keys[i]);
		struct stg_chunkindex_entry ent = entry_of(&keys[i], i), *e;
		CHECK_EQ(stg_chunkindex_insert(x, &ent, &e) == 1, 1);
		/* Right after each growth is the worst case. */
		double per = (double)stg_chunkindex_memory(x) / (i + 1);
		if (i > 1000 && per > worst)
			worst = per;
	}
	CHECK_EQ(stg_chunkindex_count(x), N);
	double per = (double)stg_chunkindex_memory(x) / N;
	printf("index: %zu entries, %zu bytes, %.1f bytes per entry (worst after growth %.1f)\n",
	       stg_chunkindex_count(x), stg_chunkindex_memory(x), per, worst);
	CHECK(per <= 64);
	CHECK(worst <= 64);
	int missing = 0;
	for (uint32_t i = 0; i < N; i++)
		missing += stg_chunkindex_find(x, &keys[i]) == NULL;
	CHECK_EQ(missing, 0);
	for (uint32_t i = 0; i < N; i += 2)
		stg_chunkindex_remove(x, &keys[i]);
	missing = 0;
	for (uint32_t i = 0; i < N; i++)
		missing += (stg_chunkindex_find(x, &keys[i]) == NULL) != (i % 2 == 0);
	CHECK_EQ(missing, 0);
	CHECK_EQ(stg_chunkindex_count(x), N / 2);
	free(keys);
	stg_chunkindex_free(x);
}

int main(void)
{
	basics();
	against_reference();
	memory_per_entry();
	return harness_done();
}
