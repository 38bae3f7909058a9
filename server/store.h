/* SPDX-License-Identifier: MIT */
/* The server's chunk store: chunk objects appended to segment files, found
 * through an in-memory index rebuilt at start from the segments' hints. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

struct stg_store;

struct stg_store_options {
	uint64_t segment_size; /* a segment is sealed past this many bytes; 0: 1 GiB */
	uint64_t capacity;     /* bytes of segments at most; 0: only the disk limits */
};

/* Opens (creating when missing) the store in dir and rebuilds the index from
 * the hint files of the sealed segments and a scan of the newest one (and of
 * any sealed one without a hint that serves, whose hint is then written): a
 * torn or corrupt record at the tail of the newest segment is cut off, one
 * elsewhere is skipped and reported. A thread of the store writes the hint
 * of each segment sealed while it is open. Only one process
 * opens a store (flock): -EBUSY otherwise; -EPROTO for another format,
 * -EPROTONOSUPPORT for a later one. */
int stg_store_open(const char *dir, const struct stg_store_options *o, struct stg_store **ret);

/* The newest store format this server reads and writes. Format 2 is format
 * 1 that may hold manifests of format 4 (content-defined chunks), which an
 * older server would take for corrupt and collect the chunks of: a store is
 * made format 2 before its first one is filed (docs/STORE.md). Format 3 may
 * hold delta objects (chunk format 3), which older servers would take for
 * corrupt: a store is made format 3 before its first one is stored. Format
 * 4 may hold segments of format 2 (records not padded to 4096 bytes), which
 * older servers would ignore: a store is made format 4 before it creates
 * one, so at once for a new store. */
#define STG_STORE_FORMAT 4

/* Makes the store at least format (FORMAT rewritten durably) before it holds
 * what only that format allows. Returns 0 or -errno. */
int stg_store_require_format(struct stg_store *s, unsigned format);
void stg_store_free(struct stg_store *s);

/* The store's root directory descriptor (files/ lives beside segments/). */
int stg_store_dirfd(const struct stg_store *s);

/* Is a chunk with this hash stored? */
bool stg_store_has(struct stg_store *s, const struct stg_hash *h);

/* Validates a chunk object (SHCK header + payload, see docs/FORMAT.md):
 * header, lengths, decompression and the content hash. Returns 0 or
 * -EBADMSG. Does not touch the store (callers validate outside any lock). */
int stg_store_validate(const uint8_t *obj, size_t len, struct stg_hash *ret_hash);

/* Stores a chunk object already validated with stg_store_validate (h is its
 * hash). Storing a chunk already present is a no-op that returns 1 (the
 * bytes stored are not compared: stg_store_same does). A delta object is
 * decoded with its stored base and verified first (-ENOLINK: the base is not
 * stored; -EBADMSG: it does not decode to h); one that would make a chain
 * deeper than STG_CHUNK_DELTA_DEPTH is stored encoded on its own instead.
 * Durable only after stg_store_sync. Returns 0 (stored), 1 (it was
 * there), -ENOSPC or -errno. */
int stg_store_put(struct stg_store *s, const uint8_t *obj, size_t len, const struct stg_hash *h);

/* A chunk object read back: obj (len bytes) lies in mem, which
 * stg_store_obj_free releases. */
struct stg_store_obj {
	const uint8_t *obj;
	size_t len;
	void *mem;
};

/* Reads the chunk object of h, checking the record's checksum: a delta
 * object as it is (its reader fetches its base). Returns 0, -ENOENT,
 * -EBADMSG (the stored copy is corrupt) or -errno. */
int stg_store_get(struct stg_store *s, const struct stg_hash *h, struct stg_store_obj *ret);

void stg_store_obj_free(struct stg_store_obj *o);

/* Like stg_store_get, but a delta object is decoded with its chain and
 * encoded on its own (the codec and filter it used): for a reader who may
 * not see its base, which the delta and the chunk would reveal. */
int stg_store_get_whole(struct stg_store *s, const struct stg_hash *h, struct stg_store_obj *ret);

