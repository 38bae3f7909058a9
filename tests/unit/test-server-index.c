/* SPDX-License-Identifier: MIT */
/* The server's chunk index: lookups, Robin Hood probing and backward-shift
 * deletion against a reference model, and memory per entry at a million
 * entries, while it grows included. */
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
	CHECK_EQ(stg_chunkindex_new(&x), 0);
	struct stg_hash a, b;
	random_hash(&a);
	random_hash(&b);
	struct stg_chunkindex_entry ea = entry_of(&a, 1), e;
	CHECK(!stg_chunkindex_get(x, &a, &e));
	CHECK_EQ(stg_chunkindex_insert(x, &ea, NULL), 1);
	CHECK(stg_chunkindex_get(x, &a, &e));
	CHECK(stg_hash_eq(&e.hash, &a) && e.segment == 2 && e.offset == 3 && e.len == 7 &&
	      e.epoch == 1);
	struct stg_chunkindex_entry other = entry_of(&a, 9);
	CHECK_EQ(stg_chunkindex_insert(x, &other, &e), 0);
	CHECK_EQ(e.segment, 2); /* the first one stays */
	struct stg_chunkindex_entry zero = {.hash = b};
	CHECK_EQ(stg_chunkindex_insert(x, &zero, NULL), -EINVAL);
	struct stg_chunkindex_entry big = entry_of(&b, 1);
	big.len = STG_CHUNKINDEX_LEN_LIMIT;
	CHECK_EQ(stg_chunkindex_insert(x, &big, NULL), -EINVAL);
	CHECK_EQ(stg_chunkindex_count(x), 1);
	CHECK(!stg_chunkindex_get(x, &b, NULL));
	/* Set and mark change the entry in place; the epoch wraps. */
	other.len = STG_CHUNKINDEX_LEN_LIMIT - 1;
	CHECK(stg_chunkindex_set(x, &other));
	CHECK(stg_chunkindex_touch(x, &a, 33));
	CHECK(stg_chunkindex_get(x, &a, &e));
	CHECK(e.segment == 10 && e.offset == 27 && e.len == STG_CHUNKINDEX_LEN_LIMIT - 1);
	CHECK_EQ(e.epoch, 1);
	CHECK_EQ(stg_chunkindex_age(&e, 34), 1);
	CHECK_EQ(stg_chunkindex_age(&e, 32), STG_CHUNKINDEX_EPOCHS - 1);
	CHECK(!stg_chunkindex_touch(x, &b, 1));
	CHECK(!stg_chunkindex_remove(x, &b));
	CHECK(stg_chunkindex_remove(x, &a));
	CHECK(!stg_chunkindex_get(x, &a, NULL));
	CHECK_EQ(stg_chunkindex_count(x), 0);
	stg_chunkindex_free(x);
	stg_chunkindex_free(NULL);
}

static int count_entries(void *arg, const struct stg_chunkindex_entry *e)
{
	(void)e;
	(*(size_t *)arg)++;
	return 0;
}

/* Random inserts and removes over a small key universe, so that clusters
 * form, wrap around a table's end and shrink again, checked after every
 * operation against a plain array. Keys share their first 9 bytes in
 * groups: those land in the same table on the same home slot. */
