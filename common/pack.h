/* SPDX-License-Identifier: MIT */
/* Pack files: the chunk objects of the node cache, appended as records at
 * 4 KiB-aligned offsets of packs/<id>.pack, one pack per version being built. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "hash.h"
#include "chunk.h"
#include "manifest.h"

#define STG_PACK_ALIGN 4096u

/* A record's size on disk: header + payload, padded to the alignment. */
static inline uint64_t stg_pack_record_size(uint32_t stored_len)
{
	uint64_t n = 40u + (uint64_t)stored_len;
	return (n + STG_PACK_ALIGN - 1) & ~(uint64_t)(STG_PACK_ALIGN - 1);
}

struct stg_pack_writer;

/* A writer for a new pack; the file is created at the first record. Chunks
 * are at most max_chunk bytes. Returns 0 or -errno. */
int stg_pack_writer_new(struct stg_cache *c, uint32_t max_chunk, struct stg_pack_writer **ret);

/* Closes the pack (removing it if nothing was written). */
void stg_pack_writer_free(struct stg_pack_writer *w);

/* Closes and removes the pack, giving back the capacity its records took:
 * for a pack no manifest names, which nothing else may have found. */
void stg_pack_writer_discard(struct stg_pack_writer *w);

/* In a fork child: lets go of the parent's writer without touching the pack
 * or the parent's asynchronous I/O context (the parent goes on with both). */
void stg_pack_writer_forget(struct stg_pack_writer *w);
/* Asks the kernel to read the first page of these records of the pack (which
 * went around the page cache) into the page cache, in the background: for a
 * commit that will find them through the index, which checks each record's
 * header. */
void stg_pack_writer_warm(struct stg_pack_writer *w, const struct stg_manifest_entry *e, size_t n);
/* The writer's staging buffer for the next chunk's raw bytes (max_chunk bytes),
 * suitably aligned: callers fill it (copying while hashing), then append. */
uint8_t *stg_pack_writer_buffer(struct stg_pack_writer *w);

/* The buffer the staging buffer's chunk is encoded into (stg_chunk_bound
 * (max_chunk) bytes): the caller's while nothing is in flight (after
 * stg_pack_writer_flush) until the next append. */
uint8_t *stg_pack_writer_scratch(struct stg_pack_writer *w);

/* Appends the chunk in the staging buffer (len bytes, content hash h),
 * encoded as codec says when it pays. Fills e's location, lengths and flags
 * (NEW, ENCODED). Returns 0 or -errno (-ENOSPC past the capacity). */
int stg_pack_writer_append(struct stg_pack_writer *w, size_t len, const struct stg_hash *h,
			   const struct stg_chunk_codec *codec, struct stg_manifest_entry *e);

/* Copies an existing record (header + payload, as read from another pack)
 * into this one; e's location is updated. Returns 0 or -errno. */
int stg_pack_writer_copy(struct stg_pack_writer *w, const uint8_t *rec, size_t len,
			 struct stg_manifest_entry *e);

/* The id of the pack being written (0 before the first record). */
uint64_t stg_pack_writer_id(const struct stg_pack_writer *w);

/* Reads a whole record (header + payload) as stored, checking its header
 * against e. buf holds 40 + e->stored_len bytes. Returns 0 or -errno. */
int stg_pack_read_record(struct stg_cache *c, const struct stg_manifest_entry *e, uint8_t *buf);

/* Waits for the records in flight. Returns 0 or the first write error. */
int stg_pack_writer_flush(struct stg_pack_writer *w);

/* Makes the pack durable (fsync of the file and, once, of packs/). */
int stg_pack_writer_sync(struct stg_pack_writer *w);

/* Reads chunks, keeping the last packs it read from open: a restore reads
 * many in a row, and a version's chunks come from the packs of the versions
 * before it, in turns. */
#define STG_PACK_READER_FDS 8

struct stg_pack_reader {
	struct stg_cache *cache;
	struct {
		uint64_t pack; /* 0: the slot is free */
		int fd;
	} open[STG_PACK_READER_FDS];
	unsigned next; /* the slot taken when none is free */
	/* Another thread prefetches the records (stg_pack_reader_prefetch):
	 * the kernel then reads nothing beyond what is asked. */
	bool prefetched;
};

void stg_pack_reader_init(struct stg_pack_reader *r, struct stg_cache *c);
void stg_pack_reader_done(struct stg_pack_reader *r);

/* Reads and verifies the chunk an entry points at into out (e->raw_len
 * bytes); scratch holds stg_chunk_bound(e->raw_len) bytes (used for
 * compressed chunks). Returns 0, -ENOENT (no such pack), -EBADMSG (corrupt
 * or truncated) or -errno. */
int stg_pack_reader_read(struct stg_pack_reader *r, const struct stg_manifest_entry *e,
			 uint8_t *out, uint8_t *scratch);

/* Asks the disk for the record e points at, its bytes and no others, ahead
 * of its read: restore calls it from a thread of its own, with a reader of
 * its own, so that the records of a version come in while earlier ones are
 * decoded. Its errors are the read's to find. */
void stg_pack_reader_prefetch(struct stg_pack_reader *r, const struct stg_manifest_entry *e);

/* The same, for a single chunk. */
int stg_pack_read(struct stg_cache *c, const struct stg_manifest_entry *e, uint8_t *out,
		  uint8_t *scratch);

/* Checks that a record with this hash and these lengths sits where e points
 * (header only). Returns 1 if so, 0 if not, -errno. */
int stg_pack_check(struct stg_cache *c, const struct stg_manifest_entry *e);

/* "packs/<16 hex>.pack" */
void stg_pack_relpath(uint64_t pack, char out[48]);
/* Parses a pack file name; returns 0 or -EINVAL. */
int stg_pack_parse_name(const char *name, uint64_t *ret);
