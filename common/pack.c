/* SPDX-License-Identifier: MIT */
/* Pack files: chunk records appended at 4 KiB-aligned offsets. Records are
 * written with O_DIRECT where the file system allows, straight from an
 * aligned staging buffer: the data goes to the disk without a second copy
 * through the page cache. */
#include "pack.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <linux/aio_abi.h>
#include <unistd.h>

#include "chunk.h"
#include "log.h"
#include "util.h"

/* Records go to the disk asynchronously (kernel AIO on the O_DIRECT pack)
 * from a ring of staging buffers, so that copying and hashing the next chunk
 * overlaps writing the previous ones. */
#define RING 4

#define PREALLOC (64ull << 20)

struct slot {
	uint8_t *buf;  /* header + raw bytes + padding, aligned */
	uint8_t *cbuf; /* header + compressed bytes + padding, aligned */
	bool busy;     /* a write from it is in flight */
	struct iocb cb;
};

struct stg_pack_writer {
	struct stg_cache *cache;
	uint64_t id;
	int fd;          /* -1 until the first record */
	bool direct;     /* fd has O_DIRECT */
	uint64_t end;    /* where the next record goes */
	uint64_t allocated; /* the pack is preallocated up to here */
	uint64_t reserved; /* bytes of the cache's capacity its records took */
	uint32_t max_chunk;
	struct slot slots[RING];
	int nslots;      /* RING, fewer for big chunks: memory stays bounded */
	int cur;         /* the slot being filled */
	uint8_t *buf, *cbuf; /* = slots[cur]'s */
	size_t buflen, cbuflen;
	aio_context_t ctx; /* 0: synchronous writes */
	int inflight;
	int err;         /* the first failed write, reported at the next call */
};

/* AIO contexts a process made and no writer holds. io_destroy waits for an
 * RCU grace period, tens of milliseconds: a writer per closed file would pay
 * that in close() (a small file's version is one record). So contexts are
 * kept for the next writer, up to a few, and go with the process. A fork
 * child cannot use its parent's: they are dropped when the pid changes. */
