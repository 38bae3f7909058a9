/* SPDX-License-Identifier: MIT */
/* Chunks across users on a staging server (abuse.bats):
 *
 *   chunk-scope HOST:PORT SECRET_FILE OWNER_UID PATH OTHER_UID MODE
 *
 * PATH is a file of OWNER_UID shipped to the server (one version, one
 * server). Knowing its chunks' hashes, and even their bytes, OTHER_UID:
 *   attack  asks HAVE and GET_CHUNK for them, files a manifest naming them as
 *           held, and sends a delta against one of them: each must be refused
 *           (nothing held, nothing served, every chunk MISSING, the delta's
 *           base unknown);
 *   prove   sends their bytes, then files the manifest under /scope/copy:
 *           taken, the server's chunk count unchanged (one copy), and then
 *           served to OTHER_UID byte for byte;
 *   check   (after prove, and a restart) is told it holds them and is served.
 * Prints what the server answered; exits 0 when all holds, 1 when not, 2 on
 * any other failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "chunk.h"
#include "conn.h"
#include "manifest.h"
#include "wire.h"

#define COPY "/scope/copy"

static const char *hostport;
static struct stg_secret secret;

static void die(const char *what, int r)
{
	fprintf(stderr, "chunk-scope: %s: %s\n", what, strerror(-r));
	exit(2);
}

static void login(struct stg_conn *c, uint32_t uid)
{
	char why[512];
	int r = stg_conn_login(hostport, STG_TRANSPORT_TCP, 30000, &secret, uid, c, why,
			       sizeof(why));
	if (r < 0)
		die(why, r);
	if ((r = stg_conn_pool(c, 80u << 20, STG_POOL_RECEIVE)) < 0)
		die("pool", r);
}

/* The newest manifest of path, decoded; its bytes in *ret_buf. */
static void fetch_manifest(struct stg_conn *c, const char *path, struct stg_manifest *m,
			   uint8_t **ret_buf, size_t *ret_len)
{
	struct stg_msg req = {.type = STG_MSG_GET_MANIFEST}, rep;
	req.get_manifest.path = path;
	req.get_manifest.path_len = (uint32_t)strlen(path);
	int r = stg_conn_call(c, &req, STG_MSG_MANIFEST, &rep);
	if (r < 0)
		die(c->error, r);
	*ret_buf = malloc(rep.manifest.len);
	memcpy(*ret_buf, rep.manifest.manifest, rep.manifest.len);
	*ret_len = rep.manifest.len;
	if ((r = stg_manifest_decode(*ret_buf, *ret_len, m)) < 0)
		die("manifest", r);
}

/* Chunk i's object, malloc'ed, or NULL with the error in *ret_err. */
static uint8_t *get_chunk(struct stg_conn *c, const struct stg_hash *h, size_t *ret_len,
			  int *ret_err)
{
	struct stg_msg req = {.type = STG_MSG_GET_CHUNK}, rep;
	req.get_chunk.hash = *h;
	*ret_err = stg_conn_call(c, &req, STG_MSG_CHUNK, &rep);
	if (*ret_err < 0)
		return NULL;
	uint8_t *obj = malloc(rep.chunk.len);
	memcpy(obj, rep.chunk.obj, rep.chunk.len);
	*ret_len = rep.chunk.len;
	return obj;
}

/* How many of the manifest's chunks HAVE says are held. */
static uint32_t count_held(struct stg_conn *c, const struct stg_manifest *m)
{
	uint8_t *hashes = malloc((size_t)m->nchunks * 16 + 1);
	for (uint32_t i = 0; i < m->nchunks; i++)
		memcpy(hashes + (size_t)i * 16, m->entries[i].hash.b, 16);
	struct stg_msg req = {.type = STG_MSG_HAVE}, rep;
	req.have.count = m->nchunks;
	req.have.hashes = hashes;
	int r = stg_conn_call(c, &req, STG_MSG_HAVE_REPLY, &rep);
	if (r < 0)
		die(c->error, r);
	uint32_t n = 0;
	for (uint32_t i = 0; i < m->nchunks; i++)
		n += (rep.have_reply.bitmap[i / 8] >> (i % 8)) & 1;
	free(hashes);
	return n;
}

