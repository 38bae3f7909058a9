/* SPDX-License-Identifier: MIT */
/* Builds one new version of a captured path: chunks in, manifest published. */
#include "builder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"
#include "chunk.h"
#include "gc.h"
#include "index.h"
#include "log.h"
#include "pack.h"
#include "util.h"
#include "version.h"

struct stg_builder {
	struct stg_cache *cache;
	char path[PATH_MAX];
	struct stg_path_rule rule;
	struct stg_chunker chunker; /* the rule's kind and bounds (its state unused) */
	struct stg_manifest base; /* the previous version, for dedup */
	bool has_base;
	struct stg_manifest_entry *entries;
	uint8_t *recorded; /* entries[i] is set */
	size_t cap;        /* of both */
	struct stg_pack_writer *pack;
	/* What this version stored, for the index, and to find repeats of a
	 * chunk within the version: an open-addressing table of indexes into
	 * stored[] (+1; 0 is empty). */
	struct stg_manifest_entry *stored;
	size_t nstored, capstored;
	uint32_t *table;
	size_t tablecap;
	struct stg_hash zero_hash; /* of chunker.max zero bytes */
	int pinfd;
	bool published;    /* a manifest names its pack: the pack stays */
	bool full;         /* the cache or its file system was full */
	bool defer_collect;
	bool open;         /* publish as an open version (fsync) */
	uint64_t replaces; /* the writer's open version this one supersedes */
	const struct stg_part *part; /* shared = job: the node's part (borrowed) */
	int64_t staged_since; /* chunks in packs made since are this version's */
	struct {
		uint64_t pack;
		bool since; /* made since staged_since */
	} packs_seen[8];
	unsigned next_seen;
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
	/* None, or a damaged one, only costs the dedup against it. */
	if (stg_catalog_read_newest(f.dirfd, &b->base, NULL) == 0) {
		b->has_base = b->base.chunk_size == b->rule.chunk_size &&
			      b->base.chunking == b->rule.chunking;
		if (!b->has_base)
			stg_manifest_done(&b->base);
	}
	stg_catalog_unlock(&f);
	return 0;
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
	/* zstd and its kind are the flusher's to apply. */
	b->rule.codec = stg_chunk_codec_capture(&rule->codec);
	b->pinfd = -1;
	stg_chunker_init(&b->chunker, rule->chunking, rule->chunk_size);
	int r = stg_pack_writer_new(c, b->chunker.max, &b->pack);
	if (r < 0)
		goto out_free;
	/* Zero runs make chunks of the maximum length, with either kind of
	 * chunking. */
	r = stg_hash_zeros(b->chunker.max, &b->zero_hash);
	if (r < 0)
		goto out_free;
	r = b->pinfd = stg_gc_pin(c);
	if (r < 0)
		goto out_free;
	stg_fd_keep(&b->pinfd);
	if (rule->dedup && (r = load_base(b)) < 0)
		goto out_free;
	*ret = b;
	return 0;
out_free:
	stg_builder_free(b);
	return r;
}

static void free_memory(struct stg_builder *b)
{
	if (b->has_base)
		stg_manifest_done(&b->base);
	free(b->entries);
	free(b->recorded);
	free(b->stored);
	free(b->table);
	free(b);
}

void stg_builder_free(struct stg_builder *b)
{
	if (!b)
		return;
	/* A version never published leaves nothing: its pack, which only it
	 * knows of (the index learns of it at publication), goes now. */
	if (b->published)
		stg_pack_writer_free(b->pack);
	else
		stg_pack_writer_discard(b->pack);
	stg_fd_drop(b->pinfd);
	stg_gc_unpin(b->pinfd);
	/* Out of space: what pruning freed while others had the cache pinned
	 * may still be there; collect it, or the cache stays full. */
	if (!b->published && b->full) {
		int r = stg_gc_collect(b->cache, 0, NULL);
		if (r < 0 && r != -EAGAIN)
			stg_log_errno(STG_LOG_DEBUG, r, "collecting after a failed version");
	}
	free_memory(b);
}

void stg_builder_forget(struct stg_builder *b)
{
	if (!b)
		return;
	stg_pack_writer_forget(b->pack);
	stg_fd_drop(b->pinfd);
	stg_gc_unpin(b->pinfd);
	free_memory(b);
}

