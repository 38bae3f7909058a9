/* SPDX-License-Identifier: MIT */
/* Retention and collection: pruned versions free the packs only they used. */
#include "builder.h"
#include "catalog.h"
#include "gc.h"
#include "harness.h"
#include "index.h"
#include "pack.h"

static struct stg_path_rule rule = {
	.chunk_size = 65536, .dedup = true, .compress = false,
	.durability = STG_DURABILITY_ASYNC, .keep = 2,
};

#define RECORD (65536 + STG_PACK_ALIGN)

static void stage(struct stg_cache *c, const char *path, uint8_t seed)
{
	uint8_t buf[65536];
	struct stg_builder *b;
	CHECK_EQ(stg_builder_new(c, path, &rule, &b), 0);
	/* Chunk 0 is shared by every version; chunk 1 is the version's own. */
	memset(buf, 0x5a, sizeof(buf));
	CHECK_EQ(stg_builder_add(b, 0, buf, sizeof(buf)), 0);
	memset(buf, seed, sizeof(buf));
	CHECK_EQ(stg_builder_add(b, 1, buf, sizeof(buf)), 0);
	CHECK(stg_builder_commit(b, 2 * sizeof(buf), 0600, 0) > 0);
	stg_builder_free(b);
}

static bool indexed(struct stg_cache *c, uint8_t fill)
{
	uint8_t buf[65536];
	memset(buf, fill, sizeof(buf));
	struct stg_hash h;
	stg_hash_compute(buf, sizeof(buf), &h);
	struct stg_manifest_entry e;
	return stg_index_lookup(c, &h, sizeof(buf), &e) == 1;
}

int main(void)
{
	char *dir = harness_tmpdir();
	struct stg_cache *c;
	CHECK_EQ(stg_cache_open(dir, &c), 0);
	for (uint8_t i = 1; i <= 6; i++)
		stage(c, "/ckpt/x", i);
	/* keep = 2: each commit pruned and collected. Versions 5 and 6 remain:
	 * the pack of version 1 (it holds the shared chunk) and their own. */
	struct stg_gc_result res;
	CHECK_EQ(stg_gc_collect(c, 1, &res), 0);
	CHECK_EQ(res.packs_removed, 0);
	CHECK_EQ(res.packs_kept, 3);
	CHECK_EQ(res.live_chunks, 3);
	CHECK_EQ(stg_cache_usage(c), res.bytes_kept);
	for (uint8_t i = 1; i <= 6; i++)
		CHECK_EQ(indexed(c, i), i >= 5);
	CHECK(indexed(c, 0x5a));

	/* A pinned cache is not collected at commit: the pack waits. */
	int held = stg_gc_pin(c);
	stage(c, "/ckpt/x", 7);
	CHECK(stg_gc_collect(c, 0, &res) == -EAGAIN);
	stg_gc_unpin(held);
	CHECK_EQ(stg_gc_collect(c, 1, &res), 0);
	CHECK_EQ(res.packs_removed, 1);
	CHECK_EQ(res.bytes_removed, RECORD);

	/* Deleting every version lets everything go, the index included. */
	struct stg_catalog_file f;
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/x", false, &f), 0);
	CHECK_EQ(stg_catalog_remove_version(f.dirfd, 6), 0);
	CHECK_EQ(stg_catalog_remove_version(f.dirfd, 7), 0);
	stg_catalog_unlock(&f);
	CHECK_EQ(stg_gc_collect(c, 1, &res), 0);
	CHECK_EQ(res.packs_removed, 3);
	CHECK_EQ(res.packs_kept, 0);
	CHECK_EQ(stg_cache_usage(c), 0);
	CHECK(!indexed(c, 0x5a));

	/* Capacity: two records fit, a version needing a third does not, and the
	 * failed attempt leaves the accounting as it was. */
	c->capacity = 2 * RECORD;
	stage(c, "/ckpt/y", 1);
	CHECK_EQ(stg_cache_usage(c), 2 * RECORD);
	uint8_t big[65536];
	memset(big, 0x77, sizeof(big));
	struct stg_builder *b;
	CHECK_EQ(stg_builder_new(c, "/ckpt/y", &rule, &b), 0);
	CHECK_EQ(stg_builder_add(b, 0, big, sizeof(big)), -ENOSPC);
	stg_builder_free(b);
	CHECK_EQ(stg_cache_usage(c), 2 * RECORD);

	/* Index records: round trip, and damage is refused. */
	struct stg_manifest_entry e = {.raw_len = 65536, .stored_len = 65536, .pack = 42,
				       .offset = 8192};
	e.hash.b[3] = 7;
	uint8_t rec[STG_INDEX_RECORD_SIZE];
	stg_index_encode(&e, rec);
	CHECK(harness_golden("index-record-v1.bin", rec, sizeof(rec)));
	struct stg_manifest_entry d;
	CHECK_EQ(stg_index_decode(rec, &d), 0);
	CHECK(d.pack == 42 && d.offset == 8192 && stg_hash_eq(&d.hash, &e.hash));
	rec[20] ^= 1;
	CHECK(stg_index_decode(rec, &d) == -EBADMSG);
	stg_cache_free(c);
	return harness_done();
}
