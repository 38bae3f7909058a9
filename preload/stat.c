/* SPDX-License-Identifier: MIT */
/* stat, statx and access: captured files report their current version. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "internal.h"
#include "real.h"

#define ENSURE(fn)                   \
	do {                         \
		if (!real_##fn)      \
			shim_real_init(); \
	} while (0)

/* 1 with *st filled when abspath is a captured file this process has open or
 * the catalog holds, 0 when the real file system should answer, -errno. */
static int captured_stat(const char *abspath, struct stat *st)
{
	background_wait(abspath);
	pthread_mutex_lock(&shim.lock);
	struct session *s = session_find_path(abspath);
	int fd = s ? session_any_fd(s) : -1;
	if (s && fd >= 0 && real_fstat(fd, st) == 0) {
		session_fix_stat(s, st);
		pthread_mutex_unlock(&shim.lock);
		return 1;
	}
	pthread_mutex_unlock(&shim.lock);
	return view_stat(abspath, st);
}

/* The common path of every path-based stat. */
static int stat_at(int dirfd, const char *path, struct stat *st, int flags)
{
	ENSURE(fstatat);
	if (shim_busy)
		return real_fstatat(dirfd, path, st, flags);
	if (path && !path[0] && (flags & AT_EMPTY_PATH))
		return fstat(dirfd, st);
	shim_busy++;
	int saved = errno;
	char abs[PATH_MAX];
	int r = 0;
	if (shim_resolve(dirfd, path, abs, sizeof(abs)))
		r = captured_stat(abs, st);
	shim_busy--;
	if (r == 0)
		return real_fstatat(dirfd, path, st, flags);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	errno = saved;
	return 0;
}

SHIM_EXPORT int fstat(int fd, struct stat *st)
{
	ENSURE(fstat);
	int r = real_fstat(fd, st);
	struct session *s;
	if (r == 0 && !shim_busy && (s = fdtable_get(fd)))
		session_fix_stat(s, st);
	return r;
}

/* On 64-bit Linux struct stat64 and struct stat are one layout. */
_Static_assert(sizeof(struct stat64) == sizeof(struct stat), "stat64 layout");

SHIM_EXPORT int fstat64(int fd, struct stat64 *st)
{
	return fstat(fd, (struct stat *)st);
}

SHIM_EXPORT int stat(const char *path, struct stat *st)
{
	return stat_at(AT_FDCWD, path, st, 0);
}

SHIM_EXPORT int stat64(const char *path, struct stat64 *st)
{
	return stat_at(AT_FDCWD, path, (struct stat *)st, 0);
}

SHIM_EXPORT int lstat(const char *path, struct stat *st)
{
	return stat_at(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}

SHIM_EXPORT int lstat64(const char *path, struct stat64 *st)
{
	return stat_at(AT_FDCWD, path, (struct stat *)st, AT_SYMLINK_NOFOLLOW);
}

SHIM_EXPORT int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	return stat_at(dirfd, path, st, flags);
}

SHIM_EXPORT int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	return stat_at(dirfd, path, (struct stat *)st, flags);
}

/* Binaries built against glibc < 2.33 call these; ver is _STAT_VER (1 on
 * x86_64), the layout the same struct stat. */
SHIM_EXPORT int __xstat(int ver, const char *path, struct stat *st)
{
	(void)ver;
	return stat_at(AT_FDCWD, path, st, 0);
}

SHIM_EXPORT int __xstat64(int ver, const char *path, struct stat *st)
{
	(void)ver;
	return stat_at(AT_FDCWD, path, st, 0);
}

