/* SPDX-License-Identifier: MIT */
/* A version's manifest: its chunks by content hash and the file's metadata. */
#include "manifest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chunk.h"
#include "pack.h"
#include "policy.h"
#include "util.h"

/* No file we stage is larger than this (2^50 bytes = 1 PiB). */
#define MAX_FILE_SIZE (1ull << 50)

/* The part section, between the entries and the trailer: its layout, stated
 * once for the encoder and the decoder. After the fixed fields come the
 * ranks (4 bytes each, zero-padded to a multiple of 8), then the extents. */
enum {
	PART_MAGIC = 0,
	PART_NRANKS = 4,
	PART_NEXTENTS = 8,
	PART_OPEN = 12,
	PART_NRANKS_JOB = 16,
	PART_RESERVED = 20,
	PART_NODE = 24,
	PART_JOB = 32,
	PART_RANKS = PART_JOB + STG_PART_JOB_MAX,
	PART_EXTENT_SIZE = 16,
};

/* In 64 bits, so that no count read from disk overflows them. */
static uint64_t part_ranks_size(uint32_t nranks)
{
	return ((uint64_t)nranks * 4 + 7) & ~(uint64_t)7;
}

static uint64_t part_size(uint32_t nranks, uint32_t nextents)
{
	return PART_RANKS + part_ranks_size(nranks) + (uint64_t)nextents * PART_EXTENT_SIZE;
}

size_t stg_manifest_encoded_size(const struct stg_manifest *m)
{
	size_t part = m->part ? (size_t)part_size(m->part->nranks, m->part->nextents) : 0;
	return STG_MANIFEST_HEADER_SIZE + (size_t)m->nchunks * STG_MANIFEST_ENTRY_SIZE + part +
	       STG_MANIFEST_TRAILER_SIZE;
}

/* Writes pt's section at p; returns its end. */
static uint8_t *part_encode(const struct stg_part *pt, uint8_t *p)
{
	size_t fixed = PART_RANKS + (size_t)part_ranks_size(pt->nranks);
	memset(p, 0, fixed);
	memcpy(p + PART_MAGIC, STG_PART_MAGIC, 4);
	stg_put_le32(p + PART_NRANKS, pt->nranks);
	stg_put_le32(p + PART_NEXTENTS, pt->nextents);
	stg_put_le32(p + PART_OPEN, pt->open);
	stg_put_le32(p + PART_NRANKS_JOB, pt->nranks_job);
	stg_put_le64(p + PART_NODE, pt->node);
	/* NUL-padded, and always NUL-terminated. */
	memcpy(p + PART_JOB, pt->job, strnlen(pt->job, STG_PART_JOB_MAX - 1));
	for (uint32_t i = 0; i < pt->nranks; i++)
		stg_put_le32(p + PART_RANKS + 4 * (size_t)i, pt->ranks[i]);
	p += fixed;
	for (uint32_t i = 0; i < pt->nextents; i++, p += PART_EXTENT_SIZE) {
		stg_put_le64(p, pt->extents[i].off);
		stg_put_le64(p + 8, pt->extents[i].len);
	}
	return p;
}

size_t stg_manifest_encode(const struct stg_manifest *m, uint8_t *out)
{
	memset(out, 0, STG_MANIFEST_HEADER_SIZE);
	memcpy(out, STG_MANIFEST_MAGIC, 4);
	/* The PART flag says whether a section follows the entries: it comes
	 * from m->part alone. */
	uint32_t flags = (m->flags & ~(uint32_t)STG_MANIFEST_PART) | (m->part ? STG_MANIFEST_PART : 0);
	/* The oldest format that says it all, so that older readers read
	 * what they can (format 4 came with CDC, 3 with PART, 2 with OPEN). */
	bool cdc = m->chunking == STG_CHUNKING_CDC;
	stg_put_le16(out + 4, cdc ? 4 : (flags & STG_MANIFEST_PART) ? 3 : flags ? 2 : 1);
	stg_put_le16(out + 6, (uint16_t)flags);
	stg_put_le64(out + 8, m->version);
	stg_put_le64(out + 16, m->size);
	stg_put_le32(out + 24, m->chunk_size);
	stg_put_le32(out + 28, m->mode);
	stg_put_le64(out + 32, (uint64_t)m->mtime_ns);
	stg_put_le64(out + 40, (uint64_t)m->commit_ns);
	stg_put_le32(out + 48, m->nchunks);
	if (cdc) {
		stg_put_le32(out + 52, STG_CHUNKING_CDC);
		stg_put_le32(out + 56, m->chunk_min);
		stg_put_le32(out + 60, m->chunk_max);
	}
	uint8_t *p = out + STG_MANIFEST_HEADER_SIZE;
	for (uint32_t i = 0; i < m->nchunks; i++, p += STG_MANIFEST_ENTRY_SIZE) {
		const struct stg_manifest_entry *e = &m->entries[i];
		memcpy(p, e->hash.b, 16);
		stg_put_le32(p + 16, e->raw_len);
		stg_put_le32(p + 20, e->stored_len);
		stg_put_le32(p + 24, e->flags);
		stg_put_le32(p + 28, 0);
		stg_put_le64(p + 32, e->pack);
		stg_put_le64(p + 40, e->offset);
	}
	if (m->part)
		p = part_encode(m->part, p);
	stg_put_le64(p, stg_hash64(out, (size_t)(p - out)));
	return (size_t)(p - out) + STG_MANIFEST_TRAILER_SIZE;
}

