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
#include "jobversion.h"
#include "queue.h"
#include "remote.h"
#include "tool.h"
#include "util.h"
#include "version.h"

/* Servers did not answer: the listing may lack versions. */
#define EXIT_SERVERS 3

static void usage(FILE *f)
{
	fprintf(f, "usage: stagehand ls [--policy F] [--hide-deleted] [--allow-foreign-cache]\n"
		   "                    [PATH|PREFIX]\n"
		   "\n"
		   "Lists every staged version of every captured file, or of one file, or\n"
		   "of the files below a directory: size, bytes it added to the store,\n"
		   "chunks it stored itself out of its total, and where it is. The parts\n"
		   "that the nodes of a parallel job staged of one version (shared = job)\n"
		   "are one version, marked incomplete (and why) while a rank's part is\n"
		   "missing.\n"
		   "\n"
		   "Names are printed with C escapes for backslashes and control\n"
		   "characters (\\\\, \\n, \\t, \\r, else \\ooo), as ls -b does: one line\n"
		   "per version, whatever the names hold.\n"
		   "\n"
		   "A file the application deleted is listed \"(deleted)\" while its\n"
		   "versions stay restorable (keep_deleted); a name renamed away is not\n"
		   "listed: its versions are those of the new name.\n"
		   "\n"
		   "  --hide-deleted\n"
		   "      leave out the versions of deleted files\n"
		   "  --allow-foreign-cache\n"
		   "      use a cache that belongs to another user than you or root, or that\n"
		   "      others may write (refused by default: they decide what it holds)\n"
		   "\n"
		   "exit status: 0 when everything was listed; 1 when nothing is staged at\n"
		   "PATH, a manifest is corrupt or a cache entry was refused; 3 when no\n"
		   "server answered (or all refused the key), or as many as `replicas` did\n"
		   "not: the listing may lack versions that only they hold.\n");
}

struct row {
	char *path;
	uint64_t version;     /* the id */
	uint64_t size, stored;
	uint32_t new_chunks, chunks;
	int64_t mtime_ns;
	bool deleted, corrupt;
	bool open;            /* fsync'ed, its writer never closed it (yet) */
	struct stg_part *part; /* a job version's part: this node's (owned) */
	bool local;           /* in the node cache */
	int marked_servers;   /* servers the flusher shipped it to (0: not yet) */
	int listed_servers;   /* servers that listed it just now */
};

struct listing {
	const char *prefix;
	struct row *rows;
	size_t n, cap;
	int err;
	bool bad; /* a cache entry was refused */
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
	if (STG_GROW(l->rows, l->cap, l->n + 1) < 0)
		return -ENOMEM;
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
			row.part = m.part;
			m.part = NULL;
			stg_manifest_done(&m);
		} else {
			row.corrupt = true;
		}
		r = add_row(l, &row);
	}
	free(v);
	return r;
}

static void bad_entry(void *arg, const char *id, int err)
{
	struct listing *l = arg;
	tool_bad_entry("ls", id, err);
	l->bad = true;
}

static int cmp_rows(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	int c = strcmp(x->path, y->path);
	if (c)
		return c;
	return x->version < y->version ? -1 : x->version > y->version;
}

/* The cache's row of path's version, among rows[0..n) sorted (cmp_rows). */
static struct row *find_row(struct row *rows, size_t n, const char *path, uint64_t version)
{
	struct row key = {.path = (char *)path, .version = version};
	return bsearch(&key, rows, n, sizeof(*rows), cmp_rows);
}

/* Adds the servers' versions: counts for those in the cache, rows for the
 * others (staged on another node, or evicted here). *ret_missed: the servers
 * that did not answer may hold versions that none of the others does. */
