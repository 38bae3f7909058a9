/* SPDX-License-Identifier: MIT */
/* A part of a job's version for the unit tests (manifest.h): node's rank
 * alone wrote the one range ext of the job's version open. Exits when out
 * of memory. */
#pragma once

#include <stdio.h>
#include <stdlib.h>

#include "manifest.h"

static inline struct stg_part *make_part(const char *job, uint64_t node, uint32_t open,
					 uint32_t nranks_job, uint32_t rank, struct stg_extent ext)
{
	struct stg_part *p;
	if (stg_part_new(&p, 1, 1) < 0)
		exit(1);
	snprintf(p->job, sizeof(p->job), "%s", job);
	p->node = node;
	p->open = open;
	p->nranks_job = nranks_job;
	p->ranks[0] = rank;
	p->extents[0] = ext;
	return p;
}
