/* SPDX-License-Identifier: MIT */
/* What captured paths look like to the application: stat of committed files. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "internal.h"
#include "real.h"

int view_stat(const char *abspath, struct stat *st)
{
	struct stg_file_state state;
	int r = stg_catalog_state(shim.cache, abspath, &state);
	if (r < 0)
		return r == -EBADMSG ? -EIO : r;
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
