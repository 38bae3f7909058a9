/* SPDX-License-Identifier: MIT */
/* What file system a name is on: statfs, statvfs and pathconf. A captured
 * file would be on its directory's, so they answer for the directory. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "hook.h"

/* 1 with dir filled when path is a captured file, SHIM_PASS, or -errno. */
static long parent_dir(const char *path, char *dir, size_t len)
{
	int r = view_at(AT_FDCWD, path, dir, len);
	if (r != 1)
		return r == 0 ? SHIM_PASS : r;
	char *slash = strrchr(dir, '/');
	slash[slash == dir] = '\0';
	return 1;
}

/* statfs (buf a struct statfs) or statvfs (a struct statvfs) of path. */
static long fs_handler(const char *path, void *buf, bool vfs)
{
	char dir[PATH_MAX];
	long r = parent_dir(path, dir, sizeof(dir));
	if (r != 1)
		return r;
	r = vfs ? REAL(statvfs)(dir, buf) : REAL(statfs)(dir, buf);
	return r < 0 ? -errno : 0;
}

/* On 64-bit Linux the 64 variants have the same layouts. */
_Static_assert(sizeof(struct statfs64) == sizeof(struct statfs), "statfs64 layout");
_Static_assert(sizeof(struct statvfs64) == sizeof(struct statvfs), "statvfs64 layout");

SHIM_EXPORT int statfs(const char *path, struct statfs *buf)
{
	SHIM_HANDLE(fs_handler(path, buf, false));
	return REAL(statfs)(path, buf);
}

SHIM_EXPORT int statfs64(const char *path, struct statfs64 *buf)
{
	SHIM_HANDLE(fs_handler(path, buf, false));
	return REAL(statfs64)(path, buf);
}

SHIM_EXPORT int statvfs(const char *path, struct statvfs *buf)
{
	SHIM_HANDLE(fs_handler(path, buf, true));
	return REAL(statvfs)(path, buf);
}

SHIM_EXPORT int statvfs64(const char *path, struct statvfs64 *buf)
{
	SHIM_HANDLE(fs_handler(path, buf, true));
	return REAL(statvfs64)(path, buf);
}

/* Its -1 without errno means "no limit": not a result SHIM_HANDLE can carry,
 * so the guard is taken here and the real call made after. */
SHIM_EXPORT long pathconf(const char *path, int name)
{
	char dir[PATH_MAX];
	int saved;
	if (!shim_enter(&saved))
		return REAL(pathconf)(path, name);
	long r = shim_leave(parent_dir(path, dir, sizeof(dir)), saved);
	if (r == SHIM_PASS)
		return REAL(pathconf)(path, name);
	return r < 0 ? -1 : REAL(pathconf)(dir, name);
}
