/* SPDX-License-Identifier: MIT */
/* The cache and its catalog: staging versions, dedup, rename, deletion. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#include "builder.h"
#include "catalog.h"
#include "harness.h"
#include "make-part.h"
#include "materialize.h"
#include "queue.h"
#include "tombstone.h"
#include "util.h"
#include "version.h"

static struct stg_path_rule rule = {
	.chunk_size = 65536, .dedup = true, .codec = {1, 0, 0} /* lz4 */,
	.durability = STG_DURABILITY_LOCAL, .keep = 3,
};

/* Stages a version, open (as fsync makes) or superseding the open version
 * replaces (0: none). */
static int64_t stage_open(struct stg_cache *c, const char *path, const uint8_t *data, size_t n,
			  bool open, uint64_t replaces, struct stg_builder_stats *ret_stats)
{
	struct stg_builder *b;
	CHECK_EQ(stg_builder_new(c, path, &rule, &b), 0);
	stg_builder_set_open(b, open, replaces);
	for (size_t off = 0, i = 0; off < n; off += 65536, i++)
		CHECK_EQ(stg_builder_add(b, i, data + off, n - off < 65536 ? n - off : 65536), 0);
	int64_t v = stg_builder_commit(b, n, 0644, 1000);
	if (ret_stats)
		*ret_stats = *stg_builder_stats(b);
	stg_builder_free(b);
	return v;
}

static int64_t stage(struct stg_cache *c, const char *path, const uint8_t *data, size_t n,
		     struct stg_builder_stats *ret_stats)
{
	return stage_open(c, path, data, n, false, 0, ret_stats);
}

