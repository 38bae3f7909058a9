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
#include "hook.h"
#include "log.h"
#include "materialize.h"
#include "util.h"
#include "version.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#define RENAME_EXCHANGE (1 << 1)
#endif

static bool session_open_for(const char *abs)
{
	pthread_mutex_lock(&shim.lock);
	bool open = session_find_path(abs) != NULL;
	pthread_mutex_unlock(&shim.lock);
	return open;
}

/* Visible in the catalog (its newest version damaged too, as stat shows
 * it), or being written by this process. */
static bool captured_exists(const char *abs)
{
	struct stg_file_state st;
	int r = stg_catalog_state(shim.cache, abs, &st);
	if ((r == 0 || st.damaged) && st.exists && !st.deleted)
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
	struct stg_manifest m = {0};
	r = stg_catalog_read_newest(f.dirfd, &m, NULL);
	stg_catalog_unlock(&f);
	if (r < 0)
		return r == -EBADMSG ? -EIO : r;
	char tmp[PATH_MAX + 32];
	snprintf(tmp, sizeof(tmp), "%s.stagehand.%d", to, (int)getpid());
	int fd = REAL(open)(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, m.mode);
	if (fd < 0) {
		r = -errno;
		goto out_done;
	}
	r = stg_materialize(shim.cache, &m, fd, NULL, NULL, NULL);
	if (r == 0 && REAL(fsync)(fd) < 0)
		r = -errno;
	REAL(close)(fd);
	if (r == 0 && REAL(rename)(tmp, to) < 0)
		r = -errno;
	if (r < 0)
		REAL(unlink)(tmp);
out_done:
	stg_manifest_done(&m);
	return r == -EBADMSG ? -EIO : r;
}

