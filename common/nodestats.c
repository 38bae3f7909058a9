/* SPDX-License-Identifier: MIT */
/* A node's facts: counted from the cache, told by the flusher through
 * flusher.state ("key value" lines, replaced atomically), written out as
 * Prometheus text (docs/METRICS.md). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "catalog.h"
#include "nodestats.h"
#include "queue.h"
#include "util.h"

struct record {
	uint64_t pack, offset;
	uint32_t raw, stored;
};

struct scan {
	struct stg_node_stats *st;
	struct record *rec;
	size_t n, cap;
	int err;
};

static int scan_file(void *arg, const char *path, int filedirfd)
{
	(void)path;
	struct scan *sc = arg;
	uint64_t *v;
	size_t n;
	if (stg_catalog_versions(filedirfd, &v, &n) < 0 || n == 0)
		return 0;
	sc->st->files++;
	sc->st->deleted += stg_catalog_is_deleted(filedirfd);
	for (size_t i = 0; i < n; i++) {
		struct stg_manifest m;
		if (stg_catalog_read(filedirfd, v[i], &m) < 0)
			continue; /* corrupt or gone: `stagehand ls` names it */
		sc->st->versions++;
		sc->st->logical_bytes += m.size;
		for (uint32_t k = 0; k < m.nchunks && sc->err == 0; k++) {
			const struct stg_manifest_entry *e = &m.entries[k];
			if (!e->pack)
				continue; /* a zero chunk: nothing stored */
			if (STG_GROW(sc->rec, sc->cap, sc->n + 1) < 0) {
				sc->err = -ENOMEM;
				break;
			}
			sc->rec[sc->n++] = (struct record){e->pack, e->offset, e->raw_len, e->stored_len};
		}
		stg_manifest_done(&m);
	}
	free(v);
	return sc->err;
}

static int cmp_record(const void *a, const void *b)
{
	const struct record *x = a, *y = b;
	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The age of the oldest queued version, by its commit time. */
static double oldest_queued(struct stg_cache *c, const struct stg_queue_item *items, size_t n)
{
	int64_t oldest = 0;
	for (size_t i = 0; i < n; i++) {
		int dirfd = openat(c->files_fd, items[i].id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dirfd < 0)
			continue;
		struct stg_manifest m;
		if (stg_catalog_read(dirfd, items[i].version, &m) == 0) {
			if (m.commit_ns > 0 && (!oldest || m.commit_ns < oldest))
				oldest = m.commit_ns;
			stg_manifest_done(&m);
		}
		close(dirfd);
	}
	int64_t age = oldest ? stg_now_ns() - oldest : 0;
	return age > 0 ? (double)age / 1e9 : 0;
}

int stg_node_stats_scan(struct stg_cache *c, uint64_t capacity, struct stg_node_stats *st)
{
	snprintf(st->cache_dir, sizeof(st->cache_dir), "%s", c->dir);
	st->files = st->deleted = st->versions = st->logical_bytes = 0;
	st->chunks = st->chunk_raw_bytes = st->chunk_stored_bytes = 0;
	struct scan sc = {.st = st};
	int r = stg_catalog_foreach(c, scan_file, &sc);
	if (r == 0 && sc.err)
		r = sc.err;
	if (r == 0) {
		/* A chunk named by several versions (deduplicated) counts once. */
		qsort(sc.rec, sc.n, sizeof(*sc.rec), cmp_record);
		for (size_t i = 0; i < sc.n; i++) {
			if (i && cmp_record(&sc.rec[i - 1], &sc.rec[i]) == 0)
				continue;
			st->chunks++;
			st->chunk_raw_bytes += sc.rec[i].raw;
			st->chunk_stored_bytes += sc.rec[i].stored;
		}
	}
	free(sc.rec);
	if (r < 0)
		return r;
	stg_cache_count_packs(c, &st->packs, &st->pack_bytes);
	st->capacity = capacity;
	struct statvfs vfs;
	st->disk_free_bytes = fstatvfs(c->dirfd, &vfs) == 0 ? (uint64_t)vfs.f_bavail * vfs.f_frsize
							    : 0;
	struct stg_queue_item *items;
	size_t n = 0;
	if (stg_queue_list(c, &items, &n) == 0) {
		st->queued = n;
		st->oldest_queued_s = oldest_queued(c, items, n);
		free(items);
	}
	return 0;
}

int stg_node_stats_write_state(struct stg_cache *c, const struct stg_node_stats *st)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return -errno;
	fprintf(f, "pid %ld\n", st->flusher_pid);
	fprintf(f, "updated_ns %lld\n", (long long)stg_now_ns());
	fprintf(f, "activity %s\n", st->activity);
	fprintf(f, "queued %" PRIu64 "\n", st->queued);
	fprintf(f, "versions_shipped %" PRIu64 "\n", st->versions_shipped);
	fprintf(f, "versions_failed %" PRIu64 "\n", st->versions_failed);
	fprintf(f, "chunks_sent %" PRIu64 "\n", st->chunks_sent);
	fprintf(f, "chunks_present %" PRIu64 "\n", st->chunks_present);
	fprintf(f, "bytes_sent %" PRIu64 "\n", st->bytes_sent);
	for (size_t i = 0; i < st->nservers; i++) {
		const struct stg_node_server *s = &st->servers[i];
		/* The error last: free text to the end of the line. */
		fprintf(f, "server %s %s %s %" PRIu64 " %" PRIu64 " %.6f %s\n", s->name, s->state,
			s->transport, s->errors, s->ships, s->ship_seconds,
			s->last_error[0] ? s->last_error : "-");
	}
	if (fclose(f) != 0) {
		free(buf);
		return -ENOMEM;
	}
	int r = stg_write_file_atomic(c->dirfd, "flusher.state", buf, len, STG_WRITE_CACHED);
	free(buf);
	return r;
}

