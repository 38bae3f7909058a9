/* SPDX-License-Identifier: MIT */
/* The server's manifest tree: versions per uid and path, retention,
 * listing by prefix, isolation between users. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"
#include "files.h"
#include "harness.h"
#include "hash.h"
#include "heldmap.h"
#include "make-part.h"
#include "tombstone.h"
#include "util.h"

/* The held map of a put: every chunk held (the test manifests have up to 3). */
static const uint8_t ALL[1] = {0x07};

static uint8_t *make_manifest_flags(uint64_t version, uint64_t size, uint32_t flags,
				    size_t *ret_len)
{
	struct stg_manifest m;
	if (stg_manifest_init(&m, size, 1u << 20) < 0)
		exit(1);
	m.version = version;
	m.flags = flags;
	m.mode = 0644;
	m.mtime_ns = 1000 + (int64_t)version;
	m.commit_ns = 2000 + (int64_t)version;
	for (uint32_t i = 0; i < m.nchunks; i++) {
		uint32_t raw = i + 1 < m.nchunks ? m.chunk_size : (uint32_t)(size - (uint64_t)i * m.chunk_size);
		m.entries[i] = (struct stg_manifest_entry){.raw_len = raw, .stored_len = raw, .pack = 1};
		stg_hash_compute(&version, sizeof(version), &m.entries[i].hash);
		m.entries[i].hash.b[0] = (uint8_t)i;
	}
	*ret_len = stg_manifest_encoded_size(&m);
	uint8_t *buf = malloc(*ret_len);
	stg_manifest_encode(&m, buf);
	stg_manifest_done(&m);
	return buf;
}

static uint8_t *make_manifest(uint64_t version, uint64_t size, size_t *ret_len)
{
	return make_manifest_flags(version, size, 0, ret_len);
}

/* Puts version (with manifest flags) for uid 3000; what stg_files_put returns. */
static int put_flags(struct stg_files *f, const char *path, uint64_t version, uint32_t flags,
		     uint32_t keep)
{
	size_t len;
	uint8_t *mf = make_manifest_flags(version, 1u << 20, flags, &len);
	int r = stg_files_put(f, 3000, path, mf, len, version, keep, ALL);
	free(mf);
	return r;
}

static int put(struct stg_files *f, uint32_t uid, const char *path, uint64_t version,
	       uint32_t keep)
{
	size_t len;
	uint8_t *mf = make_manifest(version, 3u << 20, &len);
	int r = stg_files_put(f, uid, path, mf, len, version, keep, ALL);
	free(mf);
	return r;
}

struct seen {
	char paths[16][64];
	uint64_t versions[16];
	bool deleted[16];
	int n;
};

static int record(void *arg, const char *path, const struct stg_manifest *m, bool deleted)
{
	struct seen *s = arg;
	if (s->n < 16) {
		snprintf(s->paths[s->n], sizeof(s->paths[0]), "%s", path);
		s->versions[s->n] = m->version;
		s->deleted[s->n] = deleted;
	}
	s->n++;
	return 0;
}

/* What stg_files_foreach gave: per manifest its uid, version and held map
 * (its first byte; 0xff when there was none). */
struct owned {
	uint32_t uid[64];
	uint64_t versions[64];
	int held[64];
	int n;
};

static int record_owned(void *arg, uint32_t uid, const struct stg_manifest *m,
			const uint8_t *held)
{
	struct owned *o = arg;
	if (o->n < 64) {
		o->uid[o->n] = uid;
		o->versions[o->n] = m->version;
		o->held[o->n] = held ? held[0] : 0xff;
	}
	o->n++;
	return 0;
}

static int count_uid(const struct owned *o, uint32_t uid)
{
	int n = 0;
	for (int i = 0; i < o->n && i < 64; i++)
		n += o->uid[i] == uid;
	return n;
}

static int stop_at_first(void *arg, const char *path, const struct stg_manifest *m,
			 bool deleted)
{
	(void)path;
	(void)m;
	(void)deleted;
	(*(int *)arg)++;
	return 42;
}

/* Versions of path among what was seen, in the order seen. */
static int versions_of(const struct seen *s, const char *path, uint64_t *out)
{
	int n = 0;
	for (int i = 0; i < s->n && i < 16; i++)
		if (strcmp(s->paths[i], path) == 0)
			out[n++] = s->versions[i];
	return n;
}

