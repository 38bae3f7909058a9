/* SPDX-License-Identifier: MIT */
/* The fast path: a new or truncated captured file written sequentially through
 * write()/pwrite()/writev() is chunked (fixed or content-defined chunks, as
 * the rule says), hashed and staged as the data arrives
 * (each chunk copied once, while it is hashed, into the pack writer's aligned
 * buffer and written with O_DIRECT), and never copied into the shadow.
 * Anything else done to the descriptor (reading, seeking away and writing,
 * mmap, dup, fork, exec...) first materializes what was staged into the
 * shadow file, which then takes over as the one copy of the content. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builder.h"
#include "chunk.h"
#include "pack.h"
#include "hook.h"
#include "log.h"
#include "real.h"
#include "util.h"
#include "version.h"

/* Everything here is guarded by the session's fast_lock, which outlives it:
 * a thread waiting to write must find out the fast path ended meanwhile. */
struct fast {
	struct stg_builder *b; /* NULL once failed */
	struct stg_chunker ch; /* where the chunk being staged ends */
	uint64_t pos;     /* the descriptor's offset, as the application sees it */
	uint64_t sealed;  /* [0, sealed) are whole chunks handed to the builder */
	uint64_t nsealed; /* how many */
	uint64_t staged;  /* [sealed, staged) wait in the builder's buffer; staged is the size */
	bool dirty;       /* changed since the last commit (a new file starts so) */
	int failed;       /* a write could not be staged: -errno for every later call */
};

bool fast_enabled(void)
{
	const char *e = getenv("STAGEHAND_FAST");
	return !(e && strcmp(e, "0") == 0);
}

int fast_start(struct session *s)
{
	/* Another process opening the file must be able to take it over. */
	if (!s->share)
		return -EOPNOTSUPP;
	struct fast *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	int r = stg_builder_new(shim.cache, s->path, s->rule, &f->b);
	if (r < 0) {
		free(f);
		return r;
	}
	stg_chunker_init(&f->ch, s->rule->chunking, s->rule->chunk_size);
	f->dirty = true;
	s->fast = f;
	share_fast_start(s->share);
	return 0;
}

static void fast_free(struct fast *f)
{
	stg_builder_free(f->b);
	free(f);
}

void fast_discard(struct session *s)
{
	pthread_mutex_lock(&s->fast_lock);
	if (s->fast) {
		fast_free(s->fast);
		share_fast_end(s->share);
	}
	s->fast = NULL;
	pthread_mutex_unlock(&s->fast_lock);
}

void fast_renamed(struct session *s)
{
	pthread_mutex_lock(&s->fast_lock);
	if (s->fast && s->fast->b)
		stg_builder_set_path(s->fast->b, s->path);
	pthread_mutex_unlock(&s->fast_lock);
}

bool fast_size(struct session *s, uint64_t *ret)
{
	pthread_mutex_lock(&s->fast_lock);
	bool on = s->fast != NULL;
	if (on)
		*ret = s->fast->staged;
	pthread_mutex_unlock(&s->fast_lock);
	return on;
}

/* Hands a whole chunk to the builder: from data, or (NULL) from the
 * builder's buffer, where a chunk that came in pieces was put together. */
static int seal(struct fast *f, const void *data, size_t len)
{
	int r = data ? stg_builder_add(f->b, f->nsealed, data, len)
		     : stg_builder_add_buffered(f->b, f->nsealed, len);
	if (r == 0) {
		f->nsealed++;
		f->sealed += len;
	}
	return r;
}

/* Appends at the end of what is staged. Returns bytes taken or -errno. */
static ssize_t append(struct fast *f, const uint8_t *buf, size_t n)
{
	size_t done = 0;
	while (done < n) {
		size_t fill = (size_t)(f->staged - f->sealed), used;
		struct stg_chunker before = f->ch;
		bool end = stg_chunker_next(&f->ch, buf + done, n - done, &used);
		int r = 0;
		if (end && fill == 0) {
			/* A whole chunk in the caller's buffer: straight to the
			 * builder, copied once while it is hashed. */
			r = seal(f, buf + done, used);
		} else {
			/* Pieces are put together where the chunk is hashed and
			 * written from: no other copy of a chunk's size. */
			memcpy(stg_builder_buffer(f->b) + fill, buf + done, used);
			if (end)
				r = seal(f, NULL, fill + used);
		}
		if (r < 0) {
			f->ch = before; /* not taken after all */
			return done ? (ssize_t)done : r;
		}
		f->staged += used;
		done += used;
	}
	return (ssize_t)done;
}

