/* SPDX-License-Identifier: MIT */
/* The server's command line: its options, their defaults, and --user-key,
 * which prints a user's key and exits. */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "config.h"
#include "log.h"
#include "util.h"
#include "wire.h"

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

/* --user-key: prints the key file of user uid, derived from the cluster's
 * secret. Returns the exit status. */
static int print_user_key(const char *secret_file, long uid)
{
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
	int r = stg_user_key_format(&cluster, (uint32_t)uid, text, sizeof(text));
	if (r < 0) {
		fprintf(stderr, "stagehand-server: cannot derive the key: %s\n", strerror(-r));
		return 1;
	}
	fputs(text, stdout);
	return 0;
}

int server_options_parse(int argc, char **argv, struct server_options *o)
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
	*o = (struct server_options){
		.gc_interval = 60,
		.timeout_s = 30,
		.handshake_s = 5,
		.idle_s = 60,
		.metrics_interval = 15,
		.auth_secret = true,
		.limits = {.max_connections = DEFAULT_MAX_CONNECTIONS, .max_handshakes = 256},
		.frame_memory = 256ull << 20,
		.scrub_rate = 32ull << 20,
		.transport = STG_TRANSPORT_AUTO,
	};
	long user_key = -1;
	stg_log_max_level = STG_LOG_INFO;
	stg_log_init_from_env();
	int c;
	while ((c = getopt_long(argc, argv, "l:s:k:h", opts, NULL)) != -1) {
		switch (c) {
		case 'l': o->listen_addr = optarg; break;
		case 's': o->store_dir = optarg; break;
		case 'k': o->secret_file = optarg; break;
		case 'c':
		case 'S': {
			uint64_t *size = c == 'c' ? &o->store.capacity : &o->store.segment_size;
			if (stg_parse_size(optarg, size) < 0 ||
			    (c == 'S' && (o->store.segment_size < (1u << 20) ||
					   o->store.segment_size > (16ull << 30)))) {
				fprintf(stderr, "stagehand-server: bad --%s '%s'\n",
					c == 'c' ? "capacity" : "segment-size (1M to 16G)", optarg);
				return 2;
			}
			break;
		}
		case 'R':
			if (stg_parse_size(optarg, &o->scrub_rate) < 0) {
				fprintf(stderr, "stagehand-server: bad --scrub-rate '%s' (bytes a "
					"second, e.g. 32M; 0: no scrub)\n", optarg);
				return 2;
			}
			break;
		case 'F':
			if (stg_parse_size(optarg, &o->frame_memory) < 0 ||
			    o->frame_memory < STG_WIRE_MAX_BODY + STG_WIRE_MAC_SIZE) {
				fprintf(stderr, "stagehand-server: bad --frame-memory '%s' (at least "
					"66M: one frame of the largest chunk)\n", optarg);
				return 2;
			}
			break;
		case 'M': o->metrics_file = optarg; break;
		case 'N': o->munge_socket = optarg; break;
		case 'a':
			if (strcmp(optarg, "secret") == 0 || strcmp(optarg, "munge") == 0 ||
			    strcmp(optarg, "secret,munge") == 0 || strcmp(optarg, "munge,secret") == 0) {
				o->auth_secret = strstr(optarg, "secret") != NULL;
				o->auth_munge = strstr(optarg, "munge") != NULL;
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
			unsigned *dst = c == 'g' ? &o->gc_interval :
					c == 'i' ? &o->metrics_interval :
					c == 't' ? &o->timeout_s :
					c == 'm' ? &o->limits.max_connections :
					c == 'A' ? &o->limits.max_handshakes :
					c == 'U' ? &o->limits.max_per_user :
					c == 'H' ? &o->handshake_s : &o->idle_s;
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
		case 'P': o->port_file = optarg; break;
		case '1': o->accept_v1 = true; break;
		case 'T':
			if (strcmp(optarg, "tcp") == 0)
				o->transport = STG_TRANSPORT_TCP;
			else if (strcmp(optarg, "rdma") == 0)
				o->transport = STG_TRANSPORT_RDMA;
			else if (strcmp(optarg, "auto") == 0)
				o->transport = STG_TRANSPORT_AUTO;
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
		case 'O': o->allow_foreign = true; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("stagehand-server %s\n", STAGEHAND_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stagehand-server: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (user_key >= 0)
		return print_user_key(o->secret_file, user_key);
	if (!o->listen_addr || !o->store_dir || (o->auth_secret && !o->secret_file)) {
		fprintf(stderr, "stagehand-server: --listen, --store and --secret-file (unless "
			"--auth munge) are required\n");
		usage(stderr);
		return 2;
	}
	if (o->secret_file && !o->auth_secret) {
		fprintf(stderr, "stagehand-server: --secret-file with --auth munge: say --auth "
			"secret,munge to take both\n");
		return 2;
	}
	if (o->metrics_file && strlen(o->metrics_file) >= PATH_MAX) {
		fprintf(stderr, "stagehand-server: --metrics-file is too long\n");
		return 2;
	}
	if (o->munge_socket &&
	    strlen(o->munge_socket) >= sizeof(((struct stg_secret *)0)->munge_socket)) {
		fprintf(stderr, "stagehand-server: --munge-socket '%s' is too long\n",
			o->munge_socket);
		return 2;
	}
	return -1;
}
