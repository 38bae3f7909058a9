/* SPDX-License-Identifier: MIT */
/* Segment files of the server's store: header block, records, recovery scan. */
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chunk.h"
#include "policy.h"
#include "util.h"

/* The scan reads ahead this much at a time, so that small records do not
 * cost two system calls each. */
#define SCAN_WINDOW (1u << 20)

size_t stg_segment_body_max(void)
{
	return stg_chunk_bound(STG_CHUNK_MAX);
}

void stg_segment_name(uint64_t id, char *out)
{
	snprintf(out, STG_SEGMENT_NAME_LEN + 1, "%016" PRIx64 ".seg", id);
}

int stg_segment_parse_name(const char *name, uint64_t *ret)
{
	return stg_parse_hex_name(name, ".seg", ret);
}

void stg_segment_header_encode(uint8_t *out, unsigned format, uint64_t id, int64_t created_ns)
{
	memset(out, 0, STG_SEGMENT_HEADER_SIZE);
	memcpy(out, STG_SEGMENT_MAGIC, 4);
	stg_put_le16(out + 4, (uint16_t)format);
	stg_put_le64(out + 16, id);
	stg_put_le64(out + 24, (uint64_t)created_ns);
	stg_put_le64(out + STG_SEGMENT_HEADER_SUM_OFFSET,
		     stg_hash64(out, STG_SEGMENT_HEADER_SUM_OFFSET));
}

int stg_segment_header_decode(const uint8_t *buf, size_t len, struct stg_segment_header *ret)
{
	if (len < STG_SEGMENT_HEADER_SIZE || memcmp(buf, STG_SEGMENT_MAGIC, 4) != 0)
		return -EBADMSG;
	unsigned format = stg_get_le16(buf + 4);
	if (format < 1 || format > STG_SEGMENT_FORMAT || !stg_all_zero(buf + 6, 10) ||
	    !stg_all_zero(buf + 32, STG_SEGMENT_HEADER_SUM_OFFSET - 32))
		return -EBADMSG;
	if (stg_get_le64(buf + STG_SEGMENT_HEADER_SUM_OFFSET) !=
	    stg_hash64(buf, STG_SEGMENT_HEADER_SUM_OFFSET))
		return -EBADMSG;
	if (!stg_all_zero(buf + 64, STG_SEGMENT_HEADER_SIZE - 64))
		return -EBADMSG;
	struct stg_segment_header h = {
		.format = format,
		.id = stg_get_le64(buf + 16),
		.created_ns = (int64_t)stg_get_le64(buf + 24),
	};
	if (h.id == 0)
		return -EBADMSG;
	*ret = h;
	return 0;
}

void stg_segment_record_header_encode(uint8_t out[STG_RECORD_HEADER_SIZE], uint16_t type,
				      const uint8_t *body, uint32_t len)
{
	memcpy(out, STG_RECORD_MAGIC, 4);
	stg_put_le16(out + 4, STG_RECORD_FORMAT);
	stg_put_le16(out + 6, type);
	stg_put_le32(out + 8, len);
	stg_put_le32(out + 12, 0);
	stg_put_le64(out + 16, stg_hash64(body, len));
	stg_put_le64(out + 24, stg_hash64(out, 24));
}

int stg_segment_record_header_decode(const uint8_t buf[STG_RECORD_HEADER_SIZE],
				     struct stg_segment_record *ret)
{
	if (memcmp(buf, STG_RECORD_MAGIC, 4) != 0 || stg_get_le16(buf + 4) != STG_RECORD_FORMAT)
		return -EBADMSG;
	if (stg_get_le64(buf + 24) != stg_hash64(buf, 24))
		return -EBADMSG;
	struct stg_segment_record rec = {
		.type = stg_get_le16(buf + 6),
		.len = stg_get_le32(buf + 8),
		.body_sum = stg_get_le64(buf + 16),
	};
	if (rec.type != STG_RECORD_CHUNK || stg_get_le32(buf + 12) != 0)
		return -EBADMSG;
	if (rec.len <= STG_CHUNK_HEADER_SIZE || rec.len > stg_segment_body_max())
		return -EBADMSG;
	*ret = rec;
	return 0;
}

int stg_segment_record_check(const uint8_t hdr[STG_RECORD_HEADER_SIZE], const uint8_t *body,
			     size_t len)
{
	struct stg_segment_record rec;
	if (stg_segment_record_header_decode(hdr, &rec) < 0)
		return -EBADMSG;
	if (rec.len != len || rec.body_sum != stg_hash64(body, len))
		return -EBADMSG;
	return 0;
}

