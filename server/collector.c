/* SPDX-License-Identifier: MIT */
/* The server's collector, and the references it collects by (store.h;
 * docs/STORE.md, "Garbage collection"): each held entry of a filed manifest counts once for its
 * chunk and once for the pair (uid, chunk), from the filing of its version
 * to its removal. A pass then looks only at what lost its last reference or
 * came in since: it expires the deletions that came due, drops the chunks
 * and pairs left without references, and compacts. */
#include <errno.h>
#include <time.h>

#include "internal.h"
#include "log.h"
#include "util.h"

static bool counts(const struct stg_manifest *m, const uint8_t *held, uint32_t i)
{
	if (m->entries[i].flags & STG_ENTRY_ZERO)
		return false;
	return !held || held[i / 8] & (1u << (i % 8));
}

static void refs_filed(void *arg, uint32_t uid, const struct stg_manifest *m,
		       const uint8_t *held)
{
	struct server *srv = arg;
	if (!m) {
		stg_store_refs_lost(srv->store);
		stg_owners_refs_lost(srv->owners);
		return;
	}
	bool lost = false;
	for (uint32_t i = 0; i < m->nchunks; i++) {
		if (!counts(m, held, i))
			continue;
		stg_store_ref(srv->store, &m->entries[i].hash);
		lost |= stg_owners_ref(srv->owners, uid, &m->entries[i].hash) < 0;
	}
	if (lost) {
		stg_log(STG_LOG_ERROR, "out of memory: uid %u may not see some of its chunks "
			"until the server restarts", uid);
		stg_owners_refs_lost(srv->owners);
	}
}

static void refs_retired(void *arg, uint32_t uid, const struct stg_manifest *m,
			 const uint8_t *held)
{
	struct server *srv = arg;
	for (uint32_t i = 0; i < m->nchunks; i++) {
		if (!counts(m, held, i))
			continue;
		stg_store_unref(srv->store, &m->entries[i].hash);
		stg_owners_unref(srv->owners, uid, &m->entries[i].hash);
	}
}

static int count_filed(void *arg, uint32_t uid, const struct stg_manifest *m,
		       const uint8_t *held)
{
	refs_filed(arg, uid, m, held);
	return 0;
}

int server_refs_load(struct server *srv)
{
	int r = stg_files_foreach(srv->files, count_filed, srv);
	stg_files_set_hooks(srv->files, &(struct stg_files_hooks){
		.filed = refs_filed, .retired = refs_retired, .arg = srv});
	if (r < 0)
		return r; /* counts incomplete: nothing is collected */
	stg_store_refs_counted(srv->store);
	stg_owners_counted(srv->owners);
	return 0;
}

static void collect(struct server *srv)
{
	int64_t start = stg_now_ns();
	/* Exclusive only while the epoch turns: a manifest filed before (its
	 * writer held the lock shared) is counted; the chunks one filed after
	 * relies on were touched after the turn before this one. */
	pthread_rwlock_wrlock(&srv->manifest_lock);
	stg_store_gc_begin(srv->store);
	stg_owners_gc_begin(srv->owners);
	pthread_rwlock_unlock(&srv->manifest_lock);
	srv->counters.collection_manifests = stg_files_expire(srv->files, stg_now_ns());
	size_t forgotten = stg_owners_gc_end(srv->owners);
	if (forgotten)
		stg_log(STG_LOG_DEBUG, "collection: %zu chunks no longer any user's", forgotten);
	struct stg_store_gc_result res;
	int r = stg_store_gc_end(srv->store, &res);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "collection failed");
		return;
	}
	srv->counters.collection_candidates = res.candidates;
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
