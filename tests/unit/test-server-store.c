/* SPDX-License-Identifier: MIT */
/* The server's chunk store: round trips, recovery from torn and corrupt
 * records and from hint files, garbage collection and compaction,
 * concurrency, locking. */
#include <fcntl.h>
#include <inttypes.h>
#include <ftw.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "chunk.h"
#include "harness.h"
#include "hint.h"
#include "segment.h"
#include "store.h"
#include "util.h"

struct obj {
	uint8_t *data;
	size_t len;
	struct stg_hash hash;
};

/* A chunk object of n bytes of content from seed; compressible ones are
 * lz4-encoded. */
static struct obj make_obj(uint64_t seed, size_t n, bool compressible)
{
	uint8_t *raw = malloc(n);
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		raw[i] = compressible ? (uint8_t)("checkpoint "[i % 11] + (x % 64 == 0)) : (uint8_t)x;
	}
	struct obj o;
	stg_hash_compute(raw, n, &o.hash);
	o.data = malloc(stg_chunk_bound(n));
	struct stg_chunk_codec off = {0};
	o.len = stg_chunk_encode(raw, n, &o.hash, compressible ? &stg_chunk_codec_default : &off,
				 o.data);
	free(raw);
	return o;
}

static void free_obj(struct obj *o)
{
	free(o->data);
	o->data = NULL;
}

/* Is o stored, intact? */
static bool reads_back(struct stg_store *s, const struct obj *o)
{
	struct stg_store_obj got;
	if (stg_store_get(s, &o->hash, &got) != 0)
		return false;
	bool same = got.len == o->len && memcmp(got.obj, o->data, got.len) == 0;
	stg_store_obj_free(&got);
	return same;
}

static char *base;

static void subdir(char *out, size_t n, const char *name)
{
	if (!base)
		base = harness_tmpdir();
	snprintf(out, n, "%s/%s", base, name);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void seg_path(char *out, size_t n, const char *dir, uint64_t id)
{
	char name[STG_SEGMENT_NAME_LEN + 1];
	stg_segment_name(id, name);
	snprintf(out, n, "%s/segments/%s", dir, name);
}

static void hint_path(char *out, size_t n, const char *dir, uint64_t id)
{
	snprintf(out, n, "%s/segments/%016" PRIx64 ".hint", dir, id);
}

static off_t file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Flips a bit of the byte at offset at of the file at path. */
static void flip_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	uint8_t b;
	CHECK_EQ(stg_pread_all(fd, &b, 1, at), 0);
	b ^= 0x01;
	CHECK_EQ(stg_pwrite_all(fd, &b, 1, at), 0);
	close(fd);
}

static struct stg_store *open_store(const char *dir, uint64_t segment_size, uint64_t capacity)
{
	struct stg_store_options o = {.segment_size = segment_size, .capacity = capacity};
	struct stg_store *s = NULL;
	int r = stg_store_open(dir, &o, &s);
	CHECK_EQ(r, 0);
	if (r < 0)
		exit(harness_done());
	stg_store_refs_counted(s); /* no manifests here */
	return s;
}

/* Reopens the store in dir and checks that o[0..n) read back intact. */
static void reads_back_reopened(const char *dir, const struct obj *o, int n)
{
	struct stg_store *s = open_store(dir, 0, 0);
	for (int i = 0; i < n; i++)
		CHECK(reads_back(s, &o[i]));
	stg_store_free(s);
}

static void roundtrip(void)
{
	char dir[512];
	subdir(dir, sizeof(dir), "roundtrip");
	struct stg_store *s = open_store(dir, 0, 0);
	/* (The 1 MiB record goes to the disk with O_DIRECT where the file
	 * system takes it, the others through the page cache, into one
	 * segment.) */
	struct obj o[4] = {make_obj(1, 5000, false), make_obj(2, 70000, true), make_obj(3, 1, false),
			   make_obj(5, 1 << 20, false)};
	struct stg_hash h;
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(stg_store_validate(o[i].data, o[i].len, &h), 0);
		CHECK(stg_hash_eq(&h, &o[i].hash));
		CHECK(!stg_store_has(s, &o[i].hash));
		CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
		CHECK(stg_store_has(s, &o[i].hash));
	}
	o[0].data[100] ^= 1;
	CHECK_EQ(stg_store_validate(o[0].data, o[0].len, &h), -EBADMSG);
	CHECK_EQ(stg_store_validate(o[0].data, 10, &h), -EBADMSG);
	o[0].data[100] ^= 1;
	for (int i = 0; i < 4; i++)
		CHECK(reads_back(s, &o[i]));
	struct stg_store_stats st;
	stg_store_stats(s, &st);
	CHECK_EQ(st.chunks, 4);
	CHECK_EQ(st.segments, 1);
	uint64_t bytes = st.segment_bytes;
	/* The small records follow each other 8-byte aligned; the 1 MiB one
	 * starts at the next multiple of 4096. */
	uint64_t small = STG_SEGMENT_HEADER_SIZE;
	for (int i = 0; i < 3; i++)
		small += stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)o[i].len);
	uint64_t large = stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)o[3].len);
	CHECK_EQ(st.chunk_bytes, small - STG_SEGMENT_HEADER_SIZE + large);
	CHECK_EQ(bytes, (small + 4095) / 4096 * 4096 + large);
	CHECK(st.index_bytes > 0);
	/* A second put of a stored chunk writes nothing, and says so. */
	CHECK_EQ(stg_store_put(s, o[1].data, o[1].len, &o[1].hash), 1);
	stg_store_stats(s, &st);
	CHECK_EQ(st.segment_bytes, bytes);
	struct obj absent = make_obj(4, 100, false);
	struct stg_store_obj got;
	CHECK_EQ(stg_store_get(s, &absent.hash, &got), -ENOENT);
	CHECK_EQ(stg_store_put(s, o[0].data, 10, &o[0].hash), -EINVAL);
	CHECK_EQ(stg_store_sync(s), 0);
	CHECK(stg_store_dirfd(s) >= 0);
	stg_store_free(s);

	s = open_store(dir, 0, 0);
	stg_store_stats(s, &st);
	CHECK_EQ(st.chunks, 4);
	CHECK_EQ(st.segment_bytes, bytes);
	for (int i = 0; i < 4; i++)
		CHECK(reads_back(s, &o[i]));
	CHECK(!stg_store_has(s, &absent.hash));
	stg_store_free(s);
	for (int i = 0; i < 4; i++)
		free_obj(&o[i]);
	free_obj(&absent);
}

