/* SPDX-License-Identifier: MIT */
/* Data calls on descriptors: the write family feeds the fast path; every
 * other call that touches a fast-path file's content ends the fast path
 * first. On any other descriptor the hottest ones (read, write, lseek and
 * their relatives) cost an inline table lookup and a tail call. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <linux/falloc.h>
#include <unistd.h>

#include "hook.h"
#include "log.h"

static inline struct session *fast_session(int fd)
{
	struct session *s = fdtable_get(fd);
	return s && s->fast ? s : NULL;
}

/* ---- writes through a shadow: every write's range is noted, for a
 * shared = job part (part.c) and for chunks staged ahead (prestage.c) ---- */

static inline struct session *part_session(int fd)
{
	struct session *s = fdtable_get(fd);
	return s && s->part ? s : NULL;
}

static inline struct session *noted_session(int fd)
{
	struct session *s = fdtable_get(fd);
	return s && (s->part || prestage_wanted(s)) ? s : NULL;
}

/* Notes what a write asked at off (-1: the descriptor's offset; AT_END: the
 * end) wrote, r > 0 bytes: where it landed is asked after it (the offset it
 * moved, or the end an append reached, minus r), as O_APPEND makes even a
 * pwrite append. */
#define AT_END (-2)
static void note_write(struct session *s, int fd, int64_t off, ssize_t r, bool stage)
{
	/* (Less than a chunk covers no whole chunk: only a part notes it.) */
	if (r <= 0 || (!s->part && (!stage || (uint64_t)r < s->rule->chunk_size)))
		return;
	int saved = errno;
	int fl = REAL(fcntl)(fd, F_GETFL);
	struct stat st;
	int64_t at = -1;
	if (fl < 0)
		at = -1;
	else if (off == AT_END || (fl & O_APPEND))
		at = REAL(fstat)(fd, &st) == 0 ? st.st_size - r : -1;
	else if (off >= 0)
		at = off;
	else if ((at = REAL(lseek)(fd, 0, SEEK_CUR)) >= 0)
		at -= r;
	if (at < 0) {
		if (s->part) {
			s->broken = true;
			shim_log(STG_LOG_ERROR, "'%s': cannot tell where a write landed", s->path);
		}
	} else {
		if (s->part)
			part_wrote(s, (uint64_t)at, (uint64_t)r);
		if (stage && prestage_wanted(s))
			prestage_wrote(s, fd, (uint64_t)at, (uint64_t)r);
	}
	errno = saved;
}

