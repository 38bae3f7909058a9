/* SPDX-License-Identifier: MIT */
/* What a node's cache holds and what its flusher has done: the facts behind
 * the flusher's Prometheus metrics and `stagehand status --json`
 * (docs/METRICS.md). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cache.h"
#include "placement.h"

struct stg_node_server {
	char name[256];       /* host:port */
	char state[16];       /* connected, idle or down */
	char transport[8];    /* tcp, rdma, or "-" when not connected */
	uint64_t errors;      /* failures since the flusher started */
	uint64_t ships;       /* versions (or parts) shipped to it */
	double ship_seconds;  /* the time those took, all together */
	char last_error[1024]; /* "" when it works */
};

struct stg_node_stats {
	/* The cache (stg_node_stats_scan). */
	char cache_dir[4096];
	uint64_t files, deleted, versions;
	uint64_t logical_bytes;      /* every version held, as written */
	uint64_t chunks;             /* distinct chunk records they name */
	uint64_t chunk_raw_bytes;    /* those chunks' bytes before compression */
	uint64_t chunk_stored_bytes; /* and as stored */
	uint64_t packs, pack_bytes;
	uint64_t capacity;           /* 0: none set */
	uint64_t disk_free_bytes;
	uint64_t usage;              /* bytes the capacity accounting counts */
	uint64_t queued;             /* versions still to replicate */
	double oldest_queued_s;      /* age of the oldest of them (0: none) */
	/* The flusher (its own account, or flusher.state). */
	bool flusher_running;
	long flusher_pid;
	char activity[160];
	uint64_t versions_shipped, versions_failed;
	uint64_t chunks_sent, chunks_present, bytes_sent;
	size_t nservers;
	struct stg_node_server servers[STG_CLUSTER_MAX_SERVERS];
};

/* Fills the cache's part of st (the rest is left as it is). Reads every
 * manifest. Returns 0 or -errno. */
int stg_node_stats_scan(struct stg_cache *c, uint64_t capacity, struct stg_node_stats *st);

/* Writes the flusher's part of st into flusher.state, and reads it back
 * (flusher_running is left to the caller, who knows whether the flusher
 * holds its lock). Return 0 or -errno. */
int stg_node_stats_write_state(struct stg_cache *c, const struct stg_node_stats *st);
int stg_node_stats_read_state(struct stg_cache *c, struct stg_node_stats *st);

/* st in Prometheus' text format, every sample labelled with the cache. */
void stg_node_stats_prometheus(const struct stg_node_stats *st, FILE *out);