static int merge_remote(const struct stg_policy *p, struct listing *l, bool *ret_missed)
{
	struct remote rm;
	if (remote_init(&rm, p) < 0)
		return -EINVAL;
	struct remote_version *rv;
	size_t n, reached;
	int r = remote_list(&rm, l->prefix && strcmp(l->prefix, "/") ? l->prefix : NULL, true, &rv,
			    &n, &reached);
	if (r < 0) {
		tool_error("ls: cannot list the servers: %s", strerror(-r));
		return r;
	}
	struct remote_session sess; /* for the parts' manifests */
	remote_session_init(&sess, &rm);
	/* The cache's rows, sorted, are looked up; the servers' are added
	 * after them. */
	size_t local = l->n;
	qsort(l->rows, local, sizeof(*l->rows), cmp_rows);
	for (size_t i = 0; i < n && r == 0; i++) {
		if (!under(rv[i].path, l->prefix))
			continue;
		int count = __builtin_popcountll(rv[i].servers);
		bool deleted = rv[i].e.flags & STG_LIST_ENTRY_DELETED;
		struct row *in_cache = find_row(l->rows, local, rv[i].path, rv[i].e.version);
		if (in_cache) {
			in_cache->listed_servers = count;
			in_cache->deleted |= deleted;
			continue;
		}
		struct row row = {
			.path = rv[i].path,
			.version = rv[i].e.version,
			.size = rv[i].e.size,
			.stored = rv[i].e.stored,
			.chunks = rv[i].e.nchunks,
			.new_chunks = rv[i].e.new_chunks,
			.mtime_ns = rv[i].e.mtime_ns,
			.open = rv[i].e.flags & STG_MANIFEST_OPEN,
			.deleted = deleted,
			.listed_servers = count,
		};
		/* A part: its manifest says which ranks it holds (one row for
		 * each server's, if they differ: remote_get_parts). */
		struct stg_manifest *parts = NULL;
		ssize_t np = 1;
		if (rv[i].e.flags & STG_MANIFEST_PART) {
			np = remote_get_parts(&sess, rv[i].path, rv[i].e.version, rv[i].servers,
					      &parts);
			row.corrupt = np < 0;
		}
		for (ssize_t k = 0; k < (np < 1 ? 1 : np) && r == 0; k++) {
			if (parts) {
				row.part = parts[k].part;
				parts[k].part = NULL;
				row.listed_servers = 1; /* (at least: which, it cannot tell) */
				if (np == 1)
					row.listed_servers = count;
			}
			r = add_row(l, &row);
		}
		for (ssize_t k = 0; k < np && parts; k++)
			stg_manifest_done(&parts[k]);
		free(parts);
	}
	remote_session_done(&sess);
	remote_list_free(rv, n);
	if (reached < p->nservers)
		tool_error("ls: %zu of %zu servers answered", reached, p->nservers);
	/* Each version is on `replicas` servers: fewer missing, another has it. */
	*ret_missed = reached == 0 || p->nservers - reached >= p->replicas;
	return r;
}

/* Prints one version of a path: a whole one, or the parts of a job's
 * version (v->parts: indexes into rows) summed into one line. */
static void print_version(const struct stg_policy *p, const struct row *rows,
			  const struct job_version *v, uint64_t number, int *bad)
{
	const struct row *first = &rows[v->parts[0]];
	char name[TOOL_ESCAPED_SIZE(PATH_MAX)];
	tool_escape(first->path, name, sizeof(name));
	for (size_t k = 0; k < v->nparts; k++)
		if (rows[v->parts[k]].corrupt) {
			printf("%-40s %7" PRIu64 "  manifest corrupt or unreadable\n", name, number);
			*bad = 1;
			return;
		}
	struct row sum = *first;
	int servers = INT_MAX;
	for (size_t k = 0; k < v->nparts; k++) {
		const struct row *rw = &rows[v->parts[k]];
		int s = rw->listed_servers ? rw->listed_servers : rw->marked_servers;
		servers = s < servers ? s : servers; /* the least replicated part */
		if (k == 0)
			continue;
		sum.size = rw->size > sum.size ? rw->size : sum.size;
		sum.stored += rw->stored;
		sum.new_chunks += rw->new_chunks;
		sum.chunks += rw->chunks;
		sum.mtime_ns = rw->mtime_ns > sum.mtime_ns ? rw->mtime_ns : sum.mtime_ns;
		sum.local |= rw->local;
	}
	char mt[32] = "-";
	time_t t = (time_t)(sum.mtime_ns / 1000000000);
	struct tm tm;
	if (localtime_r(&t, &tm))
		strftime(mt, sizeof(mt), "%Y-%m-%d %H:%M:%S", &tm);
	char chunks[32];
	snprintf(chunks, sizeof(chunks), "%u/%u", sum.new_chunks, sum.chunks);
	char where[64];
	snprintf(where, sizeof(where), "%s%s", sum.local ? "cache" : "",
		 sum.local && servers ? "+" : "");
	if (servers)
		snprintf(where + strlen(where), sizeof(where) - strlen(where), "%d server%s",
			 servers, servers == 1 ? "" : "s");
	else if (sum.local && p->has_cluster)
		snprintf(where + strlen(where), sizeof(where) - strlen(where), " (queued)");
	char job[sizeof(v->why) + STG_PART_JOB_MAX + 64] = "";
	if (v->is_job)
		snprintf(job, sizeof(job), " (job %s, %zu part%s%s%s)", first->part->job, v->nparts,
			 v->nparts == 1 ? "" : "s", v->complete ? "" : ", incomplete: ",
			 v->complete ? "" : v->why);
	printf("%-40s %7" PRIu64 " %12" PRIu64 " %12" PRIu64 " %11s  %-19s  %s%s%s%s\n",
	       name, number, sum.size, sum.stored, chunks, mt, where,
	       !v->open ? "" : sum.size ? " (fsync'ed, not closed)" : " (created empty)", job,
	       sum.deleted ? " (deleted)" : "");
}