/* Is version of path queued? */
static bool queued(struct stg_cache *c, const char *path, uint64_t version)
{
	char id[STG_HASH_HEX_LEN + 1];
	stg_catalog_file_id(path, id);
	struct stg_queue_item *items;
	size_t n;
	bool found = false;
	CHECK_EQ(stg_queue_list(c, &items, &n), 0);
	for (size_t i = 0; i < n; i++)
		found |= strcmp(items[i].id, id) == 0 && items[i].version == version;
	free(items);
	return found;
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

/* The newest manifest zeroed, as a disk that dropped its writes leaves it:
 * the state says so, and is the version's before it. */
static void check_damaged_state(struct stg_cache *c, const char *path, uint64_t before,
				uint64_t newest)
{
	char id[STG_HASH_HEX_LEN + 1], name[40];
	stg_catalog_file_id(path, id);
	stg_catalog_manifest_name(newest, name);
	int dirfd = openat(c->files_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(dirfd >= 0);
	int fd = openat(dirfd, name, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	uint8_t saved[4096], zeros[4096] = {0};
	ssize_t len = pread(fd, saved, sizeof(saved), 0);
	CHECK(len > 0 && len < (ssize_t)sizeof(saved));
	CHECK_EQ(pwrite(fd, zeros, (size_t)len, 0), len);
	struct stg_file_state s;
	CHECK_EQ(stg_catalog_state(c, path, &s), -EBADMSG);
	CHECK_EQ(s.damaged, newest);
	CHECK(s.exists);
	CHECK_EQ(s.latest, before);
	CHECK_EQ(pwrite(fd, saved, (size_t)len, 0), len);
	close(fd);
	close(dirfd);
	CHECK_EQ(stg_catalog_state(c, path, &s), 0);
	CHECK_EQ(s.damaged, 0);
	CHECK_EQ(s.latest, newest);
}

/* The flusher re-mints a version whose id a server holds for another node. */
static void test_remint(struct stg_cache *c, const uint8_t *data, size_t n)
{
	const uint64_t step = UINT64_C(1) << STG_VERSION_SEQ_BITS;
	c->ship = true; /* versions are queued */
	uint64_t r1 = (uint64_t)stage(c, "/ckpt/r", data, n, NULL);
	uint64_t r2 = (uint64_t)stage(c, "/ckpt/r", data, n / 2, NULL);
	CHECK(r1 > 0 && r2 > r1);
	struct stg_catalog_file f;
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/r", false, &f), 0);
	CHECK_EQ(stg_queue_mark(f.dirfd, r1, "a:1"), 0);
	stg_catalog_unlock(&f);

	/* The next id with its sequence number, below the next version. */
	uint64_t n1 = 0;
	CHECK_EQ(stg_catalog_remint(c, "/ckpt/r", r1, &n1), 0);
	CHECK_EQ(n1, r1 + step);
	CHECK_EQ(stg_version_seq(n1), stg_version_seq(r1));
	CHECK(n1 < r2);
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/r", false, &f), 0);
	uint64_t *v;
	size_t nv;
	CHECK_EQ(stg_catalog_versions(f.dirfd, &v, &nv), 0);
	CHECK_EQ(nv, 2);
	CHECK_EQ(v[0], n1);
	CHECK_EQ(v[1], r2);
	free(v);
	/* The manifest is valid under its new name, the old one is gone with
	 * its mark, and the queue entry moved. */
	struct stg_manifest m;
	CHECK_EQ(stg_catalog_read(f.dirfd, n1, &m), 0);
	CHECK_EQ(m.version, n1);
	CHECK_EQ(m.size, n);
	stg_manifest_done(&m);
	CHECK_EQ(stg_catalog_read(f.dirfd, r1, &m), -ENOENT);
	CHECK_EQ(stg_queue_read_mark(f.dirfd, r1, NULL, 0), -ENOENT);
	CHECK_EQ(stg_queue_read_mark(f.dirfd, n1, NULL, 0), -ENOENT);
	/* A closed version is followed to its new id only as a closed one. */
	CHECK_EQ(stg_catalog_reminted(f.dirfd, r1, true), r1);
	CHECK_EQ(stg_catalog_reminted(f.dirfd, r1, false), n1);
	stg_catalog_unlock(&f);
	CHECK(queued(c, "/ckpt/r", n1));
	CHECK(!queued(c, "/ckpt/r", r1));
	CHECK(queued(c, "/ckpt/r", r2));
	size_t got;
	uint8_t *back = read_version(c, "/ckpt/r", n1, &got);
	CHECK(back && got == n && memcmp(back, data, n) == 0);
	free(back);

	/* The newest version has no bound above. */
	uint64_t n2 = 0;
	CHECK_EQ(stg_catalog_remint(c, "/ckpt/r", r2, &n2), 0);
	CHECK_EQ(n2, r2 + step);
	/* No id free below the next version: refused, nothing changed. */
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/r", false, &f), 0);
	CHECK_EQ(stg_catalog_read(f.dirfd, n1, &m), 0);
	m.version = n1 + step;
	m.mtime_ns++;
	CHECK_EQ(stg_catalog_publish(&f, "/ckpt/r", &m, false), 0);
	stg_manifest_done(&m);
	stg_catalog_unlock(&f);
	uint64_t none = 0;
	CHECK_EQ(stg_catalog_remint(c, "/ckpt/r", n1, &none), -ERANGE);
	CHECK_EQ(none, 0);
	CHECK(queued(c, "/ckpt/r", n1));
	CHECK_EQ(stg_catalog_remint(c, "/ckpt/r", r1, &none), -ENOENT);
	/* A re-minting cut short after the new id was written (both are
	 * there, the same version): the next one finishes it. */
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/r", false, &f), 0);
	CHECK_EQ(stg_catalog_read(f.dirfd, n2, &m), 0);
	m.version = n2 + step;
	CHECK_EQ(stg_catalog_publish(&f, "/ckpt/r", &m, false), 0);
	stg_manifest_done(&m);
	stg_catalog_unlock(&f);
	uint64_t n3 = 0;
	CHECK_EQ(stg_catalog_remint(c, "/ckpt/r", n2, &n3), 0);
	CHECK_EQ(n3, n2 + step);
	CHECK(!queued(c, "/ckpt/r", n2));
	CHECK(queued(c, "/ckpt/r", n3));
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/r", false, &f), 0);
	CHECK_EQ(stg_catalog_read(f.dirfd, n2, &m), -ENOENT);
	stg_catalog_unlock(&f);
	CHECK_EQ(stg_catalog_remint(c, "/ckpt/none", r1, &none), -ENOENT);

	/* Two parts of one job's version from this node minted in the same
	 * millisecond (their ids a step apart): the first may pass over the
	 * second, not over a version of another writing. */
	uint64_t p1 = (uint64_t)stage(c, "/ckpt/p", data, n, NULL);
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/p", false, &f), 0);
	CHECK_EQ(stg_catalog_read(f.dirfd, p1, &m), 0);
	m.part = make_part("job-4", 3, 1, 2, 0, (struct stg_extent){0, 100});
	CHECK_EQ(stg_catalog_publish(&f, "/ckpt/p", &m, false), 0);
	m.version = p1 + step;
	m.part->ranks[0] = 1;
	CHECK_EQ(stg_catalog_publish(&f, "/ckpt/p", &m, false), 0);
	m.version = p1 + 3 * step; /* another writing's, whole */
	stg_part_free(m.part);
	m.part = NULL;
	CHECK_EQ(stg_catalog_publish(&f, "/ckpt/p", &m, false), 0);
	stg_manifest_done(&m);
	stg_catalog_unlock(&f);
	uint64_t p1b = 0;
	CHECK_EQ(stg_catalog_remint(c, "/ckpt/p", p1, &p1b), 0);
	CHECK_EQ(p1b, p1 + 2 * step);
	CHECK_EQ(stg_catalog_remint(c, "/ckpt/p", p1b, &none), -ERANGE);
	CHECK_EQ(stg_catalog_remint(c, "/ckpt/p", p1 + step, &none), -ERANGE);

	/* An open version re-minted: its writer, which holds the old id,
	 * supersedes it under the new one (same number, the open one goes). */
	uint64_t o = (uint64_t)stage_open(c, "/ckpt/o", data, n, true, 0, NULL);
	uint64_t o2 = 0;
	CHECK_EQ(stg_catalog_remint(c, "/ckpt/o", o, &o2), 0);
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/o", false, &f), 0);
	CHECK_EQ(stg_catalog_reminted(f.dirfd, o, true), o2);
	CHECK_EQ(stg_catalog_reminted(f.dirfd, o2, true), o2);
	stg_catalog_unlock(&f);
	uint64_t closed = (uint64_t)stage_open(c, "/ckpt/o", data, n, false, o, NULL);
	CHECK(closed > o2);
	CHECK_EQ(stg_version_seq(closed), stg_version_seq(o));
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/o", false, &f), 0);
	CHECK_EQ(stg_catalog_versions(f.dirfd, &v, &nv), 0);
	CHECK_EQ(nv, 1);
	CHECK_EQ(v[0], closed);
	free(v);
	stg_catalog_unlock(&f);
	c->ship = false;
}

struct scanned {
	int good, bad;
	char bad_id[STG_HASH_HEX_LEN + 1];
};

static int count_good(void *arg, const char *path, int filedirfd)
{
	(void)path;
	(void)filedirfd;
	((struct scanned *)arg)->good++;
	return 0;
}

static void count_bad(void *arg, const char *id, int err)
{
	struct scanned *sc = arg;
	CHECK_EQ(err, -EBADMSG);
	sc->bad++;
	snprintf(sc->bad_id, sizeof(sc->bad_id), "%s", id);
}

/* A recorded path is checked when it is read: what is not absolute and
 * normalized (a crafted "..", NUL) is rejected, and a scan names the entry. */
static void test_recorded_paths(struct stg_cache *c)
{
	struct scanned before = {0};
	CHECK_EQ(stg_catalog_scan(c, count_good, count_bad, &before), 0);
	CHECK_EQ(before.bad, 0);
	struct stg_catalog_file f;
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/rec", true, &f), 0);
	char path[PATH_MAX];
	CHECK_EQ(stg_catalog_read_path(f.dirfd, path, sizeof(path)), 0);
	CHECK(strcmp(path, "/ckpt/rec") == 0);
	static const struct {
		const char *s;
		size_t len;
	} bad[] = {
		{"/ckpt/../../etc/passwd", 22}, {"ckpt/rec", 8}, {"/ckpt//rec", 10}, {"/ckpt/./rec", 11},
		{"/ckpt/rec/", 10}, {"/ckpt/..", 8}, {"/ckpt\0/p", 8},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_EQ(stg_write_file_atomic(f.dirfd, "path", bad[i].s, bad[i].len, STG_WRITE_CACHED), 0);
		CHECK_EQ(stg_catalog_read_path(f.dirfd, path, sizeof(path)), -EBADMSG);
		struct scanned sc = {0};
		CHECK_EQ(stg_catalog_scan(c, count_good, count_bad, &sc), 0);
		CHECK_EQ(sc.bad, 1);
		CHECK(strcmp(sc.bad_id, f.id) == 0);
		CHECK_EQ(sc.good, before.good);
	}
	/* Empty, as a power cut leaves a path file that never reached the
	 * disk: no entry, nothing refused, and the next lock writes it. */
	CHECK_EQ(stg_write_file_atomic(f.dirfd, "path", "", 0, STG_WRITE_CACHED), 0);
	CHECK_EQ(stg_catalog_read_path(f.dirfd, path, sizeof(path)), -ENODATA);
	struct scanned torn = {0};
	CHECK_EQ(stg_catalog_scan(c, count_good, count_bad, &torn), 0);
	CHECK_EQ(torn.bad, 0);
	stg_catalog_unlock(&f);
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/rec", true, &f), 0);
	CHECK(f.created);
	CHECK_EQ(stg_catalog_read_path(f.dirfd, path, sizeof(path)), 0);
	CHECK(strcmp(path, "/ckpt/rec") == 0);
	/* Too long for the caller's buffer is no path either. */
	CHECK_EQ(stg_write_file_atomic(f.dirfd, "path", "/ckpt/rec", 9, STG_WRITE_CACHED), 0);
	CHECK_EQ(stg_catalog_read_path(f.dirfd, path, 9), -EBADMSG);
	CHECK_EQ(stg_catalog_read_path(f.dirfd, path, 10), 0);
	stg_catalog_unlock(&f);
}

/* A manifest larger than any reader takes is refused before it is
 * published: published, it would read as corrupt and its chunks be
 * collected. */
static void test_manifest_too_large(struct stg_cache *c)
{
	struct stg_manifest m;
	uint64_t nchunks = (64u << 20) / STG_MANIFEST_ENTRY_SIZE + 1;
	CHECK_EQ(stg_manifest_init(&m, nchunks * 65536, 65536), 0);
	for (uint64_t i = 0; i < m.nchunks; i++)
		m.entries[i] = (struct stg_manifest_entry){.raw_len = 65536, .flags = STG_ENTRY_ZERO};
	m.version = stg_version_mint(0, 0, 1000000000);
	m.mode = 0644;
	struct stg_catalog_file f;
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/huge", true, &f), 0);
	CHECK_EQ(stg_catalog_publish(&f, "/ckpt/huge", &m, false), -EFBIG);
	struct stg_manifest back;
	CHECK_EQ(stg_catalog_read(f.dirfd, m.version, &back), -ENOENT);
	stg_catalog_unlock(&f);
	stg_manifest_done(&m);
}

/* Writes text into dir's FORMAT file. */
static void put_format(const char *dir, const char *text)
{
	char path[4400];
	snprintf(path, sizeof(path), "%s/FORMAT", dir);
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
}

/* The cache's format: 1 when new and while it holds fixed chunks only, 2
 * from its first content-defined version on (a stagehand reading format 1
 * would take that manifest for corrupt and collect its chunks); later
 * formats and other contents refused. */
static void test_cache_format(const char *dir)
{
	char cdir[4300];
	snprintf(cdir, sizeof(cdir), "%s/formats", dir);
	struct stg_cache *c;
	CHECK_EQ(stg_cache_open(cdir, &c), 0);
	unsigned format = 0;
	CHECK_EQ(stg_format_read(c->dirfd, "stagehand-cache", &format), 0);
	CHECK_EQ(format, 1);
	uint8_t data[100000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + (i >> 9));
	CHECK(stage(c, "/ckpt/fixed", data, sizeof(data), NULL) > 0);
	CHECK_EQ(stg_format_read(c->dirfd, "stagehand-cache", &format), 0);
	CHECK_EQ(format, 1);
	struct stg_path_rule cdc = rule;
	cdc.chunking = STG_CHUNKING_CDC;
	struct stg_builder *b;
	CHECK_EQ(stg_builder_new(c, "/ckpt/cdc", &cdc, &b), 0);
	CHECK_EQ(stg_builder_add(b, 0, data, sizeof(data)), 0);
	CHECK(stg_builder_commit(b, sizeof(data), 0644, 1000) > 0);
	stg_builder_free(b);
	CHECK_EQ(stg_format_read(c->dirfd, "stagehand-cache", &format), 0);
	CHECK_EQ(format, 2);
	stg_cache_free(c);

	CHECK_EQ(stg_cache_open(cdir, &c), 0);
	CHECK_EQ(c->format, 2);
	stg_cache_free(c);
	put_format(cdir, "stagehand-cache 3\n");
	CHECK_EQ(stg_cache_open(cdir, &c), -EPROTONOSUPPORT);
	put_format(cdir, "stagehand-cache 2 \n");
	CHECK_EQ(stg_cache_open(cdir, &c), -EPROTO);
	put_format(cdir, "stagehand-store 1\n");
	CHECK_EQ(stg_cache_open(cdir, &c), -EPROTO);
	put_format(cdir, "stagehand-cache 1\n");
	CHECK_EQ(stg_cache_open(cdir, &c), 0);
	stg_cache_free(c);
}

int main(void)
{
	char *dir = harness_tmpdir();
	char cdir[4200];
	snprintf(cdir, sizeof(cdir), "%s/cache/deeper", dir);
	struct stg_cache *c;
	CHECK_EQ(stg_cache_open(cdir, &c), 0);
	test_manifest_too_large(c);
	test_cache_format(dir);

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
	check_damaged_state(c, "/ckpt/a", (uint64_t)a1, (uint64_t)a2);

	/* Rename onto a fresh name moves every version... */
	struct stg_catalog_moved mv;
	CHECK_EQ(stg_catalog_rename(c, "/ckpt/a", "/ckpt/c", false, 3, &mv), 0);
	CHECK(mv.from == (uint64_t)a2 && mv.to == (uint64_t)a2);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/a", &s), 0);
	CHECK(!s.exists);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/c", &s), 0);
	CHECK_EQ(s.latest, (uint64_t)a2);
	/* ...onto an existing one, the newest becomes its next version. */
	struct stg_file_state sb;
	CHECK_EQ(stg_catalog_state(c, "/ckpt/b", &sb), 0);
	CHECK_EQ(stg_catalog_rename(c, "/ckpt/b", "/ckpt/c", false, 3, &mv), 0);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/c", &s), 0);
	CHECK(s.latest > (uint64_t)a2);
	/* (A writer holding b's newest goes on with its id under c.) */
	CHECK(mv.from == sb.latest && mv.to == s.latest);
	CHECK_EQ(stg_version_seq(s.latest), 3);
	CHECK(stg_catalog_rename(c, "/ckpt/b", "/ckpt/c", false, 3, NULL) == -ENOENT);

	/* Deleting hides; publishing again shows. The tombstone has its own
	 * file; `deleted` is empty and there only while the path is deleted
	 * (a stagehand of before tombstones reads it as "every version
	 * deleted", and would collect the versions published after). */
	struct stg_catalog_file f;
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/c", false, &f), 0);
	struct stg_tombstone t = {.upto = stg_catalog_newest_known(f.dirfd), .at_ns = stg_now_ns(),
				  .retain_s = 60};
	CHECK_EQ(stg_catalog_delete(&f, &t, false), 0);
	struct stat fst;
	CHECK_EQ(fstatat(f.dirfd, "deleted", &fst, 0), 0);
	CHECK_EQ(fst.st_size, 0);
	CHECK_EQ(fstatat(f.dirfd, "tombstone", &fst, 0), 0);
	CHECK_EQ(fst.st_size, STG_TOMBSTONE_SIZE);
	stg_catalog_unlock(&f);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/c", &s), 0);
	CHECK(s.exists && s.deleted);
	int64_t c4 = stage(c, "/ckpt/c", data, n, NULL);
	CHECK_EQ(stg_version_seq((uint64_t)c4), 4);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/c", &s), 0);
	CHECK(!s.deleted);
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/c", false, &f), 0);
	CHECK(fstatat(f.dirfd, "deleted", &fst, 0) < 0 && errno == ENOENT);
	struct stg_tombstone kept;
	bool legacy;
	CHECK_EQ(stg_catalog_tombstone(f.dirfd, &kept, &legacy), 0);
	CHECK(!legacy && kept.upto == t.upto);
	stg_catalog_unlock(&f);
	/* The release that brought tombstones kept them in `deleted`: read as
	 * one, and moved to its own file when a version is published. */
	int64_t d1 = stage(c, "/ckpt/d", data, n, NULL);
	CHECK(d1 > 0);
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/d", false, &f), 0);
	struct stg_tombstone td = {.upto = (uint64_t)d1, .at_ns = stg_now_ns(), .retain_s = 60};
	uint8_t tb[STG_TOMBSTONE_SIZE];
	stg_tombstone_encode(&td, tb);
	CHECK_EQ(stg_write_file_atomic(f.dirfd, "deleted", tb, sizeof(tb), STG_WRITE_CACHED), 0);
	CHECK_EQ(stg_catalog_tombstone(f.dirfd, &kept, &legacy), 0);
	CHECK(!legacy && kept.upto == (uint64_t)d1);
	stg_catalog_unlock(&f);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/d", &s), 0);
	CHECK(s.exists && s.deleted);
	CHECK(stage(c, "/ckpt/d", data, n, NULL) > d1);
	CHECK_EQ(stg_catalog_state(c, "/ckpt/d", &s), 0);
	CHECK(!s.deleted);
	CHECK_EQ(stg_catalog_lock(c, "/ckpt/d", false, &f), 0);
	CHECK(fstatat(f.dirfd, "deleted", &fst, 0) < 0 && errno == ENOENT);
	CHECK_EQ(stg_catalog_tombstone(f.dirfd, &kept, &legacy), 0);
	CHECK(!legacy && kept.upto == (uint64_t)d1);
	stg_catalog_unlock(&f);

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

	test_remint(c, data, n);
	test_recorded_paths(c);

	/* A cache of a later format is refused. */
	put_format(cdir, "stagehand-cache 99\n");
	struct stg_cache *c2;
	CHECK(stg_cache_open(cdir, &c2) == -EPROTONOSUPPORT);

	stg_cache_free(c);
	free(data);
	return harness_done();
}
