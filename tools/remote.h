/* SPDX-License-Identifier: MIT */
/* The tools' side of the cluster: connections to the staging servers,
 * listing and fetching manifests, failover from one server to the next. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "conn.h"
#include "manifest.h"
#include "placement.h"
#include "policy.h"
#include "wire.h"

struct remote {
	const struct stg_policy *policy;
	struct stg_secret secret;
	uint32_t uid;
	int timeout_ms;
	/* Servers found down during this run: not tried again by any thread. */
	atomic_bool down[STG_CLUSTER_MAX_SERVERS];
	atomic_bool reported[STG_CLUSTER_MAX_SERVERS];
};

/* One thread's connections, opened on first use. */
struct remote_session {
	struct remote *rm;
	struct stg_conn conns[STG_CLUSTER_MAX_SERVERS];
	bool open[STG_CLUSTER_MAX_SERVERS];
	int err[STG_CLUSTER_MAX_SERVERS]; /* why server i could not be reached */
	/* Why RDMA was not used for server i under transport = auto ("": it was). */
	char why_not_rdma[STG_CLUSTER_MAX_SERVERS][160];
};

/* Prepares to talk to the policy's servers (reads the secret). Prints the
 * reason and returns -errno on failure. */
int remote_init(struct remote *rm, const struct stg_policy *p);

void remote_session_init(struct remote_session *s, struct remote *rm);
void remote_session_done(struct remote_session *s);

/* The connection to server i, or NULL when it is down (said once on stderr). */
struct stg_conn *remote_conn(struct remote_session *s, size_t i);

/* stg_conn_call on server i's connection, opened if need be, its pool made
 * pool bytes first when pool is not 0 (a GET_CHUNK's object lands there). A
 * connection that served before and is found closed is opened again once:
 * the server closes idle ones. Returns 0 or -errno (remote_fail decides). */
int remote_call(struct remote_session *s, size_t i, struct stg_msg *req, uint8_t want,
		size_t pool, struct stg_msg *ret);

/* After an error on server i's connection: closes it; a network failure
 * (not an answer such as "no such chunk") marks the server down. */
void remote_fail(struct remote_session *s, size_t i, int r);

/* One version as the servers list it. */
struct remote_version {
	char *path;
	struct stg_list_entry e;  /* path points to .path */
	uint64_t servers;         /* bit i: server i holds the manifest */
};

/* Lists uid's versions under prefix (NULL: all) from every server that
 * answers, merged, sorted by path then version; with deleted_too, the
 * versions of deleted paths too, STG_LIST_ENTRY_DELETED in their flags
 * (those of names renamed away never). *ret_reached counts the servers
 * that answered. The servers are asked all at once, each by a thread.
 * Returns 0 or -errno. */
int remote_list(struct remote *rm, const char *prefix, bool deleted_too,
		struct remote_version **ret, size_t *ret_n, size_t *ret_reached);
void remote_list_free(struct remote_version *v, size_t n);

/* Fetches and validates the manifest of path's version (0: newest), trying
 * the servers of mask (all when 0) in the path's placement order. Returns
 * 0, -ENOENT or -errno. */
int remote_get_manifest(struct remote *rm, const char *path, uint64_t version, uint64_t mask,
			struct stg_manifest *ret);

/* The distinct parts of a job's version (docs/CAPTURE.md) that the servers
 * of mask hold as path's version id, one manifest each: a server that was
 * down when one node shipped its part under the id may hold another node's
 * part under it, which that node re-minted (docs/FORMAT.md, "Version ids").
 * Over the connections of s, kept open for the next call.
 * Returns how many (*ret malloc'ed; each manifest released with
 * stg_manifest_done), or -ENOENT / -errno when none could be read. */
ssize_t remote_get_parts(struct remote_session *s, const char *path, uint64_t version,
			 uint64_t mask, struct stg_manifest **ret);

/* Rebuilds m's content into fd (from offset 0, size set), fetching chunks
 * from the servers with several threads, each chunk from its replicas in
 * order: a copy that fails verification is reported and the next replica
 * used. Returns 0, or -ENOENT / -EBADMSG naming the chunk in *ret_chunk. */
int remote_materialize(struct remote *rm, const char *path, const struct stg_manifest *m,
		       int fd, void (*progress)(void *arg, uint64_t done, uint64_t total),
		       void *arg, uint64_t *ret_chunk);

/* Fetches chunk i of m (a version of path) into buf from the first of its
 * replicas with a good copy, over the connections of s, as
 * remote_materialize does. Returns 0, or -ENOENT / -EBADMSG when no server
 * has a good copy, or -errno. */
int remote_fetch_chunk(struct remote_session *s, const char *path, const struct stg_manifest *m,
		       uint32_t i, uint8_t *buf);