int stg_manifest_peek_flags(const uint8_t *buf, size_t len)
{
	if (len < STG_MANIFEST_HEADER_SIZE || memcmp(buf, STG_MANIFEST_MAGIC, 4) != 0)
		return -EBADMSG;
	uint16_t format = stg_get_le16(buf + 4), flags = stg_get_le16(buf + 6);
	if (format > STG_MANIFEST_FORMAT)
		return -EPROTONOSUPPORT;
	/* Format 1 has no flags, format 2 OPEN alone, format 3 PART and maybe
	 * OPEN, format 4 (content-defined chunks) any known flags: each is
	 * written only where the one before cannot say it. */
	if (format == 1 && flags == 0)
		return 0;
	if (format == 2 && flags == STG_MANIFEST_OPEN)
		return flags;
	if (format == 3 && (flags & STG_MANIFEST_PART) && !(flags & ~STG_MANIFEST_KNOWN_FLAGS))
		return flags;
	if (format == 4 && !(flags & ~STG_MANIFEST_KNOWN_FLAGS))
		return flags;
	return -EBADMSG;
}

/* Decodes the part section at p, which fills the n bytes up to the trailer,
 * of a manifest of a file of size bytes. Returns 0, -EBADMSG or -ENOMEM. */
static int part_decode(const uint8_t *p, uint64_t n, uint64_t size, struct stg_part **ret)
{
	if (n < PART_RANKS || memcmp(p + PART_MAGIC, STG_PART_MAGIC, 4) != 0 ||
	    stg_get_le32(p + PART_RESERVED) != 0)
		return -EBADMSG;
	uint32_t nranks = stg_get_le32(p + PART_NRANKS), nextents = stg_get_le32(p + PART_NEXTENTS);
	/* The section exactly fills its space, so what is allocated below is
	 * bounded by the bytes read. */
	if (n != part_size(nranks, nextents))
		return -EBADMSG;
	size_t ranks_end = PART_RANKS + 4 * (size_t)nranks;
	size_t fixed = PART_RANKS + (size_t)part_ranks_size(nranks);
	if (!stg_all_zero(p + ranks_end, fixed - ranks_end))
		return -EBADMSG;
	/* Nothing but NULs after the job's terminator, which must exist. */
	size_t jl = strnlen((const char *)p + PART_JOB, STG_PART_JOB_MAX);
	if (jl == STG_PART_JOB_MAX || !stg_all_zero(p + PART_JOB + jl, STG_PART_JOB_MAX - jl))
		return -EBADMSG;
	struct stg_part *pt;
	int r = stg_part_new(&pt, nranks, nextents);
	if (r < 0)
		return r;
	memcpy(pt->job, p + PART_JOB, STG_PART_JOB_MAX);
	pt->node = stg_get_le64(p + PART_NODE);
	pt->open = stg_get_le32(p + PART_OPEN);
	pt->nranks_job = stg_get_le32(p + PART_NRANKS_JOB);
	for (uint32_t i = 0; i < nranks; i++)
		pt->ranks[i] = stg_get_le32(p + PART_RANKS + 4 * (size_t)i);
	const uint8_t *e = p + fixed;
	for (uint32_t i = 0; i < nextents; i++, e += PART_EXTENT_SIZE)
		pt->extents[i] = (struct stg_extent){stg_get_le64(e), stg_get_le64(e + 8)};
	if (!stg_part_valid(pt, size)) {
		stg_part_free(pt);
		return -EBADMSG;
	}
	*ret = pt;
	return 0;
}

