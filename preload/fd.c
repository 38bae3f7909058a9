/* SPDX-License-Identifier: MIT */
/* Calls on descriptors: close, the dup family, fsync, mappings, fchown. */
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hook.h"

/* The close of a captured file's descriptor: its commit's error, or the
 * close's. */
static long close_handler(int fd)
{
	int r = session_release_fd(fd);
	int cr = REAL(close)(fd) < 0 ? -errno : 0;
	return cr < 0 ? cr : r;
}

SHIM_EXPORT int close(int fd)
{
	if (!shim_busy && shim_fd_reserved(fd)) {
		errno = EBADF; /* not the application's: as if it were not open */
		return -1;
	}
	if (fdtable_get(fd))
		SHIM_HANDLE(close_handler(fd));
	return REAL(close)(fd);
}

/* Commits what the range closes, then closes around the shim's own. */
static long close_range_handler(unsigned first, unsigned last, int flags)
{
	int r = 0;
	struct session *s;
	pthread_mutex_lock(&shim.lock);
	int fd = fdtable_next((int)(first > INT32_MAX ? INT32_MAX : first), &s);
	pthread_mutex_unlock(&shim.lock);
	while (fd >= 0 && (unsigned)fd <= last) {
		int rr = session_release_fd(fd);
		if (rr < 0 && r == 0)
			r = rr;
		pthread_mutex_lock(&shim.lock);
		fd = fdtable_next(fd + 1, &s);
		pthread_mutex_unlock(&shim.lock);
	}
	/* Close around the shim's own descriptors. */
	size_t cap = shim_reserved_count() + 1;
	int *keep = calloc(cap, sizeof(*keep));
	size_t nkeep = keep ? shim_reserved_in(first, last, keep, cap) : 0;
	int cr = 0;
	unsigned from = first;
	for (size_t i = 0; i <= nkeep && cr == 0; i++) {
		unsigned to = i < nkeep ? (unsigned)keep[i] - 1 : last;
		if (i < nkeep && (unsigned)keep[i] == from) {
			from = (unsigned)keep[i] + 1;
			continue;
		}
		if (from <= to && REAL(close_range)(from, to, flags) < 0)
			cr = -errno;
		if (i < nkeep)
			from = (unsigned)keep[i] + 1;
	}
	free(keep);
	return cr < 0 ? cr : r;
}

SHIM_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	if (!REAL(close_range)) {
		errno = ENOSYS;
		return -1;
	}
	if (!(flags & CLOSE_RANGE_CLOEXEC))
		SHIM_HANDLE(close_range_handler(first, last, flags));
	return real_close_range(first, last, flags);
}

/* newfd now refers to fd's session too. */
static void track_copy(int fd, int newfd)
{
	pthread_mutex_lock(&shim.lock);
	struct session *s = fdtable_get(fd);
	if (s && fdtable_set(newfd, s) == 0)
		s->refs++;
	pthread_mutex_unlock(&shim.lock);
}

SHIM_EXPORT int dup(int fd)
{
	fast_leave(fd);
	int nfd = REAL(dup)(fd);
	if (nfd >= 0 && !shim_busy) {
		if (fdtable_get(nfd))
			session_discard_fd(nfd);
		if (fdtable_get(fd))
			track_copy(fd, nfd);
	}
	return nfd;
}

/* dup2 closes newfd silently: that close may be a commit. Only if fd is
 * valid, or dup2 would fail and leave newfd open. */
static long dup_handler(int fd, int newfd, int flags, bool three)
{
	if (REAL(fcntl)(fd, F_GETFD) < 0)
		return -errno;
	int r = fdtable_get(newfd) ? session_release_fd(newfd) : 0;
	int d = three ? REAL(dup3)(fd, newfd, flags) : REAL(dup2)(fd, newfd);
	if (d < 0)
		return -errno;
	if (fdtable_get(fd))
		track_copy(fd, newfd);
	return r < 0 ? r : d;
}

