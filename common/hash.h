/* SPDX-License-Identifier: MIT */
/* Content identifiers: XXH3-128 of a chunk's uncompressed bytes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The canonical (big-endian) form of the 128-bit hash. */
struct stg_hash {
	uint8_t b[16];
};

#define STG_HASH_HEX_LEN 32

void stg_hash_compute(const void *data, size_t len, struct stg_hash *ret);

/* Writes 32 lowercase hex digits and a NUL into out[33]. */
void stg_hash_hex(const struct stg_hash *h, char out[STG_HASH_HEX_LEN + 1]);

/* Parses 32 hex digits; returns 0 or -EINVAL. */
int stg_hash_from_hex(const char *hex, struct stg_hash *ret);

static inline bool stg_hash_eq(const struct stg_hash *a, const struct stg_hash *b)
{
	return memcmp(a->b, b->b, sizeof(a->b)) == 0;
}

/* Hashes data while handing it piece by piece to consume(), so that the bytes
 * are read from memory once (the piece is still in cache for consume). Stops
 * at consume's first negative return. Returns 0 or that value. */
int stg_hash_stream(const void *data, size_t len, struct stg_hash *ret,
		    int (*consume)(void *arg, const void *piece, size_t n, size_t off), void *arg);

/* The hash of len zero bytes, without a buffer of that size (remembered for
 * the last few lengths asked). Returns 0 or -ENOMEM. */
int stg_hash_zeros(size_t len, struct stg_hash *ret);

/* 64-bit XXH3 of arbitrary bytes (checksums of headers and manifests). */
uint64_t stg_hash64(const void *data, size_t len);
