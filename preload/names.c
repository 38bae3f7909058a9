/* SPDX-License-Identifier: MIT */
/* Calls on names: rename (the write-then-rename idiom), unlink, truncate. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builder.h"
#include "catalog.h"
#include "gc.h"
#include "internal.h"
#include "log.h"
#include "materialize.h"
#include "real.h"
#include "util.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#define RENAME_EXCHANGE (1 << 1)
#endif

#define ENSURE(fn)                   \
	do {                         \
		if (!real_##fn)      \
			shim_real_init(); \
	} while (0)

static bool session_open_for(const char *abs)
{
	pthread_mutex_lock(&shim.lock);
	bool open = session_find_path(abs) != NULL;
	pthread_mutex_unlock(&shim.lock);
	return open;
}

/* Visible in the catalog, or being written by this process. */
static bool captured_exists(const char *abs)
{
	struct stg_file_state st;
	if (stg_catalog_state(shim.cache, abs, &st) == 0 && st.exists && !st.deleted)
		return true;
	return session_open_for(abs);
}

static bool sync_for(const struct stg_path_rule *rule)
{
	return rule->durability != STG_DURABILITY_ASYNC;
}

static int export_pinned(const char *from, const char *to);

/* Writes the newest version of a captured file to a real path, atomically. */
static int export_latest(const char *from, const char *to)
{
	int pin = stg_gc_pin(shim.cache);
	int r = export_pinned(from, to);
	stg_gc_unpin(pin);
	return r;
}

static int export_pinned(const char *from, const char *to)
{
	struct stg_catalog_file f;
	int r = stg_catalog_lock(shim.cache, from, false, &f);
	if (r < 0)
		return r;
	uint64_t *v = NULL;
	size_t n = 0;
	struct stg_manifest m = {0};
	r = stg_catalog_versions(f.dirfd, &v, &n);
	if (r == 0 && n == 0)
		r = -ENOENT;
	if (r == 0)
		r = stg_catalog_read(f.dirfd, v[n - 1], &m);
	stg_catalog_unlock(&f);
	free(v);
	if (r < 0)
		return r == -EBADMSG ? -EIO : r;
	char tmp[PATH_MAX + 32];
	snprintf(tmp, sizeof(tmp), "%s.stagehand.%d", to, (int)getpid());
	int fd = real_open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, m.mode);
	if (fd < 0) {
		r = -errno;
		goto out_done;
	}
	r = stg_materialize(shim.cache, &m, fd, NULL, NULL, NULL);
	if (r == 0 && real_fsync(fd) < 0)
		r = -errno;
	real_close(fd);
	if (r == 0 && real_rename(tmp, to) < 0)
		r = -errno;
	if (r < 0)
		real_unlink(tmp);
out_done:
	stg_manifest_done(&m);
	return r == -EBADMSG ? -EIO : r;
}

