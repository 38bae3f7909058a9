/* SPDX-License-Identifier: MIT */
/* Builds one new version of a captured path: chunks in, manifest published. */
#include "builder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "chunk.h"
#include "gc.h"
#include "log.h"
#include "util.h"

struct stg_builder {
	struct stg_cache *cache;
	char path[PATH_MAX];
	struct stg_path_rule rule;
	struct stg_manifest base; /* the previous version, for dedup */
	bool has_base;
	struct stg_manifest_entry *entries;
	uint8_t *recorded; /* entries[i] is set */
	uint64_t cap;
	uint8_t *encbuf;
	struct stg_hash zero_hash; /* of chunk_size zero bytes */
	int pinfd;
	struct stg_builder_stats stats;
};

static int load_base(struct stg_builder *b)
{
	struct stg_catalog_file f;
	int r = stg_catalog_lock(b->cache, b->path, false, &f);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	uint64_t *v;
	size_t n;
	r = stg_catalog_versions(f.dirfd, &v, &n);
	if (r == 0 && n > 0) {
		/* A damaged previous version only costs the dedup. */
		if (stg_catalog_read(f.dirfd, v[n - 1], &b->base) == 0)
			b->has_base = b->base.chunk_size == b->rule.chunk_size;
		if (!b->has_base && b->base.entries)
			stg_manifest_done(&b->base);
	}
	if (r == 0)
		free(v);
	stg_catalog_unlock(&f);
	return r;
}

int stg_builder_new(struct stg_cache *c, const char *path, const struct stg_path_rule *rule,
		    struct stg_builder **ret)
{
	if (strlen(path) >= PATH_MAX)
		return -ENAMETOOLONG;
	struct stg_builder *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->cache = c;
	strcpy(b->path, path);
	b->rule = *rule;
	b->rule.glob = NULL;
	b->pinfd = -1;
	int r = -ENOMEM;
	b->encbuf = malloc(stg_chunk_bound(rule->chunk_size));
	uint8_t *zeros = calloc(1, rule->chunk_size);
	if (!b->encbuf || !zeros) {
		free(zeros);
		goto out_free;
	}
	stg_hash_compute(zeros, rule->chunk_size, &b->zero_hash);
	free(zeros);
	r = b->pinfd = stg_gc_pin(c);
	if (r < 0)
		goto out_free;
	if (rule->dedup && (r = load_base(b)) < 0)
		goto out_free;
	*ret = b;
	return 0;
out_free:
	stg_builder_free(b);
	return r;
}

void stg_builder_free(struct stg_builder *b)
{
	if (!b)
		return;
	stg_gc_unpin(b->pinfd);
	if (b->has_base)
		stg_manifest_done(&b->base);
	free(b->entries);
	free(b->recorded);
	free(b->encbuf);
	free(b);
}

uint32_t stg_builder_chunk_size(const struct stg_builder *b)
{
	return b->rule.chunk_size;
}

const struct stg_builder_stats *stg_builder_stats(const struct stg_builder *b)
{
	return &b->stats;
}

static int reserve(struct stg_builder *b, uint64_t index)
{
	if (index < b->cap)
		return 0;
	if (index >= UINT32_MAX)
		return -EFBIG;
	uint64_t cap = b->cap ? b->cap : 64;
	while (cap <= index)
		cap *= 2;
	struct stg_manifest_entry *e = realloc(b->entries, cap * sizeof(*e));
	if (!e)
		return -ENOMEM;
	b->entries = e;
	uint8_t *rec = realloc(b->recorded, cap);
	if (!rec)
		return -ENOMEM;
	memset(rec + b->cap, 0, cap - b->cap);
	b->recorded = rec;
	b->cap = cap;
	return 0;
}

static void record(struct stg_builder *b, uint64_t index, const struct stg_manifest_entry *e)
{
	b->entries[index] = *e;
	b->recorded[index] = 1;
}

int stg_builder_add_zero(struct stg_builder *b, uint64_t index, size_t len)
{
	int r = reserve(b, index);
	if (r < 0)
		return r;
	struct stg_manifest_entry e = {.raw_len = (uint32_t)len, .flags = STG_ENTRY_ZERO};
	if (len == b->rule.chunk_size) {
		e.hash = b->zero_hash;
	} else {
		uint8_t *z = calloc(1, len ? len : 1);
		if (!z)
			return -ENOMEM;
		stg_hash_compute(z, len, &e.hash);
		free(z);
	}
	record(b, index, &e);
	return 0;
}