ssize_t fast_write(struct session *s, const struct iovec *iov, int cnt, int64_t off)
{
	pthread_mutex_lock(&s->fast_lock);
	struct fast *f = s->fast;
	if (!f) {
		pthread_mutex_unlock(&s->fast_lock);
		return FAST_OFF; /* another thread ended it meanwhile */
	}
	if (f->failed) {
		pthread_mutex_unlock(&s->fast_lock);
		return f->failed;
	}
	uint64_t at = off < 0 ? f->pos : (uint64_t)off;
	if (at != f->staged) {
		pthread_mutex_unlock(&s->fast_lock);
		return FAST_OFF; /* not sequential: the shadow takes over */
	}
	if (!share_fast_enter(s->share)) {
		pthread_mutex_unlock(&s->fast_lock);
		return FAST_OFF; /* another process joined: the shadow takes over */
	}
	ssize_t total = 0;
	for (int i = 0; i < cnt; i++) {
		ssize_t r = append(f, iov[i].iov_base, iov[i].iov_len);
		if (r < 0) {
			/* The file now misses bytes the application meant to write:
			 * this version must not be published half-done, and what it
			 * stored goes now, not at close (the cache may be full). */
			f->failed = (int)r;
			stg_builder_free(f->b);
			f->b = NULL;
			if (total == 0)
				total = r;
			break;
		}
		total += r;
		if ((size_t)r < iov[i].iov_len)
			break;
	}
	if (total > 0) {
		f->dirty = true;
		if (off < 0)
			f->pos += (uint64_t)total;
	}
	share_fast_leave(s->share, f->staged);
	pthread_mutex_unlock(&s->fast_lock);
	return total;
}

int64_t fast_lseek(struct session *s, int64_t off, int whence)
{
	pthread_mutex_lock(&s->fast_lock);
	struct fast *f = s->fast;
	if (!f) {
		pthread_mutex_unlock(&s->fast_lock);
		return FAST_OFF;
	}
	if (share_handover_requested(s->share)) {
		pthread_mutex_unlock(&s->fast_lock);
		return FAST_OFF;
	}
	int64_t base;
	switch (whence) {
	case SEEK_SET: base = 0; break;
	case SEEK_CUR: base = (int64_t)f->pos; break;
	case SEEK_END: base = (int64_t)f->staged; break;
	default:
		pthread_mutex_unlock(&s->fast_lock);
		return FAST_OFF; /* SEEK_DATA, SEEK_HOLE: ask the real file */
	}
	int64_t r = -EINVAL;
	if (!__builtin_add_overflow(base, off, &r) && r >= 0)
		f->pos = (uint64_t)r;
	else
		r = -EINVAL;
	pthread_mutex_unlock(&s->fast_lock);
	return r;
}

static int commit_locked(struct session *s, struct fast *f, bool last, uint64_t replaces,
			 int64_t *ret_version)
{
	int r = 0;
	uint64_t tail = f->staged - f->sealed;
	/* The tail stays in this builder's buffer (a write in flight only
	 * reads it) until the next builder takes it over, below. */
	const uint8_t *pending = stg_builder_buffer(f->b);
	if (tail)
		r = stg_builder_add_buffered(f->b, f->nsealed, (size_t)tail);
	if (r < 0)
		return r;
	/* Writing goes on after this commit from the locations recorded so far:
	 * nothing may move them now. */
	if (!last)
		stg_builder_defer_collect(f->b);
	/* A file created and closed empty is provisional too (see
	 * commit_through): MPI-IO creates a shared file, then opens it again. */
	stg_builder_set_open(f->b, !last || (s->created && f->staged == 0), replaces);
	uint32_t mode;
	if (!share_mode(s->share, &mode))
		mode = s->mode;
	int64_t v = stg_builder_commit(f->b, f->staged, mode,
				       s->mtime_set ? s->mtime_ns : stg_now_ns());
	if (v < 0)
		return (int)v;
	*ret_version = v;
	f->dirty = false;
	s->meta_dirty = false;
	s->mtime_set = false;
	shim_log(STG_LOG_DEBUG, "staged '%s' version %lld (%llu bytes, as written)", s->path,
		 (long long)stg_version_seq((uint64_t)v), (unsigned long long)f->staged);
	r = replicate_after_commit(s->path, s->rule, v);
	if (last)
		return r;
	/* Writing goes on: a new version starts from the chunks sealed so far. */
	struct stg_builder *nb = NULL;
	r = stg_builder_new(shim.cache, s->path, s->rule, &nb);
	if (r == 0)
		r = stg_builder_copy_entries(nb, f->b, f->nsealed);
	if (r == 0)
		memcpy(stg_builder_buffer(nb), pending, (size_t)tail);
	if (r < 0) {
		stg_builder_free(nb);
		/* The version is published; what comes next cannot be staged. */
		f->failed = r;
		return 0;
	}
	stg_builder_free(f->b);
	f->b = nb;
	return 0;
}

