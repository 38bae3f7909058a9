/* SPDX-License-Identifier: MIT */
/* Tombstones: golden bytes, every field checked when read, merging and
 * expiry. */
#include "harness.h"
#include "hash.h"
#include "tombstone.h"
#include "util.h"

static void format(void)
{
	struct stg_tombstone t = {.upto = 0x00000123456789abull, .at_ns = 1795000000000000000ll,
				  .retain_s = 3600, .flags = STG_TOMBSTONE_RENAMED}, d;
	uint8_t buf[STG_TOMBSTONE_SIZE];
	stg_tombstone_encode(&t, buf);
	CHECK(harness_golden("tombstone-v1.bin", buf, sizeof(buf)));
	CHECK_EQ(stg_tombstone_decode(buf, sizeof(buf), &d), 0);
	CHECK(d.upto == t.upto && d.at_ns == t.at_ns && d.retain_s == 3600 &&
	      d.flags == STG_TOMBSTONE_RENAMED);
	CHECK_EQ(stg_tombstone_decode(buf, sizeof(buf) - 1, &d), -EBADMSG);
	for (size_t i = 0; i < sizeof(buf); i++) { /* any byte flipped */
		buf[i] ^= 0x20;
		CHECK(stg_tombstone_decode(buf, sizeof(buf), &d) < 0);
		buf[i] ^= 0x20;
	}
	/* Fields checked with a valid checksum: an id of 0, an unknown flag. */
	uint8_t bad[STG_TOMBSTONE_SIZE];
	memcpy(bad, buf, sizeof(bad));
	memset(bad + 8, 0, 8);
	stg_put_le64(bad + 32, stg_hash64(bad, 32));
	CHECK_EQ(stg_tombstone_decode(bad, sizeof(bad), &d), -EBADMSG);
	memcpy(bad, buf, sizeof(bad));
	bad[28] |= 4;
	stg_put_le64(bad + 32, stg_hash64(bad, 32));
	CHECK_EQ(stg_tombstone_decode(bad, sizeof(bad), &d), -EBADMSG);
	memcpy(bad, buf, sizeof(bad));
	stg_put_le32(bad + 4, 2);
	CHECK_EQ(stg_tombstone_decode(bad, sizeof(bad), &d), -EPROTONOSUPPORT);
}

static void merge_and_expiry(void)
{
	const int64_t s = 1000000000;
	/* A deletion kept a day, then its path renamed away an hour later. */
	struct stg_tombstone del = {.upto = 5, .at_ns = 100 * s, .retain_s = 86400},
			     ren = {.upto = 9, .at_ns = 3700 * s, .retain_s = 0,
				    .flags = STG_TOMBSTONE_RENAMED};
	struct stg_tombstone m = stg_tombstone_merge(&del, &ren);
	CHECK_EQ(m.upto, 9);
	CHECK_EQ(m.at_ns, 3700 * s);
	CHECK_EQ(m.flags, 0); /* not only a rename */
	CHECK(!stg_tombstone_expired(&m, (100 + 86400) * s - 1));
	CHECK(stg_tombstone_expired(&m, (100 + 86400) * s));
	m = stg_tombstone_merge(&ren, &del); /* in either order */
	CHECK(m.upto == 9 && m.flags == 0 && !stg_tombstone_expired(&m, 86000 * s));
	/* Two renames are a rename; retention 0 expires at once. */
	struct stg_tombstone r2 = ren;
	r2.upto = 12;
	r2.at_ns += s;
	m = stg_tombstone_merge(&ren, &r2);
	CHECK(m.upto == 12 && m.flags == STG_TOMBSTONE_RENAMED);
	CHECK(stg_tombstone_expired(&m, r2.at_ns));
}

int main(void)
{
	format();
	merge_and_expiry();
	return harness_done();
}