int stg_builder_set_path(struct stg_builder *b, const char *path)
{
	if (strlen(path) >= PATH_MAX)
		return -ENAMETOOLONG;
	strcpy(b->path, path);
	return 0;
}

void stg_builder_set_open(struct stg_builder *b, bool open, uint64_t replaces)
{
	b->open = open;
	b->replaces = replaces;
}

void stg_builder_set_part(struct stg_builder *b, const struct stg_part *part)
{
	b->part = part;
}

void stg_builder_set_staged_since(struct stg_builder *b, int64_t ns)
{
	b->staged_since = ns;
}

void stg_builder_defer_collect(struct stg_builder *b)
{
	b->defer_collect = true;
}

const struct stg_builder_stats *stg_builder_stats(const struct stg_builder *b)
{
	return &b->stats;
}

uint8_t *stg_builder_buffer(struct stg_builder *b)
{
	return stg_pack_writer_buffer(b->pack);
}

uint8_t *stg_builder_scratch(struct stg_builder *b)
{
	return stg_pack_writer_scratch(b->pack);
}

static int reserve(struct stg_builder *b, uint64_t index)
{
	if (index < b->cap)
		return 0;
	if (index >= UINT32_MAX)
		return -EFBIG;
	/* recorded[] gets at least what entries[] got; b->cap moves only
	 * once both have it. */
	size_t cap = b->cap, reccap = b->cap;
	if (STG_GROW(b->entries, cap, index + 1) < 0 || STG_GROW(b->recorded, reccap, cap) < 0)
		return -ENOMEM;
	memset(b->recorded + b->cap, 0, cap - b->cap);
	b->cap = cap;
	return 0;
}

static void record(struct stg_builder *b, uint64_t index, const struct stg_manifest_entry *e)
{
	b->entries[index] = *e;
	b->recorded[index] = 1;
}

static size_t slot(const struct stg_hash *h, size_t cap)
{
	return (size_t)stg_get_le64(h->b) & (cap - 1);
}

static const struct stg_manifest_entry *find_stored(const struct stg_builder *b,
						    const struct stg_hash *h, uint32_t len)
{
	if (!b->tablecap)
		return NULL;
	for (size_t i = slot(h, b->tablecap); b->table[i]; i = (i + 1) & (b->tablecap - 1)) {
		const struct stg_manifest_entry *e = &b->stored[b->table[i] - 1];
		if (e->raw_len == len && stg_hash_eq(&e->hash, h))
			return e;
	}
	return NULL;
}

static int remember_stored(struct stg_builder *b, const struct stg_manifest_entry *e)
{
	if (STG_GROW(b->stored, b->capstored, b->nstored + 1) < 0)
		return -ENOMEM;
	if ((b->nstored + 1) * 2 > b->tablecap) {
		size_t cap = b->tablecap ? b->tablecap * 2 : 128;
		uint32_t *t = calloc(cap, sizeof(*t));
		if (!t)
			return -ENOMEM;
		for (size_t k = 0; k < b->nstored; k++) {
			size_t i = slot(&b->stored[k].hash, cap);
			while (t[i])
				i = (i + 1) & (cap - 1);
			t[i] = (uint32_t)k + 1;
		}
		free(b->table);
		b->table = t;
		b->tablecap = cap;
	}
	b->stored[b->nstored] = *e;
	size_t i = slot(&e->hash, b->tablecap);
	while (b->table[i])
		i = (i + 1) & (b->tablecap - 1);
	b->table[i] = (uint32_t)++b->nstored;
	return 0;
}

/* Passes r on, remembering when it says the cache is full. */
static int out_of_space(struct stg_builder *b, int r)
{
	if (r == -ENOSPC || r == -EDQUOT)
		b->full = true;
	return r;
}

/* Was the pack made since the writing began (by a process staging its chunks
 * ahead)? Asked of the few packs a version finds its chunks in. */
