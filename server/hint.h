/* SPDX-License-Identifier: MIT */
/* Hint files: the records of a sealed segment as index entries, so that a
 * restart reads them instead of the segment (Bitcask's hint files); and the
 * hint log of the segment appended to, which gets the entries of its
 * records as each sync makes them durable. A hint names the segment state
 * it describes; a missing, stale or damaged one only means that the
 * segment is scanned. See docs/STORE.md. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

#define STG_HINT_MAGIC "SHHT"
#define STG_HINT_FORMAT 1
#define STG_HINT_HEADER_SIZE 64
#define STG_HINT_ENTRY_SIZE 56
/* "<16 hex>.hint" */
#define STG_HINT_NAME_LEN 21
#define STG_HINT_LOG_MAGIC "SHHL"
/* "<16 hex>.hlog" */
#define STG_HINT_LOG_NAME_LEN 21

/* The segment a hint describes: its id and creation time (from its header)
 * and its size when the hint was written. */
struct stg_hint_key {
	uint64_t id;
	int64_t created_ns;
	uint64_t size;
};

struct stg_hint_entry {
	struct stg_hash hash;
	struct stg_hash base; /* a delta object's base; zero otherwise */
	uint64_t offset;      /* of the record in the segment */
	uint32_t len;         /* its body bytes */
	bool delta;
};

/* "<16 hex>.hint" into out[STG_HINT_NAME_LEN + 1]. */
void stg_hint_name(uint64_t id, char *out);
/* Parses a hint file name; returns 0 or -EINVAL. */
int stg_hint_parse_name(const char *name, uint64_t *ret);

void stg_hint_header_encode(uint8_t out[STG_HINT_HEADER_SIZE], const struct stg_hint_key *k,
			    uint64_t count);
/* Validates a header. Returns 0 or -EBADMSG. */
int stg_hint_header_decode(const uint8_t buf[STG_HINT_HEADER_SIZE], struct stg_hint_key *ret_key,
			   uint64_t *ret_count);

void stg_hint_entry_encode(uint8_t out[STG_HINT_ENTRY_SIZE], const struct stg_hint_entry *e);
/* Validates an entry, its record lying within the segment k. Returns 0 or
 * -EBADMSG. */
int stg_hint_entry_decode(const uint8_t buf[STG_HINT_ENTRY_SIZE], const struct stg_hint_key *k,
			  struct stg_hint_entry *ret);

/* Writes the hint of segment k in dirfd, durably (temporary name, fdatasync,
 * rename, directory fsync): its entries v[0..n), in the segment's order.
 * Returns 0 or -errno. */
int stg_hint_write(int dirfd, const struct stg_hint_key *k, const struct stg_hint_entry *v,
		   size_t n);

typedef int (*stg_hint_fn)(void *arg, const struct stg_hint_entry *e);

/* Calls fn for each entry of the hint of segment k, in order, once the
 * header checks out; each entry is checked before fn sees it, so a hint
 * damaged past its start has already given fn its first entries (the same
 * records a scan finds). Returns 0, -ENOENT (no hint), -ESTALE (a hint of
 * another state of the segment), -EBADMSG, fn's non-zero value or -errno. */
int stg_hint_read(int dirfd, const struct stg_hint_key *k, stg_hint_fn fn, void *arg);

/* "<16 hex>.hlog" into out[STG_HINT_LOG_NAME_LEN + 1]. */
void stg_hint_log_name(uint64_t id, char *out);
int stg_hint_log_parse_name(const char *name, uint64_t *ret);

/* Creates the hint log of segment k (its size unused) holding v[0..n),
 * durably, in place of any before. Returns a descriptor to append to, or
 * -errno. */
int stg_hint_log_create(int dirfd, const struct stg_hint_key *k, const struct stg_hint_entry *v,
			size_t n);

/* Opens the hint log of segment k to append to after its first entries
 * (those its reader took), cutting off whatever follows them. Returns a
 * descriptor or -errno. */
int stg_hint_log_reopen(int dirfd, const struct stg_hint_key *k, size_t entries);

/* Appends v[0..n) to a hint log. Nothing is synced: an entry lost or torn
 * by a crash only means that the start scans its record. */
int stg_hint_log_append(int fd, const struct stg_hint_entry *v, size_t n);

/* Calls fn for each entry of the hint log of segment k (k->size: its size
 * now), in order, up to the first that does not check out (a torn append)
 * or names a record past the segment's end. Returns 0, -ENOENT, -ESTALE
 * (a log of another segment of that id), -EBADMSG (its header), fn's
 * non-zero value or -errno. */
int stg_hint_log_read(int dirfd, const struct stg_hint_key *k, stg_hint_fn fn, void *arg);
