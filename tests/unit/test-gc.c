/* SPDX-License-Identifier: MIT */
/* Retention and collection: pruned versions free the packs only they used. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builder.h"
#include "catalog.h"
#include "gc.h"
#include "harness.h"
#include "index.h"
#include "pack.h"
#include "util.h"

static struct stg_path_rule rule = {
	.chunk_size = 65536, .dedup = true, .codec = {0, 0, 0} /* off */,
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

/* Rewrites the only version of path with format as its manifest format,
 * its checksum made right (or, damaged, left wrong). */
static void set_format(struct stg_cache *c, const char *path, uint16_t format, bool damaged)
{
	struct stg_catalog_file f;
	CHECK_EQ(stg_catalog_lock(c, path, false, &f), 0);
	uint64_t *v;
	size_t nv;
	CHECK_EQ(stg_catalog_versions(f.dirfd, &v, &nv), 0);
	CHECK_EQ(nv, 1);
	char name[40];
	stg_catalog_manifest_name(v[0], name);
	free(v);
	uint8_t *mf;
	size_t len;
	CHECK_EQ(stg_read_file(f.dirfd, name, 1 << 20, &mf, &len), 0);
	stg_put_le16(mf + 4, format);
	stg_put_le64(mf + len - 8, stg_hash64(mf, len - 8) ^ damaged);
	CHECK_EQ(stg_write_file_atomic(f.dirfd, name, mf, len, STG_WRITE_CACHED), 0);
	free(mf);
	stg_catalog_unlock(&f);
}

/* A collection replaces only the index buckets whose records changed: with
 * nothing changed since the last one, every bucket is the same file after
 * it (a hard link made before still shares its inode). */
static void check_buckets_kept(struct stg_cache *c, const char *dir)
{
	char links[4200], name[4500];
	snprintf(links, sizeof(links), "%s/links", dir);
	CHECK_EQ(mkdir(links, 0700), 0);
	DIR *d = fdopendir(dup(c->index_fd));
	CHECK(d != NULL);
	struct dirent *de;
	int n = 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(name, sizeof(name), "%s/%s", links, de->d_name);
		CHECK_EQ(linkat(c->index_fd, de->d_name, AT_FDCWD, name, 0), 0);
		n++;
	}
	CHECK(n > 0);
	struct stg_gc_result res;
	CHECK_EQ(stg_gc_collect(c, 1, &res), 0);
	rewinddir(d);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		struct stat st;
		CHECK_EQ(fstatat(c->index_fd, de->d_name, &st, 0), 0);
		CHECK_EQ(st.st_nlink, 2);
		snprintf(name, sizeof(name), "%s/%s", links, de->d_name);
		CHECK_EQ(unlink(name), 0);
		n--;
	}
	CHECK_EQ(n, 0);
	closedir(d);
	CHECK_EQ(rmdir(links), 0);
}

/* A manifest of a later format (a newer stagehand's, its checksum intact)
 * names chunks this one cannot know: nothing is collected. Damaged into
 * one (its checksum wrong), it is corrupt, and its chunks go. */
static void test_newer_manifest(const char *dir)
{
	char cdir[4200];
	snprintf(cdir, sizeof(cdir), "%s/newer", dir);
	struct stg_cache *c;
	CHECK_EQ(stg_cache_open(cdir, &c), 0);
	stage(c, "/ckpt/n", 1);
	set_format(c, "/ckpt/n", STG_MANIFEST_FORMAT + 1, false);
	struct stg_gc_result res;
	uint64_t packs, bytes;
	CHECK_EQ(stg_gc_collect(c, 1, &res), -EPROTONOSUPPORT);
	stg_cache_count_packs(c, &packs, &bytes);
	CHECK_EQ(packs, 1);
	set_format(c, "/ckpt/n", STG_MANIFEST_FORMAT + 1, true);
	CHECK_EQ(stg_gc_collect(c, 1, &res), 0);
	stg_cache_count_packs(c, &packs, &bytes);
	CHECK_EQ(packs, 0);
	stg_cache_free(c);
}

/* `usage` (docs/FORMAT.md): the count, then the mount it was last made
 * exact on. A count without a mount (an older stagehand's 8 bytes) or of
 * another mount (after a power cut) is made again at open; one of this
 * mount is trusted. */
