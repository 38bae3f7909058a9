/* SPDX-License-Identifier: MIT */
/* stagehand flush: gets everything staged on this node to the servers; with
 * --wait it returns once all of it is replicated (a job's epilogue), or says
 * what is not. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "nodestats.h"
#include "queue.h"
#include "tool.h"
#include "util.h"
#include "version.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: stagehand flush [--policy F] [--wait] [--timeout SECS]\n"
		   "\n"
		   "Starts the node's flusher if versions wait to be shipped and none runs.\n"
		   "With --wait, blocks until every version staged on this node is held by\n"
		   "its servers, showing progress on a terminal.\n"
		   "\n"
		   "  --wait          wait until everything is replicated\n"
		   "  --timeout SECS  give up waiting after SECS (default 600) and list\n"
		   "                  what is not replicated\n"
		   "exit status: 0 when nothing is left to ship, 1 otherwise.\n");
}

static size_t queued(struct stg_cache *c, struct stg_queue_item **ret)
{
	struct stg_queue_item *items = NULL;
	size_t n = 0;
	if (stg_queue_list(c, &items, &n) < 0)
		return (size_t)-1;
	if (ret)
		*ret = items;
	else
		free(items);
	return n;
}

/* Lists what is still queued and why, from the flusher's own account. */
static void report_left(struct stg_cache *c)
{
	struct stg_queue_item *items = NULL;
	size_t n = queued(c, &items);
	if (n == (size_t)-1)
		return;
	tool_error("flush: %zu version%s or deletion%s not replicated:", n, n == 1 ? "" : "s",
		   n == 1 ? " is" : "s are");
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		stg_queue_item_path(c, &items[i], path, sizeof(path));
		if (items[i].version == 0)
			fprintf(stderr, "  %s: its deletion\n", path);
		else
			fprintf(stderr, "  %s version %" PRIu64 "\n", path,
				stg_version_seq(items[i].version));
	}
	free(items);
	struct stg_node_stats *st = calloc(1, sizeof(*st));
	if (st && stg_node_stats_read_state(c, st) == 0)
		for (size_t i = 0; i < st->nservers; i++)
			fprintf(stderr, "  server %s %s %s %s\n", st->servers[i].name,
				st->servers[i].state, st->servers[i].transport,
				st->servers[i].last_error[0] ? st->servers[i].last_error : "-");
	free(st);
}

int cmd_flush(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"wait", no_argument, NULL, 'w'},
		{"timeout", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *policy = NULL;
	bool wait = false;
	long timeout_s = 600;
	int c;
	while ((c = getopt_long(argc, argv, "p:wt:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': policy = optarg; break;
		case 'w': wait = true; break;
		case 't': {
			char *end;
			timeout_s = strtol(optarg, &end, 10);
			if (*end || end == optarg || timeout_s <= 0) {
				tool_error("flush: --timeout takes a number of seconds, not '%s'", optarg);
				return EXIT_USAGE;
			}
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		tool_error("flush: unexpected argument '%s'", argv[optind]);
		return EXIT_USAGE;
	}
	struct stg_policy *p;
	struct stg_cache *cache;
	if (tool_open(policy, &p, &cache))
		return 1;
	int status = 0;
	if (!p->has_cluster) {
		tool_error("flush: %s has no [cluster] section: nothing is shipped from this node",
			   p->file);
		status = 1;
		goto out;
	}
	if (!cache) {
		printf("nothing staged on this node\n");
		goto out;
	}
	/* A version whose close returned is shipped, packed in the background
	 * or not. */
	if (tool_settle(p, cache))
		status = 1;
	/* Versions staged before the [cluster] section existed are queued too. */
	size_t added = 0;
	stg_queue_recover(cache, &added);
	size_t n = queued(cache, NULL);
	if (n == (size_t)-1) {
		tool_error("flush: cannot read the queue in '%s/queue'", cache->dir);
		status = 1;
		goto out;
	}
	if (n == 0) {
		printf("everything staged on this node is replicated\n");
		goto out;
	}
	if (tool_start_flusher(p, cache) < 0) {
		status = 1;
		goto out;
	}
	if (!wait) {
		printf("%zu version%s to replicate; the flusher is running\n", n, n == 1 ? "" : "s");
		goto out;
	}
	bool tty = isatty(STDERR_FILENO);
	int64_t deadline = stg_now_ns() + (int64_t)timeout_s * 1000000000;
	size_t first = n;
	while ((n = queued(cache, NULL)) > 0) {
		if (n == (size_t)-1) {
			tool_error("flush: cannot read the queue in '%s/queue'", cache->dir);
			status = 1;
			goto out;
		}
		if (stg_now_ns() >= deadline) {
			if (tty)
				fputc('\n', stderr);
			report_left(cache);
			status = 1;
			goto out;
		}
		if (tty) {
			fprintf(stderr, "\rreplicating: %zu of %zu versions left ", n, first > n ? first : n);
			fflush(stderr);
		}
		/* A flusher that died is replaced; one that exits leaves nothing. */
		tool_start_flusher(p, cache);
		struct timespec ts = {.tv_nsec = 50 * 1000000};
		nanosleep(&ts, NULL);
	}
	if (tty)
		fputc('\n', stderr);
	printf("everything staged on this node is replicated\n");
out:
	stg_cache_free(cache);
	stg_policy_free(p);
	return status;
}
