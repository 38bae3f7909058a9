/* SPDX-License-Identifier: MIT */
/* The server's Prometheus metrics, for node_exporter's textfile collector
 * (docs/METRICS.md): a file replaced atomically every --metrics-interval
 * seconds, and once more when the server stops. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "log.h"
#include "util.h"

static void metric(FILE *f, const char *name, const char *type, const char *help, double v)
{
	fprintf(f, "# HELP stagehand_server_%s %s\n# TYPE stagehand_server_%s %s\n", name, help,
		name, type);
	fprintf(f, "stagehand_server_%s %.17g\n", name, v);
}

static int render(struct server *srv, bool up, char **ret, size_t *ret_len)
{
	FILE *f = open_memstream(ret, ret_len);
	if (!f)
		return -errno;
	struct server_counters *k = &srv->counters;
	struct stg_store_stats st;
	stg_store_stats(srv->store, &st);
	metric(f, "up", "gauge", "Whether the server runs.", up);
	metric(f, "uptime_seconds", "gauge", "Seconds since the server started.",
	       (double)(stg_now_ns() - srv->started_ns) / 1e9);
	metric(f, "connections", "gauge", "Connections logged in or logging in.",
	       admit_connections(&srv->admit));
	metric(f, "worker_threads", "gauge", "Threads that serve requests (one per core, more "
	       "while all are blocked).", loops_threads(srv->loops));
	metric(f, "requests_total", "counter", "Requests served.", (double)k->requests);
	metric(f, "request_errors_total", "counter", "Requests answered with an error.",
	       (double)k->request_errors);
	fprintf(f, "# HELP stagehand_server_request_seconds Time to serve a request.\n"
		   "# TYPE stagehand_server_request_seconds summary\n"
		   "stagehand_server_request_seconds_sum %.9f\n"
		   "stagehand_server_request_seconds_count %.17g\n",
		(double)k->request_ns / 1e9, (double)k->requests);
	metric(f, "chunks_received_total", "counter", "Chunks received from flushers.",
	       (double)k->chunks_in);
	metric(f, "chunk_bytes_received_total", "counter", "Bytes of the chunks received.",
	       (double)k->chunk_bytes_in);
	metric(f, "chunks_held_already_total", "counter",
	       "Chunks a flusher offered that the store held (deduplicated here).",
	       (double)k->chunks_held);
	metric(f, "manifests_stored_total", "counter", "Versions stored.",
	       (double)k->manifests_in);
	metric(f, "chunks_served_total", "counter", "Chunks served for restores.",
	       (double)k->chunks_out);
	metric(f, "chunk_bytes_served_total", "counter", "Bytes of the chunks served.",
	       (double)k->chunk_bytes_out);
	metric(f, "collections_total", "counter", "Collection passes completed.",
	       (double)k->collections);
	metric(f, "collection_seconds", "gauge", "Time the last collection pass took.",
	       (double)k->collection_ns / 1e9);
	metric(f, "collection_manifests", "gauge", "Manifests the last collection pass read.",
	       (double)k->collection_manifests);
	metric(f, "collection_candidates", "gauge",
	       "Chunks without references the last collection pass looked at.",
	       (double)k->collection_candidates);
	metric(f, "store_chunks", "gauge", "Chunks in the store.", (double)st.chunks);
	metric(f, "store_chunk_bytes", "gauge", "Bytes of the chunks in the store.",
	       (double)st.chunk_bytes);
	metric(f, "store_segments", "gauge", "Segment files of the store.", (double)st.segments);
	metric(f, "store_segment_bytes", "gauge", "Bytes of the segment files.",
	       (double)st.segment_bytes);
	metric(f, "store_index_bytes", "gauge", "Memory of the store's index.",
	       (double)st.index_bytes);
	metric(f, "store_recovery_scanned_bytes", "gauge",
	       "Bytes of segments the start scanned (no hint served).",
	       (double)st.recovery_scanned_bytes);
	metric(f, "store_recovery_hinted_records", "gauge",
	       "Records the start took from hint files.", (double)st.recovery_hinted_records);
	metric(f, "scrub_bytes_total", "counter", "Bytes of records the scrub verified.",
	       (double)st.scrub_bytes);
	metric(f, "scrub_records_total", "counter", "Records the scrub verified.",
	       (double)st.scrub_records);
	metric(f, "scrub_damaged_total", "counter",
	       "Records the scrub found damaged (forgotten; clients send them again).",
	       (double)st.scrub_damaged);
	metric(f, "scrub_passes_total", "counter",
	       "Passes of the scrub over all sealed segments.", (double)st.scrub_passes);
	metric(f, "store_capacity_bytes", "gauge", "The store's capacity (0: the disk's).",
	       (double)srv->capacity);
	struct stg_files_stats fs;
	stg_files_stats(srv->files, &fs);
	metric(f, "paths", "gauge", "Paths of all users the server holds versions of.",
	       (double)fs.paths);
	metric(f, "list_entries_read_total", "counter",
	       "Paths whose versions listings read (only those under each listing's prefix).",
	       (double)fs.entries_listed);
	metric(f, "start_paths_read", "gauge",
	       "Path files the start read (for the users whose path index file it could not take).",
	       (double)fs.paths_read_at_open);
	return fclose(f) == 0 ? 0 : -ENOMEM;
}

static int write_metrics(struct server *srv, bool up)
{
	char *buf = NULL;
	size_t len = 0;
	int r = render(srv, up, &buf, &len);
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", srv->metrics_file);
	char *slash = strrchr(dir, '/');
	const char *name = srv->metrics_file;
	if (slash) {
		*slash = '\0';
		name = slash + 1;
	}
	int dirfd = r < 0 ? -1 : open(!slash ? "." : dir[0] ? dir : "/",
				       O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r == 0 && dirfd < 0)
		r = -errno;
	if (r == 0)
		r = stg_write_file_atomic(dirfd, name, buf, len, STG_WRITE_CACHED);
	if (dirfd >= 0)
		close(dirfd);
	free(buf);
	return r;
}

void *server_metrics(void *arg)
{
	struct server *srv = arg;
	bool failed = false;
	pthread_mutex_lock(&srv->gc_mutex);
	for (;;) {
		bool stopping = srv->stopping;
		pthread_mutex_unlock(&srv->gc_mutex);
		int r = write_metrics(srv, !stopping);
		/* Said once, and again once it works. */
		if (r < 0 && !failed)
			stg_log_errno(STG_LOG_WARN, r, "cannot write the metrics to '%s'",
				      srv->metrics_file);
		else if (r == 0 && failed)
			stg_log(STG_LOG_INFO, "writing the metrics to '%s' again", srv->metrics_file);
		failed = r < 0;
		pthread_mutex_lock(&srv->gc_mutex);
		if (stopping)
			break;
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += srv->metrics_interval_s;
		while (!srv->stopping &&
		       pthread_cond_timedwait(&srv->metrics_cond, &srv->gc_mutex, &until) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&srv->gc_mutex);
	return NULL;
}
