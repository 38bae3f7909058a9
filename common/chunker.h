/* SPDX-License-Identifier: MIT */
/* Where chunks end: at fixed multiples, or where the content says (CDC). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum stg_chunking {
	STG_CHUNKING_FIXED = 0,
	STG_CHUNKING_CDC = 1,
};

struct stg_chunker {
	enum stg_chunking kind;
	uint32_t min, avg, max; /* chunk lengths; fixed: all three are the chunk size */
	uint32_t in_chunk;      /* bytes of the current chunk seen so far */
	uint64_t state;         /* the CDC's rolling state (opaque) */
};

/* CDC: min and max derived from the average chunk_size (documented). */
void stg_chunker_init(struct stg_chunker *c, enum stg_chunking kind, uint32_t chunk_size);

/* Scans data[0, len), the bytes following those given before. Sets *used to
 * how many of them belong to the current chunk and returns true when the
 * chunk ends after them (the next call starts a new chunk), false when all
 * len bytes were taken and the chunk goes on. Feeding the same bytes in any
 * pieces gives the same chunks. At the end of the file the caller ends the
 * last chunk itself (stg_chunker_reset). */
bool stg_chunker_next(struct stg_chunker *c, const uint8_t *data, size_t len, size_t *used);

/* Starts a new chunk (after the end of a file, or a seek). */
void stg_chunker_reset(struct stg_chunker *c);