int stg_node_stats_read_state(struct stg_cache *c, struct stg_node_stats *st)
{
	uint8_t *data;
	size_t len;
	int r = stg_read_file(c->dirfd, "flusher.state", 65536, &data, &len);
	if (r < 0)
		return r;
	char *text = strndup((char *)data, len);
	free(data);
	if (!text)
		return -ENOMEM;
	st->nservers = 0;
	char *save;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strchr(line, ' ');
		if (!sp)
			continue;
		*sp = '\0';
		const char *key = line, *val = sp + 1;
		if (strcmp(key, "pid") == 0)
			st->flusher_pid = strtol(val, NULL, 10);
		else if (strcmp(key, "activity") == 0)
			snprintf(st->activity, sizeof(st->activity), "%s", val);
		else if (strcmp(key, "versions_shipped") == 0)
			st->versions_shipped = strtoull(val, NULL, 10);
		else if (strcmp(key, "versions_failed") == 0)
			st->versions_failed = strtoull(val, NULL, 10);
		else if (strcmp(key, "chunks_sent") == 0)
			st->chunks_sent = strtoull(val, NULL, 10);
		else if (strcmp(key, "chunks_present") == 0)
			st->chunks_present = strtoull(val, NULL, 10);
		else if (strcmp(key, "bytes_sent") == 0)
			st->bytes_sent = strtoull(val, NULL, 10);
		else if (strcmp(key, "server") == 0 && st->nservers < STG_CLUSTER_MAX_SERVERS) {
			struct stg_node_server *s = &st->servers[st->nservers];
			int at = 0;
			memset(s, 0, sizeof(*s));
			if (sscanf(val, "%255s %15s %7s %" SCNu64 " %" SCNu64 " %lf %n", s->name,
				   s->state, s->transport, &s->errors, &s->ships, &s->ship_seconds,
				   &at) < 6 || !at)
				continue; /* not a line of this format */
			if (strcmp(val + at, "-") != 0)
				snprintf(s->last_error, sizeof(s->last_error), "%s", val + at);
			st->nservers++;
		}
	}
	free(text);
	return 0;
}

/* Prometheus text: a label value with \, " and newlines escaped. */
static void label(FILE *out, const char *s)
{
	for (; *s; s++) {
		if (*s == '\n') {
			fputs("\\n", out);
			continue;
		}
		if (*s == '\\' || *s == '"')
			fputc('\\', out);
		fputc(*s, out);
	}
}

