/* SPDX-License-Identifier: MIT */
/* A chunk object: a header naming the content hash, then raw or lz4 bytes. */
#include "chunk.h"

#include <errno.h>
#include <lz4.h>
#include <string.h>

#include "policy.h"
#include "util.h"

/* Compressing a sample first keeps incompressible data (the common case for
 * float fields) from paying for a full lz4 pass. */
#define PROBE_BYTES (64u << 10)

size_t stg_chunk_bound(size_t raw_len)
{
	return STG_CHUNK_HEADER_SIZE + (size_t)LZ4_compressBound((int)raw_len);
}

static bool worth_it(size_t in, size_t out)
{
	return out > 0 && out < in - in / 32;
}

void stg_chunk_header_encode(uint8_t *out, uint16_t enc, uint32_t raw_len, uint32_t stored_len,
			     const struct stg_hash *hash)
{
	memcpy(out, STG_CHUNK_MAGIC, 4);
	stg_put_le16(out + 4, STG_CHUNK_FORMAT);
	stg_put_le16(out + 6, enc);
	stg_put_le32(out + 8, raw_len);
	stg_put_le32(out + 12, stored_len);
	memcpy(out + 16, hash->b, 16);
	stg_put_le32(out + 32, (uint32_t)stg_hash64(out, 32));
	stg_put_le32(out + 36, 0);
}

bool stg_chunk_compressible(const void *data, size_t len)
{
	if (len < 64)
		return false;
	size_t probe = len < PROBE_BYTES ? len : PROBE_BYTES;
	char out[LZ4_COMPRESSBOUND(PROBE_BYTES)];
	int n = LZ4_compress_default(data, out, (int)probe, (int)sizeof(out));
	return worth_it(probe, (size_t)(n > 0 ? n : 0));
}

size_t stg_chunk_try_compress(const void *data, size_t len, const struct stg_hash *hash,
			      uint8_t *out)
{
	uint8_t *payload = out + STG_CHUNK_HEADER_SIZE;
	if (len < 64)
		return 0;
	size_t probe = len < PROBE_BYTES ? len : PROBE_BYTES;
	int n = LZ4_compress_default(data, (char *)payload, (int)probe, LZ4_compressBound((int)probe));
	if (!worth_it(probe, (size_t)(n > 0 ? n : 0)))
		return 0;
	if (probe != len)
		n = LZ4_compress_default(data, (char *)payload, (int)len, LZ4_compressBound((int)len));
	if (!worth_it(len, (size_t)(n > 0 ? n : 0)))
		return 0;
	stg_chunk_header_encode(out, STG_CHUNK_LZ4, (uint32_t)len, (uint32_t)n, hash);
	return STG_CHUNK_HEADER_SIZE + (size_t)n;
}

size_t stg_chunk_encode(const void *data, size_t len, const struct stg_hash *hash, bool compress,
			uint8_t *out)
{
	size_t n = compress ? stg_chunk_try_compress(data, len, hash, out) : 0;
	if (n)
		return n;
	stg_chunk_header_encode(out, STG_CHUNK_RAW, (uint32_t)len, (uint32_t)len, hash);
	memcpy(out + STG_CHUNK_HEADER_SIZE, data, len);
	return STG_CHUNK_HEADER_SIZE + len;
}

int stg_chunk_header_decode(const uint8_t *buf, size_t len, const struct stg_hash *want,
			    uint32_t want_raw_len, struct stg_chunk_header *ret)
{
	if (len < STG_CHUNK_HEADER_SIZE || memcmp(buf, STG_CHUNK_MAGIC, 4) != 0)
		return -EBADMSG;
	if (stg_get_le16(buf + 4) != STG_CHUNK_FORMAT)
		return -EBADMSG;
	if (stg_get_le32(buf + 32) != (uint32_t)stg_hash64(buf, 32) || stg_get_le32(buf + 36) != 0)
		return -EBADMSG;
	struct stg_chunk_header h = {
		.encoding = stg_get_le16(buf + 6),
		.raw_len = stg_get_le32(buf + 8),
		.stored_len = stg_get_le32(buf + 12),
	};
	memcpy(h.hash.b, buf + 16, 16);
	if (h.raw_len == 0 || h.raw_len > STG_CHUNK_MAX || h.raw_len != want_raw_len)
		return -EBADMSG;
	if (want && !stg_hash_eq(&h.hash, want))
		return -EBADMSG;
	switch (h.encoding) {
	case STG_CHUNK_RAW:
		if (h.stored_len != h.raw_len)
			return -EBADMSG;
		break;
	case STG_CHUNK_LZ4:
		if (h.stored_len == 0 || h.stored_len > (uint32_t)LZ4_compressBound((int)h.raw_len))
			return -EBADMSG;
		break;
	default:
		return -EBADMSG;
	}
	*ret = h;
	return 0;
}

/* Decompresses an lz4 payload into out and verifies it. */
static int decode_lz4(const struct stg_chunk_header *h, const uint8_t *payload, uint8_t *out)
{
	int n = LZ4_decompress_safe((const char *)payload, (char *)out, (int)h->stored_len,
				    (int)h->raw_len);
	if (n < 0 || (uint32_t)n != h->raw_len)
		return -EBADMSG;
	struct stg_hash got;
	stg_hash_compute(out, h->raw_len, &got);
	return stg_hash_eq(&got, &h->hash) ? 0 : -EBADMSG;
}

int stg_chunk_decode(const uint8_t *buf, size_t len, const struct stg_hash *want,
		     uint32_t want_raw_len, uint8_t *out)
{
	const uint8_t *data;
	int r = stg_chunk_decode_view(buf, len, want, want_raw_len, out, &data);
	if (r == 0 && data != out)
		memcpy(out, data, want_raw_len);
	return r;
}

int stg_chunk_decode_view(const uint8_t *buf, size_t len, const struct stg_hash *want,
			  uint32_t want_raw_len, uint8_t *out, const uint8_t **ret_data)
{
	struct stg_chunk_header h;
	int r = stg_chunk_header_decode(buf, len, want, want_raw_len, &h);
	if (r < 0)
		return r;
	if (len != STG_CHUNK_HEADER_SIZE + (size_t)h.stored_len)
		return -EBADMSG;
	if (h.encoding != STG_CHUNK_RAW) {
		r = decode_lz4(&h, buf + STG_CHUNK_HEADER_SIZE, out);
		if (r == 0)
			*ret_data = out;
		return r;
	}
	/* Raw: verified where it lies, no copy. */
	struct stg_hash got;
	stg_hash_compute(buf + STG_CHUNK_HEADER_SIZE, h.raw_len, &got);
	if (!stg_hash_eq(&got, &h.hash))
		return -EBADMSG;
	*ret_data = buf + STG_CHUNK_HEADER_SIZE;
	return 0;
}
