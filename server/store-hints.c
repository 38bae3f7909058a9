/* SPDX-License-Identifier: MIT */
/* The store's hint files and hint logs as segments are appended to and sealed (docs/STORE.md). */
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

/* Gives segment g, about to be appended to, a hint log holding its
 * gathered entries. Without one (an error, logged), the next start scans
 * the segment. */
void store_open_hint_log(struct stg_store *s, struct seg *g)
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
void store_reopen_hint_log(struct stg_store *s, struct seg *g, size_t logged)
{
	struct stg_hint_key k = {.id = g->id, .created_ns = g->created_ns};
	int fd = stg_hint_log_reopen(s->segdirfd, &k, logged);
	if (fd < 0) {
		store_open_hint_log(s, g);
		return;
	}
	int r = stg_hint_log_append(fd, g->hints + logged, g->nhints - logged);
	if (r < 0) {
		close(fd);
		store_open_hint_log(s, g);
		return;
	}
	g->log_fd = fd;
}

/* Appends e to the array *v; returns 0 or -ENOMEM. */
int store_entries_push(struct stg_hint_entry **v, size_t *n, size_t *cap,
		       const struct stg_hint_entry *e)
{
	if (STG_GROW(*v, *cap, *n + 1) < 0)
		return -ENOMEM;
	(*v)[(*n)++] = *e;
	return 0;
}

/* Adds a record of g to its hint entries, and to those its hint log is to
 * get. Called with the lock held (or alone, at open). */
void store_hint_push(struct seg *g, const struct stg_hash *h, uint64_t off, uint32_t len,
		     const struct stg_hash *base)
{
	struct stg_hint_entry e = {
		.hash = *h, .base = base ? *base : (struct stg_hash){{0}}, .offset = off,
		.len = len, .delta = base != NULL};
	if (!g->hints_lost && store_entries_push(&g->hints, &g->nhints, &g->caphints, &e) < 0) {
		g->hints_lost = true;
		free(g->hints);
		g->hints = NULL;
		g->nhints = g->caphints = 0;
	}
	if (g->log_fd >= 0 && !g->log_failed &&
	    store_entries_push(&g->unlogged, &g->nunlogged, &g->capunlogged, &e) < 0)
		g->log_failed = true; /* the log stays a prefix: the start scans past it */
}

void store_inflight_done(struct seg *g, uint64_t off)
{
	for (size_t i = 0; i < g->ninflight; i++) {
		if (g->inflight[i] != off)
			continue;
		g->inflight[i] = g->inflight[--g->ninflight];
		return;
	}
}

static int cmp_hint(const void *a, const void *b);

/* Takes from g's unlogged entries those its log can get after this round
 * into y (in the segment's order). Called with the lock held. */
void store_take_loggable(struct seg *g, struct synced *y)
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
void store_log_synced(struct stg_store *s, struct synced *y)
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

static int cmp_hint(const void *a, const void *b)
{
	const struct stg_hint_entry *x = a, *y = b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Writes the hint of sealed segment g from its gathered entries. Its
 * records are durable already (the caller saw to it): a hint never names a
 * record that a crash could still take. */
int store_write_hint(struct stg_store *s, struct seg *g, struct stg_hint_entry *v, size_t n)
{
	struct stat st;
	if (fstat(g->fd, &st) < 0)
		return -errno;
	qsort(v, n, sizeof(*v), cmp_hint);
	struct stg_hint_key k = {g->id, g->created_ns, (uint64_t)st.st_size};
	return stg_hint_write(s->segdirfd, &k, v, n);
}

/* A record of g was found damaged and forgotten: g's hint and hint log
 * still name it, and a start would take it back unread. They go, and g
 * gets neither again: the next start scans it (and leaves the record out,
 * or finds it sound if the damage was on the way, not on the disk). */
void store_distrust_hints(struct stg_store *s, struct seg *g)
{
	pthread_mutex_lock(&s->lock);
	g->distrusted = true;
	g->hints_lost = true;
	g->log_failed = true;
	pthread_mutex_unlock(&s->lock);
	char name[STG_HINT_NAME_LEN + 1];
	stg_hint_name(g->id, name);
	unlinkat(s->segdirfd, name, 0);
	stg_hint_log_name(g->id, name);
	unlinkat(s->segdirfd, name, 0);
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

void *store_sealer_main(void *arg)
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
		/* Durable through a sync round, not an fdatasync of its own:
		 * the kernel reports a failed writeback to the first fdatasync
		 * on the file after it, and only a round's failure keeps the
		 * store from acknowledging the records lost. Every append to g
		 * is done: the round that stg_store_sync waits for covers
		 * them, or failed. */
		int r = lost ? -ENODATA : stg_store_sync(s);
		if (r == 0)
			r = store_write_hint(s, g, v, n);
		if (r < 0 && r != -ENODATA)
			stg_log_errno(STG_LOG_WARN, r, "store: cannot write the hint of segment %016"
				      PRIx32 "; a restart scans it", g->id);
		pthread_mutex_lock(&s->lock);
		bool distrusted = g->distrusted;
		pthread_mutex_unlock(&s->lock);
		char name[STG_HINT_NAME_LEN + 1];
		if (r == 0 && distrusted) {
			/* Damage found while it was written (after
			 * store_distrust_hints removed the hint, or before). */
			stg_hint_name(g->id, name);
			unlinkat(s->segdirfd, name, 0);
		} else if (r == 0) {
			/* The hint serves now; without it, the log still does. */
			stg_hint_log_name(g->id, name);
			unlinkat(s->segdirfd, name, 0);
		}
		free(v);
		store_seg_put(s, g);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}
