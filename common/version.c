/* SPDX-License-Identifier: MIT */
/* Version ids: a hybrid logical clock and a sequence number in 64 bits. */
#include "version.h"

uint64_t stg_version_mint(uint64_t newest, uint64_t replaces, int64_t now_ns)
{
	uint64_t now = now_ns > 0 ? (uint64_t)now_ns >> STG_VERSION_SEQ_BITS : 0;
	uint64_t clock = newest >> STG_VERSION_SEQ_BITS;
	/* A clock behind the newest id (this node's, or another's that ran
	 * ahead) still moves on: the new id sorts after everything known. */
	if (now <= clock)
		now = clock + 1;
	uint64_t seq = newest & STG_VERSION_SEQ_MASK;
	if (replaces != newest || replaces == 0) {
		if (seq < STG_VERSION_SEQ_MASK)
			seq++;
	}
	return now << STG_VERSION_SEQ_BITS | seq;
}

uint64_t stg_version_seq(uint64_t id)
{
	return id & STG_VERSION_SEQ_MASK;
}

void stg_version_numbers(const uint64_t *ids, size_t n, uint64_t *out)
{
	uint64_t prev = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t seq = stg_version_seq(ids[i]);
		prev = seq > prev ? seq : prev + 1;
		out[i] = prev;
	}
}

uint64_t stg_version_by_number(const uint64_t *ids, size_t n, uint64_t number)
{
	uint64_t prev = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t seq = stg_version_seq(ids[i]);
		prev = seq > prev ? seq : prev + 1;
		if (prev == number)
			return ids[i];
		if (prev > number)
			break;
	}
	return 0;
}
