/* SPDX-License-Identifier: MIT */
/* stagehand ls: lists the staged versions of captured files. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog.h"
#include "queue.h"
#include "remote.h"
#include "tool.h"
#include "version.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: stagehand ls [--policy F] [PATH|PREFIX]\n"
		   "\n"
		   "Lists every staged version of every captured file, or of one file, or\n"
		   "of the files below a directory: size, bytes it added to the store,\n"
		   "chunks it stored itself out of its total, and where it is.\n");
}

struct row {
	char *path;
	uint64_t version;     /* the id */
	uint64_t number;      /* what users see: docs/FORMAT.md, "Version ids" */
	uint64_t size, stored;
	uint32_t new_chunks, chunks;
	int64_t mtime_ns;
	bool deleted, corrupt;
	bool open;            /* fsync'ed, its writer never closed it (yet) */
	bool local;           /* in the node cache */
	int marked_servers;   /* servers the flusher shipped it to (0: not yet) */
	int listed_servers;   /* servers that listed it just now */
};

struct listing {
	const char *prefix;
	struct row *rows;
	size_t n, cap;
	int err;
};

static bool under(const char *path, const char *prefix)
{
	if (!prefix || strcmp(prefix, "/") == 0)
		return true;
	size_t n = strlen(prefix);
	return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static int add_row(struct listing *l, const struct row *r)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct row *n = realloc(l->rows, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		l->rows = n;
		l->cap = cap;
	}
	l->rows[l->n] = *r;
	if (!(l->rows[l->n].path = strdup(r->path)))
		return -ENOMEM;
	l->n++;
	return 0;
}

static int collect(void *arg, const char *path, int filedirfd)
{
	struct listing *l = arg;
	if (!under(path, l->prefix))
		return 0;
	uint64_t *v;
	size_t n;
	int r = stg_catalog_versions(filedirfd, &v, &n);
	if (r < 0)
		return r;
	bool deleted = stg_catalog_is_deleted(filedirfd);
	for (size_t i = 0; i < n && r == 0; i++) {
		struct stg_manifest m;
		struct row row = {.path = (char *)path, .version = v[i], .deleted = deleted,
				  .local = true};
		char where[1024];
		if (stg_queue_read_mark(filedirfd, v[i], where, sizeof(where)) == 0 && where[0]) {
			row.marked_servers = 1;
			for (const char *q = where; *q; q++)
				row.marked_servers += *q == ',';
		}
		if (stg_catalog_read(filedirfd, v[i], &m) == 0) {
			row.size = m.size;
			row.stored = stg_manifest_stored_bytes(&m);
			row.new_chunks = stg_manifest_new_chunks(&m);
			row.chunks = m.nchunks;
			row.mtime_ns = m.mtime_ns;
			row.open = m.flags & STG_MANIFEST_OPEN;
			stg_manifest_done(&m);
		} else {
			row.corrupt = true;
		}
		r = add_row(l, &row);
	}
	free(v);
	return r;
}

static int cmp_rows(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	int c = strcmp(x->path, y->path);
	if (c)
		return c;
	return x->version < y->version ? -1 : x->version > y->version;
}

