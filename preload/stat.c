/* SPDX-License-Identifier: MIT */
/* stat, statx and the access family: captured files report their current
 * version. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "hook.h"

/* (dirfd, path) as a captured file: 0 with *st filled, -errno, or SHIM_PASS
 * when the real file system should answer. */
static long stat_handler(int dirfd, const char *path, struct stat *st)
{
	char abs[PATH_MAX];
	if (!shim_resolve(dirfd, path, abs, sizeof(abs)))
		return SHIM_PASS;
	int r = view_lookup(abs, st);
	if (r == 1 && shim_dir_suffix(path))
		return -ENOTDIR;
	return r == 0 ? SHIM_PASS : r < 0 ? r : 0;
}

/* After the real stat said ENOENT: -ENOTDIR when a directory above the name
 * is a captured file, as a file system answers. Asked only then, so a stat
 * of a real file costs nothing more. */
static long below_file(int dirfd, const char *path)
{
	char abs[PATH_MAX];
	if (!shim_resolve(dirfd, path, abs, sizeof(abs)))
		return SHIM_PASS;
	return view_under_file(abs) ? -ENOTDIR : SHIM_PASS;
}

/* The real call's result r on (dirfd, path), corrected by below_file. */
static int checked(int r, int dirfd, const char *path)
{
	if (r < 0 && errno == ENOENT)
		SHIM_HANDLE(below_file(dirfd, path));
	return r;
}

/* The common path of every path-based stat. */
static int stat_at(int dirfd, const char *path, struct stat *st, int flags)
{
	if (!shim_busy && path && !path[0] && (flags & AT_EMPTY_PATH))
		return fstat(dirfd, st);
	SHIM_HANDLE(stat_handler(dirfd, path, st));
	return checked(REAL(fstatat)(dirfd, path, st, flags), dirfd, path);
}

SHIM_EXPORT int fstat(int fd, struct stat *st)
{
	int r = REAL(fstat)(fd, st);
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

static long statx_handler(int dirfd, const char *path, unsigned mask, struct statx *stx)
{
	struct stat st;
	long r = stat_handler(dirfd, path, &st);
	if (r == 0)
		to_statx(&st, mask, stx);
	return r;
}

SHIM_EXPORT int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *stx)
{
	if (!REAL(statx)) {
		errno = ENOSYS;
		return -1;
	}
	/* Rust's standard library before 1.64 probes for statx with a NULL
	 * path and expects EFAULT. (glibc declares path nonnull: the asm keeps
	 * the compiler from dropping the test.) */
	__asm__("" : "+r"(path));
	if (!path)
		return REAL(statx)(dirfd, path, flags, mask, stx);
	if (!path[0] && (flags & AT_EMPTY_PATH)) {
		int r = REAL(statx)(dirfd, path, flags, mask, stx);
		struct session *s;
		struct stat st;
		if (r == 0 && !shim_busy && (s = fdtable_get(dirfd)) && REAL(fstat)(dirfd, &st) == 0) {
			session_fix_stat(s, &st);
			to_statx(&st, mask, stx);
		}
		return r;
	}
	SHIM_HANDLE(statx_handler(dirfd, path, mask, stx));
	return checked(REAL(statx)(dirfd, path, flags, mask, stx), dirfd, path);
}

/* A captured file is the caller's own: its owner bits decide, and for root
 * only execution needs a bit. */
static long access_handler(int dirfd, const char *path, int mode, bool effective)
{
	struct stat st;
	long r = stat_handler(dirfd, path, &st);
	if (r != 0)
		return r;
	uid_t uid = effective ? geteuid() : getuid();
	mode_t x = uid == 0 ? (S_IXUSR | S_IXGRP | S_IXOTH) : S_IXUSR;
	if (((mode & X_OK) && !(st.st_mode & x)) ||
	    (uid != 0 && (((mode & R_OK) && !(st.st_mode & S_IRUSR)) ||
			  ((mode & W_OK) && !(st.st_mode & S_IWUSR)))))
		return -EACCES;
	return 0;
}

SHIM_EXPORT int access(const char *path, int mode)
{
	SHIM_HANDLE(access_handler(AT_FDCWD, path, mode, false));
	return checked(REAL(access)(path, mode), AT_FDCWD, path);
}

SHIM_EXPORT int faccessat(int dirfd, const char *path, int mode, int flags)
{
	SHIM_HANDLE(access_handler(dirfd, path, mode, flags & AT_EACCESS));
	return checked(REAL(faccessat)(dirfd, path, mode, flags), dirfd, path);
}

/* glibc answers these with an internal stat the shim cannot see (GNU sort
 * checks its inputs with euidaccess). */
SHIM_EXPORT int euidaccess(const char *path, int mode)
{
	SHIM_HANDLE(access_handler(AT_FDCWD, path, mode, true));
	return checked(REAL(euidaccess)(path, mode), AT_FDCWD, path);
}

SHIM_EXPORT int eaccess(const char *path, int mode)
{
	SHIM_HANDLE(access_handler(AT_FDCWD, path, mode, true));
	return checked(REAL(eaccess)(path, mode), AT_FDCWD, path);
}
