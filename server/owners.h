/* SPDX-License-Identifier: MIT */
/* Which users may see which stored chunks (docs/STORE.md, "Chunks across
 * users"): a user sees a chunk it sent (or sent again, byte for byte, when
 * another user's copy was stored first) or that its own manifests name as
 * held here. HAVE and GET_CHUNK answer only for these, so that a chunk's
 * hash is no key to another user's bytes, while the store keeps one copy.
 * A set of (uid, hash) pairs, each with the count of the held entries of
 * the user's manifests that name the chunk, collected as the store's
 * chunks are (store.h). Thread-safe. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

struct stg_owners;

int stg_owners_new(struct stg_owners **ret);
void stg_owners_free(struct stg_owners *o);

/* uid may see h from now on: it sent it. Kept through this pass and the
 * next even with no manifest naming it. Returns 0 or -ENOMEM. */
int stg_owners_add(struct stg_owners *o, uint32_t uid, const struct stg_hash *h);

/* A held entry of a manifest of uid names h: counted as it is filed, taken
 * back as the version goes. ref returns 0 or -ENOMEM. */
int stg_owners_ref(struct stg_owners *o, uint32_t uid, const struct stg_hash *h);
void stg_owners_unref(struct stg_owners *o, uint32_t uid, const struct stg_hash *h);
uint32_t stg_owners_refs(struct stg_owners *o, uint32_t uid, const struct stg_hash *h);
/* At the start, once every manifest is counted: the pairs without a count
 * become candidates. Nothing is forgotten before. */
void stg_owners_counted(struct stg_owners *o);
/* A count could not be kept: nothing is forgotten until a restart. */
void stg_owners_refs_lost(struct stg_owners *o);

/* May uid see h? Touches the pair when it may: a chunk a user is told it
 * holds stays its own until the manifest naming it arrives. */
bool stg_owners_has(struct stg_owners *o, uint32_t uid, const struct stg_hash *h);

/* Collection, as the store's (stg_store_gc_begin): a pair with no count,
 * neither added nor touched in the current epoch or the one before, is
 * forgotten at its end; the work follows the pairs that lost their last
 * count or were added. stg_owners_gc_end returns how many were. */
void stg_owners_gc_begin(struct stg_owners *o);
size_t stg_owners_gc_end(struct stg_owners *o);

size_t stg_owners_count(struct stg_owners *o);
