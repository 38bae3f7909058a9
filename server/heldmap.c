/* SPDX-License-Identifier: MIT */
/* The held map: "SHHB", format, version, chunk count, bitmap, checksum. */
#include "heldmap.h"

#include <errno.h>
#include <string.h>

#include "hash.h"
#include "util.h"

size_t stg_heldmap_size(uint32_t nchunks)
{
	return STG_HELDMAP_HEADER_SIZE + ((size_t)nchunks + 7) / 8 + STG_HELDMAP_TRAILER_SIZE;
}

void stg_heldmap_encode(uint64_t version, uint32_t nchunks, const uint8_t *bits, uint8_t *out)
{
	size_t nbits = ((size_t)nchunks + 7) / 8;
	memcpy(out, STG_HELDMAP_MAGIC, 4);
	stg_put_le32(out + 4, STG_HELDMAP_FORMAT);
	stg_put_le64(out + 8, version);
	stg_put_le32(out + 16, nchunks);
	memcpy(out + STG_HELDMAP_HEADER_SIZE, bits, nbits);
	if (nchunks % 8) /* only the chunks' bits */
		out[STG_HELDMAP_HEADER_SIZE + nbits - 1] &= (uint8_t)((1u << (nchunks % 8)) - 1);
	size_t end = STG_HELDMAP_HEADER_SIZE + nbits;
	stg_put_le64(out + end, stg_hash64(out, end));
}

int stg_heldmap_decode(const uint8_t *buf, size_t len, uint64_t version, uint32_t nchunks,
		       const uint8_t **ret_bits)
{
	if (len < STG_HELDMAP_HEADER_SIZE + STG_HELDMAP_TRAILER_SIZE ||
	    memcmp(buf, STG_HELDMAP_MAGIC, 4) != 0)
		return -EBADMSG;
	if (stg_get_le32(buf + 4) > STG_HELDMAP_FORMAT)
		return -EPROTONOSUPPORT;
	if (stg_get_le32(buf + 4) != STG_HELDMAP_FORMAT || len != stg_heldmap_size(nchunks) ||
	    stg_get_le64(buf + 8) != version || stg_get_le32(buf + 16) != nchunks)
		return -EBADMSG;
	size_t end = len - STG_HELDMAP_TRAILER_SIZE;
	if (stg_get_le64(buf + end) != stg_hash64(buf, end))
		return -EBADMSG;
	const uint8_t *bits = buf + STG_HELDMAP_HEADER_SIZE;
	if (nchunks % 8 && bits[nchunks / 8] >> (nchunks % 8))
		return -EBADMSG;
	*ret_bits = bits;
	return 0;
}
