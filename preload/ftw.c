/* SPDX-License-Identifier: MIT */
/* ftw and nftw on the hooked directory and stat calls, so that the walk
 * visits captured files (glibc's walks with internal calls the shim cannot
 * see). It follows glibc's ftw.c: the same callbacks, in the same order, with
 * the same struct FTW and return values. Each directory is read whole before
 * its entries are visited, so the walk holds one directory stream at a time
 * (plus, with FTW_CHDIR, up to nopenfd - 1 kept for changing back). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"
#include "util.h"

struct walk {
	char *path; /* the current path, as the callback gets it */
	size_t size;
	struct FTW ftw;
	int flags;
	bool old; /* ftw(): its callback, and its typeflags */
	union {
		int (*nfn)(const char *, const struct stat *, int, struct FTW *);
		int (*fn)(const char *, const struct stat *, int);
	};
	int nopenfd, nkept;
	dev_t dev;    /* the root's, for FTW_MOUNT */
	void *seen;   /* directories visited, by dev and inode (tsearch) */
};

/* ftw() reports symlinks as the files they point to, and knows no FTW_DP. */
static const int old_flag[] = {
	[FTW_F] = FTW_F, [FTW_D] = FTW_D, [FTW_DNR] = FTW_DNR, [FTW_NS] = FTW_NS,
	[FTW_SL] = FTW_F, [FTW_DP] = FTW_D, [FTW_SLN] = FTW_NS,
};

static int call(struct walk *w, const struct stat *st, int flag)
{
	if (w->old)
		return w->fn(w->path, st, old_flag[flag]);
	return w->nfn(w->path, st, flag, &w->ftw);
}

/* The name of the current path for system calls: with FTW_CHDIR the walk
 * stands in its directory. */
static const char *here(struct walk *w)
{
	return (w->flags & FTW_CHDIR) ? w->path + w->ftw.base : w->path;
}

static int cmp_obj(const void *a, const void *b)
{
	const struct stat *x = a, *y = b;
	if (x->st_dev != y->st_dev)
		return x->st_dev < y->st_dev ? -1 : 1;
	return x->st_ino < y->st_ino ? -1 : x->st_ino > y->st_ino;
}

/* Remembers a directory; 1 if it was visited already, -1 on ENOMEM. */
static int seen_before(struct walk *w, const struct stat *st)
{
	if (tfind(st, &w->seen, cmp_obj))
		return 1;
	struct stat *copy = malloc(sizeof(*copy));
	if (!copy)
		return -1;
	*copy = *st;
	if (!tsearch(copy, &w->seen, cmp_obj)) {
		free(copy);
		return -1;
	}
	return 0;
}

/* The names of a directory, "\0"-separated, ending in an empty one; NULL
 * on ENOMEM. A read error ends the list, as in glibc. */
static char *read_names(DIR *d)
{
	size_t len = 0, cap = 256;
	char *buf = malloc(cap);
	struct dirent64 *e;
	int saved = errno;
	while (buf && (e = readdir64(d))) {
		const char *n = e->d_name;
		if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
			continue;
		size_t nl = strlen(n) + 1;
		if (STG_GROW(buf, cap, len + nl + 1) < 0) {
			free(buf);
			buf = NULL;
			break;
		}
		memcpy(buf + len, n, nl);
		len += nl;
	}
	if (!buf)
		return NULL;
	errno = saved;
	buf[len] = '\0';
	return buf;
}

static int walk_dir(struct walk *w, const struct stat *st, DIR *parent);

/* One entry of the directory being walked, whose name is at w->ftw.base. */
static int walk_entry(struct walk *w, DIR *parent, const char *name)
{
	size_t need = w->ftw.base + strlen(name) + 2;
	if (STG_GROW(w->path, w->size, need) < 0)
		return -1;
	strcpy(w->path + w->ftw.base, name);
	struct stat st;
	int flag, r = 0;
	bool phys = w->flags & FTW_PHYS;
	if ((phys ? lstat : stat)(here(w), &st) < 0) {
		if (errno != EACCES && errno != ENOENT)
			return -1;
		flag = FTW_NS;
		/* A dangling symlink reports its own lstat (POSIX). */
		if (!phys && lstat(here(w), &st) == 0 && S_ISLNK(st.st_mode))
			flag = FTW_SLN;
	} else {
		flag = S_ISDIR(st.st_mode) ? FTW_D : S_ISLNK(st.st_mode) ? FTW_SL : FTW_F;
	}
	if (flag == FTW_NS || !(w->flags & FTW_MOUNT) || st.st_dev == w->dev) {
		if (flag != FTW_D)
			r = call(w, &st, flag);
		else if (phys || (r = seen_before(w, &st)) == 0)
			r = walk_dir(w, &st, parent);
		else if (r > 0)
			r = 0; /* a loop through a symlink: visited already */
	}
	if ((w->flags & FTW_ACTIONRETVAL) && r == FTW_SKIP_SUBTREE)
		r = 0;
	return r;
}

/* Back to the directory that holds the one just walked. */
static int change_back(struct walk *w, DIR *parent)
{
	if (parent && fchdir(dirfd(parent)) == 0)
		return 0;
	return chdir(w->ftw.base == 1 ? "/" : "..") < 0 ? -1 : 0;
}

/* The directory at w->path, whose stat is st: FTW_D (or FTW_DP after its
 * entries with FTW_DEPTH), FTW_DNR if it cannot be read. */