static bool staged_for_us(struct stg_builder *b, uint64_t pack)
{
	if (!b->staged_since)
		return false;
	for (unsigned i = 0; i < 8; i++)
		if (b->packs_seen[i].pack == pack)
			return b->packs_seen[i].since;
	char rel[48];
	stg_pack_relpath(pack, rel);
	struct stat st;
	bool since = fstatat(b->cache->packs_fd, rel + strlen("packs/"), &st, 0) == 0 &&
		     (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec >= b->staged_since;
	b->packs_seen[b->next_seen].pack = pack;
	b->packs_seen[b->next_seen].since = since;
	b->next_seen = (b->next_seen + 1) % 8;
	return since;
}

/* The chunk is in the pack writer's buffer and hashed: find it, or store it;
 * *e says where it is. */
static int find_or_store(struct stg_builder *b, size_t len, const struct stg_hash *h,
			 struct stg_manifest_entry *e)
{
	*e = (struct stg_manifest_entry){.hash = *h, .raw_len = (uint32_t)len};
	if (len == b->chunker.max && stg_hash_eq(h, &b->zero_hash)) {
		e->flags = STG_ENTRY_ZERO;
		return 0;
	}
	const struct stg_manifest_entry *again = find_stored(b, h, (uint32_t)len);
	if (again) {
		*e = *again;
		e->flags &= ~(uint32_t)STG_ENTRY_NEW;
		b->stats.dedup_cache++;
		return 0;
	}
	int r = stg_index_lookup(b->cache, h, (uint32_t)len, e);
	if (r < 0)
		return r;
	if (r == 1 && staged_for_us(b, e->pack)) {
		/* Stored for this version, ahead of its commit: new in it, and
		 * its repeats in it are not. */
		e->flags |= STG_ENTRY_NEW;
		b->stats.new_chunks++;
		b->stats.stored_bytes += e->stored_len;
		return remember_stored(b, e);
	}
	if (r == 1) {
		b->stats.dedup_cache++;
		return 0;
	}
	r = stg_pack_writer_append(b->pack, len, h, &b->rule.codec, e);
	if (r == 0)
		r = remember_stored(b, e);
	if (r < 0)
		return out_of_space(b, r);
	b->stats.new_chunks++;
	b->stats.stored_bytes += e->stored_len;
	return 0;
}

static int place(struct stg_builder *b, uint64_t index, size_t len, const struct stg_hash *h)
{
	struct stg_manifest_entry e;
	int r = find_or_store(b, len, h, &e);
	if (r == 0)
		record(b, index, &e);
	return r;
}

struct copy_ctx {
	uint8_t *to;
};

static int copy_piece(void *arg, const void *piece, size_t n, size_t off)
{
	struct copy_ctx *c = arg;
	memcpy(c->to + off, piece, n);
	return 0;
}

/* The previous version's chunk index, when it has these bytes. */
static const struct stg_manifest_entry *same_as_base(const struct stg_builder *b, uint64_t index,
						     size_t len, const struct stg_hash *h)
{
	if (!b->has_base || index >= b->base.nchunks)
		return NULL;
	const struct stg_manifest_entry *p = &b->base.entries[index];
	bool same = p->raw_len == len && stg_hash_eq(&p->hash, h) && !(p->flags & STG_ENTRY_ZERO);
	return same ? p : NULL;
}

/* Records chunk index as the previous version's, when it has these bytes. */
static bool took_base(struct stg_builder *b, uint64_t index, size_t len, const struct stg_hash *h)
{
	const struct stg_manifest_entry *p = same_as_base(b, index, len, h);
	if (!p)
		return false;
	struct stg_manifest_entry e = *p;
	e.flags &= ~(uint32_t)STG_ENTRY_NEW;
	b->stats.dedup_prev++;
	record(b, index, &e);
	return true;
}

int stg_builder_add(struct stg_builder *b, uint64_t index, const void *data, size_t len)
{
	if (len == 0 || len > b->chunker.max)
		return -EINVAL;
	int r = reserve(b, index);
	if (r < 0)
		return r;
	uint8_t *buf = stg_builder_buffer(b);
	struct stg_hash h;
	if (b->has_base && index < b->base.nchunks && b->base.entries[index].raw_len == len) {
		/* Most likely unchanged: hash only, the bytes stay where they are. */
		stg_hash_compute(data, len, &h);
		if (took_base(b, index, len, &h))
			return 0;
		memcpy(buf, data, len);
	} else {
		/* Most likely new: copy into the pack buffer and hash on the way,
		 * reading the caller's memory once. */
		struct copy_ctx c = {buf};
		r = stg_hash_stream(data, len, &h, copy_piece, &c);
		if (r < 0)
			return r;
	}
	return place(b, index, len, &h);
}

int stg_builder_add_buffered(struct stg_builder *b, uint64_t index, size_t len)
{
	if (len == 0 || len > b->chunker.max)
		return -EINVAL;
	int r = reserve(b, index);
	if (r < 0)
		return r;
	struct stg_hash h;
	stg_hash_compute(stg_builder_buffer(b), len, &h);
	if (took_base(b, index, len, &h))
		return 0;
	return place(b, index, len, &h);
}

int stg_builder_stage(struct stg_builder *b, uint64_t index, size_t len)
{
	if (len == 0 || len > b->chunker.max)
		return -EINVAL;
	struct stg_hash h;
	stg_hash_compute(stg_builder_buffer(b), len, &h);
	if (same_as_base(b, index, len, &h)) {
		b->stats.dedup_prev++;
		return 0;
	}
	struct stg_manifest_entry e;
	return find_or_store(b, len, &h, &e);
}

int stg_builder_keep(struct stg_builder *b)
{
	int r = stg_pack_writer_sync(b->pack);
	if (r < 0)
		return r;
	/* The pack stays, named by no manifest until a version finds its
	 * chunks through the index; the collector removes it otherwise. */
	b->published = true;
	stg_pack_writer_warm(b->pack, b->stored, b->nstored);
	r = stg_index_add(b->cache, b->stored, b->nstored);
	b->nstored = 0;
	if (b->tablecap)
		memset(b->table, 0, b->tablecap * sizeof(*b->table));
	return r;
}

int stg_builder_add_zero(struct stg_builder *b, uint64_t index, size_t len)
{
	int r = reserve(b, index);
	if (r < 0)
		return r;
	struct stg_manifest_entry e = {.raw_len = (uint32_t)len, .flags = STG_ENTRY_ZERO};
	if (len == b->chunker.max)
		e.hash = b->zero_hash;
	else if ((r = stg_hash_zeros(len, &e.hash)) < 0)
		return r;
	record(b, index, &e);
	return 0;
}

int stg_builder_flush(struct stg_builder *b)
{
	return stg_pack_writer_flush(b->pack);
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
		struct stg_manifest_entry e = from->entries[i];
		e.flags &= ~(uint32_t)STG_ENTRY_NEW; /* published already */
		record(b, i, &e);
	}
	return 0;
}

