/* SPDX-License-Identifier: MIT */
/* Tombstones: "SHDL", format, upto, at, retention, flags, checksum. */
#include "tombstone.h"

#include <errno.h>
#include <string.h>

#include "hash.h"
#include "util.h"

#define KNOWN_FLAGS STG_TOMBSTONE_RENAMED

void stg_tombstone_encode(const struct stg_tombstone *t, uint8_t out[STG_TOMBSTONE_SIZE])
{
	memcpy(out, STG_TOMBSTONE_MAGIC, 4);
	stg_put_le32(out + 4, STG_TOMBSTONE_FORMAT);
	stg_put_le64(out + 8, t->upto);
	stg_put_le64(out + 16, (uint64_t)t->at_ns);
	stg_put_le32(out + 24, t->retain_s);
	stg_put_le32(out + 28, t->flags);
	stg_put_le64(out + 32, stg_hash64(out, 32));
}

int stg_tombstone_decode(const uint8_t *buf, size_t len, struct stg_tombstone *ret)
{
	if (len < 8 || memcmp(buf, STG_TOMBSTONE_MAGIC, 4) != 0)
		return -EBADMSG;
	if (stg_get_le32(buf + 4) > STG_TOMBSTONE_FORMAT)
		return -EPROTONOSUPPORT;
	if (stg_get_le32(buf + 4) != STG_TOMBSTONE_FORMAT || len != STG_TOMBSTONE_SIZE ||
	    stg_get_le64(buf + 32) != stg_hash64(buf, 32))
		return -EBADMSG;
	struct stg_tombstone t = {
		.upto = stg_get_le64(buf + 8),
		.at_ns = (int64_t)stg_get_le64(buf + 16),
		.retain_s = stg_get_le32(buf + 24),
		.flags = stg_get_le32(buf + 28),
	};
	if (t.upto == 0 || t.at_ns <= 0 || (t.flags & ~KNOWN_FLAGS))
		return -EBADMSG;
	*ret = t;
	return 0;
}

int64_t stg_tombstone_expiry(const struct stg_tombstone *t)
{
	return t->at_ns + (int64_t)t->retain_s * 1000000000;
}

struct stg_tombstone stg_tombstone_merge(const struct stg_tombstone *t,
					 const struct stg_tombstone *u)
{
	struct stg_tombstone m = {
		.upto = t->upto > u->upto ? t->upto : u->upto,
		.at_ns = t->at_ns > u->at_ns ? t->at_ns : u->at_ns,
		/* A rename only when every deletion it covers was one. */
		.flags = t->flags & u->flags,
	};
	/* The versions each covered stay as long as it said. */
	int64_t et = stg_tombstone_expiry(t), eu = stg_tombstone_expiry(u);
	int64_t until = et > eu ? et : eu;
	int64_t left = (until - m.at_ns + 999999999) / 1000000000;
	m.retain_s = left > UINT32_MAX ? UINT32_MAX : (uint32_t)left;
	return m;
}

bool stg_tombstone_expired(const struct stg_tombstone *t, int64_t now_ns)
{
	return now_ns >= stg_tombstone_expiry(t);
}
