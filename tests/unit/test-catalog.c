/* SPDX-License-Identifier: MIT */
/* The cache and its catalog: staging versions, dedup, rename, deletion. */
#include <fcntl.h>
#include <sys/stat.h>

#include "builder.h"
#include "catalog.h"
#include "harness.h"
#include "materialize.h"
#include "version.h"

static struct stg_path_rule rule = {
	.chunk_size = 65536, .dedup = true, .compress = true,
	.durability = STG_DURABILITY_LOCAL, .keep = 3,
};

static int64_t stage(struct stg_cache *c, const char *path, const uint8_t *data, size_t n,
		     struct stg_builder_stats *ret_stats)
{
	struct stg_builder *b;
	CHECK_EQ(stg_builder_new(c, path, &rule, &b), 0);
	for (size_t off = 0, i = 0; off < n; off += 65536, i++)
		CHECK_EQ(stg_builder_add(b, i, data + off, n - off < 65536 ? n - off : 65536), 0);
	int64_t v = stg_builder_commit(b, n, 0644, 1000);
	if (ret_stats)
		*ret_stats = *stg_builder_stats(b);
	stg_builder_free(b);
	return v;
}

/* The version's bytes, rebuilt through a temporary file. */
static uint8_t *read_version(struct stg_cache *c, const char *path, uint64_t version, size_t *n)
{
	struct stg_catalog_file f;
	CHECK_EQ(stg_catalog_lock(c, path, false, &f), 0);
	struct stg_manifest m;
	int r = stg_catalog_read(f.dirfd, version, &m);
	stg_catalog_unlock(&f);
	CHECK_EQ(r, 0);
	if (r)
		return NULL;
	FILE *tmp = tmpfile();
	CHECK_EQ(stg_materialize(c, &m, fileno(tmp), NULL, NULL, NULL), 0);
	uint8_t *buf = malloc(m.size + 1);
	CHECK_EQ(pread(fileno(tmp), buf, m.size, 0), (ssize_t)m.size);
	*n = m.size;
	fclose(tmp);
	stg_manifest_done(&m);
	return buf;
}

