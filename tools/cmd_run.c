/* SPDX-License-Identifier: MIT */
/* stagehand run: runs a command with the shim preloaded. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "tool.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: stagehand run [--policy F] -- CMD [ARGS]\n"
		   "\n"
		   "Runs CMD (and every child it starts) with libstagehand.so preloaded:\n"
		   "files it writes under a [path ...] of the policy are staged in the\n"
		   "node cache, one version per close(). The exit status is CMD's.\n"
		   "\n"
		   "  --policy F   the policy file (default: $STAGEHAND_POLICY,\n"
		   "               ./stagehand.conf, /etc/stagehand/policy.conf)\n"
		   "  $STAGEHAND_LIB overrides where libstagehand.so is looked for.\n");
}

/* The shim next to this program: the build tree's preload/ or the libdir. */
static int find_shim(char *out, size_t len)
{
	const char *env = getenv("STAGEHAND_LIB");
	if (env && *env) {
		snprintf(out, len, "%s", env);
		return access(out, R_OK) == 0 ? 0 : -1;
	}
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *dir = dirname(exe);
		const char *cands[] = {"%s/../preload/libstagehand.so", "%s/../lib/libstagehand.so",
				       "%s/../lib/x86_64-linux-gnu/libstagehand.so"};
		for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
			char p[PATH_MAX * 2];
			snprintf(p, sizeof(p), cands[i], dir);
			char real[PATH_MAX];
			if (realpath(p, real) && access(real, R_OK) == 0) {
				snprintf(out, len, "%s", real);
				return 0;
			}
		}
	}
	snprintf(out, len, "%s/libstagehand.so", STAGEHAND_LIBDIR);
	return access(out, R_OK) == 0 ? 0 : -1;
}

int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *policy = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "+p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': policy = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		tool_error("run: no command given");
		usage(stderr);
		return EXIT_USAGE;
	}
	struct stg_policy *p;
	if (tool_open(policy, &p, NULL))
		return 1;
	char abs[PATH_MAX];
	if (!realpath(p->file, abs)) {
		tool_error("run: cannot resolve the policy path '%s': %s", p->file, strerror(errno));
		stg_policy_free(p);
		return 1;
	}
	stg_policy_free(p);
	char shim[PATH_MAX];
	if (find_shim(shim, sizeof(shim)) < 0) {
		tool_error("run: cannot find libstagehand.so (looked for '%s'); set STAGEHAND_LIB",
			   shim);
		return 1;
	}
	const char *old = getenv("LD_PRELOAD");
	char *preload;
	if (asprintf(&preload, "%s%s%s", shim, old && *old ? " " : "", old ? old : "") < 0)
		return 1;
	setenv("LD_PRELOAD", preload, 1);
	setenv("STAGEHAND_POLICY", abs, 1);
	free(preload);
	execvp(argv[optind], argv + optind);
	tool_error("run: cannot run '%s': %s", argv[optind], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}
