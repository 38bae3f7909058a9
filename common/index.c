/* SPDX-License-Identifier: MIT */
/* The dedup index: bucket files of fixed-size records, by hash prefix. */
#include "index.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

#define NBUCKETS 4096 /* 12 bits of the hash */

static int bucket_of(const char *name)
{
	int b = 0;
	for (int i = 0; i < 3; i++) {
		char ch = name[i];
		int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
		if (d < 0)
			return -1;
		b = b * 16 + d;
	}
	return name[3] == '\0' ? b : -1;
}

/* Encodes the run of entries from v[*i] that shares a bucket into buf (each
 * record once), names the bucket and moves *i past the run. Returns the
 * bytes encoded. */
static size_t encode_run(const struct stg_manifest_entry *v, size_t n, size_t *i, uint8_t *buf,
			 char name[8])
{
	char other[8];
	bucket_name(&v[*i].hash, name);
	size_t k = 0;
	for (; *i < n; (*i)++) {
		bucket_name(&v[*i].hash, other);
		if (strcmp(name, other) != 0)
			break;
		/* The same record twice (versions sharing a chunk) once. */
		if (*i > 0 && stg_hash_eq(&v[*i].hash, &v[*i - 1].hash) &&
		    v[*i].pack == v[*i - 1].pack && v[*i].offset == v[*i - 1].offset)
			continue;
		stg_index_encode(&v[*i], buf + k++ * STG_INDEX_RECORD_SIZE);
	}
	return k * STG_INDEX_RECORD_SIZE;
}

static struct stg_manifest_entry *sorted_copy(const struct stg_manifest_entry *entries, size_t n)
{
	struct stg_manifest_entry *v = malloc((n ? n : 1) * sizeof(*v));
	if (v) {
		memcpy(v, entries, n * sizeof(*v));
		qsort(v, n, sizeof(*v), cmp_bucket);
	}
	return v;
}

int stg_index_add(struct stg_cache *c, const struct stg_manifest_entry *entries, size_t n)
{
	if (n == 0)
		return 0;
	struct stg_manifest_entry *v = sorted_copy(entries, n);
	uint8_t *buf = v ? malloc(n * STG_INDEX_RECORD_SIZE) : NULL;
	int r = buf ? 0 : -ENOMEM;
	for (size_t i = 0; i < n && r == 0;) {
		char name[8];
		size_t len = encode_run(v, n, &i, buf, name);
		int fd = openat(c->index_fd, name, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0) {
			r = -errno;
			break;
		}
		/* One write per bucket: appends from concurrent writers do not mix. */
		r = stg_write_all(fd, buf, len);
		close(fd);
	}
	free(buf);
	free(v);
	return r;
}

/* Is the bucket file name exactly data? */
static bool bucket_is(struct stg_cache *c, const char *name, const uint8_t *data, size_t len)
{
	struct stat st;
	if (fstatat(c->index_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != len)
		return false;
	uint8_t *old;
	size_t oldlen;
	if (stg_read_file(c->index_fd, name, BUCKET_MAX, &old, &oldlen) < 0)
		return false;
	bool same = oldlen == len && memcmp(old, data, len) == 0;
	free(old);
	return same;
}

int stg_index_rewrite(struct stg_cache *c, const struct stg_manifest_entry *entries, size_t n)
{
	struct stg_manifest_entry *v = sorted_copy(entries, n);
	uint8_t *buf = v ? malloc(n * STG_INDEX_RECORD_SIZE + 1) : NULL;
	bool *live = buf ? calloc(NBUCKETS, sizeof(*live)) : NULL;
	if (!live) {
		free(buf);
		free(v);
		return -ENOMEM;
	}
	/* A bucket is replaced only when its records change: a collection that
	 * freed a few versions touches their buckets, not all of them (a file
	 * made costs the file system far more than a file read). */
	int r = 0;
	for (size_t i = 0; i < n && r == 0;) {
		char name[8];
		size_t len = encode_run(v, n, &i, buf, name);
		live[bucket_of(name)] = true;
		if (!bucket_is(c, name, buf, len))
			r = stg_write_file_atomic(c->index_fd, name, buf, len, STG_WRITE_CACHED);
	}
	/* Buckets with no live record go, and what a crash left. */
	DIR *d = r == 0 ? stg_opendir_at(c->index_fd, ".") : NULL;
	if (d) {
		struct dirent *de;
		while ((de = readdir(d))) {
			int b = bucket_of(de->d_name);
			if (de->d_name[0] != '.' && (b < 0 || !live[b]))
				unlinkat(c->index_fd, de->d_name, 0);
		}
		closedir(d);
	}
	free(live);
	free(buf);
	free(v);
	return r;
}
