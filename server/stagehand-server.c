/* SPDX-License-Identifier: MIT */
/* stagehand-server: a staging server. Accepts authenticated connections from
 * node flushers and tools on one listener (listen.c; their sessions wait in
 * the event loop, and run on its threads only while at work, loop.c),
 * stores chunks in its segment store and manifests per user, retires old
 * versions and collects garbage in the background. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <getopt.h>
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
#include "libcrypto.h"
#include "log.h"
#include "policy.h"
#include "util.h"
#include "thread.h"
#include "transport.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: stagehand-server --listen HOST:PORT --store DIR --secret-file F [options]\n"
		"       stagehand-server --listen HOST:PORT --store DIR --auth munge [options]\n"
		"\n"
		"Receives staged chunks and manifests from node flushers and serves them\n"
		"for restore. Every connection must prove it knows the shared secret (or\n"
		"its user's key derived from it), or present a MUNGE credential.\n"
		"\n"
		"  --listen HOST:PORT    address to listen on (port 0: any free port)\n"
		"  --store DIR           the store directory (created when missing); it\n"
		"                        must belong to this user or root, unless\n"
		"  --allow-foreign-store (whoever owns it decides what is served)\n"
		"  --secret-file F       the cluster's shared secret (at least 16 bytes)\n"
		"  --auth LIST           what clients may log in with: secret (the default),\n"
		"                        munge (a MUNGE credential names the uid; no secret\n"
		"                        needed), or secret,munge\n"
		"  --munge-socket PATH   munged's socket (default: libmunge's)\n"
		"  --capacity SIZE       bytes of segments at most (e.g. 500G; default: disk)\n"
		"  --segment-size SIZE   seal segments past this size (default 1G, at most 16G)\n"
		"  --gc-interval SECS    collect unreferenced chunks this often (default 60)\n"
		"  --scrub-rate SIZE     verify stored records in the background at this many\n"
		"                        bytes a second (default 32M; 0: never)\n"
		"  --timeout SECS        per request once it has begun (default 30)\n"
		"  --max-connections N   logged-in connections at once (default: as many as\n"
		"                        descriptors allow, up to 65536); when all are\n"
		"                        taken, the one idle the longest is closed\n"
		"  --max-handshakes N    connections logging in at once, a quarter of them\n"
		"                        from any one address (default 256)\n"
		"  --max-per-user N      connections of one uid (default: 3/4 of\n"
		"                        --max-connections)\n"
		"  --handshake-timeout SECS  to log in (default 5)\n"
		"  --idle-timeout SECS   close a connection silent this long between\n"
		"                        requests, over TCP and RDMA (default 60)\n"
		"  --frame-memory SIZE   memory for received frames past 64 KiB, all\n"
		"                        connections together (default 256M, at least\n"
		"                        66M); a frame waits for its share, up to --timeout\n"
		"  --port-file F         write the port listened on into F (with port 0)\n"
		"  --transport T         tcp, rdma or auto (default): besides TCP, accept\n"
		"                        RDMA on the same port number (auto: when a device\n"
		"                        has the address; rdma: or refuse to start)\n"
		"  --accept-v1           also serve clients of protocol version 1, whose\n"
		"                        requests carry no MAC (default: refuse them)\n"
		"  --metrics-file F      write Prometheus metrics into F (for node_exporter's\n"
		"                        textfile collector: F ends in .prom), replaced\n"
		"                        atomically (docs/METRICS.md)\n"
		"  --metrics-interval SECS  how often (default 15)\n"
		"  --log-level L         error, warn, info (default) or debug\n"
		"  --user-key UID        print the key file of user UID (derived from the\n"
		"                        secret) and exit: give it to that user as their\n"
		"                        secret_file, so they can act as themselves only\n"
		"  --help, --version\n");
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static int parse_uint(const char *s, unsigned max, unsigned *ret)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > max)
		return -EINVAL;
	*ret = (unsigned)v;
	return 0;
}

/* The default of --max-connections: as many as descriptors allow, up to
 * this (an idle connection costs a few KiB, and no thread). */