static void against_reference(void)
{
	enum { KEYS = 3000, OPS = 200000 };
	static struct stg_hash keys[KEYS];
	static bool present[KEYS];
	for (int i = 0; i < KEYS; i++) {
		random_hash(&keys[i]);
		if (i % 4 && i > 0)
			memcpy(keys[i].b, keys[i - 1].b, 9);
	}
	struct stg_chunkindex *x;
	CHECK_EQ(stg_chunkindex_new(&x), 0);
	size_t n = 0;
	int bad = 0;
	for (int op = 0; op < OPS; op++) {
		int k = (int)(harness_random() % KEYS);
		struct stg_chunkindex_entry e;
		if (harness_random() % 100 < 55) {
			struct stg_chunkindex_entry ent = entry_of(&keys[k], (uint32_t)k);
			int r = stg_chunkindex_insert(x, &ent, NULL);
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
				bool found = stg_chunkindex_get(x, &keys[i], &e);
				if (present[i])
					bad += !found || e.segment != (uint32_t)i + 1 ||
					       e.len != (uint32_t)i * 7 ||
					       !stg_hash_eq(&e.hash, &keys[i]);
				else
					bad += found;
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
	CHECK_EQ(stg_chunkindex_new(&x), 0);
	struct stg_hash *keys = malloc(N * sizeof(*keys));
	double worst = 0, worst_peak = 0;
	size_t peak = 0;
	for (uint32_t i = 0; i < N; i++) {
		random_hash(&keys[i]);
		struct stg_chunkindex_entry ent = entry_of(&keys[i], i);
		CHECK_EQ(stg_chunkindex_insert(x, &ent, NULL) == 1, 1);
		if (i < 100000)
			continue;
		/* Right after a growth is the worst case; during one, the
		 * old and new slots of the table growing coexist. */
		double per = (double)stg_chunkindex_memory(x) / (i + 1);
		if (per > worst)
			worst = per;
		if (stg_chunkindex_memory_peak(x) > peak) {
			peak = stg_chunkindex_memory_peak(x);
			per = (double)peak / (i + 1);
			if (per > worst_peak)
				worst_peak = per;
		}
	}
	CHECK_EQ(stg_chunkindex_count(x), N);
	double per = (double)stg_chunkindex_memory(x) / N;
	printf("index: %zu entries, %zu bytes, %.1f bytes per entry (worst %.1f, "
	       "while growing %.1f)\n", stg_chunkindex_count(x), stg_chunkindex_memory(x), per,
	       worst, worst_peak);
	CHECK(per <= 32);
	CHECK(worst <= 32);
	CHECK(worst_peak <= 40);
	int missing = 0;
	for (uint32_t i = 0; i < N; i++)
		missing += !stg_chunkindex_get(x, &keys[i], NULL);
	CHECK_EQ(missing, 0);
	for (uint32_t i = 0; i < N; i += 2)
		stg_chunkindex_remove(x, &keys[i]);
	missing = 0;
	for (uint32_t i = 0; i < N; i++)
		missing += !stg_chunkindex_get(x, &keys[i], NULL) != (i % 2 == 0);
	CHECK_EQ(missing, 0);
	CHECK_EQ(stg_chunkindex_count(x), N / 2);
	free(keys);
	stg_chunkindex_free(x);
}

/* Sized at once for the entries to come (a start from hints): no growth
 * while they go in, and no more memory per entry than growing would take. */
static void reserved(void)
{
	enum { N = 500000 };
	struct stg_chunkindex *x;
	CHECK_EQ(stg_chunkindex_new(&x), 0);
	CHECK_EQ(stg_chunkindex_reserve(x, N), 0);
	size_t before = stg_chunkindex_memory(x);
	int bad = 0;
	for (uint32_t i = 0; i < N; i++) {
		struct stg_hash h;
		random_hash(&h);
		struct stg_chunkindex_entry ent = entry_of(&h, i);
		bad += stg_chunkindex_insert(x, &ent, NULL) != 1;
	}
	CHECK_EQ(bad, 0);
	CHECK_EQ(stg_chunkindex_memory(x), before);
	double per = (double)stg_chunkindex_memory(x) / N;
	printf("index reserved for %d entries: %.1f bytes per entry\n", N, per);
	CHECK(per <= 32);
	CHECK_EQ(stg_chunkindex_reserve(x, N / 2), 0); /* no shrinking */
	CHECK_EQ(stg_chunkindex_memory(x), before);
	stg_chunkindex_free(x);
}

int main(void)
{
	basics();
	against_reference();
	memory_per_entry();
	reserved();
	return harness_done();
}
