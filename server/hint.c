/* SPDX-License-Identifier: MIT */
/* Hint files of sealed segments: encoding, writing, reading. */
#include "hint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segment.h"
#include "util.h"

#define HEADER_SUM_AT 56
#define ENTRY_SUM_AT 48
#define FLAG_DELTA 1u
/* Entries go to and come from the file this many at a time. */
#define BATCH 4096

void stg_hint_name(uint64_t id, char *out)
{
	snprintf(out, STG_HINT_NAME_LEN + 1, "%016" PRIx64 ".hint", id);
}

int stg_hint_parse_name(const char *name, uint64_t *ret)
{
	return stg_parse_hex_name(name, ".hint", ret);
}

static void header_encode(uint8_t out[STG_HINT_HEADER_SIZE], const char *magic,
			  const struct stg_hint_key *k, uint64_t count)
{
	memset(out, 0, STG_HINT_HEADER_SIZE);
	memcpy(out, magic, 4);
	stg_put_le16(out + 4, STG_HINT_FORMAT);
	stg_put_le64(out + 8, k->id);
	stg_put_le64(out + 16, (uint64_t)k->created_ns);
	stg_put_le64(out + 24, k->size);
	stg_put_le64(out + 32, count);
	stg_put_le64(out + HEADER_SUM_AT, stg_hash64(out, HEADER_SUM_AT));
}

void stg_hint_header_encode(uint8_t out[STG_HINT_HEADER_SIZE], const struct stg_hint_key *k,
			    uint64_t count)
{
	header_encode(out, STG_HINT_MAGIC, k, count);
}

/* A hint log's header: a hint header of size and count 0. */
static int log_header_decode(const uint8_t buf[STG_HINT_HEADER_SIZE], struct stg_hint_key *ret)
{
	if (memcmp(buf, STG_HINT_LOG_MAGIC, 4) != 0 || stg_get_le16(buf + 4) != STG_HINT_FORMAT ||
	    !stg_all_zero(buf + 6, 2) || !stg_all_zero(buf + 24, HEADER_SUM_AT - 24) ||
	    stg_get_le64(buf + HEADER_SUM_AT) != stg_hash64(buf, HEADER_SUM_AT))
		return -EBADMSG;
	ret->id = stg_get_le64(buf + 8);
	ret->created_ns = (int64_t)stg_get_le64(buf + 16);
	return ret->id == 0 ? -EBADMSG : 0;
}

int stg_hint_header_decode(const uint8_t buf[STG_HINT_HEADER_SIZE], struct stg_hint_key *ret_key,
			   uint64_t *ret_count)
{
	if (memcmp(buf, STG_HINT_MAGIC, 4) != 0 || stg_get_le16(buf + 4) != STG_HINT_FORMAT ||
	    !stg_all_zero(buf + 6, 2) || !stg_all_zero(buf + 40, HEADER_SUM_AT - 40) ||
	    stg_get_le64(buf + HEADER_SUM_AT) != stg_hash64(buf, HEADER_SUM_AT))
		return -EBADMSG;
	struct stg_hint_key k = {
		.id = stg_get_le64(buf + 8),
		.created_ns = (int64_t)stg_get_le64(buf + 16),
		.size = stg_get_le64(buf + 24),
	};
	uint64_t count = stg_get_le64(buf + 32);
	/* Every record takes more than a hint entry's worth of bytes. */
	if (k.id == 0 || k.size < STG_SEGMENT_HEADER_SIZE ||
	    count > (k.size - STG_SEGMENT_HEADER_SIZE) / STG_HINT_ENTRY_SIZE)
		return -EBADMSG;
	*ret_key = k;
	*ret_count = count;
	return 0;
}

void stg_hint_entry_encode(uint8_t out[STG_HINT_ENTRY_SIZE], const struct stg_hint_entry *e)
{
	memset(out, 0, STG_HINT_ENTRY_SIZE);
	memcpy(out, e->hash.b, sizeof(e->hash.b));
	if (e->delta)
		memcpy(out + 16, e->base.b, sizeof(e->base.b));
	stg_put_le64(out + 32, e->offset);
	stg_put_le32(out + 40, e->len);
	stg_put_le32(out + 44, e->delta ? FLAG_DELTA : 0);
	stg_put_le64(out + ENTRY_SUM_AT, stg_hash64(out, ENTRY_SUM_AT));
}

