/* SPDX-License-Identifier: MIT */
/* The wire protocol: frame headers and message bodies, encoded and validated
 * (docs/PROTOCOL.md describes every field). */
#include <errno.h>
#include <string.h>

#include "chunk.h"
#include "manifest.h"
#include "tombstone.h"
#include "util.h"
#include "wire.h"

#define LIST_ENTRY_FIXED 54 /* 5 x u64, 3 x u32, u16 path length */
#define LIST_ENTRY_FLAGGED 58 /* and u32 flags before the path length */

static const char *const type_names[] = {
	[STG_MSG_CHALLENGE] = "CHALLENGE",       [STG_MSG_AUTH] = "AUTH",
	[STG_MSG_AUTH_OK] = "AUTH_OK",           [STG_MSG_ERROR] = "ERROR",
	[STG_MSG_HAVE] = "HAVE",                 [STG_MSG_HAVE_REPLY] = "HAVE_REPLY",
	[STG_MSG_PUT_CHUNK] = "PUT_CHUNK",       [STG_MSG_OK] = "OK",
	[STG_MSG_PUT_MANIFEST] = "PUT_MANIFEST", [STG_MSG_MISSING] = "MISSING",
	[STG_MSG_LIST] = "LIST",                 [STG_MSG_LIST_REPLY] = "LIST_REPLY",
	[STG_MSG_LIST_REPLY_FLAGS] = "LIST_REPLY_FLAGS",
	[STG_MSG_AUTH_MUNGE] = "AUTH_MUNGE",     [STG_MSG_MUNGE_HELLO] = "MUNGE_HELLO",
	[STG_MSG_MUNGE_SERVER] = "MUNGE_SERVER", [STG_MSG_MUNGE_AUTH] = "MUNGE_AUTH",
	[STG_MSG_GET_MANIFEST] = "GET_MANIFEST", [STG_MSG_MANIFEST] = "MANIFEST",
	[STG_MSG_GET_CHUNK] = "GET_CHUNK",       [STG_MSG_CHUNK] = "CHUNK",
	[STG_MSG_STAT] = "STAT",                 [STG_MSG_STAT_REPLY] = "STAT_REPLY",
	[STG_MSG_PUT_CHUNK_REF] = "PUT_CHUNK_REF", [STG_MSG_GET_CHUNK_REF] = "GET_CHUNK_REF",
	[STG_MSG_CHUNK_REF] = "CHUNK_REF",       [STG_MSG_DELETE_PATH] = "DELETE_PATH",
	[STG_MSG_WITHDRAW] = "WITHDRAW",
};

/* A MUNGE credential: 1..STG_WIRE_MAX_MUNGE_CRED printable ASCII bytes, the
 * rest of a body. */
static int decode_cred(const uint8_t *b, uint32_t len, const char **ret, uint32_t *ret_len)
{
	if (len == 0 || len > STG_WIRE_MAX_MUNGE_CRED)
		return -EBADMSG;
	for (uint32_t i = 0; i < len; i++)
		if (b[i] < 0x21 || b[i] > 0x7e)
			return -EBADMSG;
	*ret = (const char *)b;
	*ret_len = len;
	return 0;
}

const char *stg_msg_type_name(uint8_t type)
{
	if (type == 0 || type > STG_MSG_TYPE_MAX)
		return "unknown";
	return type_names[type];
}

void stg_wire_header_encode(uint8_t *out, const struct stg_wire_header *h)
{
	memcpy(out, STG_WIRE_MAGIC, 4);
	out[4] = h->version ? h->version : STG_WIRE_VERSION;
	out[5] = h->type;
	stg_put_le16(out + 6, h->flags);
	stg_put_le32(out + 8, h->length);
	stg_put_le32(out + 12, h->tag);
}

int stg_wire_header_decode(const uint8_t *buf, uint32_t max_body, struct stg_wire_header *ret)
{
	uint8_t version = buf[4];
	if (memcmp(buf, STG_WIRE_MAGIC, 4) != 0 || version < STG_WIRE_VERSION_OLDEST ||
	    version > STG_WIRE_VERSION)
		return -EPROTO;
	/* Version 1 defines no flag. */
	uint16_t flags = stg_get_le16(buf + 6);
	if (flags & ~(version >= 2 ? STG_WIRE_FLAG_MAC : 0u))
		return -EPROTO;
	if (buf[5] == 0 || buf[5] > STG_MSG_TYPE_MAX)
		return -EPROTO;
	uint32_t length = stg_get_le32(buf + 8);
	if (length > max_body || length > STG_WIRE_MAX_BODY)
		return -EPROTO;
	ret->version = version;
	ret->type = buf[5];
	ret->flags = flags;
	ret->length = length;
	ret->tag = stg_get_le32(buf + 12);
	return 0;
}

