/* SPDX-License-Identifier: MIT */
/* The pending-commit record (common/pending.h): golden bytes, round trip,
 * every field's rules. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hash.h"
#include "pending.h"
#include "util.h"

static struct stg_pending sample(void)
{
	struct stg_pending p = {.size = 1ull << 30, .mode = 0644, .mtime_ns = 1795000000123456789ll,
				.replaces = 0x1122334455667788ull, .since_ns = 1794999999000000000ll};
	snprintf(p.path, sizeof(p.path), "%s", "/scratch/job/ckpt/state.h5");
	return p;
}

static void round_trip(void)
{
	struct stg_pending p = sample(), d;
	uint8_t buf[STG_PENDING_MAX];
	int n = stg_pending_encode(&p, buf);
	CHECK_EQ(n, 52 + (int)strlen(p.path) + 8);
	CHECK(harness_golden("pending-v1.bin", buf, (size_t)n));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n, &d), 0);
	CHECK_EQ(d.size, p.size);
	CHECK(!d.open);
	CHECK_EQ(d.mode, p.mode);
	CHECK_EQ(d.mtime_ns, p.mtime_ns);
	CHECK_EQ(d.replaces, p.replaces);
	CHECK_EQ(d.since_ns, p.since_ns);
	CHECK_STR(d.path, p.path);
	/* The golden file decodes to the same record. */
	size_t flen;
	uint8_t *golden = harness_fixture("pending-v1.bin", &flen);
	CHECK_EQ(stg_pending_decode(golden, flen, &d), 0);
	CHECK_STR(d.path, p.path);
	CHECK_EQ(d.size, p.size);
	free(golden);
	/* A sync's: the flag, pinned too. */
	p.open = true;
	n = stg_pending_encode(&p, buf);
	CHECK(harness_golden("pending-v1-open.bin", buf, (size_t)n));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n, &d), 0);
	CHECK(d.open);
}

/* Every flipped bit and every truncation is refused (the checksum). */
static void corruption(void)
{
	struct stg_pending p = sample(), d;
	uint8_t buf[STG_PENDING_MAX];
	int n = stg_pending_encode(&p, buf);
	int accepted = 0;
	for (int i = 0; i < n; i++)
		for (int bit = 0; bit < 8; bit++) {
			buf[i] ^= (uint8_t)(1 << bit);
			accepted += stg_pending_decode(buf, (size_t)n, &d) == 0;
			buf[i] ^= (uint8_t)(1 << bit);
		}
	CHECK_EQ(accepted, 0);
	for (int len = 0; len < n; len++)
		CHECK_EQ(stg_pending_decode(buf, (size_t)len, &d), -EBADMSG);
	uint8_t longer[STG_PENDING_MAX + 1];
	memcpy(longer, buf, (size_t)n);
	longer[n] = 0;
	CHECK_EQ(stg_pending_decode(longer, (size_t)n + 1, &d), -EBADMSG);
}

/* Fields checked beyond the checksum: a record that sums right but says
 * nonsense is refused too. */
static void field_rules(void)
{
	int n0;
	struct stg_pending d;
	uint8_t buf[STG_PENDING_MAX];
	struct stg_pending p = sample();
	p.mode = 010000; /* beyond the permission bits */
	CHECK_EQ(stg_pending_decode(buf, (size_t)stg_pending_encode(&p, buf), &d), -EBADMSG);
	p = sample();
	p.since_ns = -1;
	CHECK_EQ(stg_pending_decode(buf, (size_t)stg_pending_encode(&p, buf), &d), -EBADMSG);
	p = sample();
	snprintf(p.path, sizeof(p.path), "relative/path");
	CHECK_EQ(stg_pending_decode(buf, (size_t)stg_pending_encode(&p, buf), &d), -EBADMSG);
	p = sample();
	snprintf(p.path, sizeof(p.path), "/a/../b");
	CHECK_EQ(stg_pending_decode(buf, (size_t)stg_pending_encode(&p, buf), &d), -EBADMSG);
	p = sample();
	p.path[0] = 0;
	CHECK_EQ(stg_pending_encode(&p, buf), -ENAMETOOLONG);
	/* A flag this format does not know. */
	p = sample();
	n0 = stg_pending_encode(&p, buf);
	stg_put_le32(buf + 20, 2);
	stg_put_le64(buf + n0 - 8, stg_hash64(buf, (size_t)n0 - 8));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n0, &d), -EBADMSG);
	stg_put_le32(buf + 20, 1);
	stg_put_le64(buf + n0 - 8, stg_hash64(buf, (size_t)n0 - 8));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n0, &d), 0);
	/* A later format is not read as this one. */
	p = sample();
	int n = stg_pending_encode(&p, buf);
	stg_put_le32(buf + 4, STG_PENDING_FORMAT + 1);
	stg_put_le64(buf + n - 8, stg_hash64(buf, (size_t)n - 8));
	CHECK_EQ(stg_pending_decode(buf, (size_t)n, &d), -EBADMSG);
}

int main(void)
{
	round_trip();
	corruption();
	field_rules();
	return harness_done();
}