SHIM_EXPORT int __lxstat(int ver, const char *path, struct stat *st)
{
	(void)ver;
	return stat_at(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}

SHIM_EXPORT int __lxstat64(int ver, const char *path, struct stat *st)
{
	(void)ver;
	return stat_at(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}

SHIM_EXPORT int __fxstat(int ver, int fd, struct stat *st)
{
	(void)ver;
	return fstat(fd, st);
}

SHIM_EXPORT int __fxstat64(int ver, int fd, struct stat *st)
{
	(void)ver;
	return fstat(fd, st);
}

SHIM_EXPORT int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
	(void)ver;
	return stat_at(dirfd, path, st, flags);
}

SHIM_EXPORT int __fxstatat64(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
	(void)ver;
	return stat_at(dirfd, path, st, flags);
}

static void to_statx(const struct stat *st, unsigned mask, struct statx *stx)
{
	(void)mask;
	memset(stx, 0, sizeof(*stx));
	stx->stx_mask = STATX_BASIC_STATS;
	stx->stx_blksize = (uint32_t)st->st_blksize;
	stx->stx_nlink = (uint32_t)st->st_nlink;
	stx->stx_uid = st->st_uid;
	stx->stx_gid = st->st_gid;
	stx->stx_mode = (uint16_t)st->st_mode;
	stx->stx_ino = st->st_ino;
	stx->stx_size = (uint64_t)st->st_size;
	stx->stx_blocks = (uint64_t)st->st_blocks;
	stx->stx_atime.tv_sec = st->st_atim.tv_sec;
	stx->stx_atime.tv_nsec = (uint32_t)st->st_atim.tv_nsec;
	stx->stx_mtime.tv_sec = st->st_mtim.tv_sec;
	stx->stx_mtime.tv_nsec = (uint32_t)st->st_mtim.tv_nsec;
	stx->stx_ctime.tv_sec = st->st_ctim.tv_sec;
	stx->stx_ctime.tv_nsec = (uint32_t)st->st_ctim.tv_nsec;
	stx->stx_dev_major = major(st->st_dev);
	stx->stx_dev_minor = minor(st->st_dev);
}

SHIM_EXPORT int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *stx)
{
	ENSURE(statx);
	if (!real_statx) {
		errno = ENOSYS;
		return -1;
	}
	if (shim_busy)
		return real_statx(dirfd, path, flags, mask, stx);
	struct session *s;
	if (!path[0] && (flags & AT_EMPTY_PATH)) {
		int r = real_statx(dirfd, path, flags, mask, stx);
		if (r == 0 && (s = fdtable_get(dirfd))) {
			struct stat st;
			if (real_fstat(dirfd, &st) == 0) {
				session_fix_stat(s, &st);
				to_statx(&st, mask, stx);
			}
		}
		return r;
	}
	shim_busy++;
	int saved = errno;
	char abs[PATH_MAX];
	struct stat st;
	int r = 0;
	if (shim_resolve(dirfd, path, abs, sizeof(abs)))
		r = captured_stat(abs, &st);
	shim_busy--;
	if (r == 0)
		return real_statx(dirfd, path, flags, mask, stx);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	to_statx(&st, mask, stx);
	errno = saved;
	return 0;
}

static int access_at(int dirfd, const char *path, int mode, int flags)
{
	ENSURE(faccessat);
	if (shim_busy)
		return real_faccessat(dirfd, path, mode, flags);
	shim_busy++;
	int saved = errno;
	char abs[PATH_MAX];
	struct stat st;
	int r = 0;
	if (shim_resolve(dirfd, path, abs, sizeof(abs)))
		r = captured_stat(abs, &st);
	shim_busy--;
	if (r == 0)
		return real_faccessat(dirfd, path, mode, flags);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	/* The file is the caller's own: the owner bits decide, as for root nothing. */
	uid_t uid = (flags & AT_EACCESS) ? geteuid() : getuid();
	if (uid != 0 && (((mode & R_OK) && !(st.st_mode & S_IRUSR)) ||
			 ((mode & W_OK) && !(st.st_mode & S_IWUSR)) ||
			 ((mode & X_OK) && !(st.st_mode & S_IXUSR)))) {
		errno = EACCES;
		return -1;
	}
	errno = saved;
	return 0;
}

SHIM_EXPORT int access(const char *path, int mode)
{
	return access_at(AT_FDCWD, path, mode, 0);
}

SHIM_EXPORT int faccessat(int dirfd, const char *path, int mode, int flags)
{
	return access_at(dirfd, path, mode, flags);
}
