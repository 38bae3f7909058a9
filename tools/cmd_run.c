/* SPDX-License-Identifier: MIT */
/* stagehand run: runs a command with the shim preloaded. */
#include <errno.h>
#include <getopt.h>
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
	if (tool_find(STG_LAYOUT_SHIM, shim, sizeof(shim)) < 0) {
		tool_error("run: cannot find libstagehand.so in the build tree or where it is "
			   "installed; set STAGEHAND_LIB");
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
