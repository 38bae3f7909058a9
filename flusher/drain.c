/* SPDX-License-Identifier: MIT */
/* The third tier: once a version is replicated, materialize it where the
 * rule's drain says (DIR/<path>, or the path itself), the way a burst buffer
 * stages out to the parallel file system: written under a temporary name,
 * made durable, then renamed over the old copy, so a reader of the drained
 * file sees one whole version or the previous one. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "log.h"
#include "materialize.h"
#include "util.h"
#include "version.h"

int drain_version(struct flusher *fl, const char *path, const struct stg_path_rule *rule,
		  const struct stg_manifest *m)
{
	char dest[PATH_MAX];
	if (strcmp(rule->drain, "in-place") == 0)
		snprintf(dest, sizeof(dest), "%s", path);
	else if (snprintf(dest, sizeof(dest), "%s%s", rule->drain, path) >= (int)sizeof(dest))
		return stg_log_errno(STG_LOG_ERROR, -ENAMETOOLONG, "drain of '%s'", path);
	char dir[PATH_MAX], base[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", dest);
	snprintf(base, sizeof(base), "%s", dest);
	const char *dname = dirname(dir), *bname = basename(base);
	int r = stg_mkdir_p(dname, 0755);
	if (r < 0)
		return stg_log_errno(STG_LOG_ERROR, r, "drain: cannot create '%s'", dname);
	int dirfd = open(dname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return stg_log_errno(STG_LOG_ERROR, -errno, "drain: cannot open '%s'", dname);
	char tmp[NAME_MAX + 64];
	/* One name per node, not per process: a drain cut short by a crash is
	 * overwritten by the next one instead of left behind. */
	char host[64] = "localhost";
	gethostname(host, sizeof(host) - 1);
	snprintf(tmp, sizeof(tmp), ".%.200s.stagehand-drain.%.60s", bname, host);
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = stg_log_errno(STG_LOG_ERROR, -errno, "drain: cannot write in '%s'", dname);
		goto out_dir;
	}
	struct stg_materialize_error me;
	r = stg_materialize(fl->cache, m, fd, NULL, NULL, &me);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "drain of '%s' version %llu to '%s'", path,
			      (unsigned long long)stg_version_seq(m->version), dest);
		goto out_unlink;
	}
	struct timespec times[2] = {
		{.tv_sec = m->mtime_ns / 1000000000, .tv_nsec = m->mtime_ns % 1000000000},
		{.tv_sec = m->mtime_ns / 1000000000, .tv_nsec = m->mtime_ns % 1000000000},
	};
	if (fchmod(fd, m->mode) < 0 || futimens(fd, times) < 0 || fsync(fd) < 0 ||
	    renameat(dirfd, tmp, dirfd, bname) < 0) {
		r = stg_log_errno(STG_LOG_ERROR, -errno, "drain: finishing '%s'", dest);
		goto out_unlink;
	}
	fsync(dirfd);
	close(fd);
	close(dirfd);
	stg_log(STG_LOG_INFO, "'%s' version %llu drained to '%s'", path,
		(unsigned long long)stg_version_seq(m->version), dest);
	return 0;
out_unlink:
	close(fd);
	unlinkat(dirfd, tmp, 0);
out_dir:
	close(dirfd);
	return r;
}
