/* SPDX-License-Identifier: MIT */
/* A chunk object: a header naming the content hash, then raw or lz4 bytes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

#define STG_CHUNK_MAGIC "SHCK"
#define STG_CHUNK_FORMAT 1
#define STG_CHUNK_HEADER_SIZE 40

enum stg_chunk_encoding {
	STG_CHUNK_RAW = 0,
	STG_CHUNK_LZ4 = 1,
};

struct stg_chunk_header {
	uint16_t encoding;
	uint32_t raw_len;
	uint32_t stored_len; /* payload bytes after the header */
	struct stg_hash hash;
};

/* Bytes an encoded chunk of raw_len bytes may need at most. */
size_t stg_chunk_bound(size_t raw_len);

/* Encodes header + payload into out (stg_chunk_bound(len) bytes). The hash must
 * be that of data. With compress, lz4 is used when it saves at least 3%.
 * Returns the encoded length. */
size_t stg_chunk_encode(const void *data, size_t len, const struct stg_hash *hash, bool compress,
			uint8_t *out);

/* Tries lz4 on data (a sample first, so incompressible data costs little).
 * When it pays, writes the whole object into out and returns its length;
 * otherwise returns 0 and the caller stores the header of
 * stg_chunk_header_encode(STG_CHUNK_RAW, ...) followed by data itself. */
size_t stg_chunk_try_compress(const void *data, size_t len, const struct stg_hash *hash,
			      uint8_t *out);

/* Does lz4 pay on a sample of data? */
bool stg_chunk_compressible(const void *data, size_t len);

/* Writes a chunk header (STG_CHUNK_HEADER_SIZE bytes). */
void stg_chunk_header_encode(uint8_t *out, uint16_t encoding, uint32_t raw_len,
			     uint32_t stored_len, const struct stg_hash *hash);

/* Validates a header (magic, format, encoding, lengths, checksum) against the
 * expected hash and raw length. Returns 0 or -EBADMSG. */
int stg_chunk_header_decode(const uint8_t *buf, size_t len, const struct stg_hash *want,
			    uint32_t want_raw_len, struct stg_chunk_header *ret);

/* Decodes a whole encoded chunk into out (want_raw_len bytes) and verifies the
 * content hash. Returns 0 or -EBADMSG. */
int stg_chunk_decode(const uint8_t *buf, size_t len, const struct stg_hash *want,
		     uint32_t want_raw_len, uint8_t *out);

/* Like stg_chunk_decode, but a raw chunk is verified where it lies in buf and
 * *ret_data points at it; a compressed one is decoded into out (*ret_data =
 * out). Returns 0 or -EBADMSG. */
int stg_chunk_decode_view(const uint8_t *buf, size_t len, const struct stg_hash *want,
			  uint32_t want_raw_len, uint8_t *out, const uint8_t **ret_data);