int stg_hint_entry_decode(const uint8_t buf[STG_HINT_ENTRY_SIZE], const struct stg_hint_key *k,
			  struct stg_hint_entry *ret)
{
	if (stg_get_le64(buf + ENTRY_SUM_AT) != stg_hash64(buf, ENTRY_SUM_AT))
		return -EBADMSG;
	struct stg_hint_entry e = {
		.offset = stg_get_le64(buf + 32),
		.len = stg_get_le32(buf + 40),
	};
	uint32_t flags = stg_get_le32(buf + 44);
	memcpy(e.hash.b, buf, sizeof(e.hash.b));
	memcpy(e.base.b, buf + 16, sizeof(e.base.b));
	e.delta = flags & FLAG_DELTA;
	if ((flags & ~FLAG_DELTA) || (!e.delta && !stg_all_zero(buf + 16, 16)))
		return -EBADMSG;
	if (e.len <= 40 || e.len > stg_segment_body_max() || e.offset < STG_SEGMENT_HEADER_SIZE ||
	    e.offset % 8 || e.offset > k->size ||
	    k->size - e.offset < STG_RECORD_HEADER_SIZE + (uint64_t)e.len)
		return -EBADMSG;
	*ret = e;
	return 0;
}

static int write_entries(int fd, const struct stg_hint_entry *v, size_t n)
{
	uint8_t *buf = malloc((size_t)BATCH * STG_HINT_ENTRY_SIZE);
	if (!buf)
		return -ENOMEM;
	int r = 0;
	for (size_t i = 0; r == 0 && i < n; i += BATCH) {
		size_t m = n - i < BATCH ? n - i : BATCH;
		for (size_t j = 0; j < m; j++)
			stg_hint_entry_encode(buf + j * STG_HINT_ENTRY_SIZE, &v[i + j]);
		r = stg_write_all(fd, buf, m * STG_HINT_ENTRY_SIZE);
	}
	free(buf);
	return r;
}

/* Writes header and entries under name.tmp, then renames it into place,
 * durably. Returns 0 or -errno; with ret_fd, the file stays open on it. */
