/* SPDX-License-Identifier: MIT */
/* What captured paths look like to the application: stat of committed files,
 * and of files this process is writing. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "internal.h"
#include "real.h"

int view_lookup(const char *abspath, struct stat *st)
{
	if (background_wait(abspath) < 0)
		return -EIO;
	pthread_mutex_lock(&shim.lock);
	struct session *s = session_find_path(abspath);
	int fd = s ? session_any_fd(s) : -1;
	if (s && fd >= 0 && real_fstat(fd, st) == 0) {
		session_fix_stat(s, st);
		pthread_mutex_unlock(&shim.lock);
		return 1;
	}
	pthread_mutex_unlock(&shim.lock);
	return view_stat(abspath, st);
}

int view_stat(const char *abspath, struct stat *st)
{
	struct stg_file_state state;
	int r = stg_catalog_state(shim.cache, abspath, &state);
	/* A damaged newest version still names a file (what it was before),
	 * which an application may replace whole; its reads fail. */
	if (r < 0 && !state.damaged)
		return r == -EBADMSG ? -EIO : r;
	/* Written by another process of the node right now: a file system
	 * shows what it has written so far. */
	uint64_t live_size;
	struct timespec live_mtime;
	uint32_t live_mode;
	bool live = share_stat_live(abspath, &live_size, &live_mtime, &live_mode);
	if (live) {
		state.exists = true;
		state.deleted = false;
		state.size = live_size;
		if (live_mode)
			state.mode = live_mode;
		else if (!state.mode)
			state.mode = 0644;
		/* (a shadow parked at the epoch is unchanged since its commit) */
		if (live_mtime.tv_sec != 1)
			state.mtime_ns = (int64_t)live_mtime.tv_sec * 1000000000 + live_mtime.tv_nsec;
		state.ino = stg_catalog_ino(abspath);
	}
	if (!state.exists)
		return 0;
	if (state.deleted)
		return -ENOENT;
	struct stat cache_st;
	memset(st, 0, sizeof(*st));
	if (real_fstat(shim.cache->dirfd, &cache_st) == 0)
		st->st_dev = cache_st.st_dev;
	st->st_ino = (ino_t)state.ino;
	st->st_mode = S_IFREG | state.mode;
	st->st_nlink = 1;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_size = (off_t)state.size;
	st->st_blksize = 4096;
	st->st_blocks = (blkcnt_t)((state.size + 511) / 512);
	st->st_mtim.tv_sec = state.mtime_ns / 1000000000;
	st->st_mtim.tv_nsec = state.mtime_ns % 1000000000;
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
	return 1;
}

bool view_under_file(const char *abspath)
{
	char dir[PATH_MAX];
	struct stat st;
	snprintf(dir, sizeof(dir), "%s", abspath);
	for (char *slash; (slash = strrchr(dir, '/')) && slash != dir;) {
		*slash = '\0';
		if (shim_match(dir) && view_lookup(dir, &st) == 1)
			return true;
	}
	return false;
}

int view_at(int dirfd, const char *path, char *abspath, size_t len)
{
	struct stat st;
	if (!shim_resolve(dirfd, path, abspath, len))
		return 0;
	int r = view_lookup(abspath, &st);
	if ((r == 1 && shim_dir_suffix(path)) || (r <= 0 && view_under_file(abspath)))
		return -ENOTDIR;
	/* deleted: nothing is left on the real file system either */
	return r == -ENOENT ? 0 : r;
}