/* Pins a record byte for byte, as the store writes it. */
static void golden(void)
{
	char dir[512], path[600];
	subdir(dir, sizeof(dir), "golden");
	struct stg_store *s = open_store(dir, 0, 0);
	uint8_t text[100];
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = (uint8_t)"checkpoint "[i % 11];
	struct obj o;
	stg_hash_compute(text, sizeof(text), &o.hash);
	o.data = malloc(stg_chunk_bound(sizeof(text)));
	o.len = stg_chunk_encode(text, sizeof(text), &o.hash, &(struct stg_chunk_codec){0}, o.data);
	CHECK_EQ(stg_store_put(s, o.data, o.len, &o.hash), 0);
	stg_store_free(s);

	/* Format 2: the record padded to a multiple of 8 bytes only. */
	seg_path(path, sizeof(path), dir, 1);
	enum { RECORD = (STG_RECORD_HEADER_SIZE + 140 + 7) / 8 * 8 };
	CHECK_EQ(o.len, 140);
	CHECK_EQ(file_size(path), 4096 + RECORD);
	int fd = open(path, O_RDONLY);
	uint8_t buf[4096 + RECORD];
	CHECK_EQ(stg_pread_all(fd, buf, sizeof(buf), 0), 0);
	close(fd);
	struct stg_segment_header sh;
	CHECK_EQ(stg_segment_header_decode(buf, 4096, &sh), 0);
	CHECK_EQ(sh.id, 1);
	CHECK_EQ(sh.format, 2);
	CHECK(sh.created_ns > 0);
	CHECK(harness_golden("segment-record-v2.bin", buf + 4096, RECORD));
	/* Every bit of the header block counts. */
	int accepted = 0;
	for (size_t i = 0; i < 4096; i += 7) {
		buf[i] ^= 0x40;
		accepted += stg_segment_header_decode(buf, 4096, &sh) == 0;
		buf[i] ^= 0x40;
	}
	CHECK_EQ(accepted, 0);
	/* And of the record header and body. */
	accepted = 0;
	for (size_t i = 4096; i < 4096 + STG_RECORD_HEADER_SIZE + o.len; i++) {
		buf[i] ^= 0x02;
		accepted += stg_segment_record_check(buf + 4096, buf + 4096 + 32, o.len) == 0;
		buf[i] ^= 0x02;
	}
	CHECK_EQ(accepted, 0);

	/* A store of format 1 (an older release's) with its segment of format
	 * 1, the same record padded to 4096 bytes: read, appended to in its
	 * format, read again after a restart. */
	subdir(dir, sizeof(dir), "golden-v1");
	char segs[600];
	snprintf(segs, sizeof(segs), "%s/segments", dir);
	CHECK_EQ(stg_mkdir_p(segs, 0700), 0);
	snprintf(path, sizeof(path), "%s/FORMAT", dir);
	FILE *f = fopen(path, "w");
	fputs("stagehand-store 1\n", f);
	fclose(f);
	size_t flen;
	uint8_t *v1 = harness_fixture("segment-record-v1.bin", &flen);
	CHECK_EQ(flen, 4096);
	seg_path(path, sizeof(path), dir, 1);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	uint8_t hdr[4096];
	stg_segment_header_encode(hdr, 1, 1, 1764000000000000000);
	CHECK_EQ(stg_write_all(fd, hdr, sizeof(hdr)), 0);
	CHECK_EQ(stg_write_all(fd, v1, flen), 0);
	close(fd);
	free(v1);
	s = open_store(dir, 0, 0);
	CHECK(reads_back(s, &o));
	struct obj more = make_obj(7, 3000, false);
	CHECK_EQ(stg_store_put(s, more.data, more.len, &more.hash), 0);
	stg_store_free(s);
	CHECK_EQ(file_size(path), 3 * 4096); /* appended in format 1 */
	s = open_store(dir, 0, 0);
	CHECK(reads_back(s, &o));
	CHECK(reads_back(s, &more));
	stg_store_free(s);
	free_obj(&more);
	free_obj(&o);
}

/* What the records cost beyond their bodies: at most 2% for chunks of
 * 64 KiB (format 1 padded each to 4096 bytes: 6.25%). */
static void overhead(void)
{
	char dir[512];
	subdir(dir, sizeof(dir), "overhead");
	struct stg_store *s = open_store(dir, 0, 0);
	uint64_t bodies = 0;
	for (int i = 0; i < 64; i++) {
		struct obj o = make_obj(3000 + (uint64_t)i, 64 << 10, false);
		CHECK_EQ(stg_store_put(s, o.data, o.len, &o.hash), 0);
		bodies += o.len;
		free_obj(&o);
	}
	struct stg_store_stats st;
	stg_store_stats(s, &st);
	double over = (double)(st.segment_bytes - STG_SEGMENT_HEADER_SIZE) / (double)bodies - 1;
	printf("overhead: %.2f%% beyond the bodies of 64 KiB chunks (format 1: %.2f%%)\n",
	       over * 100,
	       ((double)stg_segment_record_size(1, (64 << 10) + 40) / ((64 << 10) + 40) - 1) * 100);
	CHECK(over <= 0.02);
	stg_store_free(s);
}

static void torn_tail(void)
{
	char dir[512], path[600];
	subdir(dir, sizeof(dir), "torn");
	seg_path(path, sizeof(path), dir, 1);
	struct stg_store *s = open_store(dir, 0, 0);
	struct obj o[3] = {make_obj(11, 10000, false), make_obj(12, 10000, false),
			   make_obj(13, 10000, false)};
	for (int i = 0; i < 3; i++)
		CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
	stg_store_free(s);
	off_t two = 4096 + 2 * (off_t)stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)o[0].len);
	CHECK_EQ(file_size(path), two + (off_t)stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)o[2].len));

	/* A write cut short in the middle of the third record. */
	CHECK_EQ(truncate(path, two + 5000), 0);
	s = open_store(dir, 0, 0);
	CHECK_EQ(file_size(path), two);
	CHECK(reads_back(s, &o[0]));
	CHECK(reads_back(s, &o[1]));
	CHECK(!stg_store_has(s, &o[2].hash));
	stg_store_free(s);

	/* Garbage after the last record. */
	int fd = open(path, O_WRONLY | O_APPEND);
	struct obj junk = make_obj(14, 9000, false);
	CHECK_EQ(stg_write_all(fd, junk.data, junk.len), 0);
	close(fd);
	s = open_store(dir, 0, 0);
	CHECK_EQ(file_size(path), two);
	CHECK(reads_back(s, &o[0]));
	CHECK(reads_back(s, &o[1]));
	/* The store goes on appending where the valid records end. */
	CHECK_EQ(stg_store_put(s, o[2].data, o[2].len, &o[2].hash), 0);
	stg_store_free(s);
	reads_back_reopened(dir, o, 3);
	for (int i = 0; i < 3; i++)
		free_obj(&o[i]);
	free_obj(&junk);
}

static void corrupt_record(void)
{
	char dir[512], path[600];
	subdir(dir, sizeof(dir), "corrupt");
	seg_path(path, sizeof(path), dir, 1);
	struct stg_store *s = open_store(dir, 0, 0);
	struct obj o[3] = {make_obj(21, 6000, false), make_obj(22, 20000, false),
			   make_obj(23, 7000, false)};
	for (int i = 0; i < 3; i++)
		CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
	/* One byte of the second record's body, in the middle of its second
	 * 4096-byte block so that resynchronization has to probe past it. */
	off_t at = 4096 + 32 + 6000 +
		   (off_t)stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)o[0].len);
	flip_byte(path, at);
	struct stg_store_obj got;
	CHECK_EQ(stg_store_get(s, &o[1].hash, &got), -EBADMSG);
	CHECK(reads_back(s, &o[0]));
	CHECK(reads_back(s, &o[2]));
	stg_store_free(s);

	/* The read that found the damage took the segment's hint log away:
	 * the start scans the segment and probes past the damage. */
	off_t size = file_size(path);
	char log[600];
	snprintf(log, sizeof(log), "%s/segments/0000000000000001.hlog", dir);
	CHECK_EQ(file_size(log), -1);
	s = open_store(dir, 0, 0);
	CHECK_EQ(file_size(path), size);
	CHECK(reads_back(s, &o[0]));
	CHECK(!stg_store_has(s, &o[1].hash));
	CHECK(reads_back(s, &o[2]));
	CHECK_EQ(stg_store_put(s, o[1].data, o[1].len, &o[1].hash), 0);
	CHECK(reads_back(s, &o[1]));
	stg_store_free(s);
	for (int i = 0; i < 3; i++)
		free_obj(&o[i]);
}

