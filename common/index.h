/* SPDX-License-Identifier: MIT */
/* The dedup index: which pack record holds a chunk, by hash. 4096 append-only
 * bucket files index/<3 hex>, rewritten exactly by the collector. Advisory:
 * a record is used only after stg_pack_check() confirms it. */
#pragma once

#include <stdint.h>

#include "cache.h"
#include "manifest.h"

#define STG_INDEX_RECORD_SIZE 48

/* Finds a chunk by hash and raw length; on success fills *ret (hash,
 * lengths, ENCODED flag, location; never NEW). Returns 1 found, 0 not, -errno. */
int stg_index_lookup(struct stg_cache *c, const struct stg_hash *h, uint32_t raw_len,
		     struct stg_manifest_entry *ret);

/* Appends records for entries (the chunks a version stored). Returns 0 or -errno. */
int stg_index_add(struct stg_cache *c, const struct stg_manifest_entry *entries, size_t n);

/* Replaces the whole index with exactly these entries (the collector's live
 * set). Returns 0 or -errno. */
int stg_index_rewrite(struct stg_cache *c, const struct stg_manifest_entry *entries, size_t n);

/* Record codec, exposed for tests. */
void stg_index_encode(const struct stg_manifest_entry *e, uint8_t out[STG_INDEX_RECORD_SIZE]);
int stg_index_decode(const uint8_t in[STG_INDEX_RECORD_SIZE], struct stg_manifest_entry *ret);