#define DEFAULT_MAX_CONNECTIONS 65536

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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"store", required_argument, NULL, 's'},
		{"secret-file", required_argument, NULL, 'k'},
		{"capacity", required_argument, NULL, 'c'},
		{"segment-size", required_argument, NULL, 'S'},
		{"gc-interval", required_argument, NULL, 'g'},
		{"scrub-rate", required_argument, NULL, 'R'},
		{"timeout", required_argument, NULL, 't'},
		{"max-connections", required_argument, NULL, 'm'},
		{"max-handshakes", required_argument, NULL, 'A'},
		{"max-per-user", required_argument, NULL, 'U'},
		{"handshake-timeout", required_argument, NULL, 'H'},
		{"idle-timeout", required_argument, NULL, 'I'},
		{"frame-memory", required_argument, NULL, 'F'},
		{"port-file", required_argument, NULL, 'P'},
		{"log-level", required_argument, NULL, 'L'},
		{"user-key", required_argument, NULL, 'u'},
		{"transport", required_argument, NULL, 'T'},
		{"allow-foreign-store", no_argument, NULL, 'O'},
		{"accept-v1", no_argument, NULL, '1'},
		{"auth", required_argument, NULL, 'a'},
		{"munge-socket", required_argument, NULL, 'N'},
		{"metrics-file", required_argument, NULL, 'M'},
		{"metrics-interval", required_argument, NULL, 'i'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{0},
	};
	const char *listen_addr = NULL, *store_dir = NULL, *secret_file = NULL, *port_file = NULL;
	struct stg_store_options so = {0};
	unsigned gc_interval = 60, timeout_s = 30, handshake_s = 5, idle_s = 60;
	unsigned metrics_interval = 15;
	const char *metrics_file = NULL, *munge_socket = NULL;
	bool auth_secret = true, auth_munge = false;
	struct admit_limits limits = {.max_connections = DEFAULT_MAX_CONNECTIONS,
					.max_handshakes = 256};
	uint64_t frame_memory = 256ull << 20, scrub_rate = 32ull << 20;
	long user_key = -1;
	bool allow_foreign = false, accept_v1 = false;
	enum stg_transport_kind transport = STG_TRANSPORT_AUTO;
	stg_log_max_level = STG_LOG_INFO;
	stg_log_init_from_env();
	int c;
	while ((c = getopt_long(argc, argv, "l:s:k:h", opts, NULL)) != -1) {
		switch (c) {
		case 'l': listen_addr = optarg; break;
		case 's': store_dir = optarg; break;
		case 'k': secret_file = optarg; break;
		case 'c':
		case 'S':
			if (stg_parse_size(optarg, c == 'c' ? &so.capacity : &so.segment_size) < 0 ||
			    (c == 'S' && (so.segment_size < (1u << 20) ||
					   so.segment_size > (16ull << 30)))) {
				fprintf(stderr, "stagehand-server: bad --%s '%s'\n",
					c == 'c' ? "capacity" : "segment-size (1M to 16G)", optarg);
				return 2;
			}
			break;
		case 'R':
			if (stg_parse_size(optarg, &scrub_rate) < 0) {
				fprintf(stderr, "stagehand-server: bad --scrub-rate '%s' (bytes a "
					"second, e.g. 32M; 0: no scrub)\n", optarg);
				return 2;
			}
			break;
		case 'F':
			if (stg_parse_size(optarg, &frame_memory) < 0 ||
			    frame_memory < STG_WIRE_MAX_BODY + STG_WIRE_MAC_SIZE) {
				fprintf(stderr, "stagehand-server: bad --frame-memory '%s' (at least "
					"66M: one frame of the largest chunk)\n", optarg);
				return 2;
			}
			break;
		case 'M': metrics_file = optarg; break;
		case 'N': munge_socket = optarg; break;
		case 'a':
			if (strcmp(optarg, "secret") == 0 || strcmp(optarg, "munge") == 0 ||
			    strcmp(optarg, "secret,munge") == 0 || strcmp(optarg, "munge,secret") == 0) {
				auth_secret = strstr(optarg, "secret") != NULL;
				auth_munge = strstr(optarg, "munge") != NULL;
			} else {
				fprintf(stderr, "stagehand-server: bad --auth '%s' (secret, munge or "
					"secret,munge)\n", optarg);
				return 2;
			}
			break;
		case 'g':
		case 'i':
		case 't':
		case 'm':
		case 'A':
		case 'U':
		case 'H':
		case 'I': {
			unsigned *dst = c == 'g' ? &gc_interval : c == 'i' ? &metrics_interval :
					c == 't' ? &timeout_s :
					c == 'm' ? &limits.max_connections :
					c == 'A' ? &limits.max_handshakes :
					c == 'U' ? &limits.max_per_user :
					c == 'H' ? &handshake_s : &idle_s;
			if (parse_uint(optarg, 1000000, dst) < 0 || *dst == 0) {
				const struct option *o = opts;
				while (o->val != c)
					o++;
				fprintf(stderr, "stagehand-server: bad --%s '%s' (a whole number from "
					"1 to 1000000)\n", o->name, optarg);
				return 2;
			}
			break;
		}
		case 'P': port_file = optarg; break;
		case '1': accept_v1 = true; break;
		case 'T':
			if (strcmp(optarg, "tcp") == 0)
				transport = STG_TRANSPORT_TCP;
			else if (strcmp(optarg, "rdma") == 0)
				transport = STG_TRANSPORT_RDMA;
			else if (strcmp(optarg, "auto") == 0)
				transport = STG_TRANSPORT_AUTO;
			else {
				fprintf(stderr, "stagehand-server: bad --transport '%s' (tcp, rdma "
					"or auto)\n", optarg);
				return 2;
			}
			break;
		case 'u': {
			char *end;
			errno = 0;
			user_key = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || user_key < 0 || user_key > UINT32_MAX) {
				fprintf(stderr, "stagehand-server: bad --user-key '%s'\n", optarg);
				return 2;
			}
			break;
		}
		case 'L': {
			int l = stg_log_level_parse(optarg);
			if (l < 0) {
				fprintf(stderr, "stagehand-server: bad --log-level '%s'\n", optarg);
				return 2;
			}
			stg_log_max_level = (enum stg_log_level)l;
			break;
		}
		case 'O': allow_foreign = true; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("stagehand-server %s\n", STAGEHAND_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stagehand-server: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (user_key >= 0) {
		static struct stg_secret cluster;
		char err[512], text[256];
		if (!secret_file) {
			fprintf(stderr, "stagehand-server: --user-key needs --secret-file\n");
			return 2;
		}
		if (stg_secret_load(secret_file, &cluster, err, sizeof(err)) < 0 ||
		    cluster.user_key) {
			fprintf(stderr, "stagehand-server: %s\n",
				cluster.user_key ? "--secret-file is a user key, not the cluster's secret"
						 : err);
			return 1;
		}
		int r = stg_user_key_format(&cluster, (uint32_t)user_key, text, sizeof(text));
		if (r < 0) {
			fprintf(stderr, "stagehand-server: cannot derive the key: %s\n", strerror(-r));
			return 1;
		}
		fputs(text, stdout);
		return 0;
	}
	if (!listen_addr || !store_dir || (auth_secret && !secret_file)) {
		fprintf(stderr, "stagehand-server: --listen, --store and --secret-file (unless "
			"--auth munge) are required\n");
		usage(stderr);
		return 2;
	}
	if (secret_file && !auth_secret) {
		fprintf(stderr, "stagehand-server: --secret-file with --auth munge: say --auth "
			"secret,munge to take both\n");
		return 2;
	}
	if (metrics_file && strlen(metrics_file) >= PATH_MAX) {
		fprintf(stderr, "stagehand-server: --metrics-file is too long\n");
		return 2;
	}
	if (munge_socket && strlen(munge_socket) >= sizeof(((struct stg_secret *)0)->munge_socket)) {
		fprintf(stderr, "stagehand-server: --munge-socket '%s' is too long\n", munge_socket);
		return 2;
	}
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
	char err[512];
	if (auth_secret && stg_secret_load(secret_file, &srv.secret, err, sizeof(err)) < 0) {
		stg_log(STG_LOG_ERROR, "%s", err);
		return 1;
	}
	srv.secret.munge = auth_munge;
	if (munge_socket)
		snprintf(srv.secret.munge_socket, sizeof(srv.secret.munge_socket), "%s", munge_socket);
	if (srv.secret.user_key) {
		stg_log(STG_LOG_ERROR, "'%s' is a user's key: the server needs the cluster's secret",
			secret_file);
		return 1;
	}
	if (!allow_foreign && !store_owned(store_dir))
		return 1;
	int64_t opening = stg_now_ns();
	int r = stg_store_open(store_dir, &so, &srv.store);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "cannot open the store '%s'%s", store_dir,
			      r == -EBUSY ? " (another server uses it)" :
			      r == -EPROTO ? " (not a stagehand store of this format)" :
			      r == -EPROTONOSUPPORT ? " (a newer stagehand-server made it a later "
						      "format than this one reads: run that one)" : "");
		return 1;
	}
	r = stg_files_open(stg_store_dirfd(srv.store), &srv.files);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "cannot open the manifests of '%s'", store_dir);
		return 1;
	}
	if (stg_owners_new(&srv.owners) < 0) {
		stg_log(STG_LOG_ERROR, "out of memory");
		return 1;
	}
	/* Before the first client: a user's own chunks must be its own. */
	r = server_refs_load(&srv);
	if (r < 0)
		stg_log_errno(STG_LOG_ERROR, r, "cannot read every manifest of '%s': the chunks of "
			      "those unread are not served until they are sent again, and nothing "
			      "is collected until a start reads them all", store_dir);
	srv.timeout_ms = (int)(timeout_s * 1000);
	srv.handshake_ms = (int)(handshake_s * 1000);
	srv.idle_ms = (int)(idle_s * 1000);
	limits.max_connections = fit_descriptors(limits.max_connections, limits.max_handshakes,
						 limits.max_connections != DEFAULT_MAX_CONNECTIONS);
	if (limits.max_per_user == 0 || limits.max_per_user > limits.max_connections)
		limits.max_per_user = limits.max_connections * 3 / 4 ? limits.max_connections * 3 / 4 : 1;
	if (admit_init(&srv.admit, &limits) < 0) {
		stg_log(STG_LOG_ERROR, "out of memory");
		return 1;
	}
	stg_conn_budget_init(&srv.frames, frame_memory);
	srv.accept_v1 = accept_v1;
	srv.gc_interval_s = gc_interval;
	srv.scrub_rate = scrub_rate;
	srv.capacity = so.capacity;
	srv.metrics_file = metrics_file;
	srv.metrics_interval_s = metrics_interval;
	pthread_cond_init(&srv.metrics_cond, NULL);
	srv.started_ns = stg_now_ns();
	/* Writers first: the collector's epoch turn, and the stop, are not
	 * held off by a stream of manifests. */
	pthread_rwlockattr_t rwa;
	pthread_rwlockattr_init(&rwa);
	pthread_rwlockattr_setkind_np(&rwa, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&srv.manifest_lock, &rwa);
	pthread_rwlockattr_destroy(&rwa);
	pthread_mutex_init(&srv.gc_mutex, NULL);
	pthread_cond_init(&srv.gc_cond, NULL);
	pthread_cond_init(&srv.scrub_cond, NULL);

	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	srv.loops = loops_start(&srv, cores < 1 ? 1 : cores > 64 ? 64 : (unsigned)cores,
				srv.admit.nslots);
	if (!srv.loops)
		return 1;

	if (server_listen(&srv, listen_addr, transport) < 0)
		return 1;
	const char *bound = srv.listeners[0]->where;
	if (port_file) {
		char text[16];
		int n = snprintf(text, sizeof(text), "%d\n", srv.listeners[0]->port);
		if (stg_write_file_atomic(AT_FDCWD, port_file, text, (size_t)n, false) < 0) {
			stg_log(STG_LOG_ERROR, "cannot write the port file '%s'", port_file);
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
		"scanned), %zu (user, chunk) pairs", bound, store_dir,
		(unsigned long long)st.chunks, (unsigned long long)st.segments,
		(double)(stg_now_ns() - opening) / 1e9,
		(unsigned long long)st.recovery_hinted_records,
		(unsigned long long)st.recovery_scanned_bytes, stg_owners_count(srv.owners));

	pthread_t collector, metrics, scrubber;
	r = stg_thread_start(&collector, NULL, server_collector, &srv);
	int mr = metrics_file ? stg_thread_start(&metrics, NULL, server_metrics, &srv) : 0;
	int sr = scrub_rate ? stg_thread_start(&scrubber, NULL, server_scrubber, &srv) : 0;
	if (r != 0 || mr != 0 || sr != 0) {
		stg_log(STG_LOG_ERROR, "cannot start the %s thread",
			r ? "collector" : mr ? "metrics" : "scrub");
		return 1;
	}
	/* Named, so that ps and the tests tell them from the connections'. */
	pthread_setname_np(collector, "collect");
	if (metrics_file)
		pthread_setname_np(metrics, "metrics");
	if (scrub_rate)
		pthread_setname_np(scrubber, "scrub");
	/* Listening, the store open, the port written: ready. */
	char ready[400];
	snprintf(ready, sizeof(ready), "READY=1\nSTATUS=listening on %s\nMAINPID=%ld", bound,
		 (long)getpid());
	r = server_notify(ready);
	if (r < 0)
		stg_log_errno(STG_LOG_WARN, r, "cannot tell the service manager it is ready "
			      "($NOTIFY_SOCKET)");
	server_accept(&srv, &stop_signal);
	server_notify("STOPPING=1");

	/* Whatever was acknowledged is durable already; this makes the rest so. */
	stg_log(STG_LOG_INFO, "stopping (signal %d)", (int)stop_signal);
	server_unlisten(&srv);
	pthread_mutex_lock(&srv.gc_mutex);
	srv.stopping = true;
	pthread_cond_signal(&srv.gc_cond);
	pthread_cond_signal(&srv.metrics_cond);
	pthread_cond_signal(&srv.scrub_cond);
	pthread_mutex_unlock(&srv.gc_mutex);
	pthread_join(collector, NULL);
	if (scrub_rate)
		pthread_join(scrubber, NULL);
	stg_store_sync(srv.store);
	/* Sessions still at work wait for good: the entries are as saved. */
	pthread_rwlock_wrlock(&srv.manifest_lock);
	r = stg_files_save(srv.files);
	if (r < 0)
		stg_log_errno(STG_LOG_WARN, r, "cannot write the path index files: the next start "
			      "reads every entry's path");
	if (metrics_file)
		pthread_join(metrics, NULL); /* its last write says the server is down */
	return 0;
}
