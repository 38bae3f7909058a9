/* SPDX-License-Identifier: MIT */
/* Directories: listings show captured files beside the real entries, a
 * directory holding captured files is not empty (rmdir), and a captured file
 * is not a directory (chdir, rmdir). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "hook.h"
#include "util.h"

/* The captured names of one open directory stream, served after the real
 * entries run out. */
struct listing {
	DIR *dir;
	char **names; /* visible captured files directly in the directory */
	bool *deleted_real; /* parallel: hides a real entry of that name */
	size_t n, cap, next;
	bool real_done; /* a seekdir into the captured names: skip the real ones */
	char **hidden; /* captured files that were deleted: hide real ones too */
	size_t nhidden, caphidden;
	struct dirent64 ent;
	struct listing *link;
};

static struct listing *listings;

struct collect {
	const char *dir;
	size_t dirlen;
	struct listing *l;
	int err;
};

static int push(char ***arr, size_t *n, size_t *cap, const char *name)
{
	if (STG_GROW(*arr, *cap, *n + 1) < 0)
		return -ENOMEM;
	if (!((*arr)[*n] = strdup(name)))
		return -ENOMEM;
	(*n)++;
	return 0;
}

static int collect_one(void *arg, const char *path, int filedirfd)
{
	struct collect *c = arg;
	(void)filedirfd;
	if (strncmp(path, c->dir, c->dirlen) != 0)
		return 0;
	const char *name = path + c->dirlen;
	if (c->dirlen > 1) {
		if (*name != '/')
			return 0;
		name++;
	}
	if (!*name || strchr(name, '/'))
		return 0;
	struct stg_file_state st;
	if ((stg_catalog_state(shim.cache, path, &st) < 0 && !st.damaged) || !st.exists)
		return 0;
	if (st.deleted)
		return push(&c->l->hidden, &c->l->nhidden, &c->l->caphidden, name) < 0 ? -ENOMEM : 0;
	return push(&c->l->names, &c->l->n, &c->l->cap, name) < 0 ? -ENOMEM : 0;
}

static void listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->names[i]);
	for (size_t i = 0; i < l->nhidden; i++)
		free(l->hidden[i]);
	free(l->names);
	free(l->hidden);
	free(l);
}

/* The captured files of a directory the policy may capture files in. Scanning
 * the catalog is cheap next to a checkpoint. */
static struct listing *listing_for(const char *abs)
{
	if (!stg_policy_may_contain(shim.policy, abs) || !shim_cache())
		return NULL;
	/* A file whose first version a helper is packing is listed too. */
	background_settle_below(abs);
	struct listing *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	struct collect c = {.dir = abs, .dirlen = strlen(abs), .l = l};
	if (stg_catalog_foreach(shim.cache, collect_one, &c) < 0 || (l->n == 0 && l->nhidden == 0)) {
		listing_free(l);
		return NULL;
	}
	return l;
}

/* Is this process writing a file directly in dir (not yet in the catalog)? */
static bool writing_in(const char *dir)
{
	size_t n = strlen(dir);
	struct session *s;
	int fd;
	bool found = false;
	pthread_mutex_lock(&shim.lock);
	FDTABLE_EACH(fd, s) {
		if (!s->unlinked && !strncmp(s->path, dir, n) && s->path[n] == '/' &&
		    !strchr(s->path + n + 1, '/')) {
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&shim.lock);
	return found;
}

long dir_rmdir_check(int dirfd, const char *path)
{
	char abs[PATH_MAX];
	struct stat st;
	int r = view_at(dirfd, path, abs, sizeof(abs));
	if (r != 0)
		return r == 1 ? -ENOTDIR : r;
	if (shim.policy->nrules == 0 || shim_abspath(dirfd, path, abs, sizeof(abs)) < 0 ||
	    !stg_policy_may_contain(shim.policy, abs))
		return SHIM_PASS;
	if (REAL(lstat)(abs, &st) < 0 || !S_ISDIR(st.st_mode))
		return SHIM_PASS; /* the real call says what it is */
	/* its captured files live in the cache: the kernel finds it empty */
	struct listing *l = listing_for(abs);
	bool full = l && l->n > 0;
	if (l)
		listing_free(l);
	return full || writing_in(abs) ? -ENOTEMPTY : SHIM_PASS;
}

SHIM_EXPORT int rmdir(const char *path)
{
	SHIM_HANDLE(dir_rmdir_check(AT_FDCWD, path));
	return REAL(rmdir)(path);
}

static long not_a_dir(const char *path)
{
	char abs[PATH_MAX];
	int r = view_at(AT_FDCWD, path, abs, sizeof(abs));
	return r == 1 ? -ENOTDIR : r == 0 ? SHIM_PASS : r;
}

SHIM_EXPORT int chdir(const char *path)
{
	SHIM_HANDLE(not_a_dir(path));
	return REAL(chdir)(path);
}

/* Gives a freshly opened stream of directory abs its captured names. */
static void attach_listing(DIR *d, const char *abs)
{
	struct listing *l = listing_for(abs);
	if (!l)
		return;
	l->dir = d;
	pthread_mutex_lock(&shim.lock);
	l->link = listings;
	listings = l;
	pthread_mutex_unlock(&shim.lock);
}

SHIM_EXPORT DIR *opendir(const char *path)
{
	DIR *d = REAL(opendir)(path);
	int saved;
	if (!shim_enter(&saved))
		return d;
	char abs[PATH_MAX];
	struct stat st;
	if (d) {
		if (shim.policy->nrules > 0 && shim_abspath(AT_FDCWD, path, abs, sizeof(abs)) == 0)
			attach_listing(d, abs);
		shim_leave(0, saved);
		return d;
	}
	/* A captured file is not a directory. */
	int err = errno;
	if (err == ENOENT && shim_resolve(AT_FDCWD, path, abs, sizeof(abs)) && view_stat(abs, &st) == 1)
		err = ENOTDIR;
	shim_leave(-err, saved);
	return NULL;
}

SHIM_EXPORT DIR *fdopendir(int fd)
{
	DIR *d = REAL(fdopendir)(fd);
	int saved;
	if (!d || !shim_enter(&saved))
		return d;
	char link[64], abs[PATH_MAX];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = shim.policy->nrules > 0 ? readlink(link, abs, sizeof(abs) - 1) : -1;
	if (n > 0 && abs[0] == '/') {
		abs[n] = '\0';
		attach_listing(d, abs);
	}
	shim_leave(0, saved);
	return d;
}

static struct listing *find(DIR *d)
{
	for (struct listing *l = listings; l; l = l->link)
		if (l->dir == d)
			return l;
	return NULL;
}

static bool in(char **arr, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(arr[i], name) == 0)
			return true;
	return false;
}

