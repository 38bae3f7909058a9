/* SPDX-License-Identifier: MIT */
/* An authenticated, framed protocol connection with a deadline on every
 * operation: what tools, the flusher and the server share. Underneath is TCP
 * or RDMA (net/transport.h); the users of a connection do not know which:
 * chunk objects move with stg_conn_send_bulk / stg_conn_post_bulk from the
 * connection's pool, and arrive as ordinary PUT_CHUNK and CHUNK messages. */
#pragma once

#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "budget.h"
#include "policy.h"
#include "wire.h"

#define STG_CONN_TIMEOUT_MS 10000

struct stg_transport;

/* What the pool is for: the peer reaches it only in the way its use needs
 * (on RDMA, a client's pool is readable by the server for PUT_CHUNK and
 * writable for GET_CHUNK, never both). */
enum stg_pool_use {
	STG_POOL_LOCAL,   /* the server's own buffers */
	STG_POOL_SEND,    /* chunk objects this side sends (PUT_CHUNK) */
	STG_POOL_RECEIVE, /* chunk objects written here (GET_CHUNK) */
};

struct stg_conn {
	const struct stg_transport *t;
	void *impl;      /* the transport's own state */
	int fd;          /* TCP: the socket; RDMA: -1 */
	char peer[300];  /* "host:port" as configured or as accepted */
	int timeout_ms;  /* for each send or receive as a whole */
	uint32_t next_tag;

	/* Receiving: the frame being assembled (its body is decoded in place).
	 * A buffer past 64 KiB is taken from the budget, when there is one, and
	 * freed when the next frame begins or the connection waits for one. */
	uint8_t hdr[STG_WIRE_HEADER_SIZE];
	size_t hdr_got;
	uint8_t *buf;
	size_t cap, body_got;
	uint32_t body_len;
	bool in_body;
	struct stg_conn_budget *budget;
	uint32_t budget_uid;            /* whose frames these are (a server's: its client's) */
	stg_budget_wait_fn budget_wait; /* told of waits for the budget, with c */
	int64_t body_since_ms;          /* when the large frame's budget was taken */
	size_t unread; /* the body of a frame refused for want of memory */

	/* Server: asked once a client has proven uid whether to take it on; a
	 * refusal (-EBUSY and why) is sent instead of AUTH_OK. */
	int (*admit_uid)(struct stg_conn *c, uint32_t uid, char *why, size_t whylen);
	void *admit_arg;

	/* Sending without blocking (stg_conn_post_bulk): a small frame or a
	 * header, then a body that stays the caller's until it is written,
	 * then the body's MAC. */
	uint8_t tx[64 + STG_WIRE_MAC_SIZE];
	size_t tx_len, tx_off;
	const uint8_t *tx_body;
	size_t tx_body_len, tx_body_off;
	uint8_t tx_mac[STG_WIRE_MAC_SIZE];
	size_t tx_mac_len, tx_mac_off;

	/* A server's replies, queued rather than waited for once
	 * stg_conn_queue_replies was called: they go out as the peer reads
	 * (stg_conn_flush), so that a peer that does not read holds no thread. */
	bool queue_replies;
	uint8_t *out;
	size_t out_len, out_off, out_cap;

	/* Memory that chunk objects move through (registered on RDMA). */
	uint8_t *pool;
	size_t pool_size;
	enum stg_pool_use pool_use;

	/* RDMA: the region the peer gave for the reply to its GET_CHUNK_REF
	 * (server), or the tag of our own outstanding one (client). */
	uint32_t landing_tag;
	uint64_t landing_addr;
	uint32_t landing_rkey, landing_cap;
	bool landing;
	/* No memory of either side is exposed or reached before this. */
	bool authenticated;
	/* The protocol version the handshake chose (0 before). From version 2
	 * on, every later frame carries a MAC under its direction's session
	 * key over its number in that direction (docs/PROTOCOL.md). */
	uint8_t version;
	bool macs;
	uint8_t key_tx[STG_SHA256_LEN], key_rx[STG_SHA256_LEN];
	uint64_t seq_tx, seq_rx;

	uint64_t bytes_sent, bytes_received; /* through the stream */
	uint64_t frames_sent, frames_received;
	uint64_t errors_sent; /* ERROR replies (stg_conn_send_error) */
	/* The text of the last ERROR received, or what was wrong with what
	 * the peer sent: why the last call failed. */
	char error[STG_WIRE_MAX_ERROR_TEXT + 1];
};

/* Splits "host:port" or "[v6addr]:port" (port 0..65535). Returns 0 or -EINVAL. */
int stg_conn_split(const char *hostport, char *host, size_t hostlen, char *port, size_t portlen);