static void reopen_usage(const char *cdir, uint64_t count, const uint8_t *stamp,
			 uint64_t want, off_t want_size)
{
	char file[4300];
	snprintf(file, sizeof(file), "%s/usage", cdir);
	int fd = open(file, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	uint8_t b[16];
	stg_put_le64(b, count);
	if (stamp)
		memcpy(b + 8, stamp, 8);
	CHECK_EQ(ftruncate(fd, 0), 0);
	CHECK_EQ(pwrite(fd, b, stamp ? 16 : 8, 0), stamp ? 16 : 8);
	close(fd);
	struct stg_cache *c;
	CHECK_EQ(stg_cache_open(cdir, &c), 0);
	CHECK_EQ(stg_cache_usage(c), want);
	stg_cache_free(c);
	struct stat st;
	CHECK_EQ(stat(file, &st), 0);
	CHECK_EQ(st.st_size, want_size);
}

static void test_usage_file(const char *dir)
{
	char cdir[4200], file[4300];
	snprintf(cdir, sizeof(cdir), "%s/recount", dir);
	snprintf(file, sizeof(file), "%s/usage", cdir);
	struct stg_cache *c;
	CHECK_EQ(stg_cache_open(cdir, &c), 0);
	stage(c, "/ckpt/u", 1);
	uint64_t packs, bytes;
	stg_cache_count_packs(c, &packs, &bytes);
	CHECK(bytes > 0);
	CHECK_EQ(stg_cache_usage(c), bytes);
	stg_cache_free(c);
	uint8_t stamp[8];
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK_EQ(pread(fd, stamp, 8, 8), 8);
	close(fd);
	reopen_usage(cdir, 12345, NULL, bytes, 16);
	reopen_usage(cdir, 99, stamp, 99, 16);
	stamp[0] ^= 0xff;
	reopen_usage(cdir, 99, stamp, bytes, 16);
}

int main(void)
{
	char *dir = harness_tmpdir();
	test_newer_manifest(dir);
	test_usage_file(dir);
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
	check_buckets_kept(c, dir);

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
	uint64_t *v;
	size_t nv;
	CHECK_EQ(stg_catalog_versions(f.dirfd, &v, &nv), 0);
	CHECK_EQ(nv, 2);
	for (size_t i = 0; i < nv; i++)
		CHECK_EQ(stg_catalog_remove_version(f.dirfd, v[i]), 0);
	free(v);
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

	/* Compaction: a pack mostly unreferenced after pruning gives its live
	 * records to a new pack, and the manifests follow them. */
	c->capacity = 0;
	struct stg_path_rule one = rule;
	one.keep = 1;
	uint8_t *file = malloc(32 * 65536);
	for (size_t i = 0; i < 32 * 65536; i++)
		file[i] = (uint8_t)(i * 7 + i / 65536 * 131 + (i >> 9));
	CHECK_EQ(stg_builder_new(c, "/ckpt/z", &one, &b), 0);
	for (int k = 0; k < 32; k++)
		CHECK_EQ(stg_builder_add(b, (uint64_t)k, file + k * 65536, 65536), 0);
	CHECK(stg_builder_commit(b, 32 * 65536, 0644, 0) > 0);
	stg_builder_free(b);
	for (int k = 0; k < 20; k++)
		file[k * 65536 + 5] ^= 0xff; /* version 2 changes 20 of 32 chunks */
	CHECK_EQ(stg_builder_new(c, "/ckpt/z", &one, &b), 0);
	for (int k = 0; k < 32; k++)
		CHECK_EQ(stg_builder_add(b, (uint64_t)k, file + k * 65536, 65536), 0);
	int64_t z2 = stg_builder_commit(b, 32 * 65536, 0644, 0);
	CHECK(z2 > 0);
	stg_builder_free(b);
	/* The commit pruned version 1 and collected: its pack (12 of 32 records
	 * alive) was compacted. What remains is exactly the live records. */
	CHECK_EQ(stg_gc_collect(c, 1, &res), 0);
	CHECK_EQ(res.live_chunks, 32 + 2); /* z's 32, y's 2 */
	CHECK_EQ(stg_cache_usage(c), res.live_bytes);
	CHECK_EQ(res.bytes_kept, res.live_bytes);
	struct stg_catalog_file zf;
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/z", false, &zf), 0);
	struct stg_manifest zm;
	CHECK_EQ(stg_catalog_read(zf.dirfd, (uint64_t)z2, &zm), 0);
	stg_catalog_unlock(&zf);
	uint8_t out[65536], scratch[70000];
	int bad = 0;
	for (int k = 0; k < 32; k++)
		bad += stg_pack_read(c, &zm.entries[k], out, scratch) != 0 ||
		       memcmp(out, file + k * 65536, 65536) != 0;
	CHECK_EQ(bad, 0);
	stg_manifest_done(&zm);
	free(file);

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
