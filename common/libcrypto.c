/* SPDX-License-Identifier: MIT */
/* libcrypto, loaded on its first use rather than at every start: only
 * connections to servers need it (their keys and MACs), and loading it costs
 * a cold start about 7 ms of the tool's 15 (its pages read from disk, its
 * relocations done), so that a restore from a node's own cache, or an `ls`,
 * would wait for a library it never calls. On a cluster that cost is paid
 * by every node at once, reading from a shared file system. */
#include "libcrypto.h"

#include <dlfcn.h>
#include <openssl/opensslv.h>
#include <pthread.h>
#include <stddef.h>

#include "log.h"

#define STR_(x) #x
#define STR(x) STR_(x)
/* The ABI the headers describe: libcrypto.so.3 for OpenSSL 3. */
#define SONAME "libcrypto.so." STR(OPENSSL_VERSION_MAJOR)

static struct stg_libcrypto lib;
static const struct stg_libcrypto *loaded;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
	void *h = dlopen(SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		stg_log(STG_LOG_ERROR, "cannot load %s, which authentication needs: %s", SONAME,
			dlerror());
		return;
	}
	static const struct {
		const char *name;
		size_t at;
	} syms[] = {
#define SYM(f) {#f, offsetof(struct stg_libcrypto, f)}
		SYM(EVP_MAC_fetch),    SYM(EVP_MAC_CTX_new),
		SYM(EVP_MAC_CTX_free), SYM(EVP_MAC_init),
		SYM(EVP_MAC_update),   SYM(EVP_MAC_final),
		SYM(OSSL_PARAM_construct_utf8_string),
		SYM(OSSL_PARAM_construct_end),
		SYM(CRYPTO_memcmp),    SYM(RAND_bytes),
		SYM(EVP_PKEY_Q_keygen), SYM(EVP_PKEY_get_raw_public_key),
		SYM(EVP_PKEY_new_raw_public_key_ex), SYM(EVP_PKEY_free),
		SYM(EVP_PKEY_CTX_new_from_pkey), SYM(EVP_PKEY_CTX_free),
		SYM(EVP_PKEY_derive_init), SYM(EVP_PKEY_derive_set_peer),
		SYM(EVP_PKEY_derive),  SYM(EVP_KDF_fetch),
		SYM(EVP_KDF_free),     SYM(EVP_KDF_CTX_new),
		SYM(EVP_KDF_CTX_free), SYM(EVP_KDF_derive),
		SYM(OSSL_PARAM_construct_octet_string),
#undef SYM
	};
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *f = dlsym(h, syms[i].name);
		if (!f) {
			stg_log(STG_LOG_ERROR, "%s lacks %s: %s", SONAME, syms[i].name, dlerror());
			dlclose(h);
			return;
		}
		*(void **)((char *)&lib + syms[i].at) = f;
	}
	/* Never closed: its providers stay registered for the process's life. */
	loaded = &lib;
}

const struct stg_libcrypto *stg_libcrypto(void)
{
	pthread_once(&once, load);
	return loaded;
}
