/* SPDX-License-Identifier: MIT */
/* The delta objects' bases: a balanced tree (glibc's tsearch). Deltas are a
 * fraction of the chunks, so a node and a 32-byte key per delta beside its
 * index entry cost little. */
#include "bases.h"

#include <errno.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>

struct link {
	struct stg_hash h, base;
};

struct stg_bases {
	void *root;
	size_t count;
};

static int cmp_link(const void *a, const void *b)
{
	return memcmp(((const struct link *)a)->h.b, ((const struct link *)b)->h.b, 16);
}

int stg_bases_new(struct stg_bases **ret)
{
	*ret = calloc(1, sizeof(**ret));
	return *ret ? 0 : -ENOMEM;
}

void stg_bases_free(struct stg_bases *b)
{
	if (!b)
		return;
	tdestroy(b->root, free);
	free(b);
}

int stg_bases_set(struct stg_bases *b, const struct stg_hash *h, const struct stg_hash *base)
{
	struct link *l = malloc(sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->h = *h;
	l->base = *base;
	struct link **at = tsearch(l, &b->root, cmp_link);
	if (!at) {
		free(l);
		return -ENOMEM;
	}
	if (*at != l) {
		(*at)->base = *base;
		free(l);
	} else {
		b->count++;
	}
	return 0;
}

const struct stg_hash *stg_bases_find(const struct stg_bases *b, const struct stg_hash *h)
{
	struct link key = {.h = *h};
	struct link **at = tfind(&key, &b->root, cmp_link);
	return at ? &(*at)->base : NULL;
}

void stg_bases_remove(struct stg_bases *b, const struct stg_hash *h)
{
	struct link key = {.h = *h};
	struct link **at = tfind(&key, &b->root, cmp_link);
	if (!at)
		return;
	struct link *l = *at;
	tdelete(&key, &b->root, cmp_link);
	free(l);
	b->count--;
}

size_t stg_bases_count(const struct stg_bases *b)
{
	return b->count;
}

/* twalk passes no argument (twalk_r needs glibc 2.30): the walk's own is
 * per thread. */
static _Thread_local struct walk {
	int (*fn)(void *arg, const struct stg_hash *h, const struct stg_hash *base);
	void *arg;
	int r;
} walk;

static void visit(const void *node, VISIT which, int depth)
{
	(void)depth;
	if ((which == postorder || which == leaf) && walk.r == 0) {
		const struct link *l = *(struct link *const *)node;
		walk.r = walk.fn(walk.arg, &l->h, &l->base);
	}
}

int stg_bases_foreach(const struct stg_bases *b,
		      int (*fn)(void *arg, const struct stg_hash *h, const struct stg_hash *base),
		      void *arg)
{
	walk = (struct walk){fn, arg, 0};
	twalk(b->root, visit);
	return walk.r;
}
