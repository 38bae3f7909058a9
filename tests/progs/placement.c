/* SPDX-License-Identifier: MIT */
/* placement KEY SERVER...: prints the servers' indexes (0-based, in the order
 * given) as the cluster ranks them for KEY (a path), best first, as the
 * flusher and restore do (common/placement.c). For tests that must take
 * down the server a path prefers. */
#include <stdio.h>
#include <string.h>

#include "placement.h"

int main(int argc, char **argv)
{
	if (argc < 3 || argc - 2 > STG_CLUSTER_MAX_SERVERS) {
		fprintf(stderr, "usage: placement KEY SERVER...\n");
		return 2;
	}
	uint32_t order[STG_CLUSTER_MAX_SERVERS];
	stg_placement_rank(argv + 2, (size_t)(argc - 2), argv[1], strlen(argv[1]), order);
	for (int i = 0; i < argc - 2; i++)
		printf("%u%s", order[i], i + 1 < argc - 2 ? " " : "\n");
	return 0;
}
