/* SPDX-License-Identifier: MIT */
/* Extended attributes: a captured file has none (ls asks for ACLs and labels). */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "hook.h"

/* A captured file has none: none (the answer to give), SHIM_PASS for the
 * real file system, or -errno. */
static long no_attrs(const char *path, long none)
{
	char abs[PATH_MAX];
	if (!shim_resolve(AT_FDCWD, path, abs, sizeof(abs)))
		return SHIM_PASS;
	pthread_mutex_lock(&shim.lock);
	bool open = session_find_path(abs) != NULL;
	pthread_mutex_unlock(&shim.lock);
	struct stat st;
	int r = open ? 1 : view_stat(abs, &st);
	return r == 0 ? SHIM_PASS : r < 0 ? r : none;
}

SHIM_EXPORT ssize_t getxattr(const char *path, const char *name, void *value, size_t size)
{
	SHIM_HANDLE(no_attrs(path, -ENODATA));
	return REAL(getxattr)(path, name, value, size);
}

SHIM_EXPORT ssize_t lgetxattr(const char *path, const char *name, void *value, size_t size)
{
	SHIM_HANDLE(no_attrs(path, -ENODATA));
	return REAL(lgetxattr)(path, name, value, size);
}

SHIM_EXPORT ssize_t listxattr(const char *path, char *list, size_t size)
{
	SHIM_HANDLE(no_attrs(path, 0));
	return REAL(listxattr)(path, list, size);
}

SHIM_EXPORT ssize_t llistxattr(const char *path, char *list, size_t size)
{
	SHIM_HANDLE(no_attrs(path, 0));
	return REAL(llistxattr)(path, list, size);
}

/* Versions keep no attributes: setting one fails as on a file system
 * without them, rather than being lost. */
SHIM_EXPORT int setxattr(const char *path, const char *name, const void *value, size_t size,
			 int flags)
{
	SHIM_HANDLE(no_attrs(path, -ENOTSUP));
	return REAL(setxattr)(path, name, value, size, flags);
}

SHIM_EXPORT int lsetxattr(const char *path, const char *name, const void *value, size_t size,
			  int flags)
{
	SHIM_HANDLE(no_attrs(path, -ENOTSUP));
	return REAL(lsetxattr)(path, name, value, size, flags);
}

SHIM_EXPORT int removexattr(const char *path, const char *name)
{
	SHIM_HANDLE(no_attrs(path, -ENODATA));
	return REAL(removexattr)(path, name);
}

SHIM_EXPORT int lremovexattr(const char *path, const char *name)
{
	SHIM_HANDLE(no_attrs(path, -ENODATA));
	return REAL(lremovexattr)(path, name);
}

/* The same answers through a captured file's descriptor, not its shadow's:
 * cp -p sets the mode as an ACL, and on ENOTSUP falls back to fchmod. */
SHIM_EXPORT ssize_t fgetxattr(int fd, const char *name, void *value, size_t size)
{
	if (fdtable_get(fd))
		SHIM_HANDLE(-ENODATA);
	return REAL(fgetxattr)(fd, name, value, size);
}

SHIM_EXPORT ssize_t flistxattr(int fd, char *list, size_t size)
{
	if (fdtable_get(fd))
		SHIM_HANDLE(0);
	return REAL(flistxattr)(fd, list, size);
}

SHIM_EXPORT int fsetxattr(int fd, const char *name, const void *value, size_t size, int flags)
{
	if (fdtable_get(fd))
		SHIM_HANDLE(-ENOTSUP);
	return REAL(fsetxattr)(fd, name, value, size, flags);
}

SHIM_EXPORT int fremovexattr(int fd, const char *name)
{
	if (fdtable_get(fd))
		SHIM_HANDLE(-ENODATA);
	return REAL(fremovexattr)(fd, name);
}
