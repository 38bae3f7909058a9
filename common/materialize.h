/* SPDX-License-Identifier: MIT */
/* Rebuilds a version's bytes from its manifest, verifying every chunk. */
#pragma once

#include <stdint.h>

#include "cache.h"
#include "manifest.h"

typedef void (*stg_progress_fn)(void *arg, uint64_t done, uint64_t total);

struct stg_materialize_error {
	uint64_t chunk; /* index of the chunk that failed */
	struct stg_manifest_entry entry;
	int error; /* -EBADMSG corrupt, -ENOENT missing, -EIO the disk failed */
};

/* Writes m's content into fd from offset 0 and sets its size; zero chunks
 * become holes. fd may be O_DIRECT. Returns 0, or -errno (-EBADMSG, -ENOENT,
 * -EIO) naming the chunk in err. */
int stg_materialize(struct stg_cache *c, const struct stg_manifest *m, int fd,
		    stg_progress_fn progress, void *arg, struct stg_materialize_error *err);
