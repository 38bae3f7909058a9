/* SPDX-License-Identifier: MIT */
/* The store's reference counts (docs/STORE.md, "Garbage collection"), which let a
 * collection pass drop chunks without rereading every manifest. A chunk's
 * count is the number of held manifest entries that name it (the server
 * counts them as it files and retires manifests) plus the delta objects
 * stored against it. The index slots count up to 254; the excess, and the
 * count of a chunk whose body is gone (found damaged, or not back after a
 * restart) until it is put again, live in a side tree. A chunk whose count
 * is 0 is a candidate: a pass drops it unless it was put or asked for in
 * that pass or the one before. */
#include "store-internal.h"

#include <errno.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

struct extra {
	struct stg_hash h;
	uint64_t n;
};

static int cmp_extra(const void *a, const void *b)
{
	return memcmp(((const struct extra *)a)->h.b, ((const struct extra *)b)->h.b, 16);
}

static uint64_t extra_get(const struct stg_store *s, const struct stg_hash *h)
{
	struct extra key = {.h = *h};
	struct extra **at = tfind(&key, &s->extra_refs, cmp_extra);
	return at ? (*at)->n : 0;
}

/* Sets h's side count (0 removes it). Returns 0 or -ENOMEM. */
static int extra_set(struct stg_store *s, const struct stg_hash *h, uint64_t n)
{
	struct extra key = {.h = *h};
	struct extra **at = tfind(&key, &s->extra_refs, cmp_extra);
	if (at && n == 0) {
		struct extra *x = *at;
		tdelete(&key, &s->extra_refs, cmp_extra);
		free(x);
		return 0;
	}
	if (at) {
		(*at)->n = n;
		return 0;
	}
	if (n == 0)
		return 0;
	struct extra *x = malloc(sizeof(*x));
	if (!x || !(at = tsearch(x, &s->extra_refs, cmp_extra))) {
		free(x);
		return -ENOMEM;
	}
	*x = (struct extra){*h, n};
	return 0;
}

/* A count that cannot be kept could let a pass drop a chunk in use: the
 * store drops nothing more until it restarts and counts anew. */
static void refs_lost(struct stg_store *s, int r)
{
	if (!s->refs_broken)
		stg_log_errno(STG_LOG_ERROR, r, "store: a reference count is lost: nothing is "
			      "collected until the server restarts");
	s->refs_broken = true;
}

void stg_store_refs_lost(struct stg_store *s)
{
	pthread_mutex_lock(&s->lock);
	refs_lost(s, -ENOMEM);
	pthread_mutex_unlock(&s->lock);
}

static uint64_t count_of(const struct stg_store *s, const struct stg_chunkindex_entry *e)
{
	return e->refs < STG_CHUNKINDEX_REFS_MAX ? e->refs
						 : STG_CHUNKINDEX_REFS_MAX + extra_get(s, &e->hash);
}

static void set_count(struct stg_store *s, struct stg_chunkindex_entry *e, uint64_t n)
{
	bool over = n >= STG_CHUNKINDEX_REFS_MAX;
	/* The side tree is looked at only past what the slot holds. */
	int r = over || e->refs == STG_CHUNKINDEX_REFS_MAX
			? extra_set(s, &e->hash, over ? n - STG_CHUNKINDEX_REFS_MAX : 0)
			: 0;
	if (r < 0)
		refs_lost(s, r);
	e->refs = over ? STG_CHUNKINDEX_REFS_MAX : (uint8_t)n;
	stg_chunkindex_set(s->index, e);
}

static void candidate(struct stg_store *s, const struct stg_hash *h)
{
	/* Listed only while passes drop: before the counting at the start,
	 * the list is made from the index. */
	if (!s->refs_counted || s->refs_broken)
		return;
	if (STG_GROW(s->zeros, s->capzeros, s->nzeros + 1) < 0) {
		/* The next pass finds the candidates in the index. */
		s->zeros_incomplete = true;
		return;
	}
	s->zeros[s->nzeros++] = *h;
}

