/* SPDX-License-Identifier: MIT */
/* Retention (keep = N) and garbage collection of packs no version references. */
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
#include "index.h"
#include "log.h"
#include "pack.h"
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

/* Live chunk records: an open-addressing set keyed by (pack, offset). */
struct live {
	struct stg_manifest_entry *slots;
	size_t cap, n;
};

static size_t slot_of(const struct live *l, uint64_t pack, uint64_t offset)
{
	uint64_t k = (pack ^ (offset * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
	return (size_t)(k >> 17) & (l->cap - 1);
}

static int live_add(struct live *l, const struct stg_manifest_entry *e);

static int live_grow(struct live *l)
{
	struct live bigger = {.cap = l->cap ? l->cap * 2 : 1024};
	bigger.slots = calloc(bigger.cap, sizeof(*bigger.slots));
	if (!bigger.slots)
		return -ENOMEM;
	for (size_t i = 0; i < l->cap; i++)
		if (l->slots[i].pack)
			live_add(&bigger, &l->slots[i]);
	free(l->slots);
	*l = bigger;
	return 0;
}

static int live_add(struct live *l, const struct stg_manifest_entry *e)
{
	if ((l->n + 1) * 2 > l->cap) {
		int r = live_grow(l);
		if (r < 0)
			return r;
	}
	for (size_t i = slot_of(l, e->pack, e->offset);; i = (i + 1) & (l->cap - 1)) {
		struct stg_manifest_entry *s = &l->slots[i];
		if (!s->pack) {
			*s = *e;
			s->flags &= STG_ENTRY_LZ4;
			l->n++;
			return 0;
		}
		if (s->pack == e->pack && s->offset == e->offset)
			return 0;
	}
}

static int mark_file(void *arg, const char *path, int filedirfd)
{
	(void)path;
	struct live *live = arg;
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
				r = live_add(live, &m.entries[k]);
		stg_manifest_done(&m);
	}
	free(v);
	return r;
}

/* Sorted distinct pack ids of the live set. */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static bool has(const uint64_t *v, size_t n, uint64_t x)
{
	return bsearch(&x, v, n, sizeof(*v), cmp_u64) != NULL;
}

/* tmp/<dev>-<ino>.hold: the lock files of open shadows (see the shim). One
 * nobody holds is left over from a process that died: remove it. */
static void sweep_holds(struct stg_cache *c)
{
	int fd = openat(c->tmp_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (n < 6 || strcmp(de->d_name + n - 5, ".hold") != 0)
			continue;
		int h = openat(c->tmp_fd, de->d_name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (h < 0)
			continue;
		if (flock(h, LOCK_EX | LOCK_NB) == 0)
			unlinkat(c->tmp_fd, de->d_name, 0);
		close(h);
	}
	closedir(d);
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
	struct live live = {0};
	uint64_t *packs = NULL;
	struct stg_manifest_entry *entries = NULL;
	int r = stg_catalog_foreach(c, mark_file, &live);
	if (r < 0)
		goto out;
	packs = malloc((live.n ? live.n : 1) * sizeof(*packs));
	entries = malloc((live.n ? live.n : 1) * sizeof(*entries));
	if (!packs || !entries) {
		r = -ENOMEM;
		goto out;
	}
	size_t np = 0, ne = 0;
	for (size_t i = 0; i < live.cap; i++) {
		if (!live.slots[i].pack)
			continue;
		entries[ne++] = live.slots[i];
		packs[np++] = live.slots[i].pack;
		res.live_bytes += stg_pack_record_size(live.slots[i].stored_len);
	}
	res.live_chunks = ne;
	qsort(packs, np, sizeof(*packs), cmp_u64);

	/* With the lock held exclusively nobody is writing a pack: one that no
	 * manifest names belongs to a version that was pruned or never made it. */
	int fd = openat(c->packs_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		goto out;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		uint64_t id;
		struct stat st;
		if (de->d_name[0] == '.' || fstatat(c->packs_fd, de->d_name, &st, 0) < 0)
			continue;
		if (stg_pack_parse_name(de->d_name, &id) == 0 && has(packs, np, id)) {
			res.packs_kept++;
			res.bytes_kept += (uint64_t)st.st_size;
		} else if (unlinkat(c->packs_fd, de->d_name, 0) == 0) {
			res.packs_removed++;
			res.bytes_removed += (uint64_t)st.st_size;
		}
	}
	closedir(d);
	r = stg_index_rewrite(c, entries, ne);
	sweep_holds(c);
	/* Nobody stores while we hold the lock: this count is exact. */
	if (r == 0)
		r = stg_cache_set_usage(c, res.bytes_kept);
out:
	free(live.slots);
	free(packs);
	free(entries);
	close(lockfd);
	if (r == 0 && ret)
		*ret = res;
	return r;
}
