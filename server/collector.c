/* SPDX-License-Identifier: MIT */
/* The server's collector: marks the chunks every manifest references, then
 * lets the store drop the rest and compact its segments. Ingest goes on
 * meanwhile; only manifest writes wait while the marks are taken. */
#include <errno.h>
#include <time.h>

#include "internal.h"
#include "log.h"

static int mark_manifest(void *arg, const char *path, const struct stg_manifest *m)
{
	struct stg_store *store = arg;
	(void)path;
	for (uint32_t i = 0; i < m->nchunks; i++)
		if (!(m->entries[i].flags & STG_ENTRY_ZERO))
			stg_store_mark(store, &m->entries[i].hash);
	return 0;
}

static void collect(struct server *srv)
{
	/* Exclusive only while the epoch turns: a manifest stored before
	 * (its writer held the lock shared) is in the tree that the marking
	 * below reads; one stored after marks its own chunks in the new epoch. */
	pthread_rwlock_wrlock(&srv->manifest_lock);
	stg_store_gc_begin(srv->store);
	pthread_rwlock_unlock(&srv->manifest_lock);
	int r = stg_files_foreach(srv->files, mark_manifest, srv->store);
	if (r < 0) {
		/* Without every mark, dropping anything could lose a live chunk. */
		stg_log_errno(STG_LOG_ERROR, r, "collection skipped: cannot read the manifests");
		return;
	}
	struct stg_store_gc_result res;
	r = stg_store_gc_end(srv->store, &res);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "collection failed");
		return;
	}
	if (res.chunks_dropped || res.segments_removed || res.segments_compacted)
		stg_log(STG_LOG_INFO,
			"collected %llu chunks (%llu bytes); %llu segments removed, %llu compacted "
			"(%llu bytes moved)",
			(unsigned long long)res.chunks_dropped, (unsigned long long)res.bytes_dropped,
			(unsigned long long)res.segments_removed,
			(unsigned long long)res.segments_compacted,
			(unsigned long long)res.bytes_moved);
}

void server_collector_wake(struct server *srv)
{
	pthread_mutex_lock(&srv->gc_mutex);
	srv->gc_wanted = true;
	pthread_cond_signal(&srv->gc_cond);
	pthread_mutex_unlock(&srv->gc_mutex);
}

void *server_collector(void *arg)
{
	struct server *srv = arg;
	pthread_mutex_lock(&srv->gc_mutex);
	while (!srv->stopping) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += srv->gc_interval_s;
		while (!srv->gc_wanted && !srv->stopping) {
			if (pthread_cond_timedwait(&srv->gc_cond, &srv->gc_mutex, &until) ==
			    ETIMEDOUT)
				break;
		}
		if (srv->stopping)
			break;
		srv->gc_wanted = false;
		pthread_mutex_unlock(&srv->gc_mutex);
		collect(srv);
		pthread_mutex_lock(&srv->gc_mutex);
	}
	pthread_mutex_unlock(&srv->gc_mutex);
	return NULL;
}