/* getaddrinfo() for SOCK_STREAM with flags (AI_PASSIVE, AI_ADDRCONFIG), a
 * numeric address taken as it is: without name services, whose first call
 * on a cold node costs milliseconds (nscd's socket looked for, address
 * families listed). Returns getaddrinfo()'s code. */
int stg_conn_resolve(const char *host, const char *port, int flags, struct addrinfo **res);

/* Connects to hostport over TCP within timeout_ms (every address it resolves
 * to, in turn). Returns 0 or -errno (-ETIMEDOUT, -ECONNREFUSED...). */
int stg_conn_connect(const char *hostport, int timeout_ms, struct stg_conn *ret);

/* Connects over the transport a policy names. For auto: RDMA when this node
 * has a device that reaches the server and the server accepts RDMA, else
 * TCP, with the reason RDMA was not used in why (empty when it was). For
 * rdma: RDMA or an error (-ENODEV: no device here), the reason in why. */
int stg_conn_open(const char *hostport, enum stg_transport_kind kind, int timeout_ms,
		  struct stg_conn *ret, char *why, size_t whylen);

/* The pause before the next try at a server that turned us away (BUSY, or a
 * connection closed to make room), tries already made: doubling from 50 ms
 * to 2 s, each drawn between half and all of it, so that the clients a
 * server turned away together do not come back together. */
int stg_conn_pause_ms(int tries);

/* Opens a connection as stg_conn_open does and authenticates as uid
 * (stg_conn_auth_client). A server that answers BUSY, or drops the
 * connection while it logs in, is tried again after a pause (growing, with
 * jitter) until timeout_ms have passed. On failure *ret is closed, the
 * text of the server's last ERROR still in ret->error. Returns 0 or as
 * those two (-EBUSY: still busy at the deadline). */
int stg_conn_login(const char *hostport, enum stg_transport_kind kind, int timeout_ms,
		   const struct stg_secret *s, uint32_t uid, struct stg_conn *ret, char *why,
		   size_t whylen);

/* "tcp" or "rdma". */
const char *stg_conn_transport(const struct stg_conn *c);

/* Does this node have an RDMA device (and this build the RDMA transport)?
 * When not, why says so. */
bool stg_rdma_available(char *why, size_t whylen);

/* Wraps an accepted TCP socket. */
void stg_conn_init(struct stg_conn *c, int fd, const char *peer, int timeout_ms);

void stg_conn_close(struct stg_conn *c);

/* Client side of the handshake (protocol version STG_WIRE_VERSION): proves
 * knowledge of uid's key, checks the server's proof, and keys the frame MACs.
 * Returns 0, -EACCES (refused, or the server's proof is wrong), -EPROTO (also
 * when the server's versions exclude ours: c->error names both) or -errno. */
int stg_conn_auth_client(struct stg_conn *c, const struct stg_secret *s, uint32_t uid);

/* Server side, in two halves, so that a server waits for the client's
 * answer without a thread: sends a challenge (its nonce kept in *t); then
 * checks the answer, a frame of at most STG_WIRE_MAX_PREAUTH_MUNGE bytes
 * (as long as an AUTH_MUNGE, even where MUNGE is not taken: its sender is
 * told why not; a frame refused at receipt is answered as
 * stg_conn_refuse_preauth does), and completes the login. A version-1
 * client (whose frames carry no MACs) is served only when accept_v1. On
 * success *ret_uid is the authenticated uid. On failure an ERROR has been
 * sent when possible and c->error says why; returns -EACCES, -EPROTO,
 * -EBADMSG or -errno. */
int stg_conn_auth_challenge(struct stg_conn *c, struct stg_auth_transcript *t);
int stg_conn_auth_answer(struct stg_conn *c, const struct stg_secret *s, bool accept_v1,
			 const struct stg_auth_transcript *challenge, const struct stg_msg *answer,
			 uint32_t *ret_uid);

/* A frame received before authentication failed with r: a malformed one
 * (-EPROTO, -EBADMSG) is answered with an ERROR saying why. Returns r. */
int stg_conn_refuse_preauth(struct stg_conn *c, int r);

/* Sends bytes (a whole frame or several) before the deadline. */
int stg_conn_send(struct stg_conn *c, const void *buf, size_t len);

/* Encodes and sends a message. */
int stg_conn_send_msg(struct stg_conn *c, const struct stg_msg *m);