static bool looks_zero(const uint8_t *p, size_t len)
{
	static const uint8_t zeros[64];
	return len >= sizeof(zeros) && memcmp(p, zeros, sizeof(zeros)) == 0 &&
	       memcmp(p, p + sizeof(zeros) / 2, len - sizeof(zeros) / 2) == 0;
}

/* A chunk where the previous version has none, not compressible, not zero:
 * most likely new, so it is stored while it is hashed, reading it once. */
static int add_new_raw(struct stg_builder *b, uint64_t index, const void *data, size_t len)
{
	struct stg_manifest_entry e = {.raw_len = (uint32_t)len, .stored_len = (uint32_t)len};
	bool stored;
	int r = stg_cache_chunk_put_hashing(b->cache, data, len, &e.hash, &stored);
	if (r < 0)
		return r;
	if (stored) {
		e.flags = STG_ENTRY_NEW;
		b->stats.new_chunks++;
		b->stats.stored_bytes += len;
	} else {
		b->stats.dedup_cache++;
	}
	record(b, index, &e);
	return 0;
}

int stg_builder_add(struct stg_builder *b, uint64_t index, const void *data, size_t len)
{
	if (len == 0 || len > b->rule.chunk_size)
		return -EINVAL;
	int r = reserve(b, index);
	if (r < 0)
		return r;
	bool base_has = b->has_base && index < b->base.nchunks &&
			b->base.entries[index].raw_len == len;
	if (!base_has && !looks_zero(data, len) &&
	    !(b->rule.compress && stg_chunk_compressible(data, len)))
		return add_new_raw(b, index, data, len);
	struct stg_manifest_entry e = {.raw_len = (uint32_t)len};
	stg_hash_compute(data, len, &e.hash);
	if (len == b->rule.chunk_size && stg_hash_eq(&e.hash, &b->zero_hash)) {
		e.flags = STG_ENTRY_ZERO;
		record(b, index, &e);
		return 0;
	}
	if (b->has_base && index < b->base.nchunks) {
		const struct stg_manifest_entry *p = &b->base.entries[index];
		if (p->raw_len == len && stg_hash_eq(&p->hash, &e.hash) &&
		    !(p->flags & STG_ENTRY_ZERO)) {
			e.stored_len = p->stored_len;
			e.flags = p->flags & STG_ENTRY_LZ4;
			b->stats.dedup_prev++;
			record(b, index, &e);
			return 0;
		}
	}
	struct stg_chunk_header h;
	r = stg_cache_chunk_stat(b->cache, &e.hash, (uint32_t)len, &h);
	if (r < 0)
		return r;
	if (r == 1) {
		e.stored_len = h.stored_len;
		e.flags = h.encoding == STG_CHUNK_LZ4 ? STG_ENTRY_LZ4 : 0;
		b->stats.dedup_cache++;
		record(b, index, &e);
		return 0;
	}
	size_t n = b->rule.compress ? stg_chunk_try_compress(data, len, &e.hash, b->encbuf) : 0;
	if (n) {
		r = stg_cache_chunk_put(b->cache, &e.hash, b->encbuf, n, NULL, 0);
		e.stored_len = (uint32_t)(n - STG_CHUNK_HEADER_SIZE);
		e.flags = STG_ENTRY_NEW | STG_ENTRY_LZ4;
	} else {
		/* Raw: the header, then the caller's bytes as they are, no copy. */
		uint8_t hdr[STG_CHUNK_HEADER_SIZE];
		stg_chunk_header_encode(hdr, STG_CHUNK_RAW, (uint32_t)len, (uint32_t)len, &e.hash);
		r = stg_cache_chunk_put(b->cache, &e.hash, hdr, sizeof(hdr), data, len);
		e.stored_len = (uint32_t)len;
		e.flags = STG_ENTRY_NEW;
	}
	if (r < 0)
		return r;
	b->stats.new_chunks++;
	b->stats.stored_bytes += e.stored_len;
	record(b, index, &e);
	return 0;
}

const struct stg_manifest_entry *stg_builder_entry(const struct stg_builder *b, uint64_t index)
{
	return index < b->cap && b->recorded[index] ? &b->entries[index] : NULL;
}

