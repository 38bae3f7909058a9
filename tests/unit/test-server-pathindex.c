/* SPDX-License-Identifier: MIT */
/* The server's path index: a prefix finds exactly the paths that start
 * with it, sorted, per user, as paths come and go (checked against a
 * plain sorted array); and its file: golden bytes, every field checked. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hash.h"
#include "pathfile.h"
#include "pathindex.h"
#include "util.h"

#define N 3000

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What find must return: the live paths of want[] starting with prefix. */
static void check_prefix(struct stg_pathindex *x, uint32_t uid, char **want, const bool *live,
			 size_t n, const char *prefix)
{
	char **got;
	size_t ngot;
	CHECK_EQ(stg_pathindex_find(x, uid, prefix, &got, &ngot), 0);
	size_t k = 0, plen = strlen(prefix);
	bool same = true;
	for (size_t i = 0; i < n; i++) {
		if (!live[i] || strncmp(want[i], prefix, plen) != 0)
			continue;
		if (k >= ngot || strcmp(got[k], want[i]) != 0)
			same = false;
		k++;
	}
	CHECK_EQ(ngot, k);
	CHECK(same);
	free(got);
}

/* Re-seals a changed file with a valid checksum. */
static void reseal(uint8_t *b, size_t len)
{
	stg_put_le64(b + len - 8, stg_hash64(b, len - 8));
}

static void pathfile_format(void)
{
	const struct stg_pathfile_entry v[] = {
		{"/ckpt/a", 0}, {"/ckpt/b/x", 1795000000000000000ll}, {"/ckpt/c", 0}};
	uint8_t *b;
	size_t len, n;
	CHECK_EQ(stg_pathfile_encode(1000, 1794000000123456789ll, v, 3, &b, &len), 0);
	CHECK(harness_golden("pathindex-v1.bin", b, len));
	struct stg_pathfile_entry *d;
	int64_t mtime;
	CHECK_EQ(stg_pathfile_decode(b, len, 1000, &mtime, &d, &n), 0);
	CHECK(n == 3 && mtime == 1794000000123456789ll);
	for (size_t i = 0; i < n && n == 3; i++)
		CHECK(strcmp(d[i].path, v[i].path) == 0 && d[i].expiry_ns == v[i].expiry_ns);
	free(d);
	CHECK_EQ(stg_pathfile_decode(b, len, 1001, &mtime, &d, &n), -EBADMSG); /* another uid */
	CHECK_EQ(stg_pathfile_decode(b, len - 1, 1000, &mtime, &d, &n), -EBADMSG);
	for (size_t i = 0; i < len; i++) { /* any byte flipped */
		b[i] ^= 0x20;
		int r = stg_pathfile_decode(b, len, 1000, &mtime, &d, &n);
		CHECK(r < 0);
		if (r == 0)
			free(d);
		b[i] ^= 0x20;
	}
	/* Fields checked with a valid checksum: a newer format, flags, a
	 * count past the records, paths out of order or not normalized, a
	 * negative expiry. */
	uint8_t *bad = malloc(len);
	struct { size_t at; uint8_t to; int want; } cases[] = {
		{4, 2, -EPROTONOSUPPORT}, {12, 1, -EBADMSG}, {16, 4, -EBADMSG},
		{STG_PATHFILE_HEADER_SIZE + 12 + 6, 'z', -EBADMSG}, /* /ckpt/z > /ckpt/b/x */
		{STG_PATHFILE_HEADER_SIZE + 12, 'x', -EBADMSG},     /* not absolute */
		{STG_PATHFILE_HEADER_SIZE + 7, 0x80, -EBADMSG},     /* expiry < 0 */
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		memcpy(bad, b, len);
		bad[cases[c].at] = cases[c].to;
		reseal(bad, len);
		CHECK_EQ(stg_pathfile_decode(bad, len, 1000, &mtime, &d, &n), cases[c].want);
	}
	free(bad);
	free(b);
	/* Encoded only sorted and valid. */
	const struct stg_pathfile_entry unsorted[] = {{"/b", 0}, {"/a", 0}};
	CHECK_EQ(stg_pathfile_encode(1, 0, unsorted, 2, &b, &len), -EINVAL);
	const struct stg_pathfile_entry relative[] = {{"a/b", 0}};
	CHECK_EQ(stg_pathfile_encode(1, 0, relative, 1, &b, &len), -EINVAL);
	/* None: a user without paths. */
	CHECK_EQ(stg_pathfile_encode(1, 5, NULL, 0, &b, &len), 0);
	CHECK_EQ(stg_pathfile_decode(b, len, 1, &mtime, &d, &n), 0);
	CHECK(n == 0 && mtime == 5);
	free(d);
	free(b);
}

