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
#include "nodestats.h"
#include "queue.h"
#include "remote.h"
#include "util.h"
#include "tool.h"
#include "version.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: stagehand status [--policy F] [--json] [--allow-foreign-cache]\n"
		   "\n"
		   "Shows the node cache: files and versions staged, space used by chunk\n"
		   "objects against the capacity, how much deduplication and compression\n"
		   "saved, what is still to replicate and how old the oldest of it is, the\n"
		   "flusher, and each server's state.\n"
		   "\n"
		   "  --policy F  the policy file (default: $STAGEHAND_POLICY, ./stagehand.conf,\n"
		   "              /etc/stagehand/policy.conf)\n"
		   "  --json      the same facts as one JSON object, for scripts\n"
		   "  --allow-foreign-cache\n"
		   "              use a cache that belongs to another user than you or root, or\n"
		   "              that others may write (refused by default: they decide what\n"
		   "              it holds)\n"
		   "              (docs/METRICS.md)\n");
}

/* A server's answer to STAT, or why there is none. */
struct server_stat {
	bool up;
	char error[512];
	struct stg_msg_stat_reply rep;
	char transport[8];
	char why_not_rdma[200];
};

/* Asks every server for its state. */
static void stat_servers(const struct stg_policy *p, struct server_stat *out)
{
	struct remote rm;
	if (remote_init(&rm, p) < 0) {
		for (size_t i = 0; i < p->nservers; i++)
			snprintf(out[i].error, sizeof(out[i].error), "cannot load the secret");
		return;
	}
	struct remote_session s;
	remote_session_init(&s, &rm);
	for (size_t i = 0; i < p->nservers; i++) {
		/* Silence: the caller says what is wrong. */
		atomic_store(&rm.reported[i], true);
		struct stg_conn *c = remote_conn(&s, i);
		struct stg_msg req = {.type = STG_MSG_STAT}, rep;
		int r = c ? stg_conn_call(c, &req, STG_MSG_STAT_REPLY, &rep) : s.err[i];
		if (r < 0) {
			snprintf(out[i].error, sizeof(out[i].error), "%s",
				 s.conns[i].error[0] ? s.conns[i].error : strerror(-r));
			continue;
		}
		out[i].up = true;
		out[i].rep = rep.stat_reply;
		snprintf(out[i].transport, sizeof(out[i].transport), "%s", stg_conn_transport(c));
		snprintf(out[i].why_not_rdma, sizeof(out[i].why_not_rdma), "%s", s.why_not_rdma[i]);
	}
	remote_session_done(&s);
}

static void print_text(const struct stg_policy *p, const struct stg_node_stats *st, bool cached,
		       const struct server_stat *srv)
{
	char a[32], b[32], d[32];
	printf("policy:   %s (%zu path rule%s)\n", p->file, p->nrules, p->nrules == 1 ? "" : "s");
	printf("cache:    %s\n", p->cache_dir);
	if (!cached) {
		printf("          empty: nothing staged yet\n");
	} else {
		printf("files:    %" PRIu64 " (%" PRIu64 " deleted by the application), %" PRIu64
		       " versions\n",
		       st->files, st->deleted, st->versions);
		printf("stored:   %s in %" PRIu64 " packs for %s of versions\n",
		       tool_human(st->pack_bytes, a, sizeof(a)), st->packs,
		       tool_human(st->logical_bytes, b, sizeof(b)));
		if (st->chunk_raw_bytes)
			printf("saved:    %.2fx by deduplication, %.2fx by compression\n",
			       (double)st->logical_bytes / (double)st->chunk_raw_bytes,
			       st->chunk_stored_bytes ? (double)st->chunk_raw_bytes /
							    (double)st->chunk_stored_bytes
						      : 1.0);
		if (st->capacity)
			printf("capacity: %s, %.1f%% used (%s accounted)\n",
			       tool_human(st->capacity, d, sizeof(d)),
			       100.0 * (double)st->usage / (double)st->capacity,
			       tool_human(st->usage, b, sizeof(b)));
		printf("disk:     %s free\n", tool_human(st->disk_free_bytes, d, sizeof(d)));
	}
	if (!p->has_cluster) {
		printf("servers:  none configured ([cluster]): staging is node-local\n");
		return;
	}
	if (cached) {
		printf("queue:    %" PRIu64 " version%s still to replicate", st->queued,
		       st->queued == 1 ? "" : "s");
		if (st->queued)
			printf(", the oldest committed %.0fs ago", st->oldest_queued_s);
		printf("\n");
		if (st->flusher_running)
			printf("flusher:  running (pid %ld)\n          %s\n"
			       "          %" PRIu64 " bytes sent since it started\n",
			       st->flusher_pid, st->activity, st->bytes_sent);
		else
			printf("flusher:  not running%s\n",
			       st->queued ? " (it starts with the next commit, or run "
					    "'stagehand flush')"
					  : "");
		for (size_t i = 0; st->flusher_running && i < st->nservers; i++)
			printf("          server %s %s %s %s\n", st->servers[i].name,
			       st->servers[i].state, st->servers[i].transport,
			       st->servers[i].last_error[0] ? st->servers[i].last_error : "-");
	}
	printf("servers:  %zu, replicas = %u\n", p->nservers, p->replicas);
	for (size_t i = 0; i < p->nservers; i++) {
		if (!srv[i].up) {
			printf("          %-24s down: %s\n", p->server_list[i], srv[i].error);
			continue;
		}
		const struct stg_msg_stat_reply *r = &srv[i].rep;
		printf("          %-24s up %" PRIu64 "s: %" PRIu64 " chunks, %s in %" PRIu64
		       " segments, index %s, over %s%s%s%s\n",
		       p->server_list[i], r->uptime_s, r->chunks,
		       tool_human(r->segment_bytes, a, sizeof(a)), r->segments,
		       tool_human(r->index_bytes, b, sizeof(b)), srv[i].transport,
		       srv[i].why_not_rdma[0] ? " (not rdma: " : "", srv[i].why_not_rdma,
		       srv[i].why_not_rdma[0] ? ")" : "");
	}
}