void store_ref_locked(struct stg_store *s, const struct stg_hash *h)
{
	struct stg_chunkindex_entry e;
	int r = 0;
	if (stg_chunkindex_get(s->index, h, &e))
		set_count(s, &e, count_of(s, &e) + 1);
	else
		r = extra_set(s, h, extra_get(s, h) + 1);
	if (r < 0)
		refs_lost(s, r);
}

void store_unref_locked(struct stg_store *s, const struct stg_hash *h)
{
	struct stg_chunkindex_entry e;
	bool there = stg_chunkindex_get(s->index, h, &e);
	uint64_t n = there ? count_of(s, &e) : extra_get(s, h);
	if (n == 0) {
		/* Taken back more often than given: versions are taken back
		 * only as counted, so this is a bug. The count stays 0. */
		if (s->refs_unmatched++ == 0)
			stg_log(STG_LOG_WARN, "store: a reference was taken back that was not "
				"counted");
		return;
	}
	if (!there) {
		extra_set(s, h, n - 1); /* smaller: needs no memory */
		return;
	}
	set_count(s, &e, n - 1);
	if (n == 1)
		candidate(s, h);
}

void store_body_added(struct stg_store *s, struct stg_chunkindex_entry *e,
		      const struct stg_hash *base)
{
	/* The references a chunk kept while its body was gone come back. */
	uint64_t n = extra_get(s, &e->hash);
	if (n) {
		extra_set(s, &e->hash, 0);
		set_count(s, e, n);
	} else {
		candidate(s, &e->hash);
	}
	if (base)
		store_ref_locked(s, base);
}

void store_body_removed(struct stg_store *s, const struct stg_chunkindex_entry *e)
{
	uint64_t n = count_of(s, e);
	stg_chunkindex_remove(s->index, &e->hash);
	int r = extra_set(s, &e->hash, n);
	if (r < 0)
		refs_lost(s, r);
	const struct stg_hash *b = stg_bases_find(s->bases, &e->hash);
	if (b) {
		struct stg_hash base = *b;
		stg_bases_remove(s->bases, &e->hash);
		store_unref_locked(s, &base);
	}
}

static int ref_base(void *arg, const struct stg_hash *h, const struct stg_hash *base)
{
	(void)h;
	store_ref_locked(arg, base);
	return 0;
}

static int find_candidate(void *arg, const struct stg_chunkindex_entry *e)
{
	struct stg_store *s = arg;
	if (count_of(s, e) == 0)
		candidate(s, &e->hash);
	return 0;
}

void store_refs_from_bases(struct stg_store *s)
{
	pthread_mutex_lock(&s->lock);
	stg_bases_foreach(s->bases, ref_base, s);
	pthread_mutex_unlock(&s->lock);
}

void store_find_candidates(struct stg_store *s)
{
	s->nzeros = 0;
	s->zeros_incomplete = false;
	stg_chunkindex_foreach(s->index, find_candidate, s);
}

void stg_store_refs_counted(struct stg_store *s)
{
	pthread_mutex_lock(&s->lock);
	s->refs_counted = true;
	store_find_candidates(s);
	pthread_mutex_unlock(&s->lock);
}

void stg_store_ref(struct stg_store *s, const struct stg_hash *h)
{
	pthread_mutex_lock(&s->lock);
	store_ref_locked(s, h);
	pthread_mutex_unlock(&s->lock);
}

void stg_store_unref(struct stg_store *s, const struct stg_hash *h)
{
	pthread_mutex_lock(&s->lock);
	store_unref_locked(s, h);
	pthread_mutex_unlock(&s->lock);
}

uint64_t stg_store_refs(struct stg_store *s, const struct stg_hash *h)
{
	pthread_mutex_lock(&s->lock);
	struct stg_chunkindex_entry e;
	uint64_t n = stg_chunkindex_get(s->index, h, &e) ? count_of(s, &e) : extra_get(s, h);
	pthread_mutex_unlock(&s->lock);
	return n;
}

void store_refs_free(struct stg_store *s)
{
	tdestroy(s->extra_refs, free);
	s->extra_refs = NULL;
	free(s->zeros);
	s->zeros = NULL;
	s->nzeros = s->capzeros = 0;
}
