/* SPDX-License-Identifier: MIT */
/* What a transport provides to the framed connection (conn.c): a reliable,
 * ordered byte stream moved without blocking, a way to wait for progress,
 * and, for transports with one-sided operations (RDMA), registered memory
 * and the two moves of a chunk object: the server pulls a client's object
 * (PUT) and pushes one into a client's memory (GET). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct stg_conn;

struct stg_transport {
	const char *name;

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

extern const struct stg_transport stg_tcp_transport;
