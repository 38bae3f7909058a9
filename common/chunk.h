/* SPDX-License-Identifier: MIT */
/* A chunk object: a header naming the content hash, then the payload, raw or
 * encoded by a codec of chunk.c's table (docs/FORMAT.md, "Chunk objects"). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hash.h"

#define STG_CHUNK_MAGIC "SHCK"
#define STG_CHUNK_HEADER_SIZE 40
/* A delta object's payload starts with its base's hash. */
#define STG_CHUNK_BASE_SIZE 16
/* A delta's base may be a delta, this many deep at most (the servers keep
 * it so): decoding a chunk reads at most this many more objects. Deeper
 * saves a little space and slows restores from the servers (docs/STORE.md,
 * "Delta objects"). */
#define STG_CHUNK_DELTA_DEPTH 2

/* How a path's chunks are encoded: the policy keys compress and filter. Its
 * values are chunk.c's: set them with stg_chunk_codec_parse. */
struct stg_chunk_codec {
	uint8_t compress;
	uint8_t filter;
	uint8_t element;
	int8_t level; /* the codec's level; 0: its default (bench/codecs tries others) */
};

/* compress = lz4, filter = none. */
extern const struct stg_chunk_codec stg_chunk_codec_default;

/* Sets c's policy key ("compress" or "filter") from value. Returns 0, or
 * -EINVAL with a message naming the accepted values in err. */
int stg_chunk_codec_parse(struct stg_chunk_codec *c, const char *key, const char *value,
			  char *err, size_t errlen);

/* Whether the flusher recodes each chunk before shipping it: c's codec is too
 * slow for a writer to wait for it (zstd), or c is auto, which tries zstd
 * there. */
bool stg_chunk_codec_background(const struct stg_chunk_codec *c);

/* The codec the capture path encodes with for c: c, or lz4 with c's filter
 * in place of a background codec. */
struct stg_chunk_codec stg_chunk_codec_capture(const struct stg_chunk_codec *c);

/* A decoded header; codec, filter and element are chunk.c's ids. */
struct stg_chunk_header {
	uint16_t format;
	uint8_t codec;
	uint8_t filter;
	uint8_t element;
	uint32_t raw_len;
	uint32_t stored_len; /* payload bytes after the header */
	struct stg_hash hash;
};

/* Bytes an encoded chunk of raw_len bytes may need at most (a delta object
 * STG_CHUNK_BASE_SIZE more). */
size_t stg_chunk_bound(size_t raw_len);

/* Encodes header + payload into out (stg_chunk_bound(len) bytes). The hash must
 * be that of data. Encoded as c says when it saves at least 3%, else raw.
 * Returns the encoded length. */
size_t stg_chunk_encode(const void *data, size_t len, const struct stg_hash *hash,
			const struct stg_chunk_codec *c, uint8_t *out);

/* Tries c on data, where a writer waits (a sample first, so incompressible
 * data costs little; auto keeps only what saves an eighth of the sample).
 * When it pays, writes the whole object into out and returns its length;
 * otherwise returns 0 and the caller stores the header of
 * stg_chunk_header_encode_raw followed by data itself. */
size_t stg_chunk_try_compress(const void *data, size_t len, const struct stg_hash *hash,
			      const struct stg_chunk_codec *c, uint8_t *out);

/* Encodes a delta object of data against base, a chunk of the same length
 * whose hash is base_hash: their XOR, filtered and compressed as c says
 * (lz4 when c compresses with nothing), into out (stg_chunk_bound(len) +
 * STG_CHUNK_BASE_SIZE bytes). Returns its length, or 0 when it does not
 * save 3% of len (the caller then compares it with the plain object). */
size_t stg_chunk_encode_delta(const void *data, size_t len, const struct stg_hash *hash,
			      const void *base, const struct stg_hash *base_hash,
			      const struct stg_chunk_codec *c, uint8_t *out);

