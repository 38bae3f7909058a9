/* SPDX-License-Identifier: MIT */
/* Retention (keep = N) and garbage collection of unreferenced chunk objects. */
#pragma once

#include <stdint.h>

#include "cache.h"

/* Takes the cache's collection lock shared: while any holder has it, no chunk
 * object is collected, so chunks being staged for an unpublished version stay.
 * Returns a descriptor to pass to stg_gc_unpin, or -errno. */
int stg_gc_pin(struct stg_cache *c);
void stg_gc_unpin(int pinfd);

/* Removes the versions of a locked catalog entry beyond the newest keep.
 * Returns how many were removed, or -errno. */
int stg_gc_prune(int filedirfd, uint32_t keep);

struct stg_gc_result {
	uint64_t chunks_removed;
	uint64_t bytes_removed;
	uint64_t chunks_kept;
	uint64_t bytes_kept;
};

/* Deletes every chunk object no manifest references. When another process has
 * the cache pinned and wait is false, returns -EAGAIN without doing anything. */
int stg_gc_collect(struct stg_cache *c, int wait, struct stg_gc_result *ret);
