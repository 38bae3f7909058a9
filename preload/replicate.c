/* SPDX-License-Identifier: MIT */
/* After a commit, with a [cluster]: make sure the node's flusher runs, and
 * for durability = replicated wait until the version is on its servers (the
 * flusher marks it), as stdchk's pessimistic write does. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "internal.h"
#include "log.h"
#include "real.h"
#include "util.h"
#include "version.h"

#define DEFAULT_TIMEOUT_S 300

/* Is a flusher holding the cache's lock? */
static bool flusher_running(void)
{
	int fd = real_openat(shim.cache->dirfd, "flusher.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	bool held = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	real_close(fd);
	return held;
}

static void ensure_flusher(void)
{
	if (flusher_running())
		return;
	int r = background_start_flusher();
	if (r < 0)
		shim_log(STG_LOG_WARN, "cannot start stagehand-flusher (%s): staged versions wait "
			 "until one runs", strerror(-r));
}

/* Is version (or the id the flusher re-minted it as, *version then
 * updated) marked replicated? */
static bool replicated(const char *path, uint64_t *version)
{
	char id[STG_HASH_HEX_LEN + 1], rep[40];
	stg_catalog_file_id(path, id);
	int dirfd = real_openat(shim.cache->files_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (dirfd < 0)
		return false;
	/* A closed version (a close's) or an open one (a sync's). */
	uint64_t now = stg_catalog_reminted(dirfd, *version, false);
	*version = now != *version ? now : stg_catalog_reminted(dirfd, *version, true);
	snprintf(rep, sizeof(rep), "v%020" PRIu64 ".rep", *version);
	bool done = faccessat(dirfd, rep, F_OK, 0) == 0;
	real_close(dirfd);
	return done;
}

static int timeout_s(void)
{
	const char *env = getenv("STAGEHAND_REPLICATE_TIMEOUT");
	long v = env && *env ? strtol(env, NULL, 10) : 0;
	return v > 0 ? (int)v : DEFAULT_TIMEOUT_S;
}

int replicate_after_commit(const char *path, const struct stg_path_rule *rule, int64_t version)
{
	if (!shim.cache->ship)
		return 0;
	int saved = errno;
	ensure_flusher();
	int r = 0;
	if (rule->durability == STG_DURABILITY_REPLICATED && version > 0) {
		int64_t start = stg_now_ns(), deadline = start + (int64_t)timeout_s() * 1000000000;
		int64_t next_check = start + 1000000000;
		long sleep_us = 200;
		uint64_t id = (uint64_t)version;
		while (!replicated(path, &id)) {
			int64_t now = stg_now_ns();
			if (now >= deadline) {
				shim_log(STG_LOG_ERROR,
					 "'%s' version %lld is staged on this node but its servers "
					 "did not acknowledge it within %ds (durability = "
					 "replicated); see stagehand status",
					 path, (long long)stg_version_seq((uint64_t)version), timeout_s());
				r = -EIO;
				break;
			}
			/* A flusher that died (or left) is replaced. */
			if (now >= next_check) {
				ensure_flusher();
				next_check = now + 1000000000;
			}
			struct timespec ts = {.tv_nsec = sleep_us * 1000};
			nanosleep(&ts, NULL);
			sleep_us = sleep_us * 2 > 20000 ? 20000 : sleep_us * 2;
		}
	}
	errno = saved;
	return r;
}
