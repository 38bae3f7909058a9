/* SPDX-License-Identifier: MIT */
/* The node-local cache directory: layout, format check, space accounting. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash.h"
#include "util.h"

#define FORMAT_KIND "stagehand-cache"

static int open_subdir(int dirfd, const char *name)
{
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* A new cache is format 1: an older stagehand can use it until it holds
 * what that one cannot read (stg_cache_require_format). */
static int check_format(struct stg_cache *c)
{
	int r = stg_format_read(c->dirfd, FORMAT_KIND, &c->format);
	if (r == -ENOENT) {
		c->format = 1;
		return stg_format_write(c->dirfd, FORMAT_KIND, 1);
	}
	if (r < 0)
		return r;
	return c->format > STG_CACHE_FORMAT ? -EPROTONOSUPPORT : 0;
}

int stg_cache_require_format(struct stg_cache *c, unsigned format)
{
	if (c->format >= format)
		return 0;
	int r = stg_format_write(c->dirfd, FORMAT_KIND, format);
	if (r == 0)
		c->format = format;
	return r;
}

void stg_cache_count_packs(struct stg_cache *c, uint64_t *ret_packs, uint64_t *ret_bytes)
{
	*ret_packs = *ret_bytes = 0;
	DIR *d = stg_opendir_at(c->packs_fd, ".");
	if (!d)
		return;
	struct dirent *de;
	struct stat st;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && fstatat(c->packs_fd, de->d_name, &st, 0) == 0) {
			(*ret_packs)++;
			*ret_bytes += (uint64_t)st.st_size;
		}
	closedir(d);
}

/* Shadow files are anonymous files of tmp/ (O_TMPFILE), named with linkat()
 * when another process must find them. A file system without O_TMPFILE (9p,
 * NFS, Lustre, GPFS, most FUSE ones) cannot stand in: an unlinked named file
 * can never be linked again, and on 9p not even fstat'ed. Every file system
 * with O_TMPFILE links it too, so opening one is the whole probe. */
static int probe_tmpfile(int tmp_fd)
{
	int fd = openat(tmp_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL ? -EOPNOTSUPP
										: -errno;
	close(fd);
	return 0;
}

int stg_cache_owned(const struct stg_cache *c, char *why, size_t whylen)
{
	const struct {
		int fd;
		const char *sub;
	} dirs[] = {{c->dirfd, ""},         {c->files_fd, "/files"}, {c->packs_fd, "/packs"},
		    {c->index_fd, "/index"}, {c->tmp_fd, "/tmp"},     {c->queue_fd, "/queue"}};
	uid_t me = geteuid();
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		struct stat st;
		if (fstat(dirs[i].fd, &st) < 0) {
			snprintf(why, whylen, "cannot check who owns '%s%s': %s", c->dir, dirs[i].sub,
				 strerror(errno));
			return -errno;
		}
		if (st.st_uid != 0 && st.st_uid != me) {
			snprintf(why, whylen, "'%s%s' belongs to uid %u, neither to you (uid %u) nor "
				 "to root: whoever owns it decides what is published, shipped and "
				 "restored as yours", c->dir, dirs[i].sub, (unsigned)st.st_uid,
				 (unsigned)me);
			return -EPERM;
		}
		if (st.st_mode & (S_IWGRP | S_IWOTH)) {
			snprintf(why, whylen, "'%s%s' may be written by %s (mode %04o): they could "
				 "plant what is published, shipped and restored as yours", c->dir,
				 dirs[i].sub, st.st_mode & S_IWOTH ? "every user" : "its group",
				 (unsigned)(st.st_mode & 07777));
			return -EPERM;
		}
	}
	return 0;
}

const char *stg_cache_strerror(int r)
{
	switch (r) {
	case -EPROTO:
		return "it holds a cache of another format";
	case -EPROTONOSUPPORT:
		return "a newer stagehand has made it a cache of a later format than this one "
		       "reads (" FORMAT_KIND " 1 and 2): use that stagehand, or a new cache dir";
	case -EOPNOTSUPP:
		return "its file system has no O_TMPFILE, which the cache's shadow files need "
		       "(9p, NFS, Lustre, GPFS and FUSE file systems lack it): put [cache] dir "
		       "on a local file system such as ext4, xfs, btrfs or tmpfs";
	default:
		return strerror(-r);
	}
}

