/* SPDX-License-Identifier: MIT */
/* Choosing the transport of a connection: what the policy asks for, what
 * this node and build have, and what the server accepts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cancel.h"
#include "config.h"
#include "conn.h"
#include "transport.h"
#include "util.h"
#if HAVE_RDMA
#include <infiniband/verbs.h>

#endif

/* RDMA, when tried under auto, gets at most this long: a server without it
 * refuses at once, and the TCP attempt needs time of its own. */
#define AUTO_RDMA_TIMEOUT_MS 3000

bool stg_rdma_available(char *why, size_t whylen)
{
#if HAVE_RDMA
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (list)
		ibv_free_device_list(list);
	if (n > 0)
		return true;
	snprintf(why, whylen, "this node has no RDMA device");
	return false;
#else
	snprintf(why, whylen, "this build of stagehand has no RDMA support (libibverbs and "
		 "librdmacm were missing when it was built)");
	return false;
#endif
}

int stg_conn_open(const char *hostport, enum stg_transport_kind kind, int timeout_ms,
		  struct stg_conn *ret, char *why, size_t whylen)
{
	why[0] = '\0';
	const struct stg_transport *tcp = &stg_tcp_transport;
	if (kind == STG_TRANSPORT_TCP)
		return tcp->connect(hostport, timeout_ms, timeout_ms, ret, why, whylen);
	if (!stg_rdma_available(why, whylen)) {
		if (kind == STG_TRANSPORT_RDMA)
			return -ENODEV;
		return tcp->connect(hostport, timeout_ms, timeout_ms, ret, why, whylen);
	}
#if HAVE_RDMA
	int t = timeout_ms;
	if (kind == STG_TRANSPORT_AUTO && (t <= 0 || t > AUTO_RDMA_TIMEOUT_MS))
		t = AUTO_RDMA_TIMEOUT_MS;
	int r = stg_rdma_transport.connect(hostport, t, timeout_ms, ret, why, whylen);
	if (r == 0 || kind == STG_TRANSPORT_RDMA)
		return r;
#endif
	return tcp->connect(hostport, timeout_ms, timeout_ms, ret, why, whylen);
}

#define BUSY_PAUSE_MIN_MS 50
#define BUSY_PAUSE_MAX_MS 2000

int stg_conn_pause_ms(int tries)
{
	static _Thread_local unsigned seed;
	if (!seed)
		seed = (unsigned)stg_monotonic_ms() ^ (unsigned)getpid() ^ (unsigned)(uintptr_t)&seed;
	int ms = BUSY_PAUSE_MIN_MS << (tries < 6 ? tries : 6);
	if (ms > BUSY_PAUSE_MAX_MS)
		ms = BUSY_PAUSE_MAX_MS;
	return ms / 2 + (int)(rand_r(&seed) % (unsigned)(ms / 2 + 1));
}

int stg_conn_login(const char *hostport, enum stg_transport_kind kind, int timeout_ms,
		   const struct stg_secret *s, uint32_t uid, struct stg_conn *ret, char *why,
		   size_t whylen)
{
	if (timeout_ms <= 0)
		timeout_ms = STG_CONN_TIMEOUT_MS;
	int64_t deadline = stg_monotonic_ms() + timeout_ms;
	for (int tries = 0;; tries++) {
		int left = (int)(deadline - stg_monotonic_ms());
		int r = stg_conn_open(hostport, kind, left > 0 ? left : 1, ret, why, whylen);
		if (r < 0) {
			ret->error[0] = '\0'; /* not an earlier try's */
			return r;
		}
		r = stg_conn_auth_client(ret, s, uid);
		if (r == 0)
			return 0;
		stg_conn_close(ret);
		/* Busy, or dropped while we logged in (the server made room for
		 * others): again, after a pause, while there is time. */
		if (r != -EBUSY && r != -ECONNRESET && r != -EPIPE)
			return r;
		int ms = stg_conn_pause_ms(tries);
		if (stg_monotonic_ms() + ms >= deadline)
			return r;
		if (stg_cancel_poll(-1, 0, ms) == -ECANCELED)
			return -ECANCELED;
	}
}
