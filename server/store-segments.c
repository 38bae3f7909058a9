/* SPDX-License-Identifier: MIT */
/* The store's segment files: the table of them, their references, creating the next one. */
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

struct seg *store_seg_find(const struct stg_store *s, uint64_t id)
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
int store_table_reserve(struct stg_store *s)
{
	return STG_GROW(s->segs, s->capsegs, s->nsegs + 1);
}

/* Appends g (ids only grow); table_reserve made room. */
void store_table_add(struct stg_store *s, struct seg *g)
{
	s->segs[s->nsegs++] = g;
	s->total += g->end;
}

void store_table_remove(struct stg_store *s, struct seg *g)
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

void store_seg_close(struct seg *g)
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
void store_seg_put(struct stg_store *s, struct seg *g)
{
	pthread_mutex_lock(&s->lock);
	bool last = --g->refs == 0;
	pthread_mutex_unlock(&s->lock);
	if (last)
		store_seg_close(g);
}

/* Bytes a record of len body bytes takes in g. */
uint64_t store_rsize_in(const struct seg *g, uint32_t len)
{
	return stg_segment_record_size(g->format, len);
}

int store_seg_new(uint64_t id, unsigned format, int64_t created_ns, int fd, struct seg **ret)
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
 * takes it (store_write_record, store_read_record): the segment appended to gets a
 * second descriptor for them at once, the others when a large record is
 * first read. Not where a page holds several records' alignments (64 KiB
 * pages): a page written both ways could be written back stale over a
 * record. Returns the descriptor, or -1 (then the page cache serves). */
int store_seg_direct_fd(struct stg_store *s, struct seg *g)
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
	r = store_seg_new(id, STG_SEGMENT_FORMAT, created_ns, fd, ret);
	if (r < 0)
		goto out_close;
	store_seg_direct_fd(s, *ret);
	store_open_hint_log(s, *ret);
	return 0;

out_unlink:
	unlinkat(s->segdirfd, tmp, 0);
out_close:
	close(fd);
	return r;
}

/* Called and returns with the lock held; creates the next segment without
 * it and makes it the active one. */
int store_roll(struct stg_store *s)
{
	if (s->next_id > UINT32_MAX)
		return -EOVERFLOW;
	int r = store_table_reserve(s);
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
	store_table_add(s, g); /* only store_roll() adds, one at a time: the room is still there */
	if (s->active) {
		s->active->to_seal = true;
		pthread_cond_signal(&s->seal_cond);
	}
	s->active = g;
	return 0;
}

/* Unlinks segments already taken out of the table and drops the table's
 * reference; readers still holding one read on from the open file. */
void store_unlink_segments(struct stg_store *s, struct seg **v, size_t n)
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
		store_seg_put(s, v[i]);
	}
	if (n && fsync(s->segdirfd) < 0)
		stg_log_errno(STG_LOG_WARN, -errno, "store: fsync of segments/");
}

/* Can gc touch g? Not the active segment, nor one with appends in flight:
 * their records are not in the index yet. */
bool store_sealed(const struct stg_store *s, const struct seg *g)
{
	return g != s->active && g->writers == 0;
}
