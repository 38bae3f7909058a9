/* SPDX-License-Identifier: MIT */
/* Version ids: one number per version of a captured path, minted by the
 * writer alone, unique and in commit order on every node (docs/FORMAT.md,
 * "Version ids"). */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* The low bits of an id: a sequence number, the writer's idea of how many
 * versions the path had. The high bits: a clock in units of 2^20 ns. */
#define STG_VERSION_SEQ_BITS 20
#define STG_VERSION_SEQ_MASK ((UINT64_C(1) << STG_VERSION_SEQ_BITS) - 1)

/* The id of a new version of a path whose newest known version is newest (0:
 * none), committed at now_ns: newer than newest, and than every id minted
 * before now_ns on any node whose clock agrees with this one. When it takes
 * the place of version replaces (an open version it supersedes; 0: none)
 * and that is the newest, it keeps its sequence number. */
uint64_t stg_version_mint(uint64_t newest, uint64_t replaces, int64_t now_ns);

/* The sequence number an id carries (ids of caches and stores from before
 * version ids: the id itself). */
uint64_t stg_version_seq(uint64_t id);

/* The numbers users see, 1, 2, ...: for ids sorted ascending, out[i] is the
 * larger of out[i-1] + 1 and ids[i]'s sequence number. Where every writer
 * knew the path's history these are the sequence numbers themselves, stable
 * when old versions are pruned. */
void stg_version_numbers(const uint64_t *ids, size_t n, uint64_t *out);

/* The id shown as number among ids (sorted ascending), or 0. */
uint64_t stg_version_by_number(const uint64_t *ids, size_t n, uint64_t number);
