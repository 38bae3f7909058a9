/* SPDX-License-Identifier: MIT */
/* The server's chunk store: opening, puts, gets and syncs (the parts: store-*.c). */
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

/* Reserves room for a record of len body bytes at the end of the active
 * segment (rolling to a new one when it would pass segment_size) and takes
 * a reference on it as a writer. Compaction may pass the capacity: it
 * frees more than it takes. Returns 0, -ENOSPC or -errno. */
int store_reserve(struct stg_store *s, uint32_t len, bool compaction, struct seg **ret_g,
		  uint64_t *ret_off)
{
	int r = 0;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct seg *g = s->active;
		uint64_t rsize = store_rsize_in(g, len);
		uint64_t at = stg_segment_record_place(g->format, len, g->end);
		bool fits = g->end == STG_SEGMENT_HEADER_SIZE || at + rsize <= s->segment_size;
		uint64_t need = fits ? at - g->end + rsize : rsize + STG_SEGMENT_HEADER_SIZE;
		if (!compaction && s->capacity && s->total + need > s->capacity) {
			r = -ENOSPC;
			break;
		}
		if (fits && g->log_fd >= 0 && !g->log_failed &&
		    STG_GROW(g->inflight, g->capinflight, g->ninflight + 1) < 0)
			g->log_failed = true; /* the start scans past the log */
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
		r = store_roll(s);
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
	       store_rsize_in(g, len) >= STG_SEGMENT_DIRECT_MIN;
}

