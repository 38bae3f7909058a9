/* SPDX-License-Identifier: MIT */
/* The pending-commit record (common/pending.h): golden bytes, round trip,
 * every field's rules. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "builder.h"
#include "catalog.h"
#include "harness.h"
#include "hash.h"
#include "pending.h"
#include "util.h"

static struct stg_pending sample(void)
{
	struct stg_pending p = {.size = 1ull << 30, .mode = 0644, .mtime_ns = 1795000000123456789ll,
				.replaces = 0x1122334455667788ull, .since_ns = 1794999999000000000ll,
				.base = 0x0102030405060708ull};
	snprintf(p.path, sizeof(p.path), "%s", "/scratch/job/ckpt/state.h5");
	return p;
}

static void round_trip(void)
{
	struct stg_pending p = sample(), d;
	uint8_t buf[STG_PENDING_MAX];
	int n = stg_pending_encode(&p, buf);
	CHECK_EQ(n, 60 + (int)strlen(p.path) + 8);
	CHECK(harness_golden("pending-v1.bin", buf, (size_t)n));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n, &d), 0);
	CHECK_EQ(d.size, p.size);
	CHECK(!d.open);
	CHECK_EQ(d.mode, p.mode);
	CHECK_EQ(d.mtime_ns, p.mtime_ns);
	CHECK_EQ(d.replaces, p.replaces);
	CHECK_EQ(d.since_ns, p.since_ns);
	CHECK_EQ(d.base, p.base);
	CHECK_STR(d.path, p.path);
	/* The golden file decodes to the same record. */
	size_t flen;
	uint8_t *golden = harness_fixture("pending-v1.bin", &flen);
	CHECK_EQ(stg_pending_decode(golden, flen, &d), 0);
	CHECK_STR(d.path, p.path);
	CHECK_EQ(d.size, p.size);
	free(golden);
	/* A sync's: the flag, pinned too. */
	p.open = true;
	n = stg_pending_encode(&p, buf);
	CHECK(harness_golden("pending-v1-open.bin", buf, (size_t)n));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n, &d), 0);
	CHECK(d.open);
}

/* Every flipped bit and every truncation is refused (the checksum). */
static void corruption(void)
{
	struct stg_pending p = sample(), d;
	uint8_t buf[STG_PENDING_MAX];
	int n = stg_pending_encode(&p, buf);
	int accepted = 0;
	for (int i = 0; i < n; i++)
		for (int bit = 0; bit < 8; bit++) {
			buf[i] ^= (uint8_t)(1 << bit);
			accepted += stg_pending_decode(buf, (size_t)n, &d) == 0;
			buf[i] ^= (uint8_t)(1 << bit);
		}
	CHECK_EQ(accepted, 0);
	for (int len = 0; len < n; len++)
		CHECK_EQ(stg_pending_decode(buf, (size_t)len, &d), -EBADMSG);
	uint8_t longer[STG_PENDING_MAX + 1];
	memcpy(longer, buf, (size_t)n);
	longer[n] = 0;
	CHECK_EQ(stg_pending_decode(longer, (size_t)n + 1, &d), -EBADMSG);
}

/* Fields checked beyond the checksum: a record that sums right but says
 * nonsense is refused too. */
