/* SPDX-License-Identifier: MIT */
/* The handshake of a connection (docs/PROTOCOL.md, "Connection and
 * authentication"): the server's CHALLENGE, then either an AUTH proven with
 * the uid's key derived from a shared secret, or the MUNGE login, where each
 * side's munged vouches for its uid and the session keys come from an
 * ephemeral X25519 exchange that both credentials bind. Either way both
 * sides end with the same session keys, and every later frame carries a MAC
 * under them. */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "internal.h"
#include "kx.h"
#include "munge_cred.h"
#include "util.h"

/* The handshake is done: frames from now on are of version v, and from
 * version 2 on carry MACs under the session keys of t. */
static int start_session(struct stg_conn *c, uint8_t v, const uint8_t key[STG_SHA256_LEN],
			 const struct stg_auth_transcript *t, bool server)
{
	if (v >= 2) {
		int r = stg_auth_derive(key, server ? STG_AUTH_KEY_S2C : STG_AUTH_KEY_C2S, t,
					c->key_tx);
		if (r == 0)
			r = stg_auth_derive(key, server ? STG_AUTH_KEY_C2S : STG_AUTH_KEY_S2C, t,
					    c->key_rx);
		if (r < 0)
			return r;
		c->seq_tx = c->seq_rx = 0;
		c->macs = true;
	}
	c->version = v;
	c->authenticated = true;
	return 0;
}

/* The client's last step: sends its proof (a), then takes AUTH_OK, whose
 * proof under key shows that the server knows the key too (what) and saw
 * the same handshake: a client never talks to an impostor that merely
 * accepts everything. Then the session starts. Returns 0 or -errno. */
static int client_finish(struct stg_conn *c, const struct stg_msg *a,
			 const uint8_t key[STG_SHA256_LEN], const struct stg_auth_transcript *t,
			 const char *what)
{
	struct stg_msg m;
	int r = stg_conn_send_msg(c, a);
	if (r == 0)
		r = stg_conn_recv(c, STG_WIRE_MAX_PREAUTH + STG_WIRE_MAX_ERROR_TEXT, &m);
	if (r < 0)
		return r;
	if (m.type == STG_MSG_ERROR)
		return stg_wire_error_to_errno(m.error.code);
	if (m.type != STG_MSG_AUTH_OK || m.version != STG_WIRE_VERSION)
		return stg_conn_refuse(c, -EPROTO, "expected AUTH_OK of version %u, got %s of version %u",
				       STG_WIRE_VERSION, stg_msg_type_name(m.type), m.version);
	uint8_t want[STG_AUTH_MAC_LEN];
	r = stg_auth_derive(key, STG_AUTH_SERVER_PROOF, t, want);
	if (r < 0)
		return r;
	if (!stg_auth_mac_equal(want, m.auth_ok.mac))
		return stg_conn_refuse(c, -EACCES, "the server's proof of %s is wrong", what);
	return start_session(c, STG_WIRE_VERSION, key, t, false);
}

/* ------------------------------------------------------------------------
 * The MUNGE login (docs/PROTOCOL.md, "MUNGE"). Each side's credential
 * carries its label and the exchange's transcript X (auth.h), so it vouches
 * for this exchange and no other; the key comes from the X25519 secret, X
 * and the client's uid. A relay sees both public keys and both credentials,
 * and neither gives it the key.
 * ------------------------------------------------------------------------ */

/* The X25519 secret agreed with peer_pub, turned into the login's key. */
static int munge_key(const struct stg_kx *kx, const uint8_t *peer_pub,
		     const uint8_t x[STG_AUTH_MUNGE_X_LEN], uint32_t uid,
		     uint8_t out[STG_SHA256_LEN])
{
	uint8_t shared[STG_KX_SHARED_LEN];
	int r = stg_kx_shared(kx, peer_pub, shared);
	if (r == 0)
		r = stg_auth_munge_key(shared, x, uid, out);
	explicit_bzero(shared, sizeof(shared));
	return r;
}

