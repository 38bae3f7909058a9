/* SPDX-License-Identifier: MIT */
/* The TCP transport: non-blocking sockets, every wait a poll() bounded by the
 * caller's deadline, so a peer that vanishes (a cut link, a stopped host)
 * costs at most the timeout, and ended by the process's cancel (a stop). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cancel.h"
#include "conn.h"
#include "transport.h"
#include "util.h"

static ssize_t tcp_read(struct stg_conn *c, void *buf, size_t len)
{
	for (;;) {
		ssize_t n = recv(c->fd, buf, len, 0);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
}

static ssize_t tcp_write(struct stg_conn *c, const void *buf, size_t len)
{
	for (;;) {
		ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
		if (n > 0)
			return n;
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || errno == EWOULDBLOCK)
			return -EAGAIN;
		return -errno;
	}
}

static int tcp_wait(struct stg_conn *c, bool for_write, int timeout_ms)
{
	return stg_cancel_poll(c->fd, for_write ? POLLOUT : POLLIN, timeout_ms);
}

static int tcp_pollable(struct stg_conn *c, bool for_write, short *events)
{
	*events = (short)(POLLIN | (for_write ? POLLOUT : 0));
	return c->fd;
}

static void tcp_close(struct stg_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

static void tune(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* A cut link is noticed by our deadlines; keepalive covers idle sockets. */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	/* A peer gone for a minute is noticed (the default is two hours): a
	 * server must not keep the slots of dead nodes' connections. */
	int idle = 60, intvl = 10, cnt = 6;
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

void stg_conn_init(struct stg_conn *c, int fd, const char *peer, int timeout_ms)
{
	memset(c, 0, sizeof(*c));
	c->t = &stg_tcp_transport;
	c->fd = fd;
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : STG_CONN_TIMEOUT_MS;
	c->next_tag = 1;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	tune(fd);
}

static int connect_one(const struct addrinfo *ai, int timeout_ms)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			ai->ai_protocol);
	if (fd < 0)
		return -errno;
	int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
	if (r < 0 && errno != EINPROGRESS) {
		r = -errno;
		goto out_close;
	}
	if (r < 0) {
		r = stg_cancel_poll(fd, POLLOUT, timeout_ms);
		if (r < 0)
			goto out_close;
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err) {
			r = -err;
			goto out_close;
		}
	}
	return fd;
out_close:
	close(fd);
	return r;
}

int stg_conn_connect(const char *hostport, int timeout_ms, struct stg_conn *ret)
{
	char host[256], port[16];
	if (stg_conn_split(hostport, host, sizeof(host), port, sizeof(port)) < 0 ||
	    strcmp(port, "0") == 0)
		return -EINVAL;
	if (timeout_ms <= 0)
		timeout_ms = STG_CONN_TIMEOUT_MS;
	struct addrinfo *res;
	int g = stg_conn_resolve(host, port, AI_ADDRCONFIG, &res);
	if (g != 0)
		return g == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
	int64_t deadline = stg_monotonic_ms() + timeout_ms;
	int r = -EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int64_t left = deadline - stg_monotonic_ms();
		if (left <= 0) {
			r = -ETIMEDOUT;
			break;
		}
		r = connect_one(ai, (int)left);
		if (r >= 0)
			break;
	}
	freeaddrinfo(res);
	if (r < 0)
		return r;
	stg_conn_init(ret, r, hostport, timeout_ms);
	return 0;
}

static int tcp_connect(const char *hostport, int connect_ms, int timeout_ms, struct stg_conn *ret,
		       char *why, size_t whylen)
{
	(void)why, (void)whylen;
	int r = stg_conn_connect(hostport, connect_ms, ret);
	if (r == 0 && timeout_ms > 0)
		ret->timeout_ms = timeout_ms;
	return r;
}

static int tcp_listen(const char *host, int port, struct stg_listener **ret, char *why,
		      size_t whylen)
{
	char ports[16];
	snprintf(ports, sizeof(ports), "%d", port);
	struct addrinfo *res;
	int g = stg_conn_resolve(host, ports, AI_PASSIVE, &res);
	if (g != 0) {
		snprintf(why, whylen, "cannot resolve '%s': %s", host, gai_strerror(g));
		return -EINVAL;
	}
	struct stg_listener *tl = calloc(1, sizeof(*tl));
	int fd = tl ? socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0) : -1;
	int one = 1;
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* A whole job connects at once: a long queue (the kernel caps it). */
	if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 4096) < 0) {
		int r = tl ? -errno : -ENOMEM;
		snprintf(why, whylen, "%s", strerror(-r));
		if (fd >= 0)
			close(fd);
		free(tl);
		freeaddrinfo(res);
		return r;
	}
	freeaddrinfo(res);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char nport[16] = "?";
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
		getnameinfo((struct sockaddr *)&ss, sl, NULL, 0, nport, sizeof(nport),
			    NI_NUMERICSERV);
	tl->t = &stg_tcp_transport;
	tl->fd = fd;
	tl->port = atoi(nport);
	snprintf(tl->where, sizeof(tl->where), "%s:%s", host, nport);
	*ret = tl;
	return 0;
}

static int tcp_accept(struct stg_listener *l, stg_admit_fn *admit, void *arg, int timeout_ms,
		      struct stg_conn *ret)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd;
	do
		fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
	while (fd < 0 && (errno == EINTR || errno == ECONNABORTED));
	if (fd < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	char host[64] = "?", port[16] = "?", peer[96];
	getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
		    NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(peer, sizeof(peer), "%s:%s", host, port);
	char why[200];
	int slot = admit(arg, host, peer, fd, why, sizeof(why));
	if (slot < 0) {
		/* Told, so that it tries again later. */
		stg_conn_init(ret, fd, host, 1000);
		stg_conn_send_error(ret, 0, -EBUSY, "%s", why);
		stg_conn_close(ret);
		return -EBUSY;
	}
	stg_conn_init(ret, fd, peer, timeout_ms);
	return 0;
}

static void tcp_unlisten(struct stg_listener *l)
{
	if (!l)
		return;
	close(l->fd);
	free(l);
}

const struct stg_transport stg_tcp_transport = {
	.name = "tcp",
	.connect = tcp_connect,
	.listen = tcp_listen,
	.accept = tcp_accept,
	.unlisten = tcp_unlisten,
	.read = tcp_read,
	.write = tcp_write,
	.wait = tcp_wait,
	.pollable = tcp_pollable,
	.close = tcp_close,
};
