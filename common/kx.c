/* SPDX-License-Identifier: MIT */
/* X25519 and HKDF through libcrypto (kx.h). */
#include "kx.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <string.h>

#include "libcrypto.h"

int stg_kx_new(struct stg_kx *ret)
{
	const struct stg_libcrypto *lc = stg_libcrypto();
	if (!lc)
		return -EOPNOTSUPP;
	EVP_PKEY *k = lc->EVP_PKEY_Q_keygen(NULL, NULL, "X25519");
	size_t len = STG_KX_PUB_LEN;
	if (!k || !lc->EVP_PKEY_get_raw_public_key(k, ret->pub, &len) || len != STG_KX_PUB_LEN) {
		if (k)
			lc->EVP_PKEY_free(k);
		return -EIO;
	}
	ret->priv = k;
	return 0;
}

int stg_kx_shared(const struct stg_kx *kx, const uint8_t peer_pub[STG_KX_PUB_LEN],
		  uint8_t out[STG_KX_SHARED_LEN])
{
	const struct stg_libcrypto *lc = stg_libcrypto();
	if (!lc || !kx->priv)
		return -EOPNOTSUPP;
	EVP_PKEY *peer = lc->EVP_PKEY_new_raw_public_key_ex(NULL, "X25519", NULL, peer_pub,
							     STG_KX_PUB_LEN);
	if (!peer)
		return -EPROTO;
	EVP_PKEY_CTX *ctx = lc->EVP_PKEY_CTX_new_from_pkey(NULL, kx->priv, NULL);
	size_t len = STG_KX_SHARED_LEN;
	/* libcrypto fails the derivation when the result is all zeros (a peer
	 * key of small order); checked again below all the same. */
	int ok = ctx && lc->EVP_PKEY_derive_init(ctx) > 0 &&
		 lc->EVP_PKEY_derive_set_peer(ctx, peer) > 0 &&
		 lc->EVP_PKEY_derive(ctx, out, &len) > 0 && len == STG_KX_SHARED_LEN;
	if (ctx)
		lc->EVP_PKEY_CTX_free(ctx);
	lc->EVP_PKEY_free(peer);
	uint8_t any = 0;
	for (size_t i = 0; ok && i < STG_KX_SHARED_LEN; i++)
		any |= out[i];
	if (!ok || !any) {
		explicit_bzero(out, STG_KX_SHARED_LEN);
		return -EPROTO;
	}
	return 0;
}

void stg_kx_done(struct stg_kx *kx)
{
	const struct stg_libcrypto *lc = stg_libcrypto();
	if (kx->priv && lc)
		lc->EVP_PKEY_free(kx->priv);
	kx->priv = NULL;
}

int stg_hkdf_sha256(const void *ikm, size_t ikmlen, const void *salt, size_t saltlen,
		    const void *info, size_t infolen, uint8_t *out, size_t outlen)
{
	const struct stg_libcrypto *lc = stg_libcrypto();
	if (!lc)
		return -EOPNOTSUPP;
	EVP_KDF *kdf = lc->EVP_KDF_fetch(NULL, "HKDF", NULL);
	if (!kdf)
		return -EOPNOTSUPP;
	EVP_KDF_CTX *ctx = lc->EVP_KDF_CTX_new(kdf);
	lc->EVP_KDF_free(kdf);
	if (!ctx)
		return -ENOMEM;
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {
		lc->OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
		lc->OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)ikm, ikmlen),
		lc->OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, saltlen),
		lc->OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, infolen),
		lc->OSSL_PARAM_construct_end(),
	};
	int ok = lc->EVP_KDF_derive(ctx, out, outlen, params) > 0;
	lc->EVP_KDF_CTX_free(ctx);
	return ok ? 0 : -EIO;
}
