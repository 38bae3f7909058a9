/* SPDX-License-Identifier: MIT */
/* The node-local cache directory: layout, format check, space accounting. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The newest cache format this stagehand reads and writes. Format 2 is
 * format 1 that may hold manifests of format 4 (content-defined chunks): an
 * older stagehand would take those for corrupt and collect their chunks, so
 * a cache is made format 2, which such a stagehand refuses, before its first
 * one is published (docs/FORMAT.md). */
#define STG_CACHE_FORMAT 2

struct stg_cache {
	char *dir;
	int dirfd;
	int packs_fd;  /* packs/: chunk records, packs/<16 hex>.pack */
	int index_fd;  /* index/: the dedup index buckets */
	int files_fd;  /* files/: one directory per captured path */
	int tmp_fd;    /* tmp/: shadow files of writes in progress */
	int usage_fd;  /* "usage": bytes of packs, 8 bytes little-endian */
	int queue_fd;  /* queue/: versions the flusher has still to ship */
	uint64_t capacity; /* 0: only the file system limits the cache */
	bool ship;     /* [cluster] is configured: queue every version published */
	uint64_t node; /* this cache's node id, once read (stg_cache_node_id) */
	unsigned format; /* of its FORMAT file, as last read or written */
};

/* Opens the cache at dir, creating it (and its parents) when missing.
 * Returns 0, -EPROTO for a cache of another format, -EPROTONOSUPPORT for one
 * of a later format, -EOPNOTSUPP on a file system without O_TMPFILE, or
 * -errno. */
int stg_cache_open(const char *dir, struct stg_cache **ret_cache);

/* Makes the cache at least format (rewriting FORMAT, durably) before it
 * holds what only that format allows. Returns 0 or -errno. */
int stg_cache_require_format(struct stg_cache *c, unsigned format);

/* Whether the cache and its directories are ours to trust: each belongs to
 * root or to this process's effective uid, and none may be written by group
 * or others (who would plant records that we publish and ship as ours).
 * Returns 0, or -EPERM with why ("'DIR' belongs to uid N ...") or -errno. */
int stg_cache_owned(const struct stg_cache *c, char *why, size_t whylen);

/* Why stg_cache_open failed with r, for a message. */
const char *stg_cache_strerror(int r);

void stg_cache_free(struct stg_cache *c);

/* Accounts for bytes about to be stored; -ENOSPC when that would exceed the
 * capacity. */
int stg_cache_reserve(struct stg_cache *c, uint64_t bytes);
/* In a fork child of a threaded process (the shim's): the lock that keeps
 * its threads' reservations apart starts afresh. */
void stg_cache_after_fork_child(void);

/* Gives back a reservation that was not used. */
void stg_cache_reserve_undo(struct stg_cache *c, uint64_t bytes);

/* Bytes of packs in the cache, as accounted. */
uint64_t stg_cache_usage(struct stg_cache *c);

/* Replaces the accounted usage with an exact count (the collector's, made
 * with gc.lock held exclusively), exact as of this mount of the cache's
 * file system. Returns 0 or -errno. */
int stg_cache_set_usage(struct stg_cache *c, uint64_t bytes);

/* Opens gc.lock and takes it (op: LOCK_SH while a version is built and
 * while restoring, LOCK_EX to collect; | LOCK_NB). Returns the descriptor,
 * closed to let go, or -errno (-EAGAIN: held, with LOCK_NB). */
int stg_cache_lock_packs(struct stg_cache *c, int op);

/* Bytes and number of the pack files, counted on disk. */
void stg_cache_count_packs(struct stg_cache *c, uint64_t *ret_packs, uint64_t *ret_bytes);

/* tmp/<dev>-<ino>.hold: the name of the lock file of the shadow with that
 * inode, which every process holding the shadow open flocks shared. */
void stg_cache_hold_name(dev_t dev, ino_t ino, char out[64]);

/* Does a process hold the shadow with that inode open (its hold file
 * locked)? */
bool stg_cache_shadow_held(struct stg_cache *c, dev_t dev, ino_t ino);

/* The node's id: a random number the cache keeps in "node", made the first
 * time it is asked for. A node whose cache is lost is a new node. Returns 0
 * when it cannot be read or made. */
uint64_t stg_cache_node_id(struct stg_cache *c);