/* The clock new ids are minted from. STAGEHAND_TEST_CLOCK_NS (ns since the
 * epoch) fixes it: a test hook, so that two nodes mint the same id
 * (tests/bats/cluster.bats); read once per commit, never set in production. */
static int64_t mint_clock(void)
{
	const char *e = getenv("STAGEHAND_TEST_CLOCK_NS");
	return e && *e ? strtoll(e, NULL, 10) : stg_now_ns();
}

/* The chunks the superseded open version stored are this one's: it goes,
 * and what it stored is what this version adds (stagehand ls). */
static void inherit_new(int filedirfd, uint64_t replaces, struct stg_manifest *m)
{
	struct stg_manifest old;
	if (stg_catalog_read(filedirfd, replaces, &old) < 0)
		return;
	if (!(old.flags & STG_MANIFEST_OPEN)) {
		stg_manifest_done(&old);
		return;
	}
	for (uint32_t i = 0; i < m->nchunks && i < old.nchunks; i++) {
		struct stg_manifest_entry *e = &m->entries[i];
		const struct stg_manifest_entry *o = &old.entries[i];
		if ((o->flags & STG_ENTRY_NEW) && o->pack == e->pack && o->offset == e->offset &&
		    stg_hash_eq(&o->hash, &e->hash))
			e->flags |= STG_ENTRY_NEW;
	}
	stg_manifest_done(&old);
}