/* Files the manifest under COPY, every chunk claimed held: 0, or how many
 * the server answered MISSING for (-1: another refusal). */
static int put_copy(struct stg_conn *c, const uint8_t *mf, size_t len, uint32_t nchunks)
{
	size_t nbits = (nchunks + 7) / 8;
	uint8_t *held = calloc(1, nbits + 1);
	for (uint32_t i = 0; i < nchunks; i++)
		held[i / 8] |= (uint8_t)(1u << (i % 8));
	struct stg_msg req = {.type = STG_MSG_PUT_MANIFEST}, rep;
	req.put_manifest.keep = 1;
	req.put_manifest.path = COPY;
	req.put_manifest.path_len = (uint32_t)strlen(COPY);
	req.put_manifest.manifest = mf;
	req.put_manifest.manifest_len = (uint32_t)len;
	req.put_manifest.held = held;
	req.put_manifest.held_len = (uint32_t)nbits;
	/* (MISSING is a reply of its own: ask for it to count it.) */
	int r = stg_conn_call(c, &req, STG_MSG_MISSING, &rep);
	free(held);
	if (r == 0)
		return (int)rep.missing.count;
	if (r == -EPROTO && strstr(c->error, "got OK"))
		return 0;
	fprintf(stderr, "chunk-scope: PUT_MANIFEST: %s\n", c->error);
	return -1;
}

static uint32_t stored_chunks(struct stg_conn *c)
{
	struct stg_msg req = {.type = STG_MSG_STAT}, rep;
	int r = stg_conn_call(c, &req, STG_MSG_STAT_REPLY, &rep);
	if (r < 0)
		die(c->error, r);
	return (uint32_t)rep.stat_reply.chunks;
}

