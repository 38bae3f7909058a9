/* SPDX-License-Identifier: MIT */
/* stagehand-flusher: the per-node daemon that ships the versions staged in a
 * node cache to the staging servers. One runs per cache (a lock makes it a
 * singleton); the shim starts it when none runs, and it leaves by itself
 * once everything is shipped and nothing new came for a while. Its queue is
 * the cache itself, so a flusher killed at any point resumes where it was. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "cancel.h"
#include "config.h"
#include "gc.h"
#include "internal.h"
#include "libcrypto.h"
#include "log.h"
#include "queue.h"
#include "util.h"

#define DEFAULT_IDLE_EXIT_S 30
#define SLOT_BUDGET (32ull << 20)

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
	/* Every wait for a server ends now, not at its timeout. */
	stg_cancel();
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: stagehand-flusher [--policy F] [--once] [--idle-exit SECS]\n"
		"\n"
		"Ships the versions staged in the node cache to the servers of the\n"
		"policy's [cluster] section, in the background. One flusher runs per\n"
		"cache; a second one exits at once. Programs run with the stagehand shim\n"
		"start it when needed.\n"
		"\n"
		"  --policy F        the policy file (default: $STAGEHAND_POLICY,\n"
		"                    ./stagehand.conf, /etc/stagehand/policy.conf)\n"
		"  --once            ship what is queued now, then exit (status 1 if\n"
		"                    some version could not be replicated)\n"
		"  --idle-exit SECS  exit after SECS with nothing to ship (default %d)\n"
		"  --log-level L     error, warn, info (default) or debug\n"
		"Logs go to stderr, or to $STAGEHAND_LOG_FILE.\n",
		DEFAULT_IDLE_EXIT_S);
}

/* Takes the cache's flusher lock. Returns the descriptor, -EWOULDBLOCK when
 * another flusher holds it (its pid in *ret_other), or -errno. */
static int take_lock(struct stg_cache *c, long *ret_other)
{
	int fd = openat(c->dirfd, "flusher.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int r = -errno;
		char buf[32] = {0};
		if (pread(fd, buf, sizeof(buf) - 1, 0) > 0)
			*ret_other = strtol(buf, NULL, 10);
		close(fd);
		return r;
	}
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) == 0 && pwrite(fd, buf, (size_t)n, 0) < 0)
		stg_debug("cannot record our pid in flusher.lock");
	return fd;
}