/* Is version id a part of the job version part belongs to? */
static bool same_job_version(int filedirfd, uint64_t id, const struct stg_part *part)
{
	struct stg_manifest m;
	if (stg_catalog_read(filedirfd, id, &m) < 0)
		return false;
	bool same = m.part && m.part->open == part->open && strcmp(m.part->job, part->job) == 0;
	stg_manifest_done(&m);
	return same;
}

int64_t stg_builder_commit(struct stg_builder *b, uint64_t size, uint32_t mode, int64_t mtime_ns)
{
	struct stg_part *merged = NULL; /* the part published, when not the caller's */
	/* The chunks recorded from the start up to size; their lengths are
	 * checked below. */
	uint64_t n = 0;
	for (uint64_t at = 0; at < size; at += b->entries[n++].raw_len)
		if (n >= b->cap || !b->recorded[n] || !b->entries[n].raw_len)
			return -EINVAL; /* a caller bug: every chunk must be recorded */
	struct stg_manifest m;
	int r = n > UINT32_MAX ? -EFBIG
			       : stg_manifest_init_chunked(&m, size, &b->chunker, (uint32_t)n);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < m.nchunks; i++) {
		m.entries[i] = b->entries[i];
		if (m.entries[i].flags & STG_ENTRY_ZERO)
			b->stats.zero_chunks++;
	}
	if (stg_manifest_place(&m) < 0) {
		stg_manifest_done(&m);
		return -EINVAL; /* a caller bug: a chunk of the wrong length */
	}
	b->stats.chunks = m.nchunks;
	m.mode = mode & 07777;
	m.mtime_ns = mtime_ns;
	m.commit_ns = stg_now_ns();
	bool sync = b->rule.durability != STG_DURABILITY_ASYNC;
	/* The chunks first, then the manifest that names them: written (and with
	 * local durability synced) before it is published, even for async, so
	 * that a failed write is reported and a reader never finds a record that
	 * is still on its way. */
	r = sync ? stg_pack_writer_sync(b->pack) : stg_pack_writer_flush(b->pack);
	if (r < 0)
		goto out_done;
	if (b->part && !stg_part_valid(b->part, m.size)) {
		stg_log(STG_LOG_ERROR, "'%s': the node's part does not check out", b->path);
		r = -EINVAL;
		goto out_done;
	}
	struct stg_catalog_file f;
	r = stg_catalog_lock(b->cache, b->path, true, &f);
	if (r < 0)
		goto out_done;
	/* The flusher may have re-minted the open version (a server held
	 * another node's under its id): it is superseded under its new id. */
	b->replaces = stg_catalog_reminted(f.dirfd, b->replaces, true);
	uint64_t newest = stg_catalog_newest_known(f.dirfd), replaces = b->replaces;
	/* Superseding an open version of another writing (a file created
	 * empty, a writer that died after a sync): take its number too. */
	int nf = newest && !replaces ? stg_catalog_flags(f.dirfd, newest) : 0;
	if (nf > 0 && (nf & STG_MANIFEST_OPEN))
		replaces = newest;
	/* Another part of the same job version (ranks of this node that held
	 * the file one after another): one version, one number. */
	if (newest && !replaces && b->part && same_job_version(f.dirfd, newest, b->part))
		replaces = newest;
	m.version = stg_version_mint(newest, replaces, mint_clock());
	m.flags = (b->open ? STG_MANIFEST_OPEN : 0) | (b->part ? STG_MANIFEST_PART : 0);
	m.part = (struct stg_part *)b->part;
	/* Superseding this node's open part of the same job version (a sync
	 * by another of its ranks): what that one said stays said. */
	if (b->part && b->replaces) {
		struct stg_manifest old;
		if (stg_catalog_read(f.dirfd, b->replaces, &old) == 0) {
			const struct stg_part *op = old.part;
			if (op && (old.flags & STG_MANIFEST_OPEN) && op->node == b->part->node &&
			    op->open == b->part->open && strcmp(op->job, b->part->job) == 0 &&
			    op->nranks_job == b->part->nranks_job) {
				r = stg_part_merge(b->part, op, m.size, &merged);
				m.part = merged ? merged : m.part;
			}
			stg_manifest_done(&old);
		}
	}
	if (r < 0) {
		stg_catalog_unlock(&f);
		goto out_done;
	}
	if (b->replaces)
		inherit_new(f.dirfd, b->replaces, &m);
	r = stg_catalog_publish(&f, b->path, &m, sync);
	/* Published, even when what follows the rename failed: the pack stays. */
	char name[40];
	stg_catalog_manifest_name(m.version, name);
	b->published = r == 0 || faccessat(f.dirfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	int pruned = 0;
	/* The writer's own open version goes once this one is published: a
	 * crash in between leaves both, the newer one first. Only an open one:
	 * a rename may have put a closed version under its id meanwhile. */
	if (r == 0 && b->replaces && b->replaces != m.version) {
		int fl = stg_catalog_flags(f.dirfd, b->replaces);
		if (fl > 0 && (fl & STG_MANIFEST_OPEN) &&
		    stg_catalog_remove_version(f.dirfd, b->replaces) == 0)
			pruned++;
	}
	if (r == 0) {
		int pr = stg_catalog_prune(f.dirfd, b->rule.keep, false, NULL, NULL);
		if (pr < 0)
			stg_log_errno(STG_LOG_DEBUG, pr, "pruning '%s'", b->path);
		else
			pruned += pr;
	}
	stg_catalog_unlock(&f);
	/* The index only helps later versions find chunks (a failure costs
	 * dedup); until the version is published, no other may use its pack. */
	if (b->published) {
		int ir = stg_index_add(b->cache, b->stored, b->nstored);
		if (ir < 0)
			stg_log_errno(STG_LOG_DEBUG, ir, "indexing the chunks of '%s'", b->path);
	}
	/* A caller that goes on from these locations keeps the pin until it
	 * has pinned anew (stg_builder_free releases it). */
	if (b->defer_collect)
		goto out_done;
	/* Pruned versions free their chunks now, unless another writer has the
	 * cache pinned: then a later commit collects them. */
	stg_fd_drop(b->pinfd);
	stg_gc_unpin(b->pinfd);
	b->pinfd = -1;
	if (pruned > 0) {
		int gr = stg_gc_collect(b->cache, 0, NULL);
		if (gr < 0 && gr != -EAGAIN)
			stg_log_errno(STG_LOG_DEBUG, gr, "collecting chunks");
	}
out_done:
	if (m.part != merged)
		m.part = NULL; /* the caller's */
	stg_manifest_done(&m);
	return r < 0 ? out_of_space(b, r) : (int64_t)m.version;
}

