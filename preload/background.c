/* SPDX-License-Identifier: MIT */
/* Commits finished by a helper process. durability = async for files staged
 * from their shadow: close() hands the shadow to a detached `stagehand
 * __commit` process and returns. durability = local for large ones: close()
 * makes the shadow durable as a pending commit and hands its packing, and the
 * path's open lock, to the same helper (common/pending.h). The commit
 * completes in the background, surviving the application's exit; this
 * process waits for it only if it touches that path again, so it always
 * reads what it wrote. The helper is started so that the application never
 * sees it: no SIGCHLD, nothing for its wait() to reap, none of its
 * descriptors held open. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "layout.h"
#include "log.h"
#include "pending.h"
#include "real.h"

#define SPAWN_STACK (64u << 10)

extern char **environ;

struct pending {
	char path[PATH_MAX];
	int rfd; /* EOF when the helper is done */
	struct pending *next;
};

/* Its own lock, not shim.lock: a commit hands off to a helper while it holds
 * the path's open lock, which an open takes under shim.lock. */
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending *pending; /* guarded by pending_lock */

/* One of our files (enum stg_layout_file), found from this library: the
 * build tree's or the installed layout. NULL when there is none. */
static const char *ours(enum stg_layout_file what, char path[PATH_MAX])
{
	Dl_info info;
	if (!dladdr((void *)ours, &info) || !info.dli_fname)
		return NULL;
	return stg_layout_find(what, STG_LAYOUT_SHIM, info.dli_fname, path, PATH_MAX) == 0 ? path
											      : NULL;
}

/* The stagehand tool, our helper. */
static const char *helper(void)
{
	static char path[PATH_MAX];
	static const char *found;
	static int looked;
	if (!looked) {
		found = ours(STG_LAYOUT_TOOL, path);
		looked = 1;
	}
	return found;
}

struct spawn {
	const char *exe;
	char **argv;
	int shadow, done_w, in, err; /* shadow: any descriptor, for the helper's 3 */
	int lock; /* the path's open lock for the helper's 5, or -1 */
	char *helper_stack; /* the top of the helper's stack until it execs */
	int failed; /* the helper could not be started */
};

/* The helper, until it execs: still in the application's memory, so raw
 * system calls only. Default signal handling (the application's handlers
 * must not run here), its own session, only the descriptors it needs. */
static int helper_main(void *arg)
{
	struct spawn *sp = arg;
	for (long sig = 1; sig < 65; sig++) {
		struct {
			void *handler;
			unsigned long flags;
			void *restorer;
			unsigned long mask;
		} dfl = {SIG_DFL, 0, 0, 0};
		if (sig != SIGKILL && sig != SIGSTOP)
			real_syscall(SYS_rt_sigaction, sig, &dfl, 0, 8);
	}
	unsigned long none = 0;
	real_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, 0, 8);
	real_syscall(SYS_setsid);
	/* Out of the way first: a source may sit where another one goes (the
	 * shadow at 4, /dev/null at 3), and dup2 onto itself would keep its
	 * close-on-exec flag. */
	long shadow = -1, done_w = -1, lock = -1;
	if (sp->shadow >= 0) {
		shadow = real_syscall(SYS_fcntl, sp->shadow, F_DUPFD, 10);
		done_w = real_syscall(SYS_fcntl, sp->done_w, F_DUPFD, 10);
	}
	if (sp->lock >= 0)
		lock = real_syscall(SYS_fcntl, sp->lock, F_DUPFD, 10);
	long in = real_syscall(SYS_fcntl, sp->in, F_DUPFD, 10);
	long err = real_syscall(SYS_fcntl, sp->err, F_DUPFD, 10);
	if (sp->shadow >= 0) {
		real_syscall(SYS_dup2, shadow, 3);
		real_syscall(SYS_dup2, done_w, 4);
	}
	/* The lock's description, shared: held until the helper exits. */
	if (lock >= 0)
		real_syscall(SYS_dup2, lock, 5);
	real_syscall(SYS_dup2, in, 0);
	real_syscall(SYS_dup2, in, 1);
	real_syscall(SYS_dup2, err, 2);
	real_syscall(SYS_close_range, lock >= 0 ? 6 : sp->shadow >= 0 ? 5 : 3, ~0u, 0);
	real_syscall(SYS_execve, sp->exe, sp->argv, environ);
	real_syscall(SYS_exit_group, 127);
	return 0;
}

/* Runs in a child sharing our memory (CLONE_VM | CLONE_VFORK): it starts
 * the helper and exits at once, so the helper is reparented away from the
 * application. The helper shares the memory too until it execs (which
 * CLONE_VFORK waits for): a fork would copy the application's page tables,
 * tens of milliseconds in a process of a few GiB (a Python process with
 * JAX loaded). */