/* A read-ahead window over the file. */
struct reader {
	int fd;
	uint64_t size;
	uint8_t *buf;
	size_t cap;
	uint64_t start;
	size_t len;
};

/* Points *ret at the file's bytes [off, off + n). Returns 0, -ENODATA (past
 * the end) or -errno. */
static int window(struct reader *rd, uint64_t off, size_t n, const uint8_t **ret)
{
	if (off >= rd->start && off - rd->start + n <= rd->len) {
		*ret = rd->buf + (off - rd->start);
		return 0;
	}
	if (off > rd->size || n > rd->size - off)
		return -ENODATA;
	size_t want = n > SCAN_WINDOW ? n : SCAN_WINDOW;
	if (want > rd->size - off)
		want = (size_t)(rd->size - off);
	if (want > rd->cap) {
		uint8_t *b = realloc(rd->buf, want);
		if (!b)
			return -ENOMEM;
		rd->buf = b;
		rd->cap = want;
	}
	rd->len = 0;
	int r = stg_pread_all(rd->fd, rd->buf, want, (off_t)off);
	if (r < 0)
		return r;
	rd->start = off;
	rd->len = want;
	*ret = rd->buf;
	return 0;
}

/* Checks the record at off. Returns 0 (filling hash and len), -EBADMSG or
 * -ENODATA (not a valid record there), or -errno. */
static int read_record(struct reader *rd, uint64_t off, bool full, struct stg_hash *ret_hash,
		       uint32_t *ret_len, struct stg_hash *ret_base, bool *ret_delta)
{
	const uint8_t *p;
	int r = window(rd, off, STG_RECORD_HEADER_SIZE, &p);
	if (r < 0)
		return r;
	struct stg_segment_record rec;
	if (stg_segment_record_header_decode(p, &rec) < 0)
		return -EBADMSG;
	r = window(rd, off, STG_RECORD_HEADER_SIZE + (size_t)rec.len, &p);
	if (r < 0)
		return r;
	r = stg_segment_record_check(p, p + STG_RECORD_HEADER_SIZE, rec.len);
	if (r == 0)
		r = stg_chunk_check(p + STG_RECORD_HEADER_SIZE, rec.len, full, ret_hash);
	if (r < 0)
		return r;
	*ret_len = rec.len;
	*ret_delta = stg_chunk_base(p + STG_RECORD_HEADER_SIZE, rec.len, ret_base);
	return 0;
}

int stg_segment_scan(int fd, unsigned format, uint64_t from, stg_segment_scan_fn fn, void *arg,
		     struct stg_segment_scan_result *ret)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	uint64_t step = format == 1 ? STG_SEGMENT_ALIGN : STG_SEGMENT_SMALL_ALIGN;
	if (from < STG_SEGMENT_HEADER_SIZE || from % step)
		return -EINVAL;
	struct reader rd = {.fd = fd, .size = (uint64_t)st.st_size};
	struct stg_segment_scan_result res = {.end = from, .size = rd.size};
	posix_fadvise(fd, (off_t)from, 0, POSIX_FADV_SEQUENTIAL);
	uint64_t off = from;
	bool lost = false;  /* off was reached by probing past bytes not a record */
	bool zeros = false; /* ... or past zeros alone */
	int r = 0;
	while (off < rd.size && rd.size - off >= STG_RECORD_HEADER_SIZE) {
		struct stg_hash h, base;
		uint32_t len;
		bool delta;
		/* Zeros lead only to a large record, at a multiple of 4096: a
		 * record found elsewhere past them is verified in full too (it
		 * may lie in the body of a record whose head a crash took). */
		bool full = lost || (zeros && off % STG_SEGMENT_ALIGN);
		r = read_record(&rd, off, full, &h, &len, &base, &delta);
		if (r == -EBADMSG || r == -ENODATA) {
			/* Zeros between records are format 2's padding. */
			const uint8_t *p;
			if (step == STG_SEGMENT_SMALL_ALIGN && window(&rd, off, step, &p) == 0 &&
			    stg_all_zero(p, step))
				zeros = true;
			else
				lost = true;
			off += step;
			r = 0;
			continue;
		}
		if (r < 0)
			break;
		r = fn(arg, &h, off, len, delta ? &base : NULL);
		if (r)
			break;
		if (lost)
			res.skipped++;
		lost = zeros = false;
		res.records++;
		off += stg_segment_record_size(format, len);
		res.end = off;
	}
	free(rd.buf);
	if (r == 0)
		*ret = res;
	return r;
}
