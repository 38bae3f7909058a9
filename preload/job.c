/* SPDX-License-Identifier: MIT */
/* The parallel job this process is a rank of, from its launcher's variables
 * (docs/CAPTURE.md, "Shared files across nodes"): shared = job names its
 * versions by it, and ranks.c tells the ranks of one job apart by it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static struct {
	bool read, known;
	struct shim_job job;
} id;

static bool parse_u32(const char *s, uint32_t *ret)
{
	if (!s || !*s)
		return false;
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return false;
	*ret = (uint32_t)v;
	return true;
}

/* The first launcher whose rank and size variables are both there. */
static bool read_rank(struct shim_job *job)
{
	static const char *const vars[][3] = {
		{"STAGEHAND_RANK", "STAGEHAND_RANKS", NULL},
		{"PMI_RANK", "PMI_SIZE", NULL},                          /* MPICH, Intel MPI */
		{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", NULL},  /* Open MPI */
		{"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, /* srun */
	};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *size = getenv(vars[i][1]);
		if (!size && vars[i][2])
			size = getenv(vars[i][2]);
		if (parse_u32(getenv(vars[i][0]), &job->rank) && parse_u32(size, &job->size))
			return job->size >= 1 && job->size <= STG_PART_RANKS_MAX &&
			       job->rank < job->size;
	}
	return false;
}

static bool read_job_id(struct shim_job *job)
{
	const char *slurm = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
	const char *restarts = getenv("SLURM_RESTART_COUNT");
	const char *name = getenv("STAGEHAND_JOB");
	int n;
	if (name)
		n = snprintf(job->id, sizeof(job->id), "%s", name);
	else if (slurm && restarts && *restarts && strcmp(restarts, "0") != 0)
		/* A requeued job keeps its id: its open counts start again. */
		n = snprintf(job->id, sizeof(job->id), "slurm-%s.%s.r%s", slurm,
			     step ? step : "batch", restarts);
	else if (slurm)
		n = snprintf(job->id, sizeof(job->id), "slurm-%s.%s", slurm, step ? step : "batch");
	else if ((name = getenv("PMIX_NAMESPACE")) || (name = getenv("OMPI_MCA_ess_base_jobid")))
		n = snprintf(job->id, sizeof(job->id), "%s", name);
	else
		return false;
	if (n <= 0 || (size_t)n >= sizeof(job->id))
		return false;
	for (int i = 0; i < n; i++)
		if (job->id[i] < 0x21 || job->id[i] > 0x7e)
			return false;
	return true;
}

const struct shim_job *job_identity(void)
{
	if (!id.read) {
		id.read = true;
		id.known = read_job_id(&id.job) && read_rank(&id.job);
	}
	return id.known ? &id.job : NULL;
}