int stg_cache_lock_packs(struct stg_cache *c, int op)
{
	int fd = openat(c->dirfd, "gc.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int r = stg_flock(fd, op);
	if (r < 0) {
		close(fd);
		return r == -EWOULDBLOCK ? -EAGAIN : r;
	}
	return fd;
}

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x4000U /* Linux 6.8 */
#endif

/* The file system instance the cache is on (this boot, this mount): `usage`
 * is updated in place, unsynced, and a power cut (a new boot, a new mount)
 * may leave it short of the packs that reached the disk. The boot tells a
 * power cut; the mount, a file system mounted again within a boot, where
 * the kernel gives ids never reused (6.8): older ones reuse a mount's id
 * once it is unmounted. 0: unknown. */
static uint64_t mount_stamp(int dirfd)
{
	struct statx stx;
	if (statx(dirfd, "", AT_EMPTY_PATH, STATX_MNT_ID | STATX_MNT_ID_UNIQUE, &stx) < 0 ||
	    !(stx.stx_mask & (STATX_MNT_ID | STATX_MNT_ID_UNIQUE)))
		return 0;
	char boot[40] = "";
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, boot, sizeof(boot) - 1);
		boot[n > 0 ? n : 0] = '\0';
		close(fd);
	}
	char text[80];
	int n = snprintf(text, sizeof(text), "%s %llu", boot, (unsigned long long)stx.stx_mnt_id);
	return stg_hash64(text, (size_t)n) | 1;
}

/* The first opener after a mount counts the packs again, unless a version
 * is being built (gc.lock held; the collection that follows its commit, or
 * the next opener, counts them). */
static void recount_after_mount(struct stg_cache *c)
{
	uint64_t stamp = mount_stamp(c->dirfd);
	uint8_t b[8];
	if (!stamp || (pread(c->usage_fd, b, sizeof(b), 8) == (ssize_t)sizeof(b) &&
		       stg_get_le64(b) == stamp))
		return;
	int lk = stg_cache_lock_packs(c, LOCK_EX | LOCK_NB);
	if (lk < 0)
		return;
	uint64_t n, bytes;
	stg_cache_count_packs(c, &n, &bytes);
	stg_cache_set_usage(c, bytes);
	close(lk);
}

int stg_cache_open(const char *dir, struct stg_cache **ret_cache)
{
	int r = stg_mkdir_p(dir, 0700);
	if (r < 0)
		return r;
	struct stg_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->packs_fd = c->index_fd = c->files_fd = c->tmp_fd = c->usage_fd = c->queue_fd = -1;
	c->dir = strdup(dir);
	c->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!c->dir || c->dirfd < 0) {
		r = c->dir ? -errno : -ENOMEM;
		goto out_free;
	}
	/* Writable? The shim must know now, not at the first close(). */
	if (faccessat(c->dirfd, ".", W_OK | X_OK, AT_EACCESS) < 0) {
		r = -errno;
		goto out_free;
	}
	r = check_format(c);
	if (r < 0)
		goto out_free;
	if ((r = c->packs_fd = open_subdir(c->dirfd, "packs")) < 0 ||
	    (r = c->index_fd = open_subdir(c->dirfd, "index")) < 0 ||
	    (r = c->files_fd = open_subdir(c->dirfd, "files")) < 0 ||
	    (r = c->tmp_fd = open_subdir(c->dirfd, "tmp")) < 0 ||
	    (r = c->queue_fd = open_subdir(c->dirfd, "queue")) < 0 ||
	    (r = probe_tmpfile(c->tmp_fd)) < 0)
		goto out_free;
	c->usage_fd = openat(c->dirfd, "usage", O_RDWR | O_CLOEXEC);
	if (c->usage_fd < 0 && errno == ENOENT) {
		/* A fresh cache, or one whose accounting was lost: count once. */
		c->usage_fd = openat(c->dirfd, "usage", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (c->usage_fd >= 0) {
			uint64_t n, bytes;
			stg_cache_count_packs(c, &n, &bytes);
			stg_cache_set_usage(c, bytes);
		}
	}
	if (c->usage_fd < 0) {
		r = -errno;
		goto out_free;
	}
	recount_after_mount(c);
	*ret_cache = c;
	return 0;
out_free:
	stg_cache_free(c);
	return r;
}

void stg_cache_free(struct stg_cache *c)
{
	if (!c)
		return;
	int fds[] = {c->dirfd,  c->packs_fd, c->index_fd, c->files_fd,
		     c->tmp_fd, c->usage_fd, c->queue_fd};
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(c->dir);
	free(c);
}

/* flock() excludes other processes; threads of this one share the descriptor
 * (and so the lock): a mutex excludes them. */
static pthread_mutex_t usage_mutex = PTHREAD_MUTEX_INITIALIZER;