static int dup_onto(int fd, int newfd, int flags, bool three)
{
	if (!shim_busy && fd != newfd) {
		fast_leave(fd);
		/* Only for a dup2 that will happen: fd must be valid. */
		if (shim_fd_reserved(newfd) && REAL(fcntl)(fd, F_GETFD) >= 0)
			shim_fd_evict(newfd);
	}
	if (fd != newfd && (fdtable_get(fd) || fdtable_get(newfd)))
		SHIM_HANDLE(dup_handler(fd, newfd, flags, three));
	return three ? REAL(dup3)(fd, newfd, flags) : REAL(dup2)(fd, newfd);
}

SHIM_EXPORT int dup2(int fd, int newfd)
{
	return dup_onto(fd, newfd, 0, false);
}

SHIM_EXPORT int dup3(int fd, int newfd, int flags)
{
	return dup_onto(fd, newfd, flags, true);
}

static int fcntl_common(int fd, int cmd, unsigned long arg, int (*real)(int, int, ...))
{
	if (!shim_busy && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		fast_leave(fd);
	int r = real(fd, cmd, arg);
	if (r >= 0 && !shim_busy && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) {
		if (fdtable_get(r))
			session_discard_fd(r);
		if (fdtable_get(fd))
			track_copy(fd, r);
	}
	return r;
}

/* Every fcntl argument is an int, a pointer or absent: reading it as an
 * unsigned long and passing it on is what glibc itself does. */
SHIM_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	unsigned long arg = va_arg(ap, unsigned long);
	va_end(ap);
	return fcntl_common(fd, cmd, arg, REAL(fcntl));
}

SHIM_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	unsigned long arg = va_arg(ap, unsigned long);
	va_end(ap);
	return fcntl_common(fd, cmd, arg, REAL(fcntl64) ? real_fcntl64 : real_fcntl);
}

/* fsync() of a captured file is a commit point, like close(). */
static int sync_common(int fd, int (*real)(int))
{
	struct session *s = fdtable_get(fd);
	if (s && !s->readonly)
		SHIM_HANDLE(session_commit(s, fd, false));
	return real(fd);
}

SHIM_EXPORT int fsync(int fd)
{
	return sync_common(fd, REAL(fsync));
}

SHIM_EXPORT int fdatasync(int fd)
{
	return sync_common(fd, REAL(fdatasync));
}

static void *mmap_common(void *addr, size_t len, int prot, int flags, int fd, off_t off,
			 void *(*real)(void *, size_t, int, int, int, off_t))
{
	if (!shim_busy && fd >= 0)
		fast_leave(fd);
	void *p = real(addr, len, prot, flags, fd, off);
	int saved;
	if (p != MAP_FAILED && fd >= 0 && (prot & PROT_WRITE) &&
	    (flags & MAP_TYPE) != MAP_PRIVATE && fdtable_get(fd) && shim_enter(&saved)) {
		mapping_add(fd, p, len);
		/* shared = job: a mapping may write anywhere in it. */
		struct session *ps = fdtable_get(fd);
		if (ps && ps->part && off >= 0)
			part_wrote(ps, (uint64_t)off, len);
		shim_leave(0, saved);
	}
	return p;
}

SHIM_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap_common(addr, len, prot, flags, fd, off, REAL(mmap));
}

SHIM_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap_common(addr, len, prot, flags, fd, off, REAL(mmap64) ? real_mmap64 : real_mmap);
}

SHIM_EXPORT int munmap(void *addr, size_t len)
{
	int r = REAL(munmap)(addr, len);
	if (r == 0 && shim.ready)
		SHIM_HANDLE(mapping_remove(addr, len, false));
	return r;
}

SHIM_EXPORT int msync(void *addr, size_t len, int flags)
{
	int r = REAL(msync)(addr, len, flags);
	if (r == 0 && shim.ready && (flags & MS_SYNC))
		SHIM_HANDLE(mapping_remove(addr, len, true));
	return r;
}

SHIM_EXPORT mode_t umask(mode_t mask)
{
	mode_t old = REAL(umask)(mask);
	shim.umask = mask & 0777;
	return old;
}

/* A vfork() child shares the parent's memory, so what it does to the shim's
 * tables (the shell's redirections before exec) would land in the parent's.
 * A real fork() gives it its own copy; a program that uses vfork() correctly
 * (exec or _exit next) cannot tell the difference. */
SHIM_EXPORT pid_t vfork(void)
{
	return fork();
}