static uint64_t size_of(int fd)
{
	struct stat st;
	return REAL(fstat)(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* A call that may resize fd's file or zero a range of it ([off, off + len),
 * len 0: none), through real. */
#define PART_RESIZE(fd, off, len, call)                                      \
	do {                                                                 \
		struct session *p_ = part_session(fd);                       \
		if (!p_)                                                     \
			return call;                                         \
		uint64_t old_ = size_of(fd);                                 \
		int r_ = call;                                               \
		int saved_ = errno;                                          \
		if (r_ == 0) {                                               \
			part_resized(p_, old_, size_of(fd));                 \
			if (len)                                             \
				part_wrote(p_, (uint64_t)(off), (uint64_t)(len)); \
		}                                                            \
		errno = saved_;                                              \
		return r_;                                                   \
	} while (0)

/* A write (or copy) into fd at off (-1: its offset), through call. stage:
 * whole chunks it wrote are staged ahead. Not for the kernel's copies
 * (sendfile, copy_file_range, splice): cp and its kind copy a file in a call
 * or a few, and close it next, with nothing for the staging to overlap. */
#define NOTED_WRITE(fd, off, call, stage)                                    \
	do {                                                                 \
		struct session *p_ = noted_session(fd);                      \
		if (!p_)                                                     \
			return call;                                         \
		int64_t off_ = (off); /* before the call moves *outoff */     \
		ssize_t r_ = call;                                           \
		note_write(p_, fd, off_, r_, stage);                         \
		return r_;                                                   \
	} while (0)

/* Runs the fast path for a write of iov at off (-1: the descriptor's offset).
 * Returns what the write returns, or FAST_OFF for "do the real call". */
static ssize_t fast_io(struct session *s, int fd, const struct iovec *iov, int cnt, int64_t off)
{
	if (shim_busy) {
		/* A signal handler writing while this thread is inside the shim:
		 * the write goes to the shadow, which no longer tells the story. */
		s->broken = true;
		return FAST_OFF;
	}
	int saved;
	if (!shim_enter(&saved))
		return FAST_OFF;
	ssize_t r = fast_write(s, iov, cnt, off);
	if (r == FAST_OFF) {
		pthread_mutex_lock(&shim.lock);
		if (s->fast)
			fast_materialize(s, fd);
		pthread_mutex_unlock(&shim.lock);
		shim_leave(0, saved);
		return FAST_OFF;
	}
	return shim_leave(r, saved);
}

__attribute__((noinline)) static ssize_t write_slow(int fd, const void *buf, size_t n)
{
	struct session *s = fast_session(fd);
	if (__builtin_expect(s != NULL, 0)) {
		struct iovec iov = {(void *)buf, n};
		ssize_t r = fast_io(s, fd, &iov, 1, -1);
		if (r != FAST_OFF)
			return r;
	}
	NOTED_WRITE(fd, -1, REAL(write)(fd, buf, n), true);
}

static ssize_t pwrite_common(int fd, const void *buf, size_t n, off_t off,
			     ssize_t (*real)(int, const void *, size_t, off_t))
{
	struct session *s = fast_session(fd);
	if (__builtin_expect(s != NULL, 0) && off >= 0) {
		struct iovec iov = {(void *)buf, n};
		ssize_t r = fast_io(s, fd, &iov, 1, off);
		if (r != FAST_OFF)
			return r;
	}
	NOTED_WRITE(fd, off, real(fd, buf, n, off), true);
}

__attribute__((noinline)) static ssize_t pwrite_slow(int fd, const void *buf, size_t n, off_t off)
{
	return pwrite_common(fd, buf, n, off, REAL(pwrite));
}

__attribute__((noinline)) static ssize_t pwrite64_slow(int fd, const void *buf, size_t n, off_t off)
{
	return pwrite_common(fd, buf, n, off, REAL(pwrite64) ? real_pwrite64 : real_pwrite);
}

__attribute__((noinline)) static ssize_t writev_slow(int fd, const struct iovec *iov, int cnt)
{
	struct session *s = fast_session(fd);
	if (__builtin_expect(s != NULL, 0) && cnt >= 0) {
		ssize_t r = fast_io(s, fd, iov, cnt, -1);
		if (r != FAST_OFF)
			return r;
	}
	NOTED_WRITE(fd, -1, REAL(writev)(fd, iov, cnt), true);
}

static ssize_t pwritev_common(int fd, const struct iovec *iov, int cnt, off_t off, int flags,
			      bool v2)
{
	struct session *s = fast_session(fd);
	/* pwritev2 with offset -1 uses the descriptor's offset; RWF_APPEND and
	 * friends go the real way. */
	if (__builtin_expect(s != NULL, 0) && cnt >= 0 && flags == 0 && (off >= 0 || v2)) {
		ssize_t r = fast_io(s, fd, iov, cnt, off);
		if (r != FAST_OFF)
			return r;
	}
	if (s)
		fast_leave(fd);
	struct session *p = noted_session(fd);
	ssize_t r;
	if (v2)
		r = REAL(pwritev2) ? REAL(pwritev2)(fd, iov, cnt, off, flags) : (errno = ENOSYS, -1);
	else
		r = REAL(pwritev)(fd, iov, cnt, off);
	if (p) /* (RWF_APPEND writes at the end, whatever off says) */
		note_write(p, fd, v2 && (flags & RWF_APPEND) ? AT_END : off, r, true);
	return r;
}

SHIM_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	return pwritev_common(fd, iov, cnt, off, 0, false);
}

SHIM_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
	return pwritev_common(fd, iov, cnt, off, 0, false);
}

SHIM_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	return pwritev_common(fd, iov, cnt, off, flags, true);
}

SHIM_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	return pwritev_common(fd, iov, cnt, off, flags, true);
}

static off_t lseek_common(int fd, off_t off, int whence, off_t (*real)(int, off_t, int))
{
	struct session *s = fast_session(fd);
	if (__builtin_expect(s != NULL, 0) && !shim_busy) {
		int64_t r = fast_lseek(s, off, whence);
		if (r != FAST_OFF) {
			if (r < 0) {
				errno = (int)-r;
				return -1;
			}
			return (off_t)r;
		}
		fast_leave(fd);
	}
	return real(fd, off, whence);
}

__attribute__((noinline)) static off_t lseek_slow(int fd, off_t off, int whence)
{
	return lseek_common(fd, off, whence, REAL(lseek));
}

__attribute__((noinline)) static off_t lseek64_slow(int fd, off_t off, int whence)
{
	return lseek_common(fd, off, whence, REAL(lseek64) ? real_lseek64 : real_lseek);
}

