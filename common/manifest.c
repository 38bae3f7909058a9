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

size_t stg_manifest_encoded_size(const struct stg_manifest *m)
{
	return STG_MANIFEST_HEADER_SIZE + (size_t)m->nchunks * STG_MANIFEST_ENTRY_SIZE +
	       STG_MANIFEST_TRAILER_SIZE;
}

size_t stg_manifest_encode(const struct stg_manifest *m, uint8_t *out)
{
	memset(out, 0, STG_MANIFEST_HEADER_SIZE);
	memcpy(out, STG_MANIFEST_MAGIC, 4);
	stg_put_le16(out + 4, m->flags ? 2 : 1);
	stg_put_le16(out + 6, (uint16_t)m->flags);
	stg_put_le64(out + 8, m->version);
	stg_put_le64(out + 16, m->size);
	stg_put_le32(out + 24, m->chunk_size);
	stg_put_le32(out + 28, m->mode);
	stg_put_le64(out + 32, (uint64_t)m->mtime_ns);
	stg_put_le64(out + 40, (uint64_t)m->commit_ns);
	stg_put_le32(out + 48, m->nchunks);
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
	stg_put_le64(p, stg_hash64(out, (size_t)(p - out)));
	return (size_t)(p - out) + STG_MANIFEST_TRAILER_SIZE;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

int stg_manifest_peek_flags(const uint8_t *buf, size_t len)
{
	if (len < STG_MANIFEST_HEADER_SIZE || memcmp(buf, STG_MANIFEST_MAGIC, 4) != 0)
		return -EBADMSG;
	uint16_t format = stg_get_le16(buf + 4), flags = stg_get_le16(buf + 6);
	/* Format 1 has no flags; format 2 only the known ones, and at least one
	 * (a manifest without flags is written as format 1). */
	if (format == 1 && flags == 0)
		return 0;
	if (format == 2 && flags && !(flags & ~STG_MANIFEST_KNOWN_FLAGS))
		return flags;
	return -EBADMSG;
}

int stg_manifest_decode(const uint8_t *buf, size_t len, struct stg_manifest *ret)
{
	if (len < STG_MANIFEST_HEADER_SIZE + STG_MANIFEST_TRAILER_SIZE)
		return -EBADMSG;
	int flags = stg_manifest_peek_flags(buf, len);
	if (flags < 0)
		return flags;
	if (stg_get_le32(buf + 52) != 0 || !all_zero(buf + 56, 8))
		return -EBADMSG;
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
	if (m.nchunks != stg_manifest_nchunks(m.size, m.chunk_size))
		return -EBADMSG;
	if (len != stg_manifest_encoded_size(&m))
		return -EBADMSG;
	size_t body = len - STG_MANIFEST_TRAILER_SIZE;
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
		uint64_t want = i + 1 < m.nchunks ? m.chunk_size
						  : m.size - (uint64_t)i * m.chunk_size;
		bool ok = e->raw_len == want && !(e->flags & ~STG_ENTRY_KNOWN_FLAGS) &&
			  stg_get_le32(p + 28) == 0;
		if (e->flags & STG_ENTRY_ZERO)
			ok = ok && e->stored_len == 0 && !(e->flags & (STG_ENTRY_NEW | STG_ENTRY_LZ4)) &&
			     e->pack == 0 && e->offset == 0;
		else if (e->flags & STG_ENTRY_LZ4)
			ok = ok && e->stored_len > 0 &&
			     e->stored_len <= stg_chunk_bound(e->raw_len) - STG_CHUNK_HEADER_SIZE;
		else
			ok = ok && e->stored_len == e->raw_len;
		/* Stored chunks say where: a pack and an aligned offset in it. */
		if (!(e->flags & STG_ENTRY_ZERO))
			ok = ok && e->pack != 0 && e->offset % 4096 == 0 && e->offset < MAX_FILE_SIZE;
		if (!ok) {
			free(m.entries);
			return -EBADMSG;
		}
	}
	*ret = m;
	return 0;
}

int stg_manifest_init(struct stg_manifest *m, uint64_t size, uint32_t chunk_size)
{
	uint64_t n = stg_manifest_nchunks(size, chunk_size);
	if (size > MAX_FILE_SIZE || n > UINT32_MAX)
		return -EFBIG;
	*m = (struct stg_manifest){.size = size, .chunk_size = chunk_size, .nchunks = (uint32_t)n};
	m->entries = calloc(n ? n : 1, sizeof(*m->entries));
	return m->entries ? 0 : -ENOMEM;
}

void stg_manifest_done(struct stg_manifest *m)
{
	free(m->entries);
	m->entries = NULL;
	m->nchunks = 0;
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
