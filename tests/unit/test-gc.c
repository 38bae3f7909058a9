/* SPDX-License-Identifier: MIT */
/* Retention and collection: pruned versions free exactly their own chunks. */
#include "builder.h"
#include "catalog.h"
#include "gc.h"
#include "harness.h"

static struct stg_path_rule rule = {
	.chunk_size = 65536, .dedup = true, .compress = false,
	.durability = STG_DURABILITY_ASYNC, .keep = 2,
};

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

int main(void)
{
	char *dir = harness_tmpdir();
	struct stg_cache *c;
	CHECK_EQ(stg_cache_open(dir, &c), 0);
	for (uint8_t i = 1; i <= 6; i++)
		stage(c, "/ckpt/x", i);
	/* keep = 2: each commit pruned and collected; versions 5 and 6 remain,
	 * with the shared chunk and their own. */
	struct stg_gc_result res;
	CHECK_EQ(stg_gc_collect(c, 1, &res), 0);
	CHECK_EQ(res.chunks_removed, 0);
	CHECK_EQ(res.chunks_kept, 3);
	uint8_t buf[65536];
	for (uint8_t i = 1; i <= 6; i++) {
		struct stg_hash h;
		memset(buf, i, sizeof(buf));
		stg_hash_compute(buf, sizeof(buf), &h);
		CHECK_EQ(stg_cache_chunk_stat(c, &h, sizeof(buf), NULL), i >= 5);
	}

	/* A pinned cache is not collected at commit: the chunks wait. */
	int held = stg_gc_pin(c);
	stage(c, "/ckpt/x", 7);
	stg_gc_unpin(held);
	CHECK_EQ(stg_gc_collect(c, 1, &res), 0);
	CHECK_EQ(res.chunks_removed, 1);
	CHECK_EQ(res.bytes_removed, 65536 + STG_CHUNK_HEADER_SIZE);

	/* While a version is being built, nothing is collected. */
	int pin = stg_gc_pin(c);
	CHECK(pin >= 0);
	CHECK(stg_gc_collect(c, 0, &res) == -EAGAIN);
	stg_gc_unpin(pin);
	CHECK_EQ(stg_gc_collect(c, 0, &res), 0);
	CHECK_EQ(res.chunks_removed, 0);

	/* Deleting every version lets everything go. */
	struct stg_catalog_file f;
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/x", false, &f), 0);
	CHECK_EQ(stg_catalog_remove_version(f.dirfd, 6), 0);
	CHECK_EQ(stg_catalog_remove_version(f.dirfd, 7), 0);
	stg_catalog_unlock(&f);
	CHECK_EQ(stg_gc_collect(c, 1, &res), 0);
	CHECK_EQ(res.chunks_removed, 3);
	CHECK_EQ(res.chunks_kept, 0);
	CHECK_EQ(stg_cache_usage(c), 0);

	/* Capacity: two chunk objects fit, a version needing a third does not,
	 * and the failed attempt leaves the accounting as it was. */
	c->capacity = 2 * (65536 + STG_CHUNK_HEADER_SIZE);
	stage(c, "/ckpt/y", 1);
	CHECK_EQ(stg_cache_usage(c), 2 * (65536 + STG_CHUNK_HEADER_SIZE));
	uint8_t big[65536];
	memset(big, 0x77, sizeof(big));
	struct stg_builder *b;
	CHECK_EQ(stg_builder_new(c, "/ckpt/y", &rule, &b), 0);
	CHECK_EQ(stg_builder_add(b, 0, big, sizeof(big)), -ENOSPC);
	stg_builder_free(b);
	CHECK_EQ(stg_cache_usage(c), 2 * (65536 + STG_CHUNK_HEADER_SIZE));
	stg_cache_free(c);
	return harness_done();
}
