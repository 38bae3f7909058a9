/* SPDX-License-Identifier: MIT */
/* The shim's global state: start-up, the re-entry guard, logging, exit. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hook.h"
#include "internal.h"
#include "log.h"
#include "real.h"
#include "util.h"

/* Recursive: a handler holding it may reach another path that takes it. */
struct shim shim = {.lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP};
__thread int shim_busy __attribute__((tls_model("initial-exec")));

static int log_fd = STDERR_FILENO;

/* Formats on the stack (no malloc inside someone else's program), one write
 * per line; common/log.c rate-limits each message site. */
static void log_sink(enum stg_log_level level, const char *msg)
{
	char line[2048];
	int n = snprintf(line, sizeof(line), "stagehand[%d]: %s%s\n", (int)getpid(),
			 level == STG_LOG_ERROR  ? "error: "
			 : level == STG_LOG_WARN ? "warning: "
						 : "",
			 msg);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	int saved = errno;
	ssize_t w = write(log_fd, line, (size_t)n);
	(void)w;
	errno = saved;
}

void shim_log(int level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	stg_logv((enum stg_log_level)level, fmt, ap);
	va_end(ap);
}

static void read_umask(void)
{
	/* umask() both reads and sets; do it once here, then track umask() calls. */
	mode_t m = real_umask ? real_umask(022) : 022;
	if (real_umask)
		real_umask(m);
	shim.umask = m;
}

static void load_policy(void)
{
	stg_log_init_from_env();
	const char *lf = getenv("STAGEHAND_LOG_FILE");
	if (lf && *lf) {
		int fd = open(lf, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (fd >= 0) {
			log_fd = fd;
			shim_move_high(&log_fd);
		}
	}
	/* Library code logs at debug only; the shim's own messages go through shim_log. */
	char *file = stg_policy_locate();
	if (!file) {
		stg_debug("no policy file: passing everything through");
		shim.disabled = true;
		return;
	}
	char err[1024];
	int r = stg_policy_load(file, &shim.policy, err, sizeof(err));
	if (r < 0) {
		shim_log(STG_LOG_ERROR, "%s; passing every file through untouched", err);
		shim.disabled = true;
	} else {
		int n = snprintf(shim.tmp_prefix, sizeof(shim.tmp_prefix), "%s/tmp/",
				 shim.policy->cache_dir);
		if (n < 0 || (size_t)n >= sizeof(shim.tmp_prefix))
			shim.disabled = true;
		else
			shim.ready = true;
	}
	free(file);
}

static void before_fork(void)
{
	int saved = errno;
	/* Held across fork (taken first: no new fast-path file can start in
	 * between), so the child's copy of the tables is consistent. */
	pthread_mutex_lock(&shim.lock);
	if (!shim_busy) {
		shim_busy++;
		fast_materialize_all();
		session_before_fork();
		shim_busy--;
	}
	errno = saved;
}

static void after_fork_parent(void)
{
	int saved = errno;
	shim_busy++;
	session_after_fork_parent();
	shim_busy--;
	pthread_mutex_unlock(&shim.lock);
	errno = saved;
}

static void after_fork_child(void)
{
	/* The child's only thread is not the one that locked it (another TID):
	 * start the lock afresh. */
	pthread_mutexattr_t attr;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&shim.lock, &attr);
	pthread_mutexattr_destroy(&attr);
	shim.pid = getpid();
	shim_fdguard_after_fork();
	stg_cache_after_fork_child();
	share_after_fork_child();
	background_after_fork_child();
	session_locks_after_fork();
	shim_busy++;
	session_after_fork();
	shim_busy--;
	dispatch_thread_on(); /* (fork ended it) */
}

static void shim_init(void)
{
	static int done;
	if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
		return;
	if (shim_real_init() < 0) {
		shim.disabled = true;
		return;
	}
	shim_busy++;
	shim.pid = getpid();
	stg_fd_keep_hook = shim_keep_fd;
	stg_fd_drop_hook = shim_release_fd;
	/* stagehand's own programs write the real files they are asked to. */
	extern char *program_invocation_short_name;
	if (strncmp(program_invocation_short_name, "stagehand", 9) == 0) {
		shim.disabled = true;
		shim_busy--;
		return;
	}
	stg_log_set_sink(log_sink);
	read_umask();
	if (fdtable_init() < 0) {
		shim.disabled = true;
	} else {
		load_policy();
		if (shim.ready) {
			session_adopt_inherited();
			/* A child must find every open file's content in its shadow,
			 * and hold the files it shares with its parent in its own name. */
			pthread_atfork(before_fork, after_fork_parent, after_fork_child);
			dispatch_init();
		}
	}
	shim_busy--;
}

__attribute__((constructor)) static void shim_constructor(void)
{
	shim_init();
}

/* The process's last commits, at exit() (flush_stdio) or _exit(). Not in a
 * child sharing the parent's memory without a fork (clone with CLONE_VM, a
 * raw vfork): the tables it would settle are the parent's. */
static void at_exit(bool flush_stdio)
{
	if (!shim.ready || shim_busy || getpid() != shim.pid)
		return;
	shim_busy++;
	spawn_actions_release_all();
	session_exit(flush_stdio);
	stg_log_report_suppressed(); /* exit() does it too, _exit() not */
	shim_busy--;
}

__attribute__((destructor)) static void shim_destructor(void)
{
	at_exit(true);
}

/* _exit() closes the descriptors as exit() does, and a process may end
 * that way holding a captured file last (dash ends every shell so, after
 * flushing its own buffers): commit as at exit, without flushing stdio,
 * whose buffers _exit() drops. */
SHIM_EXPORT void _exit(int status)
{
	at_exit(false);
	REAL(_exit)(status);
	__builtin_unreachable();
}

SHIM_EXPORT void _Exit(int status)
{
	at_exit(false);
	REAL(_Exit)(status);
	__builtin_unreachable();
}

bool shim_active(void)
{
	if (!shim.ready && !shim.disabled)
		shim_init(); /* a call that arrived before our constructor ran */
	return shim.ready;
}

struct stg_cache *shim_cache(void)
{
	if (shim.cache || shim.cache_failed)
		return shim.cache;
	pthread_mutex_lock(&shim.lock);
	if (!shim.cache && !shim.cache_failed) {
		int r = stg_cache_open(shim.policy->cache_dir, &shim.cache);
		char why[PATH_MAX + 256];
		if (r == 0 && stg_cache_owned(shim.cache, why, sizeof(why)) < 0) {
			stg_cache_free(shim.cache);
			shim.cache = NULL;
			shim.cache_failed = true;
			shim_log(STG_LOG_WARN, "cache directory refused: %s; passing every file "
				 "through untouched", why);
			r = 1; /* said */
		}
		if (r == 0) {
			shim.cache->capacity = shim.policy->capacity;
			shim.cache->ship = shim.policy->has_cluster;
			int *fds[] = {&shim.cache->dirfd,   &shim.cache->packs_fd,
				      &shim.cache->index_fd, &shim.cache->files_fd,
				      &shim.cache->tmp_fd,   &shim.cache->usage_fd,
				      &shim.cache->queue_fd};
			for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
				shim_move_high(fds[i]);
		}
		if (r < 0) {
			shim.cache_failed = true;
			shim_log(STG_LOG_WARN,
				 "cache directory '%s' is not usable (%s); passing every file "
				 "through untouched",
				 shim.policy->cache_dir, stg_cache_strerror(r));
		}
	}
	pthread_mutex_unlock(&shim.lock);
	return shim.cache;
}