int stg_manifest_decode(const uint8_t *buf, size_t len, struct stg_manifest *ret)
{
	if (len < STG_MANIFEST_HEADER_SIZE + STG_MANIFEST_TRAILER_SIZE)
		return -EBADMSG;
	int flags = stg_manifest_peek_flags(buf, len);
	/* A later format keeps the trailer (FORMAT.md): one whose checksum
	 * holds was written so, not damaged into it. */
	if (flags == -EPROTONOSUPPORT)
		return stg_get_le64(buf + len - STG_MANIFEST_TRAILER_SIZE) ==
				       stg_hash64(buf, len - STG_MANIFEST_TRAILER_SIZE)
			       ? -EPROTONOSUPPORT
			       : -EBADMSG;
	if (flags < 0)
		return flags;
	struct stg_manifest m = {
		.version = stg_get_le64(buf + 8),
		.flags = (uint32_t)flags,
		.size = stg_get_le64(buf + 16),
		.chunk_size = stg_get_le32(buf + 24),
		.mode = stg_get_le32(buf + 28),
		.mtime_ns = (int64_t)stg_get_le64(buf + 32),
		.commit_ns = (int64_t)stg_get_le64(buf + 40),
		.nchunks = stg_get_le32(buf + 48),
	};
	if (m.version == 0 || m.size > MAX_FILE_SIZE)
		return -EBADMSG;
	if (m.chunk_size < STG_CHUNK_MIN || m.chunk_size > STG_CHUNK_MAX ||
	    (m.chunk_size & (m.chunk_size - 1)))
		return -EBADMSG;
	if (m.mode & ~(uint32_t)07777)
		return -EBADMSG;
	/* Format 4 says how the content was cut, the others have fixed
	 * chunks and zeros there. */
	m.chunking = STG_CHUNKING_FIXED;
	m.chunk_min = m.chunk_max = m.chunk_size;
	if (stg_get_le16(buf + 4) < 4 &&
	    (!stg_all_zero(buf + 52, 12) || m.nchunks != stg_manifest_nchunks(m.size, m.chunk_size)))
		return -EBADMSG;
	if (stg_get_le16(buf + 4) == 4) {
		m.chunking = STG_CHUNKING_CDC;
		m.chunk_min = stg_get_le32(buf + 56);
		m.chunk_max = stg_get_le32(buf + 60);
		if (stg_get_le32(buf + 52) != STG_CHUNKING_CDC || m.chunk_min == 0 ||
		    m.chunk_min > m.chunk_size || m.chunk_max < m.chunk_size ||
		    m.chunk_max > STG_CHUNK_MAX)
			return -EBADMSG;
		/* No more chunks than the minimum allows, none unless there are
		 * bytes: the lengths are checked one by one below. */
		if ((m.size == 0) != (m.nchunks == 0) ||
		    (m.size && m.nchunks - 1 > (m.size - 1) / m.chunk_min))
			return -EBADMSG;
	}
	/* The entries, then the part section (exactly when flagged: its size
	 * is checked against what it says), then the trailer. */
	uint64_t entries_end = STG_MANIFEST_HEADER_SIZE + (uint64_t)m.nchunks * STG_MANIFEST_ENTRY_SIZE;
	if (len < entries_end + STG_MANIFEST_TRAILER_SIZE)
		return -EBADMSG;
	size_t body = len - STG_MANIFEST_TRAILER_SIZE;
	if ((m.flags & STG_MANIFEST_PART) ? body == entries_end : body != entries_end)
		return -EBADMSG;
	if (stg_get_le64(buf + body) != stg_hash64(buf, body))
		return -EBADMSG;
	m.entries = calloc(m.nchunks ? m.nchunks : 1, sizeof(*m.entries));
	if (!m.entries)
		return -ENOMEM;
	const uint8_t *p = buf + STG_MANIFEST_HEADER_SIZE;
	for (uint32_t i = 0; i < m.nchunks; i++, p += STG_MANIFEST_ENTRY_SIZE) {
		struct stg_manifest_entry *e = &m.entries[i];
		memcpy(e->hash.b, p, 16);
		e->raw_len = stg_get_le32(p + 16);
		e->stored_len = stg_get_le32(p + 20);
		e->flags = stg_get_le32(p + 24);
		e->pack = stg_get_le64(p + 32);
		e->offset = stg_get_le64(p + 40);
		bool ok = !(e->flags & ~STG_ENTRY_KNOWN_FLAGS) && stg_get_le32(p + 28) == 0;
		if (e->flags & STG_ENTRY_ZERO)
			ok = ok && e->stored_len == 0 &&
			     !(e->flags & (STG_ENTRY_NEW | STG_ENTRY_ENCODED)) && e->pack == 0 &&
			     e->offset == 0;
		else
			ok = ok && stg_chunk_stored_len_ok(e->raw_len, e->stored_len,
							   e->flags & STG_ENTRY_ENCODED);
		/* Stored chunks say where: a pack and an aligned offset in it. */
		if (!(e->flags & STG_ENTRY_ZERO))
			ok = ok && e->pack != 0 && e->offset % 4096 == 0 && e->offset < MAX_FILE_SIZE;
		if (!ok) {
			free(m.entries);
			return -EBADMSG;
		}
	}
	if (stg_manifest_place(&m) < 0) {
		free(m.entries);
		return -EBADMSG;
	}
	if (m.flags & STG_MANIFEST_PART) {
		int r = part_decode(buf + entries_end, body - entries_end, m.size, &m.part);
		if (r < 0) {
			free(m.entries);
			return r;
		}
	}
	*ret = m;
	return 0;
}

