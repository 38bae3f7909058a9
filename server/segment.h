/* SPDX-License-Identifier: MIT */
/* Segment files of the server's store: a 4096-byte header block, then
 * records at 4096-byte-aligned offsets, each a 32-byte record header, a body
 * (a chunk object) and zero padding. See docs/STORE.md. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

#define STG_SEGMENT_MAGIC "SHSG"
#define STG_SEGMENT_FORMAT 1
#define STG_SEGMENT_ALIGN 4096u
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
	uint64_t id;
	int64_t created_ns;
};

/* The largest record body: the largest chunk object. */
size_t stg_segment_body_max(void);

/* Bytes a record with a body of len bytes takes, padding included. */
static inline uint64_t stg_segment_record_size(uint32_t len)
{
	uint64_t n = STG_RECORD_HEADER_SIZE + (uint64_t)len;
	return (n + STG_SEGMENT_ALIGN - 1) & ~(uint64_t)(STG_SEGMENT_ALIGN - 1);
}

/* "<16 hex>.seg" into out[STG_SEGMENT_NAME_LEN + 1]. */
void stg_segment_name(uint64_t id, char *out);
/* Parses a segment file name; returns 0 or -EINVAL (also for id 0). */
int stg_segment_parse_name(const char *name, uint64_t *ret);

/* Writes the header block (STG_SEGMENT_HEADER_SIZE bytes). */
void stg_segment_header_encode(uint8_t *out, uint64_t id, int64_t created_ns);
/* Validates a header block. Returns 0 or -EBADMSG. */
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
	uint64_t end;      /* end of the last valid record (the header block's end if none) */
	uint64_t skipped;  /* corrupt stretches before a later valid record */
	uint64_t size;     /* of the file */
};

/* Walks the records of a segment file (its header already checked) in
 * order. A record that does not check out is skipped by probing the next
 * aligned offsets for a valid record; as such a record was not reached by
 * following record lengths, its chunk is also verified in full. Everything
 * past ret->end is a torn or corrupt tail. Returns 0, fn's value or -errno. */
int stg_segment_scan(int fd, stg_segment_scan_fn fn, void *arg,
		     struct stg_segment_scan_result *ret);
