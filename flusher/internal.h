/* SPDX-License-Identifier: MIT */
/* The flusher's shared state, private to flusher/. */
#pragma once

#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "cache.h"
#include "conn.h"
#include "manifest.h"
#include "policy.h"
#include "tombstone.h"

/* What one server is asked to do for one version, or for one deletion
 * (tombstone set: the rest unused), or to take a version back (withdraw:
 * path, manifest and encoded only). */
struct job {
	const char *path;
	const struct stg_tombstone *tombstone;
	bool withdraw;
	const struct stg_manifest *manifest;
	const uint8_t *encoded; /* the manifest as stored */
	size_t encoded_len;
	uint32_t keep;
	/* The path's codec when it runs in the background (zstd): each chunk
	 * is recoded with it on its way out. NULL: shipped as the cache has it. */
	const struct stg_chunk_codec *recode;
	/* delta = xor: the version before (NULL: none in the cache), whose
	 * chunk at the same offset a chunk may go as a delta against, and the
	 * codec deltas are encoded with. */
	const struct stg_manifest *base;
	const struct stg_chunk_codec *delta;
	uint8_t *held;          /* bitmap: the entries this server holds */
	uint32_t nheld;
};

struct job_stats {
	uint64_t chunks_sent, chunks_present;
	uint64_t bytes_sent; /* every byte written to the stream */
	uint64_t frames_sent, frames_received;
};

/* The user data of the poll of the cancel descriptor that each worker's
 * ring holds for its lifetime: its completion means stop. */
#define RING_CANCEL (UINT64_C(1) << 63)

/* One staging server: its connection and worker thread. */
struct server {
	struct flusher *fl;
	const char *name; /* host:port */
	struct stg_conn conn;
	bool connected;
	char why_not_rdma[160]; /* under transport = auto: why TCP ("": RDMA) */

	/* Failures back off: no new job until down_until. */
	int failures;
	int64_t down_until_ns;
	char last_error[640];

	pthread_t thread;
	struct io_uring ring;
	bool ring_ready;
	/* The job handed over by the main thread, and its outcome. */
	struct job *job;
	bool busy;
	int result;
	bool local_failure; /* the job failed on the cache's side, not the server's */
	struct job_stats stats;
	/* Since start, for the metrics: failures, jobs done and their time. */
	uint64_t errors, ships;
	int64_t ship_ns;
};

struct flusher {
	struct stg_policy *policy;
	struct stg_cache *cache;
	struct stg_secret secret;
	uint32_t uid;
	int timeout_ms;
	uint64_t slot_budget; /* bytes of chunk buffers per server */

	struct server *servers;
	size_t nservers;

	pthread_mutex_t lock; /* guards the jobs of every server */
	pthread_cond_t job_cond, done_cond;
	bool stopping;

	/* Totals since start, for the state file. */
	uint64_t versions_shipped, chunks_sent, chunks_present, bytes_sent;
	uint64_t versions_failed;
	int64_t metrics_ns;  /* when the metrics were last written */
	uint64_t metrics_shipped; /* versions_shipped then */
	bool metrics_failed; /* and whether that failed (said once) */
};

/* Starts a worker thread per server. Returns 0 or -errno. */
int servers_start(struct flusher *fl);
void servers_stop(struct flusher *fl);

/* Is the server available for new work (not backing off)? */
bool server_available(const struct server *s, int64_t now_ns);

/* Records a failure and backs off; a success clears the count. */
void server_failed(struct server *s, int r, const char *what);
void server_succeeded(struct server *s);

/* Hands jobs[i] to servers[i] (NULL: none) and waits for all. Returns the
 * number that failed; their server's result is < 0. */
size_t servers_run(struct flusher *fl, struct job **jobs);

/* Sends the chunk records of entries (indexes into job->manifest) to the
 * server through its ring, several in flight. delta_ok (NULL: none): a
 * bitmap by entry of those whose base the server holds, sent as deltas
 * when that is smaller. Returns 0 or -errno. */
int sender_put(struct server *s, const struct job *job, const uint32_t *entries, size_t n,
	       const uint8_t *delta_ok);

/* Ships one queued version to its replicas; one whose id a server holds
 * for another node is re-minted (stg_catalog_remint) and shipped under its
 * new id. Returns 0 (replicated, marked and unqueued), -EAGAIN (too few
 * servers now: try later) or -errno. */
int ship_version(struct flusher *fl, const char *id, uint64_t version);

/* Ships the tombstone of the path with this file id (its queue entry of
 * version 0) to every server: it goes only once they all took it, so that
 * none keeps the versions it covers. Returns 0 (shipped, or nothing to
 * ship), -EAGAIN (a server is down or refused: still queued) or -errno. */
int ship_deletion(struct flusher *fl, const char *id);

/* Materializes a replicated version where the rule's drain says. */
int drain_version(struct flusher *fl, const char *path, const struct stg_path_rule *rule,
		  const struct stg_manifest *m);

/* Past 80% of the cache's capacity, evicts the oldest replicated versions
 * (never the newest of a file, never one not replicated) down to 60%. */
void evict_if_needed(struct flusher *fl);

/* Rewrites flusher.state in the cache (what `stagehand status` shows), and
 * the metrics when the policy asks for them. */
void state_write(struct flusher *fl, size_t queued, const char *activity);

/* At exit: the metrics say the flusher is gone. */
void state_leave(struct flusher *fl);