static void field_rules(void)
{
	int n0;
	struct stg_pending d;
	uint8_t buf[STG_PENDING_MAX];
	struct stg_pending p = sample();
	p.mode = 010000; /* beyond the permission bits */
	CHECK_EQ(stg_pending_decode(buf, (size_t)stg_pending_encode(&p, buf), &d), -EBADMSG);
	p = sample();
	p.since_ns = -1;
	CHECK_EQ(stg_pending_decode(buf, (size_t)stg_pending_encode(&p, buf), &d), -EBADMSG);
	p = sample();
	snprintf(p.path, sizeof(p.path), "relative/path");
	CHECK_EQ(stg_pending_decode(buf, (size_t)stg_pending_encode(&p, buf), &d), -EBADMSG);
	p = sample();
	snprintf(p.path, sizeof(p.path), "/a/../b");
	CHECK_EQ(stg_pending_decode(buf, (size_t)stg_pending_encode(&p, buf), &d), -EBADMSG);
	p = sample();
	p.path[0] = 0;
	CHECK_EQ(stg_pending_encode(&p, buf), -ENAMETOOLONG);
	/* A flag this format does not know. */
	p = sample();
	n0 = stg_pending_encode(&p, buf);
	stg_put_le32(buf + 20, 2);
	stg_put_le64(buf + n0 - 8, stg_hash64(buf, (size_t)n0 - 8));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n0, &d), -EBADMSG);
	stg_put_le32(buf + 20, 1);
	stg_put_le64(buf + n0 - 8, stg_hash64(buf, (size_t)n0 - 8));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n0, &d), 0);
	/* A size beyond what a file can have. */
	p = sample();
	p.size = 1ull << 63;
	CHECK_EQ(stg_pending_decode(buf, (size_t)stg_pending_encode(&p, buf), &d), -EBADMSG);
	/* A NUL inside the path, the checksum made right. */
	p = sample();
	n0 = stg_pending_encode(&p, buf);
	buf[60 + 5] = 0;
	stg_put_le64(buf + n0 - 8, stg_hash64(buf, (size_t)n0 - 8));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n0, &d), -EBADMSG);
	/* A path as long as PATH_MAX, which no path can be. */
	static uint8_t big[60 + 4096 + 8];
	p = sample();
	stg_pending_encode(&p, big);
	stg_put_le32(big + 56, 4096);
	memset(big + 60, 'a', 4096);
	big[60] = '/';
	stg_put_le64(big + 60 + 4096, stg_hash64(big, 60 + 4096));
	CHECK_EQ(stg_pending_decode(big, sizeof(big), &d), -EBADMSG);
	/* A later format is not read as this one. */
	p = sample();
	int n = stg_pending_encode(&p, buf);
	stg_put_le32(buf + 4, STG_PENDING_FORMAT + 1);
	stg_put_le64(buf + n - 8, stg_hash64(buf, (size_t)n - 8));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n, &d), -EBADMSG);
}

/* Writing, settling and dropping pending commits in a real cache. */
static int count_bad(void *arg, const char *path, int err)
{
	(void)path;
	*(int *)arg += err == -EBADMSG;
	return 0;
}

static struct stg_path_rule rule = {
	.chunk_size = 65536, .dedup = true, .codec = {0, 0, 0} /* off */,
	.durability = STG_DURABILITY_LOCAL, .keep = 8,
};

#define P "/ckpt/f"

/* A shadow of 3 chunks of fill in the cache's tmp/, named there as the shim
 * names the one several processes share. */
