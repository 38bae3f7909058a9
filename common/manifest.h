/* SPDX-License-Identifier: MIT */
/* A version's manifest: its chunks by content hash and the file's metadata. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunker.h"
#include "hash.h"

#define STG_MANIFEST_MAGIC "SHMF"
/* Format 2 is format 1 plus header flags, 3 adds the part section, 4 content-
 * defined chunks. Each is written only when the one before cannot say it, so
 * that older readers still read what they can. */
#define STG_MANIFEST_FORMAT 4
#define STG_MANIFEST_HEADER_SIZE 64
#define STG_MANIFEST_ENTRY_SIZE 48
#define STG_MANIFEST_TRAILER_SIZE 8
#define STG_PART_MAGIC "SHPT"

enum stg_entry_flags {
	STG_ENTRY_ZERO = 1u << 0, /* all zero bytes, nothing stored (a hole) */
	STG_ENTRY_NEW = 1u << 1,  /* this version stored the chunk object */
	/* The chunk object's payload is encoded, not the raw bytes (written as
	 * "LZ4" before other codecs came: the meaning is the same). */
	STG_ENTRY_ENCODED = 1u << 2,
};
#define STG_ENTRY_KNOWN_FLAGS (STG_ENTRY_ZERO | STG_ENTRY_NEW | STG_ENTRY_ENCODED)

enum stg_manifest_flags {
	/* Committed by fsync while its writer still had the file open: the
	 * writer's next commit supersedes it (docs/FORMAT.md, "Open versions"). */
	STG_MANIFEST_OPEN = 1u << 0,
	/* One node's part of a version written by a parallel job on several
	 * nodes: the manifest has a part section (struct stg_part). */
	STG_MANIFEST_PART = 1u << 1,
};
#define STG_MANIFEST_KNOWN_FLAGS (STG_MANIFEST_OPEN | STG_MANIFEST_PART)

#define STG_PART_JOB_MAX 64           /* bytes of the job field, NUL included */
#define STG_PART_RANKS_MAX (1u << 24) /* ranks in a job */

struct stg_extent {
	uint64_t off, len;
};

/* A part names one version of a path across nodes (job and open count) and
 * says what this node's writers wrote (docs/FORMAT.md, "Manifest"). */
struct stg_part {
	char job[STG_PART_JOB_MAX]; /* the job step: 1..63 bytes 0x21..0x7e, then NUL */
	uint64_t node;              /* the writing node's id (its cache's), non-zero */
	uint32_t open;              /* which of the job's versions of the path, >= 1 */
	uint32_t nranks_job;        /* ranks in the job, 1 .. STG_PART_RANKS_MAX */
	uint32_t nranks;            /* this node's ranks that took part, 1 .. nranks_job */
	uint32_t *ranks;            /* ascending, unique, each < nranks_job */
	uint32_t nextents;          /* 0 when this node's ranks wrote nothing */
	struct stg_extent *extents; /* ascending, len > 0, at least 1 byte apart,
				     * within the manifest's size */
};

struct stg_manifest_entry {
	struct stg_hash hash;
	uint64_t at;         /* of the chunk in the file: not stored, the running
			      * sum of raw_len (set by decode, stg_manifest_place) */
	uint32_t raw_len;
	uint32_t stored_len; /* payload bytes of the chunk record; 0 for ZERO */
	uint32_t flags;
	uint64_t pack;       /* the pack holding the record; 0 for ZERO */
	uint64_t offset;     /* of the record in the pack, 4 KiB-aligned */
};

struct stg_manifest {
	uint64_t version; /* the version's id (version.h) */
	uint32_t flags;   /* enum stg_manifest_flags */
	uint64_t size;
	uint32_t chunk_size;          /* fixed: every chunk's but the last; cdc: the average */
	enum stg_chunking chunking;
	uint32_t chunk_min, chunk_max; /* every chunk's raw length but the last's is in
					* [chunk_min, chunk_max]; fixed: both chunk_size */
	uint32_t mode;    /* permission bits */
	int64_t mtime_ns; /* the file's modification time */
	int64_t commit_ns;
	uint32_t nchunks;
	struct stg_manifest_entry *entries;
	/* NULL: none. Owned by the manifest (stg_manifest_done frees it), so
	 * only a part from stg_part_new goes here. The encoder writes the PART
	 * flag iff part is set, whatever flags says; the decoder sets both. */
	struct stg_part *part;
};

