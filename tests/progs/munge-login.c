/* SPDX-License-Identifier: MIT */
/* Logs in to a stagehand server with MUNGE credentials that should be
 * refused, the way a client that made them would (munge.bats):
 *
 *   munge-login HOST:PORT SOCKET expired       a credential of 1 s, sent late
 *   munge-login HOST:PORT SOCKET replayed      one that logged in once already
 *   munge-login HOST:PORT SOCKET other-conn    one made for another connection
 *   munge-login HOST:PORT SOCKET foreign OTHER one from a munged of another key
 *   munge-login HOST:PORT SOCKET old           an AUTH_MUNGE, the login of
 *                                              older clients, carrying a key
 *
 * Each but the last follows the key exchange of docs/PROTOCOL.md ("MUNGE")
 * with a right proof of the exchanged key. Prints the server's answer
 * ("refused: TEXT" or "accepted") and exits 0 when it was refused, 1 when it
 * was accepted, 2 on any other failure. */
#include <errno.h>
#include <munge.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "conn.h"
#include "kx.h"
#include "wire.h"

static const char *hostport, *sock;

static void die(const char *what, int r)
{
	fprintf(stderr, "munge-login: %s: %s\n", what, strerror(-r));
	exit(2);
}

/* One connection through the key exchange, up to the client's credential. */
struct login {
	struct stg_conn c;
	struct stg_auth_transcript t;
	uint8_t x[STG_AUTH_MUNGE_X_LEN];
	uint8_t key[STG_SHA256_LEN];
	uint32_t server_uid;
};

/* Connects, reads the CHALLENGE, sends MUNGE_HELLO and takes the server's
 * MUNGE_SERVER: the exchange's transcript and key in l. */
static void open_login(struct login *l)
{
	memset(l, 0, sizeof(*l));
	int r = stg_conn_connect(hostport, 30000, &l->c);
	if (r < 0)
		die("connect", r);
	struct stg_msg m;
	r = stg_conn_recv(&l->c, STG_WIRE_MAX_PREAUTH, &m);
	if (r < 0 || m.type != STG_MSG_CHALLENGE)
		die("no CHALLENGE", r < 0 ? r : -EPROTO);
	memcpy(l->t.server_nonce, m.challenge.nonce, sizeof(l->t.server_nonce));
	l->t.min_version = m.challenge.min_version;
	l->t.max_version = m.challenge.max_version;
	l->t.version = STG_WIRE_VERSION;
	l->t.uid = (uint32_t)getuid();
	struct stg_kx kx;
	if ((r = stg_kx_new(&kx)) < 0 || (r = stg_auth_random(l->t.client_nonce, 32)) < 0)
		die("key exchange", r);
	struct stg_msg h = {.version = STG_WIRE_VERSION, .type = STG_MSG_MUNGE_HELLO};
	memcpy(h.munge_hello.nonce, l->t.client_nonce, 32);
	memcpy(h.munge_hello.pub, kx.pub, STG_KX_PUB_LEN);
	if ((r = stg_conn_send_msg(&l->c, &h)) < 0 ||
	    (r = stg_conn_recv(&l->c, STG_WIRE_MAX_PREAUTH_MUNGE, &m)) < 0)
		die("MUNGE_HELLO", r);
	if (m.type != STG_MSG_MUNGE_SERVER)
		die("no MUNGE_SERVER", -EPROTO);
	stg_auth_munge_x(&l->t, kx.pub, m.munge_server.pub, l->x);
	uint8_t shared[STG_KX_SHARED_LEN];
	if ((r = stg_kx_shared(&kx, m.munge_server.pub, shared)) < 0 ||
	    (r = stg_auth_munge_key(shared, l->x, l->t.uid, l->key)) < 0)
		die("the exchanged key", r);
	stg_kx_done(&kx);
	/* The server's uid, which its credential vouches for. */
	char *cred = strndup(m.munge_server.cred, m.munge_server.cred_len);
	munge_ctx_t ctx = munge_ctx_create();
	munge_ctx_set(ctx, MUNGE_OPT_SOCKET, sock);
	uid_t uid;
	if (munge_decode(cred, ctx, NULL, NULL, &uid, NULL) != EMUNGE_SUCCESS)
		die("the server's credential", -EACCES);
	l->server_uid = (uint32_t)uid;
	munge_ctx_destroy(ctx);
	free(cred);
}

/* A credential from the munged at socket for l's exchange, readable by the
 * server's uid, living ttl seconds (0: munged's default); made no sooner than
 * *ret_time. */