static int walk_dir(struct walk *w, const struct stat *st, DIR *parent)
{
	DIR *d = opendir(here(w));
	if (!d)
		return errno == EACCES ? call(w, st, FTW_DNR) : -1;
	int r = 0;
	char *names = NULL;
	if (!(w->flags & FTW_DEPTH))
		r = call(w, st, FTW_D);
	if (r == 0 && (w->flags & FTW_CHDIR) && fchdir(dirfd(d)) < 0)
		r = -1;
	if (r == 0 && !(names = read_names(d)))
		r = -1;
	/* Kept open only to change back to it after a subdirectory. */
	bool keep = r == 0 && (w->flags & FTW_CHDIR) && w->nkept < w->nopenfd - 1;
	int saved = errno;
	if (keep)
		w->nkept++;
	else
		closedir(d);
	errno = saved;
	if (r != 0)
		return r;
	int base = w->ftw.base;
	char *end = strchr(w->path, '\0');
	if (end[-1] != '/')
		*end++ = '/';
	w->ftw.base = (int)(end - w->path);
	w->ftw.level++;
	for (char *n = names; r == 0 && *n; n = strchr(n, '\0') + 1)
		r = walk_entry(w, keep ? d : NULL, n);
	free(names);
	if ((w->flags & FTW_ACTIONRETVAL) && r == FTW_SKIP_SIBLINGS)
		r = 0;
	w->path[w->ftw.base - 1] = '\0';
	w->ftw.level--;
	w->ftw.base = base;
	if (r == 0 && (w->flags & FTW_DEPTH))
		r = call(w, st, FTW_DP);
	if ((w->flags & FTW_CHDIR) && w->ftw.level > 0 &&
	    (r == 0 || ((w->flags & FTW_ACTIONRETVAL) && r != -1 && r != FTW_STOP)) &&
	    change_back(w, parent) < 0)
		r = -1;
	if (keep) {
		saved = errno;
		closedir(d);
		w->nkept--;
		errno = saved;
	}
	return r;
}

static void free_obj(void *p)
{
	free(p);
}

/* glibc's ftw_startup: the root, then the walk below it. */
static int walk(struct walk *w, const char *root)
{
	if (!root[0]) {
		errno = ENOENT;
		return -1;
	}
	w->size = strlen(root) + 2 > PATH_MAX ? strlen(root) + 2 : PATH_MAX;
	if (!(w->path = malloc(w->size)))
		return -1;
	char *end = stpcpy(w->path, root);
	while (end > w->path + 1 && end[-1] == '/')
		*--end = '\0';
	while (end > w->path && end[-1] != '/')
		end--;
	w->ftw.base = (int)(end - w->path);
	w->ftw.level = 0;
	int cwd = -1, r = 0;
	if (w->flags & FTW_CHDIR) {
		cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cwd < 0)
			r = -1;
		else if (w->ftw.base == 1)
			r = chdir("/");
		else if (w->ftw.base > 0) {
			char c = w->path[w->ftw.base - 1];
			w->path[w->ftw.base - 1] = '\0';
			r = chdir(w->path);
			w->path[w->ftw.base - 1] = c;
		}
	}
	struct stat st;
	bool phys = w->flags & FTW_PHYS;
	if (r < 0) {
	} else if ((phys ? lstat : stat)(here(w), &st) < 0) {
		if (!phys && errno == ENOENT && lstat(here(w), &st) == 0 && S_ISLNK(st.st_mode))
			r = call(w, &st, FTW_SLN);
		else
			r = -1;
	} else if (S_ISDIR(st.st_mode)) {
		w->dev = st.st_dev;
		if (phys || (r = seen_before(w, &st)) == 0)
			r = walk_dir(w, &st, NULL);
	} else {
		r = call(w, &st, S_ISLNK(st.st_mode) ? FTW_SL : FTW_F);
	}
	if ((w->flags & FTW_ACTIONRETVAL) && (r == FTW_SKIP_SUBTREE || r == FTW_SKIP_SIBLINGS))
		r = 0;
	int saved = errno;
	if (cwd >= 0) {
		(void)!fchdir(cwd); /* as glibc: the walk's result stands */
		close(cwd);
	}
	tdestroy(w->seen, free_obj);
	free(w->path);
	errno = saved;
	return r;
}

#define NFTW_FLAGS (FTW_PHYS | FTW_MOUNT | FTW_CHDIR | FTW_DEPTH | FTW_ACTIONRETVAL)

_Static_assert(sizeof(struct stat64) == sizeof(struct stat), "stat64 layout");

SHIM_EXPORT int nftw(const char *path, int (*fn)(const char *, const struct stat *, int, struct FTW *),
		     int nopenfd, int flags)
{
	if (shim_idle())
		return REAL(nftw)(path, fn, nopenfd, flags);
	if (flags & ~NFTW_FLAGS) {
		errno = EINVAL;
		return -1;
	}
	struct walk w = {.flags = flags, .nfn = fn, .nopenfd = nopenfd};
	return walk(&w, path);
}

SHIM_EXPORT int nftw64(const char *path,
		       int (*fn)(const char *, const struct stat64 *, int, struct FTW *),
		       int nopenfd, int flags)
{
	if (shim_idle())
		return REAL(nftw64)(path, fn, nopenfd, flags);
	return nftw(path, (int (*)(const char *, const struct stat *, int, struct FTW *))fn, nopenfd,
		    flags);
}

SHIM_EXPORT int ftw(const char *path, int (*fn)(const char *, const struct stat *, int), int nopenfd)
{
	if (shim_idle())
		return REAL(ftw)(path, fn, nopenfd);
	struct walk w = {.old = true, .fn = fn, .nopenfd = nopenfd};
	return walk(&w, path);
}

SHIM_EXPORT int ftw64(const char *path, int (*fn)(const char *, const struct stat64 *, int),
		      int nopenfd)
{
	if (shim_idle())
		return REAL(ftw64)(path, fn, nopenfd);
	return ftw(path, (int (*)(const char *, const struct stat *, int))fn, nopenfd);
}