static int watch_queue(struct stg_cache *c)
{
	int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (fd < 0)
		return -errno;
	char path[4096];
	snprintf(path, sizeof(path), "%s/queue", c->dir);
	if (inotify_add_watch(fd, path, IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* Sleeps until something is queued or ms pass; without a watch (inofd -1),
 * ms pass. */
static void wait_for_work(int inofd, int ms)
{
	if (stg_cancel_poll(inofd, POLLIN, ms) == 0) {
		char buf[4096];
		while (read(inofd, buf, sizeof(buf)) > 0)
			;
	}
}

struct pass {
	size_t queued;
	size_t shipped, blocked, failed;
};

/* Ships every queued version once, then, when they all went, the queued
 * deletions: a rename's tombstone of the old name never reaches a server
 * before the new name's versions are replicated, so that no crash leaves
 * the servers with neither name. */
static int ship_pass(struct flusher *fl, struct pass *ps)
{
	struct stg_queue_item *items;
	size_t n;
	memset(ps, 0, sizeof(*ps));
	int r = stg_queue_list(fl->cache, &items, &n);
	if (r < 0)
		return stg_log_errno(STG_LOG_ERROR, r, "cannot read the queue");
	ps->queued = n;
	size_t deletions = 0;
	for (int phase = 0; phase < 2; phase++) {
		if (phase == 1 && (ps->blocked || ps->failed))
			break;
		for (size_t i = 0; i < n && !stop_signal; i++) {
			if ((items[i].version == 0) != (phase == 1))
				continue;
			char activity[128];
			if (phase)
				snprintf(activity, sizeof(activity), "shipping the deletion of %s",
					 items[i].id);
			else
				snprintf(activity, sizeof(activity), "shipping %s v%llu", items[i].id,
					 (unsigned long long)items[i].version);
			state_write(fl, n - i, activity);
			r = phase ? ship_deletion(fl, items[i].id)
				  : ship_version(fl, items[i].id, items[i].version);
			if (r == 0) {
				ps->shipped++;
				deletions += phase;
				evict_if_needed(fl);
			} else if (r == -EAGAIN || r == -ECANCELED) {
				ps->blocked++;
			} else {
				ps->failed++;
				fl->versions_failed++;
			}
		}
	}
	free(items);
	/* What deletions kept 0 s leave goes now, in the cache too. */
	if (deletions) {
		int gr = stg_gc_collect(fl->cache, 0, NULL);
		if (gr < 0 && gr != -EAGAIN)
			stg_log_errno(STG_LOG_DEBUG, gr, "collecting the cache");
	}
	/* Even with nothing shipped (servers away), older replicated versions
	 * can make room for the ones waiting. */
	evict_if_needed(fl);
	return 0;
}

static int load(struct flusher *fl, const char *policy_file)
{
	char *file = policy_file ? strdup(policy_file) : stg_policy_locate();
	if (!file) {
		stg_log(STG_LOG_ERROR, "no policy file (set STAGEHAND_POLICY or pass --policy)");
		return -ENOENT;
	}
	char err[1024];
	int r = stg_policy_load(file, &fl->policy, err, sizeof(err));
	free(file);
	if (r < 0) {
		stg_log(STG_LOG_ERROR, "%s", err);
		return r;
	}
	if (!fl->policy->has_cluster) {
		stg_log(STG_LOG_ERROR, "%s has no [cluster] section: there is nowhere to ship to",
			fl->policy->file);
		return -EINVAL;
	}
	char why[256];
	if (fl->policy->transport == STG_TRANSPORT_RDMA && !stg_rdma_available(why, sizeof(why))) {
		stg_log(STG_LOG_ERROR, "%s: transport = rdma, but %s; use tcp or auto",
			fl->policy->file, why);
		return -ENODEV;
	}
	r = stg_secret_from_policy(fl->policy, &fl->secret, err, sizeof(err));
	if (r < 0) {
		stg_log(STG_LOG_ERROR, "%s", err);
		return r;
	}
	/* Every login to a server takes libcrypto, loaded on first use: say
	 * now that it cannot be, not at each attempt. */
	if (!stg_libcrypto())
		return -ELIBACC;
	r = stg_cache_open(fl->policy->cache_dir, &fl->cache);
	if (r < 0) {
		stg_log(STG_LOG_ERROR, "cannot open the cache '%s': %s", fl->policy->cache_dir,
			stg_cache_strerror(r));
		return r;
	}
	char whose[PATH_MAX + 256];
	r = stg_cache_owned(fl->cache, whose, sizeof(whose));
	if (r < 0) {
		stg_log(STG_LOG_ERROR, "the cache is refused: %s", whose);
		return r;
	}
	fl->cache->capacity = fl->policy->capacity;
	fl->cache->ship = true;
	fl->uid = (uint32_t)getuid();
	fl->timeout_ms = (int)fl->policy->timeout_s * 1000;
	fl->slot_budget = SLOT_BUDGET;
	fl->nservers = fl->policy->nservers;
	return 0;
}

static int run(struct flusher *fl, int lockfd, bool once, int idle_exit_s)
{
	/* A user may hold only so many inotify instances (128 by default):
	 * past that, the queue is looked at every second instead. */
	int inofd = watch_queue(fl->cache);
	if (inofd < 0)
		stg_log_errno(STG_LOG_WARN, inofd, "cannot watch the queue (too many inotify "
			      "instances?): looking at it every second instead");
	size_t recovered = 0;
	if (stg_queue_recover(fl->cache, &recovered) == 0 && recovered)
		stg_log(STG_LOG_INFO, "queued %zu versions that were never shipped", recovered);
	int64_t idle_since = stg_now_ns();
	int delay_ms = 100, status = 0;
	while (!stop_signal) {
		struct pass ps;
		if (ship_pass(fl, &ps) < 0) {
			status = 1;
			break;
		}
		size_t left = ps.blocked + ps.failed;
		state_write(fl, left, left ? "waiting for servers" : "idle");
		if (ps.queued)
			idle_since = stg_now_ns();
		if (once) {
			if (left)
				stg_log(STG_LOG_ERROR, "%zu versions could not be replicated", left);
			status = left ? 1 : 0;
			break;
		}
		if (left) {
			/* Something is stuck: try again later, less often. */
			wait_for_work(inofd, delay_ms);
			delay_ms = delay_ms * 2 > 5000 ? 5000 : delay_ms * 2;
			continue;
		}
		delay_ms = 100;
		if (stg_now_ns() - idle_since < (int64_t)idle_exit_s * 1000000000) {
			wait_for_work(inofd, 1000);
			continue;
		}
		/* Leave, unless something arrived meanwhile: whoever queues
		 * checks the lock after queueing, so either it sees us gone and
		 * starts a flusher, or we see its entry here. */
		flock(lockfd, LOCK_UN);
		struct stg_queue_item *items;
		size_t n = 0;
		if (stg_queue_list(fl->cache, &items, &n) == 0)
			free(items);
		if (n == 0)
			break;
		if (flock(lockfd, LOCK_EX | LOCK_NB) < 0)
			break; /* another flusher took over */
		idle_since = stg_now_ns();
	}
	if (inofd >= 0)
		close(inofd);
	return status;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"once", no_argument, NULL, 'o'},
		{"idle-exit", required_argument, NULL, 'i'},
		{"log-level", required_argument, NULL, 'L'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{0},
	};
	const char *policy_file = NULL;
	bool once = false;
	int idle_exit_s = DEFAULT_IDLE_EXIT_S;
	stg_log_max_level = STG_LOG_INFO;
	stg_log_init_from_env();
	int c;
	while ((c = getopt_long(argc, argv, "p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': policy_file = optarg; break;
		case 'o': once = true; break;
		case 'i': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v < 0 || v > 86400) {
				fprintf(stderr, "stagehand-flusher: bad --idle-exit '%s'\n", optarg);
				return 2;
			}
			idle_exit_s = (int)v;
			break;
		}
		case 'L': {
			int l = stg_log_level_parse(optarg);
			if (l < 0) {
				fprintf(stderr, "stagehand-flusher: bad --log-level '%s'\n", optarg);
				return 2;
			}
			stg_log_max_level = (enum stg_log_level)l;
			break;
		}
		case 'h': usage(stdout); return 0;
		case 'V': printf("stagehand-flusher %s\n", STAGEHAND_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stagehand-flusher: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (stg_log_open_daemon("stagehand-flusher") < 0) {
		fprintf(stderr, "stagehand-flusher: cannot open $STAGEHAND_LOG_FILE: %s\n",
			strerror(errno));
		return 1;
	}
	static struct flusher fl;
	pthread_mutex_init(&fl.lock, NULL);
	pthread_cond_init(&fl.job_cond, NULL);
	pthread_cond_init(&fl.done_cond, NULL);
	if (load(&fl, policy_file) < 0)
		return 1;
	long other = 0;
	int lockfd = take_lock(fl.cache, &other);
	if (lockfd == -EWOULDBLOCK) {
		stg_log(STG_LOG_INFO, "a flusher (pid %ld) already ships '%s'", other, fl.cache->dir);
		return 0;
	}
	if (lockfd < 0) {
		stg_log_errno(STG_LOG_ERROR, lockfd, "cannot lock '%s/flusher.lock'", fl.cache->dir);
		return 1;
	}
	int r = stg_cancel_init();
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "cannot make the stop descriptor");
		return 1;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	stg_log(STG_LOG_INFO, "shipping '%s' to %zu servers, %u replicas", fl.cache->dir,
		fl.nservers, fl.policy->replicas);
	int status = servers_start(&fl) < 0 ? 1 : run(&fl, lockfd, once, idle_exit_s);
	state_leave(&fl); /* (it reads the servers' counts) */
	servers_stop(&fl);
	stg_log(STG_LOG_INFO, "exiting: %llu versions shipped",
		(unsigned long long)fl.versions_shipped);
	close(lockfd);
	stg_cache_free(fl.cache);
	stg_policy_free(fl.policy);
	return status;
}