static uint64_t disk_usage(const char *dir)
{
	char path[600];
	uint64_t total = 0;
	for (uint64_t id = 1; id < 1000; id++) {
		seg_path(path, sizeof(path), dir, id);
		struct stat st;
		if (stat(path, &st) == 0)
			total += (uint64_t)st.st_blocks * 512;
	}
	return total;
}

/* One pass while marked[0..n) are referenced (as the held entries of the
 * manifests filed then would be), and only they. */
static void gc_cycle(struct stg_store *s, struct obj *marked, size_t n,
		     struct stg_store_gc_result *res)
{
	for (size_t i = 0; i < n; i++)
		stg_store_ref(s, &marked[i].hash);
	stg_store_gc_begin(s);
	CHECK_EQ(stg_store_gc_end(s, res), 0);
	for (size_t i = 0; i < n; i++)
		stg_store_unref(s, &marked[i].hash);
}

/* Descriptors of this process open on path with O_DIRECT. */
static int direct_fds_on(const char *path)
{
	int n = 0;
	char real[PATH_MAX];
	if (!realpath(path, real))
		return -1;
	for (int fd = 0; fd < 1024; fd++) {
		char link[64], target[PATH_MAX], info[64];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		ssize_t k = readlink(link, target, sizeof(target) - 1);
		if (k < 0)
			continue;
		target[k] = '\0';
		snprintf(info, sizeof(info), "/proc/self/fdinfo/%d", fd);
		FILE *f = strcmp(target, real) == 0 ? fopen(info, "r") : NULL;
		unsigned flags = 0;
		char line[128];
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "flags: %o", &flags) == 1)
				n += (flags & O_DIRECT) != 0;
		if (f)
			fclose(f);
	}
	return n;
}

/* Large records are read with O_DIRECT, from every segment (not only the
 * one appended to), and their damage is found as in the page cache. */
static void large_records(void)
{
	char dir[512], first[600];
	subdir(dir, sizeof(dir), "large");
	seg_path(first, sizeof(first), dir, 1);
	/* Each record fills a segment of 2 MiB: two segments. */
	struct stg_store *s = open_store(dir, 2u << 20, 0);
	struct obj o[2] = {make_obj(31, 1 << 20, false), make_obj(32, 1 << 20, false)};
	for (int i = 0; i < 2; i++)
		CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
	CHECK_EQ(stg_store_sync(s), 0);
	stg_store_free(s);
	s = open_store(dir, 2u << 20, 0);
	/* Where the file system takes O_DIRECT, the first read of the first
	 * segment (not the one appended to) opens it so. */
	int probe = open(first, O_RDONLY | O_DIRECT);
	bool direct = probe >= 0 && sysconf(_SC_PAGESIZE) <= (long)STG_SEGMENT_ALIGN;
	if (probe >= 0)
		close(probe);
	CHECK_EQ(direct_fds_on(first), 0);
	for (int i = 0; i < 2; i++)
		CHECK(reads_back(s, &o[i]));
	CHECK_EQ(direct_fds_on(first), direct ? 1 : 0);
	/* One byte of the first record's body, written through the page
	 * cache: the direct read sees it. */
	off_t at = 4096 + 32 + 500000;
	flip_byte(first, at);
	struct stg_store_obj got;
	CHECK_EQ(stg_store_get(s, &o[0].hash, &got), -EBADMSG);
	CHECK(reads_back(s, &o[1]));
	stg_store_free(s);
	for (int i = 0; i < 2; i++)
		free_obj(&o[i]);
}

/* A segment cut between a record's body and the end of its padding (a copy,
 * an outside truncate): the record still reads, with O_DIRECT or not, and
 * the records appended after a restart start aligned. The large record
 * starts at a multiple of 4096, after zeros. */
static void unpadded_tail(void)
{
	char dir[512], path[600];
	subdir(dir, sizeof(dir), "unpadded");
	seg_path(path, sizeof(path), dir, 1);
	struct stg_store *s = open_store(dir, 0, 0);
	struct obj o[4] = {make_obj(41, 5000, false), make_obj(42, 1 << 20, false),
			   make_obj(43, 3000, false), make_obj(44, 1 << 20, false)};
	for (int i = 0; i < 2; i++)
		CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
	CHECK_EQ(stg_store_sync(s), 0);
	stg_store_free(s);
	off_t at = (off_t)stg_segment_record_place(
		STG_SEGMENT_FORMAT, (uint32_t)o[1].len,
		4096 + stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)o[0].len));
	CHECK_EQ(at, 3 * 4096);
	off_t end = at + STG_RECORD_HEADER_SIZE + (off_t)o[1].len;
	CHECK_EQ(truncate(path, end), 0);
	s = open_store(dir, 0, 0);
	CHECK_EQ(file_size(path), at + (off_t)stg_segment_record_size(STG_SEGMENT_FORMAT,
								     (uint32_t)o[1].len));
	CHECK_EQ(file_size(path) % STG_SEGMENT_ALIGN, 0);
	for (int i = 0; i < 2; i++)
		CHECK(reads_back(s, &o[i]));
	for (int i = 2; i < 4; i++)
		CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
	for (int i = 0; i < 4; i++)
		CHECK(reads_back(s, &o[i]));
	stg_store_free(s);
	reads_back_reopened(dir, o, 4);
	for (int i = 0; i < 4; i++)
		free_obj(&o[i]);
}

static void gc_epochs(void)
{
	char dir[512];
	subdir(dir, sizeof(dir), "gc");
	struct stg_store *s = open_store(dir, 256 << 10, 0);
	struct obj o[3] = {make_obj(31, 9000, false), make_obj(32, 9000, true),
			   make_obj(33, 9000, false)};
	for (int i = 0; i < 3; i++)
		CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
	struct stg_store_gc_result res;
	gc_cycle(s, &o[0], 1, &res);
	/* Unmarked for one cycle only: kept. */
	CHECK_EQ(res.chunks_dropped, 0);
	for (int i = 0; i < 3; i++)
		CHECK(stg_store_has(s, &o[i].hash));
	gc_cycle(s, &o[0], 1, &res);
	CHECK_EQ(res.chunks_dropped, 2);
	CHECK_EQ(res.bytes_dropped, stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)o[1].len) +
					    stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)o[2].len));
	CHECK(reads_back(s, &o[0]));
	CHECK(!stg_store_has(s, &o[1].hash));
	CHECK(!stg_store_has(s, &o[2].hash));
	struct stg_store_stats st;
	stg_store_stats(s, &st);
	CHECK_EQ(st.chunks, 1);
	CHECK_EQ(st.chunk_bytes, stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)o[0].len));
	stg_store_free(s);
	for (int i = 0; i < 3; i++)
		free_obj(&o[i]);
}

