/* SPDX-License-Identifier: MIT */
/* The wire protocol: golden frames of every message, round trips, and the
 * validation of every header and body field. */
#include "chunk.h"
#include "harness.h"
#include "manifest.h"
#include "util.h"
#include "tombstone.h"
#include "wire.h"

static uint8_t hashes[3 * 16];
static uint8_t bitmap[1] = {0x05};
static uint8_t missing[8] = {1, 0, 0, 0, 2, 0, 0, 0};
static uint8_t object[48];
static uint8_t manifest[24];
static uint8_t list_body[256], flagged_body[256];
static size_t list_len, flagged_len;

/* One message of every type, with fixed contents. */
/* samples() makes one message of each type up to LIST_REPLY_FLAGS, whose
 * frames the first golden files pin; AUTH_MUNGE, added within version 2, has
 * a golden file of its own (test_auth_munge). */
#define SAMPLED_TYPES 22

static size_t samples(struct stg_msg *out)
{
	for (size_t i = 0; i < sizeof(hashes); i++)
		hashes[i] = (uint8_t)(0xa0 + i);
	for (size_t i = 0; i < sizeof(object); i++)
		object[i] = (uint8_t)i;
	for (size_t i = 0; i < sizeof(manifest); i++)
		manifest[i] = (uint8_t)(0x30 + i);
	struct stg_list_entry e = {.version = 3, .size = 1 << 20, .mtime_ns = 1795200000123456789LL,
				   .commit_ns = 1795200001000000000LL, .mode = 0640, .nchunks = 16,
				   .new_chunks = 2, .stored = 2 * 65536 + 8192,
				   .path = "/scratch/ckpt/rank0.dat", .path_len = 23};
	list_len = flagged_len = 0;
	CHECK_EQ(stg_wire_list_add(list_body, sizeof(list_body), &list_len, &e, false), 0);
	e.flags = STG_MANIFEST_PART | STG_MANIFEST_OPEN;
	CHECK_EQ(stg_wire_list_add(flagged_body, sizeof(flagged_body), &flagged_len, &e, true), 0);
	e.version = 4;
	e.path = "/a";
	e.path_len = 2;
	e.flags = 0;
	CHECK_EQ(stg_wire_list_add(list_body, sizeof(list_body), &list_len, &e, false), 0);
	CHECK_EQ(stg_wire_list_add(flagged_body, sizeof(flagged_body), &flagged_len, &e, true), 0);

	size_t n = 0;
	struct stg_msg m;
#define ADD(t, tagv) (memset(&m, 0, sizeof(m)), m.type = (t), m.tag = (tagv))
	ADD(STG_MSG_CHALLENGE, 0);
	m.challenge.min_version = 1;
	m.challenge.max_version = 1;
	memset(m.challenge.nonce, 0x11, sizeof(m.challenge.nonce));
	out[n++] = m;
	ADD(STG_MSG_AUTH, 0);
	m.auth.uid = 1000;
	memset(m.auth.nonce, 0x22, sizeof(m.auth.nonce));
	memset(m.auth.mac, 0x33, sizeof(m.auth.mac));
	out[n++] = m;
	ADD(STG_MSG_AUTH_OK, 0);
	memset(m.auth_ok.mac, 0x44, sizeof(m.auth_ok.mac));
	out[n++] = m;
	ADD(STG_MSG_ERROR, 9);
	m.error.code = STG_WERR_NOENT;
	m.error.text = "no such chunk";
	m.error.text_len = 13;
	out[n++] = m;
	ADD(STG_MSG_HAVE, 10);
	m.have.count = 3;
	m.have.hashes = hashes;
	out[n++] = m;
	ADD(STG_MSG_HAVE_REPLY, 10);
	m.have_reply.count = 3;
	m.have_reply.bitmap = bitmap;
	out[n++] = m;
	ADD(STG_MSG_PUT_CHUNK, 11);
	m.put_chunk.obj = object;
	m.put_chunk.len = sizeof(object);
	out[n++] = m;
	ADD(STG_MSG_OK, 11);
	out[n++] = m;
	ADD(STG_MSG_PUT_MANIFEST, 12);
	m.put_manifest.keep = 3;
	m.put_manifest.path = "/scratch/ckpt/rank0.dat";
	m.put_manifest.path_len = 23;
	m.put_manifest.manifest = manifest;
	m.put_manifest.manifest_len = sizeof(manifest);
	m.put_manifest.held = bitmap;
	m.put_manifest.held_len = 1;
	out[n++] = m;
	ADD(STG_MSG_MISSING, 12);
	m.missing.count = 2;
	m.missing.entries = missing;
	out[n++] = m;
	ADD(STG_MSG_LIST, 13);
	m.list.prefix = "/scratch";
	m.list.prefix_len = 8;
	out[n++] = m;
	ADD(STG_MSG_LIST_REPLY, 13);
	m.list_reply.count = 2;
	m.list_reply.entries = list_body;
	m.list_reply.len = (uint32_t)list_len;
	out[n++] = m;
	ADD(STG_MSG_GET_MANIFEST, 14);
	m.get_manifest.version = 3;
	m.get_manifest.path = "/scratch/ckpt/rank0.dat";
	m.get_manifest.path_len = 23;
	out[n++] = m;
	ADD(STG_MSG_MANIFEST, 14);
	m.manifest.manifest = manifest;
	m.manifest.len = sizeof(manifest);
	out[n++] = m;
	ADD(STG_MSG_GET_CHUNK, 15);
	memcpy(m.get_chunk.hash.b, hashes, 16);
	out[n++] = m;
	ADD(STG_MSG_CHUNK, 15);
	m.chunk.obj = object;
	m.chunk.len = sizeof(object);
	out[n++] = m;
	ADD(STG_MSG_STAT, 16);
	out[n++] = m;
	ADD(STG_MSG_STAT_REPLY, 16);
	m.stat_reply = (struct stg_msg_stat_reply){.chunks = 1000, .chunk_bytes = 1 << 30,
						   .segments = 2, .segment_bytes = (1ull << 30) + 8192,
						   .index_bytes = 48000, .uptime_s = 3600,
						   .connections = 5};
	out[n++] = m;
	ADD(STG_MSG_PUT_CHUNK_REF, 17);
	m.put_chunk_ref = (struct stg_msg_put_chunk_ref){.addr = 0x7f0012345000ull,
							 .rkey = 0x1234, .len = 48};
	out[n++] = m;
	ADD(STG_MSG_GET_CHUNK_REF, 18);
	memcpy(m.get_chunk_ref.hash.b, hashes + 16, 16);
	m.get_chunk_ref.addr = 0x7f0012346000ull;
	m.get_chunk_ref.rkey = 0x5678;
	m.get_chunk_ref.cap = 1 << 20;
	out[n++] = m;
	ADD(STG_MSG_CHUNK_REF, 18);
	m.chunk_ref.len = 48;
	out[n++] = m;
	ADD(STG_MSG_LIST_REPLY_FLAGS, 19);
	m.list_reply.count = 2;
	m.list_reply.entries = flagged_body;
	m.list_reply.len = (uint32_t)flagged_len;
	m.list_reply.flagged = true;
	out[n++] = m;
#undef ADD
	return n;
}

