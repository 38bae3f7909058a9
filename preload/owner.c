/* SPDX-License-Identifier: MIT */
/* chown and fchown. Versions keep no owner: a captured file belongs to whoever
 * runs the application, as stat shows. Giving it that owner again is a no-op
 * (tar, cp -p and shutil do); any other owner is refused, never dropped
 * silently. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "hook.h"
#include "log.h"

/* name: the captured file, st: what stat shows of it. */
static long change_owner(const char *name, const struct stat *st, uid_t uid, gid_t gid)
{
	if ((uid == (uid_t)-1 || uid == st->st_uid) && (gid == (gid_t)-1 || gid == st->st_gid))
		return 0;
	shim_log(STG_LOG_ERROR, "'%s': a captured file keeps no owner: chown to %d:%d refused",
		 name, (int)uid, (int)gid);
	return -EPERM;
}

static long chown_handler(int dirfd, const char *path, uid_t uid, gid_t gid)
{
	char abs[PATH_MAX];
	struct stat st;
	if (!shim_resolve(dirfd, path, abs, sizeof(abs)))
		return SHIM_PASS;
	int r = view_lookup(abs, &st);
	if (r <= 0)
		return r == 0 || r == -ENOENT ? SHIM_PASS : r;
	return change_owner(abs, &st, uid, gid);
}

/* The shadow's owner is the one fstat() shows (session_fix_stat). */
static long fchown_handler(int fd, uid_t uid, gid_t gid)
{
	struct stat st;
	struct session *s = fdtable_get(fd);
	if (!s)
		return SHIM_PASS;
	if (REAL(fstat)(fd, &st) < 0)
		return -errno;
	return change_owner(s->path, &st, uid, gid);
}

SHIM_EXPORT int chown(const char *path, uid_t uid, gid_t gid)
{
	SHIM_HANDLE(chown_handler(AT_FDCWD, path, uid, gid));
	return REAL(chown)(path, uid, gid);
}

/* A captured file is never a symbolic link: lchown is chown. */
SHIM_EXPORT int lchown(const char *path, uid_t uid, gid_t gid)
{
	SHIM_HANDLE(chown_handler(AT_FDCWD, path, uid, gid));
	return REAL(lchown)(path, uid, gid);
}

SHIM_EXPORT int fchownat(int dirfd, const char *path, uid_t uid, gid_t gid, int flags)
{
	/* AT_EMPTY_PATH with "": the descriptor itself, as fchown */
	if (path[0] || !(flags & AT_EMPTY_PATH))
		SHIM_HANDLE(chown_handler(dirfd, path, uid, gid));
	return REAL(fchownat)(dirfd, path, uid, gid, flags);
}

SHIM_EXPORT int fchown(int fd, uid_t uid, gid_t gid)
{
	SHIM_HANDLE(fchown_handler(fd, uid, gid));
	return REAL(fchown)(fd, uid, gid);
}
