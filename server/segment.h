/* SPDX-License-Identifier: MIT */
/* Segment files of the server's store: a 4096-byte header block, then
 * records, each a 32-byte record header, a body (a chunk object) and zero
 * padding: in format 1 every record at a multiple of 4096, in format 2 at a
 * multiple of 8, and those of STG_SEGMENT_DIRECT_MIN bytes or more (written
 * with O_DIRECT) at a multiple of 4096 with padding to the next one. See
 * docs/STORE.md. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

#define STG_SEGMENT_MAGIC "SHSG"
/* The format new segments are written in; format 1 is read too. */
#define STG_SEGMENT_FORMAT 2
#define STG_SEGMENT_ALIGN 4096u
/* Records of this size and more lie in whole 4096-byte blocks (format 2). */
#define STG_SEGMENT_DIRECT_MIN (512u << 10)
/* The alignment of the small records of format 2. */
#define STG_SEGMENT_SMALL_ALIGN 8u
#define STG_SEGMENT_HEADER_SIZE 4096u
#define STG_SEGMENT_HEADER_SUM_OFFSET 56

#define STG_RECORD_MAGIC "SHSR"
#define STG_RECORD_FORMAT 1
#define STG_RECORD_HEADER_SIZE 32

enum stg_record_type {
	STG_RECORD_CHUNK = 1,
};

/* "segments/<16 hex>.seg" */
#define STG_SEGMENT_DIR "segments"
#define STG_SEGMENT_NAME_LEN 20

struct stg_segment_header {
	unsigned format; /* 1 or 2 */
	uint64_t id;
	int64_t created_ns;
};

/* The largest record body: the largest chunk object. */
size_t stg_segment_body_max(void);

/* The alignment of a record with a body of len bytes in a segment of that
 * format: of its offset and of its size with padding. */
static inline uint64_t stg_segment_record_align(unsigned format, uint32_t len)
{
	if (format == 1 || STG_RECORD_HEADER_SIZE + (uint64_t)len >= STG_SEGMENT_DIRECT_MIN)
		return STG_SEGMENT_ALIGN;
	return STG_SEGMENT_SMALL_ALIGN;
}

/* Bytes a record with a body of len bytes takes, padding included. */
static inline uint64_t stg_segment_record_size(unsigned format, uint32_t len)
{
	uint64_t a = stg_segment_record_align(format, len);
	return (STG_RECORD_HEADER_SIZE + (uint64_t)len + a - 1) & ~(a - 1);
}

/* Where such a record goes in a segment whose records end at end. */
static inline uint64_t stg_segment_record_place(unsigned format, uint32_t len, uint64_t end)
{
	uint64_t a = stg_segment_record_align(format, len);
	return (end + a - 1) & ~(a - 1);
}

/* "<16 hex>.seg" into out[STG_SEGMENT_NAME_LEN + 1]. */
void stg_segment_name(uint64_t id, char *out);
/* Parses a segment file name; returns 0 or -EINVAL (also for id 0). */
int stg_segment_parse_name(const char *name, uint64_t *ret);

/* Writes the header block (STG_SEGMENT_HEADER_SIZE bytes) of a segment of
 * that format (tests write format 1). */
void stg_segment_header_encode(uint8_t *out, unsigned format, uint64_t id, int64_t created_ns);
/* Validates a header block (format 1 or 2). Returns 0 or -EBADMSG. */
int stg_segment_header_decode(const uint8_t *buf, size_t len, struct stg_segment_header *ret);

/* Writes the header of a record whose body is body[0..len). */
void stg_segment_record_header_encode(uint8_t out[STG_RECORD_HEADER_SIZE], uint16_t type,
				      const uint8_t *body, uint32_t len);

struct stg_segment_record {
	uint16_t type;
	uint32_t len;      /* body bytes */
	uint64_t body_sum; /* XXH3-64 of the body */
};

/* Validates a record header on its own (magic, format, type, reserved bytes,
 * body length, checksum). Returns 0 or -EBADMSG. */
int stg_segment_record_header_decode(const uint8_t buf[STG_RECORD_HEADER_SIZE],
				     struct stg_segment_record *ret);

/* Validates a record: its header, that the body has the length the header
 * names and matches its checksum. Returns 0 or -EBADMSG. */
int stg_segment_record_check(const uint8_t hdr[STG_RECORD_HEADER_SIZE], const uint8_t *body,
			     size_t len);

/* Called for each valid record: its chunk's hash, offset, body length, and
 * for a delta object its base's hash (else NULL). A non-zero return stops
 * the scan and is returned. */
typedef int (*stg_segment_scan_fn)(void *arg, const struct stg_hash *h, uint64_t offset,
				   uint32_t len, const struct stg_hash *base);

struct stg_segment_scan_result {
	uint64_t records;  /* valid records seen */
	uint64_t end;      /* end of the last valid record (from, if none) */
	uint64_t skipped;  /* corrupt stretches before a later valid record */
	uint64_t size;     /* of the file */
};

/* Walks the records of a segment file of that format (its header already
 * checked) in order, from offset from (the header's end, or the end of
 * records known otherwise, aligned as a record is). A record that does not
 * check out is skipped by probing the next aligned offsets (of 4096 bytes
 * in format 1, 8 in format 2) for a valid record; unless only zeros were
 * passed (format 2's padding before a large record), such a record was not
 * reached by following record lengths, and its chunk is verified in full
 * too. Everything past ret->end is a torn or corrupt tail. Returns 0, fn's
 * value or -errno. */
int stg_segment_scan(int fd, unsigned format, uint64_t from, stg_segment_scan_fn fn, void *arg,
		     struct stg_segment_scan_result *ret);
