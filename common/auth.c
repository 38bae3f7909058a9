/* SPDX-License-Identifier: MIT */
/* Connection authentication: secrets, keys and MACs, with HMAC-SHA256,
 * random bytes and constant-time comparison from libcrypto (libcrypto.c
 * loads it when first needed). */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/core_names.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kx.h"
#include "libcrypto.h"
#include "policy.h"
#include "util.h"

/* libcrypto's HMAC, fetched once: the lookup walks its providers. */
static EVP_MAC *hmac;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

static void fetch_hmac(void)
{
	const struct stg_libcrypto *lc = stg_libcrypto();
	hmac = lc ? lc->EVP_MAC_fetch(NULL, "HMAC", NULL) : NULL;
}

int stg_hmac_sha256(const void *key, size_t keylen, const void *const *pieces,
		    const size_t *lens, size_t n, uint8_t out[STG_SHA256_LEN])
{
	pthread_once(&hmac_once, fetch_hmac);
	if (!hmac)
		return -EOPNOTSUPP;
	const struct stg_libcrypto *lc = stg_libcrypto();
	EVP_MAC_CTX *ctx = lc->EVP_MAC_CTX_new(hmac);
	if (!ctx)
		return -ENOMEM;
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {
		lc->OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
		lc->OSSL_PARAM_construct_end(),
	};
	/* (A NULL key would mean "the one set before": an empty one is "".) */
	int ok = lc->EVP_MAC_init(ctx, keylen ? key : (const void *)"", keylen, params);
	for (size_t i = 0; ok && i < n; i++)
		ok = lc->EVP_MAC_update(ctx, pieces[i], lens[i]);
	size_t len = 0;
	ok = ok && lc->EVP_MAC_final(ctx, out, &len, STG_SHA256_LEN) && len == STG_SHA256_LEN;
	lc->EVP_MAC_CTX_free(ctx);
	return ok ? 0 : -EIO;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static int is_trailing_space(uint8_t ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

static int hex_value(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* "stagehand-user-key UID HEX64" */
static int parse_user_key(const uint8_t *buf, size_t len, struct stg_secret *ret)
{
	size_t at = strlen(STG_USER_KEY_MAGIC);
	if (at >= len || buf[at] != ' ')
		return -EINVAL;
	at++;
	uint64_t uid = 0;
	size_t digits = 0;
	while (at < len && buf[at] >= '0' && buf[at] <= '9' && digits < 10) {
		uid = uid * 10 + (uint64_t)(buf[at++] - '0');
		digits++;
	}
	if (digits == 0 || uid > UINT32_MAX || at >= len || buf[at] != ' ')
		return -EINVAL;
	at++;
	if (len - at != 2 * STG_SHA256_LEN)
		return -EINVAL;
	for (size_t i = 0; i < STG_SHA256_LEN; i++) {
		int hi = hex_value(buf[at + 2 * i]), lo = hex_value(buf[at + 2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		ret->key[i] = (uint8_t)(hi << 4 | lo);
	}
	ret->len = STG_SHA256_LEN;
	ret->user_key = true;
	ret->uid = (uint32_t)uid;
	return 0;
}

int stg_secret_load(const char *path, struct stg_secret *ret, char *err, size_t errlen)
{
	/* One byte more than allowed, so that an overlong file is noticed. */
	uint8_t buf[STG_SECRET_MAX + 1];
	size_t len = 0;
	struct stat st;
	int fd, r;

	/* Symlinks are followed on purpose: secrets are often provisioned as
	 * links into a secrets mount. */
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		set_err(err, errlen, "secret file '%s': cannot open: %s", path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		set_err(err, errlen, "secret file '%s': cannot stat: %s", path, strerror(-r));
		goto out_close;
	}
	/* Anyone who can read the secret can derive every uid's key and act as
	 * any user; anyone who can write it can lock everyone out, or replace it
	 * with one of their own. A group may read it (a service group sharing
	 * the secret), never write it. Checked on the open descriptor, so the
	 * mode is that of the file actually read. */
	if (st.st_mode & 027) {
		r = -EPERM;
		set_err(err, errlen,
			"secret file '%s': %s (mode %04o), which would let them "
			"impersonate anyone or lock everyone out; chmod 600 or 640 it",
			path, st.st_mode & 007 ? "accessible by other users" : "writable by its group",
			(unsigned)(st.st_mode & 07777));
		goto out_close;
	}

	while (len < sizeof(buf)) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			set_err(err, errlen, "secret file '%s': cannot read: %s", path,
				strerror(-r));
			goto out_wipe;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}

	while (len > 0 && is_trailing_space(buf[len - 1]))
		len--;
	if (len < STG_SECRET_MIN) {
		r = -EINVAL;
		set_err(err, errlen, "secret file '%s': %zu bytes, at least %d needed", path, len,
			STG_SECRET_MIN);
		goto out_wipe;
	}
	if (len > STG_SECRET_MAX) {
		r = -EINVAL;
		set_err(err, errlen, "secret file '%s': more than %d bytes", path,
			STG_SECRET_MAX);
		goto out_wipe;
	}

	memset(ret, 0, sizeof(*ret));
	if (len > strlen(STG_USER_KEY_MAGIC) &&
	    memcmp(buf, STG_USER_KEY_MAGIC, strlen(STG_USER_KEY_MAGIC)) == 0) {
		r = parse_user_key(buf, len, ret);
		if (r < 0)
			set_err(err, errlen,
				"secret file '%s': not a valid user key (\"%s UID HEX64\")", path,
				STG_USER_KEY_MAGIC);
		goto out_wipe;
	}
	memcpy(ret->key, buf, len);
	ret->len = len;
	r = 0;
out_wipe:
	explicit_bzero(buf, sizeof(buf));
out_close:
	close(fd);
	return r;
}

int stg_secret_from_policy(const struct stg_policy *p, struct stg_secret *ret, char *err,
			   size_t errlen)
{
	if (!p->munge)
		return stg_secret_load(p->secret_file, ret, err, errlen);
	memset(ret, 0, sizeof(*ret));
	ret->munge = true;
	if (p->munge_socket &&
	    (size_t)snprintf(ret->munge_socket, sizeof(ret->munge_socket), "%s", p->munge_socket) >=
		    sizeof(ret->munge_socket)) {
		set_err(err, errlen, "munge_socket '%s' is too long", p->munge_socket);
		return -ENAMETOOLONG;
	}
	/* (The policy checked its length.) */
	snprintf(ret->munge_server_user, sizeof(ret->munge_server_user), "%s",
		 p->munge_server_user ? p->munge_server_user : STG_MUNGE_SERVER_USER);
	return 0;
}

static const char uid_key_label[] = "stagehand uid key";
static const char client_label[] = "stagehand client";
static const char server_label[] = "stagehand server";

int stg_auth_uid_key(const struct stg_secret *s, uint32_t uid, uint8_t out[STG_SHA256_LEN])
{
	if (s->user_key) {
		/* A user's key speaks for that user only. */
		if (uid != s->uid)
			return -EACCES;
		memcpy(out, s->key, STG_SHA256_LEN);
		return 0;
	}
	uint8_t le[4];
	const void *pieces[] = { uid_key_label, le };
	const size_t lens[] = { sizeof(uid_key_label) - 1, sizeof(le) };

	stg_put_le32(le, uid);
	return stg_hmac_sha256(s->key, s->len, pieces, lens, 2, out);
}

int stg_user_key_format(const struct stg_secret *cluster, uint32_t uid, char *out, size_t len)
{
	uint8_t key[STG_SHA256_LEN];
	int r = stg_auth_uid_key(cluster, uid, key);
	if (r < 0)
		return r;
	int n = snprintf(out, len, "%s %u ", STG_USER_KEY_MAGIC, uid);
	for (size_t i = 0; i < STG_SHA256_LEN && n > 0 && (size_t)n + 3 < len; i++)
		n += snprintf(out + n, len - (size_t)n, "%02x", key[i]);
	if (n > 0 && (size_t)n + 1 < len)
		snprintf(out + n, len - (size_t)n, "\n");
	explicit_bzero(key, sizeof(key));
	return 0;
}

/* Both proofs share a shape; the label and the order of the nonces keep a
 * client's MAC from ever being usable as a server's and vice versa. */
static int proof(const uint8_t key[STG_SHA256_LEN], const char *label, size_t label_len,
		 const uint8_t *first, const uint8_t *second, uint32_t uid,
		 uint8_t out[STG_AUTH_MAC_LEN])
{
	uint8_t le[4];
	const void *pieces[] = { label, first, second, le };
	const size_t lens[] = { label_len, STG_AUTH_NONCE_LEN, STG_AUTH_NONCE_LEN, sizeof(le) };

	stg_put_le32(le, uid);
	return stg_hmac_sha256(key, STG_SHA256_LEN, pieces, lens, 4, out);
}

int stg_auth_client_mac(const uint8_t key[STG_SHA256_LEN], const uint8_t *server_nonce,
			const uint8_t *client_nonce, uint32_t uid, uint8_t out[STG_AUTH_MAC_LEN])
{
	return proof(key, client_label, sizeof(client_label) - 1, server_nonce, client_nonce, uid, out);
}

int stg_auth_server_mac(const uint8_t key[STG_SHA256_LEN], const uint8_t *server_nonce,
			const uint8_t *client_nonce, uint32_t uid, uint8_t out[STG_AUTH_MAC_LEN])
{
	return proof(key, server_label, sizeof(server_label) - 1, client_nonce, server_nonce, uid, out);
}

int stg_auth_derive(const uint8_t key[STG_SHA256_LEN], enum stg_auth_derived what,
		    const struct stg_auth_transcript *t, uint8_t out[STG_SHA256_LEN])
{
	static const char *const labels[] = {
		[STG_AUTH_CLIENT_PROOF] = "stagehand v2 client",
		[STG_AUTH_SERVER_PROOF] = "stagehand v2 server",
		[STG_AUTH_KEY_C2S] = "stagehand v2 client frames",
		[STG_AUTH_KEY_S2C] = "stagehand v2 server frames",
	};
	uint8_t tail[4 + 3 * 2];
	stg_put_le32(tail, t->uid);
	stg_put_le16(tail + 4, t->min_version);
	stg_put_le16(tail + 6, t->max_version);
	stg_put_le16(tail + 8, t->version);
	const void *pieces[] = { labels[what], t->server_nonce, t->client_nonce, tail };
	const size_t lens[] = { strlen(labels[what]), STG_AUTH_NONCE_LEN, STG_AUTH_NONCE_LEN,
				sizeof(tail) };
	return stg_hmac_sha256(key, STG_SHA256_LEN, pieces, lens, 4, out);
}

void stg_auth_munge_x(const struct stg_auth_transcript *t, const uint8_t client_pub[32],
		      const uint8_t server_pub[32], uint8_t out[STG_AUTH_MUNGE_X_LEN])
{
	uint8_t *p = out;
	memcpy(p, t->server_nonce, STG_AUTH_NONCE_LEN);
	p += STG_AUTH_NONCE_LEN;
	memcpy(p, t->client_nonce, STG_AUTH_NONCE_LEN);
	p += STG_AUTH_NONCE_LEN;
	stg_put_le16(p, t->min_version);
	stg_put_le16(p + 2, t->max_version);
	stg_put_le16(p + 4, t->version);
	memcpy(p + 6, client_pub, 32);
	memcpy(p + 6 + 32, server_pub, 32);
}

static const char munge_server_label[] = "stagehand v2 munge server";
static const char munge_client_label[] = "stagehand v2 munge client";
static const char munge_key_label[] = "stagehand v2 munge key";
_Static_assert(sizeof(munge_server_label) - 1 + STG_AUTH_MUNGE_X_LEN ==
		       STG_AUTH_MUNGE_PAYLOAD_LEN &&
	       sizeof(munge_client_label) == sizeof(munge_server_label),
	       "both payloads are STG_AUTH_MUNGE_PAYLOAD_LEN bytes");

void stg_auth_munge_payload(bool server, const uint8_t x[STG_AUTH_MUNGE_X_LEN],
			    uint8_t out[STG_AUTH_MUNGE_PAYLOAD_LEN])
{
	const char *label = server ? munge_server_label : munge_client_label;
	memcpy(out, label, sizeof(munge_server_label) - 1);
	memcpy(out + sizeof(munge_server_label) - 1, x, STG_AUTH_MUNGE_X_LEN);
}

int stg_auth_munge_key(const uint8_t shared[32], const uint8_t x[STG_AUTH_MUNGE_X_LEN],
		       uint32_t uid, uint8_t out[STG_SHA256_LEN])
{
	uint8_t info[STG_AUTH_MUNGE_X_LEN + 4];
	memcpy(info, x, STG_AUTH_MUNGE_X_LEN);
	stg_put_le32(info + STG_AUTH_MUNGE_X_LEN, uid);
	return stg_hkdf_sha256(shared, 32, munge_key_label, sizeof(munge_key_label) - 1, info,
			       sizeof(info), out, STG_SHA256_LEN);
}

int stg_auth_mac_equal(const uint8_t *a, const uint8_t *b)
{
	/* Constant time: how long it takes says nothing of where a guess first
	 * went wrong. (Without libcrypto no MAC was made: nothing matches.) */
	const struct stg_libcrypto *lc = stg_libcrypto();
	return lc && lc->CRYPTO_memcmp(a, b, STG_AUTH_MAC_LEN) == 0;
}

int stg_auth_random(void *buf, size_t len)
{
	const struct stg_libcrypto *lc = stg_libcrypto();
	if (!lc)
		return -EOPNOTSUPP;
	for (uint8_t *p = buf; len > 0;) {
		int n = len > INT_MAX ? INT_MAX : (int)len;
		if (lc->RAND_bytes(p, n) != 1)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
