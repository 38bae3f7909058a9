/* SPDX-License-Identifier: MIT */
/* The store's garbage collection: dropping the unreferenced, compaction. */
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

void stg_store_gc_begin(struct stg_store *s)
{
	pthread_mutex_lock(&s->lock);
	s->epoch++;
	pthread_mutex_unlock(&s->lock);
}

/* A record to move out of a segment being compacted. */
struct move {
	struct stg_hash hash;
	struct seg *from;
	uint32_t offset; /* in the index's units (store_offset_unit) */
	uint32_t len;
};

struct collect {
	struct stg_store *s;
	struct seg **from;   /* segments being compacted, by id */
	size_t nfrom;
	struct move *v;
	size_t n, cap;
};

static int collect_push(struct collect *c, const struct stg_chunkindex_entry *e, struct seg *from)
{
	if (STG_GROW(c->v, c->cap, c->n + 1) < 0)
		return -ENOMEM;
	c->v[c->n++] = (struct move){e->hash, from, e->offset, e->len};
	return 0;
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

struct gathered {
	struct stg_hint_entry *v;
	size_t n, cap;
};

static int gather_hinted(void *arg, const struct stg_hint_entry *e)
{
	struct gathered *ga = arg;
	return store_entries_push(&ga->v, &ga->n, &ga->cap, e);
}

/* The live records of the segments to compact, taken from their hints, so
 * that the work follows those segments, not the whole store; those without
 * a hint that serves are found by a walk of the index. */
static int find_moves(struct stg_store *s, struct collect *c)
{
	struct seg **unhinted = malloc(c->nfrom * sizeof(*unhinted));
	if (!unhinted)
		return -ENOMEM;
	size_t nunhinted = 0;
	int r = 0;
	for (size_t i = 0; r == 0 && i < c->nfrom; i++) {
		struct seg *g = c->from[i];
		struct gathered ga = {0};
		struct stat st;
		r = fstat(g->fd, &st) < 0 ? -errno : 0;
		struct stg_hint_key k = {g->id, g->created_ns, (uint64_t)st.st_size};
		if (r == 0)
			r = stg_hint_read(s->segdirfd, &k, gather_hinted, &ga);
		if (r < 0 && r != -ENOMEM) {
			unhinted[nunhinted++] = g; /* ids ascending, as c->from */
			r = 0;
		} else if (r == 0) {
			pthread_mutex_lock(&s->lock);
			for (size_t j = 0; r == 0 && j < ga.n; j++) {
				struct stg_chunkindex_entry e;
				if (stg_chunkindex_get(s->index, &ga.v[j].hash, &e) &&
				    e.segment == g->id &&
				    (uint64_t)e.offset * store_offset_unit(g) == ga.v[j].offset)
					r = collect_push(c, &e, g);
			}
			pthread_mutex_unlock(&s->lock);
		}
		free(ga.v);
	}
	if (r == 0 && nunhinted) {
		struct collect walk = *c;
		walk.from = unhinted;
		walk.nfrom = nunhinted;
		pthread_mutex_lock(&s->lock);
		r = stg_chunkindex_foreach(s->index, collect_moves, &walk);
		pthread_mutex_unlock(&s->lock);
		c->v = walk.v;
		c->n = walk.n;
		c->cap = walk.cap;
	}
	free(unhinted);
	return r;
}

static int cmp_move(const void *a, const void *b)
{
	const struct move *x = a, *y = b;
	if (x->from->id != y->from->id)
		return x->from->id < y->from->id ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Removes the entry of m->hash if it still points where m says: a record
 * found damaged, its references kept for when it comes back. Called with
 * the lock held. Returns the record bytes dropped. */
static uint64_t drop_if_at(struct stg_store *s, const struct move *m)
{
	struct stg_chunkindex_entry e;
	if (!stg_chunkindex_get(s->index, &m->hash, &e) || e.segment != m->from->id ||
	    e.offset != m->offset)
		return 0;
	uint64_t size = store_rsize_in(m->from, e.len);
	m->from->live -= size;
	store_body_removed(s, &e);
	s->bodies_damaged = true;
	return size;
}

/* Drops the candidates still without references that were neither put nor
 * touched in this epoch or the one before; keeps the young ones listed. A
 * base whose last delta goes joins the list, and is looked at in turn. */
static void drop_unreferenced(struct stg_store *s, struct stg_store_gc_result *res)
{
	pthread_mutex_lock(&s->lock);
	if (s->refs_broken) {
		free(s->zeros);
		s->zeros = NULL;
		s->nzeros = s->capzeros = 0;
	}
	if (!s->refs_counted || s->refs_broken) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (s->zeros_incomplete)
		store_find_candidates(s);
	size_t kept = 0;
	/* (a count lost meanwhile stops the drops at once) */
	for (size_t i = 0; i < s->nzeros && !s->refs_broken; i++) {
		struct stg_hash h = s->zeros[i];
		struct stg_chunkindex_entry e;
		res->candidates++;
		if (!stg_chunkindex_get(s->index, &h, &e) || e.refs != 0)
			continue;
		if (stg_chunkindex_age(&e, s->epoch) <= 1) {
			s->zeros[kept++] = h;
			continue;
		}
		struct seg *g = store_seg_find(s, e.segment);
		uint64_t size = g ? store_rsize_in(g, e.len) : 0;
		if (g)
			g->live -= size;
		store_body_removed(s, &e);
		res->chunks_dropped++;
		res->bytes_dropped += size;
	}
	s->nzeros = kept;
	pthread_mutex_unlock(&s->lock);
}

/* Copies one live record to the active segment and points the index at the
 * copy if the entry has not changed meanwhile. A corrupt record cannot be
 * moved: its entry is dropped, so that clients send the chunk again. */
static int move_record(struct stg_store *s, const struct move *m, struct stg_store_gc_result *res)
{
	uint8_t *mem;
	uint64_t off = (uint64_t)m->offset * store_offset_unit(m->from);
	int r = store_read_record(s, m->from, off, m->len, &m->hash, &mem);
	if (r == -EBADMSG) {
		pthread_mutex_lock(&s->lock);
		uint64_t size = drop_if_at(s, m);
		pthread_mutex_unlock(&s->lock);
		if (size)
			store_distrust_hints(s, m->from);
		res->chunks_dropped += size > 0;
		res->bytes_dropped += size;
		return 0;
	}
	if (r < 0)
		return r;
	struct seg *g;
	uint64_t noff;
	r = store_reserve(s, m->len, true, &g, &noff);
	if (r < 0)
		goto out_free;
	/* The record header names no location: the bytes move as they are. */
	r = store_write_record(g, noff, mem, mem + STG_RECORD_HEADER_SIZE, m->len);
	struct stg_hash base;
	bool delta = stg_chunk_base(mem + STG_RECORD_HEADER_SIZE, m->len, &base);
	pthread_mutex_lock(&s->lock);
	store_append_done(s, g, r == 0, &m->hash, noff, m->len, delta ? &base : NULL);
	struct stg_chunkindex_entry e;
	if (r == 0 && stg_chunkindex_get(s->index, &m->hash, &e) && e.segment == m->from->id &&
	    e.offset == m->offset) {
		e.segment = g->id;
		e.offset = (uint32_t)(noff / store_offset_unit(g));
		stg_chunkindex_set(s->index, &e);
		m->from->live -= store_rsize_in(m->from, m->len);
		g->live += store_rsize_in(g, m->len);
		res->bytes_moved += store_rsize_in(g, m->len);
	}
	pthread_mutex_unlock(&s->lock);
	store_seg_put(s, g);
out_free:
	free(mem);
	return r;
}

/* Drops the unreferenced chunks, then removes and compacts segments. */
static int collect_garbage(struct stg_store *s, struct stg_store_gc_result *ret)
{
	struct stg_store_gc_result res = {0};
	struct collect c = {.s = s};
	struct seg **empty = NULL;
	size_t nempty = 0;
	int r = 0;
	drop_unreferenced(s, &res);

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
		if (store_sealed(s, g) && g->live == 0) {
			store_table_remove(s, g); /* its reference passes to empty[] */
			empty[nempty++] = g;
			continue;
		}
		if (store_sealed(s, g) && g->live <= g->end / 2) {
			g->refs++;
			c.from[c.nfrom++] = g;
		}
		i++;
	}
	pthread_mutex_unlock(&s->lock);
	store_unlink_segments(s, empty, nempty);
	res.segments_removed += nempty;
	if (c.nfrom)
		r = find_moves(s, &c);
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
		store_table_remove(s, c.from[i]);
		empty[nempty++] = c.from[i];
	}
	pthread_mutex_unlock(&s->lock);
	store_unlink_segments(s, empty, nempty);
	res.segments_removed += nempty;
	res.segments_compacted += nempty;
out_put:
	for (size_t i = 0; i < c.nfrom; i++)
		store_seg_put(s, c.from[i]);
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
	/* A damaged record moved out may have been some delta's base. */
	pthread_mutex_lock(&s->lock);
	bool damaged = s->bodies_damaged;
	s->bodies_damaged = false;
	pthread_mutex_unlock(&s->lock);
	if (r == 0 && damaged)
		r = store_drop_orphans(s);
	pthread_mutex_unlock(&s->gc_lock);
	return r;
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
	if (STG_GROW(o->v, o->cap, o->n + 1) < 0)
		return -ENOMEM;
	o->v[o->n++] = *h;
	return 0;
}

/* A delta whose base was lost (a corrupt record, found at start or moved
 * out by compaction) cannot be decoded: it is forgotten, so that HAVE says
 * it is absent and clients send it again. So are the deltas built on it,
 * in turn. Takes the lock. */
int store_drop_orphans(struct stg_store *s)
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
			if (!stg_chunkindex_get(s->index, &o.v[i], &e)) {
				stg_bases_remove(s->bases, &o.v[i]);
				continue;
			}
			struct seg *g = store_seg_find(s, e.segment);
			if (g)
				g->live -= store_rsize_in(g, e.len);
			store_body_removed(s, &e);
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
