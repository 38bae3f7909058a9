/* SPDX-License-Identifier: MIT */
/* Restore's pipeline: a prefetcher asks the disk for the records ahead,
 * decoders (this thread and another) take the slots of a ring of aligned
 * buffers in order and fill them with verified chunks, writer threads write
 * runs of filled slots out. */
#include "pipeline.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "chunk.h"
#include "pack.h"
#include "util.h"
#include "thread.h"

#define RING 128
/* Fewer slots for larger chunks: restore's memory stays bounded (64 MiB for
 * the slots and the decoders' buffers, 2 slots at least). */
#define RING_BYTES (64ull << 20)
/* Chunks are read and verified by this many threads (the caller's among
 * them): decoding a MiB takes about a millisecond, which alone made a
 * restore slower than the disk. */
#define DECODERS 2
/* The writer hands the disk up to this many chunks in one call. */
#define BATCH 8
/* Written through the page cache, every this many bytes are sent to the
 * disk as they are written, not all by the final fsync. */
#define KICK_BYTES (8u << 20)

struct slot {
	uint8_t *buf;
	uint64_t off;
	uint32_t len;
	bool busy;    /* a decoder is filling it */
	bool full;    /* filled by a decoder */
	bool claimed; /* a writer is writing it */
	bool done;    /* written: free once every slot before it is too */
};

/* Several writers keep several writes in flight: the disk queues them. */
#define WRITERS 3

struct ring {
	uint8_t *arena; /* the slots' buffers, one mapping */
	size_t arena_len;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct slot slots[RING];
	size_t n;          /* slots in use */
	size_t head, tail; /* the decoders take head, the writers free tail */
	size_t claim;      /* the next slot a writer takes */
	bool done;         /* the decoders have nothing more */
	int werr;          /* the writer's first error */
	int fd, flags;
	bool direct;
	stg_progress_fn progress;
	void *arg;
	uint64_t total, written; /* written: bytes, in any order */
	uint64_t freed_to;       /* every slot before this offset is written */
	uint64_t kicked_to;      /* writeback started up to here */
};

