/* SPDX-License-Identifier: MIT */
/* The flusher's persistent queue, kept in the cache: an entry per version
 * still to ship (queue/<file id>.<version>) and a mark per version that the
 * servers hold (files/<file id>/v<version>.rep). Version 0 stands for the
 * path's tombstone: a deletion to ship, after the versions. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "hash.h"

struct stg_queue_item {
	char id[STG_HASH_HEX_LEN + 1];
	uint64_t version;
};

/* Queues a version (idempotent). Returns 0 or -errno. */
int stg_queue_add(struct stg_cache *c, const char *id, uint64_t version);

/* Takes a version off the queue. Returns 0 or -errno (-ENOENT: not queued). */
int stg_queue_remove(struct stg_cache *c, const char *id, uint64_t version);

/* The queued versions, sorted by file id then version, in a malloc'ed array.
 * Returns 0 or -errno. */
int stg_queue_list(struct stg_cache *c, struct stg_queue_item **ret, size_t *ret_n);

/* The path a queued item belongs to, into out ("?" when it is gone). */
void stg_queue_item_path(struct stg_cache *c, const struct stg_queue_item *it, char *out,
			 size_t len);

/* Marks a version replicated; servers is a text naming where it is. The mark
 * need not be durable: if it is lost, the version is shipped again, and the
 * servers already hold its chunks. Returns 0 or -errno. */
int stg_queue_mark(int filedirfd, uint64_t version, const char *servers);

/* Reads a version's mark: 0 (servers filled), -ENOENT (not replicated). */
int stg_queue_read_mark(int filedirfd, uint64_t version, char *servers, size_t len);

/* Removes a version's mark (the version changed or is gone). */
void stg_queue_unmark(int filedirfd, uint64_t version);

/* Queues every version in the catalog that is neither marked nor queued:
 * those whose publisher died before queueing them, or published before a
 * [cluster] was configured. *ret_added counts them. Returns 0 or -errno. */
int stg_queue_recover(struct stg_cache *c, size_t *ret_added);
