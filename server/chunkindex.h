/* SPDX-License-Identifier: MIT */
/* The server's in-memory chunk index: hash -> record location. 256 tables
 * chosen by the hash's first byte, each a Robin Hood table of packed
 * 28-byte slots kept 88% to 94% full, grown one table at a time by 1/16:
 * about 31 bytes per chunk, and no moment where an old and a new copy of
 * the whole index coexist. Not thread-safe: the store serializes access. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

/* Epochs are kept modulo this (stg_chunkindex_age). */
#define STG_CHUNKINDEX_EPOCHS 32u
/* The most references a slot counts; the store counts the rest. */
#define STG_CHUNKINDEX_REFS_MAX 255u
/* Record body lengths stay below this (the largest is about 64.3 MiB). */
#define STG_CHUNKINDEX_LEN_LIMIT (1u << 27)

struct stg_chunkindex_entry {
	struct stg_hash hash;
	uint32_t segment; /* segment id; never 0 */
	uint32_t offset;  /* of the record in the segment, in 8-byte units */
	uint32_t len;     /* record body bytes (the chunk object), < STG_CHUNKINDEX_LEN_LIMIT */
	uint32_t epoch;   /* of the last put or HAVE, modulo STG_CHUNKINDEX_EPOCHS */
	uint8_t refs;     /* references, up to STG_CHUNKINDEX_REFS_MAX (store-refs.c) */
};

struct stg_chunkindex;

/* Returns 0 or -ENOMEM. */
int stg_chunkindex_new(struct stg_chunkindex **ret);
void stg_chunkindex_free(struct stg_chunkindex *x);

/* Copies the entry of h into *ret; returns whether it is there. */
bool stg_chunkindex_get(const struct stg_chunkindex *x, const struct stg_hash *h,
			struct stg_chunkindex_entry *ret);

/* Inserts e unless its hash is present, in which case *ret_existing (if
 * not NULL) gets the entry there, left as it was. Returns 1 inserted, 0
 * present, -EINVAL (segment 0, len too large) or -ENOMEM. */
int stg_chunkindex_insert(struct stg_chunkindex *x, const struct stg_chunkindex_entry *e,
			  struct stg_chunkindex_entry *ret_existing);

/* Overwrites the entry of e->hash with e; returns whether it was there. */
bool stg_chunkindex_set(struct stg_chunkindex *x, const struct stg_chunkindex_entry *e);

/* Sets the epoch of h's entry; returns whether it is there. */
bool stg_chunkindex_touch(struct stg_chunkindex *x, const struct stg_hash *h, uint32_t epoch);

/* How many epochs before now e was last touched (0: in epoch now). */
static inline uint32_t stg_chunkindex_age(const struct stg_chunkindex_entry *e, uint32_t now)
{
	return (now - e->epoch) % STG_CHUNKINDEX_EPOCHS;
}

/* Removes h; returns whether it was present. */
bool stg_chunkindex_remove(struct stg_chunkindex *x, const struct stg_hash *h);

/* Makes room for about n entries in all, each table grown at most once (a
 * start that knows how many records its hints hold: inserting them into
 * tables grown a sixteenth at a time moved each entry 16 times). Returns 0
 * or -ENOMEM. */
int stg_chunkindex_reserve(struct stg_chunkindex *x, size_t n);

size_t stg_chunkindex_count(const struct stg_chunkindex *x);

/* Bytes of memory the index holds now, and the most it ever held at once
 * (a table's old and new slots together while it grows). */
size_t stg_chunkindex_memory(const struct stg_chunkindex *x);
size_t stg_chunkindex_memory_peak(const struct stg_chunkindex *x);

/* Calls fn with a copy of every entry; fn must not change the index. A
 * non-zero return stops and is returned. */
int stg_chunkindex_foreach(const struct stg_chunkindex *x,
			   int (*fn)(void *arg, const struct stg_chunkindex_entry *e), void *arg);
