/* SPDX-License-Identifier: MIT */
/* posix_spawn's open actions on captured paths. The child opens with a call
 * the shim cannot see, so for a captured path the parent opens it when the
 * action is added, through the shim, and the child gets that descriptor by
 * a dup2 action instead; the child's shim adopts it (exec.c), and whoever
 * lets go of the file last commits it. The parent's descriptor lives until
 * posix_spawn_file_actions_destroy().
 *
 * Unlike a file system: the open happens at addopen, in the parent's
 * directory (not at each spawn, after an addchdir action), so its error is
 * addopen's, and children spawned with one object share one open file. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <unistd.h>

#include "hook.h"

/* The descriptors opened for an actions object, until it is destroyed. */
struct held {
	const posix_spawn_file_actions_t *fa;
	int fd;
	struct held *next;
};

static struct held *helds; /* under shim.lock */

/* The captured file path, opened for the action: SHIM_PASS when the child
 * should open it itself, else 0 or -errno. */
static long addopen_handler(posix_spawn_file_actions_t *fa, int target, const char *path,
			    int flags, mode_t mode)
{
	char abs[PATH_MAX];
	const struct stg_path_rule *rule = shim_resolve(AT_FDCWD, path, abs, sizeof(abs));
	if (!rule || target < 0)
		return SHIM_PASS;
	struct held *h = malloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	/* O_CLOEXEC: no other child inherits it; dup2 clears it on the target. */
	int fd = session_open(abs, rule, flags | O_CLOEXEC, mode, false);
	if (fd == SESSION_PASS || fd < 0) {
		free(h);
		return fd == SESSION_PASS ? SHIM_PASS : fd;
	}
	int r = posix_spawn_file_actions_adddup2(fa, fd, target);
	if (r != 0) {
		session_release_fd(fd);
		REAL(close)(fd);
		free(h);
		return -r;
	}
	pthread_mutex_lock(&shim.lock);
	*h = (struct held){.fa = fa, .fd = fd, .next = helds};
	helds = h;
	pthread_mutex_unlock(&shim.lock);
	return 0;
}

/* Closes what was opened for fa (NULL: for every object), which may
 * commit. */
static void release_for(const posix_spawn_file_actions_t *fa)
{
	for (;;) {
		pthread_mutex_lock(&shim.lock);
		struct held **p = &helds;
		while (*p && fa && (*p)->fa != fa)
			p = &(*p)->next;
		struct held *h = *p;
		if (h)
			*p = h->next;
		pthread_mutex_unlock(&shim.lock);
		if (!h)
			return;
		session_release_fd(h->fd);
		REAL(close)(h->fd);
		free(h);
	}
}

/* These return an error number, not -1 and errno. */
SHIM_EXPORT int posix_spawn_file_actions_addopen(posix_spawn_file_actions_t *fa, int target,
						 const char *path, int flags, mode_t mode)
{
	int saved;
	if (shim_enter(&saved)) {
		long r = addopen_handler(fa, target, path, flags, mode);
		shim_leave(0, saved);
		if (r != SHIM_PASS)
			return (int)-r;
	}
	return REAL(posix_spawn_file_actions_addopen)(fa, target, path, flags, mode);
}

SHIM_EXPORT int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *fa)
{
	int saved;
	if (__atomic_load_n(&helds, __ATOMIC_RELAXED) && shim_enter(&saved)) {
		release_for(fa);
		shim_leave(0, saved);
	}
	return REAL(posix_spawn_file_actions_destroy)(fa);
}

/* At exit: a program need not destroy its actions objects, and the files
 * opened for them hold what its children wrote. */
void spawn_actions_release_all(void)
{
	if (__atomic_load_n(&helds, __ATOMIC_RELAXED))
		release_for(NULL);
}