static int write_file(int dirfd, const char *name, const uint8_t hdr[STG_HINT_HEADER_SIZE],
		      const struct stg_hint_entry *v, size_t n, int *ret_fd)
{
	char tmp[STG_HINT_NAME_LEN + 5];
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	int r = stg_write_all(fd, hdr, STG_HINT_HEADER_SIZE);
	if (r == 0)
		r = write_entries(fd, v, n);
	if (r == 0 && fdatasync(fd) < 0)
		r = -errno;
	if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
		r = -errno;
	if (r == 0 && fsync(dirfd) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(dirfd, tmp, 0);
	if (r == 0 && ret_fd) {
		*ret_fd = fd;
		return 0;
	}
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r;
}

int stg_hint_write(int dirfd, const struct stg_hint_key *k, const struct stg_hint_entry *v,
		   size_t n)
{
	char name[STG_HINT_NAME_LEN + 1];
	uint8_t hdr[STG_HINT_HEADER_SIZE];
	stg_hint_name(k->id, name);
	stg_hint_header_encode(hdr, k, n);
	return write_file(dirfd, name, hdr, v, n, NULL);
}

void stg_hint_log_name(uint64_t id, char *out)
{
	snprintf(out, STG_HINT_LOG_NAME_LEN + 1, "%016" PRIx64 ".hlog", id);
}

int stg_hint_log_parse_name(const char *name, uint64_t *ret)
{
	return stg_parse_hex_name(name, ".hlog", ret);
}

int stg_hint_log_create(int dirfd, const struct stg_hint_key *k, const struct stg_hint_entry *v,
			size_t n)
{
	char name[STG_HINT_LOG_NAME_LEN + 1];
	uint8_t hdr[STG_HINT_HEADER_SIZE];
	stg_hint_log_name(k->id, name);
	struct stg_hint_key lk = {.id = k->id, .created_ns = k->created_ns};
	header_encode(hdr, STG_HINT_LOG_MAGIC, &lk, 0);
	int fd;
	int r = write_file(dirfd, name, hdr, v, n, &fd);
	return r < 0 ? r : fd;
}

int stg_hint_log_reopen(int dirfd, const struct stg_hint_key *k, size_t entries)
{
	char name[STG_HINT_LOG_NAME_LEN + 1];
	stg_hint_log_name(k->id, name);
	int fd = openat(dirfd, name, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)(STG_HINT_HEADER_SIZE + entries * STG_HINT_ENTRY_SIZE)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

int stg_hint_log_append(int fd, const struct stg_hint_entry *v, size_t n)
{
	/* Opened for writing at its end, and only ever appended to. */
	return write_entries(fd, v, n);
}

/* Opens dirfd/name for reading, with a buffer of BATCH entries holding its
 * header. Returns 0 (*ret_fd and *ret_buf to close and free) or -errno
 * (-EBADMSG: shorter than a header). */
static int open_read(int dirfd, const char *name, int *ret_fd, uint8_t **ret_buf)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	uint8_t *buf = malloc((size_t)BATCH * STG_HINT_ENTRY_SIZE);
	int r = buf ? stg_pread_all(fd, buf, STG_HINT_HEADER_SIZE, 0) : -ENOMEM;
	if (r < 0) {
		free(buf);
		close(fd);
		return r == -ENODATA ? -EBADMSG : r;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	*ret_fd = fd;
	*ret_buf = buf;
	return 0;
}

int stg_hint_log_read(int dirfd, const struct stg_hint_key *k, stg_hint_fn fn, void *arg)
{
	char name[STG_HINT_LOG_NAME_LEN + 1];
	stg_hint_log_name(k->id, name);
	int fd;
	uint8_t *buf;
	int r = open_read(dirfd, name, &fd, &buf);
	if (r < 0)
		return r;
	struct stg_hint_key got;
	r = log_header_decode(buf, &got);
		r = log_header_decode(buf, &got);
	if (r == 0 && (got.id != k->id || got.created_ns != k->created_ns))
		r = -ESTALE;
	for (off_t at = STG_HINT_HEADER_SIZE; r == 0;) {
		ssize_t got_bytes = pread(fd, buf, (size_t)BATCH * STG_HINT_ENTRY_SIZE, at);
		if (got_bytes < 0 && errno == EINTR)
			continue;
		if (got_bytes < 0) {
			r = -errno;
			break;
		}
		size_t m = (size_t)got_bytes / STG_HINT_ENTRY_SIZE;
		bool torn = false;
		for (size_t j = 0; r == 0 && j < m && !torn; j++) {
			struct stg_hint_entry e;
			torn = stg_hint_entry_decode(buf + j * STG_HINT_ENTRY_SIZE, k, &e) < 0;
			if (!torn)
				r = fn(arg, &e);
		}
		if (torn || m < BATCH)
			break;
		at += (off_t)(m * STG_HINT_ENTRY_SIZE);
	}
	free(buf);
	close(fd);
	return r;
}

int stg_hint_read(int dirfd, const struct stg_hint_key *k, stg_hint_fn fn, void *arg)
{
	char name[STG_HINT_NAME_LEN + 1];
	stg_hint_name(k->id, name);
	int fd;
	uint8_t *buf;
	int r = open_read(dirfd, name, &fd, &buf);
	if (r < 0)
		return r;
	struct stat st;
	struct stg_hint_key got;
	uint64_t count;
	r = fstat(fd, &st) < 0 ? -errno : 0;
	if (r == 0)
		r = stg_hint_header_decode(buf, &got, &count);
	if (r == 0 && (got.id != k->id || got.created_ns != k->created_ns || got.size != k->size))
		r = -ESTALE;
	if (r == 0 && (uint64_t)st.st_size != STG_HINT_HEADER_SIZE + count * STG_HINT_ENTRY_SIZE)
		r = -EBADMSG;
	for (uint64_t i = 0; r == 0 && i < count; i += BATCH) {
		size_t m = count - i < BATCH ? (size_t)(count - i) : BATCH;
		r = stg_pread_all(fd, buf, m * STG_HINT_ENTRY_SIZE,
				  (off_t)(STG_HINT_HEADER_SIZE + i * STG_HINT_ENTRY_SIZE));
		if (r == -ENODATA)
			r = -EBADMSG;
		for (size_t j = 0; r == 0 && j < m; j++) {
			struct stg_hint_entry e;
			r = stg_hint_entry_decode(buf + j * STG_HINT_ENTRY_SIZE, k, &e);
			if (r == 0)
				r = fn(arg, &e);
		}
	}
	free(buf);
	close(fd);
	return r;
}
