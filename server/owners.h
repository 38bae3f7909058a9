/* SPDX-License-Identifier: MIT */
/* Which users may see which stored chunks (docs/STORE.md, "Chunks across
 * users"): a user sees a chunk it sent (or sent again, byte for byte, when
 * another user's copy was stored first) or that its own manifests name as
 * held here. HAVE and GET_CHUNK answer only for these, so that a chunk's
 * hash is no key to another user's bytes, while the store keeps one copy.
 * A set of (uid, hash) pairs with the collector's epochs. Thread-safe. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

struct stg_owners;

int stg_owners_new(struct stg_owners **ret);
void stg_owners_free(struct stg_owners *o);

/* uid may see h from now on (marked in the current epoch). Returns 0 or
 * -ENOMEM. */
int stg_owners_add(struct stg_owners *o, uint32_t uid, const struct stg_hash *h);

/* May uid see h? Marks the pair when it may: a chunk a user is told it holds
 * stays its own until the manifest naming it arrives. */
bool stg_owners_has(struct stg_owners *o, uint32_t uid, const struct stg_hash *h);

/* Collection, as the store's (stg_store_gc_begin): a pair neither added nor
 * marked in the current epoch and the one before is forgotten at its end.
 * stg_owners_gc_end returns how many pairs were. */
void stg_owners_gc_begin(struct stg_owners *o);
size_t stg_owners_gc_end(struct stg_owners *o);

size_t stg_owners_count(struct stg_owners *o);