int main(void)
{
	char *dir = harness_tmpdir();
	char cdir[4200];
	snprintf(cdir, sizeof(cdir), "%s/cache/deeper", dir);
	struct stg_cache *c;
	CHECK_EQ(stg_cache_open(cdir, &c), 0);

	size_t n = 5 * 65536 + 123;
	uint8_t *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (uint8_t)((i * 2654435761u) >> 13);
	struct stg_builder_stats st;
	int64_t a1 = stage(c, "/ckpt/a", data, n, &st);
	CHECK_EQ(stg_version_seq((uint64_t)a1), 1);
	CHECK_EQ(st.new_chunks, 6);
	/* One changed chunk: only it is stored again. */
	data[2 * 65536 + 5] ^= 0xff;
	int64_t a2 = stage(c, "/ckpt/a", data, n, &st);
	CHECK_EQ(stg_version_seq((uint64_t)a2), 2);
	CHECK(a2 > a1);
	CHECK_EQ(st.new_chunks, 1);
	CHECK_EQ(st.dedup_prev, 5);
	/* Another file with the same bytes: everything comes from the cache. */
	CHECK_EQ(stg_version_seq((uint64_t)stage(c, "/ckpt/b", data, n, &st)), 1);
	CHECK_EQ(st.new_chunks, 0);
	CHECK_EQ(st.dedup_cache, 6);

	size_t got;
	uint8_t *back = read_version(c, "/ckpt/a", (uint64_t)a2, &got);
	CHECK_EQ(got, n);
	CHECK(back && memcmp(back, data, n) == 0);
	free(back);
	data[2 * 65536 + 5] ^= 0xff;
	back = read_version(c, "/ckpt/a", (uint64_t)a1, &got);
	CHECK(back && memcmp(back, data, n) == 0);
	free(back);

	struct stg_file_state s;
	CHECK_EQ(stg_catalog_state(c, "/ckpt/a", &s), 0);
	CHECK(s.exists && !s.deleted);
	CHECK_EQ(s.latest, (uint64_t)a2);
	CHECK_EQ(s.size, n);
	CHECK_EQ(s.ino, stg_catalog_ino("/ckpt/a"));
	CHECK_EQ(stg_catalog_state(c, "/ckpt/none", &s), 0);
	CHECK(!s.exists);

	/* Rename onto a fresh name moves every version... */
	CHECK_EQ(stg_catalog_rename(c, "/ckpt/a", "/ckpt/c", false, 3), 0);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/a", &s), 0);
	CHECK(!s.exists);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/c", &s), 0);
	CHECK_EQ(s.latest, (uint64_t)a2);
	/* ...onto an existing one, the newest becomes its next version. */
	CHECK_EQ(stg_catalog_rename(c, "/ckpt/b", "/ckpt/c", false, 3), 0);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/c", &s), 0);
	CHECK(s.latest > (uint64_t)a2);
	CHECK_EQ(stg_version_seq(s.latest), 3);
	CHECK(stg_catalog_rename(c, "/ckpt/b", "/ckpt/c", false, 3) == -ENOENT);

	/* Deleting hides; publishing again shows. */
	struct stg_catalog_file f;
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/c", false, &f), 0);
	CHECK_EQ(stg_catalog_set_deleted(f.dirfd, true), 0);
	stg_catalog_unlock(&f);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/c", &s), 0);
	CHECK(s.exists && s.deleted);
	int64_t c4 = stage(c, "/ckpt/c", data, n, NULL);
	CHECK_EQ(stg_version_seq((uint64_t)c4), 4);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/c", &s), 0);
	CHECK(!s.deleted);

	/* keep = 3: version 1 went when version 4 came. */
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/c", false, &f), 0);
	uint64_t *v;
	size_t nv;
	CHECK_EQ(stg_catalog_versions(f.dirfd, &v, &nv), 0);
	CHECK_EQ(nv, 3);
	CHECK_EQ(v[0], (uint64_t)a2);
	CHECK_EQ(v[2], (uint64_t)c4);
	free(v);
	/* A corrupt manifest is reported, not trusted. */
	char c4name[40];
	stg_catalog_manifest_name((uint64_t)c4, c4name);
	int mfd = openat(f.dirfd, c4name, O_RDWR);
	CHECK(mfd >= 0);
	uint8_t byte;
	CHECK_EQ(pread(mfd, &byte, 1, 80), 1);
	byte ^= 0x01;
	CHECK_EQ(pwrite(mfd, &byte, 1, 80), 1);
	close(mfd);
	struct stg_manifest m;
	CHECK(stg_catalog_read(f.dirfd, (uint64_t)c4, &m) == -EBADMSG);
	stg_catalog_unlock(&f);
	CHECK(stg_catalog_state(c, "/ckpt/c", &s) == -EBADMSG);

	/* Ids the servers were seen to hold (a replacement node restored from
	 * them) come before what this node writes next, whatever its clock. */
	uint64_t far = stg_version_mint(0, 0, INT64_C(4000000000) * 1000000000);
	CHECK_EQ(stg_catalog_note_seen(c, "/ckpt/seen", far), 0);
	CHECK_EQ(stg_catalog_note_seen(c, "/ckpt/seen", 5), 0); /* older: ignored */
	int64_t after = stage(c, "/ckpt/seen", data, n, NULL);
	CHECK(after > 0 && (uint64_t)after > far);
	CHECK_EQ(stg_version_seq((uint64_t)after), 2);

	/* A cache of another format is refused. */
	char fmt[4300];
	snprintf(fmt, sizeof(fmt), "%s/FORMAT", cdir);
	FILE *ff = fopen(fmt, "w");
	fputs("stagehand-cache 99\n", ff);
	fclose(ff);
	struct stg_cache *c2;
	CHECK(stg_cache_open(cdir, &c2) == -EPROTO);

	stg_cache_free(c);
	free(data);
	return harness_done();
}