/* Chunks needed for size bytes. */
static inline uint64_t stg_manifest_nchunks(uint64_t size, uint32_t chunk_size)
{
	return (size + chunk_size - 1) / chunk_size;
}

/* Bytes stg_manifest_encode writes for m, part section included. */
size_t stg_manifest_encoded_size(const struct stg_manifest *m);

/* Encodes m into out (stg_manifest_encoded_size bytes). Returns the length.
 * Writes what it is given: check a part with stg_part_valid first. */
size_t stg_manifest_encode(const struct stg_manifest *m, uint8_t *out);

/* Decodes and validates every field. On success *ret owns a malloc'ed entry
 * array and part (release with stg_manifest_done). Returns 0, -EBADMSG,
 * -EPROTONOSUPPORT (a later format than STG_MANIFEST_FORMAT, intact by its
 * trailer: whoever would drop what it cannot read must keep it) or
 * -ENOMEM. */
int stg_manifest_decode(const uint8_t *buf, size_t len, struct stg_manifest *ret);

/* The header flags of an encoded manifest, checking only its magic and
 * format (a quick look, not a validation). Returns the flags, -EBADMSG, or
 * -EPROTONOSUPPORT for a later format. */
int stg_manifest_peek_flags(const uint8_t *buf, size_t len);

/* The part key of an encoded manifest (it is fully decoded). Returns 1 and
 * fills the ret_* when it has a part section, 0 when not, or -EBADMSG or
 * -ENOMEM. */
int stg_manifest_peek_part(const uint8_t *buf, size_t len, char ret_job[STG_PART_JOB_MAX],
			   uint32_t *ret_open, uint64_t *ret_node);

/* Allocates a zeroed part with room for nranks ranks and nextents extents
 * (one block; the counts are set and may be lowered). Returns 0 or -ENOMEM. */
int stg_part_new(struct stg_part **ret, uint32_t nranks, uint32_t nextents);

void stg_part_free(struct stg_part *p);

/* Whether p satisfies every rule of the format for a file of size bytes. */
bool stg_part_valid(const struct stg_part *p, uint64_t size);

/* One part of a's job version and node with the ranks and extents of a and
 * b (valid ones), extents cut to size bytes: a node's sync superseding an
 * earlier sync of another rank keeps what that one said. Returns 0 or
 * -ENOMEM. */
int stg_part_merge(const struct stg_part *a, const struct stg_part *b, uint64_t size,
		   struct stg_part **ret);

/* Whether a and b (either may be NULL: no part) say the same. */
bool stg_part_equal(const struct stg_part *a, const struct stg_part *b);

/* Allocates entries for a file of size bytes in fixed chunks; returns 0,
 * -EFBIG or -ENOMEM. */
int stg_manifest_init(struct stg_manifest *m, uint64_t size, uint32_t chunk_size);

/* Allocates nchunks entries for a file of size bytes cut by a chunker like
 * c (its kind and bounds); returns 0, -EFBIG or -ENOMEM. */
int stg_manifest_init_chunked(struct stg_manifest *m, uint64_t size, const struct stg_chunker *c,
			      uint32_t nchunks);

/* Sets each entry's offset in the file (at) from the raw lengths, and checks
 * them: every length within the manifest's bounds (the last one may be
 * shorter), the lengths adding up to the size. Returns 0 or -EBADMSG. */
int stg_manifest_place(struct stg_manifest *m);

void stg_manifest_done(struct stg_manifest *m);

/* Bytes this version added to the store: the pack records of its NEW chunks,
 * headers and alignment included. */
uint64_t stg_manifest_stored_bytes(const struct stg_manifest *m);

/* Number of chunks this version stored itself. */
uint32_t stg_manifest_new_chunks(const struct stg_manifest *m);