int store_write_record(struct seg *g, uint64_t off, const uint8_t *hdr, const uint8_t *body,
		       uint32_t len)
{
	static const uint8_t zeros[STG_SEGMENT_ALIGN];
	size_t pad = (size_t)(store_rsize_in(g, len) - STG_RECORD_HEADER_SIZE - len);
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

/* Undoes the writer part of store_reserve(); with ok, the record of h (a
 * delta against base, or base NULL) is there. Called with the lock held. */
void store_append_done(struct stg_store *s, struct seg *g, bool ok, const struct stg_hash *h,
		       uint64_t off, uint32_t len, const struct stg_hash *base)
{
	g->writers--;
	store_inflight_done(g, off);
	if (ok) {
		g->dirty = true;
		store_hint_push(g, h, off, len, base);
	}
	if (g->writers == 0 && g->to_seal)
		pthread_cond_signal(&s->seal_cond);
}

bool stg_store_has(struct stg_store *s, const struct stg_hash *h)
{
	pthread_mutex_lock(&s->lock);
	bool found = stg_chunkindex_get(s->index, h, NULL);
	pthread_mutex_unlock(&s->lock);
	return found;
}

bool stg_store_touch(struct stg_store *s, const struct stg_hash *h)
{
	pthread_mutex_lock(&s->lock);
	bool found = stg_chunkindex_touch(s->index, h, s->epoch);
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

int store_check_delta(struct stg_store *s, const uint8_t *obj, size_t len,
		      const struct stg_hash *h, const struct stg_hash *base, uint8_t **ret_plain,
		      size_t *ret_plain_len);
static int put_record(struct stg_store *s, const uint8_t *obj, size_t len, const struct stg_hash *h,
		      const struct stg_hash *base);

int stg_store_put(struct stg_store *s, const uint8_t *obj, size_t len, const struct stg_hash *h)
{
	if (len <= STG_CHUNK_HEADER_SIZE || len > stg_segment_body_max())
		return -EINVAL;
	if (stg_store_touch(s, h))
		return 1;
	struct stg_hash base;
	bool delta = stg_chunk_base(obj, len, &base);
	uint8_t *plain = NULL;
	if (delta) {
		size_t plain_len;
		int r = store_check_delta(s, obj, len, h, &base, &plain, &plain_len);
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
	int r = store_reserve(s, (uint32_t)len, false, &g, &off);
	if (r < 0)
		return r;
	r = store_write_record(g, off, hdr, obj, (uint32_t)len);

	pthread_mutex_lock(&s->lock);
	store_append_done(s, g, r == 0, h, off, (uint32_t)len, base);
	if (r == 0) {
		struct stg_chunkindex_entry ent = {
			.hash = *h,
			.segment = g->id,
			.offset = (uint32_t)(off / store_offset_unit(g)),
			.len = (uint32_t)len,
			.epoch = s->epoch,
		};
		/* The base may have been collected since check_delta touched
		 * it: the delta is refused then (the record is garbage). */
		if (base && !stg_chunkindex_get(s->index, base, NULL))
			r = -ENOLINK;
		/* A concurrent put of the same chunk may have won: its entry
		 * stays, this record is garbage for compaction, and the put
		 * says the chunk was there (its caller may compare them). */
		if (r == 0)
			r = stg_chunkindex_insert(s->index, &ent, NULL);
		if (r == 1) {
			g->live += store_rsize_in(g, (uint32_t)len);
			if (base && stg_bases_set(s->bases, h, base) < 0) {
				/* Unindexed, the record is garbage: put again. */
				stg_chunkindex_remove(s->index, h);
				g->live -= store_rsize_in(g, (uint32_t)len);
				r = -ENOMEM;
			} else {
				store_body_added(s, &ent, base);
			}
		} else if (r == 0) {
			stg_chunkindex_touch(s->index, h, s->epoch);
		}
		r = r < 0 ? r : !r; /* inserted: 0; there already: 1 */
	}
	pthread_mutex_unlock(&s->lock);
	store_seg_put(s, g);
	return r;
}

/* Reads the record at off of g (len body bytes) into *ret_mem, header then
 * body, and checks it is an intact record of chunk h. A large one is read
 * with O_DIRECT into an aligned buffer, padding included. Returns 0,
 * -EBADMSG or -errno. */
int store_read_record(struct stg_store *s, struct seg *g, uint64_t off, uint32_t len,
		      const struct stg_hash *h, uint8_t **ret_mem)
{
	size_t rsize = (size_t)store_rsize_in(g, len);
	int dfd = direct_record(g, len) ? store_seg_direct_fd(s, g) : -1;
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

int store_drop_orphans(struct stg_store *s);

/* A record found damaged when read (behind its hint since the restart,
 * or since it was written) is forgotten if the index still points at it,
 * so that HAVE says the chunk is absent and clients send it again; so are
 * the deltas built on it. */
void store_forget_damaged(struct stg_store *s, const struct stg_hash *h, struct seg *g,
			  uint64_t off)
{
	struct stg_chunkindex_entry e;
	pthread_mutex_lock(&s->lock);
	bool there = stg_chunkindex_get(s->index, h, &e) && e.segment == g->id &&
		     (uint64_t)e.offset * store_offset_unit(g) == off;
	if (there) {
		g->live -= store_rsize_in(g, e.len);
		store_body_removed(s, &e);
	}
	pthread_mutex_unlock(&s->lock);
	if (there) {
		store_distrust_hints(s, g);
		store_drop_orphans(s);
	}
}

/* Finds h and takes a reference on its segment. Returns 0 or -ENOENT. */
static int locate(struct stg_store *s, const struct stg_hash *h, struct seg **ret_g,
		  uint64_t *ret_off, uint32_t *ret_len)
{
	int r = -ENOENT;
	pthread_mutex_lock(&s->lock);
	struct stg_chunkindex_entry e;
	struct seg *g = stg_chunkindex_get(s->index, h, &e) ? store_seg_find(s, e.segment) : NULL;
	if (g) {
		g->refs++;
		*ret_g = g;
		*ret_off = (uint64_t)e.offset * store_offset_unit(g);
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
	r = store_read_record(s, g, off, len, h, &mem);
	if (r == -EBADMSG)
		store_forget_damaged(s, h, g, off);
	store_seg_put(s, g);
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

static int sync_round(struct stg_store *s)
{
	struct synced *dirty = calloc(s->nsegs ? s->nsegs : 1, sizeof(*dirty));
	if (!dirty)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < s->nsegs; i++) {
		struct seg *g = s->segs[i];
		/* (One not appended to since may have records for its log: those
		 * behind an append that failed.) */
		if (!g->dirty && g->nunlogged == 0)
			continue;
		g->dirty = false;
		g->refs++;
		struct synced *y = &dirty[n++];
		y->g = g;
		store_take_loggable(g, y);
	}
	pthread_mutex_unlock(&s->lock);
	int r = 0;
	for (size_t i = 0; i < n; i++) {
		struct synced *y = &dirty[i];
		if (r == 0 && fdatasync(y->g->fd) < 0)
			r = stg_log_errno(STG_LOG_ERROR, -errno, "store: fdatasync of segment %016"
					  PRIx32, y->g->id);
		if (r == 0 && y->v)
			store_log_synced(s, y);
		free(y->v);
		store_seg_put(s, y->g);
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
		store_seg_close(s->segs[i]);
	free(s->segs);
	stg_chunkindex_free(s->index);
	stg_bases_free(s->bases);
	store_refs_free(s);
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
	r = store_recover(s);
	if (r < 0)
		goto out_free;
	r = stg_thread_start(&s->sealer, NULL, store_sealer_main, s);
	if (r < 0)
		goto out_free;
	pthread_setname_np(s->sealer, "seal");
	s->sealer_running = true;
	*ret = s;
	return 0;

out_free:
	stg_store_free(s);
	return r;
}