/* The uid the policy names as the servers' (munge_server_user, a name or a
 * uid): UINT32_MAX when no such user exists here. */
static uint32_t server_user_uid(const char *user)
{
	char *end;
	unsigned long v = strtoul(user, &end, 10);
	if (*user && !*end && v < UINT32_MAX)
		return (uint32_t)v;
	struct passwd pw, *found = NULL;
	char buf[4096];
	if (getpwnam_r(user, &pw, buf, sizeof(buf), &found) != 0 || !found)
		return UINT32_MAX;
	return (uint32_t)found->pw_uid;
}

/* The client's side, after the CHALLENGE (transcript t): MUNGE_HELLO, then
 * the server's credential checked and the client's sent, restricted to the
 * server's uid. Returns with the session started, or -errno. */
static int munge_client(struct stg_conn *c, const struct stg_secret *s,
			struct stg_auth_transcript *t, uint32_t tag)
{
	struct stg_kx kx = {0};
	uint8_t key[STG_SHA256_LEN], x[STG_AUTH_MUNGE_X_LEN];
	uint8_t payload[STG_AUTH_MUNGE_PAYLOAD_LEN];
	uint8_t got[STG_AUTH_MUNGE_PAYLOAD_LEN];
	char cred[STG_WIRE_MAX_MUNGE_CRED + 1];
	int r = stg_kx_new(&kx);
	if (r == 0)
		r = stg_auth_random(t->client_nonce, sizeof(t->client_nonce));
	if (r < 0)
		goto out;
	struct stg_msg m = {.version = STG_WIRE_VERSION, .type = STG_MSG_MUNGE_HELLO, .tag = tag};
	memcpy(m.munge_hello.nonce, t->client_nonce, STG_AUTH_NONCE_LEN);
	memcpy(m.munge_hello.pub, kx.pub, STG_KX_PUB_LEN);
	r = stg_conn_send_msg(c, &m);
	if (r == 0)
		r = stg_conn_recv(c, STG_WIRE_MAX_PREAUTH_MUNGE, &m);
	if (r < 0)
		goto out;
	if (m.type == STG_MSG_ERROR) {
		r = stg_wire_error_to_errno(m.error.code);
		/* A server older than this login takes MUNGE_HELLO for a
		 * malformed frame. */
		if (r == -EPROTO) {
			char was[sizeof(c->error)];
			snprintf(was, sizeof(was), "%s", c->error);
			stg_conn_refuse(c, r, "%s (a server older than this client's MUNGE login? "
					"upgrade it)", was);
		}
		goto out;
	}
	if (m.type != STG_MSG_MUNGE_SERVER || m.version != STG_WIRE_VERSION) {
		r = stg_conn_refuse(c, -EPROTO, "expected MUNGE_SERVER, got %s",
				    stg_msg_type_name(m.type));
		goto out;
	}
	stg_auth_munge_x(t, kx.pub, m.munge_server.pub, x);
	stg_auth_munge_payload(true, x, payload);
	memcpy(cred, m.munge_server.cred, m.munge_server.cred_len);
	cred[m.munge_server.cred_len] = '\0';
	uint32_t server_uid;
	r = stg_munge_decode(s->munge_socket, cred, &server_uid, got, sizeof(got), c->error,
			     sizeof(c->error));
	if (r < 0) {
		char was[sizeof(c->error)];
		snprintf(was, sizeof(was), "%s", c->error);
		stg_conn_refuse(c, r == -EAGAIN ? r : -EACCES, "the server's %s", was);
		r = r == -EAGAIN ? r : -EACCES;
		goto out;
	}
	if (memcmp(got, payload, sizeof(payload)) != 0) {
		r = stg_conn_refuse(c, -EACCES, "the server's MUNGE credential was made for "
				    "another connection");
		goto out;
	}
	/* Only root and the servers' user run servers: a relay of another
	 * user's, with a key exchange of its own, shows its own uid here. */
	uint32_t want = server_user_uid(s->munge_server_user);
	if (server_uid != 0 && server_uid != want) {
		r = stg_conn_refuse(c, -EACCES,
				    "the server's MUNGE credential is of uid %u, which is neither "
				    "root nor munge_server_user (%s%s): not a server of this cluster",
				    server_uid, s->munge_server_user,
				    want == UINT32_MAX ? ", no such user here" : "");
		goto out;
	}
	r = munge_key(&kx, m.munge_server.pub, x, t->uid, key);
	if (r == -EPROTO)
		stg_conn_refuse(c, r, "the server's public key is not one to agree a key with");
	if (r < 0)
		goto out;
	/* Ours, readable by the server's uid alone, for this exchange. */
	stg_auth_munge_payload(false, x, payload);
	r = stg_munge_encode(s->munge_socket, payload, sizeof(payload), server_uid, cred, sizeof(cred),
			     c->error, sizeof(c->error));
	if (r < 0)
		goto out;
	struct stg_msg a = {.version = STG_WIRE_VERSION, .type = STG_MSG_MUNGE_AUTH, .tag = tag};
	a.munge_auth.cred = cred;
	a.munge_auth.cred_len = (uint32_t)strlen(cred);
	r = stg_auth_derive(key, STG_AUTH_CLIENT_PROOF, t, a.munge_auth.mac);
	if (r == 0)
		r = client_finish(c, &a, key, t, "the exchanged key");
out:
	stg_kx_done(&kx);
	explicit_bzero(key, sizeof(key));
	return r;
}

