/* SPDX-License-Identifier: MIT */
/* stagehand __commit: the shim's background committer (not for people).
 * With durability = async, it gets the shadow file on descriptor 3, a pipe
 * on 4 whose closing tells the application's process that the version is
 * there, and on 5 the path's open lock, held until it exits; OPEN_VERSION is the version an fsync of the same writing published,
 * which the new one supersedes. With --pending PATH, it packs PATH's pending
 * commit (common/pending.h): descriptor 3 holds the path's open lock, taken
 * for it by the closing process, until it exits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builder.h"
#include "pending.h"
#include "tool.h"

/* The pending commit of path, whose open lock the shim handed over. */
static int commit_pending(const char *path)
{
	struct stg_policy *p;
	struct stg_cache *cache;
	if (tool_open(NULL, &p, &cache))
		return 1;
	bool published = false;
	int r = 1;
	/* The lock the shim handed over; a helper started without it (it
	 * could not place it on 3) takes it, waiting for whoever has it. */
	int lk = cache && !stg_pending_holds_lock(cache, path, 3) ? stg_pending_lock(cache, path) : 3;
	if (!cache)
		tool_error("__commit: %s has no cache", p->file);
	else if (lk < 0)
		tool_error("__commit: cannot lock '%s': %s", path, strerror(-lk));
	else
		r = tool_settle_locked(p, cache, path, &published);
	if (lk > 3)
		close(lk);
	if (published && cache->ship)
		tool_start_flusher(p, cache);
	stg_cache_free(cache);
	stg_policy_free(p);
	return r;
}

int cmd_commit(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--pending") == 0)
		return commit_pending(argv[2]);
	if (argc < 4 || argc > 6) {
		tool_error("__commit: PATH MODE MTIME_NS [OPEN_VERSION [STAGED_SINCE_NS]] or "
			   "--pending PATH expected (this command is the shim's)");
		return EXIT_USAGE;
	}
	const char *path = argv[1];
	char *end;
	unsigned long mode = strtoul(argv[2], &end, 8);
	if (*end || mode > 07777) {
		tool_error("__commit: bad mode '%s'", argv[2]);
		return EXIT_USAGE;
	}
	long long mtime = strtoll(argv[3], &end, 10);
	if (*end) {
		tool_error("__commit: bad time '%s'", argv[3]);
		return EXIT_USAGE;
	}
	/* The open version an fsync of this writing published: superseded. */
	unsigned long long replaces = 0;
	if (argc >= 5) {
		replaces = strtoull(argv[4], &end, 10);
		if (*end || argv[4][0] == '-') {
			tool_error("__commit: bad version id '%s'", argv[4]);
			return EXIT_USAGE;
		}
	}
	/* When its writers began: chunks they staged ahead count as its own. */
	long long since = 0;
	if (argc == 6) {
		since = strtoll(argv[5], &end, 10);
		if (*end || !argv[5][0] || since < 0) {
			tool_error("__commit: bad time '%s'", argv[5]);
			return EXIT_USAGE;
		}
	}
	struct stat st;
	if (fstat(3, &st) < 0 || !S_ISREG(st.st_mode)) {
		tool_error("__commit: descriptor 3 is not the shadow of '%s'", path);
		return 1;
	}
	struct stg_policy *p;
	struct stg_cache *cache;
	if (tool_open(NULL, &p, &cache))
		return 1;
	const struct stg_path_rule *rule = stg_policy_match(p, path);
	int r = 1;
	if (!rule || !cache) {
		tool_error("__commit: '%s' is not captured by %s", path, p->file);
	} else {
		int64_t v = stg_commit_fd(cache, path, rule, 3, (uint64_t)st.st_size, (uint32_t)mode,
					  mtime, false, replaces, NULL, since);
		if (v < 0)
			tool_error("could not stage '%s' (durability = async): %s", path,
				   strerror((int)-v));
		r = v < 0;
		/* Published and queued: a flusher must be there to ship it. */
		if (v > 0 && cache->ship)
			tool_start_flusher(p, cache);
	}
	stg_cache_free(cache);
	stg_policy_free(p);
	return r;
}
