/* SPDX-License-Identifier: MIT */
/* Calls that make a new name (mkdir, mkfifo, mknod, symlink): on a captured
 * file's name they fail with EEXIST, as on a file system, instead of making
 * a real object that hides behind the captured file. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hook.h"

static long taken(int dirfd, const char *path)
{
	char abs[PATH_MAX];
	int r = view_at(dirfd, path, abs, sizeof(abs));
	return r == 1 ? -EEXIST : r == 0 ? SHIM_PASS : r;
}

SHIM_EXPORT int mkdir(const char *path, mode_t mode)
{
	SHIM_HANDLE(taken(AT_FDCWD, path));
	return REAL(mkdir)(path, mode);
}

SHIM_EXPORT int mkdirat(int dirfd, const char *path, mode_t mode)
{
	SHIM_HANDLE(taken(dirfd, path));
	return REAL(mkdirat)(dirfd, path, mode);
}

SHIM_EXPORT int mkfifo(const char *path, mode_t mode)
{
	SHIM_HANDLE(taken(AT_FDCWD, path));
	return REAL(mkfifo)(path, mode);
}

SHIM_EXPORT int mkfifoat(int dirfd, const char *path, mode_t mode)
{
	SHIM_HANDLE(taken(dirfd, path));
	return REAL(mkfifoat)(dirfd, path, mode);
}

SHIM_EXPORT int mknod(const char *path, mode_t mode, dev_t dev)
{
	SHIM_HANDLE(taken(AT_FDCWD, path));
	return REAL(mknod)(path, mode, dev);
}

SHIM_EXPORT int mknodat(int dirfd, const char *path, mode_t mode, dev_t dev)
{
	SHIM_HANDLE(taken(dirfd, path));
	return REAL(mknodat)(dirfd, path, mode, dev);
}

/* Binaries built against glibc < 2.33 call these. */
SHIM_EXPORT int __xmknod(int ver, const char *path, mode_t mode, dev_t *dev)
{
	SHIM_HANDLE(taken(AT_FDCWD, path));
	return REAL(__xmknod)(ver, path, mode, dev);
}

SHIM_EXPORT int __xmknodat(int ver, int dirfd, const char *path, mode_t mode, dev_t *dev)
{
	SHIM_HANDLE(taken(dirfd, path));
	return REAL(__xmknodat)(ver, dirfd, path, mode, dev);
}

SHIM_EXPORT int symlink(const char *target, const char *path)
{
	SHIM_HANDLE(taken(AT_FDCWD, path));
	return REAL(symlink)(target, path);
}

SHIM_EXPORT int symlinkat(const char *target, int dirfd, const char *path)
{
	SHIM_HANDLE(taken(dirfd, path));
	return REAL(symlinkat)(target, dirfd, path);
}
