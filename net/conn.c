/* SPDX-License-Identifier: MIT */
/* Framed, authenticated TCP connections with deadlines. Sockets are
 * non-blocking and every wait is a poll() bounded by the timeout, so a peer
 * that vanishes (a cut link, a stopped host) costs at most the timeout. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "log.h"
#include "util.h"

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until the deadline. Returns 0, -ETIMEDOUT or -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = events};
		int r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r > 0)
			return 0;
	}
}

int stg_conn_split(const char *hostport, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *colon;
	const char *h = hostport;
	size_t hl;
	if (hostport[0] == '[') {
		const char *end = strchr(hostport, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		h = hostport + 1;
		hl = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = strrchr(hostport, ':');
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - hostport);
	}
	const char *p = colon + 1;
	if (hl == 0 || hl >= hostlen || *p == '\0' || strlen(p) >= portlen)
		return -EINVAL;
	char *end;
	unsigned long n = strtoul(p, &end, 10);
	if (*end != '\0' || n > 65535)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	strcpy(port, p);
	return 0;
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
	c->fd = fd;
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : STG_CONN_TIMEOUT_MS;
	c->next_tag = 1;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	tune(fd);
}

static int connect_one(const struct addrinfo *ai, int64_t deadline)
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
		r = wait_fd(fd, POLLOUT, deadline);
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
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG};
	struct addrinfo *res;
	int g = getaddrinfo(host, port, &hints, &res);
	if (g != 0)
		return g == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
	int64_t deadline = now_ms() + timeout_ms;
	int r = -EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		r = connect_one(ai, deadline);
		if (r >= 0)
			break;
	}
	freeaddrinfo(res);
	if (r < 0)
		return r;
	stg_conn_init(ret, r, hostport, timeout_ms);
	return 0;
}

void stg_conn_close(struct stg_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->buf);
	c->buf = NULL;
	c->cap = 0;
}

int stg_conn_send(struct stg_conn *c, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int64_t deadline = now_ms() + c->timeout_ms;
	while (len > 0) {
		ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			c->bytes_sent += (uint64_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return -errno;
		int r = wait_fd(c->fd, POLLOUT, deadline);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Reads exactly len bytes. -EPIPE when the peer closed before the first byte
 * of a frame (at_start), -EPROTO when it closed inside one. */
static int recv_all(struct stg_conn *c, uint8_t *p, size_t len, int64_t deadline, bool at_start)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = recv(c->fd, p + got, len - got, 0);
		if (n > 0) {
			got += (size_t)n;
			c->bytes_received += (uint64_t)n;
			continue;
		}
		if (n == 0)
			return at_start && got == 0 ? -EPIPE : -EPROTO;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		int r = wait_fd(c->fd, POLLIN, deadline);
		if (r < 0)
			return r;
	}
	return 0;
}

int stg_conn_send_msg(struct stg_conn *c, const struct stg_msg *m)
{
	size_t n = stg_wire_encoded_size(m);
	if (n == 0)
		return -EINVAL;
	uint8_t small[512];
	uint8_t *buf = n <= sizeof(small) ? small : malloc(n);
	if (!buf)
		return -ENOMEM;
	int r = stg_wire_encode(m, buf, n) == n ? stg_conn_send(c, buf, n) : -EINVAL;
	if (buf != small)
		free(buf);
	return r;
}

int stg_conn_send_error(struct stg_conn *c, uint32_t tag, int negerr, const char *fmt, ...)
{
	char text[STG_WIRE_MAX_ERROR_TEXT + 1];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(text))
		n = sizeof(text) - 1;
	/* Only printable ASCII travels in an ERROR. */
	for (int i = 0; i < n; i++)
		if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] > 0x7e)
			text[i] = '?';
	struct stg_msg m = {.type = STG_MSG_ERROR, .tag = tag};
	m.error.code = stg_wire_error_from_errno(negerr);
	m.error.text = text;
	m.error.text_len = (uint32_t)n;
	return stg_conn_send_msg(c, &m);
}

int stg_conn_recv(struct stg_conn *c, uint32_t max_body, struct stg_msg *ret)
{
	int64_t deadline = now_ms() + c->timeout_ms;
	uint8_t hdr[STG_WIRE_HEADER_SIZE];
	int r = recv_all(c, hdr, sizeof(hdr), deadline, true);
	if (r < 0)
		return r;
	struct stg_wire_header h;
	r = stg_wire_header_decode(hdr, max_body, &h);
	if (r < 0)
		return r;
	if (h.length > c->cap) {
		/* Room for the largest frame seen so far (kept for the next). */
		size_t want = h.length < 4096 ? 4096 : h.length;
		uint8_t *nb = malloc(want);
		if (!nb)
			return -ENOMEM;
		free(c->buf);
		c->buf = nb;
		c->cap = want;
	}
	r = recv_all(c, c->buf, h.length, deadline, false);
	if (r < 0)
		return r;
	return stg_wire_decode(&h, c->buf, ret);
}

