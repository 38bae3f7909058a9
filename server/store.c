/* SPDX-License-Identifier: MIT */
/* The server's chunk store: segments, the index, puts, gets, sync and GC. */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bases.h"
#include "chunk.h"
#include "chunkindex.h"
#include "hint.h"
#include "log.h"
#include "ringio.h"
#include "segment.h"
#include "thread.h"
#include "util.h"

#define FORMAT_FILE "FORMAT"
#define FORMAT_KIND "stagehand-store"
#define LOCK_FILE "lock"
#define FILES_DIR "files"
#define DEFAULT_SEGMENT_SIZE (1ull << 30)
/* Index offsets count 8-byte units in 32 bits: 32 GiB per segment, with
 * room for one record past the limit. */
#define OFFSET_UNIT 8u
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
	uint32_t epoch;

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

static struct seg *seg_find(const struct stg_store *s, uint64_t id)
{
	size_t lo = 0, hi = s->nsegs;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->segs[mid]->id == id)
			return s->segs[mid];
		if (s->segs[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Makes room for one more segment in the table (memory only). */
static int table_reserve(struct stg_store *s)
{
	if (s->nsegs < s->capsegs)
		return 0;
	size_t cap = s->capsegs ? s->capsegs * 2 : 16;
	struct seg **n = realloc(s->segs, cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	s->segs = n;
	s->capsegs = cap;
	return 0;
}

/* Appends g (ids only grow); table_reserve made room. */
static void table_add(struct stg_store *s, struct seg *g)
{
	s->segs[s->nsegs++] = g;
	s->total += g->end;
}

static void table_remove(struct stg_store *s, struct seg *g)
{
	for (size_t i = 0; i < s->nsegs; i++) {
		if (s->segs[i] != g)
			continue;
		memmove(&s->segs[i], &s->segs[i + 1], (s->nsegs - i - 1) * sizeof(*s->segs));
		s->nsegs--;
		s->total -= g->end;
		return;
	}
}

static void seg_close(struct seg *g)
{
	if (g->fd >= 0)
		close(g->fd);
	if (g->dfd >= 0)
		close(g->dfd);
	if (g->log_fd >= 0)
		close(g->log_fd);
	free(g->hints);
	free(g->unlogged);
	free(g->inflight);
	free(g);
}

/* Drops a reference taken under the lock; the last one closes the file,
 * outside the lock (closing an unlinked file frees its blocks). */
static void seg_put(struct stg_store *s, struct seg *g)
{
	pthread_mutex_lock(&s->lock);
	bool last = --g->refs == 0;
	pthread_mutex_unlock(&s->lock);
	if (last)
		seg_close(g);
}

/* Bytes a record of len body bytes takes in g. */
static uint64_t rsize_in(const struct seg *g, uint32_t len)
{
	return stg_segment_record_size(g->format, len);
}

static int seg_new(uint64_t id, unsigned format, int64_t created_ns, int fd, struct seg **ret)
{
	struct seg *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->id = (uint32_t)id;
	g->format = format;
	g->created_ns = created_ns;
	g->fd = fd;
	g->dfd = -1;
	g->log_fd = -1;
	g->end = STG_SEGMENT_HEADER_SIZE;
	g->refs = 1;
	*ret = g;
	return 0;
}

/* Large records are appended and read with O_DIRECT where the file system
 * takes it (write_record, read_record): the segment appended to gets a
 * second descriptor for them at once, the others when a large record is
 * first read. Not where a page holds several records' alignments (64 KiB
 * pages): a page written both ways could be written back stale over a
 * record. Returns the descriptor, or -1 (then the page cache serves). */
static int seg_direct_fd(struct stg_store *s, struct seg *g)
{
	int fd = atomic_load(&g->dfd);
	if (fd >= 0 || atomic_load(&g->nodirect))
		return fd;
	if (sysconf(_SC_PAGESIZE) > (long)STG_SEGMENT_ALIGN) {
		atomic_store(&g->nodirect, true);
		return -1;
	}
	char name[STG_SEGMENT_NAME_LEN + 1];
	stg_segment_name(g->id, name);
	fd = openat(s->segdirfd, name, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (fd < 0) {
		/* Refused: for good. Out of descriptors: tried again later. */
		if (errno == EINVAL)
			atomic_store(&g->nodirect, true);
		return -1;
	}
	/* Opened without the store's lock: two readers may race to it. */
	int none = -1;
	if (!atomic_compare_exchange_strong(&g->dfd, &none, fd)) {
		close(fd);
		fd = none;
	}
	return fd;
}

/* Gives segment g, about to be appended to, a hint log holding its
 * gathered entries. Without one (an error, logged), the next start scans
 * the segment. */
static void open_hint_log(struct stg_store *s, struct seg *g)
{
	struct stg_hint_key k = {.id = g->id, .created_ns = g->created_ns};
	int fd = stg_hint_log_create(s->segdirfd, &k, g->hints, g->nhints);
	if (fd < 0) {
		stg_log_errno(STG_LOG_WARN, fd, "store: cannot create the hint log of segment "
			      "%016" PRIx32 "; a restart scans it", g->id);
		return;
	}
	g->log_fd = fd;
}

/* Gives the newest segment at start its hint log back, its first logged
 * entries kept and the rest of g's appended. */
static void reopen_hint_log(struct stg_store *s, struct seg *g, size_t logged)
{
	struct stg_hint_key k = {.id = g->id, .created_ns = g->created_ns};
	int fd = stg_hint_log_reopen(s->segdirfd, &k, logged);
	if (fd < 0) {
		open_hint_log(s, g);
		return;
	}
	int r = stg_hint_log_append(fd, g->hints + logged, g->nhints - logged);
	if (r < 0) {
		close(fd);
		open_hint_log(s, g);
		return;
	}
	g->log_fd = fd;
}

/* Creates segment id under a temporary name and renames it into place once
 * its header is durable, so that a segment file with a bad header is never
 * the leftover of a crash but real damage. */
static int segment_create(struct stg_store *s, uint64_t id, struct seg **ret)
{
	char name[STG_SEGMENT_NAME_LEN + 1], tmp[STG_SEGMENT_NAME_LEN + 8];
	/* A segment of format 2 is damage to an older server: the store says
	 * so first. */
	int r = stg_store_require_format(s, 4);
	if (r < 0)
		return r;
	stg_segment_name(id, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	int fd = openat(s->segdirfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	uint8_t hdr[STG_SEGMENT_HEADER_SIZE];
	int64_t created_ns = stg_now_ns();
	stg_segment_header_encode(hdr, STG_SEGMENT_FORMAT, id, created_ns);
	r = stg_pwrite_all(fd, hdr, sizeof(hdr), 0);
	if (r < 0)
		goto out_unlink;
	if (fdatasync(fd) < 0 || renameat(s->segdirfd, tmp, s->segdirfd, name) < 0) {
		r = -errno;
		goto out_unlink;
	}
	if (fsync(s->segdirfd) < 0) {
		r = -errno;
		goto out_close; /* the name exists; recovery will find it empty */
	}
	r = seg_new(id, STG_SEGMENT_FORMAT, created_ns, fd, ret);
	if (r < 0)
		goto out_close;
	seg_direct_fd(s, *ret);
	open_hint_log(s, *ret);
	return 0;

out_unlink:
	unlinkat(s->segdirfd, tmp, 0);
out_close:
	close(fd);
	return r;
}

/* Called and returns with the lock held; creates the next segment without
 * it and makes it the active one. */
static int roll(struct stg_store *s)
{
	if (s->next_id > UINT32_MAX)
		return -EOVERFLOW;
	int r = table_reserve(s);
	if (r < 0)
		return r;
	uint64_t id = s->next_id++;
	s->rolling = true;
	pthread_mutex_unlock(&s->lock);
	struct seg *g = NULL;
	r = segment_create(s, id, &g);
	if (r < 0)
		stg_log_errno(STG_LOG_ERROR, r, "store: cannot create segment %016" PRIx64, id);
	pthread_mutex_lock(&s->lock);
	s->rolling = false;
	pthread_cond_broadcast(&s->roll_cond);
	if (r < 0)
		return r;
	table_add(s, g); /* only roll() adds, one at a time: the room is still there */
	if (s->active) {
		s->active->to_seal = true;
		pthread_cond_signal(&s->seal_cond);
	}
	s->active = g;
	return 0;
}

/* Reserves room for a record of len body bytes at the end of the active
 * segment (rolling to a new one when it would pass segment_size) and takes
 * a reference on it as a writer. Compaction may pass the capacity: it
 * frees more than it takes. Returns 0, -ENOSPC or -errno. */
static int reserve(struct stg_store *s, uint32_t len, bool compaction, struct seg **ret_g,
		   uint64_t *ret_off)
{
	int r = 0;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct seg *g = s->active;
		uint64_t rsize = rsize_in(g, len);
		uint64_t at = stg_segment_record_place(g->format, len, g->end);
		bool fits = g->end == STG_SEGMENT_HEADER_SIZE || at + rsize <= s->segment_size;
		uint64_t need = fits ? at - g->end + rsize : rsize + STG_SEGMENT_HEADER_SIZE;
		if (!compaction && s->capacity && s->total + need > s->capacity) {
			r = -ENOSPC;
			break;
		}
		if (fits && g->log_fd >= 0 && !g->log_failed &&
		    g->ninflight == g->capinflight) {
			size_t cap = g->capinflight ? g->capinflight * 2 : 16;
			uint64_t *v = realloc(g->inflight, cap * sizeof(*v));
			if (!v) {
				r = -ENOMEM;
				break;
			}
			g->inflight = v;
			g->capinflight = cap;
		}
		if (fits) {
			if (g->log_fd >= 0 && !g->log_failed)
				g->inflight[g->ninflight++] = at;
			*ret_off = at;
			s->total += at + rsize - g->end;
			g->end = at + rsize;
			g->writers++;
			g->refs++;
			*ret_g = g;
			break;
		}
		if (s->rolling) {
			pthread_cond_wait(&s->roll_cond, &s->lock);
			continue;
		}
		r = roll(s);
		if (r < 0)
			break;
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Records of STG_SEGMENT_DIRECT_MIN bytes and more go to and from the disk
 * with O_DIRECT: copying them through the page cache cost the server more
 * than receiving and verifying them, and more than sending them (two
 * servers restoring 2 GiB used 2.7 s of CPU through the page cache, 1.2 s
 * without; a segment is read back only for restores and collections).
 * Smaller ones do not: a session writes its records one after the other,
 * and the disk's wait for each costs more than the copy (64 KiB records
 * took a flush twice as long). Such records lie in whole 4096-byte blocks. */
static bool direct_record(const struct seg *g, uint32_t len)
{
	return stg_segment_record_align(g->format, len) == STG_SEGMENT_ALIGN &&
	       rsize_in(g, len) >= STG_SEGMENT_DIRECT_MIN;
}

static int write_record(struct seg *g, uint64_t off, const uint8_t *hdr, const uint8_t *body,
			uint32_t len)
{
	static const uint8_t zeros[STG_SEGMENT_ALIGN];
	size_t pad = (size_t)(rsize_in(g, len) - STG_RECORD_HEADER_SIZE - len);
	struct iovec iov[3] = {
		{(void *)hdr, STG_RECORD_HEADER_SIZE},
		{(void *)body, len},
		{(void *)zeros, pad},
	};
	int r = -EINVAL;
	size_t rsize = STG_RECORD_HEADER_SIZE + len + pad;
	uint8_t *direct = NULL;
	if (g->dfd >= 0 && direct_record(g, len) && !atomic_load(&g->nodirect) &&
	    posix_memalign((void **)&direct, STG_SEGMENT_ALIGN, rsize) == 0) {
		/* One aligned copy, as O_DIRECT wants it. */
		memcpy(direct, hdr, STG_RECORD_HEADER_SIZE);
		memcpy(direct + STG_RECORD_HEADER_SIZE, body, len);
		memset(direct + STG_RECORD_HEADER_SIZE + len, 0, pad);
		struct iovec one = {direct, rsize};
		r = stg_ringio_pwritev(g->dfd, &one, 1, off);
		free(direct);
		if (r == -EINVAL) /* taken at open, refused at write */
			atomic_store(&g->nodirect, true);
	}
	if (r == -EINVAL) /* no O_DIRECT here after all (or no memory for it) */
		r = stg_ringio_pwritev(g->fd, iov, 3, off);
	if (r < 0)
		stg_log_errno(STG_LOG_ERROR, r, "store: segment %016" PRIx32 " offset %" PRIu64
			      ": write failed", g->id, off);
	return r;
}

/* Appends e to the array *v; returns 0 or -ENOMEM. */
static int entries_push(struct stg_hint_entry **v, size_t *n, size_t *cap,
			const struct stg_hint_entry *e)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 64;
		struct stg_hint_entry *nv = realloc(*v, c * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = c;
	}
	(*v)[(*n)++] = *e;
	return 0;
}

/* Adds a record of g to its hint entries, and to those its hint log is to
 * get. Called with the lock held (or alone, at open). */
static void hint_push(struct seg *g, const struct stg_hash *h, uint64_t off, uint32_t len,
		      const struct stg_hash *base)
{
	struct stg_hint_entry e = {
		.hash = *h, .base = base ? *base : (struct stg_hash){{0}}, .offset = off,
		.len = len, .delta = base != NULL};
	if (!g->hints_lost && entries_push(&g->hints, &g->nhints, &g->caphints, &e) < 0) {
		g->hints_lost = true;
		free(g->hints);
		g->hints = NULL;
		g->nhints = g->caphints = 0;
	}
	if (g->log_fd >= 0 && !g->log_failed &&
	    entries_push(&g->unlogged, &g->nunlogged, &g->capunlogged, &e) < 0)
		g->log_failed = true; /* the sync round removes the log */
}

static void inflight_done(struct seg *g, uint64_t off)
{
	for (size_t i = 0; i < g->ninflight; i++) {
		if (g->inflight[i] != off)
			continue;
		g->inflight[i] = g->inflight[--g->ninflight];
		return;
	}
}

/* Undoes the writer part of reserve(); with ok, the record of h (a delta
 * against base, or base NULL) is there. Called with the lock held. */
static void append_done(struct stg_store *s, struct seg *g, bool ok, const struct stg_hash *h,
			uint64_t off, uint32_t len, const struct stg_hash *base)
{
	g->writers--;
	inflight_done(g, off);
	if (ok) {
		g->dirty = true;
		hint_push(g, h, off, len, base);
	}
	if (g->writers == 0 && g->to_seal)
		pthread_cond_signal(&s->seal_cond);
}

/* Marks h and, for a delta object, the chain of bases it decodes with: a
 * base lives as long as a delta needs it. Called with the lock held.
 * Returns whether h is stored. */
static bool mark_locked(struct stg_store *s, const struct stg_hash *h)
{
	bool found = false;
	for (unsigned i = 0; h && i <= STG_CHUNK_DELTA_DEPTH; i++) {
		if (!stg_chunkindex_mark(s->index, h, s->epoch))
			break;
		found |= i == 0;
		h = stg_bases_find(s->bases, h);
	}
	return found;
}

bool stg_store_has(struct stg_store *s, const struct stg_hash *h)
{
	pthread_mutex_lock(&s->lock);
	bool found = stg_chunkindex_get(s->index, h, NULL);
	pthread_mutex_unlock(&s->lock);
	return found;
}

/* A put of a stored chunk writes nothing but marks it: a chunk put during
 * a collection counts as marked. Returns whether it was there. */
static bool mark_if_present(struct stg_store *s, const struct stg_hash *h)
{
	pthread_mutex_lock(&s->lock);
	bool found = mark_locked(s, h);
	pthread_mutex_unlock(&s->lock);
	return found;
}

int stg_store_validate(const uint8_t *obj, size_t len, struct stg_hash *ret_hash)
{
	if (len > stg_segment_body_max())
		return -EBADMSG;
	int r = stg_chunk_check(obj, len, true, ret_hash);
	return r == -ENOMEM ? r : r < 0 ? -EBADMSG : 0;
}

static int check_delta(struct stg_store *s, const uint8_t *obj, size_t len,
		       const struct stg_hash *h, const struct stg_hash *base, uint8_t **ret_plain,
		       size_t *ret_plain_len);
static int put_record(struct stg_store *s, const uint8_t *obj, size_t len, const struct stg_hash *h,
		      const struct stg_hash *base);

int stg_store_put(struct stg_store *s, const uint8_t *obj, size_t len, const struct stg_hash *h)
{
	if (len <= STG_CHUNK_HEADER_SIZE || len > stg_segment_body_max())
		return -EINVAL;
	if (mark_if_present(s, h))
		return 1;
	struct stg_hash base;
	bool delta = stg_chunk_base(obj, len, &base);
	uint8_t *plain = NULL;
	if (delta) {
		size_t plain_len;
		int r = check_delta(s, obj, len, h, &base, &plain, &plain_len);
		if (r < 0)
			return r;
		if (plain) {
			obj = plain;
			len = plain_len;
			delta = false;
		} else if ((r = stg_store_require_format(s, 3)) < 0) {
			return r;
		}
	}
	int r = put_record(s, obj, len, h, delta ? &base : NULL);
	free(plain);
	return r;
}

/* Appends obj, a chunk object of h (a delta against base, or base NULL),
 * and indexes it. */
static int put_record(struct stg_store *s, const uint8_t *obj, size_t len, const struct stg_hash *h,
		      const struct stg_hash *base)
{
	uint8_t hdr[STG_RECORD_HEADER_SIZE];
	stg_segment_record_header_encode(hdr, STG_RECORD_CHUNK, obj, (uint32_t)len);
	struct seg *g;
	uint64_t off;
	int r = reserve(s, (uint32_t)len, false, &g, &off);
	if (r < 0)
		return r;
	r = write_record(g, off, hdr, obj, (uint32_t)len);

	pthread_mutex_lock(&s->lock);
	append_done(s, g, r == 0, h, off, (uint32_t)len, base);
	if (r == 0) {
		struct stg_chunkindex_entry ent = {
			.hash = *h,
			.segment = g->id,
			.offset = (uint32_t)(off / OFFSET_UNIT),
			.len = (uint32_t)len,
			.epoch = s->epoch,
		};
		/* A collection may have started since check_delta marked the
		 * base: marked again with the delta's epoch, or the delta is
		 * refused if it went meanwhile (the record is garbage). */
		if (base && !mark_locked(s, base))
			r = -ENOLINK;
		/* A concurrent put of the same chunk may have won: its entry
		 * stays, this record is garbage for compaction, and the put
		 * says the chunk was there (its caller may compare them). */
		if (r == 0)
			r = stg_chunkindex_insert(s->index, &ent, NULL);
		if (r == 1) {
			g->live += rsize_in(g, (uint32_t)len);
			if (base && stg_bases_set(s->bases, h, base) < 0) {
				/* Unindexed, the record is garbage: put again. */
				stg_chunkindex_remove(s->index, h);
				g->live -= rsize_in(g, (uint32_t)len);
				r = -ENOMEM;
			}
		} else if (r == 0) {
			stg_chunkindex_mark(s->index, h, s->epoch);
		}
		r = r < 0 ? r : !r; /* inserted: 0; there already: 1 */
	}
	pthread_mutex_unlock(&s->lock);
	seg_put(s, g);
	return r;
}

/* Reads the record at off of g (len body bytes) into *ret_mem, header then
 * body, and checks it is an intact record of chunk h. A large one is read
 * with O_DIRECT into an aligned buffer, padding included. Returns 0,
 * -EBADMSG or -errno. */
static int read_record(struct stg_store *s, struct seg *g, uint64_t off, uint32_t len,
		       const struct stg_hash *h, uint8_t **ret_mem)
{
	size_t rsize = (size_t)rsize_in(g, len);
	int dfd = direct_record(g, len) ? seg_direct_fd(s, g) : -1;
	uint8_t *mem = NULL;
	int r = -EINVAL;
	if (dfd >= 0 && posix_memalign((void **)&mem, STG_SEGMENT_ALIGN, rsize) == 0) {
		struct iovec one = {mem, rsize};
		r = stg_ringio_preadv(dfd, &one, 1, off);
		if (r == -EINVAL) /* taken at open, refused at read */
			atomic_store(&g->nodirect, true);
		/* (-ENODATA: the file may end without the padding; the
		 * record alone is read again below.) */
		if (r == -EINVAL || r == -ENODATA) {
			free(mem);
			mem = NULL;
			r = -EINVAL;
		}
	}
	if (r == -EINVAL) {
		mem = malloc(STG_RECORD_HEADER_SIZE + (size_t)len);
		if (!mem)
			return -ENOMEM;
		struct iovec one = {mem, STG_RECORD_HEADER_SIZE + (size_t)len};
		r = stg_ringio_preadv(g->fd, &one, 1, off);
	}
	if (r == -ENODATA)
		r = -EBADMSG; /* the record is cut short */
	const uint8_t *body = mem + STG_RECORD_HEADER_SIZE;
	struct stg_hash named;
	if (r == 0)
		r = stg_segment_record_check(mem, body, len);
	if (r == 0)
		r = stg_chunk_check(body, len, false, &named);
	if (r == 0 && !stg_hash_eq(&named, h))
		r = -EBADMSG;
	if (r < 0) {
		char hex[STG_HASH_HEX_LEN + 1];
		stg_hash_hex(h, hex);
		stg_log_errno(STG_LOG_WARN, r, "store: segment %016" PRIx32 " offset %" PRIu64
			      ": record of chunk %s unreadable", g->id, off, hex);
		free(mem);
		return r;
	}
	*ret_mem = mem;
	return 0;
}

static int drop_orphans(struct stg_store *s);

/* A record found damaged when read (behind its hint since the restart,
 * or since it was written) is forgotten if the index still points at it,
 * so that HAVE says the chunk is absent and clients send it again; so are
 * the deltas built on it. */
static void forget_damaged(struct stg_store *s, const struct stg_hash *h, struct seg *g,
			   uint64_t off)
{
	struct stg_chunkindex_entry e;
	pthread_mutex_lock(&s->lock);
	bool there = stg_chunkindex_get(s->index, h, &e) && e.segment == g->id &&
		     (uint64_t)e.offset * OFFSET_UNIT == off;
	if (there) {
		g->live -= rsize_in(g, e.len);
		stg_chunkindex_remove(s->index, h);
		stg_bases_remove(s->bases, h);
	}
	pthread_mutex_unlock(&s->lock);
	if (there)
		drop_orphans(s);
}

/* Finds h and takes a reference on its segment. Returns 0 or -ENOENT. */
static int locate(struct stg_store *s, const struct stg_hash *h, struct seg **ret_g,
		  uint64_t *ret_off, uint32_t *ret_len)
{
	int r = -ENOENT;
	pthread_mutex_lock(&s->lock);
	struct stg_chunkindex_entry e;
	struct seg *g = stg_chunkindex_get(s->index, h, &e) ? seg_find(s, e.segment) : NULL;
	if (g) {
		g->refs++;
		*ret_g = g;
		*ret_off = (uint64_t)e.offset * OFFSET_UNIT;
		*ret_len = e.len;
		r = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int stg_store_get(struct stg_store *s, const struct stg_hash *h, struct stg_store_obj *ret)
{
	struct seg *g;
	uint64_t off;
	uint32_t len;
	int r = locate(s, h, &g, &off, &len);
	if (r < 0)
		return r;
	uint8_t *mem;
	r = read_record(s, g, off, len, h, &mem);
	if (r == -EBADMSG)
		forget_damaged(s, h, g, off);
	seg_put(s, g);
	if (r < 0)
		return r;
	*ret = (struct stg_store_obj){mem + STG_RECORD_HEADER_SIZE, len, mem};
	return 0;
}

void stg_store_obj_free(struct stg_store_obj *o)
{
	free(o->mem);
	*o = (struct stg_store_obj){0};
}

/* Decodes stored chunk h into out (raw_len bytes) through its chain of
 * bases, root first; *ret_depth: the deltas in the chain. Returns 0,
 * -ENOENT (h or a base is not stored), -EBADMSG, -ESTALE (the chain changed
 * while it was read) or -errno. */
static int decode_stored(struct stg_store *s, const struct stg_hash *h, uint32_t raw_len,
			 uint8_t *out, unsigned *ret_depth)
{
	struct stg_hash chain[STG_CHUNK_DELTA_DEPTH + 1];
	unsigned n = 0;
	chain[0] = *h;
	pthread_mutex_lock(&s->lock);
	const struct stg_hash *b;
	while ((b = stg_bases_find(s->bases, &chain[n])) && n < STG_CHUNK_DELTA_DEPTH)
		chain[++n] = *b;
	pthread_mutex_unlock(&s->lock);
	if (b)
		return -EBADMSG; /* deeper than the store keeps them */
	uint8_t *base = n ? malloc(raw_len) : NULL;
	if (n && !base)
		return -ENOMEM;
	int r = 0;
	for (unsigned i = n + 1; i-- > 0 && r == 0;) {
		struct stg_store_obj o;
		r = stg_store_get(s, &chain[i], &o);
		if (r < 0)
			break;
		struct stg_hash named;
		bool delta = stg_chunk_base(o.obj, o.len, &named);
		if (delta != (i < n) || (delta && !stg_hash_eq(&named, &chain[i + 1]))) {
			r = -ESTALE;
		} else if (!delta) {
			r = stg_chunk_decode(o.obj, o.len, &chain[i], raw_len, out);
		} else {
			memcpy(base, out, raw_len);
			r = stg_chunk_decode_delta(o.obj, o.len, &chain[i], raw_len, base, out);
		}
		stg_store_obj_free(&o);
	}
	free(base);
	*ret_depth = n;
	return r;
}

/* Encodes raw, the chunk h of hd's raw_len bytes, on its own with the codec
 * and filter hd names, into *ret (malloc'ed). */
static int encode_whole(const struct stg_chunk_header *hd, const struct stg_hash *h,
			const uint8_t *raw, uint8_t **ret, size_t *ret_len)
{
	struct stg_chunk_codec c = {.compress = hd->codec, .filter = hd->filter,
				    .element = hd->element};
	uint8_t *p = malloc(stg_chunk_bound(hd->raw_len));
	if (!p)
		return -ENOMEM;
	*ret_len = stg_chunk_encode(raw, hd->raw_len, h, &c, p);
	*ret = p;
	return 0;
}

/* A delta object to store: its base is stored (-ENOLINK if not) and it
 * decodes to h. When its chain would get deeper than
 * STG_CHUNK_DELTA_DEPTH, *ret_plain receives the chunk encoded on its own
 * (the codec and filter the delta used), to store instead. */
static int check_delta(struct stg_store *s, const uint8_t *obj, size_t len,
		       const struct stg_hash *h, const struct stg_hash *base, uint8_t **ret_plain,
		       size_t *ret_plain_len)
{
	struct stg_chunk_header hd;
	int r = stg_chunk_header_decode(obj, len, h, stg_get_le32(obj + 8), &hd);
	if (r < 0)
		return r;
	uint8_t *braw = malloc(hd.raw_len), *raw = malloc(hd.raw_len);
	unsigned depth = 0;
	r = braw && raw ? 0 : -ENOMEM;
	if (r == 0) {
		/* Marked first, so that a collection running now keeps it. */
		r = mark_if_present(s, base) ? decode_stored(s, base, hd.raw_len, braw, &depth)
					     : -ENOLINK;
		/* A base gone or corrupt here: the client sends the chunk whole. */
		if (r == -ENOENT || r == -EBADMSG)
			r = -ENOLINK;
	}
	if (r == 0)
		r = stg_chunk_decode_delta(obj, len, h, hd.raw_len, braw, raw);
	*ret_plain = NULL;
	if (r == 0 && depth + 1 > STG_CHUNK_DELTA_DEPTH)
		r = encode_whole(&hd, h, raw, ret_plain, ret_plain_len);
	free(braw);
	free(raw);
	return r;
}

/* Decodes the object (a delta with its stored chain) into raw, hd's raw_len
 * bytes; the content hash is checked. */
static int decode_obj(struct stg_store *s, const uint8_t *obj, size_t len,
		      const struct stg_chunk_header *hd, uint8_t *raw)
{
	struct stg_hash base;
	if (!stg_chunk_base(obj, len, &base))
		return stg_chunk_decode(obj, len, &hd->hash, hd->raw_len, raw);
	uint8_t *braw = malloc(hd->raw_len);
	if (!braw)
		return -ENOMEM;
	unsigned depth;
	int r = decode_stored(s, &base, hd->raw_len, braw, &depth);
	if (r == -ENOENT)
		r = -ENOLINK;
	if (r == 0)
		r = stg_chunk_decode_delta(obj, len, &hd->hash, hd->raw_len, braw, raw);
	free(braw);
	return r;
}

int stg_store_same(struct stg_store *s, const struct stg_hash *h, const uint8_t *obj, size_t len)
{
	struct stg_chunk_header hd;
	if (len < STG_CHUNK_HEADER_SIZE ||
	    stg_chunk_header_decode(obj, len, h, stg_get_le32(obj + 8), &hd) < 0)
		return -EBADMSG;
	uint8_t *mine = malloc(hd.raw_len), *held = malloc(hd.raw_len);
	int r = mine && held ? decode_obj(s, obj, len, &hd, mine) : -ENOMEM;
	if (r == 0) {
		unsigned depth;
		r = decode_stored(s, h, hd.raw_len, held, &depth);
		/* Another length, or damage: not the same bytes either way. */
		if (r == -EBADMSG)
			r = 0;
		else if (r == 0)
			r = memcmp(mine, held, hd.raw_len) == 0;
	}
	free(mine);
	free(held);
	return r;
}

int stg_store_get_whole(struct stg_store *s, const struct stg_hash *h, struct stg_store_obj *ret)
{
	struct stg_store_obj o;
	int r = stg_store_get(s, h, &o);
	struct stg_hash base;
	if (r < 0 || !stg_chunk_base(o.obj, o.len, &base)) {
		*ret = o;
		return r;
	}
	struct stg_chunk_header hd;
	r = stg_chunk_header_decode(o.obj, o.len, h, stg_get_le32(o.obj + 8), &hd);
	stg_store_obj_free(&o);
	if (r < 0)
		return -EBADMSG;
	uint8_t *raw = malloc(hd.raw_len), *whole = NULL;
	size_t len = 0;
	unsigned depth;
	r = raw ? decode_stored(s, h, hd.raw_len, raw, &depth) : -ENOMEM;
	if (r == 0)
		r = encode_whole(&hd, h, raw, &whole, &len);
	free(raw);
	if (r == 0)
		*ret = (struct stg_store_obj){whole, len, whole};
	return r;
}

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

static int cmp_hint(const void *a, const void *b);

/* Takes from g's unlogged entries those its log can get after this round
 * into y (in the segment's order). Called with the lock held. */
static void take_loggable(struct seg *g, struct synced *y)
{
	if (g->log_fd < 0 || g->log_failed || g->nunlogged == 0)
		return;
	uint64_t mark = g->end;
	for (size_t i = 0; i < g->ninflight; i++)
		if (g->inflight[i] < mark)
			mark = g->inflight[i];
	qsort(g->unlogged, g->nunlogged, sizeof(*g->unlogged), cmp_hint);
	size_t n = 0;
	while (n < g->nunlogged && g->unlogged[n].offset < mark)
		n++;
	if (n == 0 || !(y->v = malloc(n * sizeof(*y->v))))
		return; /* (no memory: a later round takes them) */
	memcpy(y->v, g->unlogged, n * sizeof(*y->v));
	y->n = n;
	memmove(g->unlogged, g->unlogged + n, (g->nunlogged - n) * sizeof(*g->unlogged));
	g->nunlogged -= n;
}

/* Appends the entries a round made durable to the segment's hint log. A
 * log with a gap would hide the records in it from the next start, which
 * scans only past the log's last record: after an append that fails (or
 * entries lost for want of memory) nothing more is appended, and the start
 * scans past the log's last whole entry. */
static void log_synced(struct stg_store *s, struct synced *y)
{
	struct seg *g = y->g;
	int r = stg_hint_log_append(g->log_fd, y->v, y->n);
	if (r < 0) {
		pthread_mutex_lock(&s->lock);
		g->log_failed = true;
		pthread_mutex_unlock(&s->lock);
		stg_log_errno(STG_LOG_WARN, r, "store: cannot append to the hint log of segment "
			      "%016" PRIx32 "; a restart scans the rest of it", g->id);
	}
}

static int sync_round(struct stg_store *s)
{
	struct synced *dirty = calloc(s->nsegs ? s->nsegs : 1, sizeof(*dirty));
	if (!dirty)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < s->nsegs; i++) {
		struct seg *g = s->segs[i];
		if (!g->dirty)
			continue;
		g->dirty = false;
		g->refs++;
		struct synced *y = &dirty[n++];
		y->g = g;
		take_loggable(g, y);
	}
	pthread_mutex_unlock(&s->lock);
	int r = 0;
	for (size_t i = 0; i < n; i++) {
		struct synced *y = &dirty[i];
		if (r == 0 && fdatasync(y->g->fd) < 0)
			r = stg_log_errno(STG_LOG_ERROR, -errno, "store: fdatasync of segment %016"
					  PRIx32, y->g->id);
		if (r == 0 && y->v)
			log_synced(s, y);
		free(y->v);
		seg_put(s, y->g);
	}
	free(dirty);
	pthread_mutex_lock(&s->lock);
	return r;
}

int stg_store_sync(struct stg_store *s)
{
	int r = 0;
	pthread_mutex_lock(&s->lock);
	/* Only a round that starts after this call covers the puts before it. */
	uint64_t need = s->sync_started + 1;
	while (s->sync_done < need && !s->sync_err) {
		if (s->syncing) {
			pthread_cond_wait(&s->sync_cond, &s->lock);
			continue;
		}
		s->syncing = true;
		uint64_t round = ++s->sync_started;
		r = sync_round(s);
		s->syncing = false;
		pthread_cond_broadcast(&s->sync_cond);
		if (r == -ENOMEM)
			break; /* nothing was synced; the next caller tries again */
		/* After a failed fdatasync the kernel may have dropped the dirty
		 * pages, and a retry would succeed without writing them: the
		 * error stays until the store is reopened and rescanned. */
		if (r < 0)
			s->sync_err = r;
		else
			s->sync_done = round;
	}
	if (r == 0 && s->sync_done < need)
		r = s->sync_err;
	pthread_mutex_unlock(&s->lock);
	return r;
}

void stg_store_stats(struct stg_store *s, struct stg_store_stats *ret)
{
	struct stg_store_stats st = {0};
	pthread_mutex_lock(&s->lock);
	st.chunks = stg_chunkindex_count(s->index);
	st.index_bytes = stg_chunkindex_memory(s->index);
	st.segments = s->nsegs;
	st.segment_bytes = s->total;
	st.recovery_scanned_bytes = s->recovery_scanned_bytes;
	st.recovery_hinted_records = s->recovery_hinted_records;
	st.scrub_bytes = s->scrub_bytes;
	st.scrub_records = s->scrub_records;
	st.scrub_damaged = s->scrub_damaged;
	st.scrub_passes = s->scrub_passes;
	for (size_t i = 0; i < s->nsegs; i++)
		st.chunk_bytes += s->segs[i]->live;
	pthread_mutex_unlock(&s->lock);
	*ret = st;
}

int stg_store_dirfd(const struct stg_store *s)
{
	return s->dirfd;
}

void stg_store_gc_begin(struct stg_store *s)
{
	pthread_mutex_lock(&s->lock);
	s->epoch++;
	pthread_mutex_unlock(&s->lock);
}

bool stg_store_mark(struct stg_store *s, const struct stg_hash *h)
{
	return mark_if_present(s, h);
}

/* A record to move out of a segment being compacted. */
struct move {
	struct stg_hash hash;
	struct seg *from;
	uint32_t offset; /* in OFFSET_UNIT */
	uint32_t len;
};

struct collect {
	struct stg_store *s;
	uint32_t epoch;      /* now: chunks not marked in it or the one before are dropped */
	struct seg **from;   /* segments being compacted, by id */
	size_t nfrom;
	struct move *v;
	size_t n, cap;
};

static int collect_push(struct collect *c, const struct stg_chunkindex_entry *e, struct seg *from)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 256;
		struct move *v = realloc(c->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = (struct move){e->hash, from, e->offset, e->len};
	return 0;
}

static int collect_dead(void *arg, const struct stg_chunkindex_entry *e)
{
	struct collect *c = arg;
	return stg_chunkindex_age(e, c->epoch) > 1 ? collect_push(c, e, NULL) : 0;
}

static int collect_moves(void *arg, const struct stg_chunkindex_entry *e)
{
	struct collect *c = arg;
	size_t lo = 0, hi = c->nfrom;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (c->from[mid]->id == e->segment)
			return collect_push(c, e, c->from[mid]);
		if (c->from[mid]->id < e->segment)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

static int cmp_move(const void *a, const void *b)
{
	const struct move *x = a, *y = b;
	if (x->from->id != y->from->id)
		return x->from->id < y->from->id ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Removes the entry of m->hash if it still points where m says. Called with
 * the lock held. Returns the record bytes dropped. */
static uint64_t drop_if_at(struct stg_store *s, const struct move *m)
{
	struct stg_chunkindex_entry e;
	if (!stg_chunkindex_get(s->index, &m->hash, &e) || e.segment != m->from->id ||
	    e.offset != m->offset)
		return 0;
	uint64_t size = rsize_in(m->from, e.len);
	m->from->live -= size;
	stg_chunkindex_remove(s->index, &m->hash);
	stg_bases_remove(s->bases, &m->hash);
	return size;
}

/* Drops the chunks marked in neither this epoch nor the previous one. */
static int drop_unmarked(struct stg_store *s, struct stg_store_gc_result *res)
{
	struct collect c = {.s = s};
	pthread_mutex_lock(&s->lock);
	c.epoch = s->epoch;
	/* Collected first, removed after: backward shifts would move entries
	 * under the iteration. */
	int r = stg_chunkindex_foreach(s->index, collect_dead, &c);
	for (size_t i = 0; r == 0 && i < c.n; i++) {
		struct stg_chunkindex_entry e;
		stg_chunkindex_get(s->index, &c.v[i].hash, &e);
		c.v[i].from = seg_find(s, e.segment);
		uint64_t size = drop_if_at(s, &c.v[i]);
		res->chunks_dropped += size > 0;
		res->bytes_dropped += size;
	}
	pthread_mutex_unlock(&s->lock);
	free(c.v);
	return r;
}

/* Copies one live record to the active segment and points the index at the
 * copy if the entry has not changed meanwhile. A corrupt record cannot be
 * moved: its entry is dropped, so that clients send the chunk again. */
static int move_record(struct stg_store *s, const struct move *m, struct stg_store_gc_result *res)
{
	uint8_t *mem;
	uint64_t off = (uint64_t)m->offset * OFFSET_UNIT;
	int r = read_record(s, m->from, off, m->len, &m->hash, &mem);
	if (r == -EBADMSG) {
		pthread_mutex_lock(&s->lock);
		uint64_t size = drop_if_at(s, m);
		pthread_mutex_unlock(&s->lock);
		res->chunks_dropped += size > 0;
		res->bytes_dropped += size;
		return 0;
	}
	if (r < 0)
		return r;
	struct seg *g;
	uint64_t noff;
	r = reserve(s, m->len, true, &g, &noff);
	if (r < 0)
		goto out_free;
	/* The record header names no location: the bytes move as they are. */
	r = write_record(g, noff, mem, mem + STG_RECORD_HEADER_SIZE, m->len);
	struct stg_hash base;
	bool delta = stg_chunk_base(mem + STG_RECORD_HEADER_SIZE, m->len, &base);
	pthread_mutex_lock(&s->lock);
	append_done(s, g, r == 0, &m->hash, noff, m->len, delta ? &base : NULL);
	struct stg_chunkindex_entry e;
	if (r == 0 && stg_chunkindex_get(s->index, &m->hash, &e) && e.segment == m->from->id &&
	    e.offset == m->offset) {
		e.segment = g->id;
		e.offset = (uint32_t)(noff / OFFSET_UNIT);
		stg_chunkindex_set(s->index, &e);
		m->from->live -= rsize_in(m->from, m->len);
		g->live += rsize_in(g, m->len);
		res->bytes_moved += rsize_in(g, m->len);
	}
	pthread_mutex_unlock(&s->lock);
	seg_put(s, g);
out_free:
	free(mem);
	return r;
}

/* Unlinks segments already taken out of the table and drops the table's
 * reference; readers still holding one read on from the open file. */
static void unlink_segments(struct stg_store *s, struct seg **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char name[STG_SEGMENT_NAME_LEN + 1], hint[STG_HINT_NAME_LEN + 1];
		stg_hint_name(v[i]->id, hint);
		unlinkat(s->segdirfd, hint, 0); /* first: a hint without its segment is cleared at start */
		stg_hint_log_name(v[i]->id, hint);
		unlinkat(s->segdirfd, hint, 0);
		stg_segment_name(v[i]->id, name);
		if (unlinkat(s->segdirfd, name, 0) < 0)
			stg_log_errno(STG_LOG_WARN, -errno, "store: cannot remove segment '%s'", name);
		seg_put(s, v[i]);
	}
	if (n && fsync(s->segdirfd) < 0)
		stg_log_errno(STG_LOG_WARN, -errno, "store: fsync of segments/");
}

/* Can gc touch g? Not the active segment, nor one with appends in flight:
 * their records are not in the index yet. */
static bool sealed(const struct stg_store *s, const struct seg *g)
{
	return g != s->active && g->writers == 0;
}

/* Drops the unmarked chunks, then removes and compacts segments. */
static int collect_garbage(struct stg_store *s, struct stg_store_gc_result *ret)
{
	struct stg_store_gc_result res = {0};
	struct collect c = {.s = s};
	struct seg **empty = NULL;
	size_t nempty = 0;
	int r = drop_unmarked(s, &res);
	if (r < 0)
		return r;

	pthread_mutex_lock(&s->lock);
	empty = malloc((s->nsegs ? s->nsegs : 1) * sizeof(*empty));
	c.from = malloc((s->nsegs ? s->nsegs : 1) * sizeof(*c.from));
	if (!empty || !c.from) {
		pthread_mutex_unlock(&s->lock);
		r = -ENOMEM;
		goto out_free;
	}
	for (size_t i = 0; i < s->nsegs;) {
		struct seg *g = s->segs[i];
		if (sealed(s, g) && g->live == 0) {
			table_remove(s, g); /* its reference passes to empty[] */
			empty[nempty++] = g;
			continue;
		}
		if (sealed(s, g) && g->live <= g->end / 2) {
			g->refs++;
			c.from[c.nfrom++] = g;
		}
		i++;
	}
	if (c.nfrom)
		r = stg_chunkindex_foreach(s->index, collect_moves, &c);
	pthread_mutex_unlock(&s->lock);
	unlink_segments(s, empty, nempty);
	res.segments_removed += nempty;
	if (r < 0)
		goto out_put;

	if (c.n)
		qsort(c.v, c.n, sizeof(*c.v), cmp_move);
	for (size_t i = 0; r == 0 && i < c.n; i++)
		r = move_record(s, &c.v[i], &res);
	/* The copies are durable before the originals go. */
	if (r == 0 && c.nfrom)
		r = stg_store_sync(s);
	if (r < 0)
		goto out_put;
	nempty = 0;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < c.nfrom; i++) {
		if (c.from[i]->live != 0)
			continue;
		table_remove(s, c.from[i]);
		empty[nempty++] = c.from[i];
	}
	pthread_mutex_unlock(&s->lock);
	unlink_segments(s, empty, nempty);
	res.segments_removed += nempty;
	res.segments_compacted += nempty;
out_put:
	for (size_t i = 0; i < c.nfrom; i++)
		seg_put(s, c.from[i]);
out_free:
	free(c.v);
	free(c.from);
	free(empty);
	if (r == 0 && ret)
		*ret = res;
	return r;
}


int stg_store_gc_end(struct stg_store *s, struct stg_store_gc_result *ret)
{
	pthread_mutex_lock(&s->gc_lock);
	int r = collect_garbage(s, ret);
	if (r == 0)
		r = drop_orphans(s);
	pthread_mutex_unlock(&s->gc_lock);
	return r;
}

/* Opening: layout, format, lock, and the index rebuilt from the segments. */

/* A new store is format 1: an older server can use it until it holds what
 * that one cannot read (stg_store_require_format). */
static int check_format(struct stg_store *s)
{
	int r = stg_format_read(s->dirfd, FORMAT_KIND, &s->format);
	if (r == 0)
		return s->format > STG_STORE_FORMAT ? -EPROTONOSUPPORT : 0;
	if (r != -ENOENT)
		return r;

	/* No FORMAT: a new store, or one whose creation was cut short. Anything
	 * else in the directory means it is not ours. */
	DIR *d = stg_opendir_at(s->dirfd, ".");
	if (!d)
		return -errno;
	struct dirent *de;
	while (r == -ENOENT && (de = readdir(d))) {
		const char *n = de->d_name;
		if (strcmp(n, ".") && strcmp(n, "..") && strcmp(n, LOCK_FILE) &&
		    strcmp(n, STG_SEGMENT_DIR) && strcmp(n, FILES_DIR) && strcmp(n, "lost+found") &&
		    strncmp(n, FORMAT_FILE ".tmp.", strlen(FORMAT_FILE ".tmp.")))
			r = -EPROTO;
	}
	closedir(d);
	if (r == -EPROTO)
		return r;
	d = stg_opendir_at(s->dirfd, STG_SEGMENT_DIR);
	if (d) {
		uint64_t id;
		while (r == -ENOENT && (de = readdir(d)))
			if (stg_segment_parse_name(de->d_name, &id) == 0)
				r = -EPROTO;
		closedir(d);
		if (r == -EPROTO)
			return r;
	} else if (errno != ENOENT) {
		return -errno;
	}
	s->format = 1;
	return stg_format_write(s->dirfd, FORMAT_KIND, 1);
}

int stg_store_require_format(struct stg_store *s, unsigned format)
{
	pthread_mutex_lock(&s->lock);
	bool have = s->format >= format;
	pthread_mutex_unlock(&s->lock);
	if (have)
		return 0;
	/* One writer at a time, so that a lower format never lands after a
	 * higher one. */
	pthread_mutex_lock(&s->format_lock);
	int r = 0;
	if (s->format < format)
		r = stg_format_write(s->dirfd, FORMAT_KIND, format);
	if (r == 0 && s->format < format) {
		pthread_mutex_lock(&s->lock);
		s->format = format;
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_unlock(&s->format_lock);
	return r;
}

/* Makes dirfd/name, durably. */
static int mkdir_at(int dirfd, const char *name)
{
	if (mkdirat(dirfd, name, 0700) == 0)
		return fsync(dirfd) < 0 ? -errno : 0;
	return errno == EEXIST ? 0 : -errno;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct ids {
	uint64_t *v;
	size_t n, cap;
};

static int ids_push(struct ids *x, uint64_t id)
{
	if (x->n == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 64;
		uint64_t *v = realloc(x->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		x->v = v;
		x->cap = cap;
	}
	x->v[x->n++] = id;
	return 0;
}

static bool ids_has(const struct ids *x, uint64_t id)
{
	return bsearch(&id, x->v, x->n, sizeof(*x->v), cmp_u64) != NULL;
}

/* The ids of the segment files, ascending. Removes the temporary files of
 * segments and hints whose writing was cut short, and the hints of
 * segments that are gone. */
static int list_segments(struct stg_store *s, struct ids *ret)
{
	DIR *d = stg_opendir_at(s->segdirfd, ".");
	if (!d)
		return -errno;
	struct ids segs = {0}, hints = {0};
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(d))) {
		uint64_t id;
		size_t l = strlen(de->d_name);
		if (l > 4 && strcmp(de->d_name + l - 4, ".tmp") == 0) {
			unlinkat(s->segdirfd, de->d_name, 0);
			continue;
		}
		if (stg_segment_parse_name(de->d_name, &id) == 0)
			r = ids_push(&segs, id);
		else if (stg_hint_parse_name(de->d_name, &id) == 0 ||
			 stg_hint_log_parse_name(de->d_name, &id) == 0)
			r = ids_push(&hints, id);
	}
	closedir(d);
	if (segs.n)
		qsort(segs.v, segs.n, sizeof(*segs.v), cmp_u64);
	for (size_t i = 0; r == 0 && i < hints.n; i++) {
		if (ids_has(&segs, hints.v[i]))
			continue;
		char name[STG_HINT_NAME_LEN + 1];
		stg_hint_name(hints.v[i], name);
		unlinkat(s->segdirfd, name, 0);
		stg_hint_log_name(hints.v[i], name);
		unlinkat(s->segdirfd, name, 0);
	}
	free(hints.v);
	if (r < 0) {
		free(segs.v);
		return r;
	}
	*ret = segs;
	return 0;
}

struct recovery {
	struct stg_store *s;
	struct seg *g;
	bool gather;         /* the records go to g's hint entries too */
	uint64_t logged_end; /* the end of the last record its hint log names */
	size_t logged;       /* entries taken from the hint log (or hint) */
	bool log_ok;         /* its hint log's header checked out */
};

/* Later copies win: the content is the same, and the newest copy is the one
 * compaction made before removing the older segment. */
static int recover_record(void *arg, const struct stg_hash *h, uint64_t offset, uint32_t len,
			  const struct stg_hash *base)
{
	struct recovery *rc = arg;
	struct stg_store *s = rc->s;
	if (rc->gather)
		hint_push(rc->g, h, offset, len, base);
	uint64_t size = rsize_in(rc->g, len);
	struct stg_chunkindex_entry ent = {
		.hash = *h,
		.segment = rc->g->id,
		.offset = (uint32_t)(offset / OFFSET_UNIT),
		.len = len,
		.epoch = s->epoch,
	}, e;
	int r = stg_chunkindex_insert(s->index, &ent, &e);
	if (r < 0)
		return r;
	/* A delta record never replaces a plain copy of the chunk (a put that
	 * lost a race with one): the plain one needs no base. */
	if (r == 0 && base && !stg_bases_find(s->bases, h))
		return 0;
	if (r == 0) {
		struct seg *old = e.segment == rc->g->id ? rc->g : seg_find(s, e.segment);
		old->live -= rsize_in(old, e.len);
		stg_chunkindex_set(s->index, &ent);
	}
	rc->g->live += size;
	if (base)
		return stg_bases_set(s->bases, h, base);
	stg_bases_remove(s->bases, h);
	return 0;
}

static int recover_hinted(void *arg, const struct stg_hint_entry *e)
{
	struct recovery *rc = arg;
	rc->s->recovery_hinted_records++;
	rc->logged++;
	uint64_t end = e->offset + rsize_in(rc->g, e->len);
	if (end > rc->logged_end)
		rc->logged_end = end;
	return recover_record(arg, &e->hash, e->offset, e->len, e->delta ? &e->base : NULL);
}

static int cmp_hint(const void *a, const void *b)
{
	const struct stg_hint_entry *x = a, *y = b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Writes the hint of sealed segment g from its gathered entries, its
 * records made durable first: a hint never names a record that a crash
 * could still take. */
static int write_hint(struct stg_store *s, struct seg *g, struct stg_hint_entry *v, size_t n)
{
	struct stat st;
	if (fdatasync(g->fd) < 0 || fstat(g->fd, &st) < 0)
		return -errno;
	qsort(v, n, sizeof(*v), cmp_hint);
	struct stg_hint_key k = {g->id, g->created_ns, (uint64_t)st.st_size};
	return stg_hint_write(s->segdirfd, &k, v, n);
}

/* Takes sealed segment g's records from its hint. Returns 0, or -errno
 * when the hint cannot serve (the segment is scanned instead). */
static int recover_from_hint(struct stg_store *s, struct seg *g, const char *name)
{
	struct stat st;
	if (fstat(g->fd, &st) < 0)
		return -errno;
	struct stg_hint_key k = {g->id, g->created_ns, (uint64_t)st.st_size};
	struct recovery rc = {s, g, false};
	int r = stg_hint_read(s->segdirfd, &k, recover_hinted, &rc);
	if (r == -ESTALE)
		stg_log(STG_LOG_WARN, "store: the hint of segment '%s' is of another state of it: "
			"scanning it", name);
	else if (r < 0 && r != -ENOENT)
		stg_log_errno(STG_LOG_WARN, r, "store: the hint of segment '%s' cannot be read: "
			      "scanning it", name);
	if (r == 0)
		g->end = (uint64_t)st.st_size;
	return r;
}

/* Takes a segment's records from its hint log (the newest segment's, or a
 * sealed one's whose hint was not written yet): those made durable by the
 * syncs before the stop. The scan goes on past the last one. The log names
 * every record before that one: appends go to it in the segment's order. */
static int recover_from_log(struct stg_store *s, struct recovery *rc, const char *name)
{
	struct stat st;
	if (fstat(rc->g->fd, &st) < 0)
		return -errno;
	struct stg_hint_key k = {rc->g->id, rc->g->created_ns, (uint64_t)st.st_size};
	int r = stg_hint_log_read(s->segdirfd, &k, recover_hinted, rc);
	rc->log_ok = r == 0;
	if (r < 0 && r != -ENOENT && r != -ENOMEM)
		stg_log_errno(STG_LOG_WARN, r, "store: the hint log of segment '%s' cannot be "
			      "read: scanning it", name);
	if (r == -ENOENT || r == -ESTALE || r == -EBADMSG || r == -EIO)
		r = 0;
	return r;
}

/* Opens one segment, checks its header and adds its records to the index:
 * from its hint when it is sealed and has one that checks out, else by
 * scanning it (a sealed one then gets its hint written). *ret is NULL for a
 * segment ignored for a bad header. */
static int recover_segment(struct stg_store *s, uint64_t id, bool sealed_one, struct seg **ret,
			   struct stg_segment_scan_result *ret_scan)
{
	char name[STG_SEGMENT_NAME_LEN + 1];
	stg_segment_name(id, name);
	*ret = NULL;
	int fd = openat(s->segdirfd, name, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return stg_log_errno(STG_LOG_ERROR, -errno, "store: cannot open segment '%s'", name);
	uint8_t hdr[STG_SEGMENT_HEADER_SIZE];
	struct stg_segment_header sh;
	int r = stg_pread_all(fd, hdr, sizeof(hdr), 0);
	if (r == -ENODATA)
		r = -EBADMSG; /* shorter than its header */
	if (r == 0)
		r = stg_segment_header_decode(hdr, sizeof(hdr), &sh);
	if (r == 0 && (sh.id != id || id > UINT32_MAX))
		r = -EBADMSG;
	if (r == -EBADMSG) {
		stg_log(STG_LOG_WARN, "store: segment '%s' has a bad header, ignored", name);
		close(fd);
		return 0;
	}
	if (r < 0)
		goto out_close;
	struct seg *g;
	r = seg_new(id, sh.format, sh.created_ns, fd, &g);
	if (r < 0)
		goto out_close;
	r = table_reserve(s);
	if (r < 0)
		goto out_free;
	*ret_scan = (struct stg_segment_scan_result){0};
	/* Only the newest segment keeps its records as hint entries: it is
	 * the one appended to. */
	g->hints_lost = sealed_one;
	char log[STG_HINT_LOG_NAME_LEN + 1];
	stg_hint_log_name(id, log);
	if (sealed_one && recover_from_hint(s, g, name) == 0) {
		unlinkat(s->segdirfd, log, 0); /* the sealer's leftover */
		table_add(s, g);
		*ret = g;
		return 0;
	}
	/* A hint that served in part gave the same records the scan finds:
	 * the index takes them again, and its counts stay right. */
	struct recovery rc = {s, g, true, STG_SEGMENT_HEADER_SIZE};
	g->hints_lost = false;
	r = recover_from_log(s, &rc, name);
	if (r < 0)
		goto out_free;
	r = stg_segment_scan(fd, g->format, rc.logged_end, recover_record, &rc, ret_scan);
	if (r < 0)
		goto out_free;
	s->recovery_scanned_bytes += ret_scan->size - rc.logged_end;
	if (ret_scan->skipped)
		stg_log(STG_LOG_WARN, "store: segment '%s': %" PRIu64 " corrupt records skipped",
			name, ret_scan->skipped);
	g->end = ret_scan->size;
	if (sealed_one && !g->hints_lost) {
		r = write_hint(s, g, g->hints, g->nhints);
		if (r < 0)
			stg_log_errno(STG_LOG_WARN, r, "store: cannot write the hint of segment '%s'",
				      name);
		else
			unlinkat(s->segdirfd, log, 0);
	}
	if (sealed_one) {
		free(g->hints);
		g->hints = NULL;
		g->nhints = g->caphints = 0;
		g->hints_lost = true;
	} else if (!g->hints_lost) {
		/* The log gets the records the scan found, made durable
		 * first: the scan may have read what a killed process left in
		 * the page cache. They follow those the log named, in the
		 * segment's order. */
		if (fdatasync(fd) < 0) {
			r = -errno;
			goto out_free;
		}
		if (rc.log_ok)
			reopen_hint_log(s, g, rc.logged);
		else
			open_hint_log(s, g);
	}
	table_add(s, g);
	*ret = g;
	return 0;

out_free:
	seg_close(g);
	return stg_log_errno(STG_LOG_ERROR, r, "store: cannot recover segment '%s'", name);
out_close:
	close(fd);
	return stg_log_errno(STG_LOG_ERROR, r, "store: cannot recover segment '%s'", name);
}

/* The newest segment takes the next records: whatever follows its last
 * valid record (a torn write, garbage) is cut off first, and a last record
 * without its padding (a file cut inside it) gets it back, so that the next
 * record starts aligned. */
static int trim_active(struct stg_store *s, struct seg *g, const struct stg_segment_scan_result *sc)
{
	if (sc->size == sc->end)
		return 0;
	if (sc->size < sc->end) {
		if (ftruncate(g->fd, (off_t)sc->end) < 0 || fdatasync(g->fd) < 0)
			return stg_log_errno(STG_LOG_ERROR, -errno, "store: cannot pad segment "
					     "%016" PRIx32, g->id);
		s->total += sc->end - g->end;
		g->end = sc->end;
		return 0;
	}
	stg_log(STG_LOG_WARN, "store: segment %016" PRIx32 ": cutting off %" PRIu64
		" bytes of torn or corrupt tail at offset %" PRIu64, g->id, sc->size - sc->end,
		sc->end);
	if (ftruncate(g->fd, (off_t)sc->end) < 0 || fdatasync(g->fd) < 0)
		return stg_log_errno(STG_LOG_ERROR, -errno, "store: cannot trim segment %016"
				     PRIx32, g->id);
	s->total -= g->end - sc->end;
	g->end = sc->end;
	return 0;
}

struct orphans {
	struct stg_store *s;
	struct stg_hash *v;
	size_t n, cap;
};

static int find_orphan(void *arg, const struct stg_hash *h, const struct stg_hash *base)
{
	struct orphans *o = arg;
	if (stg_chunkindex_get(o->s->index, base, NULL))
		return 0;
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 16;
		struct stg_hash *v = realloc(o->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		o->v = v;
		o->cap = cap;
	}
	o->v[o->n++] = *h;
	return 0;
}

/* A delta whose base was lost (a corrupt record, found at start or moved
 * out by compaction) cannot be decoded: it is forgotten, so that HAVE says
 * it is absent and clients send it again. So are the deltas built on it,
 * in turn. Takes the lock. */
static int drop_orphans(struct stg_store *s)
{
	struct orphans o = {.s = s};
	size_t dropped = 0;
	int r;
	pthread_mutex_lock(&s->lock);
	do {
		o.n = 0;
		r = stg_bases_foreach(s->bases, find_orphan, &o);
		for (size_t i = 0; r == 0 && i < o.n; i++) {
			struct stg_chunkindex_entry e;
			struct seg *g = stg_chunkindex_get(s->index, &o.v[i], &e) ?
						seg_find(s, e.segment) : NULL;
			if (g)
				g->live -= rsize_in(g, e.len);
			stg_chunkindex_remove(s->index, &o.v[i]);
			stg_bases_remove(s->bases, &o.v[i]);
			dropped++;
		}
	} while (r == 0 && o.n > 0);
	pthread_mutex_unlock(&s->lock);
	free(o.v);
	if (dropped)
		stg_log(STG_LOG_WARN, "store: %zu delta objects whose base is lost dropped; "
			"clients send them again", dropped);
	return r;
}

/* How many records the hints and hint logs of the segments name: the index
 * is sized for them at once. */
static size_t hinted_records(struct stg_store *s, const uint64_t *ids, size_t n)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		char name[STG_HINT_NAME_LEN + 1];
		struct stat st;
		stg_hint_name(ids[i], name);
		if (fstatat(s->segdirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			stg_hint_log_name(ids[i], name);
			if (fstatat(s->segdirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue;
		}
		if (st.st_size > STG_HINT_HEADER_SIZE)
			total += (size_t)(st.st_size - STG_HINT_HEADER_SIZE) / STG_HINT_ENTRY_SIZE;
	}
	return total;
}

static int recover(struct stg_store *s)
{
	struct ids segs = {0};
	int r = list_segments(s, &segs);
	if (r < 0)
		return r;
	uint64_t *ids = segs.v;
	size_t n = segs.n;
	r = stg_chunkindex_reserve(s->index, hinted_records(s, ids, n));
	if (r < 0)
		goto out_free;
	struct seg *last = NULL;
	struct stg_segment_scan_result last_scan = {0};
	for (size_t i = 0; i < n; i++) {
		struct seg *g;
		struct stg_segment_scan_result sc;
		r = recover_segment(s, ids[i], i + 1 < n, &g, &sc);
		if (r < 0)
			goto out_free;
		if (!g)
			continue;
		if (last && last_scan.size > last_scan.end)
			stg_log(STG_LOG_WARN, "store: segment %016" PRIx32 ": %" PRIu64
				" bytes of torn or corrupt tail ignored", last->id,
				last_scan.size - last_scan.end);
		last = g;
		last_scan = sc;
	}
	r = drop_orphans(s);
	if (r < 0)
		goto out_free;
	s->next_id = n ? ids[n - 1] + 1 : 1;
	if (last) {
		/* Appended to again, it would outgrow its hint (if it had one:
		 * when the newest segment's header was bad). */
		char hint[STG_HINT_NAME_LEN + 1];
		stg_hint_name(last->id, hint);
		unlinkat(s->segdirfd, hint, 0);
		r = trim_active(s, last, &last_scan);
		seg_direct_fd(s, last);
		s->active = last;
	} else {
		pthread_mutex_lock(&s->lock); /* roll() expects it */
		r = roll(s);
		pthread_mutex_unlock(&s->lock);
	}
out_free:
	free(ids);
	return r;
}

/* The scrub: the records of the sealed segments, one segment after the
 * other, each read and checked as a GET does. Their list comes from the
 * segment's hint (or, without one, a scan, which checks them as it goes). */
struct stg_store_scrub {
	uint64_t segment; /* whose records v holds; 0 before the first */
	struct stg_hint_entry *v;
	size_t n, cap, next;
};

int stg_store_scrub_new(struct stg_store_scrub **ret)
{
	*ret = calloc(1, sizeof(**ret));
	return *ret ? 0 : -ENOMEM;
}

void stg_store_scrub_free(struct stg_store_scrub *c)
{
	if (!c)
		return;
	free(c->v);
	free(c);
}

static int scrub_gather(void *arg, const struct stg_hint_entry *e)
{
	struct stg_store_scrub *c = arg;
	return entries_push(&c->v, &c->n, &c->cap, e);
}

static int scrub_gather_scanned(void *arg, const struct stg_hash *h, uint64_t offset,
				uint32_t len, const struct stg_hash *base)
{
	struct stg_hint_entry e = {.hash = *h, .offset = offset, .len = len};
	(void)base; /* (not needed to read the record) */
	return scrub_gather(arg, &e);
}

/* Loads the records of the first sealed segment after c->segment. Returns
 * 1, 0 (none after it) or -errno. */
static int scrub_load(struct stg_store *s, struct stg_store_scrub *c)
{
	struct seg *g = NULL;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nsegs && !g; i++)
		if (s->segs[i]->id > c->segment && sealed(s, s->segs[i]) && !s->segs[i]->to_seal)
			g = s->segs[i];
	if (g)
		g->refs++;
	pthread_mutex_unlock(&s->lock);
	c->n = c->next = 0;
	if (!g)
		return 0;
	c->segment = g->id;
	struct stat st;
	int r = fstat(g->fd, &st) < 0 ? -errno : 0;
	struct stg_hint_key k = {g->id, g->created_ns, (uint64_t)st.st_size};
	if (r == 0)
		r = stg_hint_read(s->segdirfd, &k, scrub_gather, c);
	if (r == -ENOENT || r == -ESTALE || r == -EBADMSG) {
		struct stg_segment_scan_result res;
		c->n = 0;
		r = stg_segment_scan(g->fd, g->format, STG_SEGMENT_HEADER_SIZE,
				     scrub_gather_scanned, c, &res);
	}
	seg_put(s, g);
	return r < 0 ? r : 1;
}

/* Reads and checks record e of c's segment if the index still points at
 * it. Returns the bytes read. */
static uint64_t scrub_record(struct stg_store *s, struct stg_store_scrub *c,
			     const struct stg_hint_entry *e)
{
	struct stg_chunkindex_entry ie;
	struct seg *g = NULL;
	pthread_mutex_lock(&s->lock);
	if (stg_chunkindex_get(s->index, &e->hash, &ie) && ie.segment == c->segment &&
	    (uint64_t)ie.offset * OFFSET_UNIT == e->offset && ie.len == e->len)
		g = seg_find(s, c->segment);
	if (g)
		g->refs++;
	pthread_mutex_unlock(&s->lock);
	if (!g)
		return 0;
	uint8_t *mem = NULL;
	int r = read_record(s, g, e->offset, e->len, &e->hash, &mem);
	if (r == -EBADMSG)
		forget_damaged(s, &e->hash, g, e->offset);
	free(mem);
	uint64_t n = rsize_in(g, e->len);
	seg_put(s, g);
	pthread_mutex_lock(&s->lock);
	s->scrub_bytes += n;
	s->scrub_records++;
	s->scrub_damaged += r == -EBADMSG;
	pthread_mutex_unlock(&s->lock);
	return n;
}

int64_t stg_store_scrub_step(struct stg_store *s, struct stg_store_scrub *c, uint64_t budget)
{
	uint64_t done = 0;
	while (done < budget) {
		if (c->next == c->n) {
			int r = scrub_load(s, c);
			if (r < 0)
				return r;
			if (r == 0) {
				/* The end of a pass (or nothing sealed yet). */
				bool pass = c->segment != 0;
				c->segment = 0;
				if (pass) {
					pthread_mutex_lock(&s->lock);
					s->scrub_passes++;
					pthread_mutex_unlock(&s->lock);
				}
				break;
			}
			continue;
		}
		done += scrub_record(s, c, &c->v[c->next++]);
	}
	return (int64_t)done;
}

/* The sealer: writes the hint of each segment no longer appended to, once
 * its last append is done, so that a restart reads the hint instead of the
 * segment. Asked to stop, it writes the hints pending first. */
static struct seg *next_to_seal(const struct stg_store *s)
{
	for (size_t i = 0; i < s->nsegs; i++) {
		struct seg *g = s->segs[i];
		if (g->to_seal && g->writers == 0 && g != s->active)
			return g;
	}
	return NULL;
}

static void *sealer_main(void *arg)
{
	struct stg_store *s = arg;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct seg *g = next_to_seal(s);
		if (!g && s->stopping)
			break;
		if (!g) {
			pthread_cond_wait(&s->seal_cond, &s->lock);
			continue;
		}
		g->to_seal = false;
		struct stg_hint_entry *v = g->hints;
		size_t n = g->nhints;
		bool lost = g->hints_lost;
		g->hints = NULL;
		g->nhints = g->caphints = 0;
		g->hints_lost = true; /* nothing appends to it any more */
		g->refs++;
		pthread_mutex_unlock(&s->lock);
		int r = lost ? 0 : write_hint(s, g, v, n);
		if (r < 0)
			stg_log_errno(STG_LOG_WARN, r, "store: cannot write the hint of segment %016"
				      PRIx32 "; a restart scans it", g->id);
		char log[STG_HINT_LOG_NAME_LEN + 1];
		stg_hint_log_name(g->id, log);
		unlinkat(s->segdirfd, log, 0); /* the hint, or a scan, serves now */
		free(v);
		seg_put(s, g);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

void stg_store_free(struct stg_store *s)
{
	if (!s)
		return;
	if (s->sealer_running) {
		/* A clean stop leaves the newest segment's records in its hint
		 * log: the next start scans nothing. */
		stg_store_sync(s);
		pthread_mutex_lock(&s->lock);
		s->stopping = true;
		pthread_cond_signal(&s->seal_cond);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->sealer, NULL);
	}
	for (size_t i = 0; i < s->nsegs; i++)
		seg_close(s->segs[i]);
	free(s->segs);
	stg_chunkindex_free(s->index);
	stg_bases_free(s->bases);
	if (s->segdirfd >= 0)
		close(s->segdirfd);
	if (s->lockfd >= 0)
		close(s->lockfd); /* releases the flock */
	if (s->dirfd >= 0)
		close(s->dirfd);
	pthread_cond_destroy(&s->sync_cond);
	pthread_cond_destroy(&s->roll_cond);
	pthread_cond_destroy(&s->seal_cond);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->gc_lock);
	pthread_mutex_destroy(&s->format_lock);
	free(s);
}

int stg_store_open(const char *dir, const struct stg_store_options *o, struct stg_store **ret)
{
	uint64_t segment_size = o && o->segment_size ? o->segment_size : DEFAULT_SEGMENT_SIZE;
	if (segment_size < 2 * STG_SEGMENT_ALIGN || segment_size > MAX_SEGMENT_SIZE)
		return -EINVAL;
	struct stg_store *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->dirfd = s->segdirfd = s->lockfd = -1;
	s->segment_size = segment_size;
	s->capacity = o ? o->capacity : 0;
	s->epoch = 1;
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->gc_lock, NULL);
	pthread_mutex_init(&s->format_lock, NULL);
	pthread_cond_init(&s->roll_cond, NULL);
	pthread_cond_init(&s->sync_cond, NULL);
	pthread_cond_init(&s->seal_cond, NULL);

	int r = stg_mkdir_p(dir, 0700);
	if (r < 0)
		goto out_free;
	s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0) {
		r = -errno;
		goto out_free;
	}
	s->lockfd = openat(s->dirfd, LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (s->lockfd < 0) {
		r = -errno;
		goto out_free;
	}
	if (flock(s->lockfd, LOCK_EX | LOCK_NB) < 0) {
		r = errno == EWOULDBLOCK ? -EBUSY : -errno;
		goto out_free;
	}
	r = check_format(s);
	if (r < 0)
		goto out_free;
	r = mkdir_at(s->dirfd, STG_SEGMENT_DIR);
	if (r == 0)
		r = mkdir_at(s->dirfd, FILES_DIR);
	if (r < 0)
		goto out_free;
	s->segdirfd = openat(s->dirfd, STG_SEGMENT_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->segdirfd < 0) {
		r = -errno;
		goto out_free;
	}
	r = stg_chunkindex_new(&s->index);
	if (r == 0)
		r = stg_bases_new(&s->bases);
	if (r < 0)
		goto out_free;
	/* No other thread can see s yet: recovery needs no lock. */
	r = recover(s);
	if (r < 0)
		goto out_free;
	r = stg_thread_start(&s->sealer, NULL, sealer_main, s);
	if (r < 0)
		goto out_free;
	s->sealer_running = true;
	*ret = s;
	return 0;

out_free:
	stg_store_free(s);
	return r;
}
