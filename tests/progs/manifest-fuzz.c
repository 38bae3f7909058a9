/* SPDX-License-Identifier: MIT */
/* Hostile PUT_MANIFEST frames for a staging server (abuse.bats):
 *
 *   manifest-fuzz HOST:PORT SECRET_FILE UID PATH ROUNDS
 *
 * Logs in as UID, fetches the newest manifest of PATH (shipped there
 * already) and sends ROUNDS mutations of it: bytes flipped, fields
 * overwritten, cut short, and, decoded and encoded again so that they pass
 * the checksum, chunks the server does not hold, counts, sizes and lengths
 * that do not add up, under PATH and under other paths. A dropped connection
 * is opened again. Each claims every chunk held on this server (as a client
 * of a one-server cluster does; a server takes a manifest naming chunks held
 * on others, and checks those claimed here). Then it checks what the server
 * serves: every version it lists has a manifest that decodes, and every
 * chunk that manifest names is held (HAVE). Prints what the server answered and exits 0 when all holds,
 * 1 when not, 2 on any other failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "conn.h"
#include "manifest.h"
#include "wire.h"

static const char *hostport;
static struct stg_secret secret;
static uint32_t uid;
static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void die(const char *what, int r)
{
	fprintf(stderr, "manifest-fuzz: %s: %s\n", what, strerror(-r));
	exit(2);
}

static void login(struct stg_conn *c)
{
	char why[512];
	int r = stg_conn_login(hostport, STG_TRANSPORT_TCP, 30000, &secret, uid, c, why,
			       sizeof(why));
	if (r < 0)
		die("login", r);
}

/* The newest manifest of path, malloc'ed. */
static uint8_t *fetch(struct stg_conn *c, const char *path, uint64_t version, size_t *ret_len)
{
	struct stg_msg req = {.type = STG_MSG_GET_MANIFEST}, rep;
	req.get_manifest.version = version;
	req.get_manifest.path = path;
	req.get_manifest.path_len = (uint32_t)strlen(path);
	int r = stg_conn_call(c, &req, STG_MSG_MANIFEST, &rep);
	if (r < 0)
		return NULL;
	uint8_t *buf = malloc(rep.manifest.len);
	if (!buf)
		die("malloc", -ENOMEM);
	memcpy(buf, rep.manifest.manifest, rep.manifest.len);
	*ret_len = rep.manifest.len;
	return buf;
}

/* One mutation of the valid manifest mf into out; returns its length. */
static size_t mutate(const uint8_t *mf, size_t len, uint8_t *out, size_t cap)
{
	memcpy(out, mf, len);
	size_t n = len;
	switch (next() % 4) {
	case 0: /* bytes flipped */
		for (int k = 1 + (int)(next() % 4); k > 0; k--)
			out[next() % n] ^= (uint8_t)(1u << (next() % 8));
		return n;
	case 1: /* a field overwritten: small, huge or off by one */
		if (n >= 8) {
			size_t at = next() % (n - 4);
			uint32_t v = next() % 3 == 0 ? (uint32_t)next() : (uint32_t)(next() % 64);
			memcpy(out + at, &v, 4);
		}
		return n;
	case 2: /* cut short */
		return next() % n;
	default: { /* decoded, changed, encoded again: passes the checksum */
		struct stg_manifest m;
		if (stg_manifest_decode(mf, len, &m) < 0 || m.nchunks == 0)
			return n;
		struct stg_manifest_entry *e = &m.entries[next() % m.nchunks];
		switch (next() % 7) {
		case 0: /* a chunk nobody sent */
			for (size_t i = 0; i < sizeof(e->hash.b); i++)
				e->hash.b[i] = (uint8_t)next();
			break;
		case 1: e->raw_len = (uint32_t)next(); break;
		case 2: m.size = next() % 3 == 0 ? next() : m.size + 1; break;
		case 3: m.nchunks = m.nchunks > 1 ? m.nchunks - 1 : 0; break;
		case 4: e->stored_len = (uint32_t)next(); break;
		case 5: m.chunk_size = (uint32_t)(next() % 3 ? 0 : next()); break;
		default: break; /* the same chunks: under a new id, a new version */
		}
		/* Under another id as often as not: the same id with other
		 * chunks is refused as EXIST before anything else. */
		if (next() % 2)
			m.version += 1 + next() % 1000;
		size_t want = stg_manifest_encoded_size(&m);
		if (want <= cap)
			n = stg_manifest_encode(&m, out);
		stg_manifest_done(&m);
		return n;
	}
	}
}

/* Whether every version the server lists has a manifest that decodes, all
 * of whose chunks it holds. */
