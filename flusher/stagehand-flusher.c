/* SPDX-License-Identifier: MIT */
/* stagehand-flusher: the per-node daemon that ships staged versions to the
 * staging servers. This version only validates its configuration: shipping
 * comes with the servers. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "policy.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: stagehand-flusher [--policy F]\n"
		   "\n"
		   "Ships the versions staged in the node cache to the servers of the\n"
		   "policy's [cluster] section, in the background.\n"
		   "\n"
		   "  --policy F   the policy file (default: $STAGEHAND_POLICY,\n"
		   "               ./stagehand.conf, /etc/stagehand/policy.conf)\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{0},
	};
	const char *file = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': file = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("stagehand-flusher %s\n", STAGEHAND_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	char *found = file ? strdup(file) : stg_policy_locate();
	if (!found) {
		fprintf(stderr, "stagehand-flusher: no policy file: pass --policy F\n");
		return 1;
	}
	struct stg_policy *p;
	char err[1024];
	if (stg_policy_load(found, &p, err, sizeof(err)) < 0) {
		fprintf(stderr, "stagehand-flusher: %s\n", err);
		free(found);
		return 1;
	}
	free(found);
	int r = 0;
	if (!p->has_cluster) {
		printf("stagehand-flusher: the policy has no [cluster] section: staging stays "
		       "in the node cache, nothing to ship\n");
	} else {
		fprintf(stderr, "stagehand-flusher: shipping to staging servers is not available "
				"in this version of stagehand\n");
		r = 1;
	}
	stg_policy_free(p);
	return r;
}
