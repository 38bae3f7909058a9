/* SPDX-License-Identifier: MIT */
/* Connection authentication: HMAC-SHA256 challenge-response over a shared
 * secret, with a key per uid derived from it, so no secret crosses the wire. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STG_SHA256_LEN 32
#define STG_AUTH_NONCE_LEN 32
#define STG_AUTH_MAC_LEN 32
#define STG_SECRET_MIN 16   /* bytes of secret at least */
#define STG_SECRET_MAX 4096
#define STG_MUNGE_USER_MAX 64 /* bytes of a user name or uid, NUL included */
#define STG_MUNGE_SERVER_USER "stagehand" /* the servers' user by default */

/* HMAC-SHA256 (RFC 2104, libcrypto's) of the concatenation of n pieces.
 * Returns 0, or -ENOMEM / -EIO / -EOPNOTSUPP when libcrypto cannot. */
int stg_hmac_sha256(const void *key, size_t keylen, const void *const *pieces,
		    const size_t *lens, size_t n, uint8_t out[STG_SHA256_LEN]);

/* A secret as read from a secret file: the cluster's secret (what servers
 * hold), or one user's key derived from it (what that user's clients hold:
 * a file "stagehand-user-key <uid> <64 hex digits>"). */
struct stg_secret {
	uint8_t key[STG_SECRET_MAX];
	size_t len;        /* 0: no secret (a server or client of MUNGE only) */
	bool user_key;     /* key holds the uid key of uid */
	uint32_t uid;
	/* MUNGE credentials: what a client presents (instead of the key), or a
	 * server takes (besides a key when len). */
	bool munge;
	char munge_socket[256]; /* "": libmunge's default */
	/* A client's: the servers' user (policy munge_server_user), whose
	 * credentials it takes as a server's, as root's. */
	char munge_server_user[STG_MUNGE_USER_MAX];
};

#define STG_USER_KEY_MAGIC "stagehand-user-key"

/* Writes the text of uid's key file into out (at least 128 bytes). Returns
 * 0 or -errno. */
int stg_user_key_format(const struct stg_secret *cluster, uint32_t uid, char *out, size_t len);

/* Reads a secret file: its bytes, trailing whitespace removed; at least
 * STG_SECRET_MIN of them. On failure returns -errno (-EINVAL when too short
 * or too long, -EPERM when other users may read or write it, or its group
 * write it) and writes a message naming the file and its mode into err. */
int stg_secret_load(const char *path, struct stg_secret *ret, char *err, size_t errlen);

/* A client's credentials as its policy says: its secret file, or with auth =
 * munge, MUNGE (through munge_socket). As stg_secret_load. */
struct stg_policy;
int stg_secret_from_policy(const struct stg_policy *p, struct stg_secret *ret, char *err,
			   size_t errlen);

/* The key of uid: HMAC(secret, "stagehand uid key" || uid as 4 bytes LE), or
 * a user key's own key. Returns 0, -EACCES when s is another uid's key, or
 * stg_hmac_sha256's error. */
int stg_auth_uid_key(const struct stg_secret *s, uint32_t uid, uint8_t out[STG_SHA256_LEN]);

/* The client's proof: HMAC(uid key, "stagehand client" || server nonce ||
 * client nonce || uid LE). Returns 0 or stg_hmac_sha256's error. */
int stg_auth_client_mac(const uint8_t key[STG_SHA256_LEN], const uint8_t *server_nonce,
			const uint8_t *client_nonce, uint32_t uid, uint8_t out[STG_AUTH_MAC_LEN]);

/* The server's proof: HMAC(uid key, "stagehand server" || client nonce ||
 * server nonce || uid LE). Returns 0 or stg_hmac_sha256's error. */
int stg_auth_server_mac(const uint8_t key[STG_SHA256_LEN], const uint8_t *server_nonce,
			const uint8_t *client_nonce, uint32_t uid, uint8_t out[STG_AUTH_MAC_LEN]);

/* What a version-2 handshake binds: both nonces, the uid, the range of
 * versions the server offered and the version the client chose. A MITM who
 * changes any of them (to force an older version, say) fails the proofs. */
struct stg_auth_transcript {
	uint8_t server_nonce[STG_AUTH_NONCE_LEN];
	uint8_t client_nonce[STG_AUTH_NONCE_LEN];
	uint32_t uid;
	uint16_t min_version, max_version, version;
};

enum stg_auth_derived {
	STG_AUTH_CLIENT_PROOF, /* the AUTH's mac */
	STG_AUTH_SERVER_PROOF, /* the AUTH_OK's mac */
	STG_AUTH_KEY_C2S,      /* the key of the MACs of the client's frames */
	STG_AUTH_KEY_S2C,      /* the key of the MACs of the server's frames */
};

/* HMAC(uid key, label of what || server nonce || client nonce || uid LE32 ||
 * min, max, version LE16): the proofs and session keys of version 2. Returns
 * 0 or stg_hmac_sha256's error. */
int stg_auth_derive(const uint8_t key[STG_SHA256_LEN], enum stg_auth_derived what,
		    const struct stg_auth_transcript *t, uint8_t out[STG_SHA256_LEN]);

/* The MUNGE login (docs/PROTOCOL.md, "MUNGE"). X, its transcript: both
 * nonces, the versions offered and chosen, the client's and the server's
 * X25519 public keys. */
#define STG_AUTH_MUNGE_X_LEN (2 * STG_AUTH_NONCE_LEN + 6 + 2 * 32)
#define STG_AUTH_MUNGE_PAYLOAD_LEN (25 + STG_AUTH_MUNGE_X_LEN)

void stg_auth_munge_x(const struct stg_auth_transcript *t, const uint8_t client_pub[32],
		      const uint8_t server_pub[32], uint8_t out[STG_AUTH_MUNGE_X_LEN]);

/* What each side's credential carries: its label ("stagehand v2 munge
 * server" or "... client") || X, so that it vouches for this exchange alone. */
void stg_auth_munge_payload(bool server, const uint8_t x[STG_AUTH_MUNGE_X_LEN],
			    uint8_t out[STG_AUTH_MUNGE_PAYLOAD_LEN]);

/* The login's key, from which its proofs and session keys are derived as
 * AUTH's are from the uid key: HKDF-SHA256(ikm shared, salt "stagehand v2
 * munge key", info X || uid LE32). Returns 0 or -errno. */
int stg_auth_munge_key(const uint8_t shared[32], const uint8_t x[STG_AUTH_MUNGE_X_LEN],
		       uint32_t uid, uint8_t out[STG_SHA256_LEN]);

/* Compares MACs in constant time (CRYPTO_memcmp): 1 when equal. */
int stg_auth_mac_equal(const uint8_t *a, const uint8_t *b);

/* Fills buf with random bytes from libcrypto's generator (seeded by the
 * kernel's). Returns 0 or -EIO. */
int stg_auth_random(void *buf, size_t len);