int fast_commit(struct session *s, bool last, uint64_t replaces, int64_t *ret_version)
{
	*ret_version = 0;
	pthread_mutex_lock(&s->fast_lock);
	struct fast *f = s->fast;
	int r = !f		 ? 0
		: f->failed ? f->failed
		: f->dirty  ? commit_locked(s, f, last, replaces, ret_version)
			    : 0;
	pthread_mutex_unlock(&s->fast_lock);
	if (r < 0)
		shim_log(STG_LOG_ERROR, "could not stage '%s': %s", s->path, strerror(-r));
	return r;
}

/* Writes what was staged into the shadow through a descriptor of our own
 * (the application's may be write-only or O_DIRECT). Nothing is in flight
 * after the flush: the tail, which waits in the builder's buffer, goes
 * first, and then that buffer and its scratch read the chunks back (no more
 * memory than writing took). */
static int write_out(struct fast *f, int wfd)
{
	int r = stg_builder_flush(f->b);
	uint8_t *raw = stg_builder_buffer(f->b), *scratch = stg_builder_scratch(f->b);
	if (r == 0 && f->staged > f->sealed)
		r = stg_pwrite_all(wfd, raw, (size_t)(f->staged - f->sealed), (off_t)f->sealed);
	for (uint64_t i = 0, at = 0; r == 0 && i < f->nsealed; i++) {
		const struct stg_manifest_entry *e = stg_builder_entry(f->b, i);
		if (!e) {
			r = -EIO;
			break;
		}
		at += e->raw_len;
		if (e->flags & STG_ENTRY_ZERO)
			continue;
		r = stg_pack_read(shim.cache, e, raw, scratch);
		if (r == 0)
			r = stg_pwrite_all(wfd, raw, e->raw_len, (off_t)(at - e->raw_len));
	}
	/* Only ever grows it: a process that joined while nothing was staged
	 * may have written there already. */
	struct stat st;
	if (r == 0 && real_fstat(wfd, &st) == 0 && (uint64_t)st.st_size < f->staged &&
	    real_ftruncate(wfd, (off_t)f->staged) < 0)
		r = -errno;
	return r;
}

int fast_materialize(struct session *s, int fd)
{
	pthread_mutex_lock(&s->fast_lock);
	struct fast *f = s->fast;
	if (!f) {
		pthread_mutex_unlock(&s->fast_lock);
		return 0;
	}
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	int wfd = real_open(link, O_RDWR | O_CLOEXEC);
	/* After a failed write the content is incomplete: it never commits. */
	int r = f->failed ? f->failed : write_out(f, wfd >= 0 ? wfd : fd);
	if (r == 0 && real_lseek(fd, (off_t)f->pos, SEEK_SET) < 0)
		r = -errno;
	if (r == 0 && !f->dirty) {
		/* Committed as it stands: park the mtime like any committed shadow. */
		struct timespec t[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = 1}};
		futimens(wfd >= 0 ? wfd : fd, t);
	}
	if (wfd >= 0)
		real_close(wfd);
	s->fast = NULL;
	fast_free(f);
	share_fast_end(s->share);
	pthread_mutex_unlock(&s->fast_lock);
	if (r < 0) {
		/* The shadow cannot take over: nothing must be committed from it,
		 * by this process or another one writing it. */
		s->broken = true;
		if (s->share)
			share_set_broken(s->share);
		shim_log(STG_LOG_ERROR, "cannot continue writing '%s' (%s): its next version will "
			 "not be staged", s->path, strerror(-r));
	}
	return r;
}

void fast_materialize_all(void)
{
	int fd;
	struct session *s;
	pthread_mutex_lock(&shim.lock);
	FDTABLE_EACH(fd, s)
		if (s->fast)
			fast_materialize(s, fd);
	pthread_mutex_unlock(&shim.lock);
}

void fast_leave(int fd)
{
	struct session *s = fdtable_get(fd);
	int saved;
	if (!s || !s->fast || !shim_enter(&saved))
		return;
	pthread_mutex_lock(&shim.lock);
	if (s->fast)
		fast_materialize(s, fd);
	pthread_mutex_unlock(&shim.lock);
	shim_leave(0, saved);
}
