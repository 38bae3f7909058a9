/* SPDX-License-Identifier: MIT */
/* Version ids: minted in order on any node, numbered for users. */
#include "harness.h"
#include "version.h"

#define S INT64_C(1000000000)

int main(void)
{
	int64_t now = 1795000000 * S;
	/* A first version, and the next one a second later. */
	uint64_t a = stg_version_mint(0, 0, now);
	CHECK_EQ(stg_version_seq(a), 1);
	uint64_t b = stg_version_mint(a, 0, now + S);
	CHECK(b > a);
	CHECK_EQ(stg_version_seq(b), 2);
	/* The same instant, or a clock gone back: still newer. */
	uint64_t c = stg_version_mint(b, 0, now + S);
	CHECK(c > b);
	uint64_t d = stg_version_mint(c, 0, now - 3600 * S);
	CHECK(d > c);
	CHECK_EQ(stg_version_seq(d), 4);
	/* A cache from before version ids: versions 1..3. The next continues. */
	uint64_t e = stg_version_mint(3, 0, now);
	CHECK(e > 3);
	CHECK_EQ(stg_version_seq(e), 4);
	/* A node that knows nothing of the path's history (a new node, its
	 * cache lost) mints seq 1, but later in time: newer than every id
	 * minted before it. */
	uint64_t fresh = stg_version_mint(0, 0, now + 10 * S);
	CHECK(fresh > d);
	/* Superseding the newest (an open version): newer, same number. */
	uint64_t again = stg_version_mint(d, d, now);
	CHECK(again > d);
	CHECK_EQ(stg_version_seq(again), 4);
	CHECK_EQ(stg_version_seq(stg_version_mint(d, c, now)), 5);
	/* The sequence saturates instead of wrapping into the clock. */
	uint64_t sat = stg_version_mint(STG_VERSION_SEQ_MASK, 0, now);
	CHECK_EQ(stg_version_seq(sat), STG_VERSION_SEQ_MASK);
	CHECK_EQ(stg_version_seq(stg_version_mint(sat, 0, now)), STG_VERSION_SEQ_MASK);

	/* Numbers: the sequence numbers where they are consistent, pruned
	 * versions leaving no gap in meaning. */
	uint64_t ids[] = {a, b, c, d}, num[5];
	stg_version_numbers(ids + 1, 3, num);
	CHECK_EQ(num[0], 2);
	CHECK_EQ(num[1], 3);
	CHECK_EQ(num[2], 4);
	/* The new node's seq 1 comes after 1..4: it is number 5. */
	uint64_t hist[] = {a, b, c, d, fresh};
	stg_version_numbers(hist, 5, num);
	CHECK_EQ(num[4], 5);
	CHECK_EQ(stg_version_by_number(hist, 5, 5), fresh);
	CHECK_EQ(stg_version_by_number(hist, 5, 1), a);
	CHECK_EQ(stg_version_by_number(hist, 5, 6), 0);
	CHECK_EQ(stg_version_by_number(hist + 1, 4, 1), 0);
	/* Old ids number as themselves. */
	uint64_t old[] = {2, 3, e};
	stg_version_numbers(old, 3, num);
	CHECK_EQ(num[0], 2);
	CHECK_EQ(num[2], 4);
	return harness_done();
}