/* Decodes one frame at buf; returns its length or 0. */
static size_t decode_frame(const uint8_t *buf, size_t len, struct stg_msg *ret)
{
	struct stg_wire_header h;
	if (len < STG_WIRE_HEADER_SIZE ||
	    stg_wire_header_decode(buf, STG_WIRE_MAX_BODY, &h) < 0 ||
	    len - STG_WIRE_HEADER_SIZE < h.length ||
	    stg_wire_decode(&h, buf + STG_WIRE_HEADER_SIZE, ret) < 0)
		return 0;
	return STG_WIRE_HEADER_SIZE + h.length;
}

/* Version 1: its golden files, as they were, still decode and encode back. */
static void test_golden_and_round_trip(void)
{
	struct stg_msg msgs[STG_MSG_TYPE_MAX];
	size_t n = samples(msgs);
	CHECK_EQ(n, SAMPLED_TYPES);
	for (size_t i = 0; i < n; i++)
		msgs[i].version = 1;
	uint8_t all[8192];
	size_t len = 0, tcp_len = 0, rdma_len = 0;
	for (size_t i = 0; i < n; i++) {
		if (msgs[i].type == STG_MSG_PUT_CHUNK_REF)
			tcp_len = len;
		if (msgs[i].type == STG_MSG_LIST_REPLY_FLAGS) {
			/* A LIST asking for it comes first in its file. */
			struct stg_msg l = msgs[STG_MSG_LIST - 1];
			l.list.flags = STG_LIST_FLAGS;
			l.tag = 19;
			rdma_len = len;
			len += stg_wire_encode(&l, all + len, sizeof(all) - len);
		}
		size_t want = stg_wire_encoded_size(&msgs[i]);
		CHECK(want > 0);
		size_t got = stg_wire_encode(&msgs[i], all + len, sizeof(all) - len);
		CHECK_EQ(got, want);
		/* One byte too few: refused, not truncated. */
		CHECK_EQ(stg_wire_encode(&msgs[i], all + len, want - 1), 0);
		len += got;
	}
	/* The messages of every connection, then those of RDMA connections
	 * only, then the LIST with flags and its reply (each added later in
	 * version 1: the earlier files stay as they were). */
	CHECK(harness_golden("wire-v1.bin", all, tcp_len));
	CHECK(harness_golden("wire-v1-rdma.bin", all + tcp_len, rdma_len - tcp_len));
	CHECK(harness_golden("wire-v1-list-flags.bin", all + rdma_len, len - rdma_len));

	/* Every frame decodes to what was encoded, and encodes back identically. */
	size_t off = 0, frames = 0, flagged_at = 0;
	for (; off < len; frames++) {
		struct stg_msg d;
		size_t fl = decode_frame(all + off, len - off, &d);
		CHECK(fl > 0);
		if (!fl)
			return;
		/* The samples in type order, the LIST with flags before its reply. */
		bool list_flags = d.type == STG_MSG_LIST && d.list.flags == STG_LIST_FLAGS;
		CHECK_EQ(d.type, list_flags ? STG_MSG_LIST : msgs[frames - (frames > n - 1)].type);
		CHECK_EQ(d.tag, msgs[frames - (frames > n - 1)].tag);
		CHECK_EQ(d.version, 1);
		if (d.type == STG_MSG_LIST_REPLY_FLAGS)
			flagged_at = off;
		uint8_t again[1024];
		CHECK_EQ(stg_wire_encode(&d, again, sizeof(again)), fl);
		CHECK(memcmp(again, all + off, fl) == 0);
		off += fl;
	}
	CHECK_EQ(frames, n + 1);

	struct stg_msg d;
	size_t at = 0;
	for (int i = 0; i < STG_MSG_LIST_REPLY - 1; i++)
		at += decode_frame(all + at, len - at, &d);
	CHECK(decode_frame(all + at, len - at, &d) > 0);
	CHECK_EQ(d.type, STG_MSG_LIST_REPLY);
	uint32_t lo = 0;
	struct stg_list_entry e;
	CHECK_EQ(stg_wire_list_next(&d.list_reply, &lo, &e), 1);
	CHECK_EQ(e.version, 3);
	CHECK_EQ(e.new_chunks, 2);
	CHECK(e.path_len == 23 && memcmp(e.path, "/scratch/ckpt/rank0.dat", 23) == 0);
	CHECK_EQ(e.flags, 0);
	CHECK_EQ(stg_wire_list_next(&d.list_reply, &lo, &e), 1);
	CHECK_EQ(e.version, 4);
	CHECK_EQ(stg_wire_list_next(&d.list_reply, &lo, &e), 0);
	/* The same entries with their flags. */
	CHECK(decode_frame(all + flagged_at, len - flagged_at, &d) > 0);
	CHECK(d.type == STG_MSG_LIST_REPLY_FLAGS && d.list_reply.flagged);
	lo = 0;
	CHECK_EQ(stg_wire_list_next(&d.list_reply, &lo, &e), 1);
	CHECK(e.version == 3 && e.new_chunks == 2 && e.path_len == 23);
	CHECK_EQ(e.flags, STG_MANIFEST_PART | STG_MANIFEST_OPEN);
	CHECK_EQ(stg_wire_list_next(&d.list_reply, &lo, &e), 1);
	CHECK(e.version == 4 && e.flags == 0 && e.path_len == 2 && memcmp(e.path, "/a", 2) == 0);
	CHECK_EQ(stg_wire_list_next(&d.list_reply, &lo, &e), 0);
}

