/* SPDX-License-Identifier: MIT */
/* Keeping the cache within its capacity: once the packs pass 80% of it, the
 * oldest versions that the servers hold are dropped from the node (they stay
 * listed and restorable from the servers) and the collector frees what only
 * they used, down to 60%: room for the next versions before they arrive. A version not yet replicated is never evicted,
 * nor the newest version of a file, which the running job may read back and
 * which the next version deduplicates against. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "gc.h"
#include "internal.h"
#include "log.h"
#include "queue.h"
#include "util.h"

#define HIGH_WATER 0.80
#define LOW_WATER 0.60

struct candidate {
	char *path;
	uint64_t version;
	int64_t commit_ns;
};

struct candidates {
	struct candidate *v;
	size_t n, cap;
};

static int collect(void *arg, const char *path, int filedirfd)
{
	struct candidates *cs = arg;
	uint64_t *v = NULL;
	size_t n = 0;
	if (stg_catalog_versions(filedirfd, &v, &n) < 0)
		return 0;
	for (size_t i = 0; i + 1 < n; i++) {
		struct stg_manifest m;
		if (stg_queue_read_mark(filedirfd, v[i], NULL, 0) < 0 ||
		    stg_catalog_read(filedirfd, v[i], &m) < 0)
			continue;
		int64_t when = m.commit_ns;
		stg_manifest_done(&m);
		if (STG_GROW(cs->v, cs->cap, cs->n + 1) < 0)
			break;
		cs->v[cs->n] = (struct candidate){.path = strdup(path), .version = v[i],
						  .commit_ns = when};
		if (cs->v[cs->n].path)
			cs->n++;
	}
	free(v);
	return 0;
}

static int oldest_first(const void *a, const void *b)
{
	const struct candidate *x = a, *y = b;
	return x->commit_ns < y->commit_ns ? -1 : x->commit_ns > y->commit_ns;
}

static bool over(struct stg_cache *c, double fraction)
{
	return c->capacity && (double)stg_cache_usage(c) > fraction * (double)c->capacity;
}

void evict_if_needed(struct flusher *fl)
{
	struct stg_cache *c = fl->cache;
	if (!over(c, HIGH_WATER))
		return;
	struct candidates cs = {0};
	stg_catalog_foreach(c, collect, &cs);
	qsort(cs.v, cs.n, sizeof(*cs.v), oldest_first);
	size_t evicted = 0;
	/* In rounds: drop a few, collect, look again. */
	for (size_t i = 0; i < cs.n && over(c, LOW_WATER);) {
		size_t end = i + 8 < cs.n ? i + 8 : cs.n;
		for (; i < end; i++) {
			struct stg_catalog_file f;
			if (stg_catalog_lock(c, cs.v[i].path, false, &f) < 0)
				continue;
			/* Still replicated, and still not the newest? */
			uint64_t *v = NULL;
			size_t n = 0;
			if (stg_catalog_versions(f.dirfd, &v, &n) == 0 && n &&
			    v[n - 1] != cs.v[i].version &&
			    stg_queue_read_mark(f.dirfd, cs.v[i].version, NULL, 0) == 0 &&
			    stg_catalog_remove_version(f.dirfd, cs.v[i].version) == 0)
				evicted++;
			free(v);
			stg_catalog_unlock(&f);
		}
		if (stg_gc_collect(c, 0, NULL) == -EAGAIN)
			break; /* a version is being built: the next pass collects */
	}
	if (evicted)
		stg_log(STG_LOG_INFO,
			"cache over %.0f%% of its capacity: %zu replicated versions evicted "
			"(restorable from the servers)",
			HIGH_WATER * 100, evicted);
	for (size_t i = 0; i < cs.n; i++)
		free(cs.v[i].path);
	free(cs.v);
}