int stg_conn_auth_client(struct stg_conn *c, const struct stg_secret *s, uint32_t uid)
{
	struct stg_msg m;
	int r = stg_conn_recv(c, STG_WIRE_MAX_PREAUTH, &m);
	if (r < 0)
		return r;
	if (m.type == STG_MSG_ERROR)
		return stg_wire_error_to_errno(m.error.code);
	if (m.type != STG_MSG_CHALLENGE)
		return stg_conn_refuse(c, -EPROTO, "expected CHALLENGE, got %s",
				       stg_msg_type_name(m.type));
	/* This client speaks STG_WIRE_VERSION only: never an older version
	 * (a man in the middle could ask for one), never a newer one. */
	if (m.challenge.min_version > STG_WIRE_VERSION || m.challenge.max_version < STG_WIRE_VERSION)
		return stg_conn_refuse(c, -EPROTO,
				       "the server speaks protocol versions %u..%u, this client "
				       "%u..%u: upgrade the older side",
				       m.challenge.min_version, m.challenge.max_version,
				       STG_WIRE_VERSION, STG_WIRE_VERSION);
	struct stg_auth_transcript t = {.uid = uid,
					.min_version = m.challenge.min_version,
					.max_version = m.challenge.max_version,
					.version = STG_WIRE_VERSION};
	memcpy(t.server_nonce, m.challenge.nonce, sizeof(t.server_nonce));
	if (s->munge)
		return munge_client(c, s, &t, m.tag);
	uint8_t key[STG_SHA256_LEN];
	r = stg_auth_uid_key(s, uid, key);
	if (r == -EACCES)
		return stg_conn_refuse(c, -EACCES, "the secret file is the key of uid %u, not %u",
				       s->uid, uid);
	if (r < 0)
		return r;
	struct stg_msg a = {.version = STG_WIRE_VERSION, .type = STG_MSG_AUTH, .tag = m.tag};
	a.auth.uid = uid;
	r = stg_auth_random(t.client_nonce, sizeof(t.client_nonce));
	if (r < 0)
		goto out;
	memcpy(a.auth.nonce, t.client_nonce, STG_AUTH_NONCE_LEN);
	r = stg_auth_derive(key, STG_AUTH_CLIENT_PROOF, &t, a.auth.mac);
	if (r == 0)
		r = client_finish(c, &a, key, &t, "the secret");
out:
	explicit_bzero(key, sizeof(key));
	return r;
}