/* Prints the n versions of one path (rows sorted by id), numbered as
 * restore numbers them: the parts of a job's version are one. Returns 0 or
 * -ENOMEM. */
static int print_path(const struct stg_policy *p, const struct row *rows, size_t n, int *bad)
{
	struct stg_manifest *ms = calloc(n, sizeof(*ms));
	uint64_t *ids = calloc(n * 3, sizeof(*ids));
	struct job_version *v = NULL;
	ssize_t nv = -ENOMEM;
	if (ms && ids) {
		for (size_t i = 0; i < n; i++) {
			/* only what grouping reads; the rows own the parts */
			ms[i].flags = rows[i].open ? STG_MANIFEST_OPEN : 0;
			ms[i].part = rows[i].part;
			ids[i] = rows[i].version;
		}
		nv = job_versions(ms, ids, n, &v);
	}
	if (nv >= 0) {
		uint64_t *vids = ids + n, *numbers = ids + 2 * n;
		for (ssize_t k = 0; k < nv; k++)
			vids[k] = v[k].id;
		stg_version_numbers(vids, (size_t)nv, numbers);
		for (ssize_t k = 0; k < nv; k++)
			print_version(p, rows, &v[k], numbers[k], bad);
		job_versions_free(v, (size_t)nv);
	}
	free(ms);
	free(ids);
	return nv < 0 ? (int)nv : 0;
}

int cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"allow-foreign-cache", no_argument, NULL, 'F'},
		{"hide-deleted", no_argument, NULL, 'D'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *policy = NULL;
	bool hide_deleted = false;
	int c;
	tool_foreign_cache = TOOL_FOREIGN_REFUSE_FLAG;
	while ((c = getopt_long(argc, argv, "p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': policy = optarg; break;
		case 'F': tool_foreign_cache = TOOL_FOREIGN_USE; break;
		case 'D': hide_deleted = true; break;
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
	int unsettled = tool_settle(p, cache);
	struct listing l = {.prefix = optind < argc ? prefix : NULL};
	int r = cache ? stg_catalog_scan(cache, collect, bad_entry, &l) : 0;
	if (r < 0) {
		tool_error("ls: cannot read the cache '%s': %s", p->cache_dir, strerror(-r));
		return 1;
	}
	int bad = l.bad | unsettled;
	bool missed = false;
	if (p->has_cluster && merge_remote(p, &l, &missed) < 0)
		bad = 1;
	if (hide_deleted) {
		size_t k = 0;
		for (size_t i = 0; i < l.n; i++) {
			if (!l.rows[i].deleted) {
				l.rows[k++] = l.rows[i];
				continue;
			}
			free(l.rows[i].path);
			stg_part_free(l.rows[i].part);
		}
		l.n = k;
	}
	qsort(l.rows, l.n, sizeof(*l.rows), cmp_rows);
	if (l.n)
		printf("%-40s %7s %12s %12s %11s  %-19s  %s\n", "PATH", "VERSION", "SIZE", "STORED",
		       "NEW/TOTAL", "MODIFIED", "WHERE");
	for (size_t i = 0, end; i < l.n; i = end) {
		for (end = i; end < l.n && strcmp(l.rows[end].path, l.rows[i].path) == 0; end++)
			;
		if (print_path(p, l.rows + i, end - i, &bad) < 0) {
			tool_error("ls: out of memory");
			return 1;
		}
	}
	for (size_t i = 0; i < l.n; i++) {
		free(l.rows[i].path);
		stg_part_free(l.rows[i].part);
	}
	if (l.n == 0 && optind < argc) {
		tool_error("ls: nothing staged at or below '%s'", prefix);
		bad = 1;
	}
	free(l.rows);
	stg_cache_free(cache);
	stg_policy_free(p);
	return bad ? 1 : missed ? EXIT_SERVERS : 0;
}
