/* SPDX-License-Identifier: MIT */
/* Retention (keep = N) and garbage collection of unreferenced chunk objects. */
#include "gc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"
#include "log.h"
#include "util.h"

#define LOCK_FILE "gc.lock"

static int open_lock(struct stg_cache *c)
{
	int fd = openat(c->dirfd, LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	return fd < 0 ? -errno : fd;
}

int stg_gc_pin(struct stg_cache *c)
{
	int fd = open_lock(c);
	if (fd < 0)
		return fd;
	while (flock(fd, LOCK_SH) < 0) {
		if (errno != EINTR) {
			int r = -errno;
			close(fd);
			return r;
		}
	}
	return fd;
}

void stg_gc_unpin(int pinfd)
{
	if (pinfd >= 0)
		close(pinfd);
}

int stg_gc_prune(int filedirfd, uint32_t keep)
{
	uint64_t *v;
	size_t n;
	int r = stg_catalog_versions(filedirfd, &v, &n);
	if (r < 0)
		return r;
	int removed = 0;
	for (size_t i = 0; i + keep < n; i++) {
		r = stg_catalog_remove_version(filedirfd, v[i]);
		if (r < 0)
			break;
		removed++;
	}
	free(v);
	return r < 0 ? r : removed;
}

/* An open-addressing set of chunk hashes. */
struct hash_set {
	struct stg_hash *slots;
	uint8_t *used;
	size_t cap, n;
};

static int set_add(struct hash_set *s, const struct stg_hash *h);

static int set_grow(struct hash_set *s)
{
	struct hash_set bigger = {.cap = s->cap ? s->cap * 2 : 1024};
	bigger.slots = calloc(bigger.cap, sizeof(*bigger.slots));
	bigger.used = calloc(bigger.cap, 1);
	if (!bigger.slots || !bigger.used) {
		free(bigger.slots);
		free(bigger.used);
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->cap; i++)
		if (s->used[i])
			set_add(&bigger, &s->slots[i]);
	free(s->slots);
	free(s->used);
	*s = bigger;
	return 0;
}

static size_t slot_of(const struct hash_set *s, const struct stg_hash *h)
{
	return (size_t)stg_get_le64(h->b) & (s->cap - 1);
}

static int set_add(struct hash_set *s, const struct stg_hash *h)
{
	if ((s->n + 1) * 2 > s->cap) {
		int r = set_grow(s);
		if (r < 0)
			return r;
	}
	for (size_t i = slot_of(s, h);; i = (i + 1) & (s->cap - 1)) {
		if (!s->used[i]) {
			s->used[i] = 1;
			s->slots[i] = *h;
			s->n++;
			return 0;
		}
		if (stg_hash_eq(&s->slots[i], h))
			return 0;
	}
}

static bool set_has(const struct hash_set *s, const struct stg_hash *h)
{
	if (!s->cap)
		return false;
	for (size_t i = slot_of(s, h); s->used[i]; i = (i + 1) & (s->cap - 1))
		if (stg_hash_eq(&s->slots[i], h))
			return true;
	return false;
}

static int mark_file(void *arg, const char *path, int filedirfd)
{
	(void)path;
	struct hash_set *live = arg;
	uint64_t *v;
	size_t n;
	int r = stg_catalog_versions(filedirfd, &v, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n && r == 0; i++) {
		struct stg_manifest m;
		int rr = stg_catalog_read(filedirfd, v[i], &m);
		if (rr == -EBADMSG || rr == -ENOENT)
			continue; /* nothing in a corrupt manifest can be restored anyway */
		if (rr < 0) {
			r = rr;
			break;
		}
		for (uint32_t k = 0; k < m.nchunks && r == 0; k++)
			if (!(m.entries[k].flags & STG_ENTRY_ZERO))
				r = set_add(live, &m.entries[k].hash);
		stg_manifest_done(&m);
	}
	free(v);
	return r;
}

static int sweep_dir(int parentfd, const char *sub, const struct hash_set *live,
		     struct stg_gc_result *res)
{
	int fd = openat(parentfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int r = -errno;
		close(fd);
		return r;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' && (de->d_name[1] == '\0' || strcmp(de->d_name, "..") == 0))
			continue;
		struct stg_hash h;
		bool tmp = strncmp(de->d_name, ".tmp.", 5) == 0;
		struct stat st;
		if (!tmp && stg_hash_from_hex(de->d_name, &h) == 0 && set_has(live, &h)) {
			res->chunks_kept++;
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
				res->bytes_kept += (uint64_t)st.st_size;
			continue;
		}
		/* With the collection lock held exclusively, temporaries belong to
		 * writers that died. */
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    unlinkat(dirfd(d), de->d_name, 0) == 0) {
			res->chunks_removed += !tmp;
			res->bytes_removed += (uint64_t)st.st_size;
		}
	}
	closedir(d);
	return 0;
}

int stg_gc_collect(struct stg_cache *c, int wait, struct stg_gc_result *ret)
{
	struct stg_gc_result res = {0};
	int lockfd = open_lock(c);
	if (lockfd < 0)
		return lockfd;
	while (flock(lockfd, LOCK_EX | (wait ? 0 : LOCK_NB)) < 0) {
		if (errno != EINTR) {
			int r = errno == EWOULDBLOCK ? -EAGAIN : -errno;
			close(lockfd);
			return r;
		}
	}
	struct hash_set live = {0};
	int r = stg_catalog_foreach(c, mark_file, &live);
	if (r == 0) {
		int fd = openat(c->chunks_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
		if (!d) {
			r = -errno;
			if (fd >= 0)
				close(fd);
		} else {
			struct dirent *de;
			while (r == 0 && (de = readdir(d)))
				if (strlen(de->d_name) == 2 && de->d_name[0] != '.')
					r = sweep_dir(dirfd(d), de->d_name, &live, &res);
			closedir(d);
		}
	}
	/* Nobody stores while we hold the lock: this count is exact. */
	if (r == 0)
		stg_cache_set_usage(c, res.bytes_kept);
	free(live.slots);
	free(live.used);
	close(lockfd);
	if (r == 0 && ret)
		*ret = res;
	return r;
}
