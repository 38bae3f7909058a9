/* SPDX-License-Identifier: MIT */
/* Builds one new version of a captured path: chunks in, manifest published. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "manifest.h"
#include "policy.h"

struct stg_builder;

struct stg_builder_stats {
	uint32_t chunks;       /* chunks in the version */
	uint32_t new_chunks;   /* chunk objects this version stored */
	uint32_t dedup_prev;   /* identical to the previous version's chunk */
	uint32_t dedup_cache;  /* already in the cache from another version or file */
	uint32_t zero_chunks;  /* holes and all-zero chunks, nothing stored */
	uint64_t stored_bytes; /* payload bytes written */
};

/* Starts a version of path under rule. Pins the cache against collection until
 * freed. Returns 0 or -errno. */
int stg_builder_new(struct stg_cache *c, const char *path, const struct stg_path_rule *rule,
		    struct stg_builder **ret);

void stg_builder_free(struct stg_builder *b);

/* In a fork child: lets go of the parent's builder (its descriptors, its
 * memory) without writing, syncing or removing anything. */
void stg_builder_forget(struct stg_builder *b);
/* The path the version will be published under (a rename while open). */
int stg_builder_set_path(struct stg_builder *b, const char *path);

/* Publishes the version as an open one (fsync while the writer goes on:
 * docs/FORMAT.md, "Open versions"), and/or removes the writer's previous
 * open version replaces (0: none) once it is published. */
void stg_builder_set_open(struct stg_builder *b, bool open, uint64_t replaces);

/* Publishes the version with the node's part of a job's version (shared =
 * job; NULL: a whole version). part stays the caller's, and must live until
 * the commit. */
void stg_builder_set_part(struct stg_builder *b, const struct stg_part *part);

/* Chunks it finds in packs made at or after ns (ns since the epoch, as file
 * times count; 0: none) were staged ahead for this version by the writers of
 * its file: they count as stored by it (STG_ENTRY_NEW, the stats). */
void stg_builder_set_staged_since(struct stg_builder *b, int64_t ns);
/* Commit without collecting what pruning freed (a later commit will): for a
 * caller that goes on using the chunk locations it recorded. */
void stg_builder_defer_collect(struct stg_builder *b);

/* Records chunk index with its bytes (a length the rule's chunker allows: for
 * fixed chunks the chunk size, except the last chunk; at most its maximum):
 * hashes, deduplicates, compresses and stores it. Returns 0 or -errno. */
int stg_builder_add(struct stg_builder *b, uint64_t index, const void *data, size_t len);

/* The staging buffer (the chunker's maximum length): fill it, then
 * stg_builder_add_buffered(). It changes after every chunk stored: ask again
 * each time. */
uint8_t *stg_builder_buffer(struct stg_builder *b);

/* Scratch of stg_chunk_bound(the chunker's maximum) bytes, for decoding a
 * chunk read back (stg_pack_read) between stg_builder_flush() and the next
 * chunk added: the builder encodes there otherwise. */
uint8_t *stg_builder_scratch(struct stg_builder *b);

/* Records chunk index from the first len bytes of the staging buffer. */
int stg_builder_add_buffered(struct stg_builder *b, uint64_t index, size_t len);

/* Stores the chunk in the first len bytes of the staging buffer, unless the
 * previous version has it at index or the cache has it already, without
 * recording it in this builder's version: staged ahead of the commit that
 * will find it (through the index, once stg_builder_keep() has run).
 * Returns 0 or -errno. */
int stg_builder_stage(struct stg_builder *b, uint64_t index, size_t len);
/* Makes the chunks stg_builder_stage() stored so far durable and indexed,
 * and keeps the pack when the builder is freed. Returns 0 or -errno. */
int stg_builder_keep(struct stg_builder *b);
/* Records chunk index as len zero bytes (a hole). */
int stg_builder_add_zero(struct stg_builder *b, uint64_t index, size_t len);

/* Publishes the version: size bytes, the chunks recorded from index 0 on
 * adding up to size, each of a length the chunker allows. Makes it
 * durable first when durability is local, prunes beyond keep. Returns the new
 * version number (> 0) or -errno. */
int64_t stg_builder_commit(struct stg_builder *b, uint64_t size, uint32_t mode, int64_t mtime_ns);

/* Records in b the chunks [0, n) that from has recorded (a version continued
 * after a commit). Returns 0 or -errno. */
int stg_builder_copy_entries(struct stg_builder *b, const struct stg_builder *from, uint64_t n);

/* Waits until the chunks stored so far are in the pack (before reading them
 * back). Returns 0 or -errno. */
int stg_builder_flush(struct stg_builder *b);

/* The entry recorded for chunk index, or NULL. */
const struct stg_manifest_entry *stg_builder_entry(const struct stg_builder *b, uint64_t index);

const struct stg_builder_stats *stg_builder_stats(const struct stg_builder *b);

/* Stages the whole content of fd (size bytes) as a new version of path, cut
 * as the rule says: fixed chunks with holes found by SEEK_DATA and not read,
 * or content-defined ones in one streaming pass (holes read as zeros). open
 * and replaces as for stg_builder_set_open, part as for
 * stg_builder_set_part, staged_since as for stg_builder_set_staged_since.
 * Returns the version or -errno. */
int64_t stg_commit_fd(struct stg_cache *c, const char *path, const struct stg_path_rule *rule,
		      int fd, uint64_t size, uint32_t mode, int64_t mtime_ns, bool open,
		      uint64_t replaces, const struct stg_part *part, int64_t staged_since);

/* The writer closed the file with nothing changed since the fsync that
 * published open_version: that version becomes closed, in place. Returns
 * open_version, or -ENOENT when it is gone (commit the content instead). */
int64_t stg_commit_close(struct stg_cache *c, const char *path, const struct stg_path_rule *rule,
			 uint64_t open_version);
