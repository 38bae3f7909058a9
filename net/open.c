/* SPDX-License-Identifier: MIT */
/* Choosing the transport of a connection: what the policy asks for, what
 * this node and build have, and what the server accepts. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "conn.h"
#if HAVE_RDMA
#include <infiniband/verbs.h>

#include "rdma.h"
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
	if (kind == STG_TRANSPORT_TCP)
		return stg_conn_connect(hostport, timeout_ms, ret);
	if (!stg_rdma_available(why, whylen)) {
		if (kind == STG_TRANSPORT_RDMA)
			return -ENODEV;
		return stg_conn_connect(hostport, timeout_ms, ret);
	}
#if HAVE_RDMA
	int t = timeout_ms;
	if (kind == STG_TRANSPORT_AUTO && (t <= 0 || t > AUTO_RDMA_TIMEOUT_MS))
		t = AUTO_RDMA_TIMEOUT_MS;
	int r = stg_rdma_connect(hostport, t, timeout_ms, ret, why, whylen);
	if (r == 0 || kind == STG_TRANSPORT_RDMA)
		return r;
#endif
	return stg_conn_connect(hostport, timeout_ms, ret);
}
