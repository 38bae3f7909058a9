/* SPDX-License-Identifier: MIT */
/* Extended attributes: a captured file has none (ls asks for ACLs and labels). */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "internal.h"
#include "real.h"

/* 1 when path names a captured file (then it has no attributes), 0 to ask the
 * real file system, -errno. */
static int captured(const char *path)
{
	if (!real_getxattr)
		shim_real_init();
	if (shim_busy)
		return 0;
	shim_busy++;
	char abs[PATH_MAX];
	int r = 0;
	if (shim_resolve(AT_FDCWD, path, abs, sizeof(abs))) {
		pthread_mutex_lock(&shim.lock);
		bool open = session_find_path(abs) != NULL;
		pthread_mutex_unlock(&shim.lock);
		struct stat st;
		r = open ? 1 : view_stat(abs, &st);
	}
	shim_busy--;
	return r;
}

static ssize_t get_common(const char *path, const char *name, void *value, size_t size,
			  ssize_t (*real)(const char *, const char *, void *, size_t))
{
	int r = captured(path);
	if (r == 0)
		return real(path, name, value, size);
	errno = r < 0 ? -r : ENODATA;
	return -1;
}

static ssize_t list_common(const char *path, char *list, size_t size,
			   ssize_t (*real)(const char *, char *, size_t))
{
	int r = captured(path);
	if (r == 0)
		return real(path, list, size);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	return 0;
}

SHIM_EXPORT ssize_t getxattr(const char *path, const char *name, void *value, size_t size)
{
	return get_common(path, name, value, size, real_getxattr);
}

SHIM_EXPORT ssize_t lgetxattr(const char *path, const char *name, void *value, size_t size)
{
	return get_common(path, name, value, size, real_lgetxattr);
}

SHIM_EXPORT ssize_t listxattr(const char *path, char *list, size_t size)
{
	return list_common(path, list, size, real_listxattr);
}

SHIM_EXPORT ssize_t llistxattr(const char *path, char *list, size_t size)
{
	return list_common(path, list, size, real_llistxattr);
}