/* Reference counts: past what a slot holds, for a chunk not stored yet,
 * across a damaged body put again; and a pass with nothing changed looks
 * at nothing. */
static void references(void)
{
	char dir[512], path[600];
	subdir(dir, sizeof(dir), "refs");
	seg_path(path, sizeof(path), dir, 1);
	struct stg_store *s = open_store(dir, 0, 0);
	struct obj o[3] = {make_obj(41, 7000, false), make_obj(42, 7000, false),
			   make_obj(43, 7000, false)};
	struct stg_store_gc_result res;
	for (int i = 0; i < 600; i++)
		stg_store_ref(s, &o[0].hash); /* before its put */
	stg_store_ref(s, &o[1].hash);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
	CHECK_EQ(stg_store_refs(s, &o[0].hash), 600);
	for (int i = 0; i < 599; i++)
		stg_store_unref(s, &o[0].hash);
	CHECK_EQ(stg_store_refs(s, &o[0].hash), 1);
	for (int i = 0; i < 3; i++) {
		stg_store_gc_begin(s);
		CHECK_EQ(stg_store_gc_end(s, &res), 0);
	}
	CHECK(reads_back(s, &o[0]));
	CHECK(reads_back(s, &o[1]));
	CHECK(!stg_store_has(s, &o[2].hash));
	/* Nothing changed since: nothing to look at. */
	stg_store_gc_begin(s);
	CHECK_EQ(stg_store_gc_end(s, &res), 0);
	CHECK_EQ(res.candidates, 0);
	CHECK_EQ(res.chunks_dropped, 0);

	/* o[1]'s body found damaged: forgotten, its reference kept for when
	 * it is put again. */
	flip_byte(path, 4096 + 32 + (off_t)o[1].len / 2 +
			      (off_t)stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)o[0].len));
	struct stg_store_obj got;
	CHECK_EQ(stg_store_get(s, &o[1].hash, &got), -EBADMSG);
	CHECK(!stg_store_has(s, &o[1].hash));
	CHECK_EQ(stg_store_refs(s, &o[1].hash), 1);
	CHECK_EQ(stg_store_put(s, o[1].data, o[1].len, &o[1].hash), 0);
	for (int i = 0; i < 3; i++) {
		stg_store_gc_begin(s);
		CHECK_EQ(stg_store_gc_end(s, &res), 0);
	}
	CHECK(reads_back(s, &o[1]));
	/* The last references taken back: the next pass drops both. */
	stg_store_unref(s, &o[0].hash);
	stg_store_unref(s, &o[1].hash);
	stg_store_gc_begin(s);
	CHECK_EQ(stg_store_gc_end(s, &res), 0);
	CHECK_EQ(res.candidates, 2);
	CHECK_EQ(res.chunks_dropped, 2);
	CHECK(!stg_store_has(s, &o[0].hash) && !stg_store_has(s, &o[1].hash));
	CHECK_EQ(stg_store_refs(s, &o[0].hash), 0);
	stg_store_free(s);
	for (int i = 0; i < 3; i++)
		free_obj(&o[i]);
}

static void compaction(void)
{
	enum { N = 200, EVERY = 10 };
	char dir[512];
	subdir(dir, sizeof(dir), "compact");
	struct stg_store *s = open_store(dir, 256 << 10, 0);
	struct obj *o = calloc(N, sizeof(*o)), *keep = calloc(N / EVERY, sizeof(*keep));
	for (int i = 0; i < N; i++) {
		o[i] = make_obj(1000 + (uint64_t)i, 8000, false);
		CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
		if (i % EVERY == 0)
			keep[i / EVERY] = o[i];
	}
	CHECK_EQ(stg_store_sync(s), 0);
	struct stg_store_stats before, after;
	stg_store_stats(s, &before);
	uint64_t du_before = disk_usage(dir);
	CHECK(before.segments >= 6);

	struct stg_store_gc_result res, total = {0};
	gc_cycle(s, keep, N / EVERY, &res);
	CHECK_EQ(res.chunks_dropped, 0);
	gc_cycle(s, keep, N / EVERY, &total);
	CHECK_EQ(total.chunks_dropped, N - N / EVERY);
	CHECK(total.segments_compacted > 0);
	CHECK(total.segments_removed >= total.segments_compacted);
	CHECK(total.bytes_moved > 0);
	stg_store_stats(s, &after);
	uint64_t du_after = disk_usage(dir);
	printf("compaction: %llu -> %llu segments, %llu -> %llu bytes on disk, %llu moved\n",
	       (unsigned long long)before.segments, (unsigned long long)after.segments,
	       (unsigned long long)du_before, (unsigned long long)du_after,
	       (unsigned long long)total.bytes_moved);
	CHECK_EQ(after.chunks, N / EVERY);
	CHECK(after.segments < before.segments);
	CHECK(du_after * 3 < du_before);
	CHECK(after.segment_bytes * 3 < before.segment_bytes);
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += i % EVERY == 0 ? !reads_back(s, &o[i]) : stg_store_has(s, &o[i].hash);
	CHECK_EQ(bad, 0);
	stg_store_free(s);

	/* The moved records are found again after a restart. Dropped chunks
	 * whose records are still in a segment that was not compacted come
	 * back too, until collections drop them again. */
	s = open_store(dir, 256 << 10, 0);
	stg_store_stats(s, &after);
	CHECK(after.chunks >= N / EVERY);
	bad = 0;
	for (int i = 0; i < N; i += EVERY)
		bad += !reads_back(s, &o[i]);
	CHECK_EQ(bad, 0);
	gc_cycle(s, keep, N / EVERY, &res);
	gc_cycle(s, keep, N / EVERY, &res);
	stg_store_stats(s, &after);
	CHECK_EQ(after.chunks, N / EVERY);
	bad = 0;
	for (int i = 0; i < N; i++)
		bad += i % EVERY == 0 ? !reads_back(s, &o[i]) : stg_store_has(s, &o[i].hash);
	CHECK_EQ(bad, 0);
	stg_store_free(s);
	for (int i = 0; i < N; i++)
		free_obj(&o[i]);
	free(o);
	free(keep);
}

enum { THREADS = 4, REFS = 300 };

struct worker {
	struct stg_store *s;
	int id;
	struct obj refs[REFS];
	int errors;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t x = (uint64_t)w->id + 77;
	for (int i = 0; i < REFS; i++) {
		struct obj junk = make_obj(900000 + (uint64_t)w->id * REFS + (uint64_t)i,
					   2000 + (size_t)(i * 37 % 12000), i % 3 == 0);
		w->errors += stg_store_put(w->s, w->refs[i].data, w->refs[i].len,
					   &w->refs[i].hash) != 0;
		w->errors += stg_store_put(w->s, junk.data, junk.len, &junk.hash) != 0;
		free_obj(&junk);
		for (int k = 0; k < 4; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			int j = (int)((x >> 33) % (uint64_t)(i + 1));
			w->errors += !reads_back(w->s, &w->refs[j]);
		}
		if (i % 50 == 0)
			w->errors += stg_store_sync(w->s) != 0;
	}
	return NULL;
}