/* Calls that need the content in the shadow: end the fast path, then go. */
#define LEAVE_FAST(fd)                                               \
	do {                                                         \
		if (__builtin_expect(fast_session(fd) != NULL, 0)) \
			fast_leave(fd);                         \
	} while (0)

__attribute__((noinline)) static ssize_t read_slow(int fd, void *buf, size_t n)
{
	LEAVE_FAST(fd);
	return REAL(read)(fd, buf, n);
}

SHIM_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	LEAVE_FAST(fd);
	return REAL(__read_chk)(fd, buf, n, buflen);
}

__attribute__((noinline)) static ssize_t pread_slow(int fd, void *buf, size_t n, off_t off)
{
	LEAVE_FAST(fd);
	return REAL(pread)(fd, buf, n, off);
}

__attribute__((noinline)) static ssize_t pread64_slow(int fd, void *buf, size_t n, off_t off)
{
	LEAVE_FAST(fd);
	return (REAL(pread64) ? real_pread64 : real_pread)(fd, buf, n, off);
}

SHIM_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
	LEAVE_FAST(fd);
	return REAL(__pread_chk)(fd, buf, n, off, buflen);
}

SHIM_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
	LEAVE_FAST(fd);
	return REAL(__pread64_chk)(fd, buf, n, off, buflen);
}

__attribute__((noinline)) static ssize_t readv_slow(int fd, const struct iovec *iov, int cnt)
{
	LEAVE_FAST(fd);
	return REAL(readv)(fd, iov, cnt);
}

SHIM_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
	LEAVE_FAST(fd);
	return REAL(preadv)(fd, iov, cnt, off);
}

SHIM_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off)
{
	LEAVE_FAST(fd);
	return REAL(preadv)(fd, iov, cnt, off);
}

SHIM_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	LEAVE_FAST(fd);
	return REAL(preadv2) ? REAL(preadv2)(fd, iov, cnt, off, flags) : (errno = ENOSYS, -1);
}

SHIM_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	LEAVE_FAST(fd);
	return REAL(preadv2) ? REAL(preadv2)(fd, iov, cnt, off, flags) : (errno = ENOSYS, -1);
}

SHIM_EXPORT int ftruncate(int fd, off_t len)
{
	LEAVE_FAST(fd);
	PART_RESIZE(fd, 0, 0, REAL(ftruncate)(fd, len));
}

SHIM_EXPORT int ftruncate64(int fd, off_t len)
{
	LEAVE_FAST(fd);
	PART_RESIZE(fd, 0, 0, (REAL(ftruncate64) ? real_ftruncate64 : real_ftruncate)(fd, len));
}

/* Collapsing or inserting a range moves every byte after it, other nodes'
 * included, which a part cannot say: refused (EOPNOTSUPP, as a file system
 * without them answers), and said. */
static bool part_shift_refused(int fd, int mode)
{
	struct session *s = part_session(fd);
	if (!s || !(mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)))
		return false;
	shim_log(STG_LOG_ERROR, "'%s' is shared = job: fallocate cannot collapse or insert a range",
		 s->path);
	errno = EOPNOTSUPP;
	return true;
}

SHIM_EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
	LEAVE_FAST(fd);
	if (part_shift_refused(fd, mode))
		return -1;
	/* Punching or zeroing a range writes zeros there. */
	PART_RESIZE(fd, off, mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) ? len : 0,
		    REAL(fallocate)(fd, mode, off, len));
}

SHIM_EXPORT int fallocate64(int fd, int mode, off_t off, off_t len)
{
	LEAVE_FAST(fd);
	if (part_shift_refused(fd, mode))
		return -1;
	/* Punching or zeroing a range writes zeros there. */
	PART_RESIZE(fd, off, mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) ? len : 0,
		    (REAL(fallocate64) ? real_fallocate64 : real_fallocate)(fd, mode, off, len));
}

SHIM_EXPORT int posix_fallocate(int fd, off_t off, off_t len)
{
	LEAVE_FAST(fd);
	PART_RESIZE(fd, 0, 0, REAL(posix_fallocate)(fd, off, len));
}

SHIM_EXPORT int posix_fallocate64(int fd, off_t off, off_t len)
{
	LEAVE_FAST(fd);
	PART_RESIZE(fd, 0, 0, (REAL(posix_fallocate64) ? real_posix_fallocate64 : real_posix_fallocate)(fd, off, len));
}

SHIM_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
	LEAVE_FAST(out);
	LEAVE_FAST(in);
	NOTED_WRITE(out, -1, REAL(sendfile)(out, in, off, n), false);
}