static const uint8_t golden_key[STG_SHA256_LEN] = {
	0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a,
	0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5,
};

/* Version 2: every message as the frame an authenticated connection sends,
 * the i-th of its direction, with its MAC; the file pins frames and MACs. */
static void test_golden_v2(void)
{
	struct stg_msg msgs[STG_MSG_TYPE_MAX];
	size_t n = samples(msgs);
	uint8_t all[8192];
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		size_t got = stg_wire_encode(&msgs[i], all + len, sizeof(all) - len);
		CHECK(got > 0);
		CHECK_EQ(all[len + 4], 2);
		/* No room for the MAC: refused, not truncated. */
		CHECK_EQ(stg_wire_seal(all + len, got, got + STG_WIRE_MAC_SIZE - 1, golden_key, i), 0);
		got = stg_wire_seal(all + len, got, sizeof(all) - len, golden_key, i);
		CHECK(got > 0);
		len += got;
	}
	CHECK(harness_golden("wire-v2.bin", all, len));

	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		struct stg_wire_header h;
		CHECK_EQ(stg_wire_header_decode(all + off, STG_WIRE_MAX_BODY, &h), 0);
		CHECK(h.version == 2 && h.flags == STG_WIRE_FLAG_MAC && h.type == msgs[i].type);
		size_t fl = stg_wire_frame_size(&h);
		CHECK_EQ(fl, stg_wire_encoded_size(&msgs[i]) + STG_WIRE_MAC_SIZE);
		const uint8_t *body = all + off + STG_WIRE_HEADER_SIZE;
		uint8_t mac[STG_WIRE_MAC_SIZE];
		stg_wire_frame_mac(golden_key, i, all + off, body, mac);
		CHECK(memcmp(mac, body + h.length, sizeof(mac)) == 0);
		/* As another frame of the stream, or under another key: wrong. */
		stg_wire_frame_mac(golden_key, i + 1, all + off, body, mac);
		CHECK(memcmp(mac, body + h.length, sizeof(mac)) != 0);
		stg_wire_frame_mac(hashes, i, all + off, body, mac);
		CHECK(memcmp(mac, body + h.length, sizeof(mac)) != 0);
		struct stg_msg d;
		CHECK_EQ(stg_wire_decode(&h, body, &d), 0);
		CHECK_EQ(d.version, 2);
		uint8_t again[1024];
		size_t al = stg_wire_encode(&d, again, sizeof(again));
		CHECK_EQ(stg_wire_seal(again, al, sizeof(again), golden_key, i), fl);
		CHECK(memcmp(again, all + off, fl) == 0);
		off += fl;
	}
	CHECK_EQ(off, len);
}