/* Writes n iovecs at off in full. Returns 0 or -errno. */
static int pwritev_all(int fd, struct iovec *iov, int n, off_t off)
{
	while (n > 0) {
		ssize_t w = pwritev(fd, iov, n, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		off += w;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

static void *writer(void *p)
{
	struct ring *rg = p;
	for (;;) {
		pthread_mutex_lock(&rg->lock);
		while (!(rg->slots[rg->claim].full && !rg->slots[rg->claim].claimed) && !rg->done)
			pthread_cond_wait(&rg->cond, &rg->lock);
		if (!(rg->slots[rg->claim].full && !rg->slots[rg->claim].claimed)) {
			pthread_mutex_unlock(&rg->lock);
			return NULL;
		}
		/* Consecutive full slots that continue each other go in one call:
		 * bigger writes keep the disk busier. */
		struct iovec iov[BATCH];
		size_t first = rg->claim;
		int n = 0;
		uint64_t off = rg->slots[first].off, end = off;
		for (size_t i = first; n < BATCH; i = (i + 1) % rg->n) {
			struct slot *s = &rg->slots[i];
			if (!s->full || s->claimed || s->off != end || (n > 0 && s->len % STG_PACK_ALIGN))
				break;
			s->claimed = true;
			iov[n++] = (struct iovec){s->buf, s->len};
			end += s->len;
			if (s->len % STG_PACK_ALIGN)
				break; /* an unaligned length ends a batch */
		}
		rg->claim = (first + (size_t)n) % rg->n;
		bool direct = rg->direct;
		if (direct && iov[n - 1].iov_len % STG_PACK_ALIGN) {
			/* A chunk of unaligned length (the last one, any content-
			 * defined one) cannot go direct, nor can any after it. */
			fcntl(rg->fd, F_SETFL, rg->flags & ~O_DIRECT);
			rg->direct = false;
		}
		int werr = rg->werr;
		pthread_mutex_unlock(&rg->lock);
		int r = werr ? 0 : pwritev_all(rg->fd, iov, n, (off_t)off);
		pthread_mutex_lock(&rg->lock);
		if (r < 0 && !rg->werr)
			rg->werr = r;
		for (int k = 0; k < n; k++)
			rg->slots[(first + (size_t)k) % rg->n].done = true;
		/* Slots are reused in order: free the run that is written. */
		while (rg->slots[rg->tail].done) {
			struct slot *s = &rg->slots[rg->tail];
			rg->freed_to = s->off + s->len;
			s->full = s->claimed = s->done = false;
			rg->tail = (rg->tail + 1) % rg->n;
		}
		rg->written += end - off;
		uint64_t written = rg->written;
		/* Through the page cache, start the writeback of what is written
		 * in order: the disk works while the rest is decoded, as it
		 * does with O_DIRECT, and the final fsync waits for the tail. */
		uint64_t kick = 0, kick_len = 0;
		if (!rg->direct && rg->freed_to - rg->kicked_to >= KICK_BYTES) {
			kick = rg->kicked_to;
			kick_len = rg->freed_to - rg->kicked_to;
			rg->kicked_to = rg->freed_to;
		}
		pthread_cond_broadcast(&rg->cond);
		pthread_mutex_unlock(&rg->lock);
		if (kick_len)
			sync_file_range(rg->fd, (off_t)kick, (off_t)kick_len, SYNC_FILE_RANGE_WRITE);
		if (rg->progress && !r)
			rg->progress(rg->arg, written, rg->total);
	}
}

/* The prefetcher keeps the disk this many bytes of records ahead of the
 * decoders: reads in flight, and no more read than the version holds. */
#define AHEAD_BYTES (16u << 20)

struct ahead {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct stg_cache *cache;
	const struct stg_manifest *m;
	uint64_t read_to;  /* the decoders have read this many bytes of records... */
	uint64_t asked_to; /* ...and the disk was asked for this many */
	bool stop;
};

/* Bytes of a version's records, counted from its first. */
static uint64_t record_bytes(const struct stg_manifest_entry *e)
{
	return e->flags & STG_ENTRY_ZERO ? 0 : STG_CHUNK_HEADER_SIZE + (uint64_t)e->stored_len;
}

static void *prefetcher(void *p)
{
	struct ahead *a = p;
	struct stg_pack_reader rd;
	stg_pack_reader_init(&rd, a->cache);
	rd.prefetched = true;
	for (uint32_t i = 0; i < a->m->nchunks; i++) {
		const struct stg_manifest_entry *e = &a->m->entries[i];
		uint64_t len = record_bytes(e);
		if (!len)
			continue;
		pthread_mutex_lock(&a->lock);
		while (!a->stop && a->asked_to >= a->read_to + AHEAD_BYTES)
			pthread_cond_wait(&a->cond, &a->lock);
		bool stop = a->stop;
		/* (The decoders may have read it already: then it is not asked.) */
		bool read = a->asked_to + len <= a->read_to;
		a->asked_to += len;
		pthread_mutex_unlock(&a->lock);
		if (stop)
			break;
		if (!read)
			stg_pack_reader_prefetch(&rd, e);
	}
	stg_pack_reader_done(&rd);
	return NULL;
}

struct decode {
	struct ring *rg;
	struct ahead *ahead; /* NULL: no prefetcher */
	struct stg_cache *cache;
	const struct stg_manifest *m;
	tool_refetch_fn refetch;
	void *refetch_arg;
	pthread_mutex_t refetch_lock; /* a refetch talks on one session */
	/* Under rg->lock: */
	uint32_t next;   /* the next entry a decoder takes */
	uint64_t off;    /* where it goes */
	int err;         /* the first decoder's error */
	struct stg_materialize_error why;
};

/* Takes the next chunk and a free slot for it, in order. Returns false when
 * there is nothing more to do. Called with rg->lock held. */
static bool take(struct decode *d, uint32_t *ret_i, uint64_t *ret_off, struct slot **ret_s)
{
	struct ring *rg = d->rg;
	for (;;) {
		while (d->next < d->m->nchunks && d->m->entries[d->next].flags & STG_ENTRY_ZERO)
			d->off += d->m->entries[d->next++].raw_len; /* a hole: the final size makes it */
		if (d->next == d->m->nchunks || d->err || rg->werr)
			return false;
		struct slot *s = &rg->slots[rg->head];
		if (!s->full && !s->busy) {
			*ret_i = d->next;
			*ret_off = d->off;
			*ret_s = s;
			s->busy = true;
			d->off += d->m->entries[d->next++].raw_len;
			rg->head = (rg->head + 1) % rg->n;
			return true;
		}
		pthread_cond_wait(&rg->cond, &rg->lock);
	}
}

static void *decoder(void *p)
{
	struct decode *d = p;
	struct ring *rg = d->rg;
	struct stg_pack_reader rd;
	stg_pack_reader_init(&rd, d->cache);
	rd.prefetched = d->ahead != NULL;
	uint8_t *scratch = malloc(stg_chunk_bound(d->m->chunk_max));
	uint32_t i;
	uint64_t off;
	struct slot *s;
	pthread_mutex_lock(&rg->lock);
	if (!scratch && !d->err)
		d->err = -ENOMEM;
	while (take(d, &i, &off, &s)) {
		pthread_mutex_unlock(&rg->lock);
		const struct stg_manifest_entry *e = &d->m->entries[i];
		int r = stg_pack_reader_read(&rd, e, s->buf, scratch);
		if (d->ahead) {
			pthread_mutex_lock(&d->ahead->lock);
			d->ahead->read_to += record_bytes(e);
			pthread_cond_signal(&d->ahead->cond);
			pthread_mutex_unlock(&d->ahead->lock);
		}
		struct stg_materialize_error why = {.chunk = i, .entry = *e, .error = r};
		/* (r stays the cache's error when the refetch fails too; a disk
		 * that fails to read is what the replicas are for) */
		if ((r == -EBADMSG || r == -ENOENT || r == -EIO) && d->refetch) {
			pthread_mutex_lock(&d->refetch_lock);
			if (d->refetch(d->refetch_arg, i, &why, s->buf) == 0)
				r = 0;
			pthread_mutex_unlock(&d->refetch_lock);
		}
		pthread_mutex_lock(&rg->lock);
		s->busy = false;
		if (r < 0 && !d->err) {
			d->err = r;
			d->why = why;
		}
		if (r == 0) {
			s->off = off;
			s->len = e->raw_len;
			s->full = true;
		}
		pthread_cond_broadcast(&rg->cond);
	}
	pthread_mutex_unlock(&rg->lock);
	stg_pack_reader_done(&rd);
	free(scratch);
	return NULL;
}

/* The slots' buffers: one mapping, in huge pages where the system gives
 * them, and no more slots than the file has chunks. A slot's first use
 * faults its pages in: in 4 KiB pages, 13,000 faults took a third of a
 * 46 MiB restore's CPU time, 1,700 now. */
static int slots_alloc(struct ring *rg, const struct stg_manifest *m)
{
	if (m->nchunks && rg->n > m->nchunks)
		rg->n = m->nchunks < 2 ? 2 : m->nchunks;
	size_t stride = ((size_t)m->chunk_max + STG_PACK_ALIGN - 1) & ~(size_t)(STG_PACK_ALIGN - 1);
	rg->arena_len = rg->n * stride;
	void *a = mmap(NULL, rg->arena_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (a == MAP_FAILED)
		return -ENOMEM;
	madvise(a, rg->arena_len, MADV_HUGEPAGE); /* advice: 4 KiB pages work too */
	rg->arena = a;
	for (size_t i = 0; i < rg->n; i++)
		rg->slots[i].buf = rg->arena + i * stride;
	return 0;
}

int tool_materialize(struct stg_cache *c, const struct stg_manifest *m, int fd,
		     stg_progress_fn progress, void *arg, tool_refetch_fn refetch,
		     void *refetch_arg, struct stg_materialize_error *err)
{
	/* A decoder holds a chunk's record and, to undo a filter, a chunk
	 * (stg_chunk_decode). */
	uint64_t held = DECODERS * (stg_chunk_bound(m->chunk_max) + (uint64_t)m->chunk_max);
	size_t nslots = RING_BYTES > held ? (RING_BYTES - held) / m->chunk_max : 0;
	struct ring rg = {.fd = fd, .progress = progress, .arg = arg, .total = m->size,
			  .n = nslots < 2 ? 2 : nslots > RING ? RING : nslots};
	pthread_mutex_init(&rg.lock, NULL);
	pthread_cond_init(&rg.cond, NULL);
	rg.flags = fcntl(fd, F_GETFL);
	rg.direct = rg.flags >= 0 && (rg.flags & O_DIRECT);
	int r = slots_alloc(&rg, m);
	if (r == 0 && ftruncate(fd, 0) < 0)
		r = -errno;
	pthread_t th[WRITERS];
	int started = 0;
	while (r == 0 && started < WRITERS && stg_thread_start(&th[started], NULL, writer, &rg) == 0)
		started++;
	if (r == 0 && !started)
		r = -EAGAIN;
	struct ahead ahead = {.cache = c, .m = m};
	pthread_mutex_init(&ahead.lock, NULL);
	pthread_cond_init(&ahead.cond, NULL);
	pthread_t ahead_th;
	bool ahead_started = r == 0 && stg_thread_start(&ahead_th, NULL, prefetcher, &ahead) == 0;
	struct decode d = {.rg = &rg, .ahead = ahead_started ? &ahead : NULL, .cache = c,
			   .m = m, .refetch = refetch, .refetch_arg = refetch_arg, .err = r};
	pthread_mutex_init(&d.refetch_lock, NULL);
	pthread_t dth[DECODERS - 1];
	int decoders = 0;
	while (r == 0 && decoders < DECODERS - 1 &&
	       stg_thread_start(&dth[decoders], NULL, decoder, &d) == 0)
		decoders++;
	decoder(&d); /* this thread is one of them */
	for (int i = 0; i < decoders; i++)
		pthread_join(dth[i], NULL);
	r = d.err;
	if (r < 0 && err)
		*err = d.why;
	if (ahead_started) {
		pthread_mutex_lock(&ahead.lock);
		ahead.stop = true;
		pthread_cond_signal(&ahead.cond);
		pthread_mutex_unlock(&ahead.lock);
		pthread_join(ahead_th, NULL);
	}
	pthread_mutex_destroy(&ahead.lock);
	pthread_cond_destroy(&ahead.cond);
	pthread_mutex_destroy(&d.refetch_lock);
	if (started) {
		pthread_mutex_lock(&rg.lock);
		rg.done = true;
		pthread_cond_broadcast(&rg.cond);
		pthread_mutex_unlock(&rg.lock);
		for (int i = 0; i < started; i++)
			pthread_join(th[i], NULL);
	}
	if (r == 0)
		r = rg.werr;
	if (r == 0 && ftruncate(fd, (off_t)m->size) < 0)
		r = -errno;
	if (r == 0 && progress)
		progress(arg, m->size, m->size);
	if (rg.arena)
		munmap(rg.arena, rg.arena_len);
	pthread_mutex_destroy(&rg.lock);
	pthread_cond_destroy(&rg.cond);
	return r;
}
