/* SPDX-License-Identifier: MIT */
/* The manifest format: golden bytes, round trip, and every byte validated. */
#include "harness.h"
#include "manifest.h"
#include "util.h"

/* A fixed manifest: three chunks of 64 KiB + 100 bytes, one of each kind. */
static void sample(struct stg_manifest *m)
{
	CHECK_EQ(stg_manifest_init(m, 2 * 65536 + 100, 65536), 0);
	m->version = 7;
	m->mode = 0640;
	m->mtime_ns = 1795200000123456789LL;
	m->commit_ns = 1795200001000000000LL;
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 16; k++)
			m->entries[i].hash.b[k] = (uint8_t)(i * 16 + k);
	m->entries[0] = (struct stg_manifest_entry){.hash = m->entries[0].hash, .raw_len = 65536,
						    .stored_len = 65536, .flags = STG_ENTRY_NEW,
						    .pack = 0x0123456789abcdefull, .offset = 4096};
	m->entries[1] = (struct stg_manifest_entry){.hash = m->entries[1].hash, .raw_len = 65536,
						    .flags = STG_ENTRY_ZERO};
	m->entries[2] = (struct stg_manifest_entry){.hash = m->entries[2].hash, .raw_len = 100,
						    .stored_len = 60, .flags = STG_ENTRY_LZ4,
						    .pack = 0xfedcba9876543210ull, .offset = 1u << 20};
}

int main(void)
{
	struct stg_manifest m, d;
	sample(&m);
	size_t len = stg_manifest_encoded_size(&m);
	CHECK_EQ(len, 64 + 3 * 48 + 8);
	uint8_t *buf = malloc(len);
	CHECK_EQ(stg_manifest_encode(&m, buf), len);
	CHECK(harness_golden("manifest-v1.bin", buf, len));

	CHECK_EQ(stg_manifest_decode(buf, len, &d), 0);
	CHECK_EQ(d.version, 7);
	CHECK_EQ(d.size, 2 * 65536 + 100);
	CHECK_EQ(d.chunk_size, 65536);
	CHECK_EQ(d.mode, 0640);
	CHECK_EQ(d.mtime_ns, 1795200000123456789LL);
	CHECK_EQ(d.nchunks, 3);
	CHECK(memcmp(d.entries, m.entries, 3 * sizeof(*d.entries)) == 0);
	CHECK_EQ(stg_manifest_stored_bytes(&d), 65536 + 4096);
	CHECK_EQ(stg_manifest_new_chunks(&d), 1);
	stg_manifest_done(&d);

	/* Every single-byte corruption and every truncation is refused. */
	int accepted = 0;
	for (size_t i = 0; i < len; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			buf[i] ^= (uint8_t)(1 << bit);
			if (stg_manifest_decode(buf, len, &d) == 0) {
				accepted++;
				stg_manifest_done(&d);
			}
			buf[i] ^= (uint8_t)(1 << bit);
		}
	}
	CHECK_EQ(accepted, 0);
	for (size_t n = 0; n < len; n++)
		CHECK(stg_manifest_decode(buf, n, &d) == -EBADMSG);

	/* Format 2: an open version (fsync'ed, its writer going on) carries a
	 * flag, pinned by its own golden file; format 1 stays as it was. */
	m.flags = STG_MANIFEST_OPEN;
	CHECK_EQ(stg_manifest_encode(&m, buf), len);
	CHECK(harness_golden("manifest-v2-open.bin", buf, len));
	CHECK_EQ(stg_manifest_peek_flags(buf, len), STG_MANIFEST_OPEN);
	CHECK_EQ(stg_manifest_decode(buf, len, &d), 0);
	CHECK_EQ(d.flags, STG_MANIFEST_OPEN);
	stg_manifest_done(&d);
	accepted = 0;
	for (size_t i = 0; i < 64; i++) {
		buf[i] ^= 0x10;
		if (stg_manifest_decode(buf, len, &d) == 0) {
			accepted++;
			stg_manifest_done(&d);
		}
		buf[i] ^= 0x10;
	}
	CHECK_EQ(accepted, 0);
	/* Format 1 with a flag, format 2 without one or with an unknown one. */
	for (int k = 0; k < 3; k++) {
		static const uint16_t cases[3][2] = {{1, 1}, {2, 0}, {2, 2}};
		stg_put_le16(buf + 4, cases[k][0]);
		stg_put_le16(buf + 6, cases[k][1]);
		stg_put_le64(buf + len - 8, stg_hash64(buf, len - 8));
		CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	}
	m.flags = 0;
	stg_manifest_encode(&m, buf);

	/* Fields that are checksummed correctly but inconsistent are refused too. */
	struct stg_manifest bad;
	sample(&bad);
	bad.entries[1].flags = STG_ENTRY_ZERO | STG_ENTRY_NEW;
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.entries[0].stored_len = 10; /* raw but shorter than its data */
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.entries[2].raw_len = 99;
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.chunk_size = 3000;
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.version = 0;
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.mode = 0100644; /* only permission bits */
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);

	stg_manifest_done(&bad);
	sample(&bad);
	bad.entries[0].offset = 100; /* records are 4 KiB-aligned */
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.entries[2].pack = 0; /* a stored chunk names its pack */
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.entries[1].pack = 5; /* a zero chunk has no location */
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);

	stg_manifest_done(&bad);

	/* An empty file has no chunks. */
	struct stg_manifest e;
	CHECK_EQ(stg_manifest_init(&e, 0, 1 << 20), 0);
	e.version = 1;
	uint8_t ebuf[128];
	size_t elen = stg_manifest_encode(&e, ebuf);
	CHECK_EQ(elen, 72);
	CHECK_EQ(stg_manifest_decode(ebuf, elen, &d), 0);
	CHECK_EQ(d.nchunks, 0);
	stg_manifest_done(&d);
	stg_manifest_done(&e);
	stg_manifest_done(&m);
	free(buf);
	return harness_done();
}
