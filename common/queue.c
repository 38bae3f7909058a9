/* SPDX-License-Identifier: MIT */
/* The flusher's persistent queue: one empty file per version to ship, so
 * that queueing is a single create, and a crash of anyone leaves a state the
 * flusher's startup scan completes. */
#include "queue.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "util.h"

static void entry_name(const char *id, uint64_t version, char out[64])
{
	snprintf(out, 64, "%s.%020" PRIu64, id, version);
}

static void mark_name(uint64_t version, char out[40])
{
	snprintf(out, 40, "v%020" PRIu64 ".rep", version);
}

static bool parse_entry(const char *name, struct stg_queue_item *ret)
{
	size_t n = strlen(name);
	if (n != STG_HASH_HEX_LEN + 1 + 20 || name[STG_HASH_HEX_LEN] != '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];
		if (i == STG_HASH_HEX_LEN)
			continue;
		bool ok = i < STG_HASH_HEX_LEN ? (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')
					       : ch >= '0' && ch <= '9';
		if (!ok)
			return false;
	}
	memcpy(ret->id, name, STG_HASH_HEX_LEN);
	ret->id[STG_HASH_HEX_LEN] = '\0';
	ret->version = strtoull(name + STG_HASH_HEX_LEN + 1, NULL, 10);
	return true;
}

int stg_queue_add(struct stg_cache *c, const char *id, uint64_t version)
{
	char name[64];
	entry_name(id, version, name);
	int fd = openat(c->queue_fd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

int stg_queue_remove(struct stg_cache *c, const char *id, uint64_t version)
{
	char name[64];
	entry_name(id, version, name);
	return unlinkat(c->queue_fd, name, 0) < 0 ? -errno : 0;
}

static int compare_items(const void *a, const void *b)
{
	const struct stg_queue_item *x = a, *y = b;
	int r = strcmp(x->id, y->id);
	if (r)
		return r;
	return x->version < y->version ? -1 : x->version > y->version;
}

int stg_queue_list(struct stg_cache *c, struct stg_queue_item **ret, size_t *ret_n)
{
	DIR *d = stg_opendir_at(c->queue_fd, ".");
	if (!d)
		return -errno;
	struct stg_queue_item *items = NULL;
	size_t n = 0, cap = 0;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stg_queue_item it;
		if (!parse_entry(de->d_name, &it))
			continue;
		if (STG_GROW(items, cap, n + 1) < 0) {
			r = -ENOMEM;
			break;
		}
		items[n++] = it;
	}
	closedir(d);
	if (r < 0) {
		free(items);
		return r;
	}
	if (n > 1)
		qsort(items, n, sizeof(*items), compare_items);
	*ret = items;
	*ret_n = n;
	return 0;
}

void stg_queue_item_path(struct stg_cache *c, const struct stg_queue_item *it, char *out,
			 size_t len)
{
	snprintf(out, len, "?");
	int dirfd = openat(c->files_fd, it->id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return;
	if (stg_catalog_read_path(dirfd, out, len) < 0)
		snprintf(out, len, "?");
	close(dirfd);
}

int stg_queue_mark(int filedirfd, uint64_t version, const char *servers)
{
	char name[40];
	mark_name(version, name);
	return stg_write_file_atomic(filedirfd, name, servers, strlen(servers), STG_WRITE_ORDERED);
}

int stg_queue_read_mark(int filedirfd, uint64_t version, char *servers, size_t len)
{
	char name[40];
	mark_name(version, name);
	uint8_t *data;
	size_t n;
	int r = stg_read_file(filedirfd, name, 4096, &data, &n);
	if (r < 0)
		return r;
	if (len > 0) {
		size_t m = n < len - 1 ? n : len - 1;
		memcpy(servers, data, m);
		servers[m] = '\0';
	}
	free(data);
	return 0;
}

void stg_queue_unmark(int filedirfd, uint64_t version)
{
	char name[40];
	mark_name(version, name);
	unlinkat(filedirfd, name, 0);
}

struct recover_state {
	struct stg_cache *cache;
	size_t added;
};

static int recover_file(void *arg, const char *path, int filedirfd)
{
	struct recover_state *st = arg;
	uint64_t *v = NULL;
	size_t n = 0;
	if (stg_catalog_versions(filedirfd, &v, &n) < 0)
		return 0;
	char id[STG_HASH_HEX_LEN + 1];
	stg_catalog_file_id(path, id);
	/* The versions, and a tombstone (version 0 of the queue) not shipped. */
	struct stg_tombstone t;
	bool legacy;
	bool tomb = stg_catalog_tombstone(filedirfd, &t, &legacy) == 0;
	for (size_t i = 0; i < n + tomb; i++) {
		uint64_t version = i < n ? v[i] : 0;
		char name[64];
		entry_name(id, version, name);
		if (stg_queue_read_mark(filedirfd, version, NULL, 0) == 0 ||
		    faccessat(st->cache->queue_fd, name, F_OK, 0) == 0)
			continue;
		if (stg_queue_add(st->cache, id, version) == 0)
			st->added++;
	}
	free(v);
	return 0;
}

int stg_queue_recover(struct stg_cache *c, size_t *ret_added)
{
	struct recover_state st = {.cache = c};
	int r = stg_catalog_foreach(c, recover_file, &st);
	*ret_added = st.added;
	return r;
}