/* Fixed chunks: each read where it sits, holes (found with SEEK_DATA)
 * recorded unread. (Not through a mapping, which would spare a copy: a read
 * error, or a page tmpfs cannot allocate for a hole, is SIGBUS there, in the
 * application.) */
static int commit_fixed(struct stg_builder *b, int fd, uint64_t size)
{
	int r = 0;
	uint32_t cs = b->chunker.max;
	for (uint64_t off = 0, i = 0; off < size && r == 0; off += cs, i++) {
		/* The staging buffer changes after each stored chunk (the previous
		 * one may still be on its way to the disk). */
		uint8_t *buf = stg_builder_buffer(b);
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
			r = stg_builder_add_buffered(b, i, len);
	}
	return r;
}

/* lseek(fd, off, SEEK_DATA or SEEK_HOLE), capped at size. ENXIO from
 * SEEK_DATA: a hole to the end; a file system that cannot tell (or a file
 * that changed meanwhile) is all data. */
static uint64_t seek_capped(int fd, uint64_t off, int whence, uint64_t size)
{
	off_t at = lseek(fd, (off_t)off, whence);
	if (at < 0)
		return whence == SEEK_DATA && errno != ENXIO ? off : size;
	return (uint64_t)at < size ? (uint64_t)at : size;
}

/* Content-defined chunks: one pass over the file in large pieces, each byte
 * copied once into the staging buffer as the chunker finds where its chunk
 * ends. Holes are chunked as the zeros they read as, without reading them:
 * no cut comes once 8 zeros are in the window, so from a chunk's start in a
 * hole, each whole chunk of the maximum length is a zero chunk, recorded
 * unread; the zeros around them are fed to the chunker as data. */