/* What a frame's MAC covers: the header and the body, of a chunk object only
 * its header (the payload is verified against the hash it names). */
static void test_mac_coverage(void)
{
	struct stg_msg msgs[STG_MSG_TYPE_MAX];
	samples(msgs);
	uint8_t f[1024], want[STG_WIRE_MAC_SIZE], mac[STG_WIRE_MAC_SIZE];
	const int types[] = {STG_MSG_LIST, STG_MSG_PUT_CHUNK, STG_MSG_CHUNK, STG_MSG_PUT_MANIFEST};
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		size_t len = stg_wire_encode(&msgs[types[k] - 1], f, sizeof(f));
		len = stg_wire_seal(f, len, sizeof(f), golden_key, 7);
		CHECK(len > 0);
		memcpy(want, f + len - STG_WIRE_MAC_SIZE, sizeof(want));
		uint32_t body = (uint32_t)(len - STG_WIRE_MAC_SIZE - STG_WIRE_HEADER_SIZE);
		uint32_t covered = stg_wire_mac_covered((uint8_t)types[k], body);
		CHECK_EQ(covered, types[k] == STG_MSG_LIST || types[k] == STG_MSG_PUT_MANIFEST
					  ? body : (uint32_t)STG_CHUNK_HEADER_SIZE);
		for (size_t at = 0; at < STG_WIRE_HEADER_SIZE + body; at++) {
			/* (Another length would describe another frame.) */
			if (at >= 8 && at < 12)
				continue;
			f[at] ^= 0x01;
			stg_wire_frame_mac(golden_key, 7, f, f + STG_WIRE_HEADER_SIZE, mac);
			f[at] ^= 0x01;
			int same = memcmp(mac, want, sizeof(mac)) == 0;
			CHECK_EQ(same, at >= STG_WIRE_HEADER_SIZE + covered);
		}
	}
}

static void test_header(void)
{
	uint8_t h[STG_WIRE_HEADER_SIZE];
	struct stg_wire_header d, e = {.type = STG_MSG_OK, .tag = 7};
	stg_wire_header_encode(h, &e);
	CHECK_EQ(stg_wire_header_decode(h, 100, &d), 0);
	CHECK_EQ(d.tag, 7);
	CHECK_EQ(d.version, STG_WIRE_VERSION);
	/* Each field: magic, version, type 0 and past the last, flags, length. */
	uint8_t b[STG_WIRE_HEADER_SIZE];
	memcpy(b, h, sizeof(b));
	b[0] ^= 1;
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), -EPROTO);
	memcpy(b, h, sizeof(b));
	b[4] = 0;
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), -EPROTO);
	b[4] = STG_WIRE_VERSION + 1;
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), -EPROTO);
	b[4] = 1;
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), 0);
	CHECK_EQ(d.version, 1);
	/* The MAC flag: in version 2 only; no other flag. */
	b[6] = STG_WIRE_FLAG_MAC;
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), -EPROTO);
	b[4] = 2;
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), 0);
	CHECK_EQ(d.flags, STG_WIRE_FLAG_MAC);
	CHECK_EQ(stg_wire_frame_size(&d), STG_WIRE_HEADER_SIZE + STG_WIRE_MAC_SIZE);
	b[6] = 2;
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), -EPROTO);
	memcpy(b, h, sizeof(b));
	b[5] = 0;
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), -EPROTO);
	b[5] = STG_MSG_TYPE_MAX + 1;
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), -EPROTO);
	memcpy(b, h, sizeof(b));
	b[7] = 1; /* a flag not defined */
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), -EPROTO);
	e = (struct stg_wire_header){.type = STG_MSG_PUT_CHUNK, .length = 101, .tag = 1};
	stg_wire_header_encode(b, &e);
	CHECK_EQ(stg_wire_header_decode(b, 100, &d), -EPROTO);
	e.length = STG_WIRE_MAX_BODY + 1;
	stg_wire_header_encode(b, &e);
	CHECK_EQ(stg_wire_header_decode(b, UINT32_MAX, &d), -EPROTO);
}