/* Whether obj is a delta object with a valid header; its base's hash goes
 * to *ret_base. */
bool stg_chunk_base(const uint8_t *obj, size_t len, struct stg_hash *ret_base);

/* Decodes a delta object into out (want_raw_len bytes) given its base's
 * bytes (as long), and verifies the content hash. Returns 0, -EBADMSG or
 * -ENOMEM. */
int stg_chunk_decode_delta(const uint8_t *buf, size_t len, const struct stg_hash *want,
			   uint32_t want_raw_len, const uint8_t *base, uint8_t *out);

/* Writes the header of a raw chunk (STG_CHUNK_HEADER_SIZE bytes). */
void stg_chunk_header_encode_raw(uint8_t *out, uint32_t raw_len, const struct stg_hash *hash);

/* Validates a header (magic, format, encoding, lengths, checksum) against the
 * expected hash (NULL: any) and raw length. Returns 0 or -EBADMSG. */
int stg_chunk_header_decode(const uint8_t *buf, size_t len, const struct stg_hash *want,
			    uint32_t want_raw_len, struct stg_chunk_header *ret);

/* Whether the object is a delta (its payload starts with its base's hash). */
bool stg_chunk_header_is_delta(const struct stg_chunk_header *h);

/* Whether the payload is the raw bytes themselves. */
bool stg_chunk_header_is_raw(const struct stg_chunk_header *h);

/* Whether a stored length is possible for a chunk of raw_len bytes, raw or
 * encoded (as a manifest or an index record says). */
bool stg_chunk_stored_len_ok(uint32_t raw_len, uint32_t stored_len, bool encoded);

/* Re-encodes obj, a chunk object of raw_len bytes, as c says in the
 * background (auto: zstd, after the filter lz4 chooses on a sample):
 * decodes it into raw (raw_len bytes; the hash is checked) and encodes that
 * into out (stg_chunk_bound(raw_len) bytes). Returns the new object's length
 * when it is smaller than obj, 0 when obj is as good (or encoded so
 * already), or -EBADMSG (obj is corrupt) or -ENOMEM. */
ssize_t stg_chunk_recode(const uint8_t *obj, size_t len, uint32_t raw_len,
			 const struct stg_chunk_codec *c, uint8_t *raw, uint8_t *out);

/* Memory decoding the object takes beyond its own bytes (0 for raw or for a
 * header that does not decode). */
size_t stg_chunk_decode_memory(const uint8_t *obj, size_t len);

/* Decodes a whole encoded chunk into out (want_raw_len bytes) and verifies the
 * content hash. Returns 0, -EBADMSG, -ENOMEM, or -ENOLINK for a delta object
 * (stg_chunk_decode_delta decodes it given its base). */
int stg_chunk_decode(const uint8_t *buf, size_t len, const struct stg_hash *want,
		     uint32_t want_raw_len, uint8_t *out);

/* Like stg_chunk_decode, but a raw chunk is verified where it lies in buf and
 * *ret_data points at it; an encoded one is decoded into out (*ret_data =
 * out). Returns as stg_chunk_decode. */
int stg_chunk_decode_view(const uint8_t *buf, size_t len, const struct stg_hash *want,
			  uint32_t want_raw_len, uint8_t *out, const uint8_t **ret_data);

/* Verifies the payload of a raw chunk whose header h was decoded apart.
 * Returns 0 or -EBADMSG (not raw, or the content does not match). */
int stg_chunk_verify_raw(const struct stg_chunk_header *h, const uint8_t *data);

/* Checks an object on its own, its hash and length taken from its header:
 * the header and the length, and with full, the decoded content's hash (a
 * delta's payload is decoded, its content cannot be checked without its
 * base).
 * Returns 0 (filling *ret_hash), -EBADMSG or -ENOMEM. */
int stg_chunk_check(const uint8_t *obj, size_t len, bool full, struct stg_hash *ret_hash);