/* Stages a real file as the next version of a captured path. */
static int import_real(const char *realpath, const char *abs, const struct stg_path_rule *rule)
{
	int fd = real_open(realpath, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int64_t v = -errno;
	if (real_fstat(fd, &st) == 0)
		v = stg_commit_fd(shim.cache, abs, rule, fd, (uint64_t)st.st_size,
				  st.st_mode & 07777,
				  (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
				  false, 0, NULL);
	real_close(fd);
	if (v < 0)
		return (int)v;
	return replicate_after_commit(abs, rule, v);
}

static int mark_deleted(const char *abs)
{
	struct stg_catalog_file f;
	int r = stg_catalog_lock(shim.cache, abs, false, &f);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	r = stg_catalog_set_deleted(f.dirfd, true);
	stg_catalog_unlock(&f);
	return r;
}

struct move_ctx {
	const char *from, *to;
	size_t fromlen;
	char (*paths)[PATH_MAX];
	size_t n, cap;
};

static int collect_under(void *arg, const char *path, int filedirfd)
{
	(void)filedirfd;
	struct move_ctx *c = arg;
	if (strncmp(path, c->from, c->fromlen) != 0 || path[c->fromlen] != '/')
		return 0;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		void *p = realloc(c->paths, cap * sizeof(*c->paths));
		if (!p)
			return -ENOMEM;
		c->paths = p;
		c->cap = cap;
	}
	snprintf(c->paths[c->n++], PATH_MAX, "%s", path);
	return 0;
}

/* After a real directory rename: its captured files move along. */
static int move_subtree(const char *from, const char *to)
{
	struct move_ctx c = {.from = from, .to = to, .fromlen = strlen(from)};
	int r = stg_catalog_foreach(shim.cache, collect_under, &c);
	for (size_t i = 0; r == 0 && i < c.n; i++) {
		char np[PATH_MAX];
		int n = snprintf(np, sizeof(np), "%s%s", to, c.paths[i] + c.fromlen);
		if (n < 0 || (size_t)n >= sizeof(np)) {
			r = -ENAMETOOLONG;
			break;
		}
		const struct stg_path_rule *rule = shim_match(np);
		if (!rule)
			continue; /* moved out of the captured area: it stays restorable */
		r = stg_catalog_rename(shim.cache, c.paths[i], np, sync_for(rule), rule->keep);
		if (r == -ENOENT)
			r = 0; /* deleted ones stay behind */
		share_forget(c.paths[i], np);
	}
	free(c.paths);
	session_renamed(from, to);
	return r;
}

static int rename_common(int od, const char *op, int nd, const char *np, unsigned flags)
{
	ENSURE(renameat2);
	if (shim_busy)
		goto real;
	shim_busy++;
	int saved = errno;
	char oabs[PATH_MAX], nabs[PATH_MAX];
	const struct stg_path_rule *ro = shim_resolve(od, op, oabs, sizeof(oabs));
	const struct stg_path_rule *rn = shim_resolve(nd, np, nabs, sizeof(nabs));
	if (ro)
		background_wait(oabs);
	if (rn)
		background_wait(nabs);
	int r = 1; /* 1: let the real rename do it */
	struct stat st;
	if (!ro && !rn) {
		r = 1;
	} else if (ro && captured_exists(oabs)) {
		if (flags & RENAME_EXCHANGE) {
			r = -EINVAL; /* not supported for captured files */
		} else if ((flags & RENAME_NOREPLACE) &&
			   ((rn && captured_exists(nabs)) || real_lstat(nabs, &st) == 0)) {
			r = -EEXIST;
		} else if (rn) {
			struct stg_file_state s;
			r = 0;
			if (stg_catalog_state(shim.cache, oabs, &s) == 0 && s.exists && !s.deleted)
				r = stg_catalog_rename(shim.cache, oabs, nabs, sync_for(rn), rn->keep);
			if (r == 0) {
				/* Whatever was open under the new name is now an
				 * unlinked file: its close must not publish over this.
				 * What is open under the old one goes on as the new. */
				session_unlinked(nabs);
				session_renamed(oabs, nabs);
				share_forget(nabs, NULL);
				share_forget(oabs, nabs);
				if (real_unlink(oabs) < 0 && errno != ENOENT)
					stg_debug("rename: leaving real '%s'", oabs);
			}
		} else if (session_open_for(oabs)) {
			r = -EXDEV; /* still being written: the caller copies instead */
		} else {
			r = export_latest(oabs, nabs);
			if (r == 0)
				r = mark_deleted(oabs);
			if (r == 0)
				real_unlink(oabs);
		}
	} else if (real_lstat(ro ? oabs : op, &st) == 0 && S_ISDIR(st.st_mode)) {
		r = real_renameat2 ? real_renameat2(od, op, nd, np, flags) : real_renameat(od, op, nd, np);
		r = r < 0 ? -errno : 0;
		char o2[PATH_MAX], n2[PATH_MAX];
		if (r == 0 && shim_abspath(od, op, o2, sizeof(o2)) == 0 &&
		    shim_abspath(nd, np, n2, sizeof(n2)) == 0)
			move_subtree(o2, n2);
	} else if (rn && real_fstatat(od, op, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
		   !(flags & RENAME_EXCHANGE)) {
		/* A plain file moved into the captured area becomes a version. */
		char src[PATH_MAX];
		r = shim_abspath(od, op, src, sizeof(src));
		if (r == 0 && (flags & RENAME_NOREPLACE) && captured_exists(nabs))
			r = -EEXIST;
		if (r == 0)
			r = import_real(src, nabs, rn);
		if (r == 0 && real_unlink(src) < 0)
			r = -errno;
	}
	shim_busy--;
	if (r == 1)
		goto real;
	if (r < 0) {
		errno = -r;
		return -1;
	}
	errno = saved;
	return 0;
real:
	if (flags || !real_renameat)
		return real_renameat2 ? real_renameat2(od, op, nd, np, flags) : (errno = ENOSYS, -1);
	return real_renameat(od, op, nd, np);
}

SHIM_EXPORT int rename(const char *oldpath, const char *newpath)
{
	return rename_common(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

SHIM_EXPORT int renameat(int od, const char *op, int nd, const char *np)
{
	return rename_common(od, op, nd, np, 0);
}

SHIM_EXPORT int renameat2(int od, const char *op, int nd, const char *np, unsigned flags)
{
	return rename_common(od, op, nd, np, flags);
}

/* 1 when the real call should run, else 0 or -errno. */
static int unlink_captured(int dirfd, const char *path)
{
	char abs[PATH_MAX];
	if (!shim_resolve(dirfd, path, abs, sizeof(abs)))
		return 1;
	background_wait(abs);
	if (!captured_exists(abs))
		return 1;
	int r = mark_deleted(abs);
	session_unlinked(abs);
	share_forget(abs, NULL); /* its writers in other processes, too */
	if (r == 0 && real_unlink(abs) < 0 && errno != ENOENT)
		r = -errno;
	return r;
}

static int unlink_common(int dirfd, const char *path, int flags, int (*real)(void))
{
	(void)real;
	if (shim_busy || (flags & AT_REMOVEDIR))
		return -2;
	shim_busy++;
	int saved = errno;
	int r = unlink_captured(dirfd, path);
	shim_busy--;
	if (r == 1)
		return -2;
	if (r < 0) {
		errno = -r;
		return -1;
	}
	errno = saved;
	return 0;
}

SHIM_EXPORT int unlink(const char *path)
{
	ENSURE(unlink);
	int r = unlink_common(AT_FDCWD, path, 0, NULL);
	return r == -2 ? real_unlink(path) : r;
}

SHIM_EXPORT int unlinkat(int dirfd, const char *path, int flags)
{
	ENSURE(unlinkat);
	int r = unlink_common(dirfd, path, flags, NULL);
	return r == -2 ? real_unlinkat(dirfd, path, flags) : r;
}

SHIM_EXPORT int remove(const char *path)
{
	ENSURE(remove);
	int r = unlink_common(AT_FDCWD, path, 0, NULL);
	return r == -2 ? real_remove(path) : r;
}

static int truncate_common(const char *path, off_t len)
{
	ENSURE(truncate);
	if (shim_busy)
		return real_truncate(path, len);
	shim_busy++;
	int saved = errno;
	char abs[PATH_MAX];
	const struct stg_path_rule *rule = shim_resolve(AT_FDCWD, path, abs, sizeof(abs));
	int r = 1;
	if (rule && captured_exists(abs)) {
		int fd = session_open(abs, rule, O_WRONLY, 0, false);
		if (fd == SESSION_PASS) {
			r = 1;
		} else if (fd < 0) {
			r = fd;
		} else {
			r = ftruncate(fd, len) < 0 ? -errno : 0;
			int cr = session_release_fd(fd);
			real_close(fd);
			if (r == 0)
				r = cr;
		}
	}
	shim_busy--;
	if (r == 1)
		return real_truncate(path, len);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	errno = saved;
	return 0;
}

SHIM_EXPORT int truncate(const char *path, off_t len)
{
	return truncate_common(path, len);
}

SHIM_EXPORT int truncate64(const char *path, off_t len)
{
	return truncate_common(path, len);
}
