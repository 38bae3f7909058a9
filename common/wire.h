/* SPDX-License-Identifier: MIT */
/* The wire protocol between flushers, tools and staging servers: framing and
 * the encoding and validation of every message (docs/PROTOCOL.md). No I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "hash.h"
#include "kx.h"

#define STG_WIRE_MAGIC "SHWP"
/* The version this build speaks, and the oldest whose frames it decodes. */
#define STG_WIRE_VERSION 2
#define STG_WIRE_VERSION_OLDEST 1
#define STG_WIRE_HEADER_SIZE 16
/* Header flags (version 2): a MAC of STG_WIRE_MAC_SIZE bytes follows the body. */
#define STG_WIRE_FLAG_MAC 1u
#define STG_WIRE_MAC_SIZE 32
/* A frame body holds at most one chunk object of the largest chunk size. */
#define STG_WIRE_MAX_BODY ((64u << 20) + (1u << 20))
/* Before authentication, nothing longer than an AUTH is accepted, or with
 * MUNGE taken, a message carrying a credential. */
#define STG_WIRE_MAX_PREAUTH 128
#define STG_WIRE_MAX_MUNGE_CRED 960
#define STG_WIRE_MAX_PREAUTH_MUNGE (2 * STG_AUTH_MAC_LEN + STG_WIRE_MAX_MUNGE_CRED)
#define STG_WIRE_MAX_PATH 4095
#define STG_WIRE_MAX_HAVE 8192
#define STG_WIRE_MAX_ERROR_TEXT 512

/* The message types, each described once in common/wire.def. */
enum stg_msg_type {
#define MSG(type, number, ...) STG_MSG_##type = number,
#include "wire.def"
#undef MSG
};
#define STG_MSG_TYPE_MAX 28

/* Error codes carried by ERROR (stable on the wire, unlike errno values). */
enum stg_wire_error {
	STG_WERR_NOENT = 1,  /* no such path, version or chunk */
	STG_WERR_BADMSG = 2, /* the request or its data is malformed or corrupt */
	STG_WERR_ACCES = 3,  /* authentication failed */
	STG_WERR_NOSPC = 4,  /* the store is full */
	STG_WERR_PROTO = 5,  /* a message not valid at this point */
	STG_WERR_IO = 6,     /* the server failed to read or write its store */
	STG_WERR_BUSY = 7,   /* too many connections */
	STG_WERR_EXIST = 8,  /* another version is held under the manifest's id */
};
#define STG_WERR_MAX 8

struct stg_wire_header {
	uint8_t version;
	uint8_t type;
	uint16_t flags;  /* STG_WIRE_FLAG_* */
	uint32_t length; /* of the body */
	uint32_t tag;    /* chosen by the requester, echoed in the reply */
};

struct stg_msg_challenge {
	uint16_t min_version, max_version;
	uint8_t nonce[STG_AUTH_NONCE_LEN];
};

struct stg_msg_auth {
	uint32_t uid;
	uint8_t nonce[STG_AUTH_NONCE_LEN];
	uint8_t mac[STG_AUTH_MAC_LEN];
};

/* The uid is the credential's: munge_encode of server_nonce[32] || key[32],
 * where key stands for the uid key of AUTH (docs/PROTOCOL.md). */
struct stg_msg_auth_munge {
	uint8_t nonce[STG_AUTH_NONCE_LEN];
	uint8_t mac[STG_AUTH_MAC_LEN];
	const char *cred; /* not NUL-terminated; printable ASCII */
	uint32_t cred_len;
};

struct stg_msg_munge_hello {
	uint8_t nonce[STG_AUTH_NONCE_LEN];
	uint8_t pub[STG_KX_PUB_LEN]; /* X25519 */
};

/* A MUNGE credential of the server's uid, whose payload is the handshake's
 * transcript (docs/PROTOCOL.md). */
struct stg_msg_munge_server {
	uint8_t pub[STG_KX_PUB_LEN];
	const char *cred; /* not NUL-terminated; printable ASCII */
	uint32_t cred_len;
};

/* A MUNGE credential of the client's uid, restricted to the server's, whose
 * payload is the transcript; mac proves the exchange's key. */
struct stg_msg_munge_auth {
	uint8_t mac[STG_AUTH_MAC_LEN];
	const char *cred;
	uint32_t cred_len;
};

struct stg_msg_auth_ok {
	uint8_t mac[STG_AUTH_MAC_LEN];
};

struct stg_msg_error {
	uint32_t code;   /* enum stg_wire_error */
	const char *text; /* not NUL-terminated; printable ASCII */
	uint32_t text_len;
};