static int check_served(struct stg_conn *c)
{
	struct stg_msg req = {.type = STG_MSG_LIST}, rep;
	req.list.prefix = "";
	int r = stg_conn_call(c, &req, STG_MSG_LIST_REPLY, &rep);
	if (r < 0)
		die("LIST", r);
	/* The entries refer to the connection's buffer: copied first. */
	size_t n = rep.list_reply.count, checked = 0;
	struct {
		char path[4096];
		uint64_t version;
	} *v = calloc(n ? n : 1, sizeof(*v));
	uint32_t off = 0;
	struct stg_list_entry e;
	for (size_t i = 0; i < n && stg_wire_list_next(&rep.list_reply, &off, &e) > 0; i++) {
		snprintf(v[i].path, sizeof(v[i].path), "%.*s", (int)e.path_len, e.path);
		v[i].version = e.version;
	}
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len;
		uint8_t *mf = fetch(c, v[i].path, v[i].version, &len);
		struct stg_manifest m;
		if (!mf || stg_manifest_decode(mf, len, &m) < 0) {
			printf("served a manifest that does not decode: %s version %llu\n", v[i].path,
			       (unsigned long long)v[i].version);
			bad = 1;
			free(mf);
			continue;
		}
		for (uint32_t k = 0; k < m.nchunks; k++) {
			if (m.entries[k].flags & STG_ENTRY_ZERO)
				continue;
			struct stg_msg h = {.type = STG_MSG_HAVE}, hr;
			h.have.count = 1;
			h.have.hashes = m.entries[k].hash.b;
			if (stg_conn_call(c, &h, STG_MSG_HAVE_REPLY, &hr) < 0 || !(hr.have_reply.bitmap[0] & 1)) {
				printf("served %s version %llu naming chunk %u, which it does not hold\n",
				       v[i].path, (unsigned long long)v[i].version, k);
				bad = 1;
			}
		}
		checked++;
		stg_manifest_done(&m);
		free(mf);
	}
	printf("served %zu manifests%s\n", checked, bad ? "" : ", every chunk of each held");
	free(v);
	return bad;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: manifest-fuzz HOST:PORT SECRET_FILE UID PATH ROUNDS\n");
		return 2;
	}
	hostport = argv[1];
	char err[512];
	if (stg_secret_load(argv[2], &secret, err, sizeof(err)) < 0) {
		fprintf(stderr, "manifest-fuzz: %s\n", err);
		return 2;
	}
	uid = (uint32_t)atoi(argv[3]);
	const char *path = argv[4];
	int rounds = atoi(argv[5]);
	struct stg_conn c;
	login(&c);
	size_t len;
	uint8_t *mf = fetch(&c, path, 0, &len);
	if (!mf)
		die("GET_MANIFEST of the shipped file", -ENOENT);
	static uint8_t out[1 << 20];
	unsigned answers[4] = {0}; /* OK, MISSING, ERROR, dropped */
	for (int i = 0; i < rounds; i++) {
		char other[4200];
		snprintf(other, sizeof(other), "%s.fuzz%d", path, (int)(next() % 4));
		size_t n = mutate(mf, len, out, sizeof(out));
		/* Every chunk but the holes claimed held here, as a client of
		 * a one-server cluster claims them (a server takes a manifest
		 * naming chunks held elsewhere: it checks those claimed held);
		 * now and then a bitmap of another size, or random bits. */
		uint8_t held[64] = {0};
		struct stg_manifest dm;
		uint32_t bitmap = 1;
		if (stg_manifest_decode(out, n, &dm) == 0) {
			bitmap = (dm.nchunks + 7) / 8;
			for (uint32_t k = 0; k < dm.nchunks && k < 8 * sizeof(held); k++)
				if (!(dm.entries[k].flags & STG_ENTRY_ZERO))
					held[k / 8] |= (uint8_t)(1u << (k % 8));
			stg_manifest_done(&dm);
		}
		if (bitmap > sizeof(held))
			bitmap = sizeof(held);
		else if (next() % 16 == 0) {
			/* of a wrong size, so that no chunk is taken as elsewhere */
			bitmap = bitmap + 1 + (uint32_t)(next() % 8) > sizeof(held)
					 ? 0
					 : bitmap + 1 + (uint32_t)(next() % 8);
			for (size_t k = 0; k < sizeof(held); k++)
				held[k] = (uint8_t)next();
		}
		struct stg_msg req = {.type = STG_MSG_PUT_MANIFEST}, rep;
		req.put_manifest.keep = 1 + (uint32_t)(next() % 3);
		req.put_manifest.path = next() % 2 ? path : other;
		req.put_manifest.path_len = (uint32_t)strlen(req.put_manifest.path);
		req.put_manifest.manifest = out;
		req.put_manifest.manifest_len = (uint32_t)n;
		req.put_manifest.held = held;
		req.put_manifest.held_len = bitmap;
		int r = stg_conn_call(&c, &req, STG_MSG_OK, &rep);
		if (r == 0)
			answers[0]++;
		else if (r == -EPROTO && strstr(c.error, "got MISSING"))
			answers[1]++;
		else if (r == -EPIPE || r == -ECONNRESET || r == -EPROTO || r == -ETIMEDOUT) {
			answers[3]++;
			stg_conn_close(&c);
			login(&c);
		} else {
			answers[2]++;
		}
	}
	printf("%d mutated manifests: %u accepted, %u answered MISSING, %u refused, %u dropped "
	       "the connection\n",
	       rounds, answers[0], answers[1], answers[2], answers[3]);
	int bad = check_served(&c);
	struct stg_msg st = {.type = STG_MSG_STAT}, sr;
	if (stg_conn_call(&c, &st, STG_MSG_STAT_REPLY, &sr) < 0) {
		printf("the server does not answer STAT\n");
		bad = 1;
	}
	stg_conn_close(&c);
	free(mf);
	return bad;
}
