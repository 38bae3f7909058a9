/* SPDX-License-Identifier: MIT */
/* The dedup index: bucket files of fixed-size records, by hash prefix. */
#include "index.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunk.h"
#include "pack.h"
#include "policy.h"
#include "util.h"

/* A bucket larger than this is damaged, not big. */
#define BUCKET_MAX (64u << 20)

static void bucket_name(const struct stg_hash *h, char out[8])
{
	static const char hex[] = "0123456789abcdef";
	out[0] = hex[h->b[0] >> 4];
	out[1] = hex[h->b[0] & 15];
	out[2] = hex[h->b[1] >> 4];
	out[3] = '\0';
}

void stg_index_encode(const struct stg_manifest_entry *e, uint8_t out[STG_INDEX_RECORD_SIZE])
{
	memcpy(out, e->hash.b, 16);
	stg_put_le64(out + 16, e->pack);
	stg_put_le64(out + 24, e->offset);
	stg_put_le32(out + 32, e->raw_len);
	stg_put_le32(out + 36, e->stored_len);
	stg_put_le32(out + 40, e->flags & STG_ENTRY_ENCODED);
	stg_put_le32(out + 44, (uint32_t)stg_hash64(out, 44));
}

int stg_index_decode(const uint8_t in[STG_INDEX_RECORD_SIZE], struct stg_manifest_entry *ret)
{
	if (stg_get_le32(in + 44) != (uint32_t)stg_hash64(in, 44))
		return -EBADMSG;
	struct stg_manifest_entry e = {0};
	memcpy(e.hash.b, in, 16);
	e.pack = stg_get_le64(in + 16);
	e.offset = stg_get_le64(in + 24);
	e.raw_len = stg_get_le32(in + 32);
	e.stored_len = stg_get_le32(in + 36);
	e.flags = stg_get_le32(in + 40);
	if (e.pack == 0 || e.offset % STG_PACK_ALIGN || e.raw_len == 0 ||
	    e.raw_len > STG_CHUNK_MAX || (e.flags & ~(uint32_t)STG_ENTRY_ENCODED) ||
	    !stg_chunk_stored_len_ok(e.raw_len, e.stored_len, e.flags & STG_ENTRY_ENCODED))
		return -EBADMSG;
	*ret = e;
	return 0;
}

int stg_index_lookup(struct stg_cache *c, const struct stg_hash *h, uint32_t raw_len,
		     struct stg_manifest_entry *ret)
{
	char name[8];
	bucket_name(h, name);
	uint8_t *data;
	size_t len;
	int r = stg_read_file(c->index_fd, name, BUCKET_MAX, &data, &len);
	if (r == -ENOENT || r == -EFBIG)
		return 0;
	if (r < 0)
		return r;
	int found = 0;
	/* Newest records last: search backwards, they are the likeliest alive. */
	for (size_t off = len - len % STG_INDEX_RECORD_SIZE; off >= STG_INDEX_RECORD_SIZE && !found;
	     off -= STG_INDEX_RECORD_SIZE) {
		const uint8_t *rec = data + off - STG_INDEX_RECORD_SIZE;
		if (memcmp(rec, h->b, 16) != 0)
			continue;
		struct stg_manifest_entry e;
		if (stg_index_decode(rec, &e) < 0 || e.raw_len != raw_len)
			continue;
		int ok = stg_pack_check(c, &e);
		if (ok < 0) {
			r = ok;
			break;
		}
		if (ok) {
			*ret = e;
			found = 1;
		}
	}
	free(data);
	return r < 0 ? r : found;
}

static int cmp_bucket(const void *a, const void *b)
{
	const struct stg_manifest_entry *x = a, *y = b;
	int c = memcmp(x->hash.b, y->hash.b, 2);
	return c ? c : memcmp(x->hash.b, y->hash.b, 16);
}

/* Writes runs of entries that share a bucket with one append each. */
static int append_sorted(struct stg_cache *c, struct stg_manifest_entry *v, size_t n, bool fresh)
{
	qsort(v, n, sizeof(*v), cmp_bucket);
	uint8_t *buf = malloc(n * STG_INDEX_RECORD_SIZE + 1);
	if (!buf)
		return -ENOMEM;
	int r = 0;
	for (size_t i = 0; i < n && r == 0;) {
		char name[8], other[8];
		bucket_name(&v[i].hash, name);
		size_t k = 0;
		for (; i < n; i++) {
			bucket_name(&v[i].hash, other);
			if (strcmp(name, other) != 0)
				break;
			/* The same record twice (versions sharing a chunk) once. */
			if (i > 0 && stg_hash_eq(&v[i].hash, &v[i - 1].hash) &&
			    v[i].pack == v[i - 1].pack && v[i].offset == v[i - 1].offset)
				continue;
			stg_index_encode(&v[i], buf + k++ * STG_INDEX_RECORD_SIZE);
		}
		if (fresh) {
			r = stg_write_file_atomic(c->index_fd, name, buf, k * STG_INDEX_RECORD_SIZE,
						  false);
			continue;
		}
		int fd = openat(c->index_fd, name, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0) {
			r = -errno;
			break;
		}
		/* One write per bucket: appends from concurrent writers do not mix. */
		r = stg_write_all(fd, buf, k * STG_INDEX_RECORD_SIZE);
		close(fd);
	}
	free(buf);
	return r;
}

int stg_index_add(struct stg_cache *c, const struct stg_manifest_entry *entries, size_t n)
{
	if (n == 0)
		return 0;
	struct stg_manifest_entry *v = malloc(n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	memcpy(v, entries, n * sizeof(*v));
	int r = append_sorted(c, v, n, false);
	free(v);
	return r;
}

int stg_index_rewrite(struct stg_cache *c, const struct stg_manifest_entry *entries, size_t n)
{
	struct stg_manifest_entry *v = malloc((n ? n : 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	memcpy(v, entries, n * sizeof(*v));
	/* Buckets with no live entry go; the others are replaced whole. */
	DIR *d = stg_opendir_at(c->index_fd, ".");
	if (d) {
		struct dirent *de;
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				unlinkat(c->index_fd, de->d_name, 0);
		closedir(d);
	}
	int r = append_sorted(c, v, n, true);
	free(v);
	return r;
}
