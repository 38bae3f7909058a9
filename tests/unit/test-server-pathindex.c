/* SPDX-License-Identifier: MIT */
/* The server's path index: a prefix finds exactly the paths that start
 * with it, sorted, per user, as paths come and go (checked against a
 * plain sorted array). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "pathindex.h"

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

int main(void)
{
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
