/* SPDX-License-Identifier: MIT */
/* Which chunks of a filed manifest this server holds (its PUT_MANIFEST's
 * held bitmap), kept beside it as v<N>.held (docs/STORE.md, "Held maps"):
 * at start, a user is given back exactly the chunks it had proven. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define STG_HELDMAP_MAGIC "SHHB"
#define STG_HELDMAP_FORMAT 1
#define STG_HELDMAP_HEADER_SIZE 20
#define STG_HELDMAP_TRAILER_SIZE 8

/* Bytes of the held map of a manifest of nchunks chunks. */
size_t stg_heldmap_size(uint32_t nchunks);

/* Encodes the map of version (bits: (nchunks + 7) / 8 bytes; those past
 * the last chunk are left out) into out (stg_heldmap_size bytes). */
void stg_heldmap_encode(uint64_t version, uint32_t nchunks, const uint8_t *bits, uint8_t *out);

/* Checks buf (len bytes) is the map of version with nchunks chunks: every
 * field, the bits past the last chunk clear, the checksum. On success *ret_bits
 * points at the bitmap inside buf. Returns 0, -EPROTONOSUPPORT (a later
 * format) or -EBADMSG. */
int stg_heldmap_decode(const uint8_t *buf, size_t len, uint64_t version, uint32_t nchunks,
		       const uint8_t **ret_bits);