/* The client has proven it is uid: whether the server takes it on
 * (c->admit_uid), else BUSY and why are sent. Returns 0 or -EBUSY. */
static int admitted(struct stg_conn *c, uint32_t uid, uint32_t tag)
{
	char why[STG_WIRE_MAX_ERROR_TEXT + 1];
	int r = c->admit_uid ? c->admit_uid(c, uid, why, sizeof(why)) : 0;
	if (r < 0)
		stg_conn_send_error(c, tag, r, "%s", why);
	return r;
}

/* A version-1 AUTH, checked and answered as version 1 did: no frame MACs. */
static int auth_v1(struct stg_conn *c, const uint8_t key[STG_SHA256_LEN],
		   const uint8_t *server_nonce, const struct stg_msg *m)
{
	uint8_t want[STG_AUTH_MAC_LEN];
	int r = stg_auth_client_mac(key, server_nonce, m->auth.nonce, m->auth.uid, want);
	if (r < 0)
		return r;
	if (!stg_auth_mac_equal(want, m->auth.mac))
		return -EACCES;
	r = admitted(c, m->auth.uid, m->tag);
	if (r < 0)
		return r;
	struct stg_msg ok = {.version = 1, .type = STG_MSG_AUTH_OK, .tag = m->tag};
	r = stg_auth_server_mac(key, server_nonce, m->auth.nonce, m->auth.uid, ok.auth_ok.mac);
	if (r == 0)
		r = stg_conn_send_msg(c, &ok);
	if (r == 0)
		r = start_session(c, 1, key, NULL, true);
	return r;
}

/* Refuses with ACCES, saying why (c->error) to the client and returning it. */
static int refuse_login(struct stg_conn *c, uint32_t tag, int r)
{
	stg_conn_send_error(c, tag, r, "%s", c->error);
	return r;
}

/* The server's side of the MUNGE login, from the client's MUNGE_HELLO m
 * (transcript t): its credential sent, the client's checked. */