/* The held map's bytes are pinned; every field is checked when read. */
static void test_heldmap_format(void)
{
	const uint8_t bits[2] = {0x05, 0x04};
	uint8_t buf[64];
	size_t n = stg_heldmap_size(11);
	CHECK_EQ(n, 30);
	stg_heldmap_encode(7, 11, bits, buf);
	CHECK(harness_golden("heldmap-v1.bin", buf, n));
	const uint8_t *got;
	CHECK_EQ(stg_heldmap_decode(buf, n, 7, 11, &got), 0);
	CHECK(got[0] == 0x05 && got[1] == 0x04);
	CHECK_EQ(stg_heldmap_decode(buf, n, 8, 11, &got), -EBADMSG);  /* another version */
	CHECK_EQ(stg_heldmap_decode(buf, n, 7, 12, &got), -EBADMSG);  /* another count */
	CHECK_EQ(stg_heldmap_decode(buf, n - 1, 7, 11, &got), -EBADMSG); /* cut short */
	for (size_t i = 0; i < n; i++) { /* any byte flipped */
		buf[i] ^= 0x10;
		CHECK(stg_heldmap_decode(buf, n, 7, 11, &got) < 0);
		buf[i] ^= 0x10;
	}
	/* A bit past the last chunk, with a valid checksum, is refused. */
	buf[STG_HELDMAP_HEADER_SIZE + 1] |= 0x08;
	stg_put_le64(buf + n - 8, stg_hash64(buf, n - 8));
	CHECK_EQ(stg_heldmap_decode(buf, n, 7, 11, &got), -EBADMSG);
	stg_put_le32(buf + 4, 2); /* a later format */
	CHECK_EQ(stg_heldmap_decode(buf, n, 7, 11, &got), -EPROTONOSUPPORT);
}

/* The held map goes with its manifest: given back by foreach, none for a
 * manifest filed without one (all held, as before held maps), retired with
 * its version. */
static void test_held(struct stg_files *f, const char *dir)
{
	size_t len;
	uint8_t *mf = make_manifest(1, 3u << 20, &len);
	const uint8_t some[1] = {0x05};
	CHECK_EQ(stg_files_put(f, 2000, "/held/a", mf, len, 1, 1, some), 0);
	free(mf);
	struct owned o = {0};
	CHECK_EQ(stg_files_foreach(f, record_owned, &o), 0);
	int i = 0;
	while (i < o.n && o.uid[i] != 2000)
		i++;
	CHECK(i < o.n && o.held[i] == 0x05);
	char id[STG_HASH_HEX_LEN + 1], path[512];
	stg_catalog_file_id("/held/a", id);
	snprintf(path, sizeof(path), "%s/files/2000/%s/v%020d.held", dir, id, 1);
	CHECK_EQ(unlink(path), 0);
	memset(&o, 0, sizeof(o));
	CHECK_EQ(stg_files_foreach(f, record_owned, &o), 0);
	for (i = 0; i < o.n && o.uid[i] != 2000;)
		i++;
	CHECK(i < o.n && o.held[i] == 0xff);
	/* Retired with version 1 (keep 1). */
	mf = make_manifest(2, 3u << 20, &len);
	CHECK_EQ(stg_files_put(f, 2000, "/held/a", mf, len, 2, 1, some), 1);
	CHECK_EQ(stg_files_put(f, 2000, "/held/a", mf, len, 2, 1, ALL), 0); /* a retry */
	free(mf);
	mf = make_manifest(3, 3u << 20, &len);
	CHECK_EQ(stg_files_put(f, 2000, "/held/a", mf, len, 3, 1, ALL), 1);
	free(mf);
	snprintf(path, sizeof(path), "%s/files/2000/%s/v%020d.held", dir, id, 2);
	CHECK(access(path, F_OK) < 0 && errno == ENOENT);
	snprintf(path, sizeof(path), "%s/files/2000/%s/v%020d.held", dir, id, 3);
	CHECK_EQ(access(path, F_OK), 0);
	memset(&o, 0, sizeof(o));
	CHECK_EQ(stg_files_foreach(f, record_owned, &o), 0);
	CHECK_EQ(count_uid(&o, 2000), 1);
}

/* Deletions: the versions a tombstone covers leave the listing (shown
 * flagged when asked), a newer version stays; a renamed-away name is never
 * listed; once the retention runs out, the collector's walk removes them,
 * and the entry when nothing newer is left. */
