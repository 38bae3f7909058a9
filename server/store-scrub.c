/* SPDX-License-Identifier: MIT */
/* The store's scrub: every record of the sealed segments read and checked in turn. */
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
	return store_entries_push(&c->v, &c->n, &c->cap, e);
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
		if (s->segs[i]->id > c->segment && store_sealed(s, s->segs[i]) &&
		    !s->segs[i]->to_seal)
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
	store_seg_put(s, g);
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
	    ie.len == e->len)
		g = store_seg_find(s, c->segment);
	if (g && (uint64_t)ie.offset * store_offset_unit(g) != e->offset)
		g = NULL;
	if (g)
		g->refs++;
	pthread_mutex_unlock(&s->lock);
	if (!g)
		return 0;
	uint8_t *mem = NULL;
	int r = store_read_record(s, g, e->offset, e->len, &e->hash, &mem);
	if (r == -EBADMSG)
		store_forget_damaged(s, &e->hash, g, e->offset);
	free(mem);
	uint64_t n = store_rsize_in(g, e->len);
	store_seg_put(s, g);
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
