/* SPDX-License-Identifier: MIT */
/* logflood N: logs through common/log.c as the daemons do ($STAGEHAND_LOG_FILE)
 * N warnings from one call site with a single error in their midst, then, the
 * test clock ($STAGEHAND_TEST_CLOCK_NS) moved on by a minute, N more from the
 * same site (tests/bats/logs.bats). */
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

static void flood(long from, long n)
{
	for (long i = from; i < from + n; i++) {
		stg_log(STG_LOG_WARN, "refused connection %ld: bad magic", i);
		if (i == n / 2)
			stg_log(STG_LOG_ERROR, "the one error of the run");
	}
}

int main(int argc, char **argv)
{
	const char *clock = getenv("STAGEHAND_TEST_CLOCK_NS");
	if (argc != 2 || !clock) {
		fprintf(stderr, "usage: STAGEHAND_TEST_CLOCK_NS=NS logflood N\n");
		return 2;
	}
	long n = atol(argv[1]);
	if (stg_log_open_daemon("logflood") < 0)
		return 1;
	flood(0, n);
	char later[32];
	snprintf(later, sizeof(later), "%lld", strtoll(clock, NULL, 10) + 60000000000ll);
	setenv("STAGEHAND_TEST_CLOCK_NS", later, 1);
	flood(n, n);
	return 0; /* exit() logs what the second flood suppressed */
}
