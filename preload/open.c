/* SPDX-License-Identifier: MIT */
/* The open family and stdio's fopen/fclose, which do not go through open(). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"
#include "log.h"

/* The kernel handed out fd, so any entry the table still has for it is stale:
 * the descriptor was closed where the shim could not see it. */
static void forget_stale(int fd)
{
	int saved;
	if (fd >= 0 && fdtable_get(fd) && shim_enter(&saved)) {
		session_discard_fd(fd);
		shim_leave(0, saved);
	}
}

/* An O_TMPFILE file has no name to capture until linkat() gives it one, and
 * what it is written after that would be lost: where files are captured,
 * the answer of a file system without O_TMPFILE (callers fall back to a
 * named file) rather than a real file. */
static long tmpfile_handler(int dirfd, const char *path)
{
	char abs[PATH_MAX];
	if (shim.policy->nrules == 0 || shim_abspath(dirfd, path, abs, sizeof(abs)) < 0)
		return SHIM_PASS;
	return stg_policy_may_contain(shim.policy, abs) ? -EOPNOTSUPP : SHIM_PASS;
}

static long open_handler(int dirfd, const char *path, int flags, mode_t mode)
{
	if ((flags & O_TMPFILE) == O_TMPFILE)
		return tmpfile_handler(dirfd, path);
	char abs[PATH_MAX];
	const struct stg_path_rule *rule = shim_resolve(dirfd, path, abs, sizeof(abs));
	if (!rule)
		return SHIM_PASS;
	/* O_PATH only locates: a captured file is located as a read-only one
	 * (coreutils probes destinations with O_PATH|O_DIRECTORY). */
	if (flags & O_PATH)
		flags = O_RDONLY | (flags & (O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW));
	int fd = session_open(abs, rule, flags, mode, true);
	return fd == SESSION_PASS ? SHIM_PASS : fd;
}

static int open_common(int dirfd, const char *path, int flags, mode_t mode)
{
	SHIM_HANDLE(open_handler(dirfd, path, flags, mode));
	int fd = REAL(openat)(dirfd, path, flags, mode);
	forget_stale(fd);
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

/* The captured file fopen() opens, through its descriptor: SHIM_PASS when
 * path is not captured, else the descriptor or -errno. */
static long fopen_handler(const char *path, const char *mode)
{
	int flags = fopen_flags(mode);
	char abs[PATH_MAX];
	const struct stg_path_rule *rule =
		flags < 0 ? NULL : shim_resolve(AT_FDCWD, path, abs, sizeof(abs));
	if (!rule)
		return SHIM_PASS;
	if (stdio_refused(rule, abs, flags))
		return -EINVAL;
	int fd = session_open(abs, rule, flags, 0666, false);
	return fd == SESSION_PASS ? SHIM_PASS : fd;
}

static FILE *fopen_common(const char *path, const char *mode, FILE *(*real)(const char *, const char *))
{
	int saved;
	if (!mode || !shim_enter(&saved))
		return real(path, mode);
	long fd = fopen_handler(path, mode);
	FILE *f = NULL;
	if (fd == SHIM_PASS) {
		shim_leave(0, saved);
		f = real(path, mode);
		if (f)
			forget_stale(fileno(f));
		return f;
	}
	if (fd >= 0) {
		/* fdopen() ignores 'x' and 'w''s truncation: open() did both. */
		f = fdopen((int)fd, mode);
		if (!f) {
			int e = errno;
			session_discard_fd((int)fd);
			REAL(close)((int)fd);
			fd = -e;
		}
	}
	shim_leave(fd < 0 ? fd : 0, saved);
	return f;
}

SHIM_EXPORT FILE *fopen(const char *path, const char *mode)
{
	return fopen_common(path, mode, REAL(fopen));
}

SHIM_EXPORT FILE *fopen64(const char *path, const char *mode)
{
	return fopen_common(path, mode, REAL(fopen64));
}

/* stdio's buffer goes into the shadow first, then the commit reads it;
 * fclose() closes the descriptor internally, where the shim cannot see. The
 * first failure is the answer. */
static long fclose_handler(FILE *f, int fd)
{
	int fr = fflush(f) == 0 ? 0 : -errno;
	int r = session_release_fd(fd);
	int cr = REAL(fclose)(f) == 0 ? 0 : -errno;
	return fr < 0 ? fr : cr < 0 ? cr : r;
}

SHIM_EXPORT int fclose(FILE *f)
{
	int fd = f ? fileno(f) : -1;
	if (fd >= 0 && fdtable_get(fd))
		SHIM_HANDLE(fclose_handler(f, fd));
	return REAL(fclose)(f);
}

/* freopen onto a captured path: the stream keeps its FILE (stdout stays
 * stdout) and gets the captured file under its descriptor number. */
static FILE *freopen_common(const char *path, const char *mode, FILE *f,
			    FILE *(*real)(const char *, const char *, FILE *))
{
	int saved;
	int target = f ? fileno(f) : -1;
	if (!path || !mode || target < 0 || !shim_enter(&saved))
		return real(path, mode, f);
	long fd = fopen_handler(path, mode);
	if (fd >= 0)
		fflush(f);
	if (shim_leave(fd, saved) == SHIM_PASS)
		return real(path, mode, f);
	if (fd < 0)
		return NULL;
	/* dup2 over the old descriptor closes it, which may commit a captured
	 * file it was: through the hooks, as the session moves to target. */
	int d = dup2((int)fd, target);
	int e = errno;
	close((int)fd);
	if (d < 0) {
		errno = e;
		return NULL;
	}
	clearerr(f);
	return f;
}

SHIM_EXPORT FILE *freopen(const char *path, const char *mode, FILE *f)
{
	return freopen_common(path, mode, f, REAL(freopen));
}

SHIM_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *f)
{
	return freopen_common(path, mode, f, REAL(freopen64));
}