/* Numbers each path's versions (rows sorted by path, then id). */
static int number_rows(struct listing *l)
{
	uint64_t *ids = malloc((l->n ? l->n : 1) * 2 * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	uint64_t *numbers = ids + (l->n ? l->n : 1);
	for (size_t i = 0, end; i < l->n; i = end) {
		for (end = i; end < l->n && strcmp(l->rows[end].path, l->rows[i].path) == 0; end++)
			ids[end - i] = l->rows[end].version;
		stg_version_numbers(ids, end - i, numbers);
		for (size_t k = i; k < end; k++)
			l->rows[k].number = numbers[k - i];
	}
	free(ids);
	return 0;
}

/* Adds the servers' versions: counts for those in the cache, rows for the
 * others (staged on another node, or evicted here). */
static int merge_remote(const struct stg_policy *p, struct listing *l)
{
	struct remote rm;
	if (remote_init(&rm, p) < 0)
		return -EINVAL;
	struct remote_version *rv;
	size_t n, reached;
	int r = remote_list(&rm, l->prefix && strcmp(l->prefix, "/") ? l->prefix : NULL, &rv, &n,
			    &reached);
	if (r < 0) {
		tool_error("ls: cannot list the servers: %s", strerror(-r));
		return r;
	}
	for (size_t i = 0; i < n && r == 0; i++) {
		if (!under(rv[i].path, l->prefix))
			continue;
		int count = __builtin_popcountll(rv[i].servers);
		bool found = false;
		for (size_t k = 0; k < l->n; k++)
			if (l->rows[k].version == rv[i].e.version &&
			    strcmp(l->rows[k].path, rv[i].path) == 0) {
				l->rows[k].listed_servers = count;
				found = true;
				break;
			}
		if (found)
			continue;
		struct row row = {
			.path = rv[i].path,
			.version = rv[i].e.version,
			.size = rv[i].e.size,
			.stored = rv[i].e.stored,
			.chunks = rv[i].e.nchunks,
			.new_chunks = rv[i].e.new_chunks,
			.mtime_ns = rv[i].e.mtime_ns,
			.listed_servers = count,
		};
		r = add_row(l, &row);
	}
	remote_list_free(rv, n);
	if (reached < p->nservers)
		tool_error("ls: %zu of %zu servers answered", reached, p->nservers);
	return r;
}

int cmd_ls(int argc, char **argv)
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
	if (argc - optind > 1) {
		tool_error("ls: give at most one PATH or PREFIX");
		return EXIT_USAGE;
	}
	char prefix[PATH_MAX];
	if (optind < argc && tool_abspath(argv[optind], prefix, sizeof(prefix)) < 0)
		return 1;
	struct stg_policy *p;
	struct stg_cache *cache;
	if (tool_open(policy, &p, &cache))
		return 1;
	struct listing l = {.prefix = optind < argc ? prefix : NULL};
	int r = cache ? stg_catalog_foreach(cache, collect, &l) : 0;
	if (r < 0) {
		tool_error("ls: cannot read the cache '%s': %s", p->cache_dir, strerror(-r));
		return 1;
	}
	int bad = 0;
	if (p->has_cluster && merge_remote(p, &l) < 0)
		bad = 1;
	qsort(l.rows, l.n, sizeof(*l.rows), cmp_rows);
	if (number_rows(&l) < 0) {
		tool_error("ls: out of memory");
		return 1;
	}
	if (l.n)
		printf("%-40s %7s %12s %12s %11s  %-19s  %s\n", "PATH", "VERSION", "SIZE", "STORED",
		       "NEW/TOTAL", "MODIFIED", "WHERE");
	for (size_t i = 0; i < l.n; i++) {
		struct row *rw = &l.rows[i];
		if (rw->corrupt) {
			printf("%-40s %7" PRIu64 "  manifest corrupt\n", rw->path, rw->number);
			bad = 1;
			continue;
		}
		char mt[32] = "-";
		time_t t = (time_t)(rw->mtime_ns / 1000000000);
		struct tm tm;
		if (localtime_r(&t, &tm))
			strftime(mt, sizeof(mt), "%Y-%m-%d %H:%M:%S", &tm);
		char chunks[32];
		snprintf(chunks, sizeof(chunks), "%u/%u", rw->new_chunks, rw->chunks);
		char where[64];
		int servers = rw->listed_servers ? rw->listed_servers : rw->marked_servers;
		snprintf(where, sizeof(where), "%s%s%s", rw->local ? "cache" : "",
			 rw->local && servers ? "+" : "", servers ? "" : "");
		if (servers)
			snprintf(where + strlen(where), sizeof(where) - strlen(where), "%d server%s",
				 servers, servers == 1 ? "" : "s");
		else if (rw->local && p->has_cluster)
			snprintf(where + strlen(where), sizeof(where) - strlen(where), " (queued)");
		printf("%-40s %7" PRIu64 " %12" PRIu64 " %12" PRIu64 " %11s  %-19s  %s%s%s\n",
		       rw->path, rw->number, rw->size, rw->stored, chunks, mt, where,
		       !rw->open ? "" : rw->size ? " (fsync'ed, not closed)" : " (created empty)",
		       rw->deleted ? " (deleted)" : "");
		free(rw->path);
	}
	if (l.n == 0 && optind < argc) {
		tool_error("ls: nothing staged at or below '%s'", prefix);
		bad = 1;
	}
	free(l.rows);
	stg_cache_free(cache);
	stg_policy_free(p);
	return bad;
}
