/* SPDX-License-Identifier: MIT */
/* The small helpers: growing an array. */
#include <stdint.h>

#include "harness.h"
#include "util.h"

struct pair {
	uint64_t a;
	uint32_t b;
};

/* From nothing, one element at a time: the contents survive every move. */
static void grow_appends(void)
{
	struct pair *v = NULL;
	size_t n = 0, cap = 0;
	CHECK_EQ(STG_GROW(v, cap, 0), 0); /* nothing needed: nothing allocated */
	CHECK(v == NULL);
	CHECK_EQ(cap, 0);
	for (uint32_t i = 0; i < 1000; i++) {
		size_t had = cap;
		if (STG_GROW(v, cap, n + 1) < 0)
			break;
		CHECK(cap >= n + 1);
		if (had == 0)
			CHECK_EQ(cap, 16);
		else if (cap != had)
			CHECK_EQ(cap, had * 2);
		v[n++] = (struct pair){(uint64_t)i * 3, i};
	}
	CHECK_EQ(n, 1000);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += v[i].a != i * 3 || v[i].b != i;
	CHECK_EQ(bad, 0);
	free(v);
}

/* Asked for more than twice the capacity, it gives what is asked; asked for
 * less than it has, it changes nothing, errno included. */
static void grow_to_need(void)
{
	uint8_t *buf = NULL;
	size_t cap = 0;
	CHECK_EQ(STG_GROW(buf, cap, 5000), 0);
	CHECK_EQ(cap, 5000);
	memset(buf, 0xa5, cap);
	uint8_t *was = buf;
	errno = EINTR;
	CHECK_EQ(STG_GROW(buf, cap, 4999), 0);
	CHECK_EQ(STG_GROW(buf, cap, 5000), 0);
	CHECK_EQ(errno, EINTR);
	CHECK(buf == was);
	CHECK_EQ(cap, 5000);
	CHECK_EQ(STG_GROW(buf, cap, 5001), 0);
	CHECK_EQ(cap, 10000);
	size_t bad = 0;
	for (size_t i = 0; i < 5000; i++)
		bad += buf[i] != 0xa5;
	CHECK_EQ(bad, 0);
	free(buf);
}

/* A count whose size in bytes overflows is refused before realloc sees
 * it, and leaves the array as it was. */
static void grow_overflow(void)
{
	struct pair *v = NULL;
	size_t cap = 0;
	CHECK_EQ(STG_GROW(v, cap, 3), 0);
	v[0] = (struct pair){7, 8};
	struct pair *was = v;
	size_t had = cap;
	size_t too_many[] = {SIZE_MAX / sizeof(*v) + 1, SIZE_MAX / 2, SIZE_MAX};
	for (size_t i = 0; i < sizeof(too_many) / sizeof(*too_many); i++) {
		errno = 0;
		CHECK_EQ(STG_GROW(v, cap, too_many[i]), -ENOMEM);
		CHECK_EQ(errno, ENOMEM);
		CHECK(v == was);
		CHECK_EQ(cap, had);
	}
	CHECK(v[0].a == 7 && v[0].b == 8);
	free(v);
}

int main(void)
{
	grow_appends();
	grow_to_need();
	grow_overflow();
	return harness_done();
}
