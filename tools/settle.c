/* SPDX-License-Identifier: MIT */
/* Pending commits (common/pending.h) settled by the tool: packed by the
 * shim's helper (`stagehand __commit --pending`), and before the tool reads
 * the cache, so that a version whose close returned is listed, restored and
 * shipped as it is, whether its helper is still packing it (waited for) or
 * died with the node (packed here). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pending.h"
#include "tool.h"

int tool_settle_locked(const struct stg_policy *p, struct stg_cache *c, const char *path,
		       bool *ret_published)
{
	const struct stg_path_rule *rule = stg_policy_match(p, path);
	if (!rule) {
		tool_error("the pending commit of '%s' is not captured by %s any more: left in the "
			   "cache's tmp/",
			   path, p->file);
		return 1;
	}
	int64_t v = stg_pending_settle(c, path, rule);
	if (v < 0) {
		tool_error("could not stage '%s' from its pending commit: %s", path, strerror((int)-v));
		return 1;
	}
	*ret_published |= v > 0;
	return 0;
}

struct settling {
	const struct stg_policy *p;
	struct stg_cache *c;
	bool published;
	int failed;
};

static int settle_one(void *arg, const char *path, int err)
{
	struct settling *st = arg;
	if (err) {
		tool_error("the pending commit tmp/%s in the cache '%s' cannot be packed: %s; it is "
			   "left in place",
			   path, st->c->dir, err == -EBADMSG ? "it is damaged" : strerror(-err));
		st->failed = 1;
		return 0;
	}
	int lk = stg_pending_lock(st->c, path);
	if (lk < 0) {
		tool_error("cannot lock '%s' to settle its pending commit: %s", path, strerror(-lk));
		st->failed = 1;
		return 0;
	}
	st->failed |= tool_settle_locked(st->p, st->c, path, &st->published);
	close(lk);
	return 0;
}

int tool_settle(const struct stg_policy *p, struct stg_cache *c)
{
	if (!c)
		return 0;
	struct settling st = {.p = p, .c = c};
	int r = stg_pending_foreach(c, settle_one, &st);
	if (r < 0) {
		tool_error("cannot read the cache's tmp/: %s", strerror(-r));
		return 1;
	}
	/* Published and queued: a flusher must be there to ship it. */
	if (st.published && c->ship)
		tool_start_flusher(p, c);
	return st.failed;
}
