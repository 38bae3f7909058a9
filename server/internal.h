/* SPDX-License-Identifier: MIT */
/* The staging server's shared state, private to server/. */
#pragma once

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "conn.h"
#include "files.h"
#include "loop.h"
#include "owners.h"
#include "store.h"

enum admit_state {
	ADMIT_FREE,
	ADMIT_HANDSHAKE, /* not yet authenticated */
	ADMIT_IDLE,      /* waiting for its next request */
	ADMIT_WORKING,
};

struct admit_slot {
	enum admit_state state;
	bool evicted;     /* asked to close: counted free already */
	int fd;           /* to evict it by; -1: not evictable (RDMA) */
	uint32_t uid;
	int64_t since_ms; /* in its state since */
	char addr[64];    /* the peer's address, without its port */
	int prev, next;   /* in its state's list (or the free list), -1: none */
};

struct admit_limits {
	unsigned max_connections;
	unsigned max_handshakes; /* a quarter of them per address */
	unsigned max_per_user;
};

/* A list of slots, oldest first (slots join at the tail as they enter
 * their state). */
struct admit_list {
	int head, tail;
};

/* Admission of connections (admit.c). What a connection's arrival, login
 * and turns between idle and at work cost does not grow with the
 * connections held: counts are kept, the slots logging in (a few hundred at
 * most), the idle ones and each uid's ones at work are in lists oldest
 * first, and the logged-in ones are counted per uid. */
struct admit {
	pthread_mutex_t lock;
	struct admit_limits limits;
	struct admit_slot *slots;
	unsigned nslots;
	unsigned logging_in, logged_in; /* held, not evicted */
	struct admit_list free, handshakes, idle; /* idle: evictable ones */
	struct admit_count { /* logged-in connections per uid (n 0: empty) */
		uint32_t uid;
		unsigned n;
		unsigned ix;               /* its place in users */
		struct admit_list working; /* its evictable ones at work */
	} *counts;
	size_t counts_cap; /* a power of two */
	uint32_t *users;   /* the uids logged in, in no order */
	unsigned nusers;
};

int admit_init(struct admit *a, const struct admit_limits *l);

/* Frees what admit_init took (the server keeps its admission for good). */
void admit_free(struct admit *a);

/* A slot for a new connection from addr (fd, or -1 over RDMA), logging in.
 * Returns the slot, or -EBUSY with the reason in why. */
int admit_accept(struct admit *a, const char *addr, int fd, char *why, size_t whylen);

/* The connection of slot has proven uid: takes it on, or returns -EBUSY
 * with the reason in why (the user holds its share, or the slot was
 * evicted while it logged in). */
int admit_login(struct admit *a, int slot, uint32_t uid, char *why, size_t whylen);

/* The connection waits for its next request (idle) or serves one. Returns
 * whether it was asked to close. */
bool admit_idle(struct admit *a, int slot, bool idle);

/* Was the connection asked to close? */
bool admit_evicted(struct admit *a, int slot);

/* The connection closes (before its descriptor is). Returns whether it had
 * been asked to. */
bool admit_release(struct admit *a, int slot);

/* Logs a refusal (the log's rate limit applies): what names the peer and
 * the reason. */
void admit_refused(const char *what);

/* Connections held. */
unsigned admit_connections(struct admit *a);

/* Since start, for the metrics (server/metrics.c): the sessions count. */
struct server_counters {
	atomic_uint_fast64_t requests, request_errors, request_ns;
	atomic_uint_fast64_t chunks_in, chunk_bytes_in; /* received */
	atomic_uint_fast64_t chunks_held;               /* asked for, held already */
	atomic_uint_fast64_t manifests_in;
	atomic_uint_fast64_t chunks_out, chunk_bytes_out; /* served */
	/* The collector's passes, and what the last one read, looked at and
	 * took. */
	atomic_uint_fast64_t collections, collection_manifests, collection_candidates,
		collection_ns;
};

/* TCP and RDMA. */
#define MAX_LISTENERS 2

struct server {
	struct stg_store *store;
	struct stg_files *files;
	struct stg_owners *owners; /* which user may see which chunk */
	struct stg_secret secret;
	int timeout_ms;
	int handshake_ms; /* to log in, at each step */
	int idle_ms;      /* a silent client is closed after this */
	struct admit admit;
	struct loops *loops; /* where sessions wait and run (loop.c) */
	struct stg_listener *listeners[MAX_LISTENERS]; /* listen.c */
	unsigned nlisteners;
	struct stg_conn_budget frames; /* memory of large frames */
	bool accept_v1; /* serve clients of protocol version 1 (no MACs) */
	int64_t started_ns;

	/* Held shared while a manifest is checked, written and counted (and
	 * while a deletion or a withdrawal changes an entry), exclusively while
	 * the collector starts an epoch: a chunk a new manifest relies on is
	 * touched in the epoch before the turn at the earliest, and counted
	 * before the turn. Taken for good when the server stops, before it
	 * writes its path index files. */
	pthread_rwlock_t manifest_lock;

	/* The collector: runs every gc_interval_s, or sooner when retention
	 * removed versions. */
	pthread_mutex_t gc_mutex;
	pthread_cond_t gc_cond;
	bool gc_wanted, stopping;
	unsigned gc_interval_s;

	/* The scrub thread (scrub.c) reads this many bytes a second (0: none);
	 * it waits on scrub_cond, under gc_mutex. */
	uint64_t scrub_rate;
	pthread_cond_t scrub_cond;

	/* The metrics, written by their own thread (under gc_mutex). */
	struct server_counters counters;
	uint64_t capacity; /* of the store, 0: the disk's */
	const char *metrics_file;
	unsigned metrics_interval_s;
	pthread_cond_t metrics_cond;
};

/* Listens on hostport over TCP, and over RDMA as kind asks (listen.c).
 * Returns 0, or -1 (said why) when the server must not start. */
int server_listen(struct server *srv, const char *hostport, enum stg_transport_kind kind);

/* Accepts connections on every listener, and starts their sessions, until
 * *stop (listen.c). */
void server_accept(struct server *srv, volatile sig_atomic_t *stop);

void server_unlisten(struct server *srv);

/* The collector thread. */
void *server_collector(void *arg);

/* The scrub thread. */
void *server_scrubber(void *arg);

/* The metrics thread: writes metrics_file every metrics_interval_s, and
 * once more when the server stops. */
void *server_metrics(void *arg);

/* Counts the references of every filed manifest (docs/STORE.md, "Garbage
 * collection"), and so gives every user back the chunks its manifests name
 * as held here (at start, before the first connection). Returns 0 or
 * -errno. */
int server_refs_load(struct server *srv);

/* Asks the collector to run soon. */
void server_collector_wake(struct server *srv);

/* Tells the service manager that started the server (systemd, Type=notify)
 * its state, e.g. "READY=1": nothing when $NOTIFY_SOCKET is unset. Returns 0
 * or -errno. */
int server_notify(const char *state);
