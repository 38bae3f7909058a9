/* SPDX-License-Identifier: MIT */
/* Grouping a path's versions into job versions (tools/jobversion.c):
 * whole versions, parts grouped by job and open count, completeness and
 * the reason a job version is not complete. */
#include "harness.h"
#include "jobversion.h"

/* Gives m a part of job's version open by node with ranks. */
static void part(struct stg_manifest *m, const char *job, uint32_t open, uint64_t node,
		 uint32_t nranks_job, const uint32_t *ranks, uint32_t nranks)
{
	memset(m, 0, sizeof(*m));
	CHECK_EQ(stg_part_new(&m->part, nranks, 0), 0);
	snprintf(m->part->job, sizeof(m->part->job), "%s", job);
	m->part->open = open;
	m->part->node = node;
	m->part->nranks_job = nranks_job;
	memcpy(m->part->ranks, ranks, nranks * sizeof(*ranks));
	m->flags = STG_MANIFEST_PART;
}

int main(void)
{
	struct stg_manifest ms[6];
	uint64_t ids[6] = {10, 20, 30, 40, 50, 60};
	const uint32_t r0[] = {0, 1}, r1[] = {2, 3}, r2[] = {1};
	memset(&ms[0], 0, sizeof(ms[0]));              /* a whole version */
	part(&ms[1], "job-1", 1, 7, 4, r0, 2);         /* job-1's first: nodes 7 and 8 */
	part(&ms[2], "job-1", 1, 8, 4, r1, 2);
	part(&ms[3], "job-1", 2, 7, 4, r0, 2);         /* its second: node 8's part lost */
	part(&ms[4], "job-1", 3, 7, 4, r0, 2);         /* its third: rank 1 on two nodes */
	part(&ms[5], "job-1", 3, 9, 4, r2, 1);
	struct job_version *v;
	ssize_t n = job_versions(ms, ids, 6, &v);
	CHECK_EQ(n, 4);
	if (n == 4) {
		CHECK(!v[0].is_job && v[0].complete && v[0].id == 10 && v[0].nparts == 1);
		CHECK(v[1].is_job && v[1].complete && v[1].id == 30 && v[1].nparts == 2);
		CHECK(v[1].parts[0] == 1 && v[1].parts[1] == 2); /* by id: the later wins */
		CHECK(v[2].is_job && !v[2].complete && v[2].id == 40);
		CHECK_STR(v[2].why, "ranks 2-3 of 4 missing");
		/* A job's name used by two runs: never one version. */
		CHECK(v[3].is_job && !v[3].complete && v[3].id == 60);
		CHECK_STR(v[3].why, "rank 1 was written on two nodes (the job's name used by two runs?)");
		job_versions_free(v, (size_t)n);
	}
	for (int i = 0; i < 6; i++)
		stg_manifest_done(&ms[i]);
	return harness_done();
}
