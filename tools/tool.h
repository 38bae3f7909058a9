/* SPDX-License-Identifier: MIT */
/* Shared by the subcommands of the stagehand tool. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "layout.h"
#include "policy.h"

/* What tool_open does with a cache that stg_cache_owned refuses: refuse it
 * (saying how to override where the command takes --allow-foreign-cache), or
 * use it (the flag given). */
enum tool_foreign { TOOL_FOREIGN_REFUSE, TOOL_FOREIGN_REFUSE_FLAG, TOOL_FOREIGN_USE };
extern enum tool_foreign tool_foreign_cache;

/* Loads the policy (--policy F or the usual places) and opens its cache,
 * refused unless it is ours (stg_cache_owned; tool_foreign_cache).
 * Prints the reason and returns non-zero on failure. With must_exist, a cache
 * directory that does not exist yet is reported as empty: *ret_cache NULL. */

int tool_open(const char *policy_file, struct stg_policy **ret_policy, struct stg_cache **ret_cache);

/* Absolute, normalized form of a user-supplied path. Returns 0 or prints why. */
int tool_abspath(const char *in, char *out, size_t outlen);

/* "1.5 GiB"-style size into buf. */
const char *tool_human(uint64_t bytes, char *buf, size_t len);

/* Bytes tool_escape needs for a string of n bytes (NUL included). */
#define TOOL_ESCAPED_SIZE(n) (4 * (n) + 1)

/* s with a backslash, a control character or DEL written as a C escape
 * (\\, \n, \t, \r, else \ooo), as ls -b does: a name with a newline
 * cannot forge lines of a listing. Into buf; returns buf. */
const char *tool_escape(const char *s, char *buf, size_t len);

/* Says why a cache entry was skipped (stg_catalog_scan's bad callback). */
void tool_bad_entry(const char *cmd, const char *id, int err);

/* One of stagehand's files, found from this program (stg_layout_find).
 * Returns 0 or -errno. */
int tool_find(enum stg_layout_file what, char *out, size_t len);

void tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Is the cache's flusher running? Its pid in *ret_pid (may be NULL). */
bool tool_flusher_running(struct stg_cache *c, long *ret_pid);

/* Starts the cache's flusher, detached, unless one runs. Returns 0 or -errno. */
int tool_start_flusher(const struct stg_policy *p, struct stg_cache *c);

/* Settles the cache's pending commits (common/pending.h), waiting for those
 * being packed, and starts the flusher for what it published. Returns 0, or
 * 1 when one could not be (said why). */
int tool_settle(const struct stg_policy *p, struct stg_cache *c);

/* Settles path's pending commit, its open lock held by the caller; sets
 * *ret_published when that published a version. Returns 0, or 1 (said why). */
int tool_settle_locked(const struct stg_policy *p, struct stg_cache *c, const char *path,
		       bool *ret_published);

int cmd_run(int argc, char **argv);
int cmd_flush(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_restore(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_commit(int argc, char **argv);

#define EXIT_USAGE 2