/* Does obj decode to the bytes of entry e? */
static bool decodes_to(const uint8_t *obj, size_t len, const struct stg_manifest_entry *e,
		       const uint8_t *want)
{
	uint8_t *out = malloc(e->raw_len + 1);
	bool ok = stg_chunk_decode(obj, len, &e->hash, e->raw_len, out) == 0 &&
		  memcmp(out, want, e->raw_len) == 0;
	free(out);
	return ok;
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: chunk-scope HOST:PORT SECRET_FILE OWNER_UID PATH OTHER_UID "
			"attack|prove|check\n");
		return 2;
	}
	hostport = argv[1];
	char err[512];
	if (stg_secret_load(argv[2], &secret, err, sizeof(err)) < 0) {
		fprintf(stderr, "chunk-scope: %s\n", err);
		return 2;
	}
	uint32_t owner = (uint32_t)strtoul(argv[3], NULL, 10);
	uint32_t other = (uint32_t)strtoul(argv[5], NULL, 10);
	const char *mode = argv[6];

	/* What the owner holds: the manifest, each chunk's object and bytes. */
	struct stg_conn oc, xc;
	login(&oc, owner);
	struct stg_manifest m;
	uint8_t *mf;
	size_t mflen;
	fetch_manifest(&oc, argv[4], &m, &mf, &mflen);
	uint32_t n = m.nchunks;
	uint8_t **obj = calloc(n, sizeof(*obj)), **raw = calloc(n, sizeof(*raw));
	size_t *objlen = calloc(n, sizeof(*objlen));
	for (uint32_t i = 0; i < n; i++) {
		int r;
		if (m.entries[i].flags & STG_ENTRY_ZERO) {
			fprintf(stderr, "chunk-scope: write %s without holes\n", argv[4]);
			return 2;
		}
		if (!(obj[i] = get_chunk(&oc, &m.entries[i].hash, &objlen[i], &r)))
			die(oc.error, r);
		raw[i] = malloc(m.entries[i].raw_len);
		if ((r = stg_chunk_decode(obj[i], objlen[i], &m.entries[i].hash,
					  m.entries[i].raw_len, raw[i])) < 0)
			die("decoding the owner's chunk (one version, not a delta)", r);
	}
	login(&xc, other);
	int bad = 0;

	if (strcmp(mode, "attack") == 0) {
		uint32_t held = count_held(&xc, &m), served = 0;
		for (uint32_t i = 0; i < n; i++) {
			size_t len;
			int r;
			uint8_t *o = get_chunk(&xc, &m.entries[i].hash, &len, &r);
			served += o != NULL;
			if (!o && r != -ENOENT)
				die(xc.error, r);
			free(o);
		}
		int missing = put_copy(&xc, mf, mflen, n);
		/* A delta against the owner's first chunk: a copy of it with a
		 * byte changed. */
		uint32_t len0 = m.entries[0].raw_len;
		uint8_t *x = malloc(len0), *d = malloc(stg_chunk_bound(len0) + STG_CHUNK_BASE_SIZE);
		memcpy(x, raw[0], len0);
		x[0] ^= 0xff;
		struct stg_hash hx;
		stg_hash_compute(x, len0, &hx);
		size_t dlen = stg_chunk_encode_delta(x, len0, &hx, raw[0], &m.entries[0].hash,
						     &stg_chunk_codec_default, d);
		if (dlen == 0)
			die("the delta does not pay", -EINVAL);
		struct stg_msg req = {.type = STG_MSG_PUT_CHUNK}, rep;
		req.put_chunk.obj = d;
		req.put_chunk.len = (uint32_t)dlen;
		int dr = stg_conn_call(&xc, &req, STG_MSG_OK, &rep);
		printf("uid %u, of uid %u's %u chunks: HAVE says %u held, GET_CHUNK served %u, "
		       "PUT_MANIFEST: %d missing; a delta against one: %s\n", other, owner, n, held,
		       served, missing, dr == 0 ? "taken" : xc.error);
		bad = held != 0 || served != 0 || missing != (int)n || dr != -ENOENT;
		free(x);
		free(d);
	} else if (strcmp(mode, "prove") == 0) {
		uint32_t before = stored_chunks(&xc), sent = 0;
		for (uint32_t i = 0; i < n; i++) {
			struct stg_msg req = {.type = STG_MSG_PUT_CHUNK}, rep;
			req.put_chunk.obj = obj[i];
			req.put_chunk.len = (uint32_t)objlen[i];
			int r = stg_conn_call(&xc, &req, STG_MSG_OK, &rep);
			if (r < 0)
				fprintf(stderr, "chunk-scope: PUT_CHUNK %u: %s\n", i, xc.error);
			sent += r == 0;
		}
		int missing = put_copy(&xc, mf, mflen, n);
		uint32_t after = stored_chunks(&xc), held = count_held(&xc, &m);
		printf("uid %u sent %u of %u chunks; PUT_MANIFEST: %d missing; chunks stored: %u "
		       "before, %u after; HAVE says %u held\n", other, sent, n, missing, before,
		       after, held);
		bad = sent != n || missing != 0 || after != before || held != n;
	} else if (strcmp(mode, "check") != 0) {
		fprintf(stderr, "chunk-scope: unknown mode '%s'\n", mode);
		return 2;
	}
	if (strcmp(mode, "attack") != 0) {
		uint32_t held = count_held(&xc, &m), same = 0;
		for (uint32_t i = 0; i < n; i++) {
			size_t len;
			int r;
			uint8_t *o = get_chunk(&xc, &m.entries[i].hash, &len, &r);
			same += o && decodes_to(o, len, &m.entries[i], raw[i]);
			free(o);
		}
		printf("uid %u: HAVE says %u of %u held; %u served byte for byte\n", other, held, n,
		       same);
		bad |= held != n || same != n;
	}
	stg_conn_close(&oc);
	stg_conn_close(&xc);
	return bad;
}