static void test_deletions(struct stg_files *f)
{
	const int64_t s = 1000000000;
	int64_t now = stg_now_ns();
	for (uint64_t v = 1; v <= 3; v++) {
		CHECK_EQ(put(f, 5000, "/del/a", v, 0), 0);
		CHECK_EQ(put(f, 5000, "/del/b", v, 0), 0);
	}
	CHECK_EQ(put(f, 5000, "/del/c", 1, 0), 0);
	/* a: versions 1-2 deleted, kept an hour; b: all deleted, kept 0 s; c:
	 * renamed away, kept 0 s, then its deletion again (merged). */
	struct stg_tombstone ta = {.upto = 2, .at_ns = now, .retain_s = 3600},
			     tb = {.upto = 3, .at_ns = now - s, .retain_s = 0},
			     tc = {.upto = 1, .at_ns = now - 2 * s, .retain_s = 0,
				   .flags = STG_TOMBSTONE_RENAMED};
	CHECK_EQ(stg_files_delete(f, 5000, "/del/a", &ta), 0);
	CHECK_EQ(stg_files_delete(f, 5000, "/del/b", &tb), 0);
	CHECK_EQ(stg_files_delete(f, 5000, "/del/c", &tc), 0);
	CHECK_EQ(stg_files_delete(f, 5000, "/del/c", &tc), 0); /* again: the same */
	CHECK_EQ(stg_files_delete(f, 5000, "/del/none", &tc), 0);
	CHECK_EQ(stg_files_delete(f, 5001, "/del/a", &tb), 0); /* another user's: none */
	struct seen seen = {0};
	uint64_t v[16];
	CHECK_EQ(stg_files_list(f, 5000, "/del/", false, record, &seen), 0);
	CHECK_EQ(seen.n, 1);
	CHECK(versions_of(&seen, "/del/a", v) == 1 && v[0] == 3 && !seen.deleted[0]);
	memset(&seen, 0, sizeof(seen));
	CHECK_EQ(stg_files_list(f, 5000, "/del/", true, record, &seen), 0);
	CHECK_EQ(seen.n, 6); /* a 1-3, b 1-3; c never */
	CHECK_EQ(versions_of(&seen, "/del/c", v), 0);
	for (int i = 0; i < seen.n; i++)
		CHECK_EQ(seen.deleted[i], !(strcmp(seen.paths[i], "/del/a") == 0 &&
					    seen.versions[i] == 3));
	/* Still served while kept: restorable. */
	uint8_t *mf;
	size_t len;
	CHECK_EQ(stg_files_get(f, 5000, "/del/b", 2, &mf, &len), 0);
	free(mf);
	/* The collector's walk: b and c expired and go whole, a's deletion
	 * is kept. */
	struct owned o = {0};
	CHECK_EQ(stg_files_foreach(f, record_owned, &o), 0);
	CHECK_EQ(stg_files_get(f, 5000, "/del/b", 2, &mf, &len), -ENOENT);
	CHECK_EQ(stg_files_get(f, 5000, "/del/c", 0, &mf, &len), -ENOENT);
	CHECK_EQ(stg_files_get(f, 5000, "/del/a", 1, &mf, &len), 0);
	free(mf);
	CHECK_EQ(count_uid(&o, 5000), 3); /* a's versions */
	/* b written again after: a new entry, nothing of the old deletion. */
	CHECK_EQ(put(f, 5000, "/del/b", 4, 0), 0);
	memset(&seen, 0, sizeof(seen));
	CHECK_EQ(stg_files_list(f, 5000, "/del/b", false, record, &seen), 0);
	CHECK(seen.n == 1 && seen.versions[0] == 4 && !seen.deleted[0]);
	/* a deletion covering a version older than a kept one, expired: only
	 * the covered versions go */
	struct stg_tombstone old = {.upto = 2, .at_ns = now - 7200 * s, .retain_s = 0};
	CHECK_EQ(stg_files_delete(f, 5000, "/del/a", &old), 0); /* merged: still an hour */
	memset(&o, 0, sizeof(o));
	CHECK_EQ(stg_files_foreach(f, record_owned, &o), 0);
	CHECK_EQ(stg_files_get(f, 5000, "/del/a", 1, &mf, &len), 0);
	free(mf);
}

/* WITHDRAW: a version goes only if its manifest is byte for byte the one
 * named; another node's under the same id stays. */