int stg_builder_copy_entries(struct stg_builder *b, const struct stg_builder *from, uint64_t n)
{
	if (n > from->cap)
		return -EINVAL;
	for (uint64_t i = 0; i < n; i++) {
		if (!from->recorded[i])
			return -EINVAL;
		int r = reserve(b, i);
		if (r < 0)
			return r;
		record(b, i, &from->entries[i]);
	}
	return 0;
}

int64_t stg_builder_commit(struct stg_builder *b, uint64_t size, uint32_t mode, int64_t mtime_ns)
{
	struct stg_manifest m;
	int r = stg_manifest_init(&m, size, b->rule.chunk_size);
	if (r < 0)
		return r;
	for (uint64_t i = 0; i < m.nchunks; i++) {
		uint32_t want = i + 1 < m.nchunks ? m.chunk_size
						  : (uint32_t)(size - i * m.chunk_size);
		if (i >= b->cap || !b->recorded[i] || b->entries[i].raw_len != want) {
			stg_manifest_done(&m);
			return -EINVAL; /* a caller bug: every chunk must be recorded */
		}
		m.entries[i] = b->entries[i];
		if (m.entries[i].flags & STG_ENTRY_ZERO)
			b->stats.zero_chunks++;
	}
	b->stats.chunks = m.nchunks;
	m.mode = mode & 07777;
	m.mtime_ns = mtime_ns;
	m.commit_ns = stg_now_ns();
	bool sync = b->rule.durability != STG_DURABILITY_ASYNC;
	/* Chunks first, then the manifest that names them. */
	if (sync && (r = stg_cache_sync(b->cache)) < 0)
		goto out_done;
	struct stg_catalog_file f;
	r = stg_catalog_lock(b->cache, b->path, true, &f);
	if (r < 0)
		goto out_done;
	uint64_t *v;
	size_t n;
	r = stg_catalog_versions(f.dirfd, &v, &n);
	if (r == 0) {
		m.version = n ? v[n - 1] + 1 : 1;
		free(v);
		r = stg_catalog_publish(&f, b->path, &m, sync);
	}
	int pruned = 0;
	if (r == 0) {
		pruned = stg_gc_prune(f.dirfd, b->rule.keep);
		if (pruned < 0)
			stg_log_errno(STG_LOG_DEBUG, pruned, "pruning '%s'", b->path);
	}
	stg_catalog_unlock(&f);
	/* Pruned versions free their chunks now, unless another writer has the
	 * cache pinned: then a later commit collects them. */
	stg_gc_unpin(b->pinfd);
	b->pinfd = -1;
	if (pruned > 0) {
		int gr = stg_gc_collect(b->cache, 0, NULL);
		if (gr < 0 && gr != -EAGAIN)
			stg_log_errno(STG_LOG_DEBUG, gr, "collecting chunks");
	}
out_done:
	stg_manifest_done(&m);
	return r < 0 ? r : (int64_t)m.version;
}

int64_t stg_commit_fd(struct stg_cache *c, const char *path, const struct stg_path_rule *rule,
		      int fd, uint64_t size, uint32_t mode, int64_t mtime_ns)
{
	struct stg_builder *b;
	int r = stg_builder_new(c, path, rule, &b);
	if (r < 0)
		return r;
	uint32_t cs = rule->chunk_size;
	uint8_t *buf = malloc(cs);
	if (!buf) {
		stg_builder_free(b);
		return -ENOMEM;
	}
	for (uint64_t off = 0, i = 0; off < size && r == 0; off += cs, i++) {
		size_t len = size - off < cs ? (size_t)(size - off) : cs;
		/* A chunk with no data extent at all is a hole: record it unread. */
		off_t data = lseek(fd, (off_t)off, SEEK_DATA);
		if ((data < 0 && errno == ENXIO) || (data >= 0 && (uint64_t)data >= off + len)) {
			r = stg_builder_add_zero(b, i, len);
			continue;
		}
		r = stg_pread_all(fd, buf, len, (off_t)off);
		if (r == -ENODATA)
			r = -EIO; /* the file shrank under us */
		if (r == 0)
			r = stg_builder_add(b, i, buf, len);
	}
	free(buf);
	int64_t v = r < 0 ? r : stg_builder_commit(b, size, mode, mtime_ns);
	stg_builder_free(b);
	if (v < 0) {
		/* What this failed version stored is referenced by nothing. */
		int gr = stg_gc_collect(c, 0, NULL);
		if (gr < 0 && gr != -EAGAIN)
			stg_log_errno(STG_LOG_DEBUG, gr, "collecting after a failed commit");
	}
	return v;
}
