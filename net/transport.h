/* SPDX-License-Identifier: MIT */
/* What a transport provides: connecting, listening and accepting, so that a
 * client (open.c) and the server's one listener take every transport alike;
 * and to the framed connection (conn.c), a reliable, ordered byte stream
 * moved without blocking, a way to wait for progress, and, for transports
 * with one-sided operations (RDMA), registered memory and the two moves of
 * a chunk object: the server pulls a client's object (PUT) and pushes one
 * into a client's memory (GET). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"

struct stg_conn;
struct stg_listener;

/* Whether to take a connection from peer ("host:port"; host its numeric
 * address; fd its socket, or -1 where it has none yet): its admission
 * slot (>= 0), or -1 with why, which the transport tells the peer. */
typedef int stg_admit_fn(void *arg, const char *host, const char *peer, int fd, char *why,
			 size_t whylen);

struct stg_transport {
	const char *name;

	/* Connects to hostport ("host:port") within connect_ms; the
	 * connection's operations then have timeout_ms each. On failure why
	 * may say what failed. Returns 0, -ENODEV (the transport cannot reach
	 * the host), -ECONNREFUSED, -ETIMEDOUT or -errno. */
	int (*connect)(const char *hostport, int connect_ms, int timeout_ms, struct stg_conn *ret,
		       char *why, size_t whylen);

	/* Listens on host:port (port 0: any free one). Returns 0, -ENODEV
	 * (with why) where this transport cannot listen there, or -errno. */
	int (*listen)(const char *host, int port, struct stg_listener **ret, char *why,
		      size_t whylen);

	/* Takes one waiting connection request without blocking, and asks
	 * admit about it: refused, the peer is told so (BUSY) and -EBUSY
	 * returned. Returns 0 with *ret the connection (operations of
	 * timeout_ms each), -EAGAIN when none waits, -EPROTO for a peer not
	 * speaking our protocol, -ECONNABORTED for one that could not be set
	 * up (logged), or another -errno, the listener's own failure: then a
	 * slot admit gave is the caller's to give back. */
	int (*accept)(struct stg_listener *l, stg_admit_fn *admit, void *arg, int timeout_ms,
		      struct stg_conn *ret);

	void (*unlisten)(struct stg_listener *l);

	/* Moves up to len bytes. Returns the count (> 0), -EAGAIN when nothing
	 * can move now, or -errno; read returns 0 when the peer has closed. */
	ssize_t (*read)(struct stg_conn *c, void *buf, size_t len);
	ssize_t (*write)(struct stg_conn *c, const void *buf, size_t len);

	/* Waits until read (or write, when for_write) may make progress, at
	 * most timeout_ms (< 0: no limit). Returns 0 or -ETIMEDOUT or -errno. */
	int (*wait)(struct stg_conn *c, bool for_write, int timeout_ms);

	/* The descriptor that becomes ready on progress, and its events. */
	int (*pollable)(struct stg_conn *c, bool for_write, short *events);

	void (*close)(struct stg_conn *c);

	/* One-sided moves; NULL for a stream-only transport. */
	bool one_sided;
	/* (Re-)registers c->pool (pool_size bytes) for remote reads and writes. */
	int (*pool_register)(struct stg_conn *c);
	/* The key the peer uses to reach the pool. */
	uint32_t (*pool_rkey)(struct stg_conn *c);
	/* Copies len bytes from the peer's (addr, rkey) into the pool (pull),
	 * or from the pool into the peer's (addr, rkey) (push), before the
	 * deadline. Returns 0 or -errno. */
	int (*pull)(struct stg_conn *c, uint64_t addr, uint32_t rkey, uint32_t len);
	int (*push)(struct stg_conn *c, uint32_t len, uint64_t addr, uint32_t rkey);
};

/* A transport's listening end. */
struct stg_listener {
	const struct stg_transport *t;
	int fd;          /* readable when a connection request may wait */
	int port;        /* the one bound */
	char where[160]; /* "host:port", and for RDMA its device */
};

extern const struct stg_transport stg_tcp_transport;
#if HAVE_RDMA
extern const struct stg_transport stg_rdma_transport;
#endif
