/* SPDX-License-Identifier: MIT */
/* The server's chunk store, as its parts (store*.c) share it: the store and
 * its segments, and the functions one part calls in another. Private to
 * server/. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bases.h"
#include "chunkindex.h"
#include "hint.h"
#include "segment.h"
#include "store.h"

#define FORMAT_FILE "FORMAT"
#define FORMAT_KIND "stagehand-store"
#define LOCK_FILE "lock"
#define FILES_DIR "files"
#define DEFAULT_SEGMENT_SIZE (1ull << 30)
/* Index offsets count, in 32 bits, units of the records' alignment: 8
 * bytes in format 2 (32 GiB per segment, with room for one record past
 * this limit), 4096 in an older release's format 1 (16 TiB). */
#define MAX_SEGMENT_SIZE (16ull << 30)

/* A segment file. The fd stays open while anyone holds a reference: the
 * table holds one while the segment is listed, each read, append or sync in
 * progress holds one. A segment is unlinked when compaction or collection
 * takes it out of the table, but a reader that found a record in it before
 * the index moved on still reads from the open (unlinked) file, so that no
 * reader ever needs the lock while it does I/O. */
struct seg {
	uint32_t id;
	unsigned format;    /* of its header: how its records are aligned */
	int64_t created_ns; /* from its header: a hint names it */
	int fd;
	atomic_int dfd;   /* the same file with O_DIRECT, for large records (or -1) */
	atomic_bool nodirect; /* no O_DIRECT here: refused, or not tried again */
	uint64_t end;     /* bytes reserved: where the next record goes */
	uint64_t live;    /* record bytes of the index entries pointing here */
	unsigned refs;
	unsigned writers; /* appends reserved and not finished */
	bool dirty;       /* appended to since the last sync */
	/* Its records as hint entries, gathered while it is appended to and
	 * written out as its hint file once it is sealed (the sealer). */
	struct stg_hint_entry *hints;
	size_t nhints, caphints;
	bool hints_lost; /* no memory for one: no hint, a scan at start */
	bool to_seal;    /* no longer appended to; its hint is not written yet */
	bool distrusted; /* a record found damaged: no hint or log may name it */
	/* The hint log of the segment appended to holds the entries of its
	 * records in their order in the segment, each durable and every record
	 * before it with it: a record goes to the log once a sync covered it
	 * and no append before it in the segment is still in flight. */
	int log_fd;
	bool log_failed;
	struct stg_hint_entry *unlogged; /* gathered, not in the log yet */
	size_t nunlogged, capunlogged;
	uint64_t *inflight; /* offsets of the appends reserved and not done */
	size_t ninflight, capinflight;
};

struct stg_store {
	int dirfd, segdirfd, lockfd;
	unsigned format; /* of its FORMAT file (under lock once open) */
	uint64_t segment_size, capacity;

	/* One collection at a time: two would pick the same segments. Held
	 * across I/O, but only collections ever wait for it. */
	pthread_mutex_t gc_lock;

	pthread_mutex_t format_lock; /* writing FORMAT */

	pthread_mutex_t lock; /* everything below; never held across I/O */
	struct stg_chunkindex *index;
	struct stg_bases *bases; /* of the delta objects the index holds */
	struct seg **segs; /* by id, ascending */
	size_t nsegs, capsegs;
	struct seg *active;
	uint64_t next_id;
	uint64_t total; /* bytes of the listed segments (their ends) */
	uint32_t epoch; /* collection passes begun */

	/* Reference counts (store-refs.c): the side tree of counts the index
	 * slots do not hold, and the candidates, chunks whose count is 0. */
	void *extra_refs;
	struct stg_hash *zeros;
	size_t nzeros, capzeros;
	bool zeros_incomplete; /* a candidate could not be listed */
	bool refs_counted;     /* the manifests' references are in */
	bool refs_broken;      /* a count was lost: drop nothing */
	bool bodies_damaged;   /* deltas may have lost their base */
	uint64_t refs_unmatched;

	bool rolling; /* a thread is creating the next segment */
	pthread_cond_t roll_cond;

	/* The sealer thread writes the hint files of sealed segments. */
	pthread_t sealer;
	bool sealer_running, stopping;
	pthread_cond_t seal_cond;

	/* At open: bytes of segments scanned, records taken from hints. */
	uint64_t recovery_scanned_bytes, recovery_hinted_records;
	/* The scrub's totals (stg_store_scrub_step). */
	uint64_t scrub_bytes, scrub_records, scrub_damaged, scrub_passes;

