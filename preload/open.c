/* SPDX-License-Identifier: MIT */
/* The open family and stdio's fopen/fclose, which do not go through open(). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "log.h"
#include "real.h"

/* The kernel handed out fd, so any entry the table still has for it is stale:
 * the descriptor was closed where the shim could not see it. */
static void forget_stale(int fd)
{
	if (fd >= 0 && fdtable_get(fd))
		session_discard_fd(fd);
}

/* Drops a descriptor of a session the shim just handed out elsewhere. */
static void close_quietly(int fd)
{
	session_release_fd(fd);
	real_close(fd);
}

static int open_common(int dirfd, const char *path, int flags, mode_t mode)
{
	if (!real_openat)
		shim_real_init();
	if (shim_busy)
		return real_openat(dirfd, path, flags, mode);
	shim_busy++;
	int saved = errno;
	char abs[PATH_MAX];
	const struct stg_path_rule *rule = NULL;
	/* An O_TMPFILE descriptor has no name to capture. */
	if ((flags & O_TMPFILE) != O_TMPFILE)
		rule = shim_resolve(dirfd, path, abs, sizeof(abs));
	/* O_PATH only locates: a captured file is located as a read-only one
	 * (coreutils probes destinations with O_PATH|O_DIRECTORY). */
	int sflags = rule && (flags & O_PATH)
			     ? O_RDONLY | (flags & (O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW))
			     : flags;
	int fd = rule ? session_open(abs, rule, sflags, mode, true) : SESSION_PASS;
	if (fd == SESSION_PASS) {
		fd = real_openat(dirfd, path, flags, mode);
		if (fd >= 0) {
			forget_stale(fd);
			errno = saved; /* what the shim looked up on the way is not news */
		}
		shim_busy--;
		return fd;
	}
	shim_busy--;
	if (fd < 0) {
		errno = -fd;
		return -1;
	}
	errno = saved;
	return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

SHIM_EXPORT int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	return open_common(AT_FDCWD, path, flags, mode);
}

SHIM_EXPORT int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	return open_common(AT_FDCWD, path, flags | O_LARGEFILE, mode);
}

SHIM_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	return open_common(dirfd, path, flags, mode);
}

SHIM_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	return open_common(dirfd, path, flags | O_LARGEFILE, mode);
}

/* FORTIFY builds call these when the flags are not a compile-time constant
 * needing no mode. */
SHIM_EXPORT int __open_2(const char *path, int flags)
{
	return open_common(AT_FDCWD, path, flags, 0);
}

SHIM_EXPORT int __open64_2(const char *path, int flags)
{
	return open_common(AT_FDCWD, path, flags | O_LARGEFILE, 0);
}

SHIM_EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
	return open_common(dirfd, path, flags, 0);
}

SHIM_EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
	return open_common(dirfd, path, flags | O_LARGEFILE, 0);
}