static void head(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(FILE *out, const struct stg_node_stats *st, const char *name,
		   const char *server, double v)
{
	fprintf(out, "%s{cache=\"", name);
	label(out, st->cache_dir);
	if (server) {
		fputs("\",server=\"", out);
		label(out, server);
	}
	fprintf(out, "\"} %.17g\n", v);
}

void stg_node_stats_prometheus(const struct stg_node_stats *st, FILE *out)
{
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} u64s[] = {
#define U(f, n, t, h) {"stagehand_" n, t, h, offsetof(struct stg_node_stats, f)}
		U(files, "cache_files", "gauge", "Paths with a version in the node cache."),
		U(versions, "cache_versions", "gauge", "Versions in the node cache."),
		U(logical_bytes, "cache_logical_bytes", "gauge",
		  "Bytes of every version in the cache, as the application wrote them."),
		U(chunks, "cache_chunks", "gauge", "Distinct chunks those versions name."),
		U(chunk_raw_bytes, "cache_chunk_raw_bytes", "gauge",
		  "Bytes of those chunks before compression."),
		U(chunk_stored_bytes, "cache_chunk_stored_bytes", "gauge",
		  "Bytes of those chunks as stored."),
		U(pack_bytes, "cache_pack_bytes", "gauge", "Bytes of the cache's pack files."),
		U(capacity, "cache_capacity_bytes", "gauge", "The cache's capacity (0: none set)."),
		U(disk_free_bytes, "cache_disk_free_bytes", "gauge",
		  "Free bytes on the cache's file system."),
		U(queued, "queue_versions", "gauge", "Versions still to replicate."),
		U(versions_shipped, "flusher_versions_shipped_total", "counter",
		  "Versions the flusher replicated since it started."),
		U(versions_failed, "flusher_versions_failed_total", "counter",
		  "Attempts to ship a version that failed."),
		U(chunks_sent, "flusher_chunks_sent_total", "counter", "Chunks sent to servers."),
		U(chunks_present, "flusher_chunks_present_total", "counter",
		  "Chunks a server held already (deduplicated there)."),
		U(bytes_sent, "flusher_bytes_sent_total", "counter", "Bytes sent to servers."),
#undef U
	};
	for (size_t i = 0; i < sizeof(u64s) / sizeof(u64s[0]); i++) {
		head(out, u64s[i].name, u64s[i].type, u64s[i].help);
		sample(out, st, u64s[i].name, NULL,
		       (double)*(const uint64_t *)((const char *)st + u64s[i].off));
	}
	head(out, "stagehand_queue_oldest_age_seconds", "gauge",
	     "Age of the oldest version still to replicate (0: none).");
	sample(out, st, "stagehand_queue_oldest_age_seconds", NULL, st->oldest_queued_s);
	head(out, "stagehand_cache_dedup_ratio", "gauge",
	     "Bytes of the versions held per byte of the distinct chunks they name.");
	sample(out, st, "stagehand_cache_dedup_ratio", NULL,
	       st->chunk_raw_bytes ? (double)st->logical_bytes / (double)st->chunk_raw_bytes : 1);
	head(out, "stagehand_cache_compression_ratio", "gauge",
	     "Bytes of the distinct chunks per byte stored.");
	sample(out, st, "stagehand_cache_compression_ratio", NULL,
	       st->chunk_stored_bytes ? (double)st->chunk_raw_bytes / (double)st->chunk_stored_bytes
				      : 1);
	head(out, "stagehand_flusher_up", "gauge", "Whether the node's flusher runs.");
	sample(out, st, "stagehand_flusher_up", NULL, st->flusher_running);
	if (!st->nservers)
		return;
	head(out, "stagehand_flusher_server_up", "gauge",
	     "Whether the flusher takes the server for available.");
	for (size_t i = 0; i < st->nservers; i++)
		sample(out, st, "stagehand_flusher_server_up", st->servers[i].name,
		       strcmp(st->servers[i].state, "down") != 0);
	head(out, "stagehand_flusher_server_errors_total", "counter",
	     "Failures talking to the server.");
	for (size_t i = 0; i < st->nservers; i++)
		sample(out, st, "stagehand_flusher_server_errors_total", st->servers[i].name,
		       (double)st->servers[i].errors);
	head(out, "stagehand_flusher_server_ship_seconds", "summary",
	     "Time to ship a version to the server.");
	for (size_t i = 0; i < st->nservers; i++) {
		sample(out, st, "stagehand_flusher_server_ship_seconds_sum", st->servers[i].name,
		       st->servers[i].ship_seconds);
		sample(out, st, "stagehand_flusher_server_ship_seconds_count", st->servers[i].name,
		       (double)st->servers[i].ships);
	}
}
