/* SPDX-License-Identifier: MIT */
/* The store's recovery at open: the index from hints, hint logs and scans. */
#include "store-internal.h"

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

#include "chunk.h"
#include "log.h"
#include "ringio.h"
#include "thread.h"
#include "util.h"

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
	if (STG_GROW(x->v, x->cap, x->n + 1) < 0)
		return -ENOMEM;
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
		store_hint_push(rc->g, h, offset, len, base);
	uint64_t size = store_rsize_in(rc->g, len);
	struct stg_chunkindex_entry ent = {
		.hash = *h,
		.segment = rc->g->id,
		.offset = (uint32_t)(offset / store_offset_unit(rc->g)),
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
		struct seg *old = e.segment == rc->g->id ? rc->g : store_seg_find(s, e.segment);
		old->live -= store_rsize_in(old, e.len);
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
	uint64_t end = e->offset + store_rsize_in(rc->g, e->len);
	if (end > rc->logged_end)
		rc->logged_end = end;
	return recover_record(arg, &e->hash, e->offset, e->len, e->delta ? &e->base : NULL);
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
	r = store_seg_new(id, sh.format, sh.created_ns, fd, &g);
	if (r < 0)
		goto out_close;
	/* (Only a segment no release made could hold offsets past the
	 * index's 32 bits of units.) */
	struct stat st;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out_free;
	}
	if ((uint64_t)st.st_size / store_offset_unit(g) > UINT32_MAX) {
		r = -EFBIG;
		goto out_free;
	}
	r = store_table_reserve(s);
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
		store_table_add(s, g);
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
	if (ret_scan->size > rc.logged_end)
		s->recovery_scanned_bytes += ret_scan->size - rc.logged_end;
	if (ret_scan->skipped)
		stg_log(STG_LOG_WARN, "store: segment '%s': %" PRIu64 " corrupt records skipped",
			name, ret_scan->skipped);
	g->end = ret_scan->size;
	if (sealed_one && !g->hints_lost) {
		/* Made durable first: the scan may have read what a killed
		 * process left in the page cache. A failure fails every
		 * later sync, as one of a sync round does. */
		r = fdatasync(fd) < 0 ? -errno : 0;
		if (r < 0)
			s->sync_err = r;
		else
			r = store_write_hint(s, g, g->hints, g->nhints);
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
		if (fdatasync(fd) < 0)
			s->sync_err = -errno; /* (and no log: the next start scans) */
		else if (rc.log_ok)
			store_reopen_hint_log(s, g, rc.logged);
		else
			store_open_hint_log(s, g);
	}
	store_table_add(s, g);
	*ret = g;
	return 0;

out_free:
	store_seg_close(g);
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

/* How many records the hints and hint logs of the segments name: the index
 * is sized for them at once. */
static size_t hinted_records(struct stg_store *s, const uint64_t *ids, size_t n)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		char name[STG_HINT_NAME_LEN + 1];
		struct stat st, seg;
		stg_segment_name(ids[i], name);
		if (fstatat(s->segdirfd, name, &seg, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		stg_hint_name(ids[i], name);
		if (fstatat(s->segdirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			stg_hint_log_name(ids[i], name);
			if (fstatat(s->segdirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue;
		}
		/* (A damaged file's size is no count: at most one per smallest
		 * record of the segment.) */
		uint64_t most = (uint64_t)seg.st_size / (STG_RECORD_HEADER_SIZE + 41);
		uint64_t named = st.st_size > STG_HINT_HEADER_SIZE
				 ? (uint64_t)(st.st_size - STG_HINT_HEADER_SIZE) / STG_HINT_ENTRY_SIZE
				 : 0;
		total += (size_t)(named < most ? named : most);
	}
	return total;
}

int store_recover(struct stg_store *s)
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
	/* Each delta holds its base; one whose base is gone lets it go. */
	store_refs_from_bases(s);
	r = store_drop_orphans(s);
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
		store_seg_direct_fd(s, last);
		s->active = last;
	} else {
		pthread_mutex_lock(&s->lock); /* store_roll() expects it */
		r = store_roll(s);
		pthread_mutex_unlock(&s->lock);
	}
out_free:
	free(ids);
	return r;
}