static void concurrency(void)
{
	char dir[512];
	subdir(dir, sizeof(dir), "threads");
	struct stg_store *s = open_store(dir, 256 << 10, 0);
	static struct worker w[THREADS];
	static struct obj all[THREADS * REFS];
	pthread_t t[THREADS];
	for (int k = 0; k < THREADS; k++) {
		w[k].s = s;
		w[k].id = k;
		for (int i = 0; i < REFS; i++) {
			w[k].refs[i] = make_obj(500000 + (uint64_t)k * REFS + (uint64_t)i,
						1000 + (size_t)(i * 53 % 15000), i % 4 == 0);
			all[k * REFS + i] = w[k].refs[i];
		}
	}
	for (int k = 0; k < THREADS; k++)
		pthread_create(&t[k], NULL, work, &w[k]);
	struct stg_store_gc_result total = {0};
	int cycles = 0;
	/* Collect until the workers are done; every reference is marked each
	 * time, so none may ever go missing while the junk is dropped and the
	 * segments compacted under the readers. */
	bool joined[THREADS] = {false};
	for (int running = THREADS; running > 0;) {
		struct stg_store_gc_result res;
		gc_cycle(s, all, THREADS * REFS, &res);
		total.chunks_dropped += res.chunks_dropped;
		total.segments_compacted += res.segments_compacted;
		total.bytes_moved += res.bytes_moved;
		cycles++;
		for (int k = 0; k < THREADS; k++) {
			if (!joined[k] && pthread_tryjoin_np(t[k], NULL) == 0) {
				joined[k] = true;
				running--;
			}
		}
	}
	printf("concurrency: %d gc cycles, %llu chunks dropped, %llu segments compacted\n", cycles,
	       (unsigned long long)total.chunks_dropped,
	       (unsigned long long)total.segments_compacted);
	for (int k = 0; k < THREADS; k++)
		CHECK_EQ(w[k].errors, 0);
	gc_cycle(s, all, THREADS * REFS, &total);
	gc_cycle(s, all, THREADS * REFS, &total);
	struct stg_store_stats st;
	stg_store_stats(s, &st);
	CHECK_EQ(st.chunks, THREADS * REFS);
	stg_store_free(s);
	s = open_store(dir, 256 << 10, 0);
	int bad = 0;
	for (int i = 0; i < THREADS * REFS; i++)
		bad += !reads_back(s, &all[i]);
	CHECK_EQ(bad, 0);
	stg_store_free(s);
	for (int i = 0; i < THREADS * REFS; i++)
		free_obj(&all[i]);
}

static void capacity(void)
{
	char dir[512];
	subdir(dir, sizeof(dir), "capacity");
	struct stg_store *s = open_store(dir, 64 << 10, 100 << 10);
	int stored = 0, r = 0;
	for (int i = 0; i < 100 && r == 0; i++) {
		struct obj o = make_obj(3000 + (uint64_t)i, 5000, false);
		r = stg_store_put(s, o.data, o.len, &o.hash);
		stored += r == 0;
		free_obj(&o);
	}
	CHECK_EQ(r, -ENOSPC);
	struct stg_store_stats st;
	stg_store_stats(s, &st);
	CHECK(st.segment_bytes <= 100 << 10);
	CHECK(stored > 10);
	stg_store_free(s);
}

static void refusals(void)
{
	char dir[512], path[600];
	subdir(dir, sizeof(dir), "busy");
	struct stg_store *s = open_store(dir, 0, 0), *s2 = NULL;
	CHECK_EQ(stg_store_open(dir, NULL, &s2), -EBUSY);
	CHECK(s2 == NULL);
	stg_store_free(s);
	CHECK_EQ(stg_store_open(dir, NULL, &s2), 0);
	stg_store_free(s2);

	subdir(dir, sizeof(dir), "format");
	CHECK_EQ(stg_mkdir_p(dir, 0700), 0);
	snprintf(path, sizeof(path), "%s/FORMAT", dir);
	FILE *f = fopen(path, "w");
	fputs("stagehand-store 5\n", f);
	fclose(f);
	s2 = NULL;
	CHECK_EQ(stg_store_open(dir, NULL, &s2), -EPROTONOSUPPORT);
	CHECK(s2 == NULL);
	f = fopen(path, "w");
	fputs("stagehand-cache 1\n", f);
	fclose(f);
	CHECK_EQ(stg_store_open(dir, NULL, &s2), -EPROTO);
	/* Format 2 (it may hold content-defined manifests) opens, and a store
	 * asked for it again keeps it. */
	f = fopen(path, "w");
	fputs("stagehand-store 2\n", f);
	fclose(f);
	CHECK_EQ(stg_store_open(dir, NULL, &s2), 0);
	CHECK_EQ(stg_store_require_format(s2, 2), 0);
	stg_store_free(s2);
	s2 = NULL;

	/* A directory with something else in it is not taken over. */
	subdir(dir, sizeof(dir), "foreign");
	CHECK_EQ(stg_mkdir_p(dir, 0700), 0);
	snprintf(path, sizeof(path), "%s/notes.txt", dir);
	f = fopen(path, "w");
	fclose(f);
	CHECK_EQ(stg_store_open(dir, NULL, &s2), -EPROTO);

	struct stg_store_options o = {.segment_size = 100};
	subdir(dir, sizeof(dir), "options");
	CHECK_EQ(stg_store_open(dir, &o, &s2), -EINVAL);
}

/* Content of a chunk at step k of a series: a float64 field whose low
 * bytes change from one step to the next. */
static void series_step(uint8_t *p, size_t n, unsigned k)
{
	for (size_t i = 0; i + 8 <= n; i += 8) {
		double v = 500.0 + (double)i * 1e-2;
		memcpy(p + i, &v, 8);
		p[i] ^= (uint8_t)(k * 31 + i);
		p[i + 1] ^= (uint8_t)(k * 7);
	}
}

/* Decodes stored chunk h of n bytes as a client does: its chain of bases
 * fetched, root first. */
static int decode_from(struct stg_store *s, const struct stg_hash *h, size_t n, uint8_t *out)
{
	struct stg_store_obj o;
	int r = stg_store_get(s, h, &o);
	if (r < 0)
		return r;
	struct stg_hash base;
	if (!stg_chunk_base(o.obj, o.len, &base)) {
		r = stg_chunk_decode(o.obj, o.len, h, (uint32_t)n, out);
	} else {
		uint8_t *b = malloc(n);
		r = decode_from(s, &base, n, b);
		if (r == 0)
			r = stg_chunk_decode_delta(o.obj, o.len, h, (uint32_t)n, b, out);
		free(b);
	}
	stg_store_obj_free(&o);
	return r;
}

static bool stored_as_delta(struct stg_store *s, const struct stg_hash *h)
{
	struct stg_store_obj o;
	struct stg_hash base;
	if (stg_store_get(s, h, &o) < 0)
		return false;
	bool delta = stg_chunk_base(o.obj, o.len, &base);
	stg_store_obj_free(&o);
	return delta;
}

/* Delta objects: stored only against a stored base, checked against it,
 * keeping it alive, found again after a restart, and never chained deeper
 * than STG_CHUNK_DELTA_DEPTH. */
