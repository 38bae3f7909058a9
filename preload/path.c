/* SPDX-License-Identifier: MIT */
/* Resolving the application's paths and matching them against the policy. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "real.h"
#include "util.h"

int shim_abspath(int dirfd, const char *path, char *out, size_t outlen)
{
	char buf[PATH_MAX * 2];
	if (!path)
		return -EFAULT;
	if (path[0] == '/')
		return stg_path_normalize(path, out, outlen);
	char base[PATH_MAX];
	if (dirfd == AT_FDCWD) {
		if (!getcwd(base, sizeof(base)))
			return -errno;
	} else {
		char link[64];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
		ssize_t n = readlink(link, base, sizeof(base) - 1);
		if (n < 0)
			return -EBADF;
		base[n] = '\0';
		if (base[0] != '/')
			return -ENOTDIR;
	}
	int r = stg_path_join(buf, sizeof(buf), base, path);
	if (r < 0)
		return r;
	return stg_path_normalize(buf, out, outlen);
}

const struct stg_path_rule *shim_match(const char *abspath)
{
	return stg_policy_match(shim.policy, abspath);
}

const struct stg_path_rule *shim_resolve(int dirfd, const char *path, char *abspath, size_t len)
{
	if (!shim_active() || !path || shim.policy->nrules == 0)
		return NULL;
	if (shim_abspath(dirfd, path, abspath, len) < 0)
		return NULL;
	const struct stg_path_rule *rule = shim_match(abspath);
	if (!rule || !shim_cache())
		return NULL;
	return rule;
}

bool shim_dir_suffix(const char *path)
{
	size_t n = strlen(path);
	if (n > 0 && path[n - 1] == '/')
		return true;
	return n > 0 && path[n - 1] == '.' && (n == 1 || path[n - 2] == '/');
}
