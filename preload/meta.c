/* SPDX-License-Identifier: MIT */
/* chmod and utime, by name and by descriptor: a captured file's mode and
 * modification time live in its manifest. On an open file they apply to the
 * version its close() commits; on a closed one, to its newest version (cp -p,
 * rsync, tar and shutil.copy2 set them after writing). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <utime.h>

#include "catalog.h"
#include "hook.h"
#include "util.h"

/* glibc declares these path arguments nonnull, but Linux accepts NULL for
 * utimensat (meaning dirfd itself): test it where the compiler cannot assume. */
__attribute__((noinline)) static bool absent(const char *path)
{
	__asm__ volatile("" : "+r"(path));
	return path == NULL;
}

/* What to change: a mode, an mtime, or both. */
struct change {
	bool has_mode, has_mtime;
	mode_t mode;
	int64_t mtime_ns;
};

/* The modification time a times[2] argument asks for: [1] is the mtime. */
static void from_timespec(const struct timespec *t, struct change *c)
{
	if (!t) {
		c->has_mtime = true;
		c->mtime_ns = stg_now_ns();
	} else if (t[1].tv_nsec == UTIME_NOW) {
		c->has_mtime = true;
		c->mtime_ns = stg_now_ns();
	} else if (t[1].tv_nsec != UTIME_OMIT) {
		c->has_mtime = true;
		c->mtime_ns = (int64_t)t[1].tv_sec * 1000000000 + t[1].tv_nsec;
	}
}

static void from_timeval(const struct timeval *t, struct change *c)
{
	c->has_mtime = true;
	c->mtime_ns = t ? (int64_t)t[1].tv_sec * 1000000000 + (int64_t)t[1].tv_usec * 1000
			: stg_now_ns();
}

static void apply_to_session(struct session *s, const struct change *c)
{
	if (c->has_mode) {
		s->mode = c->mode & 07777;
		/* for whichever process of the writing commits */
		if (s->share)
			share_set_mode(s->share, s->mode);
	}
	if (c->has_mtime) {
		s->mtime_set = true;
		s->mtime_ns = c->mtime_ns;
	}
	s->meta_dirty = true;
}

static int amend(const char *path, const struct stg_path_rule *rule, const struct change *c)
{
	uint32_t mode = c->mode & 07777;
	int r = stg_catalog_amend(shim.cache, path, c->has_mode ? &mode : NULL,
				  c->has_mtime ? &c->mtime_ns : NULL,
				  rule->durability != STG_DURABILITY_ASYNC);
	if (r == 0)
		replicate_after_commit(path, rule, 0);
	return r == -EBADMSG ? -EIO : r;
}

/* 1: not a captured file (the real call goes), else 0 or -errno. */
static int change_path(int dirfd, const char *path, const struct change *c)
{
	char abs[PATH_MAX];
	const struct stg_path_rule *rule = shim_resolve(dirfd, path, abs, sizeof(abs));
	if (!rule)
		return 1;
	if (background_wait(abs) < 0)
		return -EIO;
	pthread_mutex_lock(&shim.lock);
	struct session *s = session_find_path(abs);
	if (s)
		apply_to_session(s, c);
	pthread_mutex_unlock(&shim.lock);
	if (s)
		return 0;
	struct stat st;
	int r = view_stat(abs, &st);
	if (r == 0) /* the catalog does not know it: a real file, or none */
		return view_under_file(abs) ? -ENOTDIR : 1;
	if (r < 0)
		return r;
	return shim_dir_suffix(path) ? -ENOTDIR : amend(abs, rule, c);
}

static int change_fd(int fd, const struct change *c)
{
	struct session *s = fdtable_get(fd);
	if (!s)
		return 1;
	if (!s->readonly) {
		pthread_mutex_lock(&shim.lock);
		apply_to_session(s, c);
		pthread_mutex_unlock(&shim.lock);
		return 0;
	}
	/* Read-only: nothing will be committed through it, so change the
	 * version it shows. */
	if (c->has_mode)
		s->mode = c->mode & 07777;
	return amend(s->path, s->rule, c);
}