static void deltas(void)
{
	enum { STEPS = STG_CHUNK_DELTA_DEPTH + 3, N = 64 << 10 };
	char dir[512], path[600];
	subdir(dir, sizeof(dir), "deltas");
	struct stg_store *s = open_store(dir, 256 << 10, 0);
	uint8_t *raw[STEPS], *out = malloc(N);
	struct stg_hash h[STEPS];
	struct obj d[STEPS]; /* d[k]: step k as a delta against step k - 1 */
	struct stg_chunk_codec c = {.compress = 2 /* zstd */};
	for (unsigned k = 0; k < STEPS; k++) {
		raw[k] = malloc(N);
		series_step(raw[k], N, k);
		stg_hash_compute(raw[k], N, &h[k]);
		d[k].hash = h[k];
		d[k].data = malloc(stg_chunk_bound(N) + STG_CHUNK_BASE_SIZE);
		d[k].len = k ? stg_chunk_encode_delta(raw[k], N, &h[k], raw[k - 1], &h[k - 1], &c,
						      d[k].data)
			     : stg_chunk_encode(raw[0], N, &h[0], &c, d[0].data);
		CHECK(d[k].len > 0);
	}
	/* No base yet: refused, nothing stored. */
	CHECK_EQ(stg_store_put(s, d[1].data, d[1].len, &h[1]), -ENOLINK);
	CHECK(!stg_store_has(s, &h[1]));
	/* A delta that does not decode to its hash with its base. */
	CHECK_EQ(stg_store_put(s, d[0].data, d[0].len, &h[0]), 0);
	struct obj wrong = {.data = malloc(stg_chunk_bound(N) + STG_CHUNK_BASE_SIZE)};
	wrong.len = stg_chunk_encode_delta(raw[2], N, &h[1], raw[0], &h[0], &c, wrong.data);
	CHECK_EQ(stg_store_put(s, wrong.data, wrong.len, &h[1]), -EBADMSG);
	CHECK(!stg_store_has(s, &h[1]));
	free(wrong.data);
	/* The chain: each step against the one before. */
	for (unsigned k = 1; k < STEPS; k++)
		CHECK_EQ(stg_store_put(s, d[k].data, d[k].len, &h[k]), 0);
	for (unsigned k = 0; k < STEPS; k++) {
		CHECK_EQ(decode_from(s, &h[k], N, out), 0);
		CHECK(memcmp(out, raw[k], N) == 0);
		/* Deltas up to the depth; the next is stored on its own, and
		 * starts a chain again. */
		CHECK_EQ(stored_as_delta(s, &h[k]), k > 0 && k != STG_CHUNK_DELTA_DEPTH + 1);
	}
	CHECK(reads_back(s, &d[1]));
	/* The store now says it may hold deltas. */
	snprintf(path, sizeof(path), "%s/FORMAT", dir);
	FILE *f = fopen(path, "r");
	char line[64] = "";
	CHECK(f && fgets(line, sizeof(line), f));
	if (f)
		fclose(f);
	CHECK(strcmp(line, "stagehand-store 4\n") == 0); /* (4 holds 3) */

	/* Marking a delta keeps its chain, and nothing after it. */
	struct stg_store_gc_result res;
	unsigned last = STEPS - 1;
	struct obj keep[2] = {d[1], d[last]};
	gc_cycle(s, keep, 2, &res);
	gc_cycle(s, keep, 2, &res);
	for (unsigned k = 0; k < STEPS; k++)
		CHECK_EQ(stg_store_has(s, &h[k]), k <= 1 || k >= last - 1);
	CHECK(!stg_store_has(s, &h[2]));
	/* After a restart, the chains are known again from the segments. */
	stg_store_free(s);
	s = open_store(dir, 256 << 10, 0);
	gc_cycle(s, &keep[1], 1, &res);
	gc_cycle(s, &keep[1], 1, &res);
	for (unsigned k = 0; k < STEPS; k++)
		CHECK_EQ(stg_store_has(s, &h[k]), k >= last - 1);
	CHECK_EQ(decode_from(s, &h[last], N, out), 0);
	CHECK(memcmp(out, raw[last], N) == 0);
	/* Unmarked, the chain goes whole. */
	gc_cycle(s, NULL, 0, &res);
	gc_cycle(s, NULL, 0, &res);
	CHECK(!stg_store_has(s, &h[last]) && !stg_store_has(s, &h[last - 1]));
	stg_store_free(s);

	/* A base whose record is corrupt: once a read finds it (the start
	 * takes the records from the hint log unread), the deltas built on it
	 * are forgotten with it (HAVE then asks for them again); a chain on a
	 * sound base stays. */
	subdir(dir, sizeof(dir), "orphans");
	s = open_store(dir, 16 << 20, 0);
	for (unsigned k = 0; k < STEPS; k++)
		CHECK_EQ(stg_store_put(s, d[k].data, d[k].len, &h[k]), 0);
	stg_store_free(s);
	seg_path(path, sizeof(path), dir, 1);
	int fd = open(path, O_RDWR);
	uint8_t b;
	off_t at = 4096 + 32 + STG_CHUNK_HEADER_SIZE + 100; /* in d[0]'s payload */
	CHECK_EQ(stg_pread_all(fd, &b, 1, at), 0);
	b ^= 0x01;
	CHECK_EQ(stg_pwrite_all(fd, &b, 1, at), 0);
	close(fd);
	s = open_store(dir, 16 << 20, 0);
	struct stg_store_obj got;
	CHECK_EQ(stg_store_get(s, &h[0], &got), -EBADMSG);
	for (unsigned k = 0; k < STEPS; k++)
		CHECK_EQ(stg_store_has(s, &h[k]), k > STG_CHUNK_DELTA_DEPTH);
	CHECK_EQ(decode_from(s, &h[last], N, out), 0);
	CHECK(memcmp(out, raw[last], N) == 0);
	stg_store_free(s);
	for (unsigned k = 0; k < STEPS; k++) {
		free(raw[k]);
		free_obj(&d[k]);
	}
	free(out);
}

/* Two users' copies of one chunk are compared byte for byte, whatever their
 * encodings; a delta is served whole to whoever may not see its base. */
