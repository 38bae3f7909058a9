/* SPDX-License-Identifier: MIT */
/* Chunk objects: golden bytes, raw vs lz4, verification of every byte. */
#include "chunk.h"
#include "harness.h"

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (uint8_t)(seed >> 56);
	}
}

static void roundtrip(const char *golden, const uint8_t *data, size_t n, bool compress,
		      uint16_t want_encoding)
{
	struct stg_hash h;
	stg_hash_compute(data, n, &h);
	uint8_t *obj = malloc(stg_chunk_bound(n));
	size_t len = stg_chunk_encode(data, n, &h, compress, obj);
	struct stg_chunk_header hdr;
	CHECK_EQ(stg_chunk_header_decode(obj, len, &h, (uint32_t)n, &hdr), 0);
	CHECK_EQ(hdr.encoding, want_encoding);
	CHECK_EQ(len, STG_CHUNK_HEADER_SIZE + hdr.stored_len);
	if (golden)
		CHECK(harness_golden(golden, obj, len));
	uint8_t *out = malloc(n);
	CHECK_EQ(stg_chunk_decode(obj, len, &h, (uint32_t)n, out), 0);
	CHECK(memcmp(out, data, n) == 0);

	/* Any flipped bit is caught: in the header by its checksum and fields, in
	 * the payload by lz4 or by the content hash. */
	int accepted = 0;
	for (size_t i = 0; i < len; i += (len > 4096 ? 97 : 1)) {
		obj[i] ^= 0x10;
		if (stg_chunk_decode(obj, len, &h, (uint32_t)n, out) == 0)
			accepted++;
		obj[i] ^= 0x10;
	}
	CHECK_EQ(accepted, 0);
	CHECK(stg_chunk_decode(obj, len - 1, &h, (uint32_t)n, out) < 0);
	/* The wrong expected hash or length is refused. */
	struct stg_hash other = h;
	other.b[0] ^= 1;
	CHECK(stg_chunk_decode(obj, len, &other, (uint32_t)n, out) == -EBADMSG);
	CHECK(stg_chunk_decode(obj, len, &h, (uint32_t)n + 1, out) == -EBADMSG);
	free(out);
	free(obj);
}

int main(void)
{
	uint8_t text[1000];
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = "checkpoint "[i % 11];
	roundtrip("chunk-lz4-v1.bin", text, sizeof(text), true, STG_CHUNK_LZ4);
	roundtrip("chunk-raw-v1.bin", text, 100, false, STG_CHUNK_RAW);

	/* Incompressible data is stored raw even when compression is on. */
	size_t n = 1 << 20;
	uint8_t *noise = malloc(n);
	fill_random(noise, n, 42);
	roundtrip(NULL, noise, n, true, STG_CHUNK_RAW);
	/* Compressible beyond the probe: compressed. */
	memset(noise, 'a', n);
	roundtrip(NULL, noise, n, true, STG_CHUNK_LZ4);
	free(noise);

	/* Hashes: canonical hex, stable value (XXH3-128 of "stagehand"). */
	struct stg_hash h, back;
	stg_hash_compute("stagehand", 9, &h);
	char hex[33];
	stg_hash_hex(&h, hex);
	CHECK_EQ(strlen(hex), 32);
	CHECK_EQ(stg_hash_from_hex(hex, &back), 0);
	CHECK(stg_hash_eq(&h, &back));
	CHECK(stg_hash_from_hex("zz", &back) < 0);
	CHECK(harness_golden("hash-stagehand.txt", (const uint8_t *)hex, 32));
	return harness_done();
}