int stg_conn_wait(struct stg_conn *c, int timeout_ms)
{
	for (;;) {
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		int r = poll(&p, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		return r == 0 ? -ETIMEDOUT : 0;
	}
}

int stg_conn_call(struct stg_conn *c, struct stg_msg *req, uint8_t want, struct stg_msg *ret)
{
	req->tag = c->next_tag++;
	int r = stg_conn_send_msg(c, req);
	if (r < 0)
		return r;
	struct stg_msg m;
	r = stg_conn_recv(c, STG_WIRE_MAX_BODY, &m);
	if (r < 0)
		return r;
	if (m.tag != req->tag)
		return -EPROTO;
	if (m.type == STG_MSG_ERROR) {
		snprintf(c->error, sizeof(c->error), "%.*s", (int)m.error.text_len, m.error.text);
		return stg_wire_error_to_errno(m.error.code);
	}
	if (m.type != want)
		return -EPROTO;
	c->error[0] = '\0';
	*ret = m;
	return 0;
}

int stg_conn_auth_client(struct stg_conn *c, const struct stg_secret *s, uint32_t uid)
{
	struct stg_msg m;
	int r = stg_conn_recv(c, STG_WIRE_MAX_PREAUTH, &m);
	if (r < 0)
		return r;
	if (m.type == STG_MSG_ERROR) {
		snprintf(c->error, sizeof(c->error), "%.*s", (int)m.error.text_len, m.error.text);
		return stg_wire_error_to_errno(m.error.code);
	}
	if (m.type != STG_MSG_CHALLENGE || m.challenge.min_version > STG_WIRE_VERSION ||
	    m.challenge.max_version < STG_WIRE_VERSION)
		return -EPROTO;
	uint8_t server_nonce[STG_AUTH_NONCE_LEN];
	memcpy(server_nonce, m.challenge.nonce, sizeof(server_nonce));
	uint8_t key[STG_SHA256_LEN];
	if (stg_auth_uid_key(s, uid, key) < 0) {
		snprintf(c->error, sizeof(c->error), "the secret file is the key of uid %u, not %u",
			 s->uid, uid);
		return -EACCES;
	}
	struct stg_msg a = {.type = STG_MSG_AUTH, .tag = m.tag};
	a.auth.uid = uid;
	r = stg_auth_random(a.auth.nonce, sizeof(a.auth.nonce));
	if (r < 0)
		goto out;
	stg_auth_client_mac(key, server_nonce, a.auth.nonce, uid, a.auth.mac);
	r = stg_conn_send_msg(c, &a);
	if (r < 0)
		goto out;
	r = stg_conn_recv(c, STG_WIRE_MAX_PREAUTH + STG_WIRE_MAX_ERROR_TEXT, &m);
	if (r < 0)
		goto out;
	if (m.type == STG_MSG_ERROR) {
		snprintf(c->error, sizeof(c->error), "%.*s", (int)m.error.text_len, m.error.text);
		r = stg_wire_error_to_errno(m.error.code);
		goto out;
	}
	if (m.type != STG_MSG_AUTH_OK) {
		r = -EPROTO;
		goto out;
	}
	uint8_t want[STG_AUTH_MAC_LEN];
	stg_auth_server_mac(key, server_nonce, a.auth.nonce, uid, want);
	/* The server proves it knows the key too: a client never talks to an
	 * impostor that merely accepts everything. */
	r = stg_auth_mac_equal(want, m.auth_ok.mac) ? 0 : -EACCES;
	if (r < 0)
		snprintf(c->error, sizeof(c->error), "the server's proof of the secret is wrong");
out:
	explicit_bzero(key, sizeof(key));
	return r;
}

int stg_conn_auth_server(struct stg_conn *c, const struct stg_secret *s, uint32_t *ret_uid)
{
	struct stg_msg ch = {.type = STG_MSG_CHALLENGE, .tag = 0};
	ch.challenge.min_version = STG_WIRE_VERSION;
	ch.challenge.max_version = STG_WIRE_VERSION;
	int r = stg_auth_random(ch.challenge.nonce, sizeof(ch.challenge.nonce));
	if (r < 0)
		return r;
	r = stg_conn_send_msg(c, &ch);
	if (r < 0)
		return r;
	struct stg_msg m;
	r = stg_conn_recv(c, STG_WIRE_MAX_PREAUTH, &m);
	if (r < 0)
		return r;
	if (m.type != STG_MSG_AUTH) {
		stg_conn_send_error(c, m.tag, -EPROTO, "expected AUTH, got %s",
				    stg_msg_type_name(m.type));
		return -EPROTO;
	}
	uint8_t key[STG_SHA256_LEN], want[STG_AUTH_MAC_LEN];
	stg_auth_uid_key(s, m.auth.uid, key); /* a server holds the cluster secret */
	stg_auth_client_mac(key, ch.challenge.nonce, m.auth.nonce, m.auth.uid, want);
	if (!stg_auth_mac_equal(want, m.auth.mac)) {
		explicit_bzero(key, sizeof(key));
		stg_conn_send_error(c, m.tag, -EACCES, "authentication failed");
		return -EACCES;
	}
	struct stg_msg ok = {.type = STG_MSG_AUTH_OK, .tag = m.tag};
	stg_auth_server_mac(key, ch.challenge.nonce, m.auth.nonce, m.auth.uid, ok.auth_ok.mac);
	explicit_bzero(key, sizeof(key));
	r = stg_conn_send_msg(c, &ok);
	if (r < 0)
		return r;
	*ret_uid = m.auth.uid;
	return 0;
}
