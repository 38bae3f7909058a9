/* SPDX-License-Identifier: MIT */
/* Restore's pipeline: one thread reads and verifies chunks while another
 * writes the previous ones, so the disk reads and writes overlap. */
#pragma once

#include "cache.h"
#include "manifest.h"
#include "materialize.h"

/* Like stg_materialize(), with reading and writing overlapped. */
int tool_materialize(struct stg_cache *c, const struct stg_manifest *m, int fd,
		     stg_progress_fn progress, void *arg, struct stg_materialize_error *err);
