/* SPDX-License-Identifier: MIT */
/* stagehand-server: a staging server. This version validates its command
 * line only: the store and the protocol come with the flusher. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: stagehand-server --listen HOST:PORT --store DIR [--secret-file F]\n"
		   "\n"
		   "Receives staged chunks and manifests from node flushers and serves\n"
		   "them for restore.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"store", required_argument, NULL, 's'},
		{"secret-file", required_argument, NULL, 'k'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{0},
	};
	const char *listen = NULL, *store = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "l:s:k:h", opts, NULL)) != -1) {
		switch (c) {
		case 'l': listen = optarg; break;
		case 's': store = optarg; break;
		case 'k': break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("stagehand-server %s\n", STAGEHAND_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!listen || !store) {
		fprintf(stderr, "stagehand-server: --listen and --store are required\n");
		usage(stderr);
		return 2;
	}
	fprintf(stderr, "stagehand-server: the staging server is not available in this "
			"version of stagehand\n");
	return 1;
}
