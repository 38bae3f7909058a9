/* SPDX-License-Identifier: MIT */
/* libcrypto, loaded on its first use. */
#ifndef STG_LIBCRYPTO_H
#define STG_LIBCRYPTO_H

#include <openssl/crypto.h>
#include <openssl/evp.h>
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
};

/* libcrypto, loaded by the first call (any thread): NULL when it cannot be,
 * logged once as an error with the loader's reason. */
const struct stg_libcrypto *stg_libcrypto(void);

#endif
