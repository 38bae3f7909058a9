/* SPDX-License-Identifier: MIT */
/* The policy file: which paths are captured and how (INI, docs/POLICY.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunk.h"
#include "chunker.h"

enum stg_durability {
	STG_DURABILITY_ASYNC,
	STG_DURABILITY_LOCAL,
	STG_DURABILITY_REPLICATED,
};

enum stg_transport_kind {
	STG_TRANSPORT_AUTO,
	STG_TRANSPORT_RDMA,
	STG_TRANSPORT_TCP,
};

struct stg_path_rule {
	char *glob;          /* absolute fnmatch pattern; a trailing slash-star-star matches a subtree */
	uint32_t chunk_size; /* power of two, STG_CHUNK_MIN..STG_CHUNK_MAX; cdc: the average */
	enum stg_chunking chunking; /* chunking = fixed | cdc */
	bool chunking_given; /* chunking written out; else cdc, or fixed where
			      * the rule asks what only fixed chunks do */
	bool dedup;          /* dedup = previous */
	bool delta;          /* delta = xor: the flusher ships each chunk as its XOR
			      * with the previous version's at its offset, where
			      * that is smaller (docs/STORE.md, "Delta objects") */
	struct stg_chunk_codec codec; /* compress = and filter = */
	enum stg_durability durability;
	uint32_t keep; /* versions kept per file, >= 1 */
	/* keep_deleted: how long a deleted file's versions stay restorable
	 * (seconds; 0: until the next collection). */
	uint32_t keep_deleted_s;
	bool shared_job; /* shared = job: a version is every rank's writes, from
			  * every node (docs/CAPTURE.md, "Shared files across nodes") */
	bool shared_node; /* shared = node written out: ranks of a job taking turns
			   * on a file make a version each, on purpose
			   * (docs/CAPTURE.md, "Ranks taking turns") */
	char *drain;   /* NULL, "in-place", or an absolute directory: where
			* each replicated version is materialized */
	int line;      /* where the section starts, for messages */
};

struct stg_policy {
	char *file;      /* the file it was read from */
	char *cache_dir; /* absolute */
	uint64_t capacity; /* bytes; 0 = no limit but the file system's */
	char *metrics_file; /* NULL, or absolute: where the flusher writes its
			     * Prometheus metrics (docs/METRICS.md) */
	bool has_cluster;
	char *servers;       /* as written */
	char **server_list;  /* parsed: "host:port" each */
	size_t nservers;
	uint32_t replicas;
	enum stg_transport_kind transport;
	char *secret_file;
	bool munge;          /* auth = munge: MUNGE credentials instead of secret_file */
	char *munge_socket;  /* NULL: libmunge's default */
	/* The user the servers run as, whose MUNGE credentials a client takes
	 * as a server's (besides root's): a name or a uid. NULL: "stagehand". */
	char *munge_server_user;
	uint32_t timeout_s;  /* a server that does not answer within this is down */
	struct stg_path_rule *rules;
	size_t nrules, caprules;
};

#define STG_CHUNK_MIN (64u << 10)
/* The largest chunk any format holds: versions staged with 32M and 64M
 * chunks, which policies took before STG_CHUNK_SIZE_MAX, still restore. */
#define STG_CHUNK_MAX (64u << 20)
/* The largest fixed chunk_size: a writer holds a few chunks (the pack
 * writer's buffer, the chunk encoded, a filter's scratch) within the shim's
 * memory bound (bench/RESULTS.md). */
#define STG_CHUNK_SIZE_MAX (16u << 20)
/* The largest average of content-defined chunks: they reach 4 x the
 * average, and the shim's staging holds a few of the largest (its memory
 * bound, bench/RESULTS.md). */
#define STG_CDC_AVERAGE_MAX (4u << 20)
#define STG_CHUNK_DEFAULT (1u << 20)
#define STG_KEEP_DEFAULT 3u
/* An hour: a job that deletes old steps as it goes holds at most an hour of
 * them, and a mistaken rm can be undone while the job is restarted
 * (docs/POLICY.md, `keep_deleted`). */
#define STG_KEEP_DELETED_DEFAULT 3600u

/* Finds the policy file: $STAGEHAND_POLICY, ./stagehand.conf, /etc/stagehand/policy.conf.
 * Returns a malloc'ed path, or NULL when none exists. */
char *stg_policy_locate(void);

/* Reads and validates a policy file. On failure returns -errno and, if err is
 * not NULL, writes a message naming file:line into err. */
int stg_policy_load(const char *path, struct stg_policy **ret_policy, char *err, size_t errlen);

void stg_policy_free(struct stg_policy *p);

/* The first rule matching the absolute, normalized path, or NULL. Paths inside
 * the cache directory never match. */
const struct stg_path_rule *stg_policy_match(const struct stg_policy *p, const char *abspath);

/* Can a file directly inside the absolute directory dir match some rule? */
bool stg_policy_may_contain(const struct stg_policy *p, const char *dir);

/* Parses "123", "64K", "1M", "50G", "2T" (binary units, optional "B"/"iB").
 * Returns 0 or -EINVAL. */
int stg_parse_size(const char *s, uint64_t *ret_bytes);

const char *stg_durability_name(enum stg_durability d);
