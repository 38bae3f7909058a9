/* SPDX-License-Identifier: MIT */
/* Connection authentication: SHA-256 (FIPS 180-4), HMAC-SHA256, secrets, MACs. */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* FIPS 180-4 section 4.2.2: the first 32 bits of the fractional parts of the
 * cube roots of the first 64 primes. */
static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static inline uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* FIPS 180-4 section 6.2.2: one 512-bit block. */
static void sha256_block(uint32_t h[8], const uint8_t *block)
{
	uint32_t w[64], a, b, c, d, e, f, g, hh;

	for (int t = 0; t < 16; t++)
		w[t] = get_be32(block + 4 * t);
	for (int t = 16; t < 64; t++) {
		uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
		uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
		w[t] = w[t - 16] + s0 + w[t - 7] + s1;
	}
	a = h[0], b = h[1], c = h[2], d = h[3];
	e = h[4], f = h[5], g = h[6], hh = h[7];
	for (int t = 0; t < 64; t++) {
		uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
		uint32_t ch = (e & f) ^ (~e & g);
		uint32_t t1 = hh + S1 + ch + K[t] + w[t];
		uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
		uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
		uint32_t t2 = S0 + maj;
		hh = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d;
	h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
	/* The schedule is derived from the message, which may be key material. */
	explicit_bzero(w, sizeof(w));
}

void stg_sha256_init(struct stg_sha256 *c)
{
	/* FIPS 180-4 section 5.3.3. */
	static const uint32_t iv[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};
	memcpy(c->h, iv, sizeof(iv));
	c->len = 0;
	c->fill = 0;
}

void stg_sha256_update(struct stg_sha256 *c, const void *data, size_t len)
{
	const uint8_t *p = data;

	c->len += len;
	if (c->fill) {
		size_t n = sizeof(c->buf) - c->fill;
		if (n > len)
			n = len;
		memcpy(c->buf + c->fill, p, n);
		c->fill += n;
		p += n;
		len -= n;
		if (c->fill < sizeof(c->buf))
			return;
		sha256_block(c->h, c->buf);
		c->fill = 0;
	}
	for (; len >= 64; p += 64, len -= 64)
		sha256_block(c->h, p);
	if (len) {
		memcpy(c->buf, p, len);
		c->fill = len;
	}
}

void stg_sha256_final(struct stg_sha256 *c, uint8_t out[STG_SHA256_LEN])
{
	/* FIPS 180-4 section 5.1.1: a 1 bit, zeros, the length in bits (64-bit BE). */
	uint64_t bits = c->len * 8;

	c->buf[c->fill++] = 0x80;
	if (c->fill > 56) {
		memset(c->buf + c->fill, 0, sizeof(c->buf) - c->fill);
		sha256_block(c->h, c->buf);
		c->fill = 0;
	}
	memset(c->buf + c->fill, 0, 56 - c->fill);
	put_be32(c->buf + 56, (uint32_t)(bits >> 32));
	put_be32(c->buf + 60, (uint32_t)bits);
	sha256_block(c->h, c->buf);
	for (int i = 0; i < 8; i++)
		put_be32(out + 4 * i, c->h[i]);
	/* The state may hold an HMAC key's pad; leave nothing of it behind. */
	explicit_bzero(c, sizeof(*c));
}

void stg_hmac_sha256(const void *key, size_t keylen, const void *const *pieces,
		     const size_t *lens, size_t n, uint8_t out[STG_SHA256_LEN])
{
	uint8_t k[64] = { 0 }, pad[64], inner[STG_SHA256_LEN];
	struct stg_sha256 c;

	/* RFC 2104: keys longer than the block are hashed first. */
	if (keylen > sizeof(k)) {
		stg_sha256_init(&c);
		stg_sha256_update(&c, key, keylen);
		stg_sha256_final(&c, k);
	} else if (keylen) {
		memcpy(k, key, keylen);
	}

	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	stg_sha256_init(&c);
	stg_sha256_update(&c, pad, sizeof(pad));
	for (size_t i = 0; i < n; i++)
		stg_sha256_update(&c, pieces[i], lens[i]);
	stg_sha256_final(&c, inner);

	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	stg_sha256_init(&c);
	stg_sha256_update(&c, pad, sizeof(pad));
	stg_sha256_update(&c, inner, sizeof(inner));
	stg_sha256_final(&c, out);

	explicit_bzero(k, sizeof(k));
	explicit_bzero(pad, sizeof(pad));
	explicit_bzero(inner, sizeof(inner));
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
	stg_hmac_sha256(s->key, s->len, pieces, lens, 2, out);
	return 0;
}

void stg_user_key_format(const struct stg_secret *cluster, uint32_t uid, char *out, size_t len)
{
	uint8_t key[STG_SHA256_LEN];
	stg_auth_uid_key(cluster, uid, key);
	int n = snprintf(out, len, "%s %u ", STG_USER_KEY_MAGIC, uid);
	for (size_t i = 0; i < STG_SHA256_LEN && n > 0 && (size_t)n + 3 < len; i++)
		n += snprintf(out + n, len - (size_t)n, "%02x", key[i]);
	if (n > 0 && (size_t)n + 1 < len)
		snprintf(out + n, len - (size_t)n, "\n");
	explicit_bzero(key, sizeof(key));
}

/* Both proofs share a shape; the label and the order of the nonces keep a
 * client's MAC from ever being usable as a server's and vice versa. */
static void proof(const uint8_t key[STG_SHA256_LEN], const char *label, size_t label_len,
		  const uint8_t *first, const uint8_t *second, uint32_t uid,
		  uint8_t out[STG_AUTH_MAC_LEN])
{
	uint8_t le[4];
	const void *pieces[] = { label, first, second, le };
	const size_t lens[] = { label_len, STG_AUTH_NONCE_LEN, STG_AUTH_NONCE_LEN, sizeof(le) };

	stg_put_le32(le, uid);
	stg_hmac_sha256(key, STG_SHA256_LEN, pieces, lens, 4, out);
}

void stg_auth_client_mac(const uint8_t key[STG_SHA256_LEN], const uint8_t *server_nonce,
			 const uint8_t *client_nonce, uint32_t uid, uint8_t out[STG_AUTH_MAC_LEN])
{
	proof(key, client_label, sizeof(client_label) - 1, server_nonce, client_nonce, uid, out);
}

void stg_auth_server_mac(const uint8_t key[STG_SHA256_LEN], const uint8_t *server_nonce,
			 const uint8_t *client_nonce, uint32_t uid, uint8_t out[STG_AUTH_MAC_LEN])
{
	proof(key, server_label, sizeof(server_label) - 1, client_nonce, server_nonce, uid, out);
}

void stg_auth_derive(const uint8_t key[STG_SHA256_LEN], enum stg_auth_derived what,
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
	stg_hmac_sha256(key, STG_SHA256_LEN, pieces, lens, 4, out);
}

int stg_auth_mac_equal(const uint8_t *a, const uint8_t *b)
{
	/* No early exit, so the time taken says nothing about where a guess
	 * first went wrong; volatile keeps the compiler from adding one. */
	volatile uint8_t diff = 0;

	for (size_t i = 0; i < STG_AUTH_MAC_LEN; i++)
		diff |= a[i] ^ b[i];
	return diff == 0;
}

int stg_auth_random(void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
