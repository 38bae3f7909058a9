/* SPDX-License-Identifier: MIT */
/* The server's one listener: the listening ends of the transports it serves
 * (TCP, and RDMA on the same port number as --transport asks), all watched
 * by the main thread through their ops tables (net/transport.h). It admits
 * what comes (admit.c) and hands each new session to the loop (loop.c).
 * Between connections it also watches the loop's threads, which tell it
 * when all of them are in a step, for being blocked (loops_watch). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "log.h"
#include "transport.h"
#include "util.h"

/* Accepted at most at once from one transport, so that the other, and the
 * watch, have their turn. */
#define BATCH 64

/* The listener failing (out of descriptors, say): accepting again that much
 * later, instead of spinning on a connection it cannot take. */
#define BACKOFF_MS 1000

/* A stop signal that comes between its check and the wait is seen within. */
#define MAX_WAIT_MS 1000

/* Listens for RDMA connections as well, on the TCP port's number, as the
 * transport asks: for auto, only where a device has the address. Returns 0
 * or -1 (the server must not start). */
static int listen_rdma(struct server *srv, enum stg_transport_kind kind, const char *host,
		       int port)
{
	if (kind == STG_TRANSPORT_TCP)
		return 0;
	char why[256];
	if (!stg_rdma_available(why, sizeof(why))) {
		if (kind == STG_TRANSPORT_RDMA) {
			stg_log(STG_LOG_ERROR, "--transport rdma: %s", why);
			return -1;
		}
		stg_log(STG_LOG_INFO, "rdma: not listening (%s): TCP only", why);
		return 0;
	}
#if HAVE_RDMA
	struct stg_listener *l;
	int r = stg_rdma_transport.listen(host, port, &l, why, sizeof(why));
	if (r < 0) {
		if (kind == STG_TRANSPORT_RDMA) {
			stg_log(STG_LOG_ERROR, "--transport rdma: %s", why);
			return -1;
		}
		stg_log(STG_LOG_INFO, "rdma: not listening (%s): TCP only", why);
		return 0;
	}
	srv->listeners[srv->nlisteners++] = l;
	stg_log(STG_LOG_INFO, "rdma: listening on %s", l->where);
	return 0;
#else
	(void)srv, (void)host, (void)port;
	return 0;
#endif
}

int server_listen(struct server *srv, const char *hostport, enum stg_transport_kind kind)
{
	char host[256], port[16], why[256] = "not HOST:PORT";
	struct stg_listener *l;
	int r = stg_conn_split(hostport, host, sizeof(host), port, sizeof(port));
	if (r == 0)
		r = stg_tcp_transport.listen(host, atoi(port), &l, why, sizeof(why));
	if (r < 0) {
		stg_log(STG_LOG_ERROR, "cannot listen on '%s': %s", hostport, why);
		return -1;
	}
	srv->listeners[srv->nlisteners++] = l;
	return listen_rdma(srv, kind, host, l->port);
}

struct admission {
	struct server *srv;
	int slot; /* the one given, or -1 */
};

static int admit_one(void *arg, const char *host, const char *peer, int fd, char *why,
		     size_t whylen)
{
	struct admission *a = arg;
	a->slot = admit_accept(&a->srv->admit, host, fd, why, whylen);
	if (a->slot < 0) {
		char what[400];
		snprintf(what, sizeof(what), "%s: %s", peer, why);
		admit_refused(what);
	}
	return a->slot;
}

/* Starts the session of an accepted connection (admitted already); on
 * failure closes it. */
static void start_session(struct server *srv, struct stg_conn *c, int slot)
{
	struct session *s = session_new(srv, c, slot);
	if (!s) {
		admit_release(&srv->admit, slot);
		stg_conn_close(c);
		return;
	}
	loops_add(srv->loops, s);
}

/* Takes what waits on l, a batch at most. Returns 0, or how long to leave
 * it be. */
static int take(struct server *srv, struct stg_listener *l)
{
	for (int k = 0; k < BATCH; k++) {
		struct admission a = {srv, -1};
		struct stg_conn c;
		int r = l->t->accept(l, admit_one, &a, srv->timeout_ms, &c);
		if (r == 0) {
			start_session(srv, &c, a.slot);
			continue;
		}
		if (a.slot >= 0)
			admit_release(&srv->admit, a.slot);
		if (r == -EAGAIN)
			return 0;
		if (r == -EBUSY || r == -EPROTO || r == -ECONNABORTED)
			continue;
		stg_log_errno(STG_LOG_ERROR, r, "%s: accept", l->t->name);
		return BACKOFF_MS;
	}
	return 0;
}

void server_accept(struct server *srv, volatile sig_atomic_t *stop)
{
	int64_t resume[MAX_LISTENERS] = {0};
	int watch_ms = -1;
	while (!*stop) {
		int64_t now = stg_monotonic_ms();
		int timeout = watch_ms >= 0 && watch_ms < MAX_WAIT_MS ? watch_ms : MAX_WAIT_MS;
		struct pollfd p[1 + MAX_LISTENERS];
		p[0] = (struct pollfd){.fd = loops_watch_fd(srv->loops), .events = POLLIN};
		for (unsigned i = 0; i < srv->nlisteners; i++) {
			bool paused = resume[i] > now;
			p[1 + i] = (struct pollfd){.fd = paused ? -1 : srv->listeners[i]->fd,
						   .events = POLLIN};
			if (paused && resume[i] - now < timeout)
				timeout = (int)(resume[i] - now);
		}
		int n = poll(p, 1 + srv->nlisteners, timeout);
		if (n < 0 && errno != EINTR) {
			stg_log_errno(STG_LOG_ERROR, -errno, "poll");
			break;
		}
		if ((n > 0 && p[0].revents) || watch_ms >= 0)
			watch_ms = loops_watch(srv->loops);
		for (unsigned i = 0; n > 0 && i < srv->nlisteners; i++) {
			if (!p[1 + i].revents)
				continue;
			int pause = take(srv, srv->listeners[i]);
			if (pause)
				resume[i] = stg_monotonic_ms() + pause;
		}
	}
}

void server_unlisten(struct server *srv)
{
	for (unsigned i = 0; i < srv->nlisteners; i++)
		srv->listeners[i]->t->unlisten(srv->listeners[i]);
	srv->nlisteners = 0;
}