struct stg_msg_have {
	uint32_t count;
	const uint8_t *hashes; /* count x 16 bytes */
};

struct stg_msg_have_reply {
	uint32_t count;
	const uint8_t *bitmap; /* bit i (LSB first) set: hash i is held */
};

struct stg_msg_put_chunk {
	const uint8_t *obj; /* a chunk object: SHCK header + payload */
	uint32_t len;
};

struct stg_msg_put_manifest {
	uint32_t keep;           /* versions the server keeps of this path */
	const char *path;        /* absolute, normalized, not NUL-terminated */
	uint32_t path_len;
	const uint8_t *manifest; /* an SHMF manifest (validated separately) */
	uint32_t manifest_len;
	const uint8_t *held;     /* bit i set: entry i's chunk is on this server */
	uint32_t held_len;       /* bytes of the bitmap */
};

struct stg_msg_missing {
	uint32_t count;
	const uint8_t *entries; /* count x u32 LE: manifest entry indexes */
};

/* LIST flags. */
#define STG_LIST_FLAGS 1u   /* answer with LIST_REPLY_FLAGS */
#define STG_LIST_DELETED 2u /* with FLAGS: deleted versions too, flagged so */

/* A LIST_REPLY_FLAGS entry's flag (beside the manifest's): the version's
 * path was deleted (DELETE_PATH); it stays restorable for its retention.
 * Only in a reply to a LIST with STG_LIST_DELETED. */
#define STG_LIST_ENTRY_DELETED (1u << 31)

struct stg_msg_list {
	const char *prefix; /* empty (all) or starting with '/' */
	uint32_t prefix_len;
	uint16_t flags;     /* 0, STG_LIST_FLAGS, or both */
};

/* One version in a LIST_REPLY. */
struct stg_list_entry {
	uint64_t version;
	uint64_t size;
	int64_t mtime_ns;
	int64_t commit_ns;
	uint32_t mode;
	uint32_t nchunks;
	uint32_t new_chunks; /* chunks this version added */
	uint64_t stored; /* bytes of the chunks this version added */
	uint32_t flags;  /* the manifest's (enum stg_manifest_flags) and
			  * STG_LIST_ENTRY_DELETED; 0 in a LIST_REPLY */
	const char *path;
	uint32_t path_len;
};

/* LIST_REPLY and LIST_REPLY_FLAGS. */
struct stg_msg_list_reply {
	uint32_t count;
	const uint8_t *entries; /* walk with stg_wire_list_next */
	uint32_t len;
	bool flagged;           /* a LIST_REPLY_FLAGS: the entries carry flags */
};

struct stg_msg_get_manifest {
	uint64_t version; /* 0: the newest */
	const char *path;
	uint32_t path_len;
};

struct stg_msg_manifest {
	const uint8_t *manifest;
	uint32_t len;
};

struct stg_msg_withdraw {
	uint64_t version;       /* the id (not 0) */
	uint64_t manifest_hash; /* XXH3-64 of the manifest as it was shipped */
	const char *path;
	uint32_t path_len;
};

struct stg_msg_delete_path {
	uint64_t upto;     /* the newest version id deleted (not 0) */
	int64_t at_ns;     /* when */
	uint32_t retain_s; /* restorable this long after (keep_deleted) */
	uint32_t flags;    /* STG_TOMBSTONE_* */
	const char *path;
	uint32_t path_len;
};

struct stg_msg_get_chunk {
	struct stg_hash hash;
};

struct stg_msg_chunk {
	const uint8_t *obj;
	uint32_t len;
};

/* A region of the requester's registered memory, valid for this request. */
struct stg_msg_put_chunk_ref {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len; /* of the chunk object there */
};

struct stg_msg_get_chunk_ref {
	struct stg_hash hash;
	uint64_t addr;
	uint32_t rkey;
	uint32_t cap; /* bytes the object may take there */
};

struct stg_msg_chunk_ref {
	uint32_t len; /* of the object written to the GET_CHUNK_REF's region */
};

struct stg_msg_stat_reply {
	uint64_t chunks, chunk_bytes;
	uint64_t segments, segment_bytes;
	uint64_t index_bytes;
	uint64_t uptime_s;
	uint32_t connections;
};

