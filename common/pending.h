/* SPDX-License-Identifier: MIT */
/* A pending commit: a version whose content is durable in the cache's tmp/
 * but not packed yet. With durability = local, the last close of a large
 * file written through its shadow makes the shadow durable, records it here
 * and hands the packing to a background helper, as the plain program's fsync
 * has the kernel write the file back and returns (docs/CAPTURE.md, "Pending
 * commits"; docs/FORMAT.md, tmp/). Everything that looks at the path's
 * versions settles its pending commit first, under the path's open lock,
 * which the helper holds while it packs: after a crash, whoever comes next
 * packs it. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "policy.h"

#define STG_PENDING_FORMAT 1

/* The record tmp/<file id>.commit: what the content tmp/<file id>.content is
 * to become. */
struct stg_pending {
	bool open;         /* left by a sync: the writing goes on (an open version) */
	uint64_t size;     /* of the content (open: when it was synced) */
	uint32_t mode;
	int64_t mtime_ns;
	uint64_t replaces; /* the open version an fsync of the writing published (0: none) */
	int64_t since_ns;  /* when the writing began: chunks staged ahead since count as its own */
	uint64_t base;     /* the path's newest version when it was written (0: none) */
	char path[PATH_MAX];
};

/* The record's bytes (docs/FORMAT.md). encode returns the length written into
 * out, or -ENAMETOOLONG; decode validates every field and returns 0 or
 * -EBADMSG. */
#define STG_PENDING_MAX (64 + PATH_MAX)
#define STG_PENDING_OPEN 1u /* flags: left by a sync */
int stg_pending_encode(const struct stg_pending *p, uint8_t out[STG_PENDING_MAX]);
int stg_pending_decode(const uint8_t *buf, size_t len, struct stg_pending *ret);

/* Makes shadowfd, the content of p->path, durable as its pending commit:
 * the data synced, linked as tmp/<id>.content (replacing another sync's of
 * the writing at once), the record written, with p->base set, and tmp/
 * synced. The caller holds the path's open lock and has settled any other
 * pending commit of the path. Returns 0 or -errno (then no new record was
 * written): -ENOSPC when packing it could run out of room (the cache's
 * capacity, or the disk's free space less than twice the content), which
 * only a commit inside the close can report. */
int stg_pending_write(struct stg_cache *c, int shadowfd, const struct stg_pending *p);

/* Is a commit of path pending, or its content left over by a packing killed
 * after it removed the record (without a lock: a hint)? */
bool stg_pending_exists(struct stg_cache *c, const char *path);

/* Is path's pending content the file shadowfd is open on (a sync's of the
 * writing that holds shadowfd)? */
bool stg_pending_content_is(struct stg_cache *c, const char *path, int shadowfd);

/* Commits path's pending content, if any, with rule (path's). The caller
 * holds the path's open lock. A close's is published, unless the newest
 * version is already it (a packing that died before it removed the record:
 * newer than the record's base, with its mtime and size). A sync's is left
 * alone while any process holds its shadow (its writing commits it),
 * dropped when a version newer than its base was published meanwhile, and
 * else published as an open version (its writers died). A content without
 * its record (a packing killed between removing the two) is removed.
 * Returns the version
 * published (> 0), 0 when none was, or -errno: -EBADMSG for a damaged record
 * or content, which are left where they are. */
int64_t stg_pending_settle(struct stg_cache *c, const char *path, const struct stg_path_rule *rule);

/* Removes path's pending commit if it is a sync's (superseded by a commit
 * of the writing, or of a path the writing left); a close's stays. The
 * caller holds the path's open lock. */
void stg_pending_drop(struct stg_cache *c, const char *path);

/* Calls fn for every pending commit in the cache: with its path and err 0,
 * or with the record's name in tmp/ and err (-EBADMSG, -errno) when it
 * cannot be read, does not check out or names another path. Stops at fn's
 * first non-zero return and returns it; else 0 or -errno. */
int stg_pending_foreach(struct stg_cache *c, int (*fn)(void *arg, const char *path, int err),
			void *arg);

/* Takes path's open lock (tmp/<file id>.open, flock'ed exclusively; it
 * exists while a commit of the path is pending), for the tool: the shim
 * takes it its own way. Returns the descriptor or -errno. */
int stg_pending_lock(struct stg_cache *c, const char *path);

/* Is fd the open lock of path, held through it? (The helper's descriptor 3.) */
bool stg_pending_holds_lock(struct stg_cache *c, const char *path, int fd);