static void test_withdraw(struct stg_files *f)
{
	size_t len;
	uint8_t *mf = make_manifest(7, 3u << 20, &len), *got;
	CHECK_EQ(stg_files_put(f, 6000, "/wd/a", mf, len, 7, 0, ALL), 0);
	uint64_t ours = stg_hash64(mf, len);
	CHECK_EQ(stg_files_withdraw(f, 6000, "/wd/a", 7, ours ^ 1), 0); /* another's */
	CHECK_EQ(stg_files_get(f, 6000, "/wd/a", 7, &got, &len), 0);
	free(got);
	CHECK_EQ(stg_files_withdraw(f, 6001, "/wd/a", 7, ours), 0); /* another user */
	CHECK_EQ(stg_files_withdraw(f, 6000, "/wd/a", 8, ours), 0); /* no such id */
	CHECK_EQ(stg_files_withdraw(f, 6000, "/wd/none", 7, ours), 0);
	CHECK_EQ(stg_files_withdraw(f, 6000, "/wd/a", 7, ours), 1);
	CHECK_EQ(stg_files_get(f, 6000, "/wd/a", 7, &got, &len), -ENOENT);
	free(mf);
}

/* Two nodes' parts of one job version, minted the same id, with the same
 * chunks (ranks writing the same bytes): the second is refused, so that its
 * node re-mints it, never taken as a retry of the first. */
static void test_parts_collide(struct stg_files *f)
{
	size_t len;
	uint8_t *mf = make_manifest(1, 1u << 20, &len);
	struct stg_manifest m;
	CHECK_EQ(stg_manifest_decode(mf, len, &m), 0);
	free(mf);
	m.part = make_part("slurm-7.0", 11, 1, 2, 0, (struct stg_extent){0, 4096});
	len = stg_manifest_encoded_size(&m);
	mf = malloc(len);
	stg_manifest_encode(&m, mf);
	CHECK_EQ(stg_files_put(f, 3000, "/ckpt/p.bin", mf, len, 1, 0, ALL), 0);
	CHECK_EQ(stg_files_put(f, 3000, "/ckpt/p.bin", mf, len, 1, 0, ALL), 0); /* a retry */
	m.part->node = 12;
	m.part->ranks[0] = 1;
	stg_manifest_encode(&m, mf);
	CHECK_EQ(stg_files_put(f, 3000, "/ckpt/p.bin", mf, len, 1, 0, ALL), -EEXIST);
	stg_manifest_done(&m);
	free(mf);
}

/* Puts node's part (node 1..3 is rank node - 1 of 3, flags) of job version
 * jopen as id (time t, sequence number jopen) for uid 3000 with keep; what
 * stg_files_put returns. */
static int put_part(struct stg_files *f, const char *path, uint64_t t, uint64_t node,
		    uint32_t jopen, uint32_t flags, uint32_t keep)
{
	size_t len;
	uint64_t id = t << 20 | jopen;
	uint8_t *mf = make_manifest_flags(id, 1u << 20, flags, &len);
	struct stg_manifest m;
	CHECK_EQ(stg_manifest_decode(mf, len, &m), 0);
	free(mf);
	m.part = make_part("slurm-8.0", node, jopen, 3, (uint32_t)node - 1,
			   (struct stg_extent){node * 4096, 4096});
	len = stg_manifest_encoded_size(&m);
	mf = malloc(len);
	stg_manifest_encode(&m, mf);
	int r = stg_files_put(f, 3000, path, mf, len, id, keep, ALL);
	stg_manifest_done(&m);
	free(mf);
	return r;
}

/* How many versions uid 3000 holds of path with sequence number jopen. */
static int parts_of(struct stg_files *f, const char *path, uint32_t jopen)
{
	int n = 0;
	for (uint64_t t = 1; t < 64; t++) {
		uint8_t *mf;
		size_t len;
		if (stg_files_get(f, 3000, path, t << 20 | jopen, &mf, &len) == 0) {
			free(mf);
			n++;
		}
	}
	return n;
}

/* Retention on a server counts a job version's parts (3 nodes) as one
 * version, and only once it is complete. */