/* Stages a real file as the next version of a captured path. */
static int import_real(const char *realpath, const char *abs, const struct stg_path_rule *rule)
{
	int fd = REAL(open)(realpath, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int64_t v = -errno;
	if (REAL(fstat)(fd, &st) == 0)
		v = stg_commit_fd(shim.cache, abs, rule, fd, (uint64_t)st.st_size,
				  st.st_mode & 07777,
				  (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
				  false, 0, NULL, 0);
	REAL(close)(fd);
	if (v < 0)
		return (int)v;
	return replicate_after_commit(abs, rule, v);
}

/* The application deleted abs: its versions so far stay restorable for
 * keep_deleted, and the servers are told. */
static int mark_deleted(const char *abs)
{
	const struct stg_path_rule *rule = shim_match(abs);
	struct stg_catalog_file f;
	int r = stg_catalog_lock(shim.cache, abs, false, &f);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	uint64_t newest = stg_catalog_newest_known(f.dirfd);
	struct stg_tombstone t = {.upto = newest ? newest : 1, .at_ns = stg_now_ns(),
				  .retain_s = rule ? rule->keep_deleted_s : STG_KEEP_DELETED_DEFAULT};
	r = stg_catalog_delete(&f, &t, !rule || sync_for(rule));
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
	if (STG_GROW(c->paths, c->cap, c->n + 1) < 0)
		return -ENOMEM;
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
		struct stg_catalog_moved mv = {0};
		r = stg_catalog_rename(shim.cache, c.paths[i], np, sync_for(rule), rule->keep, &mv);
		if (r == -ENOENT)
			r = 0; /* deleted ones stay behind */
		else if (r == 0)
			session_reminted(c.paths[i], &mv);
		share_moved(c.paths[i], np, &mv);
	}
	free(c.paths);
	session_renamed(from, to);
	return r;
}

/* SHIM_PASS when the real rename should do it, else 0 or -errno. */
static long rename_handler(int od, const char *op, int nd, const char *np, unsigned flags)
{
	char oabs[PATH_MAX], nabs[PATH_MAX];
	const struct stg_path_rule *ro = shim_resolve(od, op, oabs, sizeof(oabs));
	const struct stg_path_rule *rn = shim_resolve(nd, np, nabs, sizeof(nabs));
	if ((ro && (background_wait(oabs) < 0 || background_settle_below(oabs) < 0)) ||
	    (rn && background_wait(nabs) < 0))
		return -EIO;
	int r = 1; /* 1: let the real rename do it */
	struct stat st;
	if (!ro && !rn) {
		r = 1;
	} else if (ro && captured_exists(oabs)) {
		if (flags & RENAME_EXCHANGE) {
			r = -EINVAL; /* not supported for captured files */
		} else if ((flags & RENAME_NOREPLACE) &&
			   ((rn && captured_exists(nabs)) || REAL(lstat)(nabs, &st) == 0)) {
			r = -EEXIST;
		} else if (rn) {
			struct stg_file_state s;
			struct stg_catalog_moved mv = {0};
			r = stg_catalog_state(shim.cache, oabs, &s);
			if (r < 0 && s.damaged)
				shim_log(STG_LOG_ERROR, "version %llu of '%s' is damaged in the cache: "
					 "it cannot be renamed; an open with O_TRUNC writes a new "
					 "version", (unsigned long long)stg_version_seq(s.damaged), oabs);
			if (r < 0)
				r = r == -EBADMSG ? -EIO : r;
			else if (s.exists && !s.deleted)
				r = stg_catalog_rename(shim.cache, oabs, nabs, sync_for(rn), rn->keep,
						       &mv);
			if (r == 0) {
				/* Whatever was open under the new name is now an
				 * unlinked file: its close must not publish over this.
				 * What is open under the old one goes on as the new,
				 * closing the version it synced under its new id. */
				session_unlinked(nabs);
				session_reminted(oabs, &mv);
				session_renamed(oabs, nabs);
				share_moved(oabs, nabs, &mv);
				if (REAL(unlink)(oabs) < 0 && errno != ENOENT)
					stg_debug("rename: leaving real '%s'", oabs);
			}
		} else if (session_open_for(oabs)) {
			r = -EXDEV; /* still being written: the caller copies instead */
		} else {
			r = export_latest(oabs, nabs);
			if (r == 0)
				r = mark_deleted(oabs);
			if (r == 0)
				REAL(unlink)(oabs);
		}
	} else if (REAL(lstat)(ro ? oabs : op, &st) == 0 && S_ISDIR(st.st_mode)) {
		r = REAL(renameat2) ? REAL(renameat2)(od, op, nd, np, flags) : REAL(renameat)(od, op, nd, np);
		r = r < 0 ? -errno : 0;
		char o2[PATH_MAX], n2[PATH_MAX];
		if (r == 0 && shim_abspath(od, op, o2, sizeof(o2)) == 0 &&
		    shim_abspath(nd, np, n2, sizeof(n2)) == 0)
			move_subtree(o2, n2);
	} else if (rn && REAL(fstatat)(od, op, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
		   !(flags & RENAME_EXCHANGE)) {
		/* A plain file moved into the captured area becomes a version. */
		char src[PATH_MAX];
		r = shim_abspath(od, op, src, sizeof(src));
		if (r == 0 && (flags & RENAME_NOREPLACE) && captured_exists(nabs))
			r = -EEXIST;
		if (r == 0)
			r = import_real(src, nabs, rn);
		if (r == 0 && REAL(unlink)(src) < 0)
			r = -errno;
	}
	return r == 1 ? SHIM_PASS : r;
}

static int rename_common(int od, const char *op, int nd, const char *np, unsigned flags)
{
	SHIM_HANDLE(rename_handler(od, op, nd, np, flags));
	if (flags || !REAL(renameat))
		return REAL(renameat2) ? REAL(renameat2)(od, op, nd, np, flags) : (errno = ENOSYS, -1);
	return REAL(renameat)(od, op, nd, np);
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

/* SHIM_PASS when the real call should run, else 0 or -errno. */
static long unlink_handler(int dirfd, const char *path)
{
	char abs[PATH_MAX];
	if (!shim_resolve(dirfd, path, abs, sizeof(abs)))
		return SHIM_PASS;
	if (background_wait(abs) < 0)
		return -EIO;
	if (!captured_exists(abs))
		return SHIM_PASS;
	int r = mark_deleted(abs);
	session_unlinked(abs);
	share_forget(abs, NULL, NULL); /* its writers in other processes, too */
	if (r == 0 && REAL(unlink)(abs) < 0 && errno != ENOENT)
		r = -errno;
	return r;
}

/* What this process has written to abs so far becomes its newest version
 * (as fsync would make it), so that a link takes it. */
static int commit_written(const char *abs)
{
	pthread_mutex_lock(&shim.lock);
	struct session *s = session_find_path(abs);
	int fd = s && !s->readonly ? session_any_fd(s) : -1;
	pthread_mutex_unlock(&shim.lock);
	return fd >= 0 ? session_commit(s, fd, false) : 0;
}

/* link() onto or from a captured path. A captured file's second name gets a
 * copy of its content now, its newest version: writes made later through
 * one name do not show through the other, as they would with a hard link
 * (docs/CAPTURE.md). A captured file cannot get a name outside the captured
 * area (EXDEV: callers copy instead); a real file linked into it becomes a
 * version there, the real file staying. */
static long link_handler(int od, const char *op, int nd, const char *np, bool follow)
{
	char oabs[PATH_MAX], nabs[PATH_MAX];
	const struct stg_path_rule *ro = shim_resolve(od, op, oabs, sizeof(oabs));
	const struct stg_path_rule *rn = shim_resolve(nd, np, nabs, sizeof(nabs));
	if (!ro && !rn)
		return SHIM_PASS;
	if ((ro && background_wait(oabs) < 0) || (rn && background_wait(nabs) < 0))
		return -EIO;
	struct stat st;
	if (ro && captured_exists(oabs)) {
		if (!rn)
			return -EXDEV;
		if (captured_exists(nabs) || REAL(lstat)(nabs, &st) == 0)
			return -EEXIST;
		int r = commit_written(oabs);
		if (r == 0)
			r = stg_catalog_link(shim.cache, oabs, nabs, sync_for(rn), rn->keep);
		if (r == -EOPNOTSUPP)
			shim_log(STG_LOG_ERROR, "'%s' is shared = job: it cannot be linked", oabs);
		if (r == 0)
			r = replicate_after_commit(nabs, rn, 0);
		return r;
	}
	char src[PATH_MAX];
	if (!rn || REAL(fstatat)(od, op, &st, follow ? 0 : AT_SYMLINK_NOFOLLOW) < 0 ||
	    !S_ISREG(st.st_mode) || shim_abspath(od, op, src, sizeof(src)) < 0)
		return SHIM_PASS;
	if (captured_exists(nabs) || REAL(lstat)(nabs, &st) == 0)
		return -EEXIST;
	return import_real(src, nabs, rn);
}

/* linkat() of a descriptor: the captured file it is open on (its shadow
 * must never get a real name), or any other regular file, an O_TMPFILE one
 * say, which a captured name makes a version as link() does a real file. */
static long link_fd_handler(int fd, int nd, const char *np)
{
	char path[PATH_MAX] = "";
	pthread_mutex_lock(&shim.lock);
	struct session *s = fdtable_get(fd);
	bool unlinked = s && s->unlinked;
	if (s)
		snprintf(path, sizeof(path), "%s", s->path);
	pthread_mutex_unlock(&shim.lock);
	if (s)
		return unlinked ? -ENOENT : link_handler(AT_FDCWD, path, nd, np, false);
	char nabs[PATH_MAX];
	const struct stg_path_rule *rn = shim_resolve(nd, np, nabs, sizeof(nabs));
	struct stat st;
	if (!rn || REAL(fstat)(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return SHIM_PASS;
	if (background_wait(nabs) < 0)
		return -EIO;
	if (captured_exists(nabs) || REAL(lstat)(nabs, &st) == 0)
		return -EEXIST;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return import_real(path, nabs, rn);
}

/* The descriptor a /proc/self/fd/N (or /proc/<our pid>/fd/N) name stands
 * for, or -1. */
static int proc_fd(int dirfd, const char *path)
{
	char abs[PATH_MAX], self[32];
	if (shim_abspath(dirfd, path, abs, sizeof(abs)) < 0)
		return -1;
	int n = snprintf(self, sizeof(self), "/proc/%d/fd/", (int)getpid());
	const char *p = NULL;
	if (strncmp(abs, "/proc/self/fd/", 14) == 0)
		p = abs + 14;
	else if (strncmp(abs, self, (size_t)n) == 0)
		p = abs + n;
	if (!p || *p < '0' || *p > '9')
		return -1;
	char *end;
	long fd = strtol(p, &end, 10);
	return *end || fd > INT_MAX ? -1 : (int)fd;
}

static long linkat_handler(int od, const char *op, int nd, const char *np, int flags)
{
	if ((flags & AT_EMPTY_PATH) && op && !op[0])
		return link_fd_handler(od, nd, np);
	int fd = flags & AT_SYMLINK_FOLLOW ? proc_fd(od, op) : -1;
	if (fd >= 0)
		return link_fd_handler(fd, nd, np);
	return link_handler(od, op, nd, np, flags & AT_SYMLINK_FOLLOW);
}

SHIM_EXPORT int link(const char *oldpath, const char *newpath)
{
	SHIM_HANDLE(link_handler(AT_FDCWD, oldpath, AT_FDCWD, newpath, false));
	return REAL(link)(oldpath, newpath);
}

SHIM_EXPORT int linkat(int od, const char *op, int nd, const char *np, int flags)
{
	SHIM_HANDLE(linkat_handler(od, op, nd, np, flags));
	return REAL(linkat)(od, op, nd, np, flags);
}

SHIM_EXPORT int unlink(const char *path)
{
	SHIM_HANDLE(unlink_handler(AT_FDCWD, path));
	return REAL(unlink)(path);
}

SHIM_EXPORT int unlinkat(int dirfd, const char *path, int flags)
{
	if (!(flags & AT_REMOVEDIR))
		SHIM_HANDLE(unlink_handler(dirfd, path));
	else
		SHIM_HANDLE(dir_rmdir_check(dirfd, path));
	return REAL(unlinkat)(dirfd, path, flags);
}

/* remove() of a directory is an rmdir (inside libc). */
static long remove_handler(const char *path)
{
	long r = unlink_handler(AT_FDCWD, path);
	return r == SHIM_PASS ? dir_rmdir_check(AT_FDCWD, path) : r;
}

SHIM_EXPORT int remove(const char *path)
{
	SHIM_HANDLE(remove_handler(path));
	return REAL(remove)(path);
}

/* A captured file truncated by name: through a descriptor of its own. */
static long truncate_handler(const char *path, off_t len)
{
	char abs[PATH_MAX];
	const struct stg_path_rule *rule = shim_resolve(AT_FDCWD, path, abs, sizeof(abs));
	if (!rule)
		return SHIM_PASS;
	if (background_wait(abs) < 0)
		return -EIO;
	if (!captured_exists(abs))
		return SHIM_PASS;
	int fd = session_open(abs, rule, O_WRONLY, 0, false);
	if (fd == SESSION_PASS || fd < 0)
		return fd == SESSION_PASS ? SHIM_PASS : fd;
	int r = ftruncate(fd, len) < 0 ? -errno : 0;
	int cr = session_release_fd(fd);
	REAL(close)(fd);
	return r < 0 ? r : cr;
}

SHIM_EXPORT int truncate(const char *path, off_t len)
{
	SHIM_HANDLE(truncate_handler(path, len));
	return REAL(truncate)(path, len);
}

SHIM_EXPORT int truncate64(const char *path, off_t len)
{
	SHIM_HANDLE(truncate_handler(path, len));
	return REAL(truncate)(path, len);
}