#define CTX_POOL 4
static struct {
	pthread_mutex_t lock;
	pid_t pid;
	int n;
	aio_context_t ctx[CTX_POOL];
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static aio_context_t ctx_get(void)
{
	aio_context_t ctx = 0;
	pthread_mutex_lock(&pool.lock);
	if (pool.pid != getpid()) {
		pool.pid = getpid();
		pool.n = 0;
	}
	if (pool.n > 0)
		ctx = pool.ctx[--pool.n];
	pthread_mutex_unlock(&pool.lock);
	/* Every context takes RING events: any writer's slots fit. */
	if (!ctx && syscall(SYS_io_setup, RING, &ctx) < 0)
		ctx = 0;
	return ctx;
}

/* ctx has nothing in flight. */
static void ctx_put(aio_context_t ctx)
{
	pthread_mutex_lock(&pool.lock);
	bool kept = pool.pid == getpid() && pool.n < CTX_POOL;
	if (kept)
		pool.ctx[pool.n++] = ctx;
	pthread_mutex_unlock(&pool.lock);
	if (!kept)
		syscall(SYS_io_destroy, ctx);
}

void stg_pack_relpath(uint64_t pack, char out[48])
{
	snprintf(out, 48, "packs/%016" PRIx64 ".pack", pack);
}

static void pack_name(uint64_t pack, char out[32])
{
	snprintf(out, 32, "%016" PRIx64 ".pack", pack);
}

int stg_pack_parse_name(const char *name, uint64_t *ret)
{
	return stg_parse_hex_name(name, ".pack", ret);
}

static size_t aligned_len(size_t n)
{
	return (n + STG_PACK_ALIGN - 1) & ~(size_t)(STG_PACK_ALIGN - 1);
}

int stg_pack_writer_new(struct stg_cache *c, uint32_t max_chunk, struct stg_pack_writer **ret)
{
	struct stg_pack_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->cache = c;
	w->fd = -1;
	w->max_chunk = max_chunk;
	w->buflen = aligned_len(STG_CHUNK_HEADER_SIZE + max_chunk);
	w->cbuflen = aligned_len(stg_chunk_bound(max_chunk));
	/* At most about 16 MiB of raw staging per writer (and one slot always). */
	w->nslots = (int)((16u << 20) / max_chunk);
	w->nslots = w->nslots < 1 ? 1 : w->nslots > RING ? RING : w->nslots;
	for (int i = 0; i < w->nslots; i++) {
		if (posix_memalign((void **)&w->slots[i].buf, STG_PACK_ALIGN, w->buflen) ||
		    posix_memalign((void **)&w->slots[i].cbuf, STG_PACK_ALIGN, w->cbuflen)) {
			stg_pack_writer_free(w);
			return -ENOMEM;
		}
	}
	w->buf = w->slots[0].buf;
	w->cbuf = w->slots[0].cbuf;
	*ret = w;
	return 0;
}

/* Collects completions: at least min of them. */
static void reap(struct stg_pack_writer *w, int min)
{
	while (w->inflight > 0 && min > 0) {
		struct io_event ev[RING];
		long n = syscall(SYS_io_getevents, w->ctx, min, RING, ev, NULL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			w->err = w->err ? w->err : -errno;
			return;
		}
		for (long i = 0; i < n; i++) {
			struct slot *s = &w->slots[ev[i].data];
			if (ev[i].res != (long long)s->cb.aio_nbytes && !w->err)
				w->err = ev[i].res < 0 ? (int)ev[i].res : -EIO;
			s->busy = false;
			w->inflight--;
			min--;
		}
	}
}

int stg_pack_writer_flush(struct stg_pack_writer *w)
{
	if (w->ctx)
		reap(w, w->inflight);
	return w->err;
}

/* Closes the pack; without keep (a version that was never published), the
 * pack goes, and so does its share of the cache's usage. */
static void close_pack(struct stg_pack_writer *w, bool keep)
{
	stg_pack_writer_flush(w);
	/* A write still in flight (its reaping failed) keeps its context. */
	if (w->ctx && w->inflight == 0)
		ctx_put(w->ctx);
	else if (w->ctx)
		syscall(SYS_io_destroy, w->ctx);
	w->ctx = 0;
	if (w->fd >= 0) {
		if (keep && w->allocated > w->end)
			ftruncate(w->fd, (off_t)w->end); /* what was preallocated and not used */
		stg_fd_drop(w->fd);
		close(w->fd);
		if (!keep || w->end == 0) {
			char name[32];
			pack_name(w->id, name);
			unlinkat(w->cache->packs_fd, name, 0);
		}
	}
	if (!keep && w->reserved)
		stg_cache_reserve_undo(w->cache, w->reserved);
	for (int i = 0; i < RING; i++) {
		free(w->slots[i].buf);
		free(w->slots[i].cbuf);
	}
	free(w);
}

void stg_pack_writer_free(struct stg_pack_writer *w)
{
	if (w)
		close_pack(w, true);
}

void stg_pack_writer_discard(struct stg_pack_writer *w)
{
	if (w)
		close_pack(w, false);
}

void stg_pack_writer_forget(struct stg_pack_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0) {
		stg_fd_drop(w->fd);
		close(w->fd);
	}
	for (int i = 0; i < RING; i++) {
		free(w->slots[i].buf);
		free(w->slots[i].cbuf);
	}
	free(w);
}

void stg_pack_writer_warm(struct stg_pack_writer *w, const struct stg_manifest_entry *e, size_t n)
{
	for (size_t i = 0; i < n && w->fd >= 0; i++)
		if (e[i].pack == w->id)
			posix_fadvise(w->fd, (off_t)e[i].offset, STG_PACK_ALIGN, POSIX_FADV_WILLNEED);
}

uint8_t *stg_pack_writer_buffer(struct stg_pack_writer *w)
{
	return w->buf + STG_CHUNK_HEADER_SIZE;
}

uint8_t *stg_pack_writer_scratch(struct stg_pack_writer *w)
{
	return w->cbuf;
}