static void test_parts_retention(struct stg_files *f)
{
	const char *p = "/ckpt/keep.bin";
	uint64_t t = 1;
	/* Job versions 1-3, keep 2: version 1 goes once version 3 is complete,
	 * not at its first part. */
	for (uint32_t jv = 1; jv <= 3; jv++)
		for (uint64_t node = 1; node <= 3; node++)
			CHECK_EQ(put_part(f, p, t++, node, jv, 0, 2), jv == 3 && node == 3 ? 3 : 0);
	CHECK(parts_of(f, p, 1) == 0 && parts_of(f, p, 2) == 3 && parts_of(f, p, 3) == 3);
	/* Version 4: node 1 synced its part (open), node 2 closed its own.
	 * Incomplete, it pushes nothing out; the open part stays (node 1's only
	 * copy) until node 1's close of it (the same number) comes. */
	CHECK_EQ(put_part(f, p, t++, 1, 4, STG_MANIFEST_OPEN, 2), 0);
	CHECK_EQ(put_part(f, p, t++, 2, 4, 0, 2), 0);
	CHECK(parts_of(f, p, 2) == 3 && parts_of(f, p, 4) == 2);
	CHECK_EQ(put_part(f, p, t++, 1, 4, 0, 2), 1);
	CHECK_EQ(parts_of(f, p, 4), 2);
	CHECK_EQ(put_part(f, p, t++, 3, 4, 0, 2), 3); /* complete: version 2 goes */
	CHECK(parts_of(f, p, 2) == 0 && parts_of(f, p, 3) == 3 && parts_of(f, p, 4) == 3);
	/* Version 5 lost two nodes' parts; it goes once 2 complete ones are
	 * newer. */
	CHECK_EQ(put_part(f, p, t++, 1, 5, 0, 2), 0);
	for (uint64_t node = 1; node <= 3; node++)
		put_part(f, p, t++, node, 6, 0, 2);
	CHECK(parts_of(f, p, 4) == 3 && parts_of(f, p, 5) == 1 && parts_of(f, p, 6) == 3);
	for (uint64_t node = 1; node <= 3; node++)
		put_part(f, p, t++, node, 7, 0, 2);
	CHECK(parts_of(f, p, 4) == 0 && parts_of(f, p, 5) == 0 && parts_of(f, p, 6) == 3 &&
	      parts_of(f, p, 7) == 3);
}

/* What the hooks were told: the held entries counted in and out. */
struct counted {
	int filed, retired;
	long in, out; /* held entries */
};

static long held_entries(const struct stg_manifest *m, const uint8_t *held)
{
	long n = 0;
	for (uint32_t i = 0; i < m->nchunks; i++)
		n += !held || held[i / 8] & (1u << (i % 8));
	return n;
}

static void on_filed(void *arg, uint32_t uid, const struct stg_manifest *m, const uint8_t *held)
{
	struct counted *c = arg;
	(void)uid;
	c->filed++;
	c->in += held_entries(m, held);
}

static void on_retired(void *arg, uint32_t uid, const struct stg_manifest *m,
		       const uint8_t *held)
{
	struct counted *c = arg;
	(void)uid;
	c->retired++;
	c->out += held_entries(m, held);
}

/* The hooks by which the server counts references: every version filed is
 * told once, and taken back once as it was counted (retention, the same
 * chunks filed again, withdrawal, an expired deletion); one whose held map
 * cannot be read back is never taken back. */
static void test_hooks(struct stg_files *f, const char *dir)
{
	struct counted c = {0};
	stg_files_set_hooks(f, &(struct stg_files_hooks){on_filed, on_retired, &c});
	size_t len;
	uint8_t *mf = make_manifest(1, 3u << 20, &len);
	const uint8_t one[1] = {0x01};
	CHECK_EQ(stg_files_put(f, 8000, "/h/a", mf, len, 1, 1, one), 0);
	CHECK(c.filed == 1 && c.in == 1 && c.retired == 0);
	CHECK_EQ(stg_files_put(f, 8000, "/h/a", mf, len, 1, 1, ALL), 0); /* again, all held */
	CHECK(c.filed == 2 && c.in == 4 && c.retired == 1 && c.out == 1);
	free(mf);
	mf = make_manifest(2, 3u << 20, &len);
	CHECK_EQ(stg_files_put(f, 8000, "/h/a", mf, len, 2, 1, one), 1); /* v1 pruned */
	CHECK(c.filed == 3 && c.in == 5 && c.retired == 2 && c.out == 4);
	/* v2's held map damaged: withdrawn, its count stays */
	char id[STG_HASH_HEX_LEN + 1], path[700];
	stg_catalog_file_id("/h/a", id);
	snprintf(path, sizeof(path), "%s/files/8000/%s/v%020d.held", dir, id, 2);
	int fd = open(path, O_WRONLY);
	CHECK_EQ(pwrite(fd, "X", 1, 9), 1);
	close(fd);
	CHECK_EQ(stg_files_withdraw(f, 8000, "/h/a", 2, stg_hash64(mf, len)), 1);
	CHECK(c.retired == 2 && c.out == 4);
	free(mf);
	/* an expired deletion */
	CHECK_EQ(put(f, 8000, "/h/b", 1, 0), 0);
	struct stg_tombstone t = {.upto = 1, .at_ns = stg_now_ns() - 10 * 1000000000ll,
				  .retain_s = 1};
	CHECK_EQ(stg_files_delete(f, 8000, "/h/b", &t), 0);
	CHECK_EQ(stg_files_expire(f, stg_now_ns()), 1);
	CHECK(c.filed == 4 && c.retired == 3 && c.in - c.out == 1); /* v2's, kept */
	stg_files_set_hooks(f, &(struct stg_files_hooks){0});
}

