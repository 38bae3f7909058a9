/* SPDX-License-Identifier: MIT */
/* glob and scandir see captured files: glibc's own walks read directories
 * with internal calls the shim cannot hook, so these go through the hooked
 * opendir, readdir and stat instead. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"
#include "util.h"

static void *glob_opendir(const char *path)
{
	return opendir(path);
}

static struct dirent *glob_readdir(void *d)
{
	return readdir(d);
}

static void glob_closedir(void *d)
{
	closedir(d);
}

/* glob's GLOB_ALTDIRFUNC takes the directory calls from the glob_t: the
 * hooked ones, which pass through where nothing is captured. A caller's own
 * GLOB_ALTDIRFUNC is left alone. gl_flags reports the caller's flags. */
SHIM_EXPORT int glob(const char *pattern, int flags, int (*errfunc)(const char *, int), glob_t *g)
{
	if ((flags & GLOB_ALTDIRFUNC) || shim_idle())
		return REAL(glob)(pattern, flags, errfunc, g);
	g->gl_opendir = glob_opendir;
	g->gl_readdir = glob_readdir;
	g->gl_closedir = glob_closedir;
	g->gl_stat = stat;
	g->gl_lstat = lstat;
	int r = REAL(glob)(pattern, flags | GLOB_ALTDIRFUNC, errfunc, g);
	g->gl_flags &= ~GLOB_ALTDIRFUNC;
	return r;
}

/* On 64-bit Linux glob64_t is glob_t, with the dirent64 and stat64 of the
 * same layouts. */
_Static_assert(sizeof(glob64_t) == sizeof(glob_t), "glob64_t layout");

SHIM_EXPORT int glob64(const char *pattern, int flags, int (*errfunc)(const char *, int), glob64_t *g)
{
	if ((flags & GLOB_ALTDIRFUNC) || shim_idle())
		return REAL(glob64)(pattern, flags, errfunc, g);
	return glob(pattern, flags, errfunc, (glob_t *)g);
}

/* On 64-bit Linux struct dirent and struct dirent64 have one layout, so one
 * scan serves scandir and scandir64. */
_Static_assert(sizeof(struct dirent) == sizeof(struct dirent64), "dirent64 layout");

typedef int (*scan_filter)(const struct dirent64 *);
typedef int (*scan_compar)(const struct dirent64 **, const struct dirent64 **);

/* Reads and closes d as glibc's scandir does: entries the filter keeps are
 * copied (d_reclen bytes), then sorted. An errno the filter leaves set fails
 * the scan, as in glibc. Returns the count, or -1 with errno set. */
static int scan(DIR *d, struct dirent64 ***ret, scan_filter filter, scan_compar compar)
{
	if (!d)
		return -1;
	int saved = errno;
	struct dirent64 **v = NULL, *e;
	size_t n = 0, cap = 0;
	errno = 0;
	while ((e = readdir64(d))) {
		if (filter && !filter(e))
			continue;
		errno = 0;
		if (STG_GROW(v, cap, n + 1) < 0)
			break; /* errno is ENOMEM */
		struct dirent64 *copy = malloc(e->d_reclen);
		if (!copy)
			break;
		v[n++] = memcpy(copy, e, e->d_reclen);
		errno = 0;
	}
	int err = errno;
	closedir(d);
	if (err) {
		while (n > 0)
			free(v[--n]);
		free(v);
		errno = err;
		return -1;
	}
	if (compar)
		qsort(v, n, sizeof(*v), (int (*)(const void *, const void *))compar);
	*ret = v;
	errno = saved;
	return (int)n;
}

/* The directory (dirfd, path) names, through the hooked calls. */
static DIR *open_at(int dirfd, const char *path)
{
	if (dirfd == AT_FDCWD || path[0] == '/')
		return opendir(path);
	int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	DIR *d = fdopendir(fd);
	if (!d) {
		int err = errno;
		close(fd);
		errno = err;
	}
	return d;
}

SHIM_EXPORT int scandirat64(int dirfd, const char *path, struct dirent64 ***ret,
			    int (*filter)(const struct dirent64 *),
			    int (*compar)(const struct dirent64 **, const struct dirent64 **))
{
	if (shim_idle())
		return REAL(scandirat64)(dirfd, path, ret, filter, compar);
	return scan(open_at(dirfd, path), ret, filter, compar);
}

SHIM_EXPORT int scandirat(int dirfd, const char *path, struct dirent ***ret,
			  int (*filter)(const struct dirent *),
			  int (*compar)(const struct dirent **, const struct dirent **))
{
	if (shim_idle())
		return REAL(scandirat)(dirfd, path, ret, filter, compar);
	return scan(open_at(dirfd, path), (struct dirent64 ***)ret, (scan_filter)filter,
		    (scan_compar)compar);
}

SHIM_EXPORT int scandir64(const char *path, struct dirent64 ***ret,
			  int (*filter)(const struct dirent64 *),
			  int (*compar)(const struct dirent64 **, const struct dirent64 **))
{
	if (shim_idle())
		return REAL(scandir64)(path, ret, filter, compar);
	return scan(opendir(path), ret, filter, compar);
}

SHIM_EXPORT int scandir(const char *path, struct dirent ***ret, int (*filter)(const struct dirent *),
			int (*compar)(const struct dirent **, const struct dirent **))
{
	if (shim_idle())
		return REAL(scandir)(path, ret, filter, compar);
	return scan(opendir(path), (struct dirent64 ***)ret, (scan_filter)filter,
		    (scan_compar)compar);
}