static void same_and_whole(void)
{
	enum { N = 64 << 10 };
	char dir[512];
	subdir(dir, sizeof(dir), "same");
	struct stg_store *s = open_store(dir, 0, 0);
	uint8_t *raw0 = malloc(N), *raw1 = malloc(N), *out = malloc(N);
	series_step(raw0, N, 0);
	series_step(raw1, N, 1);
	struct stg_hash h0, h1;
	stg_hash_compute(raw0, N, &h0);
	stg_hash_compute(raw1, N, &h1);
	struct stg_chunk_codec zstd = {.compress = 2}, none = {0};
	uint8_t *z0 = malloc(stg_chunk_bound(N)), *p0 = malloc(stg_chunk_bound(N)),
		*d1 = malloc(stg_chunk_bound(N) + STG_CHUNK_BASE_SIZE),
		*p1 = malloc(stg_chunk_bound(N));
	size_t z0len = stg_chunk_encode(raw0, N, &h0, &zstd, z0);
	size_t p0len = stg_chunk_encode(raw0, N, &h0, &none, p0);
	size_t d1len = stg_chunk_encode_delta(raw1, N, &h1, raw0, &h0, &zstd, d1);
	size_t p1len = stg_chunk_encode(raw1, N, &h1, &none, p1);
	CHECK(d1len > 0);
	CHECK_EQ(stg_store_same(s, &h0, p0, p0len), -ENOENT); /* not stored */
	CHECK_EQ(stg_store_same(s, &h1, d1, d1len), -ENOLINK); /* no base */
	CHECK_EQ(stg_store_put(s, z0, z0len, &h0), 0);
	CHECK_EQ(stg_store_same(s, &h0, p0, p0len), 1); /* another encoding */
	CHECK_EQ(stg_store_put(s, d1, d1len, &h1), 0);
	CHECK_EQ(stg_store_same(s, &h1, p1, p1len), 1); /* whole against a delta */
	CHECK_EQ(stg_store_same(s, &h1, d1, d1len), 1);

	/* Served whole: not a delta, and it decodes to the chunk alone. */
	struct stg_store_obj o;
	struct stg_hash b;
	CHECK_EQ(stg_store_get(s, &h1, &o), 0);
	CHECK(stg_chunk_base(o.obj, o.len, &b) && stg_hash_eq(&b, &h0));
	stg_store_obj_free(&o);
	CHECK_EQ(stg_store_get_whole(s, &h1, &o), 0);
	CHECK(!stg_chunk_base(o.obj, o.len, &b));
	CHECK_EQ(stg_chunk_decode(o.obj, o.len, &h1, N, out), 0);
	CHECK(memcmp(out, raw1, N) == 0);
	stg_store_obj_free(&o);
	CHECK_EQ(stg_store_get_whole(s, &h0, &o), 0); /* not a delta: as stored */
	CHECK(o.len == z0len && memcmp(o.obj, z0, z0len) == 0);
	stg_store_obj_free(&o);

	/* A damaged stored copy is not the same bytes. */
	char path[600];
	seg_path(path, sizeof(path), dir, 1);
	int fd = open(path, O_RDWR);
	uint8_t c;
	off_t at = 4096 + 32 + STG_CHUNK_HEADER_SIZE + 10; /* in z0's payload */
	CHECK_EQ(stg_pread_all(fd, &c, 1, at), 0);
	c ^= 0x40;
	CHECK_EQ(stg_pwrite_all(fd, &c, 1, at), 0);
	close(fd);
	CHECK_EQ(stg_store_same(s, &h0, p0, p0len), 0);
	stg_store_free(s);
	free(raw0), free(raw1), free(out), free(z0), free(p0), free(d1), free(p1);
}

static int count_hint(void *arg, const struct stg_hint_entry *e)
{
	struct stg_hint_entry *v = arg;
	v[v[0].len == 0 ? 0 : 1] = *e;
	return 0;
}

/* Pins a hint file byte for byte; every bit of it counts. */
static void hint_golden(void)
{
	char dir[512];
	subdir(dir, sizeof(dir), "hint-golden");
	CHECK_EQ(stg_mkdir_p(dir, 0700), 0);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	struct stg_hint_key k = {.id = 7, .created_ns = 1764000000123456789, .size = 1 << 20};
	struct stg_hint_entry v[2] = {
		{.offset = 4096, .len = 5000},
		{.offset = 4096 + 5032 + 8 - 5032 % 8, .len = 70000, .delta = true},
	};
	for (int i = 0; i < 16; i++) {
		v[0].hash.b[i] = (uint8_t)(i + 1);
		v[1].hash.b[i] = (uint8_t)(0xf0 - i);
		v[1].base.b[i] = (uint8_t)(0x30 + i);
	}
	CHECK_EQ(stg_hint_write(dfd, &k, v, 2), 0);
	char path[600];
	snprintf(path, sizeof(path), "%s/0000000000000007.hint", dir);
	enum { SIZE = STG_HINT_HEADER_SIZE + 2 * STG_HINT_ENTRY_SIZE };
	CHECK_EQ(file_size(path), SIZE);
	uint8_t buf[SIZE];
	int fd = open(path, O_RDONLY);
	CHECK_EQ(stg_pread_all(fd, buf, SIZE, 0), 0);
	close(fd);
	CHECK(harness_golden("hint-v1.bin", buf, SIZE));

	struct stg_hint_entry got[2] = {0};
	CHECK_EQ(stg_hint_read(dfd, &k, count_hint, got), 0);
	CHECK(got[0].offset == 4096 && got[0].len == 5000 && !got[0].delta);
	CHECK(got[1].delta && got[1].len == 70000 && stg_hash_eq(&got[1].base, &v[1].base));
	struct stg_hint_key other = k;
	other.size++;
	CHECK_EQ(stg_hint_read(dfd, &other, count_hint, got), -ESTALE);
	other = k;
	other.id = 8;
	CHECK_EQ(stg_hint_read(dfd, &other, count_hint, got), -ENOENT);
	int accepted = 0;
	for (size_t i = 0; i < STG_HINT_HEADER_SIZE; i++) {
		struct stg_hint_key dk;
		uint64_t n;
		buf[i] ^= 0x04;
		accepted += stg_hint_header_decode(buf, &dk, &n) == 0;
		buf[i] ^= 0x04;
	}
	for (size_t i = 0; i < 2 * STG_HINT_ENTRY_SIZE; i++) {
		struct stg_hint_entry e;
		uint8_t *p = buf + STG_HINT_HEADER_SIZE + i / STG_HINT_ENTRY_SIZE * STG_HINT_ENTRY_SIZE;
		buf[STG_HINT_HEADER_SIZE + i] ^= 0x04;
		accepted += stg_hint_entry_decode(p, &k, &e) == 0;
		buf[STG_HINT_HEADER_SIZE + i] ^= 0x04;
	}
	CHECK_EQ(accepted, 0);
	/* A record past the segment's end, checksum and all. */
	struct stg_hint_entry past = v[0], e;
	past.offset = k.size - 32;
	stg_hint_entry_encode(buf, &past);
	CHECK_EQ(stg_hint_entry_decode(buf, &k, &e), -EBADMSG);
	close(dfd);
}

/* A store in dir with segments of 64 KiB, holding o[0..n): chunks of 5000
 * bytes from seed on. */
static struct stg_store *filled_store(const char *dir, struct obj *o, int n, uint64_t seed)
{
	struct stg_store *s = open_store(dir, 64 << 10, 0);
	for (int i = 0; i < n; i++) {
		o[i] = make_obj(seed + (uint64_t)i, 5000, false);
		CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
	}
	return s;
}

/* A restart reads the sealed segments' hint files, not their records: only
 * the newest segment is scanned. A hint that is damaged, or that describes a
 * segment since changed, is passed over for a scan and written anew; one
 * without its segment goes. A record damaged behind its hint is found when
 * read, and forgotten so that clients send it again. */