/* A clean stop writes each user's path index file; the next start reads it
 * instead of every entry's path file, and removes it. One that is damaged,
 * or whose user's entries changed since, is read around. */
static void test_saved_index(const char *base)
{
	char dir[512], name[600];
	snprintf(dir, sizeof(dir), "%s/saved", base);
	CHECK_EQ(mkdir(dir, 0700), 0);
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY);
	struct stg_files *f;
	CHECK_EQ(stg_files_open(dirfd, &f), 0);
	const int64_t s = 1000000000;
	CHECK_EQ(put(f, 7000, "/s/a", 1, 0), 0);
	CHECK_EQ(put(f, 7000, "/s/b", 1, 0), 0);
	CHECK_EQ(put(f, 7000, "/s/c", 1, 0), 0);
	CHECK_EQ(put(f, 7001, "/t/a", 1, 0), 0);
	/* b deleted, its retention run out an hour ago, not yet expired */
	struct stg_tombstone t = {.upto = 1, .at_ns = stg_now_ns() - 7200 * s, .retain_s = 3600};
	CHECK_EQ(stg_files_delete(f, 7000, "/s/b", &t), 0);
	CHECK_EQ(stg_files_save(f), 0);
	stg_files_free(f);
	snprintf(name, sizeof(name), "%s/files/7000.paths", dir);
	CHECK(access(name, F_OK) == 0);

	CHECK_EQ(stg_files_open(dirfd, &f), 0);
	struct stg_files_stats st;
	stg_files_stats(f, &st);
	CHECK_EQ(st.paths_read_at_open, 0);
	CHECK_EQ(st.paths, 4);
	CHECK(access(name, F_OK) < 0); /* taken */
	struct seen seen = {0};
	CHECK_EQ(stg_files_list(f, 7000, "/s/", true, record, &seen), 0);
	CHECK_EQ(seen.n, 3);
	/* the pending deletion came back with it */
	CHECK_EQ(stg_files_expire(f, stg_now_ns()), 1);
	uint8_t *mf;
	size_t len;
	CHECK_EQ(stg_files_get(f, 7000, "/s/b", 0, &mf, &len), -ENOENT);

	/* damaged: 7000's entries read instead, 7001's index taken */
	CHECK_EQ(stg_files_save(f), 0);
	stg_files_free(f);
	int fd = open(name, O_RDWR);
	CHECK_EQ(pwrite(fd, "X", 1, 40), 1);
	close(fd);
	CHECK_EQ(stg_files_open(dirfd, &f), 0);
	stg_files_stats(f, &st);
	CHECK_EQ(st.paths_read_at_open, 2);
	CHECK_EQ(st.paths, 3);
	memset(&seen, 0, sizeof(seen));
	CHECK_EQ(stg_files_list(f, 7000, "", false, record, &seen), 0);
	CHECK_EQ(seen.n, 2);

	/* changed since (an entry made by another server): read around */
	CHECK_EQ(stg_files_save(f), 0);
	stg_files_free(f);
	char id[STG_HASH_HEX_LEN + 1], entry[700];
	stg_catalog_file_id("/s/d", id);
	snprintf(entry, sizeof(entry), "%s/files/7000/%s", dir, id);
	CHECK_EQ(mkdir(entry, 0700), 0);
	snprintf(entry, sizeof(entry), "%s/files/7000/%s/path", dir, id);
	fd = open(entry, O_WRONLY | O_CREAT, 0600);
	CHECK_EQ(write(fd, "/s/d", 4), 4);
	close(fd);
	CHECK_EQ(stg_files_open(dirfd, &f), 0);
	stg_files_stats(f, &st);
	CHECK_EQ(st.paths_read_at_open, 3);
	CHECK_EQ(st.paths, 4);
	stg_files_free(f);
	close(dirfd);
}