SHIM_EXPORT int creat(const char *path, mode_t mode)
{
	return open_common(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

SHIM_EXPORT int creat64(const char *path, mode_t mode)
{
	return open_common(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_LARGEFILE, mode);
}

/* fopen's mode string as open() flags; -1 when it is not valid. */
static int fopen_flags(const char *mode)
{
	int flags;
	switch (mode[0]) {
	case 'r': flags = O_RDONLY; break;
	case 'w': flags = O_WRONLY | O_CREAT | O_TRUNC; break;
	case 'a': flags = O_WRONLY | O_CREAT | O_APPEND; break;
	default: return -1;
	}
	for (const char *p = mode + 1; *p && *p != ','; p++) {
		switch (*p) {
		case '+': flags = (flags & ~O_ACCMODE) | O_RDWR; break;
		case 'x': flags |= O_EXCL; break;
		case 'e': flags |= O_CLOEXEC; break;
		default: break; /* 'b', 't', 'm', 'c' change nothing here */
		}
	}
	return flags;
}

/* stdio writes through internal calls the shim cannot see, so it cannot note
 * which ranges a rank wrote: a shared = job file is written with write(). */
static bool stdio_refused(const struct stg_path_rule *rule, const char *abs, int flags)
{
	if (!rule || !rule->shared_job || (flags & O_ACCMODE) == O_RDONLY)
		return false;
	shim_log(STG_LOG_ERROR, "'%s' is shared = job: it cannot be written through stdio "
		 "(fopen), whose writes the shim cannot see", abs);
	return true;
}

static FILE *fopen_common(const char *path, const char *mode, FILE *(*real)(const char *, const char *))
{
	if (!real)
		shim_real_init();
	real = real ? real : real_fopen;
	if (shim_busy || !mode)
		return real(path, mode);
	shim_busy++;
	int saved = errno;
	char abs[PATH_MAX];
	int flags = fopen_flags(mode);
	const struct stg_path_rule *rule =
		flags < 0 ? NULL : shim_resolve(AT_FDCWD, path, abs, sizeof(abs));
	int fd = stdio_refused(rule, abs, flags) ? -EINVAL
	       : rule				  ? session_open(abs, rule, flags, 0666, false)
						  : SESSION_PASS;
	FILE *f;
	if (fd == SESSION_PASS) {
		f = real(path, mode);
		if (f) {
			forget_stale(fileno(f));
			errno = saved;
		}
	} else if (fd < 0) {
		errno = -fd;
		f = NULL;
	} else {
		/* fdopen() ignores 'x' and 'w''s truncation: open() did both. */
		f = fdopen(fd, mode);
		if (!f) {
			int e = errno;
			session_discard_fd(fd);
			real_close(fd);
			errno = e;
		} else {
			errno = saved;
		}
	}
	shim_busy--;
	return f;
}

SHIM_EXPORT FILE *fopen(const char *path, const char *mode)
{
	return fopen_common(path, mode, real_fopen);
}

SHIM_EXPORT FILE *fopen64(const char *path, const char *mode)
{
	return fopen_common(path, mode, real_fopen64);
}

SHIM_EXPORT int fclose(FILE *f)
{
	if (!real_fclose)
		shim_real_init();
	int fd = f ? fileno(f) : -1;
	if (shim_busy || fd < 0 || !fdtable_get(fd))
		return real_fclose(f);
	shim_busy++;
	int saved = errno;
	/* stdio's buffer goes into the shadow first, then the commit reads it;
	 * fclose() closes the descriptor internally, where the shim cannot see. */
	int fr = fflush(f);
	int fe = errno;
	int r = session_release_fd(fd);
	int cr = real_fclose(f);
	int ce = errno;
	shim_busy--;
	if (fr != 0) {
		errno = fe;
		return EOF;
	}
	if (cr != 0) {
		errno = ce;
		return EOF;
	}
	if (r < 0) {
		errno = -r;
		return EOF;
	}
	errno = saved;
	return 0;
}

/* freopen onto a captured path: the stream keeps its FILE (stdout stays
 * stdout) and gets the captured file under its descriptor number. */
static FILE *freopen_common(const char *path, const char *mode, FILE *f,
			    FILE *(*real)(const char *, const char *, FILE *))
{
	if (!real)
		shim_real_init();
	real = real ? real : real_freopen;
	if (shim_busy || !path || !mode || !f)
		return real(path, mode, f);
	shim_busy++;
	int saved = errno;
	char abs[PATH_MAX];
	int flags = fopen_flags(mode);
	int target = fileno(f);
	const struct stg_path_rule *rule =
		flags < 0 || target < 0 ? NULL : shim_resolve(AT_FDCWD, path, abs, sizeof(abs));
	int fd = stdio_refused(rule, abs, flags) ? -EINVAL
	       : rule				  ? session_open(abs, rule, flags, 0666, false)
						  : SESSION_PASS;
	FILE *ret = f;
	if (fd == SESSION_PASS) {
		shim_busy--;
		return real(path, mode, f);
	}
	if (fd < 0) {
		errno = -fd;
		ret = NULL;
	} else {
		fflush(f);
		/* dup2 over the old descriptor closes it, which may commit a
		 * captured file it was: go through the hook for that. */
		shim_busy--;
		int d = dup2(fd, target);
		shim_busy++;
		int e = errno;
		close_quietly(fd);
		if (d < 0) {
			errno = e;
			ret = NULL;
		} else {
			clearerr(f);
			errno = saved;
		}
	}
	shim_busy--;
	return ret;
}

SHIM_EXPORT FILE *freopen(const char *path, const char *mode, FILE *f)
{
	return freopen_common(path, mode, f, real_freopen);
}

SHIM_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *f)
{
	return freopen_common(path, mode, f, real_freopen64);
}