SHIM_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t n)
{
	LEAVE_FAST(out);
	LEAVE_FAST(in);
	NOTED_WRITE(out, -1, (REAL(sendfile64) ? real_sendfile64 : real_sendfile)(out, in, off, n),
		    false);
}

SHIM_EXPORT ssize_t copy_file_range(int in, off_t *inoff, int out, off_t *outoff, size_t n,
				    unsigned flags)
{
	LEAVE_FAST(out);
	LEAVE_FAST(in);
	NOTED_WRITE(out, outoff ? *outoff : -1,
		    REAL(copy_file_range)(in, inoff, out, outoff, n, flags), false);
}

SHIM_EXPORT ssize_t splice(int in, off_t *inoff, int out, off_t *outoff, size_t n, unsigned flags)
{
	LEAVE_FAST(out);
	LEAVE_FAST(in);
	NOTED_WRITE(out, outoff ? *outoff : -1, REAL(splice)(in, inoff, out, outoff, n, flags),
		    false);
}

/* stdio writes through internal calls the shim cannot see. */
SHIM_EXPORT FILE *fdopen(int fd, const char *mode)
{
	LEAVE_FAST(fd);
	struct session *p = part_session(fd);
	if (p && mode && strpbrk(mode, "wa+")) {
		shim_log(STG_LOG_ERROR, "'%s' is shared = job: it cannot be written through "
			 "stdio (fdopen), whose writes the shim cannot see", p->path);
		errno = EINVAL;
		return NULL;
	}
	return REAL(fdopen)(fd, mode);
}

SHIM_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	/* Not a captured file (nearly always): straight on, a tail call. */
	if (__builtin_expect(!fdtable_peek(fd) && real_write != NULL, 1))
		return REAL(write)(fd, buf, n);
	return write_slow(fd, buf, n);
}

SHIM_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	/* Not a captured file (nearly always): straight on, a tail call. */
	if (__builtin_expect(!fdtable_peek(fd) && real_pwrite != NULL, 1))
		return REAL(pwrite)(fd, buf, n, off);
	return pwrite_slow(fd, buf, n, off);
}

SHIM_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	/* Not a captured file (nearly always): straight on, a tail call. */
	if (__builtin_expect(!fdtable_peek(fd) && real_pwrite64 != NULL, 1))
		return REAL(pwrite64)(fd, buf, n, off);
	return pwrite64_slow(fd, buf, n, off);
}

SHIM_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	/* Not a captured file (nearly always): straight on, a tail call. */
	if (__builtin_expect(!fdtable_peek(fd) && real_writev != NULL, 1))
		return REAL(writev)(fd, iov, cnt);
	return writev_slow(fd, iov, cnt);
}

SHIM_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	/* Not a captured file (nearly always): straight on, a tail call. */
	if (__builtin_expect(!fdtable_peek(fd) && real_read != NULL, 1))
		return REAL(read)(fd, buf, n);
	return read_slow(fd, buf, n);
}

SHIM_EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	/* Not a captured file (nearly always): straight on, a tail call. */
	if (__builtin_expect(!fdtable_peek(fd) && real_pread != NULL, 1))
		return REAL(pread)(fd, buf, n, off);
	return pread_slow(fd, buf, n, off);
}

SHIM_EXPORT ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
	/* Not a captured file (nearly always): straight on, a tail call. */
	if (__builtin_expect(!fdtable_peek(fd) && real_pread64 != NULL, 1))
		return REAL(pread64)(fd, buf, n, off);
	return pread64_slow(fd, buf, n, off);
}

SHIM_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	/* Not a captured file (nearly always): straight on, a tail call. */
	if (__builtin_expect(!fdtable_peek(fd) && real_readv != NULL, 1))
		return REAL(readv)(fd, iov, cnt);
	return readv_slow(fd, iov, cnt);
}

SHIM_EXPORT off_t lseek(int fd, off_t off, int whence)
{
	/* Not a captured file (nearly always): straight on, a tail call. */
	if (__builtin_expect(!fdtable_peek(fd) && real_lseek != NULL, 1))
		return REAL(lseek)(fd, off, whence);
	return lseek_slow(fd, off, whence);
}

SHIM_EXPORT off_t lseek64(int fd, off_t off, int whence)
{
	/* Not a captured file (nearly always): straight on, a tail call. */
	if (__builtin_expect(!fdtable_peek(fd) && real_lseek64 != NULL, 1))
		return REAL(lseek64)(fd, off, whence);
	return lseek64_slow(fd, off, whence);
}