/* Real entries first (minus those a captured file replaces or that were
 * deleted), then the captured names. */
static struct dirent64 *next_entry(DIR *d, struct dirent64 *(*real)(DIR *))
{
	struct listing *l;
	pthread_mutex_lock(&shim.lock);
	l = find(d);
	pthread_mutex_unlock(&shim.lock);
	if (!l)
		return real(d);
	int saved = errno;
	struct dirent64 *e;
	while (!l->real_done && (e = real(d))) {
		if (!in(l->names, l->n, e->d_name) && !in(l->hidden, l->nhidden, e->d_name))
			return e;
	}
	if (errno != saved)
		return NULL; /* a real error */
	if (l->next >= l->n)
		return NULL;
	const char *name = l->names[l->next++];
	memset(&l->ent, 0, sizeof(l->ent));
	l->ent.d_ino = 1;
	l->ent.d_type = DT_REG;
	l->ent.d_reclen = sizeof(l->ent);
	l->ent.d_off = (off64_t)l->next;
	snprintf(l->ent.d_name, sizeof(l->ent.d_name), "%s", name);
	return &l->ent;
}

/* On Linux/glibc 64-bit, struct dirent and struct dirent64 have one layout. */
SHIM_EXPORT struct dirent *readdir(DIR *d)
{
	if (!listings)
		return REAL(readdir)(d);
	return (struct dirent *)next_entry(d, (struct dirent64 * (*)(DIR *)) REAL(readdir));
}

SHIM_EXPORT struct dirent64 *readdir64(DIR *d)
{
	if (!listings)
		return REAL(readdir64)(d);
	return next_entry(d, REAL(readdir64));
}

/* The reentrant forms read through the same stream. */
SHIM_EXPORT int readdir64_r(DIR *d, struct dirent64 *entry, struct dirent64 **ret)
{
	if (!listings)
		return REAL(readdir64_r)(d, entry, ret);
	int saved = errno;
	errno = 0;
	struct dirent64 *e = readdir64(d);
	int err = errno;
	errno = saved;
	if (!e) {
		*ret = NULL;
		return err;
	}
	memcpy(entry, e, offsetof(struct dirent64, d_name) + strlen(e->d_name) + 1);
	*ret = entry;
	return 0;
}

SHIM_EXPORT int readdir_r(DIR *d, struct dirent *entry, struct dirent **ret)
{
	if (!listings)
		return REAL(readdir_r)(d, entry, ret);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	return readdir64_r(d, (struct dirent64 *)entry, (struct dirent64 **)ret);
#pragma GCC diagnostic pop
}

/* A position among the captured names, which come after every real entry,
 * is told as -2 - next: real positions are offsets (>= 0) and -1 is an
 * error. */
SHIM_EXPORT long telldir(DIR *d)
{
	long pos = REAL(telldir)(d);
	if (!listings)
		return pos;
	pthread_mutex_lock(&shim.lock);
	struct listing *l = find(d);
	if (l && (l->real_done || l->next > 0))
		pos = -2 - (long)l->next;
	pthread_mutex_unlock(&shim.lock);
	return pos;
}

SHIM_EXPORT void seekdir(DIR *d, long pos)
{
	struct listing *l = NULL;
	if (listings) {
		pthread_mutex_lock(&shim.lock);
		l = find(d);
		if (l) {
			l->real_done = pos < -1;
			l->next = pos < -1 ? (size_t)(-2 - pos) : 0;
		}
		pthread_mutex_unlock(&shim.lock);
	}
	if (!l || pos >= 0)
		REAL(seekdir)(d, pos);
}

SHIM_EXPORT void rewinddir(DIR *d)
{
	REAL(rewinddir)(d);
	pthread_mutex_lock(&shim.lock);
	struct listing *l = find(d);
	if (l) {
		l->next = 0;
		l->real_done = false;
	}
	pthread_mutex_unlock(&shim.lock);
}

SHIM_EXPORT int closedir(DIR *d)
{
	if (listings) {
		pthread_mutex_lock(&shim.lock);
		for (struct listing **p = &listings; *p; p = &(*p)->link) {
			if ((*p)->dir == d) {
				struct listing *l = *p;
				*p = l->link;
				listing_free(l);
				break;
			}
		}
		pthread_mutex_unlock(&shim.lock);
	}
	return REAL(closedir)(d);
}
