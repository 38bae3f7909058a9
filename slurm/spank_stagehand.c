/* SPDX-License-Identifier: MIT */
/* stagehand's SPANK plugin: `srun --stagehand[=POLICY]`, or `#SBATCH
 * --stagehand[=POLICY]` for every step of a batch job, runs each task with
 * the shim preloaded (and POLICY, an absolute path, as its policy; else the
 * shim finds its own: $STAGEHAND_POLICY, ./stagehand.conf,
 * /etc/stagehand/policy.conf). In plugstack.conf:
 *
 *   optional /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_stagehand.so [shim=PATH] [policy=PATH]
 *
 * shim= names the library (default: where it is installed), policy= the
 * policy of a bare --stagehand. The batch step itself (the job script) is
 * left alone: only its srun steps are preloaded, and the script can run
 * `stagehand run` where it wants one. */
#include <limits.h>
#include <slurm/slurm.h>
#include <slurm/spank.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

SPANK_PLUGIN(stagehand, 1);

static int enabled;
static char policy[PATH_MAX];
static char shim[PATH_MAX] = STAGEHAND_SHIM_PATH;

static int on_option(int val, const char *arg, int remote)
{
	(void)val;
	(void)remote;
	if (arg && *arg) {
		if (arg[0] != '/' || strlen(arg) >= sizeof(policy)) {
			slurm_error("stagehand: --stagehand=%s: the policy must be an absolute path",
				    arg);
			return -1;
		}
		snprintf(policy, sizeof(policy), "%s", arg);
	}
	enabled = 1;
	return 0;
}

static struct spank_option option = {
	"stagehand", "[POLICY]",
	"Checkpoint staging: preload stagehand into each task, with POLICY (an absolute "
	"path) as its policy file",
	2, 0, on_option,
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		const char *v = strchr(av[i], '=');
		char *dst = strncmp(av[i], "shim=", 5) == 0     ? shim
			    : strncmp(av[i], "policy=", 7) == 0 ? policy
								: NULL;
		if (!dst || v[1] != '/' || strlen(v + 1) >= PATH_MAX) {
			slurm_error("stagehand: plugstack.conf argument '%s': shim=PATH or "
				    "policy=PATH, an absolute path", av[i]);
			return -1;
		}
		snprintf(dst, PATH_MAX, "%s", v + 1);
	}
	/* Registered, not in a static table: sbatch sees it too. */
	if (spank_option_register(sp, &option) != ESPANK_SUCCESS) {
		slurm_error("stagehand: cannot register --stagehand");
		return -1;
	}
	return 0;
}

/* Is the shim among the entries of LD_PRELOAD (space or colon separated)? */
static int preloaded(const char *list)
{
	char copy[8192];
	snprintf(copy, sizeof(copy), "%s", list);
	char *save;
	for (char *e = strtok_r(copy, " :", &save); e; e = strtok_r(NULL, " :", &save)) {
		const char *base = strrchr(e, '/');
		if (strcmp(base ? base + 1 : e, "libstagehand.so") == 0)
			return 1;
	}
	return 0;
}

/* In each task, as its user, before its program starts. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	uint32_t step;
	if (!enabled || (spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS &&
			 step == SLURM_BATCH_SCRIPT))
		return 0;
	/* A path it cannot preload fails the task loudly: never a job that
	 * runs without its checkpoints staged when it asked for them. */
	if (access(shim, R_OK) != 0) {
		slurm_error("stagehand: cannot read the shim '%s': %m", shim);
		return -1;
	}
	char cur[8192] = "";
	spank_err_t e = spank_getenv(sp, "LD_PRELOAD", cur, sizeof(cur));
	if (e == ESPANK_ENV_NOEXIST) {
		cur[0] = '\0';
	} else if (e != ESPANK_SUCCESS) {
		/* (too long to read whole: rewriting it would drop the rest) */
		slurm_error("stagehand: cannot read the task's LD_PRELOAD: %s", spank_strerror(e));
		return -1;
	}
	if (!preloaded(cur)) {
		char next[8192 + PATH_MAX + 2];
		snprintf(next, sizeof(next), "%s%s%s", shim, cur[0] ? " " : "", cur);
		if (spank_setenv(sp, "LD_PRELOAD", next, 1) != ESPANK_SUCCESS) {
			slurm_error("stagehand: cannot set LD_PRELOAD");
			return -1;
		}
	}
	if (policy[0] && spank_setenv(sp, "STAGEHAND_POLICY", policy, 1) != ESPANK_SUCCESS) {
		slurm_error("stagehand: cannot set STAGEHAND_POLICY");
		return -1;
	}
	return 0;
}