/* A decoded message; pointers refer into the body it was decoded from. */
struct stg_msg {
	uint8_t version; /* of its frame; 0 encodes as STG_WIRE_VERSION */
	uint8_t type;
	uint32_t tag;
	union {
		struct stg_msg_challenge challenge;
		struct stg_msg_auth auth;
		struct stg_msg_auth_ok auth_ok;
		struct stg_msg_auth_munge auth_munge;
		struct stg_msg_munge_hello munge_hello;
		struct stg_msg_munge_server munge_server;
		struct stg_msg_munge_auth munge_auth;
		struct stg_msg_error error;
		struct stg_msg_have have;
		struct stg_msg_have_reply have_reply;
		struct stg_msg_put_chunk put_chunk;
		struct stg_msg_put_manifest put_manifest;
		struct stg_msg_missing missing;
		struct stg_msg_list list;
		struct stg_msg_list_reply list_reply;
		struct stg_msg_get_manifest get_manifest;
		struct stg_msg_delete_path delete_path;
		struct stg_msg_withdraw withdraw;
		struct stg_msg_manifest manifest;
		struct stg_msg_get_chunk get_chunk;
		struct stg_msg_chunk chunk;
		struct stg_msg_stat_reply stat_reply;
		struct stg_msg_put_chunk_ref put_chunk_ref;
		struct stg_msg_get_chunk_ref get_chunk_ref;
		struct stg_msg_chunk_ref chunk_ref;
	};
};

const char *stg_msg_type_name(uint8_t type);

/* Writes a frame header (STG_WIRE_HEADER_SIZE bytes); version 0 is
 * STG_WIRE_VERSION. */
void stg_wire_header_encode(uint8_t *out, const struct stg_wire_header *h);

/* Validates a frame header: magic, a version this build decodes, known type,
 * flags defined for that version, length within max_body. Returns 0 or
 * -EPROTO. */
int stg_wire_header_decode(const uint8_t *buf, uint32_t max_body, struct stg_wire_header *ret);

/* The bytes of the whole frame a header starts: header, body and MAC. */
size_t stg_wire_frame_size(const struct stg_wire_header *h);

/* The body bytes a frame's MAC covers: all of them, except in PUT_CHUNK and
 * CHUNK, whose payload is verified by the content hash that the object's
 * header (covered) names. */
uint32_t stg_wire_mac_covered(uint8_t type, uint32_t length);

/* The MAC of a version-2 frame, sent or received as the seq-th of its
 * direction: HMAC-SHA256(key, seq as u64 LE || header || covered body).
 * hdr is the frame's header as sent (with STG_WIRE_FLAG_MAC), body its body.
 * Returns 0 or stg_hmac_sha256's error. */
int stg_wire_frame_mac(const uint8_t key[STG_SHA256_LEN], uint64_t seq, const uint8_t *hdr,
		       const uint8_t *body, uint8_t out[STG_WIRE_MAC_SIZE]);

/* Turns an encoded version-2 frame of len bytes, in a buffer of cap, into one
 * that carries its MAC. Returns the new length, or 0 when it does not fit
 * (or its MAC could not be made). */
size_t stg_wire_seal(uint8_t *frame, size_t len, size_t cap, const uint8_t key[STG_SHA256_LEN],
		     uint64_t seq);

/* Validates a body of the type the header names, field by field, and points
 * ret's members into it. Returns 0 or -EBADMSG. */
int stg_wire_decode(const struct stg_wire_header *h, const uint8_t *body, struct stg_msg *ret);

/* Encodes a whole frame (header and body, no MAC) of msg->type, in
 * msg->version, into out, which holds cap bytes. Returns the frame's length,
 * or 0 when it does not fit (or msg is not encodable as given). LIST_REPLY is
 * built with stg_wire_list_add. */
size_t stg_wire_encode(const struct stg_msg *msg, uint8_t *out, size_t cap);

/* The frame length stg_wire_encode needs for msg. */
size_t stg_wire_encoded_size(const struct stg_msg *msg);

/* Appends one entry to a LIST_REPLY body (a LIST_REPLY_FLAGS one when
 * flagged: e->flags is sent) being built in out (cap bytes, *len used).
 * Returns 0, or -ENOSPC when it does not fit. */
int stg_wire_list_add(uint8_t *out, size_t cap, size_t *len, const struct stg_list_entry *e,
		      bool flagged);

/* Walks a validated LIST_REPLY or LIST_REPLY_FLAGS: *off starts at 0.
 * Returns 1 with *ret filled, 0 at the end. */
int stg_wire_list_next(const struct stg_msg_list_reply *r, uint32_t *off, struct stg_list_entry *ret);

/* Is s (len bytes) an absolute, normalized path without NUL bytes: no empty,
 * "." or ".." component, no trailing slash? */
bool stg_wire_path_valid(const char *s, size_t len);

/* enum stg_wire_error <-> -errno. */
uint32_t stg_wire_error_from_errno(int negerr);
int stg_wire_error_to_errno(uint32_t code);