static int commit_stream(struct stg_builder *b, int fd, uint64_t size)
{
	enum { PIECE = 1u << 20 };
	uint8_t *piece = malloc(PIECE);
	if (!piece)
		return -ENOMEM;
	struct stg_chunker ch = b->chunker;
	stg_chunker_reset(&ch);
	uint64_t index = 0;
	size_t fill = 0; /* bytes of the current chunk in the staging buffer */
	int r = 0;
	for (uint64_t off = 0; off < size && r == 0;) {
		uint64_t data = seek_capped(fd, off, SEEK_DATA, size);
		bool hole = data > off;
		size_t n;
		if (hole && fill == 0 && data - off >= ch.max) {
			for (uint64_t k = (data - off) / ch.max; k > 0 && r == 0; k--, off += ch.max)
				r = stg_builder_add_zero(b, index++, ch.max);
			continue;
		}
		if (hole) {
			n = data - off < PIECE ? (size_t)(data - off) : PIECE;
			memset(piece, 0, n);
		} else {
			uint64_t end = seek_capped(fd, off, SEEK_HOLE, size);
			if (end == off) /* a hole punched meanwhile: read it */
				end = size;
			n = end - off < PIECE ? (size_t)(end - off) : PIECE;
			r = stg_pread_all(fd, piece, n, (off_t)off);
			if (r == -ENODATA)
				r = -EIO; /* the file shrank under us */
		}
		size_t k = 0;
		for (size_t used; r == 0 && k < n;) {
			bool end = stg_chunker_next(&ch, piece + k, n - k, &used);
			/* The staging buffer changes after each stored chunk. */
			memcpy(stg_builder_buffer(b) + fill, piece + k, used);
			fill += used;
			k += used;
			if (end) {
				r = stg_builder_add_buffered(b, index++, fill);
				fill = 0;
				if (hole)
					break; /* a new chunk in a hole: maybe whole zero chunks follow */
			}
		}
		off += k;
	}
	if (r == 0 && fill)
		r = stg_builder_add_buffered(b, index, fill);
	free(piece);
	return r;
}

int64_t stg_commit_fd(struct stg_cache *c, const char *path, const struct stg_path_rule *rule,
		      int fd, uint64_t size, uint32_t mode, int64_t mtime_ns, bool open,
		      uint64_t replaces, const struct stg_part *part, int64_t staged_since)
{
	struct stg_builder *b;
	int r = stg_builder_new(c, path, rule, &b);
	if (r < 0)
		return r;
	stg_builder_set_open(b, open, replaces);
	stg_builder_set_part(b, part);
	stg_builder_set_staged_since(b, staged_since);
	if (rule->chunking == STG_CHUNKING_FIXED)
		r = commit_fixed(b, fd, size);
	else
		r = commit_stream(b, fd, size);
	int64_t v = r < 0 ? r : stg_builder_commit(b, size, mode, mtime_ns);
	stg_builder_free(b);
	return v;
}

int64_t stg_commit_close(struct stg_cache *c, const char *path, const struct stg_path_rule *rule,
			 uint64_t open_version)
{
	struct stg_catalog_file f;
	int r = stg_catalog_lock(c, path, false, &f);
	if (r < 0)
		return r;
	open_version = stg_catalog_reminted(f.dirfd, open_version, true);
	struct stg_manifest m;
	r = stg_catalog_read(f.dirfd, open_version, &m);
	bool have = r == 0;
	int pruned = 0;
	if (have && (m.flags & STG_MANIFEST_OPEN)) {
		/* The same content, closed: republished in place (and queued to
		 * ship again, so that the servers see it closed too). */
		m.flags &= ~(uint32_t)STG_MANIFEST_OPEN;
		r = stg_catalog_publish(&f, path, &m, rule->durability != STG_DURABILITY_ASYNC);
		if (r == 0)
			pruned = stg_catalog_prune(f.dirfd, rule->keep, false, NULL, NULL);
	}
	if (have)
		stg_manifest_done(&m);
	stg_catalog_unlock(&f);
	if (pruned > 0) {
		int gr = stg_gc_collect(c, 0, NULL);
		if (gr < 0 && gr != -EAGAIN)
			stg_log_errno(STG_LOG_DEBUG, gr, "collecting chunks");
	}
	return r < 0 ? r : (int64_t)open_version;
}