static int open_pack(struct stg_pack_writer *w)
{
	for (int tries = 0; tries < 8; tries++) {
		uint64_t id = 0;
		if (getrandom(&id, sizeof(id), 0) != sizeof(id))
			id = (uint64_t)stg_now_ns() ^ ((uint64_t)getpid() << 40);
		if (id == 0)
			continue;
		char name[32];
		pack_name(id, name);
		int fd = openat(w->cache->packs_fd, name,
				O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
		bool direct = fd >= 0;
		/* No O_DIRECT on this file system (tmpfs before Linux 6.6): the
		 * failed open may have created the file already, so no O_EXCL. */
		if (fd < 0 && errno == EINVAL)
			fd = openat(w->cache->packs_fd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd < 0)
			return -errno;
		w->fd = fd;
		stg_fd_keep(&w->fd);
		w->direct = direct;
		w->id = id;
		/* Asynchronous writes only make sense with O_DIRECT. */
		if (direct)
			w->ctx = ctx_get();
		return 0;
	}
	return -EEXIST;
}

/* Writes a record from the current slot, then moves to the next slot. With
 * AIO the write is only submitted: the pack is preallocated ahead so that it
 * does not extend the file (extending direct writes complete synchronously
 * on some file systems), and the next slot is waited for only if its last
 * write is still in flight. */
static int write_record(struct stg_pack_writer *w, const uint8_t *rec, size_t len)
{
	if (w->err)
		return w->err;
	if (w->ctx && w->direct) {
		if (w->end + len > w->allocated) {
			uint64_t grow = w->allocated + PREALLOC > w->end + len ? PREALLOC : len + PREALLOC;
			if (fallocate(w->fd, 0, (off_t)w->allocated, (off_t)grow) == 0)
				w->allocated += grow;
			else /* a full file system may keep part of it: give that back */
				ftruncate(w->fd, (off_t)(w->allocated > w->end ? w->allocated : w->end));
		}
		if (w->end + len <= w->allocated) {
			struct slot *s = &w->slots[w->cur];
			memset(&s->cb, 0, sizeof(s->cb));
			s->cb.aio_data = (uint64_t)w->cur;
			s->cb.aio_lio_opcode = IOCB_CMD_PWRITE;
			s->cb.aio_fildes = (uint32_t)w->fd;
			s->cb.aio_buf = (uint64_t)(uintptr_t)rec;
			s->cb.aio_nbytes = len;
			s->cb.aio_offset = (int64_t)w->end;
			struct iocb *cbp = &s->cb;
			if (syscall(SYS_io_submit, w->ctx, 1, &cbp) == 1) {
				s->busy = true;
				w->inflight++;
				w->cur = (w->cur + 1) % w->nslots;
				if (w->slots[w->cur].busy)
					reap(w, 1);
				while (w->slots[w->cur].busy && !w->err)
					reap(w, 1);
				w->buf = w->slots[w->cur].buf;
				w->cbuf = w->slots[w->cur].cbuf;
				return 0;
			}
		}
		/* Could not go asynchronous: write this one synchronously. */
	}
	int r = stg_pwrite_all(w->fd, rec, len, (off_t)w->end);
	if (r == -EINVAL && w->direct) {
		/* Some file systems take O_DIRECT at open and refuse it at write. */
		int flags = fcntl(w->fd, F_GETFL);
		if (flags >= 0 && fcntl(w->fd, F_SETFL, flags & ~O_DIRECT) == 0) {
			w->direct = false;
			r = stg_pwrite_all(w->fd, rec, len, (off_t)w->end);
		}
	}
	return r;
}

int stg_pack_writer_append(struct stg_pack_writer *w, size_t len, const struct stg_hash *h,
			   const struct stg_chunk_codec *codec, struct stg_manifest_entry *e)
{
	if (len == 0 || len > w->max_chunk)
		return -EINVAL;
	const uint8_t *raw = w->buf + STG_CHUNK_HEADER_SIZE;
	uint8_t *rec = w->buf;
	size_t n = stg_chunk_try_compress(raw, len, h, codec, w->cbuf);
	uint32_t stored;
	if (n) {
		rec = w->cbuf;
		stored = (uint32_t)(n - STG_CHUNK_HEADER_SIZE);
	} else {
		stg_chunk_header_encode_raw(w->buf, (uint32_t)len, h);
		stored = (uint32_t)len;
		n = STG_CHUNK_HEADER_SIZE + len;
	}
	size_t padded = (size_t)stg_pack_record_size(stored);
	memset(rec + n, 0, padded - n);
	bool encoded = rec == w->cbuf; /* before write_record moves to the next slot */
	int r = stg_cache_reserve(w->cache, padded);
	if (r < 0)
		return r;
	if (w->fd < 0 && (r = open_pack(w)) < 0) {
		stg_cache_reserve_undo(w->cache, padded);
		return r;
	}
	r = write_record(w, rec, padded);
	if (r < 0) {
		stg_cache_reserve_undo(w->cache, padded);
		return r;
	}
	w->reserved += padded;
	e->hash = *h;
	e->raw_len = (uint32_t)len;
	e->stored_len = stored;
	e->flags = STG_ENTRY_NEW | (encoded ? STG_ENTRY_ENCODED : 0u);
	e->pack = w->id;
	e->offset = w->end;
	w->end += padded;
	return 0;
}

static int open_for_read(struct stg_cache *c, uint64_t pack)
{
	char name[32];
	pack_name(pack, name);
	int fd = openat(c->packs_fd, name, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

uint64_t stg_pack_writer_id(const struct stg_pack_writer *w)
{
	return w->fd >= 0 ? w->id : 0;
}

int stg_pack_writer_copy(struct stg_pack_writer *w, const uint8_t *rec, size_t len,
			 struct stg_manifest_entry *e)
{
	size_t padded = (size_t)stg_pack_record_size(e->stored_len);
	if (len != STG_CHUNK_HEADER_SIZE + e->stored_len || padded > w->cbuflen)
		return -EINVAL;
	memcpy(w->cbuf, rec, len);
	memset(w->cbuf + len, 0, padded - len);
	int r = w->fd < 0 ? open_pack(w) : 0;
	if (r == 0)
		r = write_record(w, w->cbuf, padded);
	if (r < 0)
		return r;
	e->pack = w->id;
	e->offset = w->end;
	w->end += padded;
	return 0;
}

int stg_pack_read_record(struct stg_cache *c, const struct stg_manifest_entry *e, uint8_t *buf)
{
	int fd = open_for_read(c, e->pack);
	if (fd < 0)
		return fd;
	size_t len = STG_CHUNK_HEADER_SIZE + e->stored_len;
	int r = stg_pread_all(fd, buf, len, (off_t)e->offset);
	close(fd);
	if (r == -ENODATA)
		return -EBADMSG;
	struct stg_chunk_header h;
	if (r == 0 && (stg_chunk_header_decode(buf, len, &e->hash, e->raw_len, &h) < 0 ||
		       h.stored_len != e->stored_len))
		r = -EBADMSG;
	return r;
}

int stg_pack_writer_sync(struct stg_pack_writer *w)
{
	if (w->fd < 0)
		return 0;
	int r = stg_pack_writer_flush(w);
	if (r < 0)
		return r;
	if (w->allocated > w->end) {
		/* The pack ends where its last record does. */
		if (ftruncate(w->fd, (off_t)w->end) < 0)
			return -errno;
		w->allocated = w->end;
	}
	if (fdatasync(w->fd) < 0)
		return -errno;
	/* The new name must survive a crash too. */
	return fsync(w->cache->packs_fd) < 0 ? -errno : 0;
}

void stg_pack_reader_init(struct stg_pack_reader *r, struct stg_cache *c)
{
	memset(r, 0, sizeof(*r));
	r->cache = c;
	for (unsigned i = 0; i < STG_PACK_READER_FDS; i++)
		r->open[i].fd = -1;
}

void stg_pack_reader_done(struct stg_pack_reader *r)
{
	for (unsigned i = 0; i < STG_PACK_READER_FDS; i++) {
		if (r->open[i].fd >= 0)
			close(r->open[i].fd);
		r->open[i].fd = -1;
		r->open[i].pack = 0;
	}
}

/* The descriptor of pack, opened when none is. */
static int reader_fd(struct stg_pack_reader *rd, uint64_t pack)
{
	for (unsigned i = 0; i < STG_PACK_READER_FDS; i++)
		if (rd->open[i].fd >= 0 && rd->open[i].pack == pack)
			return rd->open[i].fd;
	int fd = open_for_read(rd->cache, pack);
	if (fd < 0)
		return fd;
	/* A restore reads a pack front to back: read ahead generously, unless
	 * the records are prefetched one by one (the pack also holds other
	 * versions' records, which reading ahead would read for nothing). */
	posix_fadvise(fd, 0, 0, rd->prefetched ? POSIX_FADV_RANDOM : POSIX_FADV_SEQUENTIAL);
	unsigned i = rd->next++ % STG_PACK_READER_FDS;
	if (rd->open[i].fd >= 0)
		close(rd->open[i].fd);
	rd->open[i].pack = pack;
	rd->open[i].fd = fd;
	return fd;
}

/* Reads exactly the iovecs at off; -EBADMSG when the pack ends first. */
static int preadv_all(int fd, struct iovec *iov, int cnt, off_t off)
{
	while (cnt > 0) {
		ssize_t n = preadv(fd, iov, cnt, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EBADMSG; /* the pack is shorter than the manifest says */
		off += n;
		while (cnt > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

int stg_pack_reader_read(struct stg_pack_reader *rd, const struct stg_manifest_entry *e,
			 uint8_t *out, uint8_t *scratch)
{
	int fd = reader_fd(rd, e->pack);
	if (fd < 0)
		return fd;
	uint8_t hdr[STG_CHUNK_HEADER_SIZE];
	struct stg_chunk_header h;
	int r;
	if (!(e->flags & STG_ENTRY_ENCODED)) {
		/* Raw: the payload lands where it belongs, no copy. */
		struct iovec iov[2] = {{hdr, sizeof(hdr)}, {out, e->raw_len}};
		r = preadv_all(fd, iov, 2, (off_t)e->offset);
		if (r == 0)
			r = stg_chunk_header_decode(hdr, sizeof(hdr), &e->hash, e->raw_len, &h);
		if (r == 0 && h.stored_len != e->stored_len)
			r = -EBADMSG;
		return r == 0 ? stg_chunk_verify_raw(&h, out) : r;
	}
	size_t len = STG_CHUNK_HEADER_SIZE + e->stored_len;
	struct iovec iov = {scratch, len};
	r = preadv_all(fd, &iov, 1, (off_t)e->offset);
	if (r == 0)
		r = stg_chunk_header_decode(scratch, len, &e->hash, e->raw_len, &h);
	if (r == 0 && h.stored_len != e->stored_len)
		r = -EBADMSG;
	if (r == 0)
		r = stg_chunk_decode(scratch, len, &e->hash, e->raw_len, out);
	return r;
}

/* readahead(2) reads at most the larger of the device's largest request
 * and the readahead window per call: 128 KiB at the least. */
#define PREFETCH_STEP (128u << 10)

void stg_pack_reader_prefetch(struct stg_pack_reader *rd, const struct stg_manifest_entry *e)
{
	int fd = reader_fd(rd, e->pack);
	uint64_t end = e->offset + STG_CHUNK_HEADER_SIZE + e->stored_len;
	for (uint64_t at = e->offset; fd >= 0 && at < end; at += PREFETCH_STEP)
		readahead(fd, (off_t)at, end - at < PREFETCH_STEP ? end - at : PREFETCH_STEP);
}

int stg_pack_read(struct stg_cache *c, const struct stg_manifest_entry *e, uint8_t *out,
		  uint8_t *scratch)
{
	struct stg_pack_reader rd;
	stg_pack_reader_init(&rd, c);
	int r = stg_pack_reader_read(&rd, e, out, scratch);
	stg_pack_reader_done(&rd);
	return r;
}

int stg_pack_check(struct stg_cache *c, const struct stg_manifest_entry *e)
{
	int fd = open_for_read(c, e->pack);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	uint8_t hdr[STG_CHUNK_HEADER_SIZE];
	struct stat st;
	int r = stg_pread_all(fd, hdr, sizeof(hdr), (off_t)e->offset);
	if (r == 0 && fstat(fd, &st) < 0)
		r = -errno;
	close(fd);
	if (r == -ENODATA)
		return 0;
	if (r < 0)
		return r;
	struct stg_chunk_header h;
	if (stg_chunk_header_decode(hdr, sizeof(hdr), &e->hash, e->raw_len, &h) < 0 ||
	    h.stored_len != e->stored_len ||
	    e->offset + STG_CHUNK_HEADER_SIZE + h.stored_len > (uint64_t)st.st_size)
		return 0;
	return 1;
}