int stg_manifest_peek_part(const uint8_t *buf, size_t len, char ret_job[STG_PART_JOB_MAX],
			   uint32_t *ret_open, uint64_t *ret_node)
{
	struct stg_manifest m;
	int r = stg_manifest_decode(buf, len, &m);
	if (r < 0)
		return r;
	r = m.part != NULL;
	if (m.part) {
		memcpy(ret_job, m.part->job, STG_PART_JOB_MAX);
		*ret_open = m.part->open;
		*ret_node = m.part->node;
	}
	stg_manifest_done(&m);
	return r;
}

int stg_manifest_init(struct stg_manifest *m, uint64_t size, uint32_t chunk_size)
{
	struct stg_chunker c;
	stg_chunker_init(&c, STG_CHUNKING_FIXED, chunk_size);
	uint64_t n = stg_manifest_nchunks(size, chunk_size);
	if (n > UINT32_MAX)
		return -EFBIG;
	return stg_manifest_init_chunked(m, size, &c, (uint32_t)n);
}

int stg_manifest_init_chunked(struct stg_manifest *m, uint64_t size, const struct stg_chunker *c,
			      uint32_t nchunks)
{
	if (size > MAX_FILE_SIZE)
		return -EFBIG;
	*m = (struct stg_manifest){.size = size, .chunk_size = c->avg, .chunking = c->kind,
				   .chunk_min = c->min, .chunk_max = c->max, .nchunks = nchunks};
	m->entries = calloc(nchunks ? nchunks : 1, sizeof(*m->entries));
	return m->entries ? 0 : -ENOMEM;
}

int stg_manifest_place(struct stg_manifest *m)
{
	uint64_t at = 0;
	for (uint32_t i = 0; i < m->nchunks; i++) {
		struct stg_manifest_entry *e = &m->entries[i];
		bool last = i + 1 == m->nchunks;
		if (e->raw_len == 0 || e->raw_len > m->chunk_max ||
		    (!last && e->raw_len < m->chunk_min) || e->raw_len > m->size - at)
			return -EBADMSG;
		e->at = at;
		at += e->raw_len;
	}
	return at == m->size ? 0 : -EBADMSG;
}

void stg_manifest_done(struct stg_manifest *m)
{
	free(m->entries);
	m->entries = NULL;
	m->nchunks = 0;
	stg_part_free(m->part);
	m->part = NULL;
	m->flags &= ~(uint32_t)STG_MANIFEST_PART;
}

int stg_part_new(struct stg_part **ret, uint32_t nranks, uint32_t nextents)
{
	/* One block: the struct, the ranks (padded to 8), the extents. */
	uint64_t n = sizeof(struct stg_part) + part_ranks_size(nranks) +
		     (uint64_t)nextents * sizeof(struct stg_extent);
	if (n > SIZE_MAX)
		return -ENOMEM;
	struct stg_part *p = calloc(1, (size_t)n);
	if (!p)
		return -ENOMEM;
	p->nranks = nranks;
	p->ranks = (uint32_t *)(p + 1);
	p->nextents = nextents;
	p->extents = (struct stg_extent *)((uint8_t *)p->ranks + part_ranks_size(nranks));
	*ret = p;
	return 0;
}

