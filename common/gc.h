/* SPDX-License-Identifier: MIT */
/* Retention (keep = N) and garbage collection of packs no version references. */
#pragma once

#include <stdint.h>

#include "cache.h"

/* Takes the cache's collection lock shared: while any holder has it, nothing
 * is collected, so the pack of a version being built stays. Returns a
 * descriptor to pass to stg_gc_unpin, or -errno. */
int stg_gc_pin(struct stg_cache *c);
void stg_gc_unpin(int pinfd);

struct stg_gc_result {
	uint64_t packs_removed, bytes_removed;
	uint64_t packs_compacted;  /* of the removed: emptied by moving their live records */
	uint64_t packs_kept, bytes_kept;
	uint64_t live_chunks;      /* distinct chunk records still referenced */
	uint64_t live_bytes;       /* their record bytes */
};

/* Deletes every pack no manifest references, compacts packs that are mostly
 * unreferenced (moving their live records to a new pack and rewriting the
 * manifests that name them), and rewrites the dedup index to exactly the
 * live chunks. When another process has the cache pinned and
 * wait is false, returns -EAGAIN without doing anything. */
int stg_gc_collect(struct stg_cache *c, int wait, struct stg_gc_result *ret);