void stg_cache_after_fork_child(void)
{
	/* Another thread may have held it at the fork. */
	pthread_mutex_init(&usage_mutex, NULL);
}

static int lock_usage(struct stg_cache *c, uint64_t *ret)
{
	pthread_mutex_lock(&usage_mutex);
	int locked = stg_flock(c->usage_fd, LOCK_EX);
	if (locked < 0) {
		pthread_mutex_unlock(&usage_mutex);
		return locked;
	}
	uint8_t b[8] = {0};
	ssize_t n = pread(c->usage_fd, b, sizeof(b), 0);
	*ret = n == (ssize_t)sizeof(b) ? stg_get_le64(b) : 0;
	return 0;
}

static int store_usage(struct stg_cache *c, uint64_t v)
{
	uint8_t b[8];
	stg_put_le64(b, v);
	int r = pwrite(c->usage_fd, b, sizeof(b), 0) == (ssize_t)sizeof(b) ? 0 : -EIO;
	flock(c->usage_fd, LOCK_UN);
	pthread_mutex_unlock(&usage_mutex);
	return r;
}

int stg_cache_reserve(struct stg_cache *c, uint64_t bytes)
{
	uint64_t used;
	int r = lock_usage(c, &used);
	if (r < 0)
		return r;
	if (c->capacity && used + bytes > c->capacity) {
		flock(c->usage_fd, LOCK_UN);
		pthread_mutex_unlock(&usage_mutex);
		return -ENOSPC;
	}
	return store_usage(c, used + bytes);
}

void stg_cache_reserve_undo(struct stg_cache *c, uint64_t bytes)
{
	uint64_t used;
	if (lock_usage(c, &used) == 0)
		store_usage(c, used > bytes ? used - bytes : 0);
}

uint64_t stg_cache_usage(struct stg_cache *c)
{
	uint8_t b[8] = {0};
	return pread(c->usage_fd, b, sizeof(b), 0) == (ssize_t)sizeof(b) ? stg_get_le64(b) : 0;
}

int stg_cache_set_usage(struct stg_cache *c, uint64_t bytes)
{
	uint64_t old;
	int r = lock_usage(c, &old);
	if (r < 0)
		return r;
	/* After the count, 8 bytes an older stagehand does not read: the mount
	 * this count is exact for (recount_after_mount). */
	uint8_t b[8];
	stg_put_le64(b, mount_stamp(c->dirfd));
	if (pwrite(c->usage_fd, b, sizeof(b), 8) != (ssize_t)sizeof(b)) {
		flock(c->usage_fd, LOCK_UN);
		pthread_mutex_unlock(&usage_mutex);
		return -EIO;
	}
	return store_usage(c, bytes);
}

void stg_cache_hold_name(dev_t dev, ino_t ino, char out[64])
{
	snprintf(out, 64, "%llx-%llx.hold", (unsigned long long)dev, (unsigned long long)ino);
}

bool stg_cache_shadow_held(struct stg_cache *c, dev_t dev, ino_t ino)
{
	char name[64];
	stg_cache_hold_name(dev, ino, name);
	int h = openat(c->tmp_fd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (h < 0)
		return false;
	bool held = flock(h, LOCK_EX | LOCK_NB) < 0;
	close(h);
	return held;
}

static uint64_t read_node(int dirfd)
{
	char buf[32] = {0};
	int fd = openat(dirfd, "node", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	char *end;
	uint64_t id = n == 16 ? strtoull(buf, &end, 16) : 0;
	return n == 16 && end == buf + 16 ? id : 0;
}

uint64_t stg_cache_node_id(struct stg_cache *c)
{
	if (c->node)
		return c->node;
	uint64_t id = read_node(c->dirfd);
	if (!id) {
		/* Made under a temporary name and linked: two processes making it
		 * at once agree on whichever came first. */
		uint64_t mine = 0;
		while (!mine)
			if (getrandom(&mine, sizeof(mine), 0) != (ssize_t)sizeof(mine))
				return 0;
		char tmp[64], text[17];
		snprintf(tmp, sizeof(tmp), "node.%llx.tmp", (unsigned long long)mine);
		snprintf(text, sizeof(text), "%016llx", (unsigned long long)mine);
		int fd = openat(c->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0)
			return 0;
		int r = stg_write_all(fd, text, 16) < 0 || fsync(fd) < 0 ? -1 : 0;
		close(fd);
		if (r == 0)
			linkat(c->dirfd, tmp, c->dirfd, "node", 0);
		unlinkat(c->dirfd, tmp, 0);
		id = read_node(c->dirfd);
	}
	c->node = id;
	return id;
}