void stg_part_free(struct stg_part *p)
{
	free(p);
}

bool stg_part_valid(const struct stg_part *p, uint64_t size)
{
	size_t jl = strnlen(p->job, STG_PART_JOB_MAX);
	if (jl == 0 || jl == STG_PART_JOB_MAX)
		return false;
	for (size_t i = 0; i < jl; i++)
		if ((unsigned char)p->job[i] < 0x21 || (unsigned char)p->job[i] > 0x7e)
			return false;
	if (p->node == 0 || p->open == 0 || p->nranks_job == 0 ||
	    p->nranks_job > STG_PART_RANKS_MAX || p->nranks == 0 || p->nranks > p->nranks_job)
		return false;
	for (uint32_t i = 0; i < p->nranks; i++)
		if (p->ranks[i] >= p->nranks_job || (i > 0 && p->ranks[i] <= p->ranks[i - 1]))
			return false;
	/* Extents are ascending with a gap between two, so that a part's
	 * extents have one spelling; none ends past the file. */
	uint64_t end = 0;
	for (uint32_t i = 0; i < p->nextents; i++) {
		const struct stg_extent *e = &p->extents[i];
		if (e->len == 0 || e->len > size || e->off > size - e->len ||
		    (i > 0 && e->off <= end))
			return false;
		end = e->off + e->len;
	}
	return true;
}

bool stg_part_equal(const struct stg_part *a, const struct stg_part *b)
{
	if (!a || !b)
		return a == b;
	return strcmp(a->job, b->job) == 0 && a->node == b->node && a->open == b->open &&
	       a->nranks_job == b->nranks_job && a->nranks == b->nranks &&
	       a->nextents == b->nextents &&
	       memcmp(a->ranks, b->ranks, a->nranks * sizeof(*a->ranks)) == 0 &&
	       memcmp(a->extents, b->extents, a->nextents * sizeof(*a->extents)) == 0;
}

int stg_part_merge(const struct stg_part *a, const struct stg_part *b, uint64_t size,
		   struct stg_part **ret)
{
	struct stg_part *p;
	int r = stg_part_new(&p, a->nranks + b->nranks, a->nextents + b->nextents);
	if (r < 0)
		return r;
	memcpy(p->job, a->job, sizeof(p->job));
	p->node = a->node;
	p->open = a->open;
	p->nranks_job = a->nranks_job;
	/* Both lists are ascending: merged as they go. */
	uint32_t i = 0, j = 0, n = 0;
	while (i < a->nranks || j < b->nranks) {
		uint32_t x = j == b->nranks || (i < a->nranks && a->ranks[i] < b->ranks[j])
				     ? a->ranks[i++]
				     : b->ranks[j++];
		if (n == 0 || p->ranks[n - 1] != x)
			p->ranks[n++] = x;
	}
	p->nranks = n;
	i = j = n = 0;
	while (i < a->nextents || j < b->nextents) {
		struct stg_extent x =
			j == b->nextents || (i < a->nextents && a->extents[i].off < b->extents[j].off)
				? a->extents[i++]
				: b->extents[j++];
		if (x.off >= size)
			continue;
		if (x.len > size - x.off)
			x.len = size - x.off;
		struct stg_extent *last = n ? &p->extents[n - 1] : NULL;
		if (last && x.off <= last->off + last->len) {
			if (x.off + x.len > last->off + last->len)
				last->len = x.off + x.len - last->off;
		} else {
			p->extents[n++] = x;
		}
	}
	p->nextents = n;
	*ret = p;
	return 0;
}

uint64_t stg_manifest_stored_bytes(const struct stg_manifest *m)
{
	uint64_t s = 0;
	for (uint32_t i = 0; i < m->nchunks; i++)
		if (m->entries[i].flags & STG_ENTRY_NEW)
			s += stg_pack_record_size(m->entries[i].stored_len);
	return s;
}

uint32_t stg_manifest_new_chunks(const struct stg_manifest *m)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < m->nchunks; i++)
		n += !!(m->entries[i].flags & STG_ENTRY_NEW);
	return n;
}