/* A JSON string. */
static void json_str(const char *s)
{
	putchar('"');
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\')
			printf("\\%c", *c);
		else if (*c < 0x20 || *c == 0x7f)
			printf("\\u%04x", *c);
		else
			putchar(*c);
	}
	putchar('"');
}

static void print_json(const struct stg_policy *p, const struct stg_node_stats *st, bool cached,
		       const struct server_stat *srv)
{
	printf("{\"policy\": ");
	json_str(p->file);
	printf(", \"cache\": {\"dir\": ");
	json_str(p->cache_dir);
	printf(", \"exists\": %s", cached ? "true" : "false");
	printf(", \"files\": %" PRIu64 ", \"deleted\": %" PRIu64 ", \"versions\": %" PRIu64
	       ", \"logical_bytes\": %" PRIu64 ", \"chunks\": %" PRIu64
	       ", \"chunk_raw_bytes\": %" PRIu64 ", \"chunk_stored_bytes\": %" PRIu64
	       ", \"packs\": %" PRIu64 ", \"pack_bytes\": %" PRIu64 ", \"usage_bytes\": %" PRIu64
	       ", \"capacity_bytes\": %" PRIu64 ", \"disk_free_bytes\": %" PRIu64 "}",
	       st->files, st->deleted, st->versions, st->logical_bytes, st->chunks,
	       st->chunk_raw_bytes, st->chunk_stored_bytes, st->packs, st->pack_bytes, st->usage,
	       st->capacity, st->disk_free_bytes);
	printf(", \"queue\": {\"versions\": %" PRIu64 ", \"oldest_age_seconds\": %.3f}",
	       st->queued, st->oldest_queued_s);
	printf(", \"flusher\": {\"running\": %s", st->flusher_running ? "true" : "false");
	if (st->flusher_running) {
		printf(", \"pid\": %ld, \"activity\": ", st->flusher_pid);
		json_str(st->activity);
		printf(", \"versions_shipped\": %" PRIu64 ", \"versions_failed\": %" PRIu64
		       ", \"chunks_sent\": %" PRIu64 ", \"chunks_present\": %" PRIu64
		       ", \"bytes_sent\": %" PRIu64 ", \"servers\": [",
		       st->versions_shipped, st->versions_failed, st->chunks_sent,
		       st->chunks_present, st->bytes_sent);
		for (size_t i = 0; i < st->nservers; i++) {
			const struct stg_node_server *s = &st->servers[i];
			printf("%s{\"name\": ", i ? ", " : "");
			json_str(s->name);
			printf(", \"state\": ");
			json_str(s->state);
			printf(", \"transport\": ");
			json_str(s->transport);
			printf(", \"errors\": %" PRIu64 ", \"ships\": %" PRIu64
			       ", \"ship_seconds\": %.6f, \"last_error\": ",
			       s->errors, s->ships, s->ship_seconds);
			json_str(s->last_error);
			printf("}");
		}
		printf("]");
	}
	printf("}, \"servers\": [");
	for (size_t i = 0; p->has_cluster && i < p->nservers; i++) {
		printf("%s{\"address\": ", i ? ", " : "");
		json_str(p->server_list[i]);
		printf(", \"up\": %s", srv[i].up ? "true" : "false");
		if (!srv[i].up) {
			printf(", \"error\": ");
			json_str(srv[i].error);
		} else {
			const struct stg_msg_stat_reply *r = &srv[i].rep;
			printf(", \"uptime_seconds\": %" PRIu64 ", \"chunks\": %" PRIu64
			       ", \"segment_bytes\": %" PRIu64 ", \"segments\": %" PRIu64
			       ", \"index_bytes\": %" PRIu64 ", \"transport\": ",
			       r->uptime_s, r->chunks, r->segment_bytes, r->segments, r->index_bytes);
			json_str(srv[i].transport);
		}
		printf("}");
	}
	printf("]}\n");
}

int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"allow-foreign-cache", no_argument, NULL, 'F'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *policy = NULL;
	bool json = false;
	int c;
	tool_foreign_cache = TOOL_FOREIGN_REFUSE_FLAG;
	while ((c = getopt_long(argc, argv, "p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': policy = optarg; break;
		case 'F': tool_foreign_cache = TOOL_FOREIGN_USE; break;
		case 'j': json = true; break;
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
	int unsettled = tool_settle(p, cache);
	struct stg_node_stats *st = calloc(1, sizeof(*st));
	struct server_stat *srv = calloc(p->nservers + 1, sizeof(*srv));
	int r = st && srv ? 0 : -ENOMEM;
	if (r == 0 && cache) {
		r = stg_node_stats_scan(cache, p->capacity, st);
		st->usage = stg_cache_usage(cache);
		st->flusher_running = tool_flusher_running(cache, NULL);
		if (r == 0 && st->flusher_running && stg_node_stats_read_state(cache, st) < 0)
			st->flusher_running = false; /* (just started: nothing to tell yet) */
	}
	if (r < 0) {
		tool_error("status: cannot read the cache '%s': %s", p->cache_dir, strerror(-r));
	} else {
		if (p->has_cluster)
			stat_servers(p, srv);
		if (json)
			print_json(p, st, cache != NULL, srv);
		else
			print_text(p, st, cache != NULL, srv);
	}
	free(srv);
	free(st);
	stg_cache_free(cache);
	stg_policy_free(p);
	return r < 0 || unsettled ? 1 : 0;
}
