/* SPDX-License-Identifier: MIT */
/* libcrypto, loaded on its first use. */
#ifndef STG_LIBCRYPTO_H
#define STG_LIBCRYPTO_H

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

/* The functions of libcrypto stagehand calls. */
struct stg_libcrypto {
	__typeof__(EVP_MAC_fetch) *EVP_MAC_fetch;
	__typeof__(EVP_MAC_CTX_new) *EVP_MAC_CTX_new;
	__typeof__(EVP_MAC_CTX_free) *EVP_MAC_CTX_free;
	__typeof__(EVP_MAC_init) *EVP_MAC_init;
	__typeof__(EVP_MAC_update) *EVP_MAC_update;
	__typeof__(EVP_MAC_final) *EVP_MAC_final;
	__typeof__(OSSL_PARAM_construct_utf8_string) *OSSL_PARAM_construct_utf8_string;
	__typeof__(OSSL_PARAM_construct_end) *OSSL_PARAM_construct_end;
	__typeof__(CRYPTO_memcmp) *CRYPTO_memcmp;
	__typeof__(RAND_bytes) *RAND_bytes;
	/* X25519 and HKDF, for the MUNGE login's key exchange (kx.c). */
	__typeof__(EVP_PKEY_Q_keygen) *EVP_PKEY_Q_keygen;
	__typeof__(EVP_PKEY_get_raw_public_key) *EVP_PKEY_get_raw_public_key;
	__typeof__(EVP_PKEY_new_raw_public_key_ex) *EVP_PKEY_new_raw_public_key_ex;
	__typeof__(EVP_PKEY_free) *EVP_PKEY_free;
	__typeof__(EVP_PKEY_CTX_new_from_pkey) *EVP_PKEY_CTX_new_from_pkey;
	__typeof__(EVP_PKEY_CTX_free) *EVP_PKEY_CTX_free;
	__typeof__(EVP_PKEY_derive_init) *EVP_PKEY_derive_init;
	__typeof__(EVP_PKEY_derive_set_peer) *EVP_PKEY_derive_set_peer;
	__typeof__(EVP_PKEY_derive) *EVP_PKEY_derive;
	__typeof__(EVP_KDF_fetch) *EVP_KDF_fetch;
	__typeof__(EVP_KDF_free) *EVP_KDF_free;
	__typeof__(EVP_KDF_CTX_new) *EVP_KDF_CTX_new;
	__typeof__(EVP_KDF_CTX_free) *EVP_KDF_CTX_free;
	__typeof__(EVP_KDF_derive) *EVP_KDF_derive;
	__typeof__(OSSL_PARAM_construct_octet_string) *OSSL_PARAM_construct_octet_string;
};

/* libcrypto, loaded by the first call (any thread): NULL when it cannot be,
 * logged once as an error with the loader's reason. */
const struct stg_libcrypto *stg_libcrypto(void);

#endif