static int munge_server(struct stg_conn *c, const struct stg_secret *s,
			struct stg_auth_transcript *t, const struct stg_msg *hello,
			uint32_t *ret_uid)
{
	if (!s->munge) {
		stg_conn_refuse(c, -EACCES, "a client with a MUNGE credential, and this server "
				"takes secrets only: start it with --auth munge, or set the "
				"client's auth = secret");
		return refuse_login(c, hello->tag, -EACCES);
	}
	struct stg_kx kx = {0};
	uint8_t key[STG_SHA256_LEN], x[STG_AUTH_MUNGE_X_LEN];
	uint8_t payload[STG_AUTH_MUNGE_PAYLOAD_LEN];
	uint8_t got[STG_AUTH_MUNGE_PAYLOAD_LEN], client_pub[STG_KX_PUB_LEN];
	char cred[STG_WIRE_MAX_MUNGE_CRED + 1];
	memcpy(t->client_nonce, hello->munge_hello.nonce, STG_AUTH_NONCE_LEN);
	memcpy(client_pub, hello->munge_hello.pub, STG_KX_PUB_LEN);
	int r = stg_kx_new(&kx);
	if (r < 0)
		goto out;
	stg_auth_munge_x(t, client_pub, kx.pub, x);
	/* Ours vouches for the server's uid and this exchange; its payload
	 * is public, so any uid may read it. */
	stg_auth_munge_payload(true, x, payload);
	r = stg_munge_encode(s->munge_socket, payload, sizeof(payload), STG_MUNGE_ANY_UID, cred, sizeof(cred),
			     c->error, sizeof(c->error));
	if (r == -EAGAIN)
		goto out_busy;
	if (r < 0)
		goto out;
	struct stg_msg m = {.version = STG_WIRE_VERSION, .type = STG_MSG_MUNGE_SERVER,
			    .tag = hello->tag};
	memcpy(m.munge_server.pub, kx.pub, STG_KX_PUB_LEN);
	m.munge_server.cred = cred;
	m.munge_server.cred_len = (uint32_t)strlen(cred);
	r = stg_conn_send_msg(c, &m);
	if (r == 0)
		r = stg_conn_recv(c, STG_WIRE_MAX_PREAUTH_MUNGE, &m);
	if (r < 0) {
		stg_conn_refuse_preauth(c, r);
		goto out;
	}
	if (m.type != STG_MSG_MUNGE_AUTH || m.version != STG_WIRE_VERSION) {
		r = stg_conn_refuse(c, -EPROTO, "expected MUNGE_AUTH, got %s",
				    stg_msg_type_name(m.type));
		stg_conn_send_error(c, m.tag, -EPROTO, "%s", c->error);
		goto out;
	}
	memcpy(cred, m.munge_auth.cred, m.munge_auth.cred_len);
	cred[m.munge_auth.cred_len] = '\0';
	stg_auth_munge_payload(false, x, payload);
	uint32_t uid;
	r = stg_munge_decode(s->munge_socket, cred, &uid, got, sizeof(got), c->error, sizeof(c->error));
	if (r == -EAGAIN)
		goto out_busy;
	if (r < 0) {
		r = refuse_login(c, m.tag, -EACCES);
		goto out;
	}
	if (memcmp(got, payload, sizeof(payload)) != 0) {
		stg_conn_refuse(c, -EACCES, "MUNGE credential refused: it was made for another "
				"connection");
		r = refuse_login(c, m.tag, -EACCES);
		goto out;
	}
	t->uid = uid;
	r = munge_key(&kx, client_pub, x, uid, key);
	if (r == -EPROTO) {
		stg_conn_refuse(c, r, "the client's public key is not one to agree a key with");
		r = refuse_login(c, m.tag, -EACCES);
		goto out;
	}
	uint8_t want[STG_AUTH_MAC_LEN];
	if (r == 0)
		r = stg_auth_derive(key, STG_AUTH_CLIENT_PROOF, t, want);
	if (r < 0)
		goto out;
	if (!stg_auth_mac_equal(want, m.munge_auth.mac)) {
		stg_conn_refuse(c, -EACCES, "the proof of the exchanged key is wrong");
		r = refuse_login(c, m.tag, -EACCES);
		goto out;
	}
	if ((r = admitted(c, uid, m.tag)) < 0)
		goto out;
	struct stg_msg ok = {.version = STG_WIRE_VERSION, .type = STG_MSG_AUTH_OK, .tag = m.tag};
	r = stg_auth_derive(key, STG_AUTH_SERVER_PROOF, t, ok.auth_ok.mac);
	if (r == 0)
		r = stg_conn_send_msg(c, &ok);
	if (r == 0)
		r = start_session(c, STG_WIRE_VERSION, key, t, true);
	if (r == 0)
		*ret_uid = uid;
	goto out;
out_busy:
	/* munged is away (restarting): the client tries again. */
	{
		char why[sizeof(c->error)];
		snprintf(why, sizeof(why), "%s", c->error);
		stg_conn_refuse(c, r, "the server cannot use MUNGE credentials now: %s", why);
		stg_conn_send_error(c, hello->tag, -EBUSY, "%s", c->error);
	}
out:
	stg_kx_done(&kx);
	explicit_bzero(key, sizeof(key));
	return r;
}

int stg_conn_refuse_preauth(struct stg_conn *c, int r)
{
	if (r == -EPROTO || r == -EBADMSG)
		stg_conn_send_error(c, 0, -EPROTO, "%s before authentication", c->error);
	return r;
}

