/* SPDX-License-Identifier: MIT */
/* An ephemeral X25519 key exchange and HKDF-SHA256, from libcrypto: the
 * session keys of a MUNGE login come from it (docs/PROTOCOL.md, "MUNGE"),
 * so that no credential ever carries a key. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define STG_KX_PUB_LEN 32
#define STG_KX_SHARED_LEN 32

/* One side's key pair, used for one connection and forgotten. */
struct stg_kx {
	void *priv; /* libcrypto's EVP_PKEY */
	uint8_t pub[STG_KX_PUB_LEN];
};

/* Makes a fresh key pair. Returns 0, -EOPNOTSUPP without libcrypto, or -EIO. */
int stg_kx_new(struct stg_kx *ret);

/* The secret shared with the holder of peer_pub. A public key of small order
 * (the secret would be all zeros, known to anyone) is refused with -EPROTO.
 * Returns 0 or -errno. */
int stg_kx_shared(const struct stg_kx *kx, const uint8_t peer_pub[STG_KX_PUB_LEN],
		  uint8_t out[STG_KX_SHARED_LEN]);

/* Forgets the private key. */
void stg_kx_done(struct stg_kx *kx);

/* HKDF-SHA256 (RFC 5869) of ikm with salt and info into out (outlen bytes).
 * Returns 0, -EOPNOTSUPP or -EIO. */
int stg_hkdf_sha256(const void *ikm, size_t ikmlen, const void *salt, size_t saltlen,
		    const void *info, size_t infolen, uint8_t *out, size_t outlen);