/* A change by name or descriptor: SHIM_PASS when the real call should make
 * it, else 0 or -errno. */
static long change(int dirfd, const char *path, int fd, const struct change *c)
{
	int r = path ? change_path(dirfd, path, c) : change_fd(fd, c);
	return r == 1 ? SHIM_PASS : r;
}

SHIM_EXPORT int chmod(const char *path, mode_t mode)
{
	struct change c = {.has_mode = true, .mode = mode};
	SHIM_HANDLE(change(AT_FDCWD, path, -1, &c));
	return REAL(chmod)(path, mode);
}

SHIM_EXPORT int fchmodat(int dirfd, const char *path, mode_t mode, int flags)
{
	struct change c = {.has_mode = true, .mode = mode};
	if (!absent(path) && path[0])
		SHIM_HANDLE(change(dirfd, path, -1, &c));
	return REAL(fchmodat)(dirfd, path, mode, flags);
}

/* glibc's lchmod is a hidden fchmodat(AT_SYMLINK_NOFOLLOW); a captured file
 * is never a symbolic link, so it is chmod. */
SHIM_EXPORT int lchmod(const char *path, mode_t mode)
{
	struct change c = {.has_mode = true, .mode = mode};
	SHIM_HANDLE(change(AT_FDCWD, path, -1, &c));
	return REAL(lchmod)(path, mode);
}

SHIM_EXPORT int fchmod(int fd, mode_t mode)
{
	struct change c = {.has_mode = true, .mode = mode};
	if (fdtable_get(fd))
		SHIM_HANDLE(change(-1, NULL, fd, &c));
	return REAL(fchmod)(fd, mode);
}

SHIM_EXPORT int futimens(int fd, const struct timespec t[2])
{
	struct change c = {0};
	from_timespec(t, &c);
	if (fdtable_get(fd))
		SHIM_HANDLE(change(-1, NULL, fd, &c));
	return REAL(futimens)(fd, t);
}

SHIM_EXPORT int utimensat(int dirfd, const char *path, const struct timespec t[2], int flags)
{
	struct change c = {0};
	from_timespec(t, &c);
	/* utimensat(fd, NULL, ...) and AT_EMPTY_PATH: the descriptor itself */
	if (absent(path) || (!path[0] && (flags & AT_EMPTY_PATH))) {
		if (fdtable_get(dirfd))
			SHIM_HANDLE(change(-1, NULL, dirfd, &c));
	} else {
		SHIM_HANDLE(change(dirfd, path, -1, &c));
	}
	return REAL(utimensat)(dirfd, path, t, flags);
}

SHIM_EXPORT int utime(const char *path, const struct utimbuf *t)
{
	struct change c = {.has_mtime = true};
	c.mtime_ns = t ? (int64_t)t->modtime * 1000000000 : stg_now_ns();
	SHIM_HANDLE(change(AT_FDCWD, path, -1, &c));
	return REAL(utime)(path, t);
}

SHIM_EXPORT int utimes(const char *path, const struct timeval t[2])
{
	struct change c = {0};
	from_timeval(t, &c);
	SHIM_HANDLE(change(AT_FDCWD, path, -1, &c));
	return REAL(utimes)(path, t);
}

SHIM_EXPORT int lutimes(const char *path, const struct timeval t[2])
{
	struct change c = {0};
	from_timeval(t, &c);
	SHIM_HANDLE(change(AT_FDCWD, path, -1, &c));
	return REAL(lutimes)(path, t);
}

/* futimesat is utimes relative to a directory. */
SHIM_EXPORT int futimesat(int dirfd, const char *path, const struct timeval t[2])
{
	struct change c = {0};
	from_timeval(t, &c);
	if (!absent(path))
		SHIM_HANDLE(change(dirfd, path, -1, &c));
	return REAL(futimesat)(dirfd, path, t);
}

SHIM_EXPORT int futimes(int fd, const struct timeval t[2])
{
	struct change c = {0};
	from_timeval(t, &c);
	if (fdtable_get(fd))
		SHIM_HANDLE(change(-1, NULL, fd, &c));
	return REAL(futimes)(fd, t);
}
