/* SPDX-License-Identifier: MIT */
/* Retention (keep = N) and garbage collection of packs no version references. */
#include "gc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"
#include "chunk.h"
#include "policy.h"
#include "index.h"
#include "log.h"
#include "pack.h"
#include "util.h"

/* Compaction: only packs of at least this size, at most this much copied per
 * collection (it runs in the close() that pruned a version). */
#define STG_COMPACT_MIN (1ull << 20)
#define STG_COMPACT_BUDGET (256ull << 20)

int stg_gc_pin(struct stg_cache *c)
{
	return stg_cache_lock_packs(c, LOCK_SH);
}

void stg_gc_unpin(int pinfd)
{
	if (pinfd >= 0)
		close(pinfd);
}

/* Live chunk records: an open-addressing set keyed by (pack, offset). */
struct live {
	struct stg_manifest_entry *slots;
	size_t cap, n;
};

static size_t slot_of(const struct live *l, uint64_t pack, uint64_t offset)
{
	uint64_t k = (pack ^ (offset * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
	return (size_t)(k >> 17) & (l->cap - 1);
}

static int live_add(struct live *l, const struct stg_manifest_entry *e);

static int live_grow(struct live *l)
{
	struct live bigger = {.cap = l->cap ? l->cap * 2 : 1024};
	bigger.slots = calloc(bigger.cap, sizeof(*bigger.slots));
	if (!bigger.slots)
		return -ENOMEM;
	for (size_t i = 0; i < l->cap; i++)
		if (l->slots[i].pack)
			live_add(&bigger, &l->slots[i]);
	free(l->slots);
	*l = bigger;
	return 0;
}

static int live_add(struct live *l, const struct stg_manifest_entry *e)
{
	if ((l->n + 1) * 2 > l->cap) {
		int r = live_grow(l);
		if (r < 0)
			return r;
	}
	for (size_t i = slot_of(l, e->pack, e->offset);; i = (i + 1) & (l->cap - 1)) {
		struct stg_manifest_entry *s = &l->slots[i];
		if (!s->pack) {
			*s = *e;
			s->flags &= STG_ENTRY_ENCODED;
			l->n++;
			return 0;
		}
		if (s->pack == e->pack && s->offset == e->offset)
			return 0;
	}
}

static int mark_file(void *arg, const char *path, int filedirfd)
{
	struct live *live = arg;
	uint64_t *v;
	size_t n;
	int r = stg_catalog_versions(filedirfd, &v, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n && r == 0; i++) {
		struct stg_manifest m;
		int rr = stg_catalog_read(filedirfd, v[i], &m);
		if (rr == -EBADMSG || rr == -ENOENT)
			continue; /* nothing in a corrupt manifest can be restored anyway */
		if (rr == -EPROTONOSUPPORT) {
			/* A newer stagehand's: its chunks are unknown, so none may go. */
			stg_log(STG_LOG_DEBUG, "'%s': version %" PRIu64 " has a manifest format "
				"newer than this stagehand reads: nothing is collected", path, v[i]);
			r = rr;
			break;
		}
		if (rr < 0) {
			r = rr;
			break;
		}
		for (uint32_t k = 0; k < m.nchunks && r == 0; k++)
			if (!(m.entries[k].flags & STG_ENTRY_ZERO))
				r = live_add(live, &m.entries[k]);
		stg_manifest_done(&m);
	}
	free(v);
	return r;
}

static int cmp_location(const void *a, const void *b)
{
	const struct stg_manifest_entry *x = a, *y = b;
	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The live entries of one pack: a run of the location-sorted array. */
struct run {
	size_t first, n;
	uint64_t live;
};

static bool find_run(const struct stg_manifest_entry *v, size_t n, uint64_t pack, struct run *ret)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (v[mid].pack < pack)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == n || v[lo].pack != pack)
		return false;
	*ret = (struct run){.first = lo};
	for (size_t i = lo; i < n && v[i].pack == pack; i++) {
		ret->n++;
		ret->live += stg_pack_record_size(v[i].stored_len);
	}
	return true;
}

/* Compaction moves records: each pair is (old location, new location). */
struct move {
	struct stg_manifest_entry from, to;
};

struct moves {
	struct move *v;
	size_t n;
};

static int cmp_move(const void *a, const void *b)
{
	return cmp_location(&((const struct move *)a)->from, &((const struct move *)b)->from);
}

static const struct stg_manifest_entry *moved_to(const struct moves *mv,
						 const struct stg_manifest_entry *e)
{
	size_t lo = 0, hi = mv->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = cmp_location(&mv->v[mid].from, e);
		if (c == 0)
			return &mv->v[mid].to;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Points every manifest of one path at the records' new places. */
static int relocate_file(void *arg, const char *path, int filedirfd)
{
	const struct moves *mv = arg;
	/* The path's lock: a chmod amending a manifest must not race with this. */
	int r = stg_flock(filedirfd, LOCK_EX);
	if (r < 0)
		return r;
	uint64_t *v = NULL;
	size_t n = 0;
	r = stg_catalog_versions(filedirfd, &v, &n);
	for (size_t i = 0; r == 0 && i < n; i++) {
		struct stg_manifest m;
		if (stg_catalog_read(filedirfd, v[i], &m) < 0)
			continue;
		bool changed = false;
		for (uint32_t k = 0; k < m.nchunks; k++) {
			const struct stg_manifest_entry *to =
				m.entries[k].flags & STG_ENTRY_ZERO ? NULL : moved_to(mv, &m.entries[k]);
			if (to) {
				m.entries[k].pack = to->pack;
				m.entries[k].offset = to->offset;
				changed = true;
			}
		}
		/* Same version, same content, new addresses: rewritten atomically. */
		struct stg_catalog_file f = {.dirfd = filedirfd};
		if (changed)
			r = stg_catalog_publish(&f, path, &m, true);
		stg_manifest_done(&m);
	}
	free(v);
	flock(filedirfd, LOCK_UN);
	return r;
}

/* Copies the live records of mostly-dead packs into one new pack and points
 * the manifests there. Returns how many packs it emptied (their ids in
 * emptied[]), or -errno. */
static int compact(struct stg_cache *c, struct stg_manifest_entry *live, size_t nlive,
		   const uint64_t *ids, const uint64_t *sizes, size_t npacks, uint64_t *emptied)
{
	uint32_t maxlen = 1;
	for (size_t i = 0; i < nlive; i++)
		if (live[i].raw_len > maxlen)
			maxlen = live[i].raw_len;
	struct moves mv = {.v = malloc((nlive ? nlive : 1) * sizeof(*mv.v))};
	uint8_t *rec = malloc(STG_CHUNK_HEADER_SIZE + stg_chunk_bound(maxlen));
	struct stg_pack_writer *w = NULL;
	int r = mv.v && rec ? stg_pack_writer_new(c, maxlen, &w) : -ENOMEM;
	size_t nemptied = 0;
	bool named = false; /* manifests may point into the new pack */
	uint64_t budget = STG_COMPACT_BUDGET;
	for (size_t p = 0; r == 0 && p < npacks; p++) {
		struct run run;
		if (!find_run(live, nlive, ids[p], &run))
			continue;
		/* Worth it: at least half of it dead, and not a small one. */
		uint64_t dead = sizes[p] > run.live ? sizes[p] - run.live : 0;
		if (sizes[p] < STG_COMPACT_MIN || dead * 2 < sizes[p] || run.live > budget)
			continue;
		budget -= run.live;
		bool all = true;
		for (size_t i = run.first; r == 0 && i < run.first + run.n; i++) {
			struct stg_manifest_entry e = live[i];
			r = stg_pack_read_record(c, &e, rec);
			if (r == -EBADMSG || r == -ENOENT) {
				r = 0; /* damaged: it stays, for restore to report */
				all = false;
				continue;
			}
			if (r == 0)
				r = stg_pack_writer_copy(w, rec, STG_CHUNK_HEADER_SIZE + e.stored_len, &e);
			if (r == 0)
				mv.v[mv.n++] = (struct move){live[i], e};
		}
		if (r == 0 && all)
			emptied[nemptied++] = ids[p];
	}
	if (r == 0 && mv.n) {
		/* The copies durable first, then the manifests that point at them;
		 * the old packs go last (the caller). A crash in between leaves
		 * both, and the next collection finishes the job. */
		r = stg_pack_writer_sync(w);
		qsort(mv.v, mv.n, sizeof(*mv.v), cmp_move);
		named = r == 0;
		if (r == 0)
			r = stg_catalog_foreach(c, relocate_file, &mv);
		/* The live set follows too (it becomes the index). */
		for (size_t i = 0; r == 0 && i < nlive; i++) {
			const struct stg_manifest_entry *to = moved_to(&mv, &live[i]);
			if (to) {
				live[i].pack = to->pack;
				live[i].offset = to->offset;
			}
		}
	}
	/* A copy that failed (a full disk) before any manifest named it goes:
	 * it would only take the room that is missing. */
	if (r < 0 && !named)
		stg_pack_writer_discard(w);
	else
		stg_pack_writer_free(w);
	free(mv.v);
	free(rec);
	return r < 0 ? r : (int)nemptied;
}

/* Leftovers in tmp/ of processes that died (see the shim):
 * - <file id>.shadow, the shadow several processes share, that nobody holds:
 *   what its writers wrote was never committed. Decided under its
 *   <file id>.open lock, as the shim decides; skipped when that is busy.
 * - <file id>.content without its <file id>.commit record: a pending commit
 *   that a crash cut short before its close returned, or packed (pending.h);
 *   <file id>.content.new and <file id>.commit.tmp.*, the halves of one cut
 *   short while it was being written.
 * - <dev>-<ino>.hold, the lock file of a shadow, that nobody holds. */
/* The open lock of the file id that name starts with, if nobody holds it
 * (-1 otherwise): the shim decides under it what tmp/ holds for the path. */
static int try_open_lock(struct stg_cache *c, const char *name)
{
	char lockname[64];
	snprintf(lockname, sizeof(lockname), "%.*s.open", STG_HASH_HEX_LEN, name);
	int lk = openat(c->tmp_fd, lockname, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (lk >= 0 && stg_flock(lk, LOCK_EX | LOCK_NB) < 0) {
		close(lk);
		lk = -1;
	}
	return lk;
}

static void sweep_tmp(struct stg_cache *c)
{
	DIR *d = stg_opendir_at(c->tmp_fd, ".");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		struct stat st;
		if (n == STG_HASH_HEX_LEN + 7 && strcmp(de->d_name + STG_HASH_HEX_LEN, ".shadow") == 0) {
			int lk = try_open_lock(c, de->d_name);
			if (lk < 0)
				continue;
			if (fstatat(c->tmp_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    !stg_cache_shadow_held(c, st.st_dev, st.st_ino))
				unlinkat(c->tmp_fd, de->d_name, 0);
			close(lk);
		} else if (n > STG_HASH_HEX_LEN && (strcmp(de->d_name + STG_HASH_HEX_LEN, ".content") == 0 ||
						     strcmp(de->d_name + STG_HASH_HEX_LEN, ".content.new") == 0 ||
						     strncmp(de->d_name + STG_HASH_HEX_LEN, ".commit.tmp.", 12) == 0)) {
			/* (a close links the content before it writes the record) */
			char record[64];
			snprintf(record, sizeof(record), "%.*s.commit", STG_HASH_HEX_LEN, de->d_name);
			int lk = try_open_lock(c, de->d_name);
			if (lk < 0)
				continue;
			bool whole = strcmp(de->d_name + STG_HASH_HEX_LEN, ".content") == 0;
			if (!whole || (fstatat(c->tmp_fd, record, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT))
				unlinkat(c->tmp_fd, de->d_name, 0);
			close(lk);
		} else if (n >= 6 && strcmp(de->d_name + n - 5, ".hold") == 0) {
			int h = openat(c->tmp_fd, de->d_name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
			if (h < 0)
				continue;
			if (flock(h, LOCK_EX | LOCK_NB) == 0)
				unlinkat(c->tmp_fd, de->d_name, 0);
			close(h);
		}
	}
	closedir(d);
}

/* The pack files there are, with their sizes. */
static int list_packs(struct stg_cache *c, uint64_t **ret_ids, uint64_t **ret_sizes, size_t *ret_n)
{
	DIR *d = stg_opendir_at(c->packs_fd, ".");
	if (!d)
		return -errno;
	uint64_t *ids = NULL, *sizes = NULL;
	size_t n = 0, capids = 0, capsizes = 0;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		uint64_t id;
		struct stat st;
		if (stg_pack_parse_name(de->d_name, &id) < 0 ||
		    fstatat(c->packs_fd, de->d_name, &st, 0) < 0)
			continue;
		if (STG_GROW(ids, capids, n + 1) < 0 || STG_GROW(sizes, capsizes, n + 1) < 0) {
			r = -ENOMEM;
			break;
		}
		ids[n] = id;
		sizes[n++] = (uint64_t)st.st_size;
	}
	closedir(d);
	if (r < 0) {
		free(ids);
		free(sizes);
		return r;
	}
	*ret_ids = ids;
	*ret_sizes = sizes;
	*ret_n = n;
	return 0;
}

static void remove_pack(struct stg_cache *c, uint64_t id)
{
	char rel[48];
	stg_pack_relpath(id, rel);
	unlinkat(c->packs_fd, rel + strlen("packs/"), 0);
}

int stg_gc_collect(struct stg_cache *c, int wait, struct stg_gc_result *ret)
{
	struct stg_gc_result res = {0};
	int lockfd = stg_cache_lock_packs(c, LOCK_EX | (wait ? 0 : LOCK_NB));
	if (lockfd < 0)
		return lockfd;
	struct live live = {0};
	struct stg_manifest_entry *entries = NULL;
	uint64_t *ids = NULL, *sizes = NULL, *emptied = NULL;
	size_t np = 0, ne = 0;
	/* Deleted versions whose time is up go first: their chunks with them. */
	int r = stg_catalog_expire(c, stg_now_ns(), NULL);
	if (r == 0)
		r = stg_catalog_foreach(c, mark_file, &live);
	if (r < 0)
		goto out;
	entries = malloc((live.n ? live.n : 1) * sizeof(*entries));
	if (!entries) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < live.cap; i++)
		if (live.slots[i].pack)
			entries[ne++] = live.slots[i];
	qsort(entries, ne, sizeof(*entries), cmp_location);
	r = list_packs(c, &ids, &sizes, &np);
	if (r < 0)
		goto out;

	/* With the lock held exclusively nobody is writing a pack: one that no
	 * manifest names belongs to a version that was pruned or never made it. */
	for (size_t p = 0; p < np; p++) {
		struct run run;
		if (!find_run(entries, ne, ids[p], &run)) {
			remove_pack(c, ids[p]);
			res.packs_removed++;
			res.bytes_removed += sizes[p];
			ids[p] = 0;
		}
	}
	/* Packs mostly dead (an early version whose unchanged chunks later ones
	 * still use) are compacted: their live records move to a new pack. */
	emptied = calloc(np ? np : 1, sizeof(*emptied));
	if (!emptied) {
		r = -ENOMEM;
		goto out;
	}
	/* Compacting only saves room: when it fails (on a full disk), the
	 * collection goes on without it. */
	int ncompacted = compact(c, entries, ne, ids, sizes, np, emptied);
	if (ncompacted < 0) {
		stg_log_errno(STG_LOG_DEBUG, ncompacted, "compacting packs");
		ncompacted = 0;
	}
	for (int k = 0; k < ncompacted; k++) {
		for (size_t p = 0; p < np; p++) {
			if (ids[p] != emptied[k])
				continue;
			remove_pack(c, ids[p]);
			res.packs_removed++;
			res.bytes_removed += sizes[p];
			res.packs_compacted++;
		}
	}
	res.live_chunks = ne;
	for (size_t i = 0; i < ne; i++)
		res.live_bytes += stg_pack_record_size(entries[i].stored_len);
	r = stg_index_rewrite(c, entries, ne);
	sweep_tmp(c);
	/* Nobody stores while we hold the lock: this count is exact. */
	uint64_t npacks, bytes;
	stg_cache_count_packs(c, &npacks, &bytes);
	res.packs_kept = npacks;
	res.bytes_kept = bytes;
	/* Exact whatever else failed: a count left too high fills the cache. */
	int ur = stg_cache_set_usage(c, bytes);
	r = r < 0 ? r : ur;
out:
	free(live.slots);
	free(entries);
	free(ids);
	free(sizes);
	free(emptied);
	close(lockfd);
	if (r == 0 && ret)
		*ret = res;
	return r;
}
