/* SPDX-License-Identifier: MIT */
/* The server's collector: marks the chunks every manifest references, then
 * lets the store drop the rest and compact its segments. Ingest goes on
 * meanwhile; only manifest writes wait while the marks are taken. */
#include <errno.h>
#include <time.h>

#include "internal.h"
#include "log.h"
#include "util.h"

/* Marks the chunks of a manifest, and gives its user the ones its put said
 * this server holds (owners.h): the same pairs a running server recorded,
 * so that a restart or a collection gives nobody more. */
static int mark_manifest(void *arg, uint32_t uid, const struct stg_manifest *m,
			 const uint8_t *held)
{
	struct server *srv = arg;
	srv->counters.collection_manifests++;
	for (uint32_t i = 0; i < m->nchunks; i++) {
		const struct stg_hash *h = &m->entries[i].hash;
		if (m->entries[i].flags & STG_ENTRY_ZERO || !stg_store_mark(srv->store, h))
			continue;
		if (!held || held[i / 8] & (1u << (i % 8))) {
			int r = stg_owners_add(srv->owners, uid, h);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int server_owners_load(struct server *srv)
{
	return stg_files_foreach(srv->files, mark_manifest, srv);
}

static void collect(struct server *srv)
{
	int64_t start = stg_now_ns();
	srv->counters.collection_manifests = 0;
	/* Exclusive only while the epoch turns: a manifest stored before
	 * (its writer held the lock shared) is in the tree that the marking
	 * below reads; one stored after marks its own chunks in the new epoch. */
	pthread_rwlock_wrlock(&srv->manifest_lock);
	stg_store_gc_begin(srv->store);
	stg_owners_gc_begin(srv->owners);
	pthread_rwlock_unlock(&srv->manifest_lock);
	int r = stg_files_foreach(srv->files, mark_manifest, srv);
	if (r < 0) {
		/* Without every mark, dropping anything could lose a live chunk. */
		stg_log_errno(STG_LOG_ERROR, r, "collection skipped: cannot read the manifests");
		return;
	}
	size_t forgotten = stg_owners_gc_end(srv->owners);
	if (forgotten)
		stg_log(STG_LOG_DEBUG, "collection: %zu chunks no longer any user's", forgotten);
	struct stg_store_gc_result res;
	r = stg_store_gc_end(srv->store, &res);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "collection failed");
		return;
	}
	srv->counters.collection_ns = (uint64_t)(stg_now_ns() - start);
	srv->counters.collections++;
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
