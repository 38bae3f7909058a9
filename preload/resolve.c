/* SPDX-License-Identifier: MIT */
/* Resolving names: realpath, readlink and name_to_handle_at on captured
 * files. glibc's realpath walks the path with its own hidden readlink, which
 * finds no captured file: it is answered from the view when it fails. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"
#include "log.h"

/* The real realpath failed with err on path. The longest prefix of path it
 * resolves is a directory; when the next component is a captured file, path
 * names that file (out filled, 0), or with anything after it is -ENOTDIR.
 * Else -err. */
static long view_realpath(const char *path, int err, char *out)
{
	char prefix[PATH_MAX], abs[PATH_MAX];
	size_t len = strlen(path), cut = len;
	if (len == 0 || len >= sizeof(prefix))
		return -err;
	do {
		if (cut == 0)
			return -err; /* not even "." or "/" resolves */
		while (cut > 0 && path[cut - 1] == '/')
			cut--;
		while (cut > 0 && path[cut - 1] != '/')
			cut--;
		size_t n = cut;
		while (n > 1 && path[n - 1] == '/')
			n--;
		memcpy(prefix, path, n);
		prefix[n] = '\0';
		if (n == 0)
			strcpy(prefix, ".");
	} while (!REAL(realpath)(prefix, out));
	const char *name = path + cut, *after = strchr(name, '/');
	size_t namelen = after ? (size_t)(after - name) : strlen(name);
	if ((namelen == 1 && name[0] == '.') || (namelen == 2 && !strncmp(name, "..", 2)))
		return -err;
	size_t olen = strlen(out);
	if (olen + 1 + namelen >= PATH_MAX)
		return -ENAMETOOLONG;
	if (olen > 1)
		out[olen++] = '/';
	memcpy(out + olen, name, namelen);
	out[olen + namelen] = '\0';
	if (view_at(AT_FDCWD, out, abs, sizeof(abs)) != 1)
		return -err;
	return after ? -ENOTDIR : 0;
}

/* realpath's answer after the real one failed (errno says how): the
 * captured file's name in resolved (allocated when NULL), or NULL with errno
 * set. caller_errno is errno as the caller left it. */
static char *realpath_view(const char *path, char *resolved, int caller_errno)
{
	int err = errno, ignored;
	if (!path || (err != ENOENT && err != ENOTDIR) || !shim_enter(&ignored))
		return NULL;
	char out[PATH_MAX];
	if (shim_leave(view_realpath(path, err, out), caller_errno) < 0)
		return NULL;
	if (!resolved)
		return strdup(out);
	return strcpy(resolved, out);
}

SHIM_EXPORT char *realpath(const char *path, char *resolved)
{
	int saved = errno;
	char *r = REAL(realpath)(path, resolved);
	return r ? r : realpath_view(path, resolved, saved);
}

/* FORTIFY's realpath; it checks resolvedlen (>= PATH_MAX) first. */
SHIM_EXPORT char *__realpath_chk(const char *path, char *resolved, size_t resolvedlen)
{
	int saved = errno;
	char *r = REAL(__realpath_chk)(path, resolved, resolvedlen);
	return r ? r : realpath_view(path, resolved, saved);
}

SHIM_EXPORT char *canonicalize_file_name(const char *path)
{
	int saved = errno;
	char *r = REAL(canonicalize_file_name)(path);
	return r ? r : realpath_view(path, NULL, saved);
}

/* A captured file is a regular file, not a symbolic link: EINVAL. */
static long not_a_link(int dirfd, const char *path)
{
	char abs[PATH_MAX];
	if (!path || !path[0])
		return SHIM_PASS; /* readlinkat(fd, "") reads fd's own link */
	int r = view_at(dirfd, path, abs, sizeof(abs));
	return r == 0 ? SHIM_PASS : r < 0 ? r : -EINVAL;
}

SHIM_EXPORT ssize_t readlink(const char *path, char *buf, size_t size)
{
	SHIM_HANDLE(not_a_link(AT_FDCWD, path));
	return REAL(readlink)(path, buf, size);
}

SHIM_EXPORT ssize_t readlinkat(int dirfd, const char *path, char *buf, size_t size)
{
	SHIM_HANDLE(not_a_link(dirfd, path));
	return REAL(readlinkat)(dirfd, path, buf, size);
}

/* FORTIFY's: size > buflen aborts in the real one, so that check goes first. */
SHIM_EXPORT ssize_t __readlink_chk(const char *path, char *buf, size_t size, size_t buflen)
{
	if (size <= buflen)
		SHIM_HANDLE(not_a_link(AT_FDCWD, path));
	return REAL(__readlink_chk)(path, buf, size, buflen);
}

SHIM_EXPORT ssize_t __readlinkat_chk(int dirfd, const char *path, char *buf, size_t size,
				     size_t buflen)
{
	if (size <= buflen)
		SHIM_HANDLE(not_a_link(dirfd, path));
	return REAL(__readlinkat_chk)(dirfd, path, buf, size, buflen);
}

/* No file handle can name a file that lives in the cache: refused loudly
 * (an ENOENT would say the file is not there). */
static long no_handle(int dirfd, const char *path, int flags)
{
	char abs[PATH_MAX];
	if (!path || (!path[0] && (flags & AT_EMPTY_PATH)))
		return SHIM_PASS;
	int r = view_at(dirfd, path, abs, sizeof(abs));
	if (r != 1)
		return r == 0 ? SHIM_PASS : r;
	shim_log(STG_LOG_ERROR, "'%s': a captured file has no file handle "
		 "(name_to_handle_at)", abs);
	return -EOPNOTSUPP;
}

SHIM_EXPORT int name_to_handle_at(int dirfd, const char *path, struct file_handle *handle,
				  int *mount_id, int flags)
{
	SHIM_HANDLE(no_handle(dirfd, path, flags));
	return REAL(name_to_handle_at)(dirfd, path, handle, mount_id, flags);
}
