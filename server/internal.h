/* SPDX-License-Identifier: MIT */
/* The staging server's shared state, private to server/. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "conn.h"
#include "files.h"
#include "store.h"

struct server {
	struct stg_store *store;
	struct stg_files *files;
	struct stg_secret secret;
	int timeout_ms;
	unsigned max_connections;
	bool accept_v1; /* serve clients of protocol version 1 (no MACs) */
	atomic_uint connections;
	/* Connections not yet authenticated: each holds a thread and, over
	 * RDMA, locked buffers, so strangers get only a few at a time. */
	atomic_uint handshaking;
	int64_t started_ns;

	/* Held shared while a manifest is checked and written, exclusively while
	 * the collector starts an epoch: a chunk a new manifest relies on is
	 * either seen by the marking or marked by the manifest's writer. */
	pthread_rwlock_t manifest_lock;

	/* The collector: runs every gc_interval_s, or sooner when retention
	 * removed versions. */
	pthread_mutex_t gc_mutex;
	pthread_cond_t gc_cond;
	bool gc_wanted, stopping;
	unsigned gc_interval_s;
};

struct session_arg {
	struct server *srv;
	struct stg_conn conn; /* accepted, over either transport */
};

#define SERVER_MAX_HANDSHAKES 32

/* Serves one connection until it closes; frees arg. The connection is
 * counted in connections and handshaking already. */
void *server_session(void *arg);

/* The collector thread. */
void *server_collector(void *arg);

/* Asks the collector to run soon. */
void server_collector_wake(struct server *srv);
