/* SPDX-License-Identifier: MIT */
/* The node-local cache directory and its content-addressed chunk objects. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunk.h"
#include "hash.h"

#define STG_CACHE_FORMAT 1

struct stg_cache {
	char *dir;
	int dirfd;
	int chunks_fd; /* chunks/: objects at chunks/<2 hex>/<32 hex> */
	int files_fd;  /* files/: one directory per captured path */
	int tmp_fd;    /* tmp/: shadow files of writes in progress */
	int usage_fd;  /* "usage": bytes of chunk objects, 8 bytes little-endian */
	uint64_t capacity; /* 0: only the file system limits the cache */
};

/* Opens the cache at dir, creating it (and its parents) when missing.
 * Returns 0, -EPROTO for a cache of another format, or -errno. */
int stg_cache_open(const char *dir, struct stg_cache **ret_cache);

void stg_cache_free(struct stg_cache *c);

/* Looks a chunk object up. Returns 1 with its validated header when present,
 * 0 when absent, -errno on error. A damaged object counts as absent. */
int stg_cache_chunk_stat(struct stg_cache *c, const struct stg_hash *h, uint32_t raw_len,
			 struct stg_chunk_header *ret_header);

/* Stores a chunk object under its hash, atomically (temporary name, then
 * rename): head then body (body may be NULL), so that a raw chunk is written
 * straight from the caller's buffer. It is durable only after a later syncfs
 * or fsync of the cache. Returns 0 or -errno. */
int stg_cache_chunk_put(struct stg_cache *c, const struct stg_hash *h, const uint8_t *head,
			size_t headlen, const uint8_t *body, size_t bodylen);

/* Stores len raw bytes as a chunk object while hashing them (one pass over
 * memory): the object is written unnamed and linked under its hash when
 * complete. *ret_stored is false when the cache already had it. Returns 0 or
 * -errno. */
int stg_cache_chunk_put_hashing(struct stg_cache *c, const void *data, size_t len,
				struct stg_hash *ret_hash, bool *ret_stored);

/* Reads, decodes and verifies a chunk into out (raw_len bytes). scratch must
 * hold stg_chunk_bound(raw_len) bytes. Returns 0, -ENOENT, -EBADMSG or -errno. */
int stg_cache_chunk_read(struct stg_cache *c, const struct stg_hash *h, uint32_t raw_len,
			 uint8_t *out, uint8_t *scratch);

/* The relative path of a chunk object ("chunks/ab/ab..."), for messages and tests. */
void stg_cache_chunk_relpath(const struct stg_hash *h, char out[64]);

/* Accounts for bytes about to be stored; -ENOSPC when that would exceed the
 * capacity. stg_cache_chunk_put() does this itself. */
int stg_cache_reserve(struct stg_cache *c, uint64_t bytes);

/* Gives back a reservation that was not used. */
void stg_cache_reserve_undo(struct stg_cache *c, uint64_t bytes);

/* Bytes of chunk objects in the cache, as accounted. */
uint64_t stg_cache_usage(struct stg_cache *c);

/* Replaces the accounted usage (the collector counts it exactly). */
int stg_cache_set_usage(struct stg_cache *c, uint64_t bytes);

/* Makes everything written to the cache so far durable. Returns 0 or -errno. */
int stg_cache_sync(struct stg_cache *c);