int main(void)
{
	pathfile_format();
	struct stg_pathindex *x;
	CHECK_EQ(stg_pathindex_new(&x), 0);

	/* Paths under a few directories, added in random order, twice. */
	char *paths[N];
	bool live[N];
	for (size_t i = 0; i < N; i++) {
		char buf[64];
		snprintf(buf, sizeof(buf), "/ckpt/step_%zu/rank%zu.dat", i % 37, i);
		paths[i] = strdup(buf);
		live[i] = true;
	}
	qsort(paths, N, sizeof(*paths), cmp_str);
	for (size_t k = 0; k < 2 * N; k++)
		CHECK_EQ(stg_pathindex_add(x, 1000, paths[harness_random() % N]), 0);
	for (size_t i = 0; i < N; i++)
		CHECK_EQ(stg_pathindex_add(x, 1000, paths[i]), 0);
	CHECK_EQ(stg_pathindex_count(x), N);

	/* Another user's paths are not the first one's. */
	CHECK_EQ(stg_pathindex_add(x, 2000, "/ckpt/step_1/other"), 0);
	CHECK_EQ(stg_pathindex_add(x, 7, "/ckpt/step_1/other"), 0);
	check_prefix(x, 1000, paths, live, N, "");
	check_prefix(x, 1000, paths, live, N, "/ckpt/step_1");
	check_prefix(x, 1000, paths, live, N, "/ckpt/step_1/");
	check_prefix(x, 1000, paths, live, N, paths[N / 2]);
	check_prefix(x, 1000, paths, live, N, "/nothing");
	check_prefix(x, 1000, paths, live, N, "/ckpt/step_9/rank9");
	char **got;
	size_t ngot;
	CHECK_EQ(stg_pathindex_find(x, 2000, "/ckpt/", &got, &ngot), 0);
	CHECK_EQ(ngot, 1);
	if (ngot == 1)
		CHECK_STR(got[0], "/ckpt/step_1/other");
	free(got);
	CHECK_EQ(stg_pathindex_find(x, 3000, "", &got, &ngot), 0);
	CHECK_EQ(ngot, 0);
	free(got);

	/* Remove half at random (some twice, some never there). */
	for (size_t k = 0; k < N; k++) {
		size_t i = harness_random() % N;
		stg_pathindex_remove(x, 1000, paths[i]);
		live[i] = false;
	}
	stg_pathindex_remove(x, 1000, "/not/there");
	stg_pathindex_remove(x, 4242, "/ckpt/step_1/other");
	size_t nlive = 0;
	for (size_t i = 0; i < N; i++)
		nlive += live[i];
	CHECK_EQ(stg_pathindex_count(x), nlive + 2);
	check_prefix(x, 1000, paths, live, N, "");
	check_prefix(x, 1000, paths, live, N, "/ckpt/step_2");
	/* ...and add them back. */
	for (size_t i = 0; i < N; i++) {
		CHECK_EQ(stg_pathindex_add(x, 1000, paths[i]), 0);
		live[i] = true;
	}
	check_prefix(x, 1000, paths, live, N, "");
	check_prefix(x, 1000, paths, live, N, "/ckpt/step_3");

	for (size_t i = 0; i < N; i++)
		free(paths[i]);
	stg_pathindex_free(x);
	return harness_done();
}