size_t stg_wire_frame_size(const struct stg_wire_header *h)
{
	return STG_WIRE_HEADER_SIZE + (size_t)h->length +
	       (h->flags & STG_WIRE_FLAG_MAC ? STG_WIRE_MAC_SIZE : 0);
}

uint32_t stg_wire_mac_covered(uint8_t type, uint32_t length)
{
	if ((type == STG_MSG_PUT_CHUNK || type == STG_MSG_CHUNK) && length > STG_CHUNK_HEADER_SIZE)
		return STG_CHUNK_HEADER_SIZE;
	return length;
}

int stg_wire_frame_mac(const uint8_t key[STG_SHA256_LEN], uint64_t seq, const uint8_t *hdr,
		       const uint8_t *body, uint8_t out[STG_WIRE_MAC_SIZE])
{
	uint8_t le[8];
	stg_put_le64(le, seq);
	const void *pieces[] = { le, hdr, body };
	const size_t lens[] = { sizeof(le), STG_WIRE_HEADER_SIZE,
				stg_wire_mac_covered(hdr[5], stg_get_le32(hdr + 8)) };
	return stg_hmac_sha256(key, STG_SHA256_LEN, pieces, lens, 3, out);
}

size_t stg_wire_seal(uint8_t *frame, size_t len, size_t cap, const uint8_t key[STG_SHA256_LEN],
		     uint64_t seq)
{
	if (len < STG_WIRE_HEADER_SIZE || cap < len || cap - len < STG_WIRE_MAC_SIZE)
		return 0;
	stg_put_le16(frame + 6, STG_WIRE_FLAG_MAC);
	if (stg_wire_frame_mac(key, seq, frame, frame + STG_WIRE_HEADER_SIZE, frame + len) < 0)
		return 0;
	return len + STG_WIRE_MAC_SIZE;
}

bool stg_wire_path_valid(const char *s, size_t len)
{
	return len <= STG_WIRE_MAX_PATH && stg_path_valid(s, len);
}

static bool prefix_valid(const char *s, size_t len)
{
	if (len == 0)
		return true;
	if (len > STG_WIRE_MAX_PATH || s[0] != '/')
		return false;
	return memchr(s, '\0', len) == NULL;
}