/* Every body shorter or longer than its frame says is refused, and so is
 * every single-byte change that makes a field invalid. */
static void test_bodies(void)
{
	struct stg_msg msgs[STG_MSG_TYPE_MAX];
	size_t n = samples(msgs);
	for (size_t i = 0; i < n; i++) {
		uint8_t buf[1024];
		CHECK(stg_wire_encode(&msgs[i], buf, sizeof(buf)) > 0);
		struct stg_wire_header h;
		CHECK_EQ(stg_wire_header_decode(buf, STG_WIRE_MAX_BODY, &h), 0);
		struct stg_msg d;
		uint8_t *body = buf + STG_WIRE_HEADER_SIZE;
		uint32_t full = h.length;
		int accepted = 0;
		for (uint32_t cut = 0; cut < full; cut++) {
			h.length = cut;
			/* Raw objects (PUT_CHUNK, CHUNK, MANIFEST) are checked by their
			 * own decoders; below their minimum the frame is refused. */
			if (stg_wire_decode(&h, body, &d) == 0)
				accepted++;
		}
		h.length = full;
		if (msgs[i].type == STG_MSG_PUT_CHUNK || msgs[i].type == STG_MSG_CHUNK)
			CHECK_EQ(accepted, (int)(full - 40));
		else if (msgs[i].type == STG_MSG_MANIFEST)
			CHECK_EQ(accepted, (int)full - 1);
		else
			CHECK_EQ(accepted, 0);
	}

	/* Specific fields. */
	uint8_t buf[1024];
	struct stg_msg d;
	struct stg_wire_header h;
#define REENCODE(idx) \
	(stg_wire_encode(&msgs[idx], buf, sizeof(buf)), stg_wire_header_decode(buf, STG_WIRE_MAX_BODY, &h))
	uint8_t *body = buf + STG_WIRE_HEADER_SIZE;
	REENCODE(STG_MSG_ERROR - 1);
	body[0] = 0; /* code 0 */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_ERROR - 1);
	body[6] = '\n'; /* not printable */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_HAVE_REPLY - 1);
	body[4] |= 0x80; /* a bit past count */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_PUT_MANIFEST - 1);
	body[0] = 0; /* keep 0 */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_PUT_MANIFEST - 1);
	body[6] = 1; /* flags */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_PUT_MANIFEST - 1);
	body[16 + 9] = '.'; /* "/scratch/./pt/rank0.dat" */
	body[16 + 10] = '/';
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_LIST - 1);
	body[4] = 'x'; /* a relative prefix */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_GET_MANIFEST - 1);
	body[12 + 3] = '\0';
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_LIST_REPLY - 1);
	body[4] = 0; /* version 0 of the first entry */
	memset(body + 4, 0, 8);
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_LIST_REPLY - 1);
	body[0] = 3; /* count says 3, two are there */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_LIST - 1);
	body[2] = 2; /* a flag not defined */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_LIST_REPLY_FLAGS - 1);
	body[4 + 52] = 4; /* a manifest flag not defined */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_LIST_REPLY_FLAGS - 1);
	body[4 + 56] = 24; /* the first path one byte longer than it is */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_STAT_REPLY - 1);
	body[59] = 1; /* reserved */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_CHALLENGE - 1);
	body[0] = 2; /* min above max */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_PUT_CHUNK_REF - 1);
	body[12] = 39; /* shorter than a chunk header */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_PUT_CHUNK_REF - 1);
	body[15] = 0x40; /* past the largest chunk object */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_GET_CHUNK_REF - 1);
	memset(body + 28, 0, 4); /* no room at all */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	REENCODE(STG_MSG_CHUNK_REF - 1);
	memset(body, 0, 4);
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
#undef REENCODE
}

static void test_paths(void)
{
	const char *good[] = {"/", "/a", "/a/b", "/a.b/..c/...", "/a b/c"};
	const char *bad[] = {"", "a", "/a/", "//a", "/a//b", "/./a", "/a/.", "/a/../b", "/.."};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECK(stg_wire_path_valid(good[i], strlen(good[i])));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(!stg_wire_path_valid(bad[i], strlen(bad[i])));
	CHECK(!stg_wire_path_valid("/a\0b", 4));
	char longp[STG_WIRE_MAX_PATH + 2];
	memset(longp, 'a', sizeof(longp));
	longp[0] = '/';
	CHECK(stg_wire_path_valid(longp, STG_WIRE_MAX_PATH));
	CHECK(!stg_wire_path_valid(longp, STG_WIRE_MAX_PATH + 1));
}

