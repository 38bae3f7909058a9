/* SPDX-License-Identifier: MIT */
/* What the flusher tells of itself: flusher.state in the cache, for
 * `stagehand status` and `stagehand flush`, and with metrics_file in the
 * policy, Prometheus metrics for node_exporter's textfile collector
 * (docs/METRICS.md). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "log.h"
#include "nodestats.h"
#include "util.h"

/* The metrics count every manifest of the cache: not after each version. */
#define METRICS_INTERVAL_NS (15 * 1000000000ll)

static void fill(struct flusher *fl, struct stg_node_stats *st, size_t queued,
		 const char *activity, bool running)
{
	st->flusher_running = running;
	st->flusher_pid = getpid();
	snprintf(st->activity, sizeof(st->activity), "%s", activity);
	st->queued = queued;
	st->versions_shipped = fl->versions_shipped;
	st->versions_failed = fl->versions_failed;
	int64_t now = stg_now_ns();
	st->nservers = fl->nservers < STG_CLUSTER_MAX_SERVERS ? fl->nservers
							      : STG_CLUSTER_MAX_SERVERS;
	for (size_t i = 0; i < st->nservers; i++) {
		const struct server *s = &fl->servers[i];
		struct stg_node_server *o = &st->servers[i];
		st->chunks_sent += s->stats.chunks_sent;
		st->chunks_present += s->stats.chunks_present;
		st->bytes_sent += s->stats.bytes_sent;
		snprintf(o->name, sizeof(o->name), "%s", s->name);
		snprintf(o->state, sizeof(o->state), "%s",
			 !server_available(s, now) ? "down" : s->connected ? "connected" : "idle");
		snprintf(o->transport, sizeof(o->transport), "%s",
			 s->connected ? stg_conn_transport(&s->conn) : "-");
		o->errors = s->errors;
		o->ships = s->ships;
		o->ship_seconds = (double)s->ship_ns / 1e9;
		snprintf(o->last_error, sizeof(o->last_error), "%s%s%s%s", s->last_error,
			 s->connected && s->why_not_rdma[0] ? " (not rdma: " : "",
			 s->connected ? s->why_not_rdma : "",
			 s->connected && s->why_not_rdma[0] ? ")" : "");
	}
}

/* The metrics file, replaced atomically (the collector never reads half). */
static void metrics_write(struct flusher *fl, struct stg_node_stats *st)
{
	const char *file = fl->policy->metrics_file;
	int r = stg_node_stats_scan(fl->cache, fl->policy->capacity, st);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = r == 0 ? open_memstream(&buf, &len) : NULL;
	if (r == 0 && !f)
		r = -errno;
	if (f) {
		stg_node_stats_prometheus(st, f);
		if (fclose(f) != 0)
			r = -ENOMEM;
	}
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", file);
	*strrchr(dir, '/') = '\0';
	int dirfd = r == 0 ? open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (r == 0 && dirfd < 0)
		r = -errno;
	if (r == 0)
		r = stg_write_file_atomic(dirfd, strrchr(file, '/') + 1, buf, len, STG_WRITE_CACHED);
	if (dirfd >= 0)
		close(dirfd);
	free(buf);
	/* Said once, not at every version. */
	if (r < 0 && !fl->metrics_failed)
		stg_log_errno(STG_LOG_WARN, r, "cannot write the metrics to '%s'", file);
	fl->metrics_failed = r < 0;
	fl->metrics_ns = stg_now_ns();
}

static void write_all(struct flusher *fl, size_t queued, const char *activity, bool running)
{
	struct stg_node_stats *st = calloc(1, sizeof(*st));
	if (!st)
		return;
	fill(fl, st, queued, activity, running);
	stg_node_stats_write_state(fl->cache, st);
	/* Every interval, and at once when the queue was emptied or the
	 * flusher leaves. */
	bool emptied = !queued && fl->versions_shipped != fl->metrics_shipped;
	if (fl->policy->metrics_file && (emptied || !running ||
					 stg_now_ns() - fl->metrics_ns >= METRICS_INTERVAL_NS)) {
		metrics_write(fl, st);
		fl->metrics_shipped = fl->versions_shipped;
	}
	free(st);
}

void state_write(struct flusher *fl, size_t queued, const char *activity)
{
	write_all(fl, queued, activity, true);
}

void state_leave(struct flusher *fl)
{
	if (fl->policy->metrics_file)
		write_all(fl, 0, "stopped", false);
}
