/* SPDX-License-Identifier: MIT */
/* The store's delta objects: decoding them with their bases, checking one before it is stored. */
#include "store-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunk.h"
#include "log.h"
#include "ringio.h"
#include "thread.h"
#include "util.h"

/* Decodes stored chunk h into out (raw_len bytes) through its chain of
 * bases, root first; *ret_depth: the deltas in the chain. Returns 0,
 * -ENOENT (h or a base is not stored), -EBADMSG, -ESTALE (the chain changed
 * while it was read) or -errno. */
static int decode_stored(struct stg_store *s, const struct stg_hash *h, uint32_t raw_len,
			 uint8_t *out, unsigned *ret_depth)
{
	struct stg_hash chain[STG_CHUNK_DELTA_DEPTH + 1];
	unsigned n = 0;
	chain[0] = *h;
	pthread_mutex_lock(&s->lock);
	const struct stg_hash *b;
	while ((b = stg_bases_find(s->bases, &chain[n])) && n < STG_CHUNK_DELTA_DEPTH)
		chain[++n] = *b;
	pthread_mutex_unlock(&s->lock);
	if (b)
		return -EBADMSG; /* deeper than the store keeps them */
	uint8_t *base = n ? malloc(raw_len) : NULL;
	if (n && !base)
		return -ENOMEM;
	int r = 0;
	for (unsigned i = n + 1; i-- > 0 && r == 0;) {
		struct stg_store_obj o;
		r = stg_store_get(s, &chain[i], &o);
		if (r < 0)
			break;
		struct stg_hash named;
		bool delta = stg_chunk_base(o.obj, o.len, &named);
		if (delta != (i < n) || (delta && !stg_hash_eq(&named, &chain[i + 1]))) {
			r = -ESTALE;
		} else if (!delta) {
			r = stg_chunk_decode(o.obj, o.len, &chain[i], raw_len, out);
		} else {
			memcpy(base, out, raw_len);
			r = stg_chunk_decode_delta(o.obj, o.len, &chain[i], raw_len, base, out);
		}
		stg_store_obj_free(&o);
	}
	free(base);
	*ret_depth = n;
	return r;
}

/* Encodes raw, the chunk h of hd's raw_len bytes, on its own with the codec
 * and filter hd names, into *ret (malloc'ed). */
static int encode_whole(const struct stg_chunk_header *hd, const struct stg_hash *h,
			const uint8_t *raw, uint8_t **ret, size_t *ret_len)
{
	struct stg_chunk_codec c = {.compress = hd->codec, .filter = hd->filter,
				    .element = hd->element};
	uint8_t *p = malloc(stg_chunk_bound(hd->raw_len));
	if (!p)
		return -ENOMEM;
	*ret_len = stg_chunk_encode(raw, hd->raw_len, h, &c, p);
	*ret = p;
	return 0;
}

/* A delta object to store: its base is stored (-ENOLINK if not) and it
 * decodes to h. When its chain would get deeper than
 * STG_CHUNK_DELTA_DEPTH, *ret_plain receives the chunk encoded on its own
 * (the codec and filter the delta used), to store instead. */
int store_check_delta(struct stg_store *s, const uint8_t *obj, size_t len,
		      const struct stg_hash *h, const struct stg_hash *base, uint8_t **ret_plain,
		      size_t *ret_plain_len)
{
	struct stg_chunk_header hd;
	int r = stg_chunk_header_decode(obj, len, h, stg_get_le32(obj + 8), &hd);
	if (r < 0)
		return r;
	uint8_t *braw = malloc(hd.raw_len), *raw = malloc(hd.raw_len);
	unsigned depth = 0;
	r = braw && raw ? 0 : -ENOMEM;
	if (r == 0) {
		/* Touched first, so that a collection running now keeps it. */
		r = stg_store_touch(s, base)
			    ? decode_stored(s, base, hd.raw_len, braw, &depth)
			    : -ENOLINK;
		/* A base gone or corrupt here: the client sends the chunk whole. */
		if (r == -ENOENT || r == -EBADMSG)
			r = -ENOLINK;
	}
	if (r == 0)
		r = stg_chunk_decode_delta(obj, len, h, hd.raw_len, braw, raw);
	*ret_plain = NULL;
	if (r == 0 && depth + 1 > STG_CHUNK_DELTA_DEPTH)
		r = encode_whole(&hd, h, raw, ret_plain, ret_plain_len);
	free(braw);
	free(raw);
	return r;
}

/* Decodes the object (a delta with its stored chain) into raw, hd's raw_len
 * bytes; the content hash is checked. */
static int decode_obj(struct stg_store *s, const uint8_t *obj, size_t len,
		      const struct stg_chunk_header *hd, uint8_t *raw)
{
	struct stg_hash base;
	if (!stg_chunk_base(obj, len, &base))
		return stg_chunk_decode(obj, len, &hd->hash, hd->raw_len, raw);
	uint8_t *braw = malloc(hd->raw_len);
	if (!braw)
		return -ENOMEM;
	unsigned depth;
	int r = decode_stored(s, &base, hd->raw_len, braw, &depth);
	if (r == -ENOENT)
		r = -ENOLINK;
	if (r == 0)
		r = stg_chunk_decode_delta(obj, len, &hd->hash, hd->raw_len, braw, raw);
	free(braw);
	return r;
}

int stg_store_same(struct stg_store *s, const struct stg_hash *h, const uint8_t *obj, size_t len)
{
	struct stg_chunk_header hd;
	if (len < STG_CHUNK_HEADER_SIZE ||
	    stg_chunk_header_decode(obj, len, h, stg_get_le32(obj + 8), &hd) < 0)
		return -EBADMSG;
	uint8_t *mine = malloc(hd.raw_len), *held = malloc(hd.raw_len);
	int r = mine && held ? decode_obj(s, obj, len, &hd, mine) : -ENOMEM;
	if (r == 0) {
		unsigned depth;
		r = decode_stored(s, h, hd.raw_len, held, &depth);
		/* Another length, or damage: not the same bytes either way. */
		if (r == -EBADMSG)
			r = 0;
		else if (r == 0)
			r = memcmp(mine, held, hd.raw_len) == 0;
	}
	free(mine);
	free(held);
	return r;
}

int stg_store_get_whole(struct stg_store *s, const struct stg_hash *h, struct stg_store_obj *ret)
{
	struct stg_store_obj o;
	int r = stg_store_get(s, h, &o);
	struct stg_hash base;
	if (r < 0 || !stg_chunk_base(o.obj, o.len, &base)) {
		*ret = o;
		return r;
	}
	struct stg_chunk_header hd;
	r = stg_chunk_header_decode(o.obj, o.len, h, stg_get_le32(o.obj + 8), &hd);
	stg_store_obj_free(&o);
	if (r < 0)
		return -EBADMSG;
	uint8_t *raw = malloc(hd.raw_len), *whole = NULL;
	size_t len = 0;
	unsigned depth;
	r = raw ? decode_stored(s, h, hd.raw_len, raw, &depth) : -ENOMEM;
	if (r == 0)
		r = encode_whole(&hd, h, raw, &whole, &len);
	free(raw);
	if (r == 0)
		*ret = (struct stg_store_obj){whole, len, whole};
	return r;
}