int stg_conn_auth_challenge(struct stg_conn *c, struct stg_auth_transcript *t)
{
	/* Version 1 is always offered, so that a client of that version learns
	 * from an ERROR why it is refused; a version-2 client never picks it,
	 * and its proof binds the range offered. */
	*t = (struct stg_auth_transcript){.min_version = 1, .max_version = STG_WIRE_VERSION,
					  .version = STG_WIRE_VERSION};
	struct stg_msg ch = {.type = STG_MSG_CHALLENGE, .tag = 0};
	ch.challenge.min_version = t->min_version;
	ch.challenge.max_version = t->max_version;
	int r = stg_auth_random(t->server_nonce, sizeof(t->server_nonce));
	if (r < 0)
		return r;
	memcpy(ch.challenge.nonce, t->server_nonce, sizeof(t->server_nonce));
	return stg_conn_send_msg(c, &ch);
}

int stg_conn_auth_answer(struct stg_conn *c, const struct stg_secret *s, bool accept_v1,
			 const struct stg_auth_transcript *challenge, const struct stg_msg *answer,
			 uint32_t *ret_uid)
{
	struct stg_auth_transcript t = *challenge;
	struct stg_msg m = *answer;
	int r;
	if (m.type == STG_MSG_MUNGE_HELLO && m.version >= 2)
		return munge_server(c, s, &t, &m, ret_uid);
	if (m.type == STG_MSG_AUTH_MUNGE) {
		/* Its credential carried the session's key, readable by any
		 * user of the cluster who relays the connection. */
		stg_conn_refuse(c, -EACCES, "a MUNGE login of an older client, whose credential "
				"any user of the cluster could read and act on: upgrade the client");
		return refuse_login(c, m.tag, -EACCES);
	}
	if (m.type != STG_MSG_AUTH) {
		stg_conn_send_error(c, m.tag, -EPROTO, "expected AUTH, got %s",
				    stg_msg_type_name(m.type));
		return stg_conn_refuse(c, -EPROTO, "expected AUTH, got %s",
				       stg_msg_type_name(m.type));
	}
	if (!s->len) {
		stg_conn_refuse(c, -EACCES, "a client with a secret, and this server takes MUNGE "
				"credentials only: set auth = munge in the policy's [cluster]");
		return refuse_login(c, m.tag, -EACCES);
	}
	if (m.version == 1 && !accept_v1) {
		stg_conn_refuse(c, -EPROTO,
				"the client speaks protocol version 1, this server %u..%u (1..%u "
				"when started with --accept-v1): upgrade the client",
				STG_WIRE_VERSION, STG_WIRE_VERSION, STG_WIRE_VERSION);
		return refuse_login(c, m.tag, -EPROTO);
	}
	uint8_t key[STG_SHA256_LEN], want[STG_AUTH_MAC_LEN];
	r = stg_auth_uid_key(s, m.auth.uid, key); /* a server holds the cluster secret */
	if (r < 0)
		goto out;
	if (m.version == 1) {
		r = auth_v1(c, key, t.server_nonce, &m);
		goto out;
	}
	t.uid = m.auth.uid;
	memcpy(t.client_nonce, m.auth.nonce, sizeof(t.client_nonce));
	r = stg_auth_derive(key, STG_AUTH_CLIENT_PROOF, &t, want);
	if (r < 0)
		goto out;
	if (!stg_auth_mac_equal(want, m.auth.mac)) {
		r = -EACCES;
		goto out;
	}
	if ((r = admitted(c, m.auth.uid, m.tag)) < 0)
		goto out;
	struct stg_msg ok = {.version = STG_WIRE_VERSION, .type = STG_MSG_AUTH_OK, .tag = m.tag};
	r = stg_auth_derive(key, STG_AUTH_SERVER_PROOF, &t, ok.auth_ok.mac);
	if (r == 0)
		r = stg_conn_send_msg(c, &ok);
	if (r == 0)
		r = start_session(c, STG_WIRE_VERSION, key, &t, true);
out:
	explicit_bzero(key, sizeof(key));
	if (r == -EACCES)
		stg_conn_send_error(c, m.tag, -EACCES, "authentication failed");
	if (r == 0)
		*ret_uid = m.auth.uid;
	return r;
}
