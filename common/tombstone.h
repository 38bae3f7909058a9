/* SPDX-License-Identifier: MIT */
/* A path's deletion (docs/STORE.md, "Deletions"): which of its versions
 * went (up to an id, so that a version written after stays), when, and for
 * how long they stay restorable. A server keeps it as the file "deleted" of
 * the path's directory; DELETE_PATH carries the same fields. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STG_TOMBSTONE_MAGIC "SHDL"
#define STG_TOMBSTONE_FORMAT 1
#define STG_TOMBSTONE_SIZE 40

/* The name went by a rename: its content lives on under the new name, so
 * the old one is no deleted file to list or keep. */
#define STG_TOMBSTONE_RENAMED 1u

struct stg_tombstone {
	uint64_t upto;     /* the newest version id deleted */
	int64_t at_ns;     /* when (the deleting node's clock) */
	uint32_t retain_s; /* restorable this long after at_ns (keep_deleted) */
	uint32_t flags;    /* STG_TOMBSTONE_* */
};

void stg_tombstone_encode(const struct stg_tombstone *t, uint8_t out[STG_TOMBSTONE_SIZE]);

/* Checks every field and the checksum. Returns 0, -EPROTONOSUPPORT (a later
 * format) or -EBADMSG. */
int stg_tombstone_decode(const uint8_t *buf, size_t len, struct stg_tombstone *ret);

/* t and u as one: the newer of the two ids (deletions only ever cover
 * more), the later time, a retention that keeps each one's versions as
 * long as it said, and RENAMED only if both were renames. */
struct stg_tombstone stg_tombstone_merge(const struct stg_tombstone *t,
					 const struct stg_tombstone *u);

/* Has the retention of t run out at now_ns? */
bool stg_tombstone_expired(const struct stg_tombstone *t, int64_t now_ns);
/* When it expires (ns, the deleting node's clock). */
int64_t stg_tombstone_expiry(const struct stg_tombstone *t);