/* A length at its limit is sent and taken; one past it neither. */
static void test_limits(void)
{
	static uint8_t frame[STG_WIRE_HEADER_SIZE + 8192];
	char text[STG_WIRE_MAX_ERROR_TEXT + 1];
	memset(text, 'e', sizeof(text));
	struct stg_msg m = {.type = STG_MSG_ERROR};
	m.error.code = STG_WERR_IO;
	m.error.text = text;
	m.error.text_len = STG_WIRE_MAX_ERROR_TEXT;
	size_t n = stg_wire_encode(&m, frame, sizeof(frame));
	CHECK(n > 0);
	struct stg_wire_header h;
	struct stg_msg back;
	CHECK_EQ(stg_wire_header_decode(frame, STG_WIRE_MAX_BODY, &h), 0);
	CHECK_EQ(stg_wire_decode(&h, frame + STG_WIRE_HEADER_SIZE, &back), 0);
	CHECK_EQ(back.error.text_len, STG_WIRE_MAX_ERROR_TEXT);
	m.error.text_len++;
	CHECK_EQ(stg_wire_encode(&m, frame, sizeof(frame)), 0);
	/* (the same frame made by hand) */
	stg_put_le16(frame + STG_WIRE_HEADER_SIZE + 4, STG_WIRE_MAX_ERROR_TEXT + 1);
	frame[n] = 'e';
	h.length++;
	CHECK_EQ(stg_wire_decode(&h, frame + STG_WIRE_HEADER_SIZE, &back), -EBADMSG);

	char path[STG_WIRE_MAX_PATH + 1];
	memset(path, 'p', sizeof(path));
	path[0] = '/';
	m = (struct stg_msg){.type = STG_MSG_GET_MANIFEST};
	m.get_manifest.path = path;
	m.get_manifest.path_len = STG_WIRE_MAX_PATH;
	n = stg_wire_encode(&m, frame, sizeof(frame));
	CHECK(n > 0);
	CHECK_EQ(stg_wire_header_decode(frame, STG_WIRE_MAX_BODY, &h), 0);
	CHECK_EQ(stg_wire_decode(&h, frame + STG_WIRE_HEADER_SIZE, &back), 0);
	m.get_manifest.path_len++;
	CHECK_EQ(stg_wire_encode(&m, frame, sizeof(frame)), 0);
}

static void test_errors(void)
{
	int errs[] = {-ENOENT, -EBADMSG, -EACCES, -ENOSPC, -EPROTO, -EIO, -EBUSY, -EEXIST};
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		CHECK_EQ(stg_wire_error_to_errno(stg_wire_error_from_errno(errs[i])), errs[i]);
	CHECK_EQ(stg_wire_error_from_errno(-ENOMEM), STG_WERR_IO);
	CHECK_EQ(stg_wire_error_to_errno(99), -EPROTO);
}

/* AUTH_MUNGE: its golden frame; a credential that is empty, too long or not
 * printable ASCII is refused; it passes the pre-authentication limit of a
 * server that takes MUNGE only. */
static void test_auth_munge(void)
{
	static const char cred[] =
		"MUNGE:AwQFAAD1fOLr0wGiTTb1ZJvBjdlz3AMb0TzJ5f6Kk0nUbq1UxUuW2a+Z7r3CwdTHq5o=:";
	struct stg_msg m = {.version = 2, .type = STG_MSG_AUTH_MUNGE, .tag = 0};
	for (size_t i = 0; i < STG_AUTH_NONCE_LEN; i++) {
		m.auth_munge.nonce[i] = (uint8_t)(0x10 + i);
		m.auth_munge.mac[i] = (uint8_t)(0x50 + i);
	}
	m.auth_munge.cred = cred;
	m.auth_munge.cred_len = (uint32_t)strlen(cred);
	uint8_t buf[2048];
	size_t len = stg_wire_encode(&m, buf, sizeof(buf));
	CHECK_EQ(len, STG_WIRE_HEADER_SIZE + 2 * STG_AUTH_MAC_LEN + strlen(cred));
	CHECK(harness_golden("wire-v2-auth-munge.bin", buf, len));
	struct stg_wire_header h;
	CHECK_EQ(stg_wire_header_decode(buf, STG_WIRE_MAX_PREAUTH, &h), -EPROTO);
	CHECK_EQ(stg_wire_header_decode(buf, STG_WIRE_MAX_PREAUTH_MUNGE, &h), 0);
	uint8_t *body = buf + STG_WIRE_HEADER_SIZE;
	struct stg_msg d;
	CHECK_EQ(stg_wire_decode(&h, body, &d), 0);
	CHECK(d.type == STG_MSG_AUTH_MUNGE && d.auth_munge.cred_len == strlen(cred) &&
	      memcmp(d.auth_munge.cred, cred, strlen(cred)) == 0 &&
	      memcmp(d.auth_munge.nonce, m.auth_munge.nonce, STG_AUTH_NONCE_LEN) == 0 &&
	      memcmp(d.auth_munge.mac, m.auth_munge.mac, STG_AUTH_MAC_LEN) == 0);
	CHECK_EQ(strcmp(stg_msg_type_name(STG_MSG_AUTH_MUNGE), "AUTH_MUNGE"), 0);
	/* Not printable: a space, a control character, a byte past ASCII. */
	const uint8_t bad[] = {' ', '\n', 0x80, 0x7f};
	for (size_t i = 0; i < sizeof(bad); i++) {
		uint8_t keep = body[2 * STG_AUTH_MAC_LEN + 6];
		body[2 * STG_AUTH_MAC_LEN + 6] = bad[i];
		CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
		body[2 * STG_AUTH_MAC_LEN + 6] = keep;
	}
	/* No credential at all. */
	h.length = 2 * STG_AUTH_MAC_LEN;
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	/* One too long neither encodes nor decodes. */
	static char longer[STG_WIRE_MAX_MUNGE_CRED + 2];
	memset(longer, 'A', sizeof(longer) - 1);
	m.auth_munge.cred = longer;
	m.auth_munge.cred_len = STG_WIRE_MAX_MUNGE_CRED + 1;
	static uint8_t big[STG_WIRE_HEADER_SIZE + STG_WIRE_MAX_PREAUTH_MUNGE + 64];
	CHECK_EQ(stg_wire_encode(&m, big, sizeof(big)), 0);
	h.length = 2 * STG_AUTH_MAC_LEN + STG_WIRE_MAX_MUNGE_CRED + 1;
	memset(big, 'A', sizeof(big));
	CHECK_EQ(stg_wire_decode(&h, big, &d), -EBADMSG);
}

