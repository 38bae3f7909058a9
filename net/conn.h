/* SPDX-License-Identifier: MIT */
/* An authenticated, framed protocol connection over TCP with a deadline on
 * every operation: what tools, the flusher's control path and the server
 * share. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "wire.h"

#define STG_CONN_TIMEOUT_MS 10000

struct stg_conn {
	int fd;
	char peer[300];  /* "host:port" as configured or as accepted */
	int timeout_ms;  /* for each send or receive as a whole */
	uint32_t next_tag;
	uint8_t *buf;    /* the last frame received (its body is decoded in place) */
	size_t cap;
	uint64_t bytes_sent, bytes_received;
	char error[STG_WIRE_MAX_ERROR_TEXT + 1]; /* the text of the last ERROR */
};

/* Splits "host:port" or "[v6addr]:port" (port 0..65535). Returns 0 or -EINVAL. */
int stg_conn_split(const char *hostport, char *host, size_t hostlen, char *port, size_t portlen);

/* Connects to hostport within timeout_ms (every address it resolves to, in
 * turn). Returns 0 or -errno (-ETIMEDOUT, -ECONNREFUSED, -EHOSTUNREACH...). */
int stg_conn_connect(const char *hostport, int timeout_ms, struct stg_conn *ret);

/* Wraps an accepted socket. */
void stg_conn_init(struct stg_conn *c, int fd, const char *peer, int timeout_ms);

void stg_conn_close(struct stg_conn *c);

/* Client side of the handshake: proves knowledge of uid's key and checks the
 * server's proof. Returns 0, -EACCES (refused, or the server's proof is
 * wrong), -EPROTO or -errno. */
int stg_conn_auth_client(struct stg_conn *c, const struct stg_secret *s, uint32_t uid);

/* Server side: sends a challenge, checks the client's answer. On success
 * *ret_uid is the authenticated uid. On failure an ERROR has been sent when
 * possible; returns -EACCES, -EPROTO or -errno. */
int stg_conn_auth_server(struct stg_conn *c, const struct stg_secret *s, uint32_t *ret_uid);

/* Sends bytes (a whole frame or several) before the deadline. */
int stg_conn_send(struct stg_conn *c, const void *buf, size_t len);

/* Encodes and sends a message. */
int stg_conn_send_msg(struct stg_conn *c, const struct stg_msg *m);

/* Sends an ERROR reply with a printf-style text. */
int stg_conn_send_error(struct stg_conn *c, uint32_t tag, int negerr, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Receives one frame of at most max_body bytes and decodes it into *ret,
 * whose pointers refer to c->buf until the next receive. Returns 0, -EPIPE
 * (the peer closed between frames), -EPROTO / -EBADMSG (malformed),
 * -ETIMEDOUT or -errno. */
int stg_conn_recv(struct stg_conn *c, uint32_t max_body, struct stg_msg *ret);

/* Waits until a frame starts arriving (or the peer closes): timeout_ms < 0
 * waits for ever. Returns 0 or -ETIMEDOUT. */
int stg_conn_wait(struct stg_conn *c, int timeout_ms);

/* Sends req (its tag is set) and receives the reply, which must have type
 * want and the same tag. An ERROR reply returns its code as -errno, its text
 * in c->error. Returns 0 or -errno. */
int stg_conn_call(struct stg_conn *c, struct stg_msg *req, uint8_t want, struct stg_msg *ret);
