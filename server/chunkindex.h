/* SPDX-License-Identifier: MIT */
/* The server's in-memory chunk index: hash -> record location, an open
 * addressing table of 32-byte entries (linear probing, backward-shift
 * deletion). Not thread-safe: the store serializes access. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

struct stg_chunkindex_entry {
	struct stg_hash hash;
	uint32_t segment; /* segment id; never 0 (0 marks an empty slot) */
	uint32_t offset;  /* of the record in the segment, in 4096-byte units */
	uint32_t len;     /* record body bytes (the chunk object) */
	uint32_t epoch;   /* garbage collection epoch of the last mark */
};

struct stg_chunkindex;

/* A table sized for about hint entries. Returns 0 or -ENOMEM. */
int stg_chunkindex_new(size_t hint, struct stg_chunkindex **ret);
void stg_chunkindex_free(struct stg_chunkindex *x);

/* The entry of h, or NULL. The pointer is valid until the next insert or remove. */
struct stg_chunkindex_entry *stg_chunkindex_find(const struct stg_chunkindex *x,
						 const struct stg_hash *h);

/* Inserts a copy of e unless its hash is present. *ret points to the entry in
 * the table (the new one, or the existing one left as it was). Returns 1
 * inserted, 0 present, -EINVAL (e->segment is 0) or -ENOMEM. */
int stg_chunkindex_insert(struct stg_chunkindex *x, const struct stg_chunkindex_entry *e,
			  struct stg_chunkindex_entry **ret);

/* Removes h; returns whether it was present. */
bool stg_chunkindex_remove(struct stg_chunkindex *x, const struct stg_hash *h);

size_t stg_chunkindex_count(const struct stg_chunkindex *x);

/* Bytes of memory the table holds. */
size_t stg_chunkindex_memory(const struct stg_chunkindex *x);

/* Calls fn for every entry; fn may change anything but the hash and segment,
 * and must not insert or remove. A non-zero return stops and is returned. */
int stg_chunkindex_foreach(struct stg_chunkindex *x,
			   int (*fn)(void *arg, struct stg_chunkindex_entry *e), void *arg);