static int intermediate(void *arg)
{
	struct spawn *sp = arg;
	if (clone(helper_main, sp->helper_stack, CLONE_VM | CLONE_VFORK | SIGCHLD, sp) < 0)
		sp->failed = 1;
	return 0;
}

/* Starts sp->exe detached from the application (see intermediate()).
 * Returns 0 or -errno. */
static int spawn_detached(struct spawn *sp)
{
	/* Two stacks: the intermediate's, then the helper's. */
	void *stack = real_mmap(NULL, 2 * SPAWN_STACK, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return -ENOMEM;
	/* Exit signal 0: the application gets no SIGCHLD for it, and its
	 * wait() does not see it (only __WCLONE does). No signal handler of
	 * the application may run in the children: all blocked meanwhile. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int r = 0;
	sp->helper_stack = (char *)stack + 2 * SPAWN_STACK;
	int pid = clone(intermediate, (char *)stack + SPAWN_STACK, CLONE_VM | CLONE_VFORK, sp);
	if (pid < 0)
		r = -errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	while (pid >= 0 && waitpid(pid, NULL, __WCLONE) < 0 && errno == EINTR)
		;
	if (r == 0 && sp->failed)
		r = -EAGAIN;
	real_munmap(stack, 2 * SPAWN_STACK);
	return r;
}

/* Bounds what is in flight (and the descriptors that track it). */
#define MAX_PENDING 64

static void drop(struct pending **pp)
{
	struct pending *pd = *pp;
	*pp = pd->next;
	shim_release_fd(pd->rfd);
	real_close(pd->rfd);
	free(pd);
}

/* Waits for one helper: reads its pipe to the end. */
static void wait_one(struct pending *pd)
{
	char buf[64];
	for (;;) {
		ssize_t got = real_read(pd->rfd, buf, sizeof(buf));
		if (got > 0 || (got < 0 && errno == EINTR))
			continue;
		break; /* EOF: the helper is done (or gone) */
	}
}

/* Forgets the helpers that are done; with too many still running, waits for
 * the oldest. Caller holds pending_lock. */
static void reap(void)
{
	size_t n = 0;
	for (struct pending **pp = &pending; *pp;) {
		struct pollfd p = {.fd = (*pp)->rfd, .events = POLLIN};
		if (poll(&p, 1, 0) == 1) {
			wait_one(*pp);
			drop(pp);
		} else {
			n++;
			if (n >= MAX_PENDING && !(*pp)->next) {
				wait_one(*pp);
				drop(pp);
			} else {
				pp = &(*pp)->next;
			}
		}
	}
}

/* A helper's stderr: $STAGEHAND_LOG_FILE when the user chose one, else its
 * own log in the cache (name), so that what it says is never lost. Returns
 * the descriptor or -1. */
static int open_log(const char *name)
{
	const char *lf = getenv("STAGEHAND_LOG_FILE");
	char own[PATH_MAX];
	snprintf(own, sizeof(own), "%s/%s", shim.cache->dir, name);
	return real_open(lf && *lf ? lf : own, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

/* Starts the helper with argv, handing it fd3 as its descriptor 3 and, when
 * not -1, lock (the path's open lock, which it then holds until it exits) as
 * its 5; with track, remembers it for background_wait(path) (which costs
 * this process a descriptor until then). Returns 0 or -errno (not
 * started). */
static int hand_off(const char *exe, char **argv, int fd3, int lock, const char *path,
		    bool track)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	int in = real_open("/dev/null", O_RDWR | O_CLOEXEC);
	int err = open_log("commit.log");
	if (err < 0 && in >= 0)
		err = real_fcntl(in, F_DUPFD_CLOEXEC, 0);
	struct spawn sp = {.exe = exe, .argv = argv, .shadow = fd3, .done_w = p[1], .in = in,
			   .err = err, .lock = lock};
	int r = in < 0 || err < 0 ? -EIO : spawn_detached(&sp);
	if (in >= 0)
		real_close(in);
	if (err >= 0)
		real_close(err);
	real_close(p[1]);
	if (r < 0) {
		real_close(p[0]);
		return r;
	}
	struct pending *pd = track ? calloc(1, sizeof(*pd)) : NULL;
	if (!pd) {
		/* Handed off already: untracked, or we just cannot wait for it. */
		real_close(p[0]);
		return 0;
	}
	snprintf(pd->path, sizeof(pd->path), "%s", path);
	pd->rfd = p[0];
	shim_move_high(&pd->rfd);
	pthread_mutex_lock(&pending_lock);
	reap();
	pd->next = pending;
	pending = pd;
	pthread_mutex_unlock(&pending_lock);
	return 0;
}

int background_commit(struct session *s, int fd, uint32_t mode, int64_t mtime_ns,
		      uint64_t replaces)
{
	const char *exe = helper();
	if (!exe)
		return -ENOSYS;
	/* A read-only description of its own: the application's may be
	 * write-only. */
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	int rfd = real_open(link, O_RDONLY | O_CLOEXEC);
	if (rfd < 0)
		return -errno;
	/* Chunks its writers staged ahead count as the version's (ls). */
	int64_t since = s->share ? share_begin_ns(s->share) : 0;
	char smode[16], smtime[32], sreplaces[32], ssince[32];
	snprintf(smode, sizeof(smode), "%o", mode & 07777);
	snprintf(smtime, sizeof(smtime), "%lld", (long long)mtime_ns);
	snprintf(sreplaces, sizeof(sreplaces), "%llu", (unsigned long long)replaces);
	snprintf(ssince, sizeof(ssince), "%lld", (long long)since);
	char *argv[] = {"stagehand", "__commit", s->path, smode, smtime,
			replaces || since > 0 ? sreplaces : NULL, since > 0 ? ssince : NULL, NULL};
	/* It keeps the path's open lock until the version is published: a
	 * later version, from any process, opens after it and is newer. */
	int r = hand_off(exe, argv, rfd, s->commit_lock, s->path, true);
	real_close(rfd);
	if (r == 0)
		shim_log(STG_LOG_DEBUG, "committing '%s' in the background", s->path);
	return r;
}

int background_pack(struct session *s, int lockfd)
{
	const char *exe = helper();
	if (!exe)
		return -ENOSYS;
	char *argv[] = {"stagehand", "__commit", "--pending", s->path, NULL};
	/* Untracked: waiting for it is waiting for the lock. */
	int r = hand_off(exe, argv, lockfd, -1, s->path, false);
	if (r == 0)
		shim_log(STG_LOG_DEBUG, "packing '%s' in the background", s->path);
	return r;
}

int background_settle_locked(const char *path, const struct stg_path_rule *rule)
{
	int64_t v = stg_pending_exists(shim.cache, path) ? stg_pending_settle(shim.cache, path, rule)
							   : 0;
	if (v < 0) {
		shim_log(STG_LOG_ERROR, "could not stage '%s' from its pending commit: %s", path,
			 strerror((int)-v));
		return -EIO;
	}
	return v > 0 ? replicate_after_commit(path, rule, v) : 0;
}

int background_settle(const char *path)
{
	const struct stg_path_rule *rule = shim_match(path);
	if (!rule || !shim.cache || !stg_pending_exists(shim.cache, path))
		return 0;
	/* Its helper holds the lock until it is done; one that died left the
	 * packing to whoever comes next. */
	int lk = share_lock(path);
	if (lk < 0)
		return lk;
	int r = background_settle_locked(path, rule);
	share_unlock(lk);
	return r;
}

static int settle_below(void *arg, const char *path, int err)
{
	const char *dir = arg;
	size_t n = strlen(dir);
	if (!path || strncmp(path, dir, n) != 0 || path[n] != '/')
		return 0; /* (a record that does not decode: its path's own look reports it) */
	(void)err;
	return background_settle(path) < 0;
}

int background_settle_below(const char *dir)
{
	return shim.cache && stg_pending_foreach(shim.cache, settle_below, (void *)dir) != 0 ? -EIO
												: 0;
}

int background_wait(const char *path)
{
	int r = background_settle(path);
	if (!__atomic_load_n(&pending, __ATOMIC_RELAXED))
		return r;
	size_t n = strlen(path);
	pthread_mutex_lock(&pending_lock);
	for (struct pending **pp = &pending; *pp;) {
		struct pending *pd = *pp;
		/* The path itself, or anything below it (a directory rename). */
		if (strncmp(pd->path, path, n) != 0 || (pd->path[n] && pd->path[n] != '/')) {
			pp = &pd->next;
			continue;
		}
		wait_one(pd);
		drop(pp);
	}
	pthread_mutex_unlock(&pending_lock);
	return r;
}

void background_after_fork_child(void)
{
	/* Another thread may have held it at the fork. */
	pthread_mutex_init(&pending_lock, NULL);
}

static const char *flusher_exe(void)
{
	static char path[PATH_MAX];
	static const char *found;
	static int looked;
	if (!looked) {
		found = ours(STG_LAYOUT_FLUSHER, path);
		looked = 1;
	}
	return found;
}

int background_start_flusher(void)
{
	const char *exe = flusher_exe();
	if (!exe)
		return -ENOSYS;
	int in = real_open("/dev/null", O_RDWR | O_CLOEXEC);
	int err = open_log("flusher.log");
	char *argv[] = {"stagehand-flusher", "--policy", shim.policy->file, NULL};
	struct spawn sp = {.exe = exe, .argv = argv, .shadow = -1, .done_w = -1, .in = in,
			   .err = err};
	int r = in < 0 || err < 0 ? -EIO : spawn_detached(&sp);
	if (in >= 0)
		real_close(in);
	if (err >= 0)
		real_close(err);
	return r;
}
