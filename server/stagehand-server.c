/* SPDX-License-Identifier: MIT */
/* stagehand-server: a staging server. Accepts authenticated connections from
 * node flushers and tools on one listener (listen.c; their sessions wait in
 * the event loop, and run on its threads only while at work, loop.c),
 * stores chunks in its segment store and manifests per user, retires old
 * versions and collects garbage in the background. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "conn.h"
#include "internal.h"
#include "options.h"
#include "libcrypto.h"
#include "log.h"
#include "policy.h"
#include "util.h"
#include "thread.h"
#include "transport.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* Raises the limit of open descriptors to the hard one, for n logged-in
 * connections, the handshakes ones logging in (and as many evicted ones
 * still closing) and the server's own files. Returns how many logged-in
 * connections fit; a limit that was asked for and does not fit is
 * warned of. */
static unsigned fit_descriptors(unsigned n, unsigned handshakes, bool asked)
{
	const unsigned own = 64 + 2 * handshakes;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return n;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)n + own)
		return n;
	unsigned fit = rl.rlim_cur > own * 2 ? (unsigned)rl.rlim_cur - own : own;
	stg_log(asked ? STG_LOG_WARN : STG_LOG_INFO, "only %u descriptors may be open (ulimit "
		"-n): %u connections at most, not %u", (unsigned)rl.rlim_cur, fit, n);
	return fit;
}

/* Whether the store belongs to this user or to root, or is yet to be made
 * (else says so): its owner could plant the manifests and chunks it serves.
 * Asked before opening it, which reads what is there. */
static bool store_owned(const char *dir)
{
	struct stat st;
	if (stat(dir, &st) < 0) {
		if (errno == ENOENT)
			return true;
		stg_log_errno(STG_LOG_ERROR, -errno, "cannot check who owns the store '%s'", dir);
		return false;
	}
	if (st.st_uid == 0 || st.st_uid == geteuid())
		return true;
	stg_log(STG_LOG_ERROR, "the store '%s' belongs to uid %u, neither to this server's user "
		"(uid %u) nor to root: whoever owns it decides what is served; "
		"--allow-foreign-store uses it anyway", dir, (unsigned)st.st_uid, (unsigned)geteuid());
	return false;
}

/* Loads the secret, opens the store and reads its manifests. Returns 0 or
 * -1 (said why). */
static int open_store(struct server *srv, const struct server_options *o)
{
	char err[512];
	if (o->auth_secret && stg_secret_load(o->secret_file, &srv->secret, err, sizeof(err)) < 0) {
		stg_log(STG_LOG_ERROR, "%s", err);
		return -1;
	}
	srv->secret.munge = o->auth_munge;
	if (o->munge_socket)
		snprintf(srv->secret.munge_socket, sizeof(srv->secret.munge_socket), "%s",
			 o->munge_socket);
	if (srv->secret.user_key) {
		stg_log(STG_LOG_ERROR, "'%s' is a user's key: the server needs the cluster's secret",
			o->secret_file);
		return -1;
	}
	if (!o->allow_foreign && !store_owned(o->store_dir))
		return -1;
	int r = stg_store_open(o->store_dir, &o->store, &srv->store);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "cannot open the store '%s'%s", o->store_dir,
			      r == -EBUSY ? " (another server uses it)" :
			      r == -EPROTO ? " (not a stagehand store of this format)" :
			      r == -EPROTONOSUPPORT ? " (a newer stagehand-server made it a later "
						      "format than this one reads: run that one)" : "");
		return -1;
	}
	r = stg_files_open(stg_store_dirfd(srv->store), &srv->files);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "cannot open the manifests of '%s'", o->store_dir);
		return -1;
	}
	if (stg_owners_new(&srv->owners) < 0) {
		stg_log(STG_LOG_ERROR, "out of memory");
		return -1;
	}
	/* Before the first client: a user's own chunks must be its own. */
	r = server_refs_load(srv);
	if (r < 0)
		stg_log_errno(STG_LOG_ERROR, r, "cannot read every manifest of '%s': the chunks of "
			      "those unread are not served until they are sent again, and nothing "
			      "is collected until a start reads them all", o->store_dir);
	return 0;
}

/* The limits, the locks and the event loop. Returns 0 or -1. */
static int set_up(struct server *srv, struct server_options *o)
{
	srv->timeout_ms = (int)(o->timeout_s * 1000);
	srv->handshake_ms = (int)(o->handshake_s * 1000);
	srv->idle_ms = (int)(o->idle_s * 1000);
	struct admit_limits *lim = &o->limits;
	lim->max_connections = fit_descriptors(lim->max_connections, lim->max_handshakes,
					       lim->max_connections != DEFAULT_MAX_CONNECTIONS);
	if (lim->max_per_user == 0 || lim->max_per_user > lim->max_connections)
		lim->max_per_user = lim->max_connections * 3 / 4 ? lim->max_connections * 3 / 4 : 1;
	if (admit_init(&srv->admit, lim) < 0) {
		stg_log(STG_LOG_ERROR, "out of memory");
		return -1;
	}
	stg_conn_budget_init(&srv->frames, o->frame_memory);
	srv->accept_v1 = o->accept_v1;
	srv->gc_interval_s = o->gc_interval;
	srv->scrub_rate = o->scrub_rate;
	srv->capacity = o->store.capacity;
	srv->metrics_file = o->metrics_file;
	srv->metrics_interval_s = o->metrics_interval;
	pthread_cond_init(&srv->metrics_cond, NULL);
	srv->started_ns = stg_now_ns();
	/* Writers first: the collector's epoch turn, and the stop, are not
	 * held off by a stream of manifests. */
	pthread_rwlockattr_t rwa;
	pthread_rwlockattr_init(&rwa);
	pthread_rwlockattr_setkind_np(&rwa, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&srv->manifest_lock, &rwa);
	pthread_rwlockattr_destroy(&rwa);
	pthread_mutex_init(&srv->gc_mutex, NULL);
	pthread_cond_init(&srv->gc_cond, NULL);
	pthread_cond_init(&srv->scrub_cond, NULL);

	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	srv->loops = loops_start(srv, cores < 1 ? 1 : cores > 64 ? 64 : (unsigned)cores,
				srv->admit.nslots);
	return srv->loops ? 0 : -1;
}

