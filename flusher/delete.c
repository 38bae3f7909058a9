/* SPDX-License-Identifier: MIT */
/* Shipping deletions: a path's tombstone goes to every server once the
 * versions queued before it are replicated (docs/CAPTURE.md, "Renames and
 * deletions"). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "cancel.h"
#include "catalog.h"
#include "internal.h"
#include "log.h"
#include "queue.h"
#include "util.h"
#include "version.h"

/* The path and tombstone of the entry with file id id. Returns 0, -ENOENT
 * (no entry, or no tombstone: nothing to ship) or -errno. */
static int read_tombstone(struct flusher *fl, const char *id, char *path, size_t len,
			  struct stg_tombstone *ret)
{
	int dirfd = openat(fl->cache->files_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	bool legacy;
	int r = stg_catalog_read_path(dirfd, path, len);
	if (r == 0)
		r = stg_catalog_tombstone(dirfd, ret, &legacy);
	close(dirfd);
	return r;
}

/* Marks the tombstone shipped unless a later deletion was merged into it
 * meanwhile (then it goes again). Returns 0 or -EAGAIN. */
static int mark_shipped(struct flusher *fl, const char *path, const struct stg_tombstone *sent)
{
	struct stg_catalog_file f;
	int r = stg_catalog_lock(fl->cache, path, false, &f);
	if (r < 0)
		return r == -ENOENT ? 0 : r;
	struct stg_tombstone now;
	bool legacy;
	r = stg_catalog_tombstone(f.dirfd, &now, &legacy);
	if (r == 0 && (now.upto != sent->upto || now.at_ns != sent->at_ns ||
		       now.retain_s != sent->retain_s || now.flags != sent->flags))
		r = -EAGAIN;
	if (r == 0)
		r = stg_queue_mark(f.dirfd, 0, "all");
	stg_catalog_unlock(&f);
	return r == -ENOENT ? 0 : r;
}

int ship_deletion(struct flusher *fl, const char *id)
{
	char path[PATH_MAX];
	struct stg_tombstone t;
	int r = read_tombstone(fl, id, path, sizeof(path), &t);
	if (r == -ENOENT) {
		stg_queue_remove(fl->cache, id, 0);
		return 0;
	}
	if (r < 0)
		return stg_log_errno(STG_LOG_ERROR, r, "cannot read the deletion queued for %s", id);
	/* Every server may hold the path's manifests (its replicas, and those
	 * of its chunks): all must take it, or it waits for the next pass. */
	int64_t now = stg_now_ns();
	struct job job = {.path = path, .tombstone = &t};
	struct job **jobs = calloc(fl->nservers, sizeof(*jobs));
	if (!jobs)
		return -ENOMEM;
	for (size_t i = 0; i < fl->nservers; i++) {
		if (!server_available(&fl->servers[i], now)) {
			free(jobs);
			return -EAGAIN;
		}
		jobs[i] = &job;
	}
	size_t failed = servers_run(fl, jobs);
	free(jobs);
	if (stg_cancelled())
		return -ECANCELED;
	for (size_t i = 0; i < fl->nservers; i++) {
		struct server *s = &fl->servers[i];
		if (s->result < 0)
			server_failed(s, s->result, "shipping a deletion failed");
		else
			server_succeeded(s);
	}
	if (failed)
		return -EAGAIN;
	r = mark_shipped(fl, path, &t);
	if (r == 0) {
		stg_queue_remove(fl->cache, id, 0);
		stg_log(STG_LOG_INFO, "'%s' %s on the servers, up to version %llu", path,
			t.flags & STG_TOMBSTONE_RENAMED ? "renamed away" : "deleted",
			(unsigned long long)stg_version_seq(t.upto));
	}
	return r;
}
