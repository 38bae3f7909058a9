/* SPDX-License-Identifier: MIT */
/* Authentication: HMAC vectors (libcrypto's, called as the wire calls it),
 * secret files, MACs, a golden fixture. */
#include "auth.h"
#include "harness.h"
#include "kx.h"

#include <fcntl.h>
#include <sys/stat.h>

static void to_hex(const uint8_t *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

static void check_hmac(const void *key, size_t keylen, const void *data, size_t len,
		       const char *want)
{
	uint8_t mac[STG_SHA256_LEN];
	char hex[2 * STG_SHA256_LEN + 1];
	const void *pieces[] = { data };
	size_t lens[] = { len };

	CHECK_EQ(stg_hmac_sha256(key, keylen, pieces, lens, 1, mac), 0);
	to_hex(mac, sizeof(mac), hex);
	/* Test case 5 gives only the first 128 bits. */
	hex[strlen(want)] = '\0';
	CHECK_STR(hex, want);

	/* The same data cut into pieces at every offset: the same MAC. */
	for (size_t at = 0; at <= len; at++) {
		uint8_t mac2[STG_SHA256_LEN];
		const void *p2[] = { data, (const uint8_t *)data + at };
		size_t l2[] = { at, len - at };
		CHECK_EQ(stg_hmac_sha256(key, keylen, p2, l2, 2, mac2), 0);
		CHECK(memcmp(mac, mac2, sizeof(mac)) == 0);
	}
}

/* RFC 4231 section 4, test cases 1 to 7, and an empty key and message. */
static void test_hmac_rfc4231(void)
{
	uint8_t key[131], data[50];

	check_hmac("", 0, "", 0, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");

	memset(key, 0x0b, 20);
	check_hmac(key, 20, "Hi There", 8,
		   "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");

	const char *d2 = "what do ya want for nothing?";
	check_hmac("Jefe", 4, d2, strlen(d2),
		   "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");

	memset(key, 0xaa, 20);
	memset(data, 0xdd, 50);
	check_hmac(key, 20, data, 50,
		   "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");

	for (int i = 0; i < 25; i++)
		key[i] = (uint8_t)(i + 1);
	memset(data, 0xcd, 50);
	check_hmac(key, 25, data, 50,
		   "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");

	memset(key, 0x0c, 20);
	check_hmac(key, 20, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b");

	memset(key, 0xaa, 131);
	const char *d6 = "Test Using Larger Than Block-Size Key - Hash Key First";
	check_hmac(key, 131, d6, strlen(d6),
		   "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");

	const char *d7 = "This is a test using a larger than block-size key and a larger "
			 "than block-size data. The key needs to be hashed before being "
			 "used by the HMAC algorithm.";
	check_hmac(key, 131, d7, strlen(d7),
		   "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

static void write_secret(const char *path, const char *content, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		perror(path);
		exit(1);
	}
	/* fchmod, not the create mode: the umask must not decide the test. */
	if (write(fd, content, strlen(content)) != (ssize_t)strlen(content) ||
	    fchmod(fd, mode) < 0) {
		perror(path);
		exit(1);
	}
	close(fd);
}

static void test_secret_load(void)
{
	const char *dir = harness_tmpdir();
	char path[4096], err[512];
	static struct stg_secret s;
	int r;

	snprintf(path, sizeof(path), "%s/good", dir);
	write_secret(path, "0123456789abcdef ghij\t \r\n\n", 0600);
	r = stg_secret_load(path, &s, err, sizeof(err));
	CHECK_EQ(r, 0);
	CHECK_EQ(s.len, 21);
	CHECK(memcmp(s.key, "0123456789abcdef ghij", 21) == 0);

	/* Group-readable is allowed: a service group may share the secret. */
	write_secret(path, "exactly-16-bytes", 0640);
	CHECK_EQ(stg_secret_load(path, &s, err, sizeof(err)), 0);
	CHECK_EQ(s.len, 16);

	/* Failures leave the output alone. */
	snprintf(path, sizeof(path), "%s/short", dir);
	write_secret(path, "short-15-bytes!\n\n\n", 0600);
	r = stg_secret_load(path, &s, err, sizeof(err));
	CHECK_EQ(r, -EINVAL);
	CHECK_EQ(s.len, 16);
	char want[4200];
	snprintf(want, sizeof(want), "secret file '%s': 15 bytes, at least 16 needed", path);
	CHECK_STR(err, want);

	snprintf(path, sizeof(path), "%s/long", dir);
	char *big = malloc(STG_SECRET_MAX + 2);
	memset(big, 'x', STG_SECRET_MAX + 1);
	big[STG_SECRET_MAX + 1] = '\0';
	write_secret(path, big, 0600);
	CHECK_EQ(stg_secret_load(path, &s, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "more than 4096 bytes") != NULL);
	/* Exactly the maximum plus a newline is fine. */
	big[STG_SECRET_MAX] = '\n';
	write_secret(path, big, 0600);
	CHECK_EQ(stg_secret_load(path, &s, err, sizeof(err)), 0);
	CHECK_EQ(s.len, STG_SECRET_MAX);
	free(big);

	snprintf(path, sizeof(path), "%s/open", dir);
	write_secret(path, "0123456789abcdef0123", 0644);
	s.len = 7;
	r = stg_secret_load(path, &s, err, sizeof(err));
	CHECK_EQ(r, -EPERM);
	CHECK_EQ(s.len, 7);
	CHECK(strstr(err, path) != NULL);
	CHECK(strstr(err, "chmod 600 or 640") != NULL);
	write_secret(path, "0123456789abcdef0123", 0602);
	CHECK_EQ(stg_secret_load(path, &s, err, sizeof(err)), -EPERM);
	/* Its group may read it, never write it: the message names the mode. */
	const mode_t group_writable[] = {0660, 0620, 0670};
	for (size_t i = 0; i < sizeof(group_writable) / sizeof(group_writable[0]); i++) {
		write_secret(path, "0123456789abcdef0123", group_writable[i]);
		CHECK_EQ(stg_secret_load(path, &s, err, sizeof(err)), -EPERM);
		char mode[16];
		snprintf(mode, sizeof(mode), "mode %04o", (unsigned)group_writable[i]);
		CHECK(strstr(err, mode) != NULL);
		CHECK(strstr(err, "writable by its group") != NULL);
		CHECK(strstr(err, path) != NULL);
	}

	/* A symlink to a good file is followed. */
	char good[4096];
	snprintf(good, sizeof(good), "%s/good", dir);
	snprintf(path, sizeof(path), "%s/link", dir);
	CHECK_EQ(symlink(good, path), 0);
	CHECK_EQ(stg_secret_load(path, &s, err, sizeof(err)), 0);
	CHECK_EQ(s.len, 16);

	snprintf(path, sizeof(path), "%s/missing", dir);
	r = stg_secret_load(path, &s, err, sizeof(err));
	CHECK_EQ(r, -ENOENT);
	CHECK(strstr(err, path) != NULL);
	/* No message buffer: still just an error code. */
	CHECK_EQ(stg_secret_load(path, &s, NULL, 0), -ENOENT);
}

static void fixed_inputs(struct stg_secret *s, uint8_t *sn, uint8_t *cn)
{
	static const char secret[] = "stagehand-test-secret-0123456789";
	memcpy(s->key, secret, sizeof(secret) - 1);
	s->len = sizeof(secret) - 1;
	for (int i = 0; i < STG_AUTH_NONCE_LEN; i++) {
		sn[i] = (uint8_t)i;
		cn[i] = (uint8_t)(32 + i);
	}
}

/* Each bit of input matters: flip one byte anywhere, get a different MAC. */
static void test_mac_inputs(void)
{
	static struct stg_secret s, s2;
	uint8_t sn[STG_AUTH_NONCE_LEN], cn[STG_AUTH_NONCE_LEN];
	uint8_t key[STG_SHA256_LEN], key2[STG_SHA256_LEN];
	uint8_t cm[STG_AUTH_MAC_LEN], sm[STG_AUTH_MAC_LEN], m[STG_AUTH_MAC_LEN];

	fixed_inputs(&s, sn, cn);
	stg_auth_uid_key(&s, 1000, key);
	stg_auth_client_mac(key, sn, cn, 1000, cm);
	stg_auth_server_mac(key, sn, cn, 1000, sm);
	CHECK(!stg_auth_mac_equal(cm, sm));
	/* Swapping the nonces does not turn one proof into the other. */
	stg_auth_client_mac(key, cn, sn, 1000, m);
	CHECK(!stg_auth_mac_equal(m, sm));

	stg_auth_uid_key(&s, 1001, key2);
	CHECK(memcmp(key, key2, sizeof(key)) != 0);
	stg_auth_uid_key(&s, 1000u | (1u << 24), key2);
	CHECK(memcmp(key, key2, sizeof(key)) != 0);
	s2 = s;
	for (size_t i = 0; i < s.len; i++) {
		s2.key[i] ^= 1;
		stg_auth_uid_key(&s2, 1000, key2);
		CHECK(memcmp(key, key2, sizeof(key)) != 0);
		s2.key[i] ^= 1;
	}
	/* A longer secret with the same prefix is a different secret (not with
	 * a NUL appended: HMAC pads short keys with zeros, so that one is not). */
	s2.key[s2.len++] = 'x';
	stg_auth_uid_key(&s2, 1000, key2);
	CHECK(memcmp(key, key2, sizeof(key)) != 0);

	for (int i = 0; i < STG_AUTH_NONCE_LEN; i++) {
		sn[i] ^= 0x80;
		stg_auth_client_mac(key, sn, cn, 1000, m);
		CHECK(!stg_auth_mac_equal(m, cm));
		stg_auth_server_mac(key, sn, cn, 1000, m);
		CHECK(!stg_auth_mac_equal(m, sm));
		sn[i] ^= 0x80;
		cn[i] ^= 0x01;
		stg_auth_client_mac(key, sn, cn, 1000, m);
		CHECK(!stg_auth_mac_equal(m, cm));
		stg_auth_server_mac(key, sn, cn, 1000, m);
		CHECK(!stg_auth_mac_equal(m, sm));
		cn[i] ^= 0x01;
		key[i] ^= 0x10;
		stg_auth_client_mac(key, sn, cn, 1000, m);
		CHECK(!stg_auth_mac_equal(m, cm));
		stg_auth_server_mac(key, sn, cn, 1000, m);
		CHECK(!stg_auth_mac_equal(m, sm));
		key[i] ^= 0x10;
	}
	for (int b = 0; b < 32; b++) {
		uint32_t uid = 1000u ^ (1u << b);
		stg_auth_client_mac(key, sn, cn, uid, m);
		CHECK(!stg_auth_mac_equal(m, cm));
		stg_auth_server_mac(key, sn, cn, uid, m);
		CHECK(!stg_auth_mac_equal(m, sm));
	}
	/* Unchanged inputs reproduce the MACs. */
	stg_auth_client_mac(key, sn, cn, 1000, m);
	CHECK(stg_auth_mac_equal(m, cm));
	stg_auth_server_mac(key, sn, cn, 1000, m);
	CHECK(stg_auth_mac_equal(m, sm));
}

static void test_mac_equal(void)
{
	uint8_t a[STG_AUTH_MAC_LEN], b[STG_AUTH_MAC_LEN];

	for (int i = 0; i < STG_AUTH_MAC_LEN; i++)
		a[i] = b[i] = (uint8_t)(i * 7);
	CHECK_EQ(stg_auth_mac_equal(a, b), 1);
	for (int i = 0; i < STG_AUTH_MAC_LEN; i++) {
		for (int bit = 0; bit < 8; bit++) {
			b[i] ^= (uint8_t)(1 << bit);
			CHECK_EQ(stg_auth_mac_equal(a, b), 0);
			b[i] ^= (uint8_t)(1 << bit);
		}
	}
}

static void test_random(void)
{
	uint8_t a[64], b[64], zero[64] = { 0 };

	CHECK_EQ(stg_auth_random(a, sizeof(a)), 0);
	CHECK_EQ(stg_auth_random(b, sizeof(b)), 0);
	CHECK(memcmp(a, b, sizeof(a)) != 0);
	CHECK(memcmp(a, zero, sizeof(a)) != 0);
	CHECK_EQ(stg_auth_random(a, 0), 0);
	/* More than one getrandom() call may return at once. */
	size_t n = 1 << 20;
	uint8_t *big = calloc(1, n);
	CHECK_EQ(stg_auth_random(big, n), 0);
	CHECK(memcmp(big + n - sizeof(zero), zero, sizeof(zero)) != 0);
	free(big);
}

/* Pins the derivation and both proofs: a change here breaks every deployed
 * client against every deployed server. Lines: uid key, client MAC, server MAC. */
static void test_golden(void)
{
	static struct stg_secret s;
	uint8_t sn[STG_AUTH_NONCE_LEN], cn[STG_AUTH_NONCE_LEN], key[STG_SHA256_LEN];
	uint8_t cm[STG_AUTH_MAC_LEN], sm[STG_AUTH_MAC_LEN];
	char text[3 * (2 * STG_SHA256_LEN + 1) + 1];

	fixed_inputs(&s, sn, cn);
	stg_auth_uid_key(&s, 1000, key);
	stg_auth_client_mac(key, sn, cn, 1000, cm);
	stg_auth_server_mac(key, sn, cn, 1000, sm);
	to_hex(key, sizeof(key), text);
	text[64] = '\n';
	to_hex(cm, sizeof(cm), text + 65);
	text[129] = '\n';
	to_hex(sm, sizeof(sm), text + 130);
	text[194] = '\n';
	text[195] = '\0';
	CHECK(harness_golden("auth-v1.txt", (const uint8_t *)text, 195));
}

/* Pins version 2's proofs and session keys, and checks that each of the
 * handshake's fields changes all of them. Lines: client proof, server
 * proof, client's frame key, server's frame key. */
static void test_derive_v2(void)
{
	static struct stg_secret s;
	struct stg_auth_transcript t = {.uid = 1000, .min_version = 1, .max_version = 2,
					.version = 2};
	uint8_t key[STG_SHA256_LEN], out[4][STG_SHA256_LEN], m[STG_SHA256_LEN];
	char text[4 * (2 * STG_SHA256_LEN + 1) + 1];

	fixed_inputs(&s, t.server_nonce, t.client_nonce);
	stg_auth_uid_key(&s, 1000, key);
	for (int w = 0; w < 4; w++) {
		stg_auth_derive(key, (enum stg_auth_derived)w, &t, out[w]);
		to_hex(out[w], STG_SHA256_LEN, text + 65 * w);
		text[65 * w + 64] = '\n';
		for (int v = 0; v < w; v++)
			CHECK(memcmp(out[v], out[w], STG_SHA256_LEN) != 0);
	}
	text[260] = '\0';
	CHECK(harness_golden("auth-v2.txt", (const uint8_t *)text, 260));

	/* What a man in the middle might change: the range offered (to force
	 * an older version), the version, the uid, either nonce. */
	struct stg_auth_transcript u[6];
	for (int i = 0; i < 6; i++)
		u[i] = t;
	u[0].min_version = 2;
	u[1].max_version = 3;
	u[2].version = 1;
	u[3].uid = 1001;
	u[4].server_nonce[31] ^= 1;
	u[5].client_nonce[0] ^= 1;
	for (int i = 0; i < 6; i++)
		for (int w = 0; w < 4; w++) {
			stg_auth_derive(key, (enum stg_auth_derived)w, &u[i], m);
			CHECK(memcmp(m, out[w], sizeof(m)) != 0);
		}
}

/* A user's key file proves that uid only, with the same MACs as the
 * cluster secret would give. */
static void test_user_key(void)
{
	static struct stg_secret cluster, user;
	uint8_t sn[STG_AUTH_NONCE_LEN], cn[STG_AUTH_NONCE_LEN];
	uint8_t k1[STG_SHA256_LEN], k2[STG_SHA256_LEN];
	char text[256], err[512], path[4096];
	fixed_inputs(&cluster, sn, cn);
	stg_user_key_format(&cluster, 1000, text, sizeof(text));
	CHECK(strncmp(text, "stagehand-user-key 1000 ", 24) == 0);
	CHECK_EQ(strlen(text), 24 + 64 + 1);
	char dir[] = "/tmp/stagehand-unit-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/user-key", dir);
	write_secret(path, text, 0600);
	CHECK_EQ(stg_secret_load(path, &user, err, sizeof(err)), 0);
	CHECK(user.user_key);
	CHECK_EQ(user.uid, 1000);
	CHECK_EQ(stg_auth_uid_key(&cluster, 1000, k1), 0);
	CHECK_EQ(stg_auth_uid_key(&user, 1000, k2), 0);
	CHECK(memcmp(k1, k2, sizeof(k1)) == 0);
	CHECK_EQ(stg_auth_uid_key(&user, 0, k2), -EACCES);
	CHECK_EQ(stg_auth_uid_key(&user, 1001, k2), -EACCES);
	/* Malformed: short key, bad hex, no uid, a uid past 32 bits. */
	const char *bad[] = {
		"stagehand-user-key 1000 abcd\n",
		"stagehand-user-key 1000 zz23456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
		"stagehand-user-key  0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
		"stagehand-user-key 4294967296 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_secret(path, bad[i], 0600);
		CHECK_EQ(stg_secret_load(path, &user, err, sizeof(err)), -EINVAL);
		CHECK(strstr(err, "not a valid user key") != NULL);
	}
	unlink(path);
	rmdir(dir);
}

/* Pins the MUNGE login's derivations from fixed inputs (a change breaks every
 * deployed client against every deployed server), and checks what each
 * field is for. Lines: X, the server's payload, the client's, the key. */
static void test_munge_v2(void)
{
	static struct stg_secret s;
	struct stg_auth_transcript t = {.uid = 1000, .min_version = 1, .max_version = 2,
					.version = 2};
	uint8_t cpub[32], spub[32], shared[32], x[STG_AUTH_MUNGE_X_LEN];
	uint8_t sp[STG_AUTH_MUNGE_PAYLOAD_LEN], cp[STG_AUTH_MUNGE_PAYLOAD_LEN];
	uint8_t key[STG_SHA256_LEN], other[STG_SHA256_LEN];
	static char text[2 * STG_AUTH_MUNGE_X_LEN + 4 * STG_AUTH_MUNGE_PAYLOAD_LEN +
			 2 * STG_SHA256_LEN + 5];

	fixed_inputs(&s, t.server_nonce, t.client_nonce);
	for (int i = 0; i < 32; i++) {
		cpub[i] = (uint8_t)(0x40 + i);
		spub[i] = (uint8_t)(0x80 + i);
		shared[i] = (uint8_t)(0xc0 + i);
	}
	stg_auth_munge_x(&t, cpub, spub, x);
	stg_auth_munge_payload(true, x, sp);
	stg_auth_munge_payload(false, x, cp);
	CHECK_EQ(stg_auth_munge_key(shared, x, 1000, key), 0);
	char *o = text;
	to_hex(x, sizeof(x), o);
	o += 2 * sizeof(x);
	*o++ = '\n';
	to_hex(sp, sizeof(sp), o);
	o += 2 * sizeof(sp);
	*o++ = '\n';
	to_hex(cp, sizeof(cp), o);
	o += 2 * sizeof(cp);
	*o++ = '\n';
	to_hex(key, sizeof(key), o);
	o += 2 * sizeof(key);
	*o++ = '\n';
	*o = '\0';
	CHECK(harness_golden("auth-munge-v2.txt", (const uint8_t *)text, (size_t)(o - text)));
	CHECK(memcmp(sp, "stagehand v2 munge server", 25) == 0 &&
	      memcmp(cp, "stagehand v2 munge client", 25) == 0 && memcmp(sp + 25, x, sizeof(x)) == 0);

	/* The key follows the secret, the exchange and the uid. */
	CHECK_EQ(stg_auth_munge_key(shared, x, 1001, other), 0);
	CHECK(memcmp(key, other, sizeof(key)) != 0);
	shared[5] ^= 1;
	CHECK_EQ(stg_auth_munge_key(shared, x, 1000, other), 0);
	CHECK(memcmp(key, other, sizeof(key)) != 0);
	shared[5] ^= 1;
	/* X changes with each public key, nonce and version field. */
	uint8_t y[STG_AUTH_MUNGE_X_LEN];
	spub[31] ^= 1;
	stg_auth_munge_x(&t, cpub, spub, y);
	CHECK(memcmp(x, y, sizeof(x)) != 0);
	spub[31] ^= 1;
	stg_auth_munge_x(&t, spub, cpub, y); /* the keys swapped */
	CHECK(memcmp(x, y, sizeof(x)) != 0);
	struct stg_auth_transcript u = t;
	u.min_version = 2;
	stg_auth_munge_x(&u, cpub, spub, y);
	CHECK(memcmp(x, y, sizeof(x)) != 0);
	u = t;
	u.client_nonce[0] ^= 1;
	stg_auth_munge_x(&u, cpub, spub, y);
	CHECK(memcmp(x, y, sizeof(x)) != 0);

	/* Two ends of a real exchange agree; a public key of all zeros (a
	 * point of small order, whose secret would be zero) is refused. */
	struct stg_kx a = {0}, b = {0};
	uint8_t sa[STG_KX_SHARED_LEN], sb[STG_KX_SHARED_LEN], zero[STG_KX_PUB_LEN] = {0};
	CHECK_EQ(stg_kx_new(&a), 0);
	CHECK_EQ(stg_kx_new(&b), 0);
	CHECK(memcmp(a.pub, b.pub, STG_KX_PUB_LEN) != 0);
	CHECK_EQ(stg_kx_shared(&a, b.pub, sa), 0);
	CHECK_EQ(stg_kx_shared(&b, a.pub, sb), 0);
	CHECK(memcmp(sa, sb, sizeof(sa)) == 0);
	CHECK_EQ(stg_kx_shared(&a, zero, sa), -EPROTO);
	stg_kx_done(&a);
	stg_kx_done(&b);
}

int main(void)
{
	test_hmac_rfc4231();
	test_secret_load();
	test_mac_inputs();
	test_mac_equal();
	test_random();
	test_golden();
	test_derive_v2();
	test_munge_v2();
	test_user_key();
	return harness_done();
}
