/* SPDX-License-Identifier: MIT */
/* Which stored chunk each delta object of the store is encoded against
 * (docs/STORE.md, "Delta objects"): kept in memory so that a delta holds a
 * reference to its base, and decoding one finds its chain, without reading
 * the segments. Not thread-safe: the store serializes access. */
#pragma once

#include <stddef.h>

#include "hash.h"

struct stg_bases;

int stg_bases_new(struct stg_bases **ret);
void stg_bases_free(struct stg_bases *b);

/* Records that h is a delta against base (replacing what h had). Returns 0
 * or -ENOMEM. */
int stg_bases_set(struct stg_bases *b, const struct stg_hash *h, const struct stg_hash *base);

/* The base of h, or NULL when h is not a delta. Valid until h is removed. */
const struct stg_hash *stg_bases_find(const struct stg_bases *b, const struct stg_hash *h);

/* Forgets h (no-op when it is not a delta). */
void stg_bases_remove(struct stg_bases *b, const struct stg_hash *h);

size_t stg_bases_count(const struct stg_bases *b);

/* Calls fn for every delta and its base, in no order; fn must not change b.
 * A non-zero return stops the walk and is returned. */
int stg_bases_foreach(const struct stg_bases *b,
		      int (*fn)(void *arg, const struct stg_hash *h, const struct stg_hash *base),
		      void *arg);
