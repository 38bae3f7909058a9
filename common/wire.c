/* SPDX-License-Identifier: MIT */
/* The wire protocol: frame headers and message bodies, encoded and validated
 * (docs/PROTOCOL.md describes every field). */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "chunk.h"
#include "manifest.h"
#include "tombstone.h"
#include "util.h"
#include "wire.h"

#define LIST_ENTRY_FIXED 54 /* 5 x u64, 3 x u32, u16 path length */
#define LIST_ENTRY_FLAGGED 58 /* and u32 flags before the path length */

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

/* A MUNGE credential is printable ASCII without spaces. */
static bool cred_valid(const char *s, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

static bool chunk_object_len_valid(uint32_t len)
{
	return len >= STG_CHUNK_HEADER_SIZE && len <= stg_chunk_bound(64u << 20);
}

/* What a decoded body must satisfy beyond its layout (wire.def's check):
 * true when it does. They may complete what follows from the type. */

static bool check_challenge(struct stg_msg *m)
{
	return m->challenge.min_version != 0 && m->challenge.min_version <= m->challenge.max_version;
}

static bool check_error(struct stg_msg *m)
{
	return m->error.code != 0 && m->error.code <= STG_WERR_MAX &&
	       text_valid(m->error.text, m->error.text_len);
}

static bool check_have(struct stg_msg *m)
{
	return m->have.count != 0 && m->have.count <= STG_WIRE_MAX_HAVE;
}

static bool check_have_reply(struct stg_msg *m)
{
	const struct stg_msg_have_reply *r = &m->have_reply;
	return r->count != 0 && r->count <= STG_WIRE_MAX_HAVE &&
	       bitmap_tail_clear(r->bitmap, (r->count + 7) / 8, r->count);
}

/* The object's own header and hash are checked by the receiver, which knows
 * what to expect; here only its size. */
static bool check_chunk_object(struct stg_msg *m)
{
	return chunk_object_len_valid(m->put_chunk.len);
}

static bool check_put_manifest(struct stg_msg *m)
{
	const struct stg_msg_put_manifest *p = &m->put_manifest;
	return p->keep != 0 && p->manifest_len != 0 && stg_wire_path_valid(p->path, p->path_len);
}

static bool check_missing(struct stg_msg *m)
{
	return m->missing.count != 0;
}

static bool check_list(struct stg_msg *m)
{
	uint16_t flags = m->list.flags;
	return !(flags & ~(STG_LIST_FLAGS | STG_LIST_DELETED)) &&
	       (!(flags & STG_LIST_DELETED) || (flags & STG_LIST_FLAGS)) &&
	       prefix_valid(m->list.prefix, m->list.prefix_len);
}

/* Walks every entry now, so that stg_wire_list_next cannot meet a bad one. */
static bool check_list_reply(struct stg_msg *m)
{
	struct stg_msg_list_reply *r = &m->list_reply;
	r->flagged = m->type == STG_MSG_LIST_REPLY_FLAGS;
	uint32_t fixed = r->flagged ? LIST_ENTRY_FLAGGED : LIST_ENTRY_FIXED;
	uint32_t off = 0;
	for (uint32_t i = 0; i < r->count; i++) {
		if (r->len - off < fixed)
			return false;
		const uint8_t *e = r->entries + off;
		uint16_t plen = stg_get_le16(e + fixed - 2);
		if (r->len - off - fixed < plen)
			return false;
		if (stg_get_le64(e) == 0 || stg_get_le32(e + 48) > stg_get_le32(e + 44) ||
		    (r->flagged && (stg_get_le32(e + 52) & ~(uint32_t)(STG_MANIFEST_KNOWN_FLAGS |
									STG_LIST_ENTRY_DELETED))) ||
		    !stg_wire_path_valid((const char *)e + fixed, plen))
			return false;
		off += fixed + plen;
	}
	return off == r->len;
}

static bool check_get_manifest(struct stg_msg *m)
{
	return stg_wire_path_valid(m->get_manifest.path, m->get_manifest.path_len);
}

static bool check_manifest(struct stg_msg *m)
{
	return m->manifest.len != 0;
}

static bool check_put_chunk_ref(struct stg_msg *m)
{
	return chunk_object_len_valid(m->put_chunk_ref.len);
}

static bool check_get_chunk_ref(struct stg_msg *m)
{
	return m->get_chunk_ref.cap >= STG_CHUNK_HEADER_SIZE;
}

static bool check_chunk_ref(struct stg_msg *m)
{
	return chunk_object_len_valid(m->chunk_ref.len);
}

static bool check_auth_munge(struct stg_msg *m)
{
	return cred_valid(m->auth_munge.cred, m->auth_munge.cred_len);
}

static bool check_munge_server(struct stg_msg *m)
{
	return cred_valid(m->munge_server.cred, m->munge_server.cred_len);
}

static bool check_munge_auth(struct stg_msg *m)
{
	return cred_valid(m->munge_auth.cred, m->munge_auth.cred_len);
}

static bool check_delete_path(struct stg_msg *m)
{
	const struct stg_msg_delete_path *d = &m->delete_path;
	return d->upto != 0 && d->at_ns > 0 && !(d->flags & ~STG_TOMBSTONE_RENAMED) &&
	       stg_wire_path_valid(d->path, d->path_len);
}

static bool check_withdraw(struct stg_msg *m)
{
	return m->withdraw.version != 0 &&
	       stg_wire_path_valid(m->withdraw.path, m->withdraw.path_len);
}

/* wire.def's fields, as a table each message's encoder and decoder walk. */
enum field_kind { F_END, F_INT, F_ZERO, F_BYTES, F_DATA, F_ARRAY, F_BITS, F_REST };

struct field {
	uint8_t kind;   /* enum field_kind */
	uint8_t wire;   /* F_INT, F_ZERO: bytes on the wire */
	uint8_t width;  /* F_INT: bytes of its member; the others: of their length's */
	uint16_t at;    /* its member's offset in struct stg_msg */
	uint16_t n_at;  /* F_DATA, F_ARRAY, F_BITS, F_REST: its length's (or count's) */
	uint32_t size;  /* F_BYTES: its bytes; F_ARRAY: an element's */
	uint32_t min;   /* F_REST: the fewest bytes */
	uint32_t max;   /* F_INT, F_REST: the most (0: no bound) */
};

#define AT(m, f) offsetof(struct stg_msg, m.f)
#define WIDTH(m, f) sizeof(((struct stg_msg *)0)->m.f)
#define F_U16(m, f) {.kind = F_INT, .wire = 2, .width = WIDTH(m, f), .at = AT(m, f)},
#define F_U32(m, f) {.kind = F_INT, .wire = 4, .width = WIDTH(m, f), .at = AT(m, f)},
#define F_U64(m, f) {.kind = F_INT, .wire = 8, .width = WIDTH(m, f), .at = AT(m, f)},
#define F_LEN16(m, f, mx) \
	{.kind = F_INT, .wire = 2, .width = WIDTH(m, f), .at = AT(m, f), .max = (mx)},
#define F_LEN32(m, f) F_U32(m, f)
#define F_ZERO16(m, ...) {.kind = F_ZERO, .wire = 2},
#define F_ZERO64(m, ...) {.kind = F_ZERO, .wire = 8},
#define F_BYTES(m, f) {.kind = F_BYTES, .size = WIDTH(m, f), .at = AT(m, f)},
#define F_DATA(m, p, n) {.kind = F_DATA, .width = WIDTH(m, n), .at = AT(m, p), .n_at = AT(m, n)},
#define F_ARRAY(m, p, c, sz) \
	{.kind = F_ARRAY, .width = WIDTH(m, c), .at = AT(m, p), .n_at = AT(m, c), .size = (sz)},
#define F_BITS(m, p, c) {.kind = F_BITS, .width = WIDTH(m, c), .at = AT(m, p), .n_at = AT(m, c)},
#define F_REST(m, p, n, mn, mx)                                                            \
	{.kind = F_REST, .width = WIDTH(m, n), .at = AT(m, p), .n_at = AT(m, n), .min = (mn), \
	 .max = (mx)},
#define F_NONE(m, ...)

/* FOR_EACH_FIELD(m, (KIND, args...), ...): F_KIND(m, args...) for each. */
#define UNPAREN(...) __VA_ARGS__
#define FIELD_(m, kind, ...) F_##kind(m, __VA_ARGS__)
#define FIELD_CALL(...) FIELD_(__VA_ARGS__)
#define FIELD(m, x) FIELD_CALL(m, UNPAREN x)
#define FE_1(m, x) FIELD(m, x)
#define FE_2(m, x, ...) FIELD(m, x) FE_1(m, __VA_ARGS__)
#define FE_3(m, x, ...) FIELD(m, x) FE_2(m, __VA_ARGS__)
#define FE_4(m, x, ...) FIELD(m, x) FE_3(m, __VA_ARGS__)
#define FE_5(m, x, ...) FIELD(m, x) FE_4(m, __VA_ARGS__)
#define FE_6(m, x, ...) FIELD(m, x) FE_5(m, __VA_ARGS__)
#define FE_7(m, x, ...) FIELD(m, x) FE_6(m, __VA_ARGS__)
#define FE_8(m, x, ...) FIELD(m, x) FE_7(m, __VA_ARGS__)
#define FE_PICK(_1, _2, _3, _4, _5, _6, _7, _8, name, ...) name
#define FOR_EACH_FIELD(m, ...) \
	FE_PICK(__VA_ARGS__, FE_8, FE_7, FE_6, FE_5, FE_4, FE_3, FE_2, FE_1, )(m, __VA_ARGS__)

#define MSG(type, number, member, since, check, ...) \
	static const struct field fields_##type[] = {FOR_EACH_FIELD(member, __VA_ARGS__){0}};
#include "wire.def"
#undef MSG

struct message {
	const char *name;
	uint8_t since; /* the oldest frame version that carries it */
	bool (*check)(struct stg_msg *m);
	const struct field *fields;
};

static const struct message messages[STG_MSG_TYPE_MAX + 1] = {
#define MSG(type, number, member, since, check, ...) \
	[number] = {#type, since, check, fields_##type},
#include "wire.def"
#undef MSG
};

/* The description of a message type, or NULL. */
static const struct message *message_of(uint8_t type)
{
	return type <= STG_MSG_TYPE_MAX && messages[type].name ? &messages[type] : NULL;
}

const char *stg_msg_type_name(uint8_t type)
{
	const struct message *d = message_of(type);
	return d ? d->name : "unknown";
}

/* Integer members of 1 to 8 bytes, and pointers, at an offset of a message. */
static uint64_t get_member(const struct stg_msg *m, uint16_t at, uint8_t width)
{
	const uint8_t *p = (const uint8_t *)m + at;
	uint8_t u8;
	uint16_t u16;
	uint32_t u32;
	uint64_t u64;
	switch (width) {
	case 1: memcpy(&u8, p, 1); return u8;
	case 2: memcpy(&u16, p, 2); return u16;
	case 4: memcpy(&u32, p, 4); return u32;
	default: memcpy(&u64, p, 8); return u64;
	}
}

static void set_member(struct stg_msg *m, uint16_t at, uint8_t width, uint64_t v)
{
	uint8_t *p = (uint8_t *)m + at;
	uint8_t u8 = (uint8_t)v;
	uint16_t u16 = (uint16_t)v;
	uint32_t u32 = (uint32_t)v;
	switch (width) {
	case 1: memcpy(p, &u8, 1); break;
	case 2: memcpy(p, &u16, 2); break;
	case 4: memcpy(p, &u32, 4); break;
	default: memcpy(p, &v, 8); break;
	}
}

static const void *get_pointer(const struct stg_msg *m, uint16_t at)
{
	const void *v;
	memcpy(&v, (const uint8_t *)m + at, sizeof(v));
	return v;
}

static void set_pointer(struct stg_msg *m, uint16_t at, const void *v)
{
	memcpy((uint8_t *)m + at, &v, sizeof(v));
}

static uint64_t get_le(const uint8_t *p, uint8_t wire)
{
	return wire == 2 ? stg_get_le16(p) : wire == 4 ? stg_get_le32(p) : stg_get_le64(p);
}

static void put_le(uint8_t *p, uint8_t wire, uint64_t v)
{
	if (wire == 2)
		stg_put_le16(p, (uint16_t)v);
	else if (wire == 4)
		stg_put_le32(p, (uint32_t)v);
	else
		stg_put_le64(p, v);
}

/* The bytes of a variable field (F_DATA, F_ARRAY, F_BITS, F_REST) as m says;
 * F_REST's are its length. */
static uint64_t data_bytes(const struct field *f, const struct stg_msg *m)
{
	uint64_t n = get_member(m, f->n_at, f->width);
	switch ((enum field_kind)f->kind) {
	case F_ARRAY: return n * f->size;
	case F_BITS: return (n + 7) / 8;
	case F_DATA:
	case F_REST: return n;
	case F_END:
	case F_INT:
	case F_ZERO:
	case F_BYTES: break;
	}
	return 0;
}

/* A bounded reader of a body: every take checks what is left. */
struct reader {
	const uint8_t *p;
	uint64_t len, off;
};

static const uint8_t *take(struct reader *r, uint64_t n)
{
	if (r->len - r->off < n)
		return NULL;
	const uint8_t *p = r->p + r->off;
	r->off += n;
	return p;
}

int stg_wire_decode(const struct stg_wire_header *h, const uint8_t *b, struct stg_msg *ret)
{
	const struct message *d = message_of(h->type);
	if (!d || h->version < d->since)
		return -EBADMSG;
	struct stg_msg m;
	memset(&m, 0, sizeof(m));
	m.version = h->version;
	m.type = h->type;
	m.tag = h->tag;
	struct reader r = {.p = b, .len = h->length};
	for (const struct field *f = d->fields; f->kind != F_END; f++) {
		const uint8_t *p;
		uint64_t v;
		switch ((enum field_kind)f->kind) {
		case F_INT:
		case F_ZERO:
			if (!(p = take(&r, f->wire)))
				return -EBADMSG;
			v = get_le(p, f->wire);
			if (f->kind == F_ZERO ? v != 0 : f->max && v > f->max)
				return -EBADMSG;
			if (f->kind == F_INT)
				set_member(&m, f->at, f->width, v);
			break;
		case F_BYTES:
			if (!(p = take(&r, f->size)))
				return -EBADMSG;
			memcpy((uint8_t *)&m + f->at, p, f->size);
			break;
		case F_REST:
			v = r.len - r.off;
			if (v < f->min || (f->max && v > f->max))
				return -EBADMSG;
			set_member(&m, f->n_at, f->width, v);
			/* fall through */
		case F_DATA:
		case F_ARRAY:
		case F_BITS:
			if (!(p = take(&r, data_bytes(f, &m))))
				return -EBADMSG;
			set_pointer(&m, f->at, p);
			break;
		case F_END:
			break;
		}
	}
	if (r.off != r.len || (d->check && !d->check(&m)))
		return -EBADMSG;
	*ret = m;
	return 0;
}

static size_t body_size(const struct message *d, const struct stg_msg *m)
{
	uint64_t n = 0;
	for (const struct field *f = d->fields; f->kind != F_END; f++)
		switch ((enum field_kind)f->kind) {
		case F_INT:
		case F_ZERO: n += f->wire; break;
		case F_BYTES: n += f->size; break;
		case F_DATA:
		case F_ARRAY:
		case F_BITS:
		case F_REST: n += data_bytes(f, m); break;
		case F_END: break;
		}
	return n > SIZE_MAX ? SIZE_MAX : (size_t)n;
}

size_t stg_wire_encoded_size(const struct stg_msg *msg)
{
	const struct message *d = message_of(msg->type);
	size_t n = d ? body_size(d, msg) : SIZE_MAX;
	return n > STG_WIRE_MAX_BODY ? 0 : STG_WIRE_HEADER_SIZE + n;
}

size_t stg_wire_encode(const struct stg_msg *m, uint8_t *out, size_t cap)
{
	size_t total = stg_wire_encoded_size(m);
	if (total == 0 || total > cap)
		return 0;
	const struct message *d = message_of(m->type);
	uint8_t *b = out + STG_WIRE_HEADER_SIZE;
	for (const struct field *f = d->fields; f->kind != F_END; f++) {
		uint64_t v;
		switch ((enum field_kind)f->kind) {
		case F_INT:
			v = get_member(m, f->at, f->width);
			if (f->max && v > f->max)
				return 0;
			put_le(b, f->wire, v);
			b += f->wire;
			break;
		case F_ZERO:
			put_le(b, f->wire, 0);
			b += f->wire;
			break;
		case F_BYTES:
			memcpy(b, (const uint8_t *)m + f->at, f->size);
			b += f->size;
			break;
		case F_REST:
		case F_DATA:
		case F_ARRAY:
		case F_BITS:
			v = data_bytes(f, m);
			if (f->kind == F_REST && (v < f->min || (f->max && v > f->max)))
				return 0;
			if (v)
				memcpy(b, get_pointer(m, f->at), (size_t)v);
			b += v;
			break;
		case F_END:
			break;
		}
	}
	struct stg_wire_header h = {.version = m->version, .type = m->type,
				    .length = (uint32_t)(total - STG_WIRE_HEADER_SIZE), .tag = m->tag};
	stg_wire_header_encode(out, &h);
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
