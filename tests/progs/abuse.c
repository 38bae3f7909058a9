/* SPDX-License-Identifier: MIT */
/* A hostile client of a staging server (abuse.bats): N connections, one
 * thread each, that never let go. Each is reopened as soon as the server
 * closes or refuses it, so the attack goes on at whatever rate the server
 * allows, until SIGTERM; then it prints what it did.
 *
 *   abuse MODE HOST:PORT N [--from ADDR] [--secret F --uid U] [--ready FILE]
 *
 *   preauth    connects and sends nothing
 *   slowloris  trickles an AUTH frame, one byte a second (with --secret:
 *              authenticates first, then trickles a LIST)
 *   idle       authenticates (--secret, --uid) and sends nothing
 *   oversized  authenticates, sends a 64 MiB PUT_CHUNK frame of garbage and,
 *              once it is answered, stays
 *   bomb       authenticates and sends, one after the other, small PUT_CHUNK
 *              frames whose lz4 chunk expands to 64 MiB (and then fails its
 *              hash: nothing is stored)
 *   headers    authenticates, sends the header of a PUT_CHUNK frame of
 *              64 MiB (with its MAC) and nothing more, and stays
 *   deaf       authenticates, sends STAT requests and never reads a reply,
 *              until the server stops taking them in (its replies back up),
 *              and stays
 *   flood      authenticates and keeps 512 STAT requests in flight, reading
 *              each reply as it comes and sending another: the server always
 *              has more of its requests at hand
 *
 * --from binds the source address (127.0.0.2: another host on loopback).
 * --ready FILE is created once every connection has been tried once (for
 * oversized and bomb: once each has had a frame answered; for headers, once
 * each has sent its header; for deaf, once the server stopped taking in
 * each one's requests; for flood, once each has its requests in flight). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "chunk.h"
#include "conn.h"
#include "policy.h" /* STG_CHUNK_MAX */
#include "wire.h"

/* The largest chunk object a frame may carry: refused only once received. */
#define OVERSIZED_LEN (64u << 20)

enum mode { PREAUTH, SLOWLORIS, IDLE, OVERSIZED, BOMB, HEADERS, DEAF, FLOOD };

static enum mode mode;
static struct sockaddr_in server, from;
static bool bind_from;
static struct stg_secret secret;
static bool have_secret;
static uint32_t uid;
static atomic_int stop, tried, opened, authenticated, refused, frames;

static void on_term(int sig)
{
	(void)sig;
	atomic_store(&stop, 1);
}

/* A blocking TCP connection from --from, or -1. */
static int open_socket(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if ((bind_from && bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0) ||
	    connect(fd, (struct sockaddr *)&server, sizeof(server)) < 0) {
		close(fd);
		return -1;
	}
	atomic_fetch_add(&opened, 1);
	return fd;
}

/* Waits until the server closes fd (or we are stopped), reading what it
 * sends. */
static void hold(int fd)
{
	char buf[4096];
	while (!atomic_load(&stop)) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 200) <= 0)
			continue;
		if (recv(fd, buf, sizeof(buf), 0) <= 0)
			return;
	}
}

/* Holds a connection without reading from it, until the server closes it
 * or we stop. */
static void hold_deaf(int fd)
{
	while (!atomic_load(&stop)) {
		struct pollfd p = {.fd = fd, .events = POLLRDHUP};
		if (poll(&p, 1, 200) > 0)
			return;
	}
}

/* Sends requests without reading their replies until the server takes no
 * more in (a send waits 2 s in vain). Returns whether it came to that. */
static bool deafen(struct stg_conn *c)
{
	c->timeout_ms = 2000;
	struct stg_msg m = {.type = STG_MSG_STAT};
	while (!atomic_load(&stop)) {
		m.tag++;
		int r = stg_conn_send_msg(c, &m);
		if (r == -ETIMEDOUT)
			return true;
		if (r < 0)
			return false;
		atomic_fetch_add(&frames, 1);
	}
	return false;
}

/* Requests a flooding connection keeps in flight: always more than the
 * server serves in a turn. */
#define FLOOD_DEPTH 512

/* Keeps FLOOD_DEPTH requests in flight until the server closes or we stop. */
static void flood(struct stg_conn *c, bool *counted)
{
	struct stg_msg m = {.type = STG_MSG_STAT}, reply;
	for (int i = 0; i < FLOOD_DEPTH; i++) {
		m.tag++;
		if (stg_conn_send_msg(c, &m) < 0)
			return;
	}
	if (!*counted)
		atomic_fetch_add(&tried, 1), *counted = true;
	while (!atomic_load(&stop)) {
		if (stg_conn_recv(c, STG_WIRE_MAX_BODY, &reply) < 0)
			return;
		atomic_fetch_add(&frames, 1);
		m.tag++;
		if (stg_conn_send_msg(c, &m) < 0)
			return;
	}
}