	/* Group commit: one thread runs a sync round while later callers wait
	 * for the round that starts after they arrived. */
	bool syncing;
	uint64_t sync_started, sync_done;
	int sync_err;
	pthread_cond_t sync_cond;
};


/* One sync round: fdatasync of every segment appended to since the last
 * round. Called with the lock held and s->syncing set; drops it meanwhile. */
/* A segment synced by a round, and the hint entries its hint log gets
 * once the fdatasync is done: those of the records before the first append
 * still in flight. */
struct synced {
	struct seg *g;
	struct stg_hint_entry *v;
	size_t n;
};

/* The index's unit of offsets in g. */
static inline uint64_t store_offset_unit(const struct seg *g)
{
	return g->format == 1 ? STG_SEGMENT_ALIGN : STG_SEGMENT_SMALL_ALIGN;
}

/* store-segments.c */
struct seg *store_seg_find(const struct stg_store *s, uint64_t id);
int store_table_reserve(struct stg_store *s);
void store_table_add(struct stg_store *s, struct seg *g);
void store_table_remove(struct stg_store *s, struct seg *g);
void store_seg_close(struct seg *g);
void store_seg_put(struct stg_store *s, struct seg *g);
uint64_t store_rsize_in(const struct seg *g, uint32_t len);
int store_seg_new(uint64_t id, unsigned format, int64_t created_ns, int fd, struct seg **ret);
int store_seg_direct_fd(struct stg_store *s, struct seg *g);
int store_roll(struct stg_store *s);
void store_unlink_segments(struct stg_store *s, struct seg **v, size_t n);
bool store_sealed(const struct stg_store *s, const struct seg *g);

/* store-hints.c */
void store_open_hint_log(struct stg_store *s, struct seg *g);
void store_reopen_hint_log(struct stg_store *s, struct seg *g, size_t logged);
int store_entries_push(struct stg_hint_entry **v, size_t *n, size_t *cap,
		       const struct stg_hint_entry *e);
void store_hint_push(struct seg *g, const struct stg_hash *h, uint64_t off, uint32_t len,
		     const struct stg_hash *base);
void store_inflight_done(struct seg *g, uint64_t off);
void store_take_loggable(struct seg *g, struct synced *y);
void store_log_synced(struct stg_store *s, struct synced *y);
int store_write_hint(struct stg_store *s, struct seg *g, struct stg_hint_entry *v, size_t n);
void store_distrust_hints(struct stg_store *s, struct seg *g);
void *store_sealer_main(void *arg);

/* store.c */
int store_reserve(struct stg_store *s, uint32_t len, bool compaction, struct seg **ret_g,
		  uint64_t *ret_off);
int store_write_record(struct seg *g, uint64_t off, const uint8_t *hdr, const uint8_t *body,
		       uint32_t len);
void store_append_done(struct stg_store *s, struct seg *g, bool ok, const struct stg_hash *h,
		       uint64_t off, uint32_t len, const struct stg_hash *base);
int store_read_record(struct stg_store *s, struct seg *g, uint64_t off, uint32_t len,
		      const struct stg_hash *h, uint8_t **ret_mem);
void store_forget_damaged(struct stg_store *s, const struct stg_hash *h, struct seg *g,
			  uint64_t off);

/* store-refs.c; all but the last two with the lock held */
void store_ref_locked(struct stg_store *s, const struct stg_hash *h);
void store_unref_locked(struct stg_store *s, const struct stg_hash *h);
/* e was just inserted (with no references); base: the delta's base. */
void store_body_added(struct stg_store *s, struct stg_chunkindex_entry *e,
		      const struct stg_hash *base);
/* Removes e's entry and its base link; its references stay counted. */
void store_body_removed(struct stg_store *s, const struct stg_chunkindex_entry *e);
void store_find_candidates(struct stg_store *s);
void store_refs_from_bases(struct stg_store *s);
void store_refs_free(struct stg_store *s);

/* store-delta.c */
int store_check_delta(struct stg_store *s, const uint8_t *obj, size_t len,
		      const struct stg_hash *h, const struct stg_hash *base, uint8_t **ret_plain,
		      size_t *ret_plain_len);

/* store-gc.c */
int store_drop_orphans(struct stg_store *s);

/* store-recover.c */
int store_recover(struct stg_store *s);
