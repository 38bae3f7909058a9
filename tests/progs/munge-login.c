/* SPDX-License-Identifier: MIT */
/* Logs in to a stagehand server with MUNGE credentials that should be
 * refused, the way a client that made them would (munge.bats):
 *
 *   munge-login HOST:PORT SOCKET expired       a credential of 1 s, sent late
 *   munge-login HOST:PORT SOCKET replayed      one that logged in once already
 *   munge-login HOST:PORT SOCKET other-conn    one made for another connection
 *   munge-login HOST:PORT SOCKET foreign OTHER one from a munged of another key
 *
 * Prints the server's answer ("refused: TEXT" or "accepted") and exits 0 when
 * it was refused, 1 when it was accepted, 2 on any other failure. */
#include <errno.h>
#include <munge.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "conn.h"
#include "wire.h"

static const char *hostport, *sock;

static void die(const char *what, int r)
{
	fprintf(stderr, "munge-login: %s: %s\n", what, strerror(-r));
	exit(2);
}

/* Connects and reads the CHALLENGE: its transcript in t. */
static void open_conn(struct stg_conn *c, struct stg_auth_transcript *t)
{
	int r = stg_conn_connect(hostport, 30000, c);
	if (r < 0)
		die("connect", r);
	struct stg_msg m;
	r = stg_conn_recv(c, STG_WIRE_MAX_PREAUTH, &m);
	if (r < 0 || m.type != STG_MSG_CHALLENGE)
		die("no CHALLENGE", r < 0 ? r : -EPROTO);
	memset(t, 0, sizeof(*t));
	memcpy(t->server_nonce, m.challenge.nonce, sizeof(t->server_nonce));
	t->min_version = m.challenge.min_version;
	t->max_version = m.challenge.max_version;
	t->version = STG_WIRE_VERSION;
	t->uid = (uint32_t)getuid();
}

/* A credential from the munged at socket of server_nonce || key, living ttl
 * seconds (0: munged's default); made no sooner than *ret_time. */
static char *credential(const char *socket, const uint8_t *server_nonce, const uint8_t *key,
			int ttl, time_t *ret_time)
{
	if (ret_time)
		*ret_time = time(NULL);
	uint8_t payload[64];
	memcpy(payload, server_nonce, 32);
	memcpy(payload + 32, key, 32);
	munge_ctx_t ctx = munge_ctx_create();
	munge_ctx_set(ctx, MUNGE_OPT_SOCKET, socket);
	if (ttl)
		munge_ctx_set(ctx, MUNGE_OPT_TTL, ttl);
	char *cred = NULL;
	munge_err_t e = munge_encode(&cred, ctx, payload, sizeof(payload));
	if (e != EMUNGE_SUCCESS) {
		fprintf(stderr, "munge-login: munge_encode: %s\n", munge_strerror(e));
		exit(2);
	}
	munge_ctx_destroy(ctx);
	return cred;
}

/* Sends AUTH_MUNGE with cred and a right proof of key; prints the answer.
 * Returns 1 when accepted, 0 when refused. */
static int send_auth(struct stg_conn *c, struct stg_auth_transcript *t, const char *cred,
		     const uint8_t *key)
{
	struct stg_msg a = {.version = STG_WIRE_VERSION, .type = STG_MSG_AUTH_MUNGE};
	stg_auth_random(t->client_nonce, sizeof(t->client_nonce));
	memcpy(a.auth_munge.nonce, t->client_nonce, sizeof(t->client_nonce));
	stg_auth_derive(key, STG_AUTH_CLIENT_PROOF, t, a.auth_munge.mac);
	a.auth_munge.cred = cred;
	a.auth_munge.cred_len = (uint32_t)strlen(cred);
	int r = stg_conn_send_msg(c, &a);
	if (r < 0)
		die("send AUTH_MUNGE", r);
	struct stg_msg m;
	r = stg_conn_recv(c, STG_WIRE_MAX_PREAUTH + STG_WIRE_MAX_ERROR_TEXT, &m);
	if (r < 0)
		die("no answer to AUTH_MUNGE", r);
	if (m.type == STG_MSG_AUTH_OK) {
		printf("accepted\n");
		return 1;
	}
	if (m.type != STG_MSG_ERROR)
		die("neither AUTH_OK nor ERROR", -EPROTO);
	printf("refused: %.*s\n", (int)m.error.text_len, m.error.text);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: munge-login HOST:PORT SOCKET expired|replayed|other-conn|"
				"foreign [OTHER-SOCKET]\n");
		return 2;
	}
	hostport = argv[1];
	sock = argv[2];
	const char *mode = argv[3];
	uint8_t key[32];
	stg_auth_random(key, sizeof(key));
	struct stg_conn c, d;
	struct stg_auth_transcript t, u;
	open_conn(&c, &t);
	int accepted;
	if (strcmp(mode, "expired") == 0) {
		time_t made;
		char *cred = credential(sock, t.server_nonce, key, 1, &made);
		/* Past its time to live (munged allows none): by the clock, not by
		 * how fast this machine is. */
		while (time(NULL) <= made + 3)
			usleep(100000);
		accepted = send_auth(&c, &t, cred, key);
		free(cred);
	} else if (strcmp(mode, "replayed") == 0) {
		char *cred = credential(sock, t.server_nonce, key, 0, NULL);
		if (!send_auth(&c, &t, cred, key)) {
			fprintf(stderr, "munge-login: the first use was refused\n");
			return 2;
		}
		/* The same credential again, on a new connection. */
		open_conn(&d, &u);
		accepted = send_auth(&d, &u, cred, key);
		free(cred);
	} else if (strcmp(mode, "other-conn") == 0) {
		open_conn(&d, &u);
		char *cred = credential(sock, t.server_nonce, key, 0, NULL);
		accepted = send_auth(&d, &u, cred, key);
		free(cred);
	} else if (strcmp(mode, "foreign") == 0 && argc > 4) {
		char *cred = credential(argv[4], t.server_nonce, key, 0, NULL);
		accepted = send_auth(&c, &t, cred, key);
		free(cred);
	} else {
		fprintf(stderr, "munge-login: unknown mode '%s'\n", mode);
		return 2;
	}
	return accepted ? 1 : 0;
}