static int shadow(struct stg_cache *c, uint8_t fill)
{
	char name[32];
	snprintf(name, sizeof(name), "shadow.%u", fill);
	int fd = openat(c->tmp_fd, name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	uint8_t buf[65536];
	memset(buf, fill, sizeof(buf));
	for (int i = 0; i < 3; i++)
		CHECK_EQ(stg_write_all(fd, buf, sizeof(buf)), 0);
	return fd;
}

static struct stg_pending record(bool open, int64_t mtime)
{
	struct stg_pending p = {.open = open, .size = 3 * 65536, .mode = 0644, .mtime_ns = mtime};
	snprintf(p.path, sizeof(p.path), "%s", P);
	return p;
}

static size_t versions(struct stg_cache *c)
{
	struct stg_catalog_file f;
	if (stg_catalog_lock(c, P, false, &f) < 0)
		return 0;
	uint64_t *v;
	size_t n = 0;
	CHECK_EQ(stg_catalog_versions(f.dirfd, &v, &n), 0);
	free(v);
	stg_catalog_unlock(&f);
	return n;
}

static int pending_files(struct stg_cache *c)
{
	char id[STG_HASH_HEX_LEN + 1], name[64];
	stg_catalog_file_id(P, id);
	struct stat st;
	snprintf(name, sizeof(name), "%s.commit", id);
	int n = fstatat(c->tmp_fd, name, &st, 0) == 0;
	snprintf(name, sizeof(name), "%s.content", id);
	return n + (fstatat(c->tmp_fd, name, &st, 0) == 0);
}

static void settling(void)
{
	struct stg_cache *c;
	CHECK_EQ(stg_cache_open(harness_tmpdir(), &c), 0);
	/* A close's: published once, the files gone. */
	int fd = shadow(c, 1);
	struct stg_pending p = record(false, 1000);
	CHECK_EQ(stg_pending_write(c, fd, &p), 0);
	close(fd);
	CHECK_EQ(pending_files(c), 2);
	CHECK(stg_pending_exists(c, P));
	CHECK(stg_pending_settle(c, P, &rule) > 0);
	CHECK_EQ(pending_files(c), 0);
	CHECK_EQ(versions(c), 1);
	CHECK_EQ(stg_pending_settle(c, P, &rule), 0);

	/* Published, then the packing died before it removed the record: not
	 * published twice. */
	char id[STG_HASH_HEX_LEN + 1], name[64];
	stg_catalog_file_id(P, id);
	snprintf(name, sizeof(name), "%s.commit", id);
	fd = shadow(c, 2);
	p = record(false, 2000);
	CHECK_EQ(stg_pending_write(c, fd, &p), 0);
	uint8_t *saved;
	size_t len;
	CHECK_EQ(stg_read_file(c->tmp_fd, name, STG_PENDING_MAX, &saved, &len), 0);
	char content[64], link[64];
	snprintf(content, sizeof(content), "%s.content", id);
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	CHECK(stg_pending_settle(c, P, &rule) > 0);
	CHECK_EQ(versions(c), 2);
	CHECK_EQ(stg_write_file_atomic(c->tmp_fd, name, saved, len, STG_WRITE_CACHED), 0);
	CHECK_EQ(linkat(AT_FDCWD, link, c->tmp_fd, content, AT_SYMLINK_FOLLOW), 0);
	CHECK_EQ(stg_pending_settle(c, P, &rule), 0);
	CHECK_EQ(versions(c), 2);
	CHECK_EQ(pending_files(c), 0);
	/* Killed between removing the record and the content: the content
	 * left over counts as pending, and the next settle removes it. */
	CHECK_EQ(linkat(AT_FDCWD, link, c->tmp_fd, content, AT_SYMLINK_FOLLOW), 0);
	CHECK(stg_pending_exists(c, P));
	CHECK_EQ(stg_pending_settle(c, P, &rule), 0);
	CHECK_EQ(versions(c), 2);
	CHECK_EQ(pending_files(c), 0);
	CHECK(!stg_pending_exists(c, P));
	close(fd);
	free(saved);

	/* The same mtime and size as the newest version, not published yet:
	 * published (only a version newer than the record's base was). */
	fd = shadow(c, 3);
	p = record(false, 2000);
	CHECK_EQ(stg_pending_write(c, fd, &p), 0);
	close(fd);
	CHECK(stg_pending_settle(c, P, &rule) > 0);
	CHECK_EQ(versions(c), 3);

	/* The same again, and the newest version re-minted meanwhile (the
	 * flusher gave it a new id, its first having been taken on the servers
	 * by another node's): the record's base is that version still, so
	 * nothing newer was published: published. */
	fd = shadow(c, 30);
	p = record(false, 2000);
	CHECK_EQ(stg_pending_write(c, fd, &p), 0);
	close(fd);
	struct stg_file_state before;
	CHECK_EQ(stg_catalog_state(c, P, &before), 0);
	uint64_t reminted;
	CHECK_EQ(stg_catalog_remint(c, P, before.latest, &reminted), 0);
	CHECK(reminted != before.latest);
	CHECK(stg_pending_settle(c, P, &rule) > 0);
	CHECK_EQ(versions(c), 4);

	/* A sync's: left alone while its shadow is held, dropped by
	 * stg_pending_drop; a close's is not. */
	fd = shadow(c, 4);
	struct stat st;
	CHECK_EQ(fstat(fd, &st), 0);
	char hold[64];
	stg_cache_hold_name(st.st_dev, st.st_ino, hold);
	int h = openat(c->tmp_fd, hold, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	CHECK(h >= 0 && flock(h, LOCK_SH) == 0);
	p = record(true, 4000);
	CHECK_EQ(stg_pending_write(c, fd, &p), 0);
	CHECK_EQ(stg_pending_settle(c, P, &rule), 0);
	CHECK_EQ(pending_files(c), 2);
	CHECK_EQ(versions(c), 4);
	stg_pending_drop(c, P);
	CHECK_EQ(pending_files(c), 0);
	p = record(false, 4000);
	CHECK_EQ(stg_pending_write(c, fd, &p), 0);
	stg_pending_drop(c, P);
	CHECK_EQ(pending_files(c), 2);
	CHECK(stg_pending_settle(c, P, &rule) > 0);
	CHECK_EQ(versions(c), 5);

	/* A sync's whose writers died: an open version. One that a version
	 * published meanwhile superseded: dropped. */
	p = record(true, 5000);
	CHECK_EQ(stg_pending_write(c, fd, &p), 0);
	close(h);
	CHECK(stg_pending_settle(c, P, &rule) > 0);
	CHECK_EQ(versions(c), 6);
	struct stg_file_state state;
	CHECK_EQ(stg_catalog_state(c, P, &state), 0);
	uint64_t open_version = state.latest;
	p = record(true, 6000);
	p.replaces = open_version;
	CHECK_EQ(stg_pending_write(c, fd, &p), 0);
	int other = shadow(c, 6);
	CHECK(stg_commit_fd(c, P, &rule, other, 3 * 65536, 0644, 7000, false, open_version, NULL,
			    0) > 0);
	close(other);
	CHECK_EQ(stg_pending_settle(c, P, &rule), 0);
	CHECK_EQ(pending_files(c), 0);
	CHECK_EQ(stg_catalog_state(c, P, &state), 0);
	CHECK_EQ(state.mtime_ns, 7000);

	/* A damaged record: refused, left in place, reported by foreach. */
	p = record(false, 8000);
	CHECK_EQ(stg_pending_write(c, fd, &p), 0);
	close(fd);
	CHECK_EQ(stg_read_file(c->tmp_fd, name, STG_PENDING_MAX, &saved, &len), 0);
	saved[10] ^= 1;
	CHECK_EQ(stg_write_file_atomic(c->tmp_fd, name, saved, len, STG_WRITE_CACHED), 0);
	free(saved);
	CHECK_EQ(stg_pending_settle(c, P, &rule), -EBADMSG);
	CHECK_EQ(pending_files(c), 2);
	int bad = 0;
	CHECK_EQ(stg_pending_foreach(c, count_bad, &bad), 0);
	CHECK_EQ(bad, 1);
	stg_cache_free(c);
}

/* A record or content of another user (one who could write the cache) is
 * ignored, saying so, never published; ours again, it is. (Run as root, the
 * test gives the files away; as another user it cannot, and says so.) */
static void foreign_records(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "foreign_records: needs root to give files away; skipped\n");
		return;
	}
	struct stg_cache *c;
	char dir[] = "/tmp/stagehand-unit-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	CHECK_EQ(stg_cache_open(dir, &c), 0);
	char id[STG_HASH_HEX_LEN + 1], rec[64], content[64];
	stg_catalog_file_id(P, id);
	snprintf(rec, sizeof(rec), "%s.commit", id);
	snprintf(content, sizeof(content), "%s.content", id);
	const char *names[] = {rec, content};
	for (int i = 0; i < 2; i++) {
		int fd = shadow(c, (uint8_t)(10 + i));
		struct stg_pending p = record(false, 1000 + i);
		CHECK_EQ(stg_pending_write(c, fd, &p), 0);
		close(fd);
		CHECK_EQ(fchownat(c->tmp_fd, names[i], 65534, 65534, AT_SYMLINK_NOFOLLOW), 0);
		size_t before = versions(c);
		CHECK_EQ(stg_pending_settle(c, P, &rule), 0);
		CHECK_EQ(versions(c), before);
		CHECK_EQ(pending_files(c), 2);
		CHECK_EQ(fchownat(c->tmp_fd, names[i], 0, 0, AT_SYMLINK_NOFOLLOW), 0);
		CHECK(stg_pending_settle(c, P, &rule) > 0);
		CHECK_EQ(versions(c), before + 1);
	}
	stg_cache_free(c);
}

int main(void)
{
	round_trip();
	corruption();
	field_rules();
	settling();
	foreign_records();
	return harness_done();
}