static void hints(void)
{
	enum { N = 160 };
	char dir[512], path[600];
	subdir(dir, sizeof(dir), "hints");
	static struct obj o[N];
	struct stg_store *s = filled_store(dir, o, N, 500);
	struct stg_store_stats st;
	stg_store_stats(s, &st);
	uint64_t segments = st.segments;
	CHECK(segments > 10);
	CHECK_EQ(st.recovery_scanned_bytes, 0);
	CHECK_EQ(stg_store_sync(s), 0);
	stg_store_free(s);
	for (uint64_t id = 1; id < segments; id++) {
		hint_path(path, sizeof(path), dir, id);
		CHECK(file_size(path) > 0);
	}

	s = open_store(dir, 64 << 10, 0);
	stg_store_stats(s, &st);
	CHECK_EQ(st.chunks, N);
	CHECK_EQ(st.recovery_scanned_bytes, 0); /* the newest one's records are in its hint log */
	CHECK(st.recovery_hinted_records >= N - 10);
	for (int i = 0; i < N; i++)
		CHECK(reads_back(s, &o[i]));
	stg_store_free(s);

	/* Segment 2's first record damaged; segment 3's hint damaged;
	 * segment 4 grown behind its hint; a hint without a segment. */
	seg_path(path, sizeof(path), dir, 2);
	flip_byte(path, 4096 + 32 + 2000);
	hint_path(path, sizeof(path), dir, 3);
	flip_byte(path, file_size(path) - 20);
	seg_path(path, sizeof(path), dir, 4);
	int fd = open(path, O_WRONLY | O_APPEND);
	CHECK_EQ(stg_write_all(fd, "junk", 4), 0);
	close(fd);
	hint_path(path, sizeof(path), dir, 999);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	close(fd);
	s = open_store(dir, 64 << 10, 0);
	stg_store_stats(s, &st);
	CHECK(st.recovery_scanned_bytes > (64 << 10)); /* segments 3 and 4 */
	CHECK_EQ(file_size(path), -1);
	int damaged = -1, bad = 0;
	for (int i = 0; i < N; i++) {
		struct stg_store_obj got;
		int r = stg_store_get(s, &o[i].hash, &got);
		if (r == -EBADMSG && damaged < 0) {
			damaged = i;
			CHECK(!stg_store_has(s, &o[i].hash));
			CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
			continue;
		}
		bad += r != 0;
		if (r == 0)
			stg_store_obj_free(&got);
	}
	CHECK(damaged >= 0);
	CHECK_EQ(bad, 0);
	stg_store_free(s);

	/* The hints passed over were written anew; segment 2's went with the
	 * damage found in it, and its scan leaves the record out. */
	s = open_store(dir, 64 << 10, 0);
	stg_store_stats(s, &st);
	CHECK(st.recovery_scanned_bytes > 0 && st.recovery_scanned_bytes <= 64 << 10);
	for (int i = 0; i < N; i++)
		CHECK(reads_back(s, &o[i]));
	stg_store_free(s);
	s = open_store(dir, 64 << 10, 0);
	stg_store_stats(s, &st);
	CHECK_EQ(st.recovery_scanned_bytes, 0);
	stg_store_free(s);

	/* A process that dies after a sync and 3 more puts: the start takes
	 * the newest segment's records up to the sync from its hint log, and
	 * scans only what follows. */
	static struct obj more[8];
	for (int i = 0; i < 8; i++)
		more[i] = make_obj(900 + (uint64_t)i, 5000, false);
	pid_t pid = fork();
	if (pid == 0) {
		struct stg_store_options so = {.segment_size = 64 << 10};
		struct stg_store *c;
		if (stg_store_open(dir, &so, &c) < 0)
			_exit(1);
		for (int i = 0; i < 5; i++)
			if (stg_store_put(c, more[i].data, more[i].len, &more[i].hash) != 0)
				_exit(1);
		if (stg_store_sync(c) < 0)
			_exit(1);
		for (int i = 5; i < 8; i++)
			if (stg_store_put(c, more[i].data, more[i].len, &more[i].hash) != 0)
				_exit(1);
		_exit(0); /* no stg_store_free: as if killed */
	}
	int status;
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	s = open_store(dir, 64 << 10, 0);
	stg_store_stats(s, &st);
	uint64_t tail = 3 * stg_segment_record_size(STG_SEGMENT_FORMAT, (uint32_t)more[0].len);
	printf("hints: %" PRIu64 " records from hints, %" PRIu64 " bytes scanned (%" PRIu64
	       " put after the last sync)\n", st.recovery_hinted_records,
	       st.recovery_scanned_bytes, tail);
	CHECK(st.recovery_scanned_bytes <= tail);
	for (int i = 0; i < 8; i++)
		CHECK(reads_back(s, &more[i]));
	for (int i = 0; i < N; i++)
		CHECK(reads_back(s, &o[i]));
	stg_store_free(s);
	for (int i = 0; i < 8; i++)
		free_obj(&more[i]);
	for (int i = 0; i < N; i++)
		free_obj(&o[i]);
}

/* The scrub reads every record of the sealed segments in turn, as a GET
 * does: a record damaged behind its hint is found and forgotten before any
 * read needs it, and a second pass finds nothing more. */
static void scrub(void)
{
	enum { N = 60 };
	char dir[512], path[600];
	subdir(dir, sizeof(dir), "scrub");
	static struct obj o[N];
	stg_store_free(filled_store(dir, o, N, 7000));
	seg_path(path, sizeof(path), dir, 2);
	flip_byte(path, 4096 + 32 + 3000);
	struct stg_store *s = open_store(dir, 64 << 10, 0);
	struct stg_store_scrub *c;
	CHECK_EQ(stg_store_scrub_new(&c), 0);
	struct stg_store_stats st;
	int steps = 0;
	do {
		CHECK(stg_store_scrub_step(s, c, 16 << 10) >= 0);
		stg_store_stats(s, &st);
	} while (st.scrub_passes == 0 && ++steps < 10000);
	CHECK_EQ(st.scrub_passes, 1);
	CHECK_EQ(st.scrub_damaged, 1);
	/* Every record but those of the newest segment. */
	CHECK(st.scrub_records >= N - 12 && st.scrub_records < N);
	uint64_t records = st.scrub_records;
	/* Forgotten for good: the segment's hint no longer names it, and a
	 * restart, which scans the segment, leaves it out. */
	stg_store_scrub_free(c);
	stg_store_free(s);
	s = open_store(dir, 64 << 10, 0);
	CHECK_EQ(stg_store_scrub_new(&c), 0);
	stg_store_stats(s, &st);
	CHECK(st.recovery_scanned_bytes > 0);
	int absent = 0, sound = 0;
	for (int i = 0; i < N; i++) {
		if (!stg_store_has(s, &o[i].hash)) {
			absent++;
			CHECK_EQ(stg_store_put(s, o[i].data, o[i].len, &o[i].hash), 0);
		}
		sound += reads_back(s, &o[i]);
	}
	CHECK_EQ(absent, 1);
	CHECK_EQ(sound, N);
	steps = 0;
	do {
		CHECK(stg_store_scrub_step(s, c, 16 << 10) >= 0);
		stg_store_stats(s, &st);
	} while (st.scrub_passes == 0 && ++steps < 10000);
	CHECK_EQ(st.scrub_passes, 1);
	CHECK_EQ(st.scrub_damaged, 0);
	CHECK(st.scrub_records >= records - 1);
	stg_store_scrub_free(c);
	stg_store_scrub_free(NULL);
	stg_store_free(s);
	for (int i = 0; i < N; i++)
		free_obj(&o[i]);
}

int main(void)
{
	roundtrip();
	golden();
	overhead();
	torn_tail();
	corrupt_record();
	large_records();
	unpadded_tail();
	gc_epochs();
	references();
	compaction();
	concurrency();
	capacity();
	refusals();
	deltas();
	same_and_whole();
	hint_golden();
	hints();
	scrub();
	/* The segments take megabytes: kept only when something failed. */
	if (!harness_failures && base)
		nftw(base, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	return harness_done();
}
