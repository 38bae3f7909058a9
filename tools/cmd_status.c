/* SPDX-License-Identifier: MIT */
/* stagehand status: the node cache, what it holds, what is in flight. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "catalog.h"
#include "queue.h"
#include "remote.h"
#include "util.h"
#include "tool.h"
#include "version.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: stagehand status [--policy F]\n"
		   "\n"
		   "Shows the node cache: files and versions staged, space used by chunk\n"
		   "objects against the capacity, writes in progress, and the servers.\n");
}

struct totals {
	uint64_t files, deleted, versions, logical;
};

static int count_file(void *arg, const char *path, int filedirfd)
{
	(void)path;
	struct totals *t = arg;
	uint64_t *v;
	size_t n;
	if (stg_catalog_versions(filedirfd, &v, &n) < 0)
		return 0;
	if (n) {
		t->files++;
		t->deleted += stg_catalog_is_deleted(filedirfd);
		t->versions += n;
		struct stg_manifest m;
		if (stg_catalog_read(filedirfd, v[n - 1], &m) == 0) {
			t->logical += m.size;
			stg_manifest_done(&m);
		}
	}
	free(v);
	return 0;
}

/* What is still to ship, and what the flusher says of itself. */
static void show_flusher(struct stg_cache *cache)
{
	struct stg_queue_item *items;
	size_t n = 0;
	if (stg_queue_list(cache, &items, &n) < 0)
		n = 0;
	long pid = 0;
	bool running = tool_flusher_running(cache, &pid);
	printf("queue:    %zu version%s still to replicate\n", n, n == 1 ? "" : "s");
	for (size_t i = 0; i < n && i < 10; i++) {
		char path[4096], name[TOOL_ESCAPED_SIZE(sizeof(path))];
		stg_queue_item_path(cache, &items[i], path, sizeof(path));
		printf("          %s version %" PRIu64 "\n", tool_escape(path, name, sizeof(name)),
		       stg_version_seq(items[i].version));
	}
	if (n > 10)
		printf("          ... and %zu more\n", n - 10);
	if (n)
		free(items);
	if (running)
		printf("flusher:  running (pid %ld)\n", pid);
	else
		printf("flusher:  not running%s\n", n ? " (it starts with the next commit, or "
							"run 'stagehand flush')" : "");
	uint8_t *state;
	size_t len;
	if (!running || stg_read_file(cache->dirfd, "flusher.state", 65536, &state, &len) < 0)
		return;
	/* Its own view of each server: "server NAME STATE TRANSPORT ERROR". */
	char *text = strndup((char *)state, len);
	free(state);
	for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "activity ", 9) == 0)
			printf("          %s\n", line + 9);
		else if (strncmp(line, "bytes_sent ", 11) == 0)
			printf("          %s bytes sent since it started\n", line + 11);
		else if (strncmp(line, "server ", 7) == 0)
			printf("          %s\n", line);
	}
	free(text);
}

/* Asks every server for its state. */
static void show_servers(const struct stg_policy *p)
{
	printf("servers:  %zu, replicas = %u\n", p->nservers, p->replicas);
	struct remote rm;
	if (remote_init(&rm, p) < 0)
		return;
	struct remote_session s;
	remote_session_init(&s, &rm);
	for (size_t i = 0; i < p->nservers; i++) {
		/* Silence: the line below says what is wrong. */
		atomic_store(&rm.reported[i], true);
		struct stg_conn *c = remote_conn(&s, i);
		struct stg_msg req = {.type = STG_MSG_STAT}, rep;
		int r = c ? stg_conn_call(c, &req, STG_MSG_STAT_REPLY, &rep) : s.err[i];
		if (r < 0) {
			printf("          %-24s down: %s\n", p->server_list[i],
			       s.conns[i].error[0] ? s.conns[i].error : strerror(-r));
			continue;
		}
		char a[32], b[32];
		printf("          %-24s up %" PRIu64 "s: %" PRIu64 " chunks, %s in %" PRIu64
		       " segments, index %s, over %s%s%s%s\n",
		       p->server_list[i], rep.stat_reply.uptime_s, rep.stat_reply.chunks,
		       tool_human(rep.stat_reply.segment_bytes, a, sizeof(a)),
		       rep.stat_reply.segments, tool_human(rep.stat_reply.index_bytes, b, sizeof(b)),
		       stg_conn_transport(c), s.why_not_rdma[i][0] ? " (not rdma: " : "",
		       s.why_not_rdma[i], s.why_not_rdma[i][0] ? ")" : "");
	}
	remote_session_done(&s);
}

int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *policy = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': policy = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		tool_error("status: unexpected argument '%s'", argv[optind]);
		return EXIT_USAGE;
	}
	struct stg_policy *p;
	struct stg_cache *cache;
	if (tool_open(policy, &p, &cache))
		return 1;
	char a[32], b[32], d[32];
	printf("policy:   %s (%zu path rule%s)\n", p->file, p->nrules, p->nrules == 1 ? "" : "s");
	printf("cache:    %s\n", p->cache_dir);
	if (!cache) {
		printf("          empty: nothing staged yet\n");
	} else {
		struct totals t = {0};
		stg_catalog_foreach(cache, count_file, &t);
		uint64_t npacks, bytes;
		stg_cache_count_packs(cache, &npacks, &bytes);
		printf("files:    %" PRIu64 " (%" PRIu64 " deleted by the application), %" PRIu64
		       " versions\n",
		       t.files, t.deleted, t.versions);
		printf("stored:   %s in %" PRIu64 " packs for %s of newest versions\n",
		       tool_human(bytes, a, sizeof(a)), npacks, tool_human(t.logical, b, sizeof(b)));
		struct statvfs vfs;
		if (p->capacity)
			printf("capacity: %s, %.1f%% used (%s accounted)\n",
			       tool_human(p->capacity, d, sizeof(d)),
			       100.0 * (double)stg_cache_usage(cache) / (double)p->capacity,
			       tool_human(stg_cache_usage(cache), b, sizeof(b)));
		if (fstatvfs(cache->dirfd, &vfs) == 0)
			printf("disk:     %s free\n",
			       tool_human((uint64_t)vfs.f_bavail * vfs.f_frsize, d, sizeof(d)));
	}
	if (p->has_cluster) {
		if (cache)
			show_flusher(cache);
		show_servers(p);
	} else {
		printf("servers:  none configured ([cluster]): staging is node-local\n");
	}
	stg_cache_free(cache);
	stg_policy_free(p);
	return 0;
}