/* The MUNGE login's frames (MUNGE_HELLO, MUNGE_SERVER, MUNGE_AUTH): their
 * golden file, one after the other; each decodes back, version 1 frames of
 * these types and bodies of the wrong size are refused. */
static void test_munge_kx(void)
{
	static const char cred[] =
		"MUNGE:AwQFAAD1fOLr0wGiTTb1ZJvBjdlz3AMb0TzJ5f6Kk0nUbq1UxUuW2a+Z7r3CwdTHq5o=:";
	struct stg_msg m[3] = {
		{.version = 2, .type = STG_MSG_MUNGE_HELLO, .tag = 0},
		{.version = 2, .type = STG_MSG_MUNGE_SERVER, .tag = 0},
		{.version = 2, .type = STG_MSG_MUNGE_AUTH, .tag = 0},
	};
	for (size_t i = 0; i < 32; i++) {
		m[0].munge_hello.nonce[i] = (uint8_t)(0x10 + i);
		m[0].munge_hello.pub[i] = (uint8_t)(0x30 + i);
		m[1].munge_server.pub[i] = (uint8_t)(0x50 + i);
		m[2].munge_auth.mac[i] = (uint8_t)(0x70 + i);
	}
	m[1].munge_server.cred = m[2].munge_auth.cred = cred;
	m[1].munge_server.cred_len = m[2].munge_auth.cred_len = (uint32_t)strlen(cred);
	static uint8_t all[4096];
	size_t len = 0, at[3];
	for (int i = 0; i < 3; i++) {
		at[i] = len;
		size_t n = stg_wire_encode(&m[i], all + len, sizeof(all) - len);
		CHECK(n > 0);
		len += n;
	}
	CHECK_EQ(at[1], STG_WIRE_HEADER_SIZE + 64);
	CHECK(harness_golden("wire-v2-munge-kx.bin", all, len));
	for (int i = 0; i < 3; i++) {
		struct stg_wire_header h;
		struct stg_msg d;
		CHECK_EQ(stg_wire_header_decode(all + at[i], STG_WIRE_MAX_PREAUTH_MUNGE, &h), 0);
		uint8_t *body = all + at[i] + STG_WIRE_HEADER_SIZE;
		CHECK_EQ(stg_wire_decode(&h, body, &d), 0);
		CHECK_EQ(d.type, m[i].type);
		CHECK_EQ(strcmp(stg_msg_type_name(d.type),
				i == 0 ? "MUNGE_HELLO" : i == 1 ? "MUNGE_SERVER" : "MUNGE_AUTH"), 0);
		if (i == 0)
			CHECK(memcmp(&d.munge_hello, &m[0].munge_hello, sizeof(d.munge_hello)) == 0);
		else if (i == 1)
			CHECK(memcmp(d.munge_server.pub, m[1].munge_server.pub, 32) == 0 &&
			      d.munge_server.cred_len == strlen(cred) &&
			      memcmp(d.munge_server.cred, cred, strlen(cred)) == 0);
		else
			CHECK(memcmp(d.munge_auth.mac, m[2].munge_auth.mac, 32) == 0 &&
			      d.munge_auth.cred_len == strlen(cred) &&
			      memcmp(d.munge_auth.cred, cred, strlen(cred)) == 0);
		/* They exist from version 2 on. */
		h.version = 1;
		CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
		h.version = 2;
		/* A hello one byte short; a credential of nothing. */
		h.length = i == 0 ? 63 : 32;
		CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	}
}