int main(void)
{
	char *dir = harness_tmpdir();
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY);
	struct stg_files *f;
	CHECK_EQ(stg_files_open(dirfd, &f), 0);
	test_heldmap_format();
	test_saved_index(dir);
	test_hooks(f, dir);

	/* Round trip: newest and a given version. */
	CHECK_EQ(put(f, 1000, "/ckpt/a.bin", 1, 0), 0);
	CHECK_EQ(put(f, 1000, "/ckpt/a.bin", 2, 0), 0);
	uint8_t *mf;
	size_t len;
	CHECK_EQ(stg_files_get(f, 1000, "/ckpt/a.bin", 0, &mf, &len), 0);
	struct stg_manifest m;
	CHECK_EQ(stg_manifest_decode(mf, len, &m), 0);
	CHECK_EQ(m.version, 2);
	CHECK_EQ(m.nchunks, 3);
	stg_manifest_done(&m);
	size_t want_len;
	uint8_t *want = make_manifest(1, 3u << 20, &want_len);
	free(mf);
	CHECK_EQ(stg_files_get(f, 1000, "/ckpt/a.bin", 1, &mf, &len), 0);
	CHECK(len == want_len && memcmp(mf, want, len) == 0);
	free(mf);
	/* The same version again (a retry), and with its mode amended: taken. */
	CHECK_EQ(stg_files_put(f, 1000, "/ckpt/a.bin", want, want_len, 1, 0, ALL), 0);
	struct stg_manifest amended;
	CHECK_EQ(stg_manifest_decode(want, want_len, &amended), 0);
	amended.mode = 0600;
	stg_manifest_encode(&amended, want);
	CHECK_EQ(stg_files_put(f, 1000, "/ckpt/a.bin", want, want_len, 1, 0, ALL), 0);
	/* Other content under a held id never replaces it. */
	amended.entries[1].hash.b[9] ^= 1;
	stg_manifest_encode(&amended, want);
	CHECK_EQ(stg_files_put(f, 1000, "/ckpt/a.bin", want, want_len, 1, 0, ALL), -EEXIST);
	amended.entries[1].hash.b[9] ^= 1;
	CHECK_EQ(stg_files_get(f, 1000, "/ckpt/a.bin", 1, &mf, &len), 0);
	struct stg_manifest held;
	CHECK_EQ(stg_manifest_decode(mf, len, &held), 0);
	CHECK(held.mode == 0600 && stg_hash_eq(&held.entries[1].hash, &amended.entries[1].hash));
	stg_manifest_done(&held);
	stg_manifest_done(&amended);
	free(mf);
	CHECK_EQ(stg_files_get(f, 1000, "/ckpt/a.bin", 7, &mf, &len), -ENOENT);
	CHECK_EQ(stg_files_get(f, 1000, "/ckpt/none", 0, &mf, &len), -ENOENT);
	/* The manifest must be the version it is filed as; paths are absolute. */
	CHECK_EQ(stg_files_put(f, 1000, "/ckpt/a.bin", want, want_len, 5, 0, ALL), -EINVAL);
	CHECK_EQ(stg_files_put(f, 1000, "ckpt/a.bin", want, want_len, 1, 0, ALL), -EINVAL);
	free(want);

	/* Retention: keep 2 over 6 versions. */
	int removed = 0;
	for (uint64_t v = 1; v <= 6; v++) {
		int r = put(f, 1000, "/ckpt/b.bin", v, 2);
		CHECK(r >= 0);
		removed += r;
	}
	CHECK_EQ(removed, 4);
	struct seen s = {0};
	CHECK_EQ(stg_files_list(f, 1000, "/ckpt/b", false, record, &s), 0);
	uint64_t v[16];
	CHECK_EQ(versions_of(&s, "/ckpt/b.bin", v), 2);
	CHECK_EQ(v[0], 5);
	CHECK_EQ(v[1], 6);
	CHECK_EQ(stg_files_get(f, 1000, "/ckpt/b.bin", 4, &mf, &len), -ENOENT);

	/* Prefixes are plain string prefixes; versions come ascending. */
	CHECK_EQ(put(f, 1000, "/other/c.bin", 1, 0), 0);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(stg_files_list(f, 1000, "/ckpt/", false, record, &s), 0);
	CHECK_EQ(s.n, 4);
	CHECK_EQ(versions_of(&s, "/ckpt/a.bin", v), 2);
	CHECK(v[0] == 1 && v[1] == 2);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(stg_files_list(f, 1000, "", false, record, &s), 0);
	CHECK_EQ(s.n, 5);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(stg_files_list(f, 1000, "/ckpt/a", false, record, &s), 0);
	CHECK_EQ(s.n, 2);
	int calls = 0;
	CHECK_EQ(stg_files_list(f, 1000, "", false, stop_at_first, &calls), 42);
	CHECK_EQ(calls, 1);

	/* Users are isolated: 1000 sees nothing of 1001's. */
	CHECK_EQ(put(f, 1001, "/private/d.bin", 3, 0), 0);
	CHECK_EQ(stg_files_get(f, 1000, "/private/d.bin", 0, &mf, &len), -ENOENT);
	CHECK_EQ(stg_files_get(f, 1001, "/private/d.bin", 0, &mf, &len), 0);
	free(mf);
	CHECK_EQ(stg_files_get(f, 1001, "/ckpt/a.bin", 0, &mf, &len), -ENOENT);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(stg_files_list(f, 1000, "/private", false, record, &s), 0);
	CHECK_EQ(s.n, 0);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(stg_files_list(f, 1001, "", false, record, &s), 0);
	CHECK_EQ(s.n, 1);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(stg_files_list(f, 4242, "", false, record, &s), 0);
	CHECK_EQ(s.n, 0);

	/* foreach: every manifest of every user, with its uid. */
	struct owned o = {0};
	CHECK_EQ(stg_files_foreach(f, record_owned, &o), 0);
	CHECK_EQ(o.n, 6);
	CHECK_EQ(count_uid(&o, 1001), 1);
	CHECK_EQ(count_uid(&o, 1000), 5);

	/* A corrupt manifest is refused by get and skipped by list. */
	char id[STG_HASH_HEX_LEN + 1], path[512];
	stg_catalog_file_id("/other/c.bin", id);
	snprintf(path, sizeof(path), "%s/files/1000/%s/v%020d.mf", dir, id, 1);
	int fd = open(path, O_WRONLY);
	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, "X", 1, 70), 1);
	close(fd);
	CHECK_EQ(stg_files_get(f, 1000, "/other/c.bin", 1, &mf, &len), -EBADMSG);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(stg_files_list(f, 1000, "/other", false, record, &s), 0);
	CHECK_EQ(s.n, 0);

	/* Reopened, everything is still there. */
	stg_files_free(f);
	CHECK_EQ(stg_files_open(dirfd, &f), 0);
	memset(&o, 0, sizeof(o));
	CHECK_EQ(stg_files_foreach(f, record_owned, &o), 0);
	CHECK_EQ(o.n, 5);
	/* ...and listed by prefix, from the path index rebuilt from disk. */
	memset(&s, 0, sizeof(s));
	CHECK_EQ(stg_files_list(f, 1000, "/ckpt/", false, record, &s), 0);
	CHECK_EQ(s.n, 4);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(stg_files_list(f, 1000, "/ckpt/b.bin", false, record, &s), 0);
	CHECK_EQ(s.n, 2);
	memset(&s, 0, sizeof(s));
	CHECK_EQ(stg_files_list(f, 1001, "", false, record, &s), 0);
	CHECK_EQ(s.n, 1);

	/* Retention counts closed versions; an open one (a sync's) goes when a
	 * newer one takes its number or a newer closed one comes. */
	uint64_t c1 = 1ull << 20 | 1, c2 = 2ull << 20 | 2, o3 = 3ull << 20 | 3,
		 o3b = 4ull << 20 | 3, c3 = 5ull << 20 | 3;
	CHECK_EQ(put_flags(f, "/ckpt/o.bin", c1, 0, 2), 0);
	CHECK_EQ(put_flags(f, "/ckpt/o.bin", c2, 0, 2), 0);
	CHECK_EQ(put_flags(f, "/ckpt/o.bin", o3, STG_MANIFEST_OPEN, 2), 0);
	CHECK_EQ(put_flags(f, "/ckpt/o.bin", o3b, STG_MANIFEST_OPEN, 2), 1); /* o3 */
	CHECK_EQ(stg_files_get(f, 3000, "/ckpt/o.bin", o3, &mf, &len), -ENOENT);
	CHECK_EQ(stg_files_get(f, 3000, "/ckpt/o.bin", c1, &mf, &len), 0);
	free(mf);
	CHECK_EQ(put_flags(f, "/ckpt/o.bin", c3, 0, 2), 2); /* o3b, and c1 beyond keep */
	CHECK_EQ(stg_files_get(f, 3000, "/ckpt/o.bin", c2, &mf, &len), 0);
	free(mf);
	CHECK_EQ(stg_files_get(f, 3000, "/ckpt/o.bin", o3b, &mf, &len), -ENOENT);
	CHECK_EQ(stg_files_get(f, 3000, "/ckpt/o.bin", c1, &mf, &len), -ENOENT);
	test_parts_collide(f);
	test_parts_retention(f);
	test_held(f, dir);
	test_deletions(f);
	test_withdraw(f);
	stg_files_free(f);
	stg_files_free(NULL);
	close(dirfd);
	return harness_done();
}