/* Sends bytes one a second until done, the server closes, or we stop. */
static void trickle(int fd, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n && !atomic_load(&stop); i++) {
		if (send(fd, b + i, 1, MSG_NOSIGNAL) != 1)
			return;
		for (int k = 0; k < 5 && !atomic_load(&stop); k++) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			if (poll(&p, 1, 200) > 0) {
				char c;
				if (recv(fd, &c, 1, MSG_PEEK) <= 0)
					return;
				/* An ERROR from the server: it gave up on us. */
				return;
			}
		}
	}
}

/* Connects and authenticates as --uid; 0 or -errno (-EBUSY: refused). */
static int login(struct stg_conn *c)
{
	int fd = open_socket();
	if (fd < 0)
		return -errno;
	stg_conn_init(c, fd, "server", 30000);
	int r = stg_conn_auth_client(c, &secret, uid);
	if (r < 0) {
		stg_conn_close(c);
		return r;
	}
	atomic_fetch_add(&authenticated, 1);
	return 0;
}

/* A frame as this connection seals it (its MAC is right): the server reads
 * it whole before it finds the chunk garbage. */
static int send_oversized(struct stg_conn *c, uint8_t *body)
{
	int r = stg_conn_send_bulk(c, STG_MSG_PUT_CHUNK, 7, body, OVERSIZED_LEN);
	if (r == 0)
		atomic_fetch_add(&frames, 1);
	return r;
}

/* The bomb: the largest chunk there is, of zeros, under a hash that is not
 * theirs. */
static uint8_t *bomb;
static size_t bomb_len;

static int make_bomb(void)
{
	uint8_t *zeros = calloc(1, STG_CHUNK_MAX);
	bomb = malloc(stg_chunk_bound(STG_CHUNK_MAX));
	if (!zeros || !bomb)
		return -1;
	struct stg_hash wrong = {{0}};
	bomb_len = stg_chunk_encode(zeros, STG_CHUNK_MAX, &wrong, &stg_chunk_codec_default, bomb);
	free(zeros);
	return 0;
}

/* Sends bombs until the server closes or we stop; each is answered (with an
 * ERROR) before the next. */
static void throw_bombs(struct stg_conn *c, bool *counted)
{
	while (!atomic_load(&stop)) {
		struct stg_msg m;
		if (stg_conn_send_bulk(c, STG_MSG_PUT_CHUNK, 7, bomb, bomb_len) < 0 ||
		    stg_conn_recv(c, STG_WIRE_MAX_BODY, &m) < 0)
			return;
		atomic_fetch_add(&frames, 1);
		if (!*counted)
			atomic_fetch_add(&tried, 1), *counted = true;
	}
}

