/* SPDX-License-Identifier: MIT */
/* A client that misbehaves over RDMA, for tests/bats/transport.bats: each
 * case must make the server drop the connection (and nothing else). Prints
 * one line per case, "CASE dropped" or "CASE served", and exits 0 when every
 * case was dropped.
 *
 *   rdma-rogue HOST:PORT SECRET_FILE */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "chunk.h"
#include "conn.h"
#include "transport.h"
#include "wire.h"

/* Sends m and reports whether the server dropped the connection instead of
 * answering. */
static bool dropped_after(struct stg_conn *c, const struct stg_msg *m)
{
	if (stg_conn_send_msg(c, m) < 0)
		return true;
	struct stg_msg rep;
	for (;;) {
		int r = stg_conn_recv(c, STG_WIRE_MAX_BODY, &rep);
		if (r < 0)
			return r != -ETIMEDOUT;
		/* An ERROR with tag 0 precedes the close. */
		if (rep.type == STG_MSG_ERROR && rep.tag == 0)
			continue;
		return false;
	}
}

static int open_conn(const char *hostport, const struct stg_secret *s, bool auth,
		     struct stg_conn *c)
{
	char why[256];
	int r = stg_rdma_transport.connect(hostport, 10000, 10000, c, why, sizeof(why));
	if (r < 0) {
		fprintf(stderr, "rdma-rogue: cannot connect to %s: %s: %s\n", hostport,
			strerror(-r), why);
		return r;
	}
	if (auth && (r = stg_conn_auth_client(c, s, (uint32_t)getuid())) < 0) {
		fprintf(stderr, "rdma-rogue: authentication failed: %s\n", strerror(-r));
		stg_conn_close(c);
	}
	return r;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: rdma-rogue HOST:PORT SECRET_FILE\n");
		return 2;
	}
	static struct stg_secret secret;
	char err[512];
	if (stg_secret_load(argv[2], &secret, err, sizeof(err)) < 0) {
		fprintf(stderr, "rdma-rogue: %s\n", err);
		return 2;
	}
	int bad = 0;
	struct stg_conn c;

	/* 1. Memory the client never registered: the server's READ fails
	 * with a remote access error. */
	if (open_conn(argv[1], &secret, true, &c) < 0)
		return 1;
	static uint8_t unregistered[4096];
	struct stg_msg m = {.type = STG_MSG_PUT_CHUNK_REF, .tag = 7};
	m.put_chunk_ref.addr = (uint64_t)(uintptr_t)unregistered;
	m.put_chunk_ref.rkey = 0x5eed;
	m.put_chunk_ref.len = 1024;
	bool d = dropped_after(&c, &m);
	printf("unregistered-memory %s\n", d ? "dropped" : "served");
	bad += !d;
	stg_conn_close(&c);

	/* 2. A reference before authentication: refused before anything is
	 * read from the client. */
	if (open_conn(argv[1], &secret, false, &c) < 0)
		return 1;
	struct stg_msg ch;
	if (stg_conn_recv(&c, STG_WIRE_MAX_PREAUTH, &ch) < 0 || ch.type != STG_MSG_CHALLENGE) {
		fprintf(stderr, "rdma-rogue: no CHALLENGE\n");
		return 1;
	}
	d = dropped_after(&c, &m);
	printf("before-authentication %s\n", d ? "dropped" : "served");
	bad += !d;
	stg_conn_close(&c);

	/* 3. A CHUNK_REF is a reply, not a request. */
	if (open_conn(argv[1], &secret, true, &c) < 0)
		return 1;
	struct stg_msg r3 = {.type = STG_MSG_CHUNK_REF, .tag = 9};
	r3.chunk_ref.len = STG_CHUNK_HEADER_SIZE;
	d = dropped_after(&c, &r3);
	printf("reply-as-request %s\n", d ? "dropped" : "served");
	bad += !d;
	stg_conn_close(&c);
	return bad ? 1 : 0;
}
