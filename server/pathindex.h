/* SPDX-License-Identifier: MIT */
/* Each user's paths on this server, sorted, in memory: a LIST of a prefix
 * (one file, or a directory) finds its first path in O(log n) and then
 * steps through those that start with it, never through the user's other
 * files. Built when the server opens files/, from the path index files its
 * last clean stop wrote (pathfile.h) or else from every entry's path file,
 * and kept as entries come and go (files.c). Thread-safe. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct stg_pathindex;

int stg_pathindex_new(struct stg_pathindex **ret);
void stg_pathindex_free(struct stg_pathindex *x);

/* Adds uid's path; one already there is left as it is. Returns 0 or -ENOMEM. */
int stg_pathindex_add(struct stg_pathindex *x, uint32_t uid, const char *path);

/* Removes uid's path, if there. */
void stg_pathindex_remove(struct stg_pathindex *x, uint32_t uid, const char *path);

/* uid's paths that start with prefix (all with ""), sorted: *ret is one
 * malloc'ed block of *ret_n pointers followed by the strings (one free()).
 * Returns 0 or -ENOMEM. */
int stg_pathindex_find(struct stg_pathindex *x, uint32_t uid, const char *prefix, char ***ret,
		       size_t *ret_n);

/* How many paths of all users it holds. */
size_t stg_pathindex_count(struct stg_pathindex *x);