/* Does obj, a chunk object validated as h (a delta decodes with its stored
 * base), hold the same bytes as the stored chunk h? The hash is XXH3-128,
 * not collision-resistant: two users' chunks of one hash are compared byte
 * for byte before the second may count on the first's copy. Returns 1, 0
 * (they differ, or the stored copy is damaged), -ENOLINK (the delta's base
 * is not stored), -ENOENT (h is not stored) or -errno. */
int stg_store_same(struct stg_store *s, const struct stg_hash *h, const uint8_t *obj, size_t len);

/* Makes every put that returned before this call durable. */
int stg_store_sync(struct stg_store *s);

struct stg_store_stats {
	uint64_t chunks;        /* in the index */
	uint64_t chunk_bytes;   /* their record bytes */
	uint64_t segments;      /* segment files */
	uint64_t segment_bytes; /* their size on disk */
	uint64_t index_bytes;   /* memory held by the index */
	/* At open: bytes of segments scanned (the newest, and those without a
	 * hint that serves), records taken from hint files. */
	uint64_t recovery_scanned_bytes, recovery_hinted_records;
	/* The scrub: record bytes and records read, records found damaged,
	 * passes over all sealed segments completed. */
	uint64_t scrub_bytes, scrub_records, scrub_damaged, scrub_passes;
};
void stg_store_stats(struct stg_store *s, struct stg_store_stats *ret);

/* The scrub verifies the stored records in the background, as a read
 * would (checksums, the chunk's header and hash), one sealed segment after
 * the other; a damaged record is forgotten, so that clients send its chunk
 * again. The segment appended to is left to the reads. A cursor says where
 * it stands. */
struct stg_store_scrub;
int stg_store_scrub_new(struct stg_store_scrub **ret);
void stg_store_scrub_free(struct stg_store_scrub *c);
/* Verifies about budget bytes of records from where c stopped; stops at
 * the end of a pass. Returns the bytes read (0: nothing to verify, or a
 * pass just ended) or -errno. */
int64_t stg_store_scrub_step(struct stg_store *s, struct stg_store_scrub *c, uint64_t budget);

/* Collection by reference counts (docs/STORE.md, "Garbage collection"). A chunk is
 * kept while a held entry of a filed manifest names it (the caller counts
 * each with stg_store_ref when it files the manifest, and takes it back with
 * stg_store_unref when the version goes) or a stored delta is built on it
 * (counted by the store). A count may be taken for a chunk not stored now
 * (at a restart, one whose body was found damaged): it holds when the chunk
 * is put again. */
void stg_store_ref(struct stg_store *s, const struct stg_hash *h);
void stg_store_unref(struct stg_store *s, const struct stg_hash *h);
/* A reference could not be counted: nothing is collected until a restart
 * counts them all again. */
void stg_store_refs_lost(struct stg_store *s);
/* h's count (tests and checks). */
uint64_t stg_store_refs(struct stg_store *s, const struct stg_hash *h);
/* At open, once every filed manifest is counted: the chunks none refers to
 * become candidates. Nothing is collected before. */
void stg_store_refs_counted(struct stg_store *s);
/* A HAVE of h: keeps h (with no references yet: its manifest is on the way)
 * through this pass and the next. Returns whether h is stored. */
bool stg_store_touch(struct stg_store *s, const struct stg_hash *h);

/* A collection pass in two steps: stg_store_gc_begin turns the epoch; then
 * stg_store_gc_end drops the candidates still without references that were
 * neither put nor touched in this epoch or the one before, deletes segments
 * left empty, and compacts sealed segments at most half live by copying
 * their live records to the newest segment. Its work follows what changed:
 * the candidates, and the records of the segments compacted. Puts and gets
 * go on meanwhile; only index updates take the store's lock. */
void stg_store_gc_begin(struct stg_store *s);
struct stg_store_gc_result {
	uint64_t chunks_dropped, bytes_dropped;
	uint64_t segments_removed, segments_compacted;
	uint64_t bytes_moved;
	uint64_t candidates; /* chunks looked at */
};
int stg_store_gc_end(struct stg_store *s, struct stg_store_gc_result *ret);