/* Sends an ERROR reply with a printf-style text. */
int stg_conn_send_error(struct stg_conn *c, uint32_t tag, int negerr, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Sends a chunk object without copying it into a frame: type is PUT_CHUNK
 * (the client; obj must lie in the pool) or CHUNK (the server's reply to a
 * GET_CHUNK, from any memory). */
int stg_conn_send_bulk(struct stg_conn *c, uint8_t type, uint32_t tag, const uint8_t *obj,
		       uint32_t len);

/* Receives one frame of at most max_body bytes and decodes it into *ret,
 * whose pointers refer to the connection's buffers until the next receive.
 * Returns 0, -EPIPE (the peer closed between frames), -EPROTO / -EBADMSG
 * (malformed), -EBADE (its MAC is wrong: forged, replayed, reordered or
 * dropped frames; c->error says so), -ETIMEDOUT, -ENOBUFS (the budget stayed
 * spent: the frame's body is left unread, see stg_conn_skip) or -errno. */
int stg_conn_recv(struct stg_conn *c, uint32_t max_body, struct stg_msg *ret);

/* Whether a frame has begun to arrive and is not complete yet. */
bool stg_conn_receiving(const struct stg_conn *c);

/* Whether the frame arriving holds memory of the budget: its rate is then
 * checked every STG_CONN_RATE_CHECK_MS (stg_conn_too_slow). */
bool stg_conn_holds_large_frame(const struct stg_conn *c);
#define STG_CONN_RATE_CHECK_MS 500

/* Whether the large frame arriving holds memory that others wait for while
 * it arrives slower than 1 MiB/s (after a grace of 2 s): then it is to be
 * refused as -ENOBUFS, c->error says why. */
bool stg_conn_too_slow(struct stg_conn *c);

/* Reads and drops the body of a frame refused with -ENOBUFS, within the
 * connection's timeout: its sender, blocked sending it, then reads the
 * refusal instead of a reset. Returns 0 or -errno. */
int stg_conn_skip(struct stg_conn *c);

/* Waits until a frame starts arriving (or the peer closes): timeout_ms < 0
 * waits for ever. The last message received is done with (a large buffer
 * is freed). Returns 0 or -ETIMEDOUT. */
int stg_conn_wait(struct stg_conn *c, int timeout_ms);

/* Between frames, a connection that waits for long gives back what it holds:
 * its receive buffer, its reply queue once empty, and its pool over TCP. */
void stg_conn_rest(struct stg_conn *c);

/* Sends req (its tag is set) and receives the reply, which must have type
 * want and the same tag. An ERROR reply (or one with tag 0, which the server
 * sends before it closes) returns its code as -errno, its text in c->error.
 * A GET_CHUNK's object lands in the pool, which must hold it (stg_conn_pool).
 * Returns 0 or -errno. */
int stg_conn_call(struct stg_conn *c, struct stg_msg *req, uint8_t want, struct stg_msg *ret);


/* The connection's pool, grown to at least size bytes for use: registered
 * once with the device on RDMA (again only when it grows or its use
 * changes), so chunk objects placed there move one-sided. Returns 0 or
 * -errno. */
int stg_conn_pool(struct stg_conn *c, size_t size, enum stg_pool_use use);

/* The caller is done with the pool for now: TCP frees it, RDMA keeps it
 * registered for the next use. */
void stg_conn_pool_idle(struct stg_conn *c);

/* Non-blocking operation, for an event loop (the flusher's io_uring). */

/* Queues a PUT_CHUNK of obj (in the pool) and starts sending it. Returns 0,
 * -EAGAIN (the previous one is still going out: call stg_conn_flush and try
 * again later) or -errno. */
int stg_conn_post_bulk(struct stg_conn *c, uint8_t type, uint32_t tag, const uint8_t *obj,
		       uint32_t len);

/* Sends what is queued (by stg_conn_post_bulk, or a queued reply).
 * Returns 0 (all sent), -EAGAIN or -errno. */
int stg_conn_flush(struct stg_conn *c);

/* From now on, what is sent (replies, errors, chunk objects) goes into a
 * queue of the connection, written as far as the peer takes it at once;
 * stg_conn_flush writes the rest as the peer reads. */
void stg_conn_queue_replies(struct stg_conn *c);

/* Whether queued bytes wait to go out (stg_conn_pollable then asks for
 * writability). */
bool stg_conn_sending(const struct stg_conn *c);

/* Receives a whole frame if one is there. Returns 0, -EAGAIN, or as
 * stg_conn_recv. */
int stg_conn_try_recv(struct stg_conn *c, uint32_t max_body, struct stg_msg *ret);

/* The descriptor to poll, and for what, before the next try: progress on the
 * connection then makes it ready. */
int stg_conn_pollable(struct stg_conn *c, short *events);