static bool text_valid(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

/* Is every bit at or past nbits in a bitmap of len bytes clear? */
static bool bitmap_tail_clear(const uint8_t *map, uint32_t len, uint32_t nbits)
{
	for (uint32_t i = nbits; i < len * 8u; i++)
		if (map[i / 8] & (1u << (i % 8)))
			return false;
	return true;
}

static int decode_list_reply(const uint8_t *b, uint32_t len, bool flagged,
			     struct stg_msg_list_reply *r)
{
	if (len < 4)
		return -EBADMSG;
	r->count = stg_get_le32(b);
	r->entries = b + 4;
	r->len = len - 4;
	r->flagged = flagged;
	uint32_t fixed = flagged ? LIST_ENTRY_FLAGGED : LIST_ENTRY_FIXED;
	/* Walk every entry now, so that stg_wire_list_next cannot meet a bad one. */
	uint32_t off = 0;
	for (uint32_t i = 0; i < r->count; i++) {
		if (r->len - off < fixed)
			return -EBADMSG;
		const uint8_t *e = r->entries + off;
		uint16_t plen = stg_get_le16(e + fixed - 2);
		if (r->len - off - fixed < plen)
			return -EBADMSG;
		if (stg_get_le64(e) == 0 || stg_get_le32(e + 48) > stg_get_le32(e + 44) ||
		    (flagged && (stg_get_le32(e + 52) & ~(uint32_t)(STG_MANIFEST_KNOWN_FLAGS |
								     STG_LIST_ENTRY_DELETED))) ||
		    !stg_wire_path_valid((const char *)e + fixed, plen))
			return -EBADMSG;
		off += fixed + plen;
	}
	return off == r->len ? 0 : -EBADMSG;
}

int stg_wire_decode(const struct stg_wire_header *h, const uint8_t *b, struct stg_msg *ret)
{
	uint32_t len = h->length;
	struct stg_msg m;
	memset(&m, 0, sizeof(m));
	m.version = h->version;
	m.type = h->type;
	m.tag = h->tag;
	switch (h->type) {
	case STG_MSG_CHALLENGE:
		if (len != 4 + STG_AUTH_NONCE_LEN)
			return -EBADMSG;
		m.challenge.min_version = stg_get_le16(b);
		m.challenge.max_version = stg_get_le16(b + 2);
		if (m.challenge.min_version == 0 ||
		    m.challenge.min_version > m.challenge.max_version)
			return -EBADMSG;
		memcpy(m.challenge.nonce, b + 4, STG_AUTH_NONCE_LEN);
		break;
	case STG_MSG_AUTH:
		if (len != 4 + STG_AUTH_NONCE_LEN + STG_AUTH_MAC_LEN)
			return -EBADMSG;
		m.auth.uid = stg_get_le32(b);
		memcpy(m.auth.nonce, b + 4, STG_AUTH_NONCE_LEN);
		memcpy(m.auth.mac, b + 4 + STG_AUTH_NONCE_LEN, STG_AUTH_MAC_LEN);
		break;
	case STG_MSG_AUTH_MUNGE:
		if (len <= STG_AUTH_NONCE_LEN + STG_AUTH_MAC_LEN)
			return -EBADMSG;
		memcpy(m.auth_munge.nonce, b, STG_AUTH_NONCE_LEN);
		memcpy(m.auth_munge.mac, b + STG_AUTH_NONCE_LEN, STG_AUTH_MAC_LEN);
		if (decode_cred(b + STG_AUTH_NONCE_LEN + STG_AUTH_MAC_LEN,
				len - STG_AUTH_NONCE_LEN - STG_AUTH_MAC_LEN, &m.auth_munge.cred,
				&m.auth_munge.cred_len) < 0)
			return -EBADMSG;
		break;
	case STG_MSG_MUNGE_HELLO:
		if (len != STG_AUTH_NONCE_LEN + STG_KX_PUB_LEN || h->version < 2)
			return -EBADMSG;
		memcpy(m.munge_hello.nonce, b, STG_AUTH_NONCE_LEN);
		memcpy(m.munge_hello.pub, b + STG_AUTH_NONCE_LEN, STG_KX_PUB_LEN);
		break;
	case STG_MSG_MUNGE_SERVER:
		if (len <= STG_KX_PUB_LEN || h->version < 2)
			return -EBADMSG;
		memcpy(m.munge_server.pub, b, STG_KX_PUB_LEN);
		if (decode_cred(b + STG_KX_PUB_LEN, len - STG_KX_PUB_LEN, &m.munge_server.cred,
				&m.munge_server.cred_len) < 0)
			return -EBADMSG;
		break;
	case STG_MSG_MUNGE_AUTH:
		if (len <= STG_AUTH_MAC_LEN || h->version < 2)
			return -EBADMSG;
		memcpy(m.munge_auth.mac, b, STG_AUTH_MAC_LEN);
		if (decode_cred(b + STG_AUTH_MAC_LEN, len - STG_AUTH_MAC_LEN, &m.munge_auth.cred,
				&m.munge_auth.cred_len) < 0)
			return -EBADMSG;
		break;
	case STG_MSG_AUTH_OK:
		if (len != STG_AUTH_MAC_LEN)
			return -EBADMSG;
		memcpy(m.auth_ok.mac, b, STG_AUTH_MAC_LEN);
		break;
	case STG_MSG_ERROR:
		if (len < 6)
			return -EBADMSG;
		m.error.code = stg_get_le32(b);
		m.error.text_len = stg_get_le16(b + 4);
		m.error.text = (const char *)b + 6;
		if (m.error.code == 0 || m.error.code > STG_WERR_MAX ||
		    m.error.text_len > STG_WIRE_MAX_ERROR_TEXT || len != 6 + m.error.text_len ||
		    !text_valid(m.error.text, m.error.text_len))
			return -EBADMSG;
		break;
	case STG_MSG_HAVE:
		if (len < 4)
			return -EBADMSG;
		m.have.count = stg_get_le32(b);
		m.have.hashes = b + 4;
		if (m.have.count == 0 || m.have.count > STG_WIRE_MAX_HAVE ||
		    len != 4 + (uint64_t)m.have.count * 16)
			return -EBADMSG;
		break;
	case STG_MSG_HAVE_REPLY:
		if (len < 4)
			return -EBADMSG;
		m.have_reply.count = stg_get_le32(b);
		m.have_reply.bitmap = b + 4;
		if (m.have_reply.count == 0 || m.have_reply.count > STG_WIRE_MAX_HAVE ||
		    len != 4 + (m.have_reply.count + 7) / 8 ||
		    !bitmap_tail_clear(b + 4, len - 4, m.have_reply.count))
			return -EBADMSG;
		break;
	case STG_MSG_PUT_CHUNK:
	case STG_MSG_CHUNK:
		/* The object's own header and hash are checked by the receiver,
		 * which knows what to expect; here only its size. */
		if (len < STG_CHUNK_HEADER_SIZE || len > stg_chunk_bound(64u << 20))
			return -EBADMSG;
		m.put_chunk.obj = b;
		m.put_chunk.len = len;
		break;
	case STG_MSG_OK:
	case STG_MSG_STAT:
		if (len != 0)
			return -EBADMSG;
		break;
	case STG_MSG_PUT_MANIFEST: {
		if (len < 16)
			return -EBADMSG;
		struct stg_msg_put_manifest *p = &m.put_manifest;
		p->keep = stg_get_le32(b);
		p->path_len = stg_get_le16(b + 4);
		uint16_t flags = stg_get_le16(b + 6);
		p->manifest_len = stg_get_le32(b + 8);
		p->held_len = stg_get_le32(b + 12);
		if (p->keep == 0 || flags != 0 ||
		    (uint64_t)16 + p->path_len + p->manifest_len + p->held_len != len)
			return -EBADMSG;
		p->path = (const char *)b + 16;
		p->manifest = b + 16 + p->path_len;
		p->held = p->manifest + p->manifest_len;
		if (!stg_wire_path_valid(p->path, p->path_len) || p->manifest_len == 0)
			return -EBADMSG;
		break;
	}
	case STG_MSG_MISSING:
		if (len < 4)
			return -EBADMSG;
		m.missing.count = stg_get_le32(b);
		m.missing.entries = b + 4;
		if (m.missing.count == 0 || len != 4 + (uint64_t)m.missing.count * 4)
			return -EBADMSG;
		break;
	case STG_MSG_LIST:
		if (len < 4)
			return -EBADMSG;
		m.list.prefix_len = stg_get_le16(b);
		m.list.prefix = (const char *)b + 4;
		m.list.flags = stg_get_le16(b + 2);
		if ((m.list.flags & ~(STG_LIST_FLAGS | STG_LIST_DELETED)) ||
		    ((m.list.flags & STG_LIST_DELETED) && !(m.list.flags & STG_LIST_FLAGS)) ||
		    len != 4 + m.list.prefix_len ||
		    !prefix_valid(m.list.prefix, m.list.prefix_len))
			return -EBADMSG;
		break;
	case STG_MSG_LIST_REPLY:
	case STG_MSG_LIST_REPLY_FLAGS:
		if (decode_list_reply(b, len, h->type == STG_MSG_LIST_REPLY_FLAGS, &m.list_reply) < 0)
			return -EBADMSG;
		break;
	case STG_MSG_GET_MANIFEST:
		if (len < 12)
			return -EBADMSG;
		m.get_manifest.version = stg_get_le64(b);
		m.get_manifest.path_len = stg_get_le16(b + 8);
		m.get_manifest.path = (const char *)b + 12;
		if (stg_get_le16(b + 10) != 0 || len != 12 + m.get_manifest.path_len ||
		    !stg_wire_path_valid(m.get_manifest.path, m.get_manifest.path_len))
			return -EBADMSG;
		break;
	case STG_MSG_WITHDRAW: {
		struct stg_msg_withdraw *w = &m.withdraw;
		if (len < 20)
			return -EBADMSG;
		w->version = stg_get_le64(b);
		w->manifest_hash = stg_get_le64(b + 8);
		w->path_len = stg_get_le16(b + 16);
		w->path = (const char *)b + 20;
		if (h->version < 2 || w->version == 0 || stg_get_le16(b + 18) != 0 ||
		    len != 20 + w->path_len || !stg_wire_path_valid(w->path, w->path_len))
			return -EBADMSG;
		break;
	}
	case STG_MSG_DELETE_PATH: {
		struct stg_msg_delete_path *d = &m.delete_path;
		if (len < 28)
			return -EBADMSG;
		d->upto = stg_get_le64(b);
		d->at_ns = (int64_t)stg_get_le64(b + 8);
		d->retain_s = stg_get_le32(b + 16);
		d->flags = stg_get_le32(b + 20);
		d->path_len = stg_get_le16(b + 24);
		d->path = (const char *)b + 28;
		if (h->version < 2 || d->upto == 0 || d->at_ns <= 0 ||
		    (d->flags & ~STG_TOMBSTONE_RENAMED) ||
		    stg_get_le16(b + 26) != 0 || len != 28 + d->path_len ||
		    !stg_wire_path_valid(d->path, d->path_len))
			return -EBADMSG;
		break;
	}
	case STG_MSG_MANIFEST:
		if (len == 0)
			return -EBADMSG;
		m.manifest.manifest = b;
		m.manifest.len = len;
		break;
	case STG_MSG_GET_CHUNK:
		if (len != 16)
			return -EBADMSG;
		memcpy(m.get_chunk.hash.b, b, 16);
		break;
	case STG_MSG_STAT_REPLY:
		if (len != 60)
			return -EBADMSG;
		m.stat_reply.chunks = stg_get_le64(b);
		m.stat_reply.chunk_bytes = stg_get_le64(b + 8);
		m.stat_reply.segments = stg_get_le64(b + 16);
		m.stat_reply.segment_bytes = stg_get_le64(b + 24);
		m.stat_reply.index_bytes = stg_get_le64(b + 32);
		m.stat_reply.uptime_s = stg_get_le64(b + 40);
		m.stat_reply.connections = stg_get_le32(b + 48);
		if (stg_get_le64(b + 52) != 0)
			return -EBADMSG;
		break;
	case STG_MSG_PUT_CHUNK_REF:
		if (len != 16)
			return -EBADMSG;
		m.put_chunk_ref.addr = stg_get_le64(b);
		m.put_chunk_ref.rkey = stg_get_le32(b + 8);
		m.put_chunk_ref.len = stg_get_le32(b + 12);
		if (m.put_chunk_ref.len < STG_CHUNK_HEADER_SIZE ||
		    m.put_chunk_ref.len > stg_chunk_bound(64u << 20))
			return -EBADMSG;
		break;
	case STG_MSG_GET_CHUNK_REF:
		if (len != 32)
			return -EBADMSG;
		memcpy(m.get_chunk_ref.hash.b, b, 16);
		m.get_chunk_ref.addr = stg_get_le64(b + 16);
		m.get_chunk_ref.rkey = stg_get_le32(b + 24);
		m.get_chunk_ref.cap = stg_get_le32(b + 28);
		if (m.get_chunk_ref.cap < STG_CHUNK_HEADER_SIZE)
			return -EBADMSG;
		break;
	case STG_MSG_CHUNK_REF:
		if (len != 4)
			return -EBADMSG;
		m.chunk_ref.len = stg_get_le32(b);
		if (m.chunk_ref.len < STG_CHUNK_HEADER_SIZE ||
		    m.chunk_ref.len > stg_chunk_bound(64u << 20))
			return -EBADMSG;
		break;
	default:
		return -EBADMSG;
	}
	*ret = m;
	return 0;
}

static size_t body_size(const struct stg_msg *m)
{
	switch (m->type) {
	case STG_MSG_CHALLENGE: return 4 + STG_AUTH_NONCE_LEN;
	case STG_MSG_AUTH: return 4 + STG_AUTH_NONCE_LEN + STG_AUTH_MAC_LEN;
	case STG_MSG_AUTH_OK: return STG_AUTH_MAC_LEN;
	case STG_MSG_AUTH_MUNGE:
		return STG_AUTH_NONCE_LEN + STG_AUTH_MAC_LEN + (size_t)m->auth_munge.cred_len;
	case STG_MSG_MUNGE_HELLO: return STG_AUTH_NONCE_LEN + STG_KX_PUB_LEN;
	case STG_MSG_MUNGE_SERVER: return STG_KX_PUB_LEN + (size_t)m->munge_server.cred_len;
	case STG_MSG_MUNGE_AUTH: return STG_AUTH_MAC_LEN + (size_t)m->munge_auth.cred_len;
	case STG_MSG_ERROR: return 6 + m->error.text_len;
	case STG_MSG_HAVE: return 4 + (size_t)m->have.count * 16;
	case STG_MSG_HAVE_REPLY: return 4 + ((size_t)m->have_reply.count + 7) / 8;
	case STG_MSG_PUT_CHUNK: return m->put_chunk.len;
	case STG_MSG_CHUNK: return m->chunk.len;
	case STG_MSG_OK:
	case STG_MSG_STAT: return 0;
	case STG_MSG_PUT_MANIFEST:
		return 16 + (size_t)m->put_manifest.path_len + m->put_manifest.manifest_len +
		       m->put_manifest.held_len;
	case STG_MSG_MISSING: return 4 + (size_t)m->missing.count * 4;
	case STG_MSG_LIST: return 4 + (size_t)m->list.prefix_len;
	case STG_MSG_LIST_REPLY:
	case STG_MSG_LIST_REPLY_FLAGS: return 4 + (size_t)m->list_reply.len;
	case STG_MSG_GET_MANIFEST: return 12 + (size_t)m->get_manifest.path_len;
	case STG_MSG_DELETE_PATH: return 28 + (size_t)m->delete_path.path_len;
	case STG_MSG_WITHDRAW: return 20 + (size_t)m->withdraw.path_len;
	case STG_MSG_MANIFEST: return m->manifest.len;
	case STG_MSG_GET_CHUNK: return 16;
	case STG_MSG_STAT_REPLY: return 60;
	case STG_MSG_PUT_CHUNK_REF: return 16;
	case STG_MSG_GET_CHUNK_REF: return 32;
	case STG_MSG_CHUNK_REF: return 4;
	default: return SIZE_MAX;
	}
}

size_t stg_wire_encoded_size(const struct stg_msg *msg)
{
	size_t n = body_size(msg);
	return n > STG_WIRE_MAX_BODY ? 0 : STG_WIRE_HEADER_SIZE + n;
}

size_t stg_wire_encode(const struct stg_msg *m, uint8_t *out, size_t cap)
{
	size_t total = stg_wire_encoded_size(m);
	if (total == 0 || total > cap)
		return 0;
	size_t n = total - STG_WIRE_HEADER_SIZE;
	uint8_t *b = out + STG_WIRE_HEADER_SIZE;
	struct stg_wire_header h = {.version = m->version, .type = m->type, .length = (uint32_t)n,
				    .tag = m->tag};
	stg_wire_header_encode(out, &h);
	switch (m->type) {
	case STG_MSG_CHALLENGE:
		stg_put_le16(b, m->challenge.min_version);
		stg_put_le16(b + 2, m->challenge.max_version);
		memcpy(b + 4, m->challenge.nonce, STG_AUTH_NONCE_LEN);
		break;
	case STG_MSG_AUTH:
		stg_put_le32(b, m->auth.uid);
		memcpy(b + 4, m->auth.nonce, STG_AUTH_NONCE_LEN);
		memcpy(b + 4 + STG_AUTH_NONCE_LEN, m->auth.mac, STG_AUTH_MAC_LEN);
		break;
	case STG_MSG_AUTH_OK:
		memcpy(b, m->auth_ok.mac, STG_AUTH_MAC_LEN);
		break;
	case STG_MSG_AUTH_MUNGE:
		if (!m->auth_munge.cred_len || m->auth_munge.cred_len > STG_WIRE_MAX_MUNGE_CRED)
			return 0;
		memcpy(b, m->auth_munge.nonce, STG_AUTH_NONCE_LEN);
		memcpy(b + STG_AUTH_NONCE_LEN, m->auth_munge.mac, STG_AUTH_MAC_LEN);
		memcpy(b + STG_AUTH_NONCE_LEN + STG_AUTH_MAC_LEN, m->auth_munge.cred,
		       m->auth_munge.cred_len);
		break;
	case STG_MSG_MUNGE_HELLO:
		memcpy(b, m->munge_hello.nonce, STG_AUTH_NONCE_LEN);
		memcpy(b + STG_AUTH_NONCE_LEN, m->munge_hello.pub, STG_KX_PUB_LEN);
		break;
	case STG_MSG_MUNGE_SERVER:
		if (!m->munge_server.cred_len || m->munge_server.cred_len > STG_WIRE_MAX_MUNGE_CRED)
			return 0;
		memcpy(b, m->munge_server.pub, STG_KX_PUB_LEN);
		memcpy(b + STG_KX_PUB_LEN, m->munge_server.cred, m->munge_server.cred_len);
		break;
	case STG_MSG_MUNGE_AUTH:
		if (!m->munge_auth.cred_len || m->munge_auth.cred_len > STG_WIRE_MAX_MUNGE_CRED)
			return 0;
		memcpy(b, m->munge_auth.mac, STG_AUTH_MAC_LEN);
		memcpy(b + STG_AUTH_MAC_LEN, m->munge_auth.cred, m->munge_auth.cred_len);
		break;
	case STG_MSG_ERROR:
		if (m->error.text_len > STG_WIRE_MAX_ERROR_TEXT)
			return 0;
		stg_put_le32(b, m->error.code);
		stg_put_le16(b + 4, (uint16_t)m->error.text_len);
		memcpy(b + 6, m->error.text, m->error.text_len);
		break;
	case STG_MSG_HAVE:
		stg_put_le32(b, m->have.count);
		memcpy(b + 4, m->have.hashes, (size_t)m->have.count * 16);
		break;
	case STG_MSG_HAVE_REPLY:
		stg_put_le32(b, m->have_reply.count);
		memcpy(b + 4, m->have_reply.bitmap, n - 4);
		break;
	case STG_MSG_PUT_CHUNK:
		memcpy(b, m->put_chunk.obj, m->put_chunk.len);
		break;
	case STG_MSG_CHUNK:
		memcpy(b, m->chunk.obj, m->chunk.len);
		break;
	case STG_MSG_OK:
	case STG_MSG_STAT:
		break;
	case STG_MSG_PUT_MANIFEST: {
		const struct stg_msg_put_manifest *p = &m->put_manifest;
		if (p->path_len > STG_WIRE_MAX_PATH)
			return 0;
		stg_put_le32(b, p->keep);
		stg_put_le16(b + 4, (uint16_t)p->path_len);
		stg_put_le16(b + 6, 0);
		stg_put_le32(b + 8, p->manifest_len);
		stg_put_le32(b + 12, p->held_len);
		memcpy(b + 16, p->path, p->path_len);
		memcpy(b + 16 + p->path_len, p->manifest, p->manifest_len);
		memcpy(b + 16 + p->path_len + p->manifest_len, p->held, p->held_len);
		break;
	}
	case STG_MSG_MISSING:
		stg_put_le32(b, m->missing.count);
		memcpy(b + 4, m->missing.entries, (size_t)m->missing.count * 4);
		break;
	case STG_MSG_LIST:
		if (m->list.prefix_len > STG_WIRE_MAX_PATH)
			return 0;
		stg_put_le16(b, (uint16_t)m->list.prefix_len);
		stg_put_le16(b + 2, m->list.flags);
		memcpy(b + 4, m->list.prefix, m->list.prefix_len);
		break;
	case STG_MSG_LIST_REPLY:
	case STG_MSG_LIST_REPLY_FLAGS:
		stg_put_le32(b, m->list_reply.count);
		memcpy(b + 4, m->list_reply.entries, m->list_reply.len);
		break;
	case STG_MSG_GET_MANIFEST:
		if (m->get_manifest.path_len > STG_WIRE_MAX_PATH)
			return 0;
		stg_put_le64(b, m->get_manifest.version);
		stg_put_le16(b + 8, (uint16_t)m->get_manifest.path_len);
		stg_put_le16(b + 10, 0);
		memcpy(b + 12, m->get_manifest.path, m->get_manifest.path_len);
		break;
	case STG_MSG_WITHDRAW:
		if (m->withdraw.path_len > STG_WIRE_MAX_PATH)
			return 0;
		stg_put_le64(b, m->withdraw.version);
		stg_put_le64(b + 8, m->withdraw.manifest_hash);
		stg_put_le16(b + 16, (uint16_t)m->withdraw.path_len);
		stg_put_le16(b + 18, 0);
		memcpy(b + 20, m->withdraw.path, m->withdraw.path_len);
		break;
	case STG_MSG_DELETE_PATH:
		if (m->delete_path.path_len > STG_WIRE_MAX_PATH)
			return 0;
		stg_put_le64(b, m->delete_path.upto);
		stg_put_le64(b + 8, (uint64_t)m->delete_path.at_ns);
		stg_put_le32(b + 16, m->delete_path.retain_s);
		stg_put_le32(b + 20, m->delete_path.flags);
		stg_put_le16(b + 24, (uint16_t)m->delete_path.path_len);
		stg_put_le16(b + 26, 0);
		memcpy(b + 28, m->delete_path.path, m->delete_path.path_len);
		break;
	case STG_MSG_MANIFEST:
		memcpy(b, m->manifest.manifest, m->manifest.len);
		break;
	case STG_MSG_GET_CHUNK:
		memcpy(b, m->get_chunk.hash.b, 16);
		break;
	case STG_MSG_STAT_REPLY:
		stg_put_le64(b, m->stat_reply.chunks);
		stg_put_le64(b + 8, m->stat_reply.chunk_bytes);
		stg_put_le64(b + 16, m->stat_reply.segments);
		stg_put_le64(b + 24, m->stat_reply.segment_bytes);
		stg_put_le64(b + 32, m->stat_reply.index_bytes);
		stg_put_le64(b + 40, m->stat_reply.uptime_s);
		stg_put_le32(b + 48, m->stat_reply.connections);
		stg_put_le64(b + 52, 0);
		break;
	case STG_MSG_PUT_CHUNK_REF:
		stg_put_le64(b, m->put_chunk_ref.addr);
		stg_put_le32(b + 8, m->put_chunk_ref.rkey);
		stg_put_le32(b + 12, m->put_chunk_ref.len);
		break;
	case STG_MSG_GET_CHUNK_REF:
		memcpy(b, m->get_chunk_ref.hash.b, 16);
		stg_put_le64(b + 16, m->get_chunk_ref.addr);
		stg_put_le32(b + 24, m->get_chunk_ref.rkey);
		stg_put_le32(b + 28, m->get_chunk_ref.cap);
		break;
	case STG_MSG_CHUNK_REF:
		stg_put_le32(b, m->chunk_ref.len);
		break;
	default:
		return 0;
	}
	return total;
}

int stg_wire_list_add(uint8_t *out, size_t cap, size_t *len, const struct stg_list_entry *e,
		      bool flagged)
{
	if (e->path_len > STG_WIRE_MAX_PATH)
		return -EINVAL;
	size_t fixed = flagged ? LIST_ENTRY_FLAGGED : LIST_ENTRY_FIXED;
	size_t need = fixed + e->path_len;
	if (cap - *len < need)
		return -ENOSPC;
	uint8_t *p = out + *len;
	stg_put_le64(p, e->version);
	stg_put_le64(p + 8, e->size);
	stg_put_le64(p + 16, (uint64_t)e->mtime_ns);
	stg_put_le64(p + 24, (uint64_t)e->commit_ns);
	stg_put_le64(p + 32, e->stored);
	stg_put_le32(p + 40, e->mode);
	stg_put_le32(p + 44, e->nchunks);
	stg_put_le32(p + 48, e->new_chunks);
	if (flagged)
		stg_put_le32(p + 52, e->flags);
	stg_put_le16(p + fixed - 2, (uint16_t)e->path_len);
	memcpy(p + fixed, e->path, e->path_len);
	*len += need;
	return 0;
}

int stg_wire_list_next(const struct stg_msg_list_reply *r, uint32_t *off, struct stg_list_entry *ret)
{
	if (*off >= r->len)
		return 0;
	const uint8_t *p = r->entries + *off;
	ret->version = stg_get_le64(p);
	ret->size = stg_get_le64(p + 8);
	ret->mtime_ns = (int64_t)stg_get_le64(p + 16);
	ret->commit_ns = (int64_t)stg_get_le64(p + 24);
	ret->stored = stg_get_le64(p + 32);
	ret->mode = stg_get_le32(p + 40);
	ret->nchunks = stg_get_le32(p + 44);
	ret->new_chunks = stg_get_le32(p + 48);
	uint32_t fixed = r->flagged ? LIST_ENTRY_FLAGGED : LIST_ENTRY_FIXED;
	ret->flags = r->flagged ? stg_get_le32(p + 52) : 0;
	ret->path_len = stg_get_le16(p + fixed - 2);
	ret->path = (const char *)p + fixed;
	*off += fixed + ret->path_len;
	return 1;
}

static const struct {
	uint32_t code;
	int err;
} error_map[] = {
	{STG_WERR_NOENT, ENOENT}, {STG_WERR_BADMSG, EBADMSG}, {STG_WERR_ACCES, EACCES},
	{STG_WERR_NOSPC, ENOSPC}, {STG_WERR_PROTO, EPROTO},   {STG_WERR_IO, EIO},
	{STG_WERR_BUSY, EBUSY},   {STG_WERR_EXIST, EEXIST},
};

uint32_t stg_wire_error_from_errno(int negerr)
{
	for (size_t i = 0; i < sizeof(error_map) / sizeof(error_map[0]); i++)
		if (error_map[i].err == -negerr)
			return error_map[i].code;
	return STG_WERR_IO;
}

int stg_wire_error_to_errno(uint32_t code)
{
	for (size_t i = 0; i < sizeof(error_map) / sizeof(error_map[0]); i++)
		if (error_map[i].code == code)
			return -error_map[i].err;
	return -EPROTO;
}