/* The server's own threads, besides the loop's. */
struct background {
	pthread_t collector, metrics, scrubber;
};

/* The collector, and the metrics and scrub threads when asked for.
 * Returns 0 or -1. */
static int start_background(struct server *srv, struct background *bg)
{
	int r = stg_thread_start(&bg->collector, NULL, server_collector, srv);
	int mr = srv->metrics_file ? stg_thread_start(&bg->metrics, NULL, server_metrics, srv) : 0;
	int sr = srv->scrub_rate ? stg_thread_start(&bg->scrubber, NULL, server_scrubber, srv) : 0;
	if (r != 0 || mr != 0 || sr != 0) {
		stg_log(STG_LOG_ERROR, "cannot start the %s thread",
			r ? "collector" : mr ? "metrics" : "scrub");
		return -1;
	}
	/* Named, so that ps and the tests tell them from the connections'. */
	pthread_setname_np(bg->collector, "collect");
	if (srv->metrics_file)
		pthread_setname_np(bg->metrics, "metrics");
	if (srv->scrub_rate)
		pthread_setname_np(bg->scrubber, "scrub");
	return 0;
}

/* Stops them, makes the store durable and writes the path index files. */
static void stop_background(struct server *srv, struct background *bg)
{
	pthread_mutex_lock(&srv->gc_mutex);
	srv->stopping = true;
	pthread_cond_signal(&srv->gc_cond);
	pthread_cond_signal(&srv->metrics_cond);
	pthread_cond_signal(&srv->scrub_cond);
	pthread_mutex_unlock(&srv->gc_mutex);
	pthread_join(bg->collector, NULL);
	if (srv->scrub_rate)
		pthread_join(bg->scrubber, NULL);
	stg_store_sync(srv->store);
	/* Sessions still at work wait for good: the entries are as saved. */
	pthread_rwlock_wrlock(&srv->manifest_lock);
	int r = stg_files_save(srv->files);
	if (r < 0)
		stg_log_errno(STG_LOG_WARN, r, "cannot write the path index files: the next start "
			      "reads every entry's path");
	if (srv->metrics_file)
		pthread_join(bg->metrics, NULL); /* its last write says the server is down */
}

int main(int argc, char **argv)
{
	struct server_options o;
	int status = server_options_parse(argc, argv, &o);
	if (status >= 0)
		return status;
	if (stg_log_open_daemon("stagehand-server") < 0) {
		fprintf(stderr, "stagehand-server: cannot open $STAGEHAND_LOG_FILE: %s\n",
			strerror(errno));
		return 1;
	}

	/* Every login takes libcrypto (nonces, MACs), loaded on first use:
	 * without it, say so now rather than refuse every client. */
	if (!stg_libcrypto())
		return 1;
	static struct server srv;
	int64_t opening = stg_now_ns();
	if (open_store(&srv, &o) < 0)
		return 1;
	if (set_up(&srv, &o) < 0)
		return 1;

	if (server_listen(&srv, o.listen_addr, o.transport) < 0)
		return 1;
	const char *bound = srv.listeners[0]->where;
	if (o.port_file) {
		char text[16];
		int n = snprintf(text, sizeof(text), "%d\n", srv.listeners[0]->port);
		if (stg_write_file_atomic(AT_FDCWD, o.port_file, text, (size_t)n, STG_WRITE_CACHED) < 0) {
			stg_log(STG_LOG_ERROR, "cannot write the port file '%s'", o.port_file);
			return 1;
		}
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct stg_store_stats st;
	stg_store_stats(srv.store, &st);
	stg_log(STG_LOG_INFO, "listening on %s; store '%s': %llu chunks in %llu segments "
		"(opened in %.2f s: %llu records from hint files, %llu bytes of segments "
		"scanned), %zu (user, chunk) pairs", bound, o.store_dir,
		(unsigned long long)st.chunks, (unsigned long long)st.segments,
		(double)(stg_now_ns() - opening) / 1e9,
		(unsigned long long)st.recovery_hinted_records,
		(unsigned long long)st.recovery_scanned_bytes, stg_owners_count(srv.owners));

	struct background bg;
	if (start_background(&srv, &bg) < 0)
		return 1;
	/* Listening, the store open, the port written: ready. */
	char ready[400];
	snprintf(ready, sizeof(ready), "READY=1\nSTATUS=listening on %s\nMAINPID=%ld", bound,
		 (long)getpid());
	int r = server_notify(ready);
	if (r < 0)
		stg_log_errno(STG_LOG_WARN, r, "cannot tell the service manager it is ready "
			      "($NOTIFY_SOCKET)");
	server_accept(&srv, &stop_signal);
	server_notify("STOPPING=1");

	/* Whatever was acknowledged is durable already; this makes the rest so. */
	stg_log(STG_LOG_INFO, "stopping (signal %d)", (int)stop_signal);
	server_unlisten(&srv);
	stop_background(&srv, &bg);
	return 0;
}
