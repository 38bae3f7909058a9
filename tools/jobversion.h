/* SPDX-License-Identifier: MIT */
/* The versions of a path as users see them: a whole version, or the parts
 * that the nodes of a parallel job committed of one version (shared = job),
 * grouped by the job and its open count and checked for completeness
 * (docs/CAPTURE.md, "Shared files across nodes"). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "manifest.h"

struct job_version {
	uint64_t id;          /* what it sorts and is numbered by: the newest part's */
	size_t nparts;        /* 1 for a whole version */
	size_t *parts;        /* indexes into the manifests given, by id ascending */
	bool is_job;          /* made of parts */
	bool complete;        /* every rank of the job is in one of the parts */
	bool open;            /* a part (or the version) was fsync'ed, not closed */
	char why[200];        /* when incomplete, why: "ranks 2-3, 7 of 8 missing" */
};

/* Groups n manifests (ids[i] the id of ms[i], ascending) into versions,
 * sorted by id: one per whole version, one per job version (all its parts).
 * Returns the count (*ret malloc'ed, release with
 * job_versions_free) or -ENOMEM. */
ssize_t job_versions(const struct stg_manifest *ms, const uint64_t *ids, size_t n,
		     struct job_version **ret);

void job_versions_free(struct job_version *v, size_t n);
