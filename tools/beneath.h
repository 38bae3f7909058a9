/* SPDX-License-Identifier: MIT */
/* Where restore writes: directories opened and created below a root, one
 * component at a time, never climbing out of it. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

/* A symbolic link that stopped a walk: where (from the root), and whose. */
struct beneath_link {
	char path[PATH_MAX];
	uid_t owner;
};

/* openat(dirfd, name, flags, mode) that resolves no symbolic link and
 * nothing outside dirfd: openat2 with RESOLVE_BENEATH, or, where the kernel
 * lacks it, the same for a single name. Returns the descriptor or -errno
 * (-ELOOP: a symbolic link, -EXDEV: outside dirfd). */
int beneath_open(int dirfd, const char *name, int flags, mode_t mode);

/* Opens the directory rel (relative, normalized: no "..") below rootfd,
 * creating what is missing (0755). A symbolic link on the way is in the way
 * (-ELOOP, *ret_link filled), unless follow is set (an in-place restore,
 * rootfd "/") and the link belongs to the caller or to root: it is then the
 * user's own path (/scratch -> /lustre/...) and followed as the kernel
 * would, links in its target under the same rule. Returns the descriptor or
 * -errno. */
int beneath_open_dir(int rootfd, const char *rel, bool follow, struct beneath_link *ret_link);
