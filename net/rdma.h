/* SPDX-License-Identifier: MIT */
/* The RDMA transport (libibverbs + librdmacm): connection setup with rdma_cm
 * on the client and the server. Once set up, a connection is an ordinary
 * struct stg_conn (conn.h). Built only where the libraries exist (HAVE_RDMA). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "conn.h"

/* Connects to hostport (the server's TCP address: rdma_cm listens on the
 * same port number) within connect_ms; the connection's operations then
 * have timeout_ms each. On failure why tells what failed, for the log.
 * Returns 0, -ENODEV (no RDMA device reaches the host), -ECONNREFUSED (the
 * server does not accept RDMA), -ETIMEDOUT or -errno. */
int stg_rdma_connect(const char *hostport, int connect_ms, int timeout_ms, struct stg_conn *ret,
		     char *why, size_t whylen);

struct stg_rdma_listener;

/* Listens for RDMA connections on host:port. -ENODEV (with why) when no RDMA
 * device has that address. */
int stg_rdma_listen(const char *host, int port, struct stg_rdma_listener **ret, char *why,
		    size_t whylen);

/* The device the listener is bound to ("rxe0"), or "any". */
const char *stg_rdma_listener_device(const struct stg_rdma_listener *l);

/* Whether to take a connection request from host (its numeric address). */
typedef bool stg_rdma_admit_fn(void *arg, const char *host);

/* Waits up to timeout_ms for a connection request and asks admit about it:
 * refused, it is rejected and -EBUSY returned. Otherwise accepts it: *ret
 * is a connection whose first send waits for the handshake to complete.
 * Returns 0, -EAGAIN (nothing came), -EPROTO (a peer not speaking our
 * protocol, rejected), -EBUSY or -errno. */
int stg_rdma_accept(struct stg_rdma_listener *l, int timeout_ms, stg_rdma_admit_fn *admit,
		    void *admit_arg, int conn_timeout_ms, struct stg_conn *ret);

void stg_rdma_listener_close(struct stg_rdma_listener *l);