/* DELETE_PATH: its golden file; it decodes back; version 1, an id of 0, an
 * unknown flag or a relative path are refused. */
static void test_delete_path(void)
{
	struct stg_msg m = {.version = 2, .type = STG_MSG_DELETE_PATH, .tag = 9};
	m.delete_path = (struct stg_msg_delete_path){
		.upto = 0x0123456789abcdefull, .at_ns = 1795000000123456789ll, .retain_s = 86400,
		.flags = STG_TOMBSTONE_RENAMED, .path = "/ckpt/step_7/model.bin", .path_len = 22};
	uint8_t buf[256];
	size_t len = stg_wire_encode(&m, buf, sizeof(buf));
	CHECK_EQ(len, STG_WIRE_HEADER_SIZE + 28 + 22);
	CHECK(harness_golden("wire-v2-delete-path.bin", buf, len));
	struct stg_wire_header h;
	struct stg_msg d;
	CHECK_EQ(stg_wire_header_decode(buf, sizeof(buf), &h), 0);
	uint8_t *body = buf + STG_WIRE_HEADER_SIZE;
	CHECK_EQ(stg_wire_decode(&h, body, &d), 0);
	CHECK(d.type == STG_MSG_DELETE_PATH && d.delete_path.upto == m.delete_path.upto &&
	      d.delete_path.at_ns == m.delete_path.at_ns && d.delete_path.retain_s == 86400 &&
	      d.delete_path.flags == STG_TOMBSTONE_RENAMED && d.delete_path.path_len == 22 &&
	      memcmp(d.delete_path.path, "/ckpt/step_7/model.bin", 22) == 0);
	CHECK_EQ(strcmp(stg_msg_type_name(d.type), "DELETE_PATH"), 0);
	h.version = 1;
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	h.version = 2;
	uint8_t bad[128];
	memcpy(bad, body, h.length);
	memset(bad, 0, 8); /* upto 0 */
	CHECK_EQ(stg_wire_decode(&h, bad, &d), -EBADMSG);
	memcpy(bad, body, h.length);
	bad[20] |= 2; /* an unknown flag */
	CHECK_EQ(stg_wire_decode(&h, bad, &d), -EBADMSG);
	memcpy(bad, body, h.length);
	bad[28] = 'c'; /* "ckpt/...": relative */
	CHECK_EQ(stg_wire_decode(&h, bad, &d), -EBADMSG);
	h.length--; /* the path one byte short of its length */
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
}

/* WITHDRAW: its golden file; it decodes back; version 1 and an id of 0 are
 * refused. */
static void test_withdraw(void)
{
	struct stg_msg m = {.version = 2, .type = STG_MSG_WITHDRAW, .tag = 3};
	m.withdraw = (struct stg_msg_withdraw){.version = 0x0000123456700003ull,
					       .manifest_hash = 0x0102030405060708ull,
					       .path = "/ckpt/f", .path_len = 7};
	uint8_t buf[128];
	size_t len = stg_wire_encode(&m, buf, sizeof(buf));
	CHECK_EQ(len, STG_WIRE_HEADER_SIZE + 20 + 7);
	CHECK(harness_golden("wire-v2-withdraw.bin", buf, len));
	struct stg_wire_header h;
	struct stg_msg d;
	CHECK_EQ(stg_wire_header_decode(buf, sizeof(buf), &h), 0);
	uint8_t *body = buf + STG_WIRE_HEADER_SIZE;
	CHECK_EQ(stg_wire_decode(&h, body, &d), 0);
	CHECK(d.type == STG_MSG_WITHDRAW && d.withdraw.version == m.withdraw.version &&
	      d.withdraw.manifest_hash == m.withdraw.manifest_hash && d.withdraw.path_len == 7 &&
	      memcmp(d.withdraw.path, "/ckpt/f", 7) == 0);
	CHECK_EQ(strcmp(stg_msg_type_name(d.type), "WITHDRAW"), 0);
	h.version = 1;
	CHECK_EQ(stg_wire_decode(&h, body, &d), -EBADMSG);
	h.version = 2;
	uint8_t bad[64];
	memcpy(bad, body, h.length);
	memset(bad, 0, 8);
	CHECK_EQ(stg_wire_decode(&h, bad, &d), -EBADMSG);
}

int main(void)
{
	test_golden_and_round_trip();
	test_golden_v2();
	test_mac_coverage();
	test_header();
	test_bodies();
	test_paths();
	test_limits();
	test_errors();
	test_auth_munge();
	test_munge_kx();
	test_delete_path();
	test_withdraw();
	return harness_done();
}
