/* SPDX-License-Identifier: MIT */
/* Restore's pipeline: the disk is asked for the records ahead while two
 * threads read and verify chunks and others write the previous ones, so
 * the disk reads and writes overlap. */
#pragma once

#include "cache.h"
#include "manifest.h"
#include "materialize.h"

/* Fills buf with the raw_len bytes of chunk i of a manifest from elsewhere
 * than the cache, verified. Returns 0 or -errno. */
typedef int (*tool_refetch_fn)(void *arg, uint32_t i, const struct stg_materialize_error *why,
			       uint8_t *buf);

/* Like stg_materialize(), with reading and writing overlapped. A chunk the
 * cache has no good copy of is asked of refetch when it is not NULL (from
 * either decoding thread, one call at a time); *err names the chunk that
 * failed (zeroed when no chunk did: no memory, no thread). */
int tool_materialize(struct stg_cache *c, const struct stg_manifest *m, int fd,
		     stg_progress_fn progress, void *arg, tool_refetch_fn refetch,
		     void *refetch_arg, struct stg_materialize_error *err);