static char *credential(const char *socket, const struct login *l, int ttl, time_t *ret_time)
{
	if (ret_time)
		*ret_time = time(NULL);
	uint8_t payload[STG_AUTH_MUNGE_PAYLOAD_LEN];
	stg_auth_munge_payload(false, l->x, payload);
	munge_ctx_t ctx = munge_ctx_create();
	munge_ctx_set(ctx, MUNGE_OPT_SOCKET, socket);
	munge_ctx_set(ctx, MUNGE_OPT_UID_RESTRICTION, (uid_t)l->server_uid);
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

/* Prints the answer to the last message of a login. Returns 1 when
 * accepted, 0 when refused. */
static int answer(struct stg_conn *c)
{
	struct stg_msg m;
	int r = stg_conn_recv(c, STG_WIRE_MAX_PREAUTH + STG_WIRE_MAX_ERROR_TEXT, &m);
	if (r < 0)
		die("no answer", r);
	if (m.type == STG_MSG_AUTH_OK) {
		printf("accepted\n");
		return 1;
	}
	if (m.type != STG_MSG_ERROR)
		die("neither AUTH_OK nor ERROR", -EPROTO);
	printf("refused: %.*s\n", (int)m.error.text_len, m.error.text);
	return 0;
}

/* Sends MUNGE_AUTH on l with cred and l's right proof; prints the answer. */
static int send_auth(struct login *l, const char *cred)
{
	struct stg_msg a = {.version = STG_WIRE_VERSION, .type = STG_MSG_MUNGE_AUTH};
	stg_auth_derive(l->key, STG_AUTH_CLIENT_PROOF, &l->t, a.munge_auth.mac);
	a.munge_auth.cred = cred;
	a.munge_auth.cred_len = (uint32_t)strlen(cred);
	int r = stg_conn_send_msg(&l->c, &a);
	if (r < 0)
		die("send MUNGE_AUTH", r);
	return answer(&l->c);
}

/* An older client's AUTH_MUNGE: server nonce || key in its credential. */
static int send_old(void)
{
	struct stg_conn c;
	int r = stg_conn_connect(hostport, 30000, &c);
	struct stg_msg m;
	if (r == 0)
		r = stg_conn_recv(&c, STG_WIRE_MAX_PREAUTH, &m);
	if (r < 0 || m.type != STG_MSG_CHALLENGE)
		die("no CHALLENGE", r < 0 ? r : -EPROTO);
	uint8_t payload[64];
	memcpy(payload, m.challenge.nonce, 32);
	stg_auth_random(payload + 32, 32);
	munge_ctx_t ctx = munge_ctx_create();
	munge_ctx_set(ctx, MUNGE_OPT_SOCKET, sock);
	char *cred = NULL;
	if (munge_encode(&cred, ctx, payload, sizeof(payload)) != EMUNGE_SUCCESS)
		die("munge_encode", -EACCES);
	munge_ctx_destroy(ctx);
	struct stg_msg a = {.version = STG_WIRE_VERSION, .type = STG_MSG_AUTH_MUNGE};
	stg_auth_random(a.auth_munge.nonce, sizeof(a.auth_munge.nonce));
	a.auth_munge.cred = cred;
	a.auth_munge.cred_len = (uint32_t)strlen(cred);
	if ((r = stg_conn_send_msg(&c, &a)) < 0)
		die("send AUTH_MUNGE", r);
	free(cred);
	return answer(&c);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: munge-login HOST:PORT SOCKET expired|replayed|other-conn|"
				"foreign OTHER-SOCKET|old\n");
		return 2;
	}
	hostport = argv[1];
	sock = argv[2];
	const char *mode = argv[3];
	static struct login l, k;
	int accepted;
	if (strcmp(mode, "old") == 0)
		return send_old() ? 1 : 0;
	open_login(&l);
	if (strcmp(mode, "expired") == 0) {
		time_t made;
		char *cred = credential(sock, &l, 1, &made);
		/* Past its time to live (munged allows none): by the clock, not by
		 * how fast this machine is. */
		while (time(NULL) <= made + 3)
			usleep(100000);
		accepted = send_auth(&l, cred);
		free(cred);
	} else if (strcmp(mode, "replayed") == 0) {
		char *cred = credential(sock, &l, 0, NULL);
		if (!send_auth(&l, cred)) {
			fprintf(stderr, "munge-login: the first use was refused\n");
			return 2;
		}
		/* The same credential again, on a new connection. */
		open_login(&k);
		accepted = send_auth(&k, cred);
		free(cred);
	} else if (strcmp(mode, "other-conn") == 0) {
		open_login(&k);
		char *cred = credential(sock, &l, 0, NULL);
		accepted = send_auth(&k, cred);
		free(cred);
	} else if (strcmp(mode, "foreign") == 0 && argc > 4) {
		char *cred = credential(argv[4], &l, 0, NULL);
		accepted = send_auth(&l, cred);
		free(cred);
	} else {
		fprintf(stderr, "munge-login: unknown mode '%s'\n", mode);
		return 2;
	}
	return accepted ? 1 : 0;
}