static void *attacker(void *arg)
{
	uint8_t *body = arg;
	bool counted = false;
	while (!atomic_load(&stop)) {
		int r = 0;
		if (mode == PREAUTH || (mode == SLOWLORIS && !have_secret)) {
			int fd = open_socket();
			if (fd < 0) {
				r = -1;
			} else {
				if (!counted)
					atomic_fetch_add(&tried, 1), counted = true;
				if (mode == PREAUTH) {
					hold(fd);
				} else {
					/* The CHALLENGE first: what comes after
					 * it is the server giving up on us. */
					char ch[128];
					struct pollfd p = {.fd = fd, .events = POLLIN};
					if (poll(&p, 1, 5000) > 0)
						(void)!recv(fd, ch, sizeof(ch), 0);
					uint8_t a[STG_WIRE_HEADER_SIZE + 68] = {0};
					struct stg_wire_header h = {.type = STG_MSG_AUTH,
								    .length = 68};
					stg_wire_header_encode(a, &h);
					trickle(fd, a, sizeof(a));
				}
				close(fd);
			}
		} else {
			struct stg_conn c;
			r = login(&c);
			if (!counted && (r == 0 || r == -EBUSY) && mode != OVERSIZED &&
			    mode != BOMB && mode != HEADERS && mode != DEAF && mode != FLOOD)
				atomic_fetch_add(&tried, 1), counted = true;
			if (r == -EBUSY)
				atomic_fetch_add(&refused, 1);
			if (r == 0) {
				if (mode == SLOWLORIS) {
					/* (a MAC's worth of bytes after the body: the
					 * server waits for them too) */
					uint8_t l[STG_WIRE_HEADER_SIZE + 8 + STG_WIRE_MAC_SIZE] = {0};
					struct stg_wire_header h = {.type = STG_MSG_LIST,
								    .flags = STG_WIRE_FLAG_MAC,
								    .length = 8, .tag = 1};
					stg_wire_header_encode(l, &h);
					trickle(c.fd, l, sizeof(l));
				} else if (mode == OVERSIZED) {
					/* The frame is refused (its chunk is garbage)
					 * and the connection goes on: it stays. */
					struct stg_msg m;
					if (send_oversized(&c, body) == 0 &&
					    stg_conn_recv(&c, STG_WIRE_MAX_BODY, &m) == 0) {
						if (!counted)
							atomic_fetch_add(&tried, 1), counted = true;
						hold(c.fd);
					}
				} else if (mode == BOMB) {
					throw_bombs(&c, &counted);
				} else if (mode == HEADERS) {
					uint8_t f[STG_WIRE_HEADER_SIZE];
					struct stg_wire_header h = {.version = STG_WIRE_VERSION,
								    .type = STG_MSG_PUT_CHUNK,
								    .flags = STG_WIRE_FLAG_MAC,
								    .length = OVERSIZED_LEN -
									      STG_WIRE_MAC_SIZE,
								    .tag = 7};
					stg_wire_header_encode(f, &h);
					if (send(c.fd, f, sizeof(f), MSG_NOSIGNAL) == (ssize_t)sizeof(f)) {
						atomic_fetch_add(&frames, 1);
						if (!counted)
							atomic_fetch_add(&tried, 1), counted = true;
						hold(c.fd);
					}
				} else if (mode == FLOOD) {
					flood(&c, &counted);
				} else if (mode == DEAF) {
					if (deafen(&c)) {
						if (!counted)
							atomic_fetch_add(&tried, 1), counted = true;
						hold_deaf(c.fd);
					}
				} else {
					hold(c.fd);
				}
				stg_conn_close(&c);
			}
		}
		if (r < 0 && !atomic_load(&stop))
			usleep(10000); /* the server is not there, or refused us */
	}
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: abuse preauth|slowloris|idle|oversized|bomb|headers|deaf|flood HOST:PORT N [--from ADDR] "
			"[--secret F --uid U] [--ready FILE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 4)
		usage();
	const char *modes[] = {"preauth", "slowloris", "idle", "oversized", "bomb", "headers",
			       "deaf", "flood"};
	mode = (enum mode)-1;
	for (int i = 0; i < 8; i++)
		if (strcmp(argv[1], modes[i]) == 0)
			mode = (enum mode)i;
	char host[64], port[16];
	int n = atoi(argv[3]);
	if ((int)mode < 0 || n <= 0 ||
	    stg_conn_split(argv[2], host, sizeof(host), port, sizeof(port)) < 0)
		usage();
	server.sin_family = AF_INET;
	server.sin_port = htons((uint16_t)atoi(port));
	if (inet_pton(AF_INET, host, &server.sin_addr) != 1)
		usage();
	const char *ready = NULL;
	for (int i = 4; i < argc; i += 2) {
		if (i + 1 >= argc)
			usage();
		if (strcmp(argv[i], "--from") == 0) {
			from.sin_family = AF_INET;
			bind_from = inet_pton(AF_INET, argv[i + 1], &from.sin_addr) == 1;
			if (!bind_from)
				usage();
		} else if (strcmp(argv[i], "--secret") == 0) {
			char err[512];
			if (stg_secret_load(argv[i + 1], &secret, err, sizeof(err)) < 0) {
				fprintf(stderr, "abuse: %s\n", err);
				return 1;
			}
			have_secret = true;
		} else if (strcmp(argv[i], "--uid") == 0) {
			uid = (uint32_t)atoi(argv[i + 1]);
		} else if (strcmp(argv[i], "--ready") == 0) {
			ready = argv[i + 1];
		} else {
			usage();
		}
	}
	if ((mode == IDLE || mode == OVERSIZED || mode == BOMB || mode == HEADERS || mode == DEAF) &&
	    !have_secret)
		usage();
	struct sigaction sa = {.sa_handler = on_term};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	uint8_t *body = NULL;
	if (mode == OVERSIZED) {
		body = malloc(OVERSIZED_LEN);
		if (!body)
			return 1;
		memset(body, 0x5a, OVERSIZED_LEN);
	}
	if (mode == BOMB && make_bomb() < 0)
		return 1;
	pthread_t *t = calloc((size_t)n, sizeof(*t));
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 128 << 10);
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], &attr, attacker, body) != 0) {
			fprintf(stderr, "abuse: cannot start thread %d\n", i);
			return 1;
		}
	bool said = false;
	while (!atomic_load(&stop)) {
		if (!said && ready && atomic_load(&tried) >= n) {
			int fd = open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
			if (fd >= 0)
				close(fd);
			said = true;
		}
		usleep(20000);
	}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("abuse %s: %d connections opened, %d authenticated, %d refused busy, %d frames\n",
	       argv[1], atomic_load(&opened), atomic_load(&authenticated), atomic_load(&refused),
	       atomic_load(&frames));
	return 0;
}
