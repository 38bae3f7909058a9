/* SPDX-License-Identifier: MIT */
/* One client connection: authentication, then requests until it closes. A
 * malformed frame or a failed authentication drops the peer; a request that
 * cannot be served gets an ERROR and the connection goes on. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunk.h"
#include "conn.h"
#include "internal.h"
#include "log.h"
#include "manifest.h"
#include "tombstone.h"
#include "util.h"
#include "wire.h"
#include "version.h"

static int reply(struct session *s, struct stg_msg *m, uint32_t tag)
{
	m->tag = tag;
	return stg_conn_send_msg(&s->conn, m);
}

static int on_have(struct session *s, const struct stg_msg *req)
{
	uint32_t n = req->have.count;
	uint8_t bitmap[(STG_WIRE_MAX_HAVE + 7) / 8];
	uint64_t held = 0;
	memset(bitmap, 0, (n + 7) / 8);
	for (uint32_t i = 0; i < n; i++) {
		struct stg_hash h;
		memcpy(h.b, req->have.hashes + (size_t)i * 16, 16);
		/* Only the user's own chunks (owners.h). Touching keeps a chunk
		 * we say we hold from being collected before the manifest that
		 * needs it arrives. */
		if (stg_owners_has(s->srv->owners, s->uid, &h) &&
		    stg_store_touch(s->srv->store, &h)) {
			bitmap[i / 8] |= (uint8_t)(1u << (i % 8));
			held++;
		}
	}
	s->srv->counters.chunks_held += held; /* one atomic add per request */
	struct stg_msg m = {.type = STG_MSG_HAVE_REPLY};
	m.have_reply.count = n;
	m.have_reply.bitmap = bitmap;
	return reply(s, &m, req->tag);
}

/* Waiting for frame memory, a connection counts as idle: it may be closed
 * to make room for a newcomer (then the wait is given up). The wait is
 * logged once a frame. */
static bool budget_wait(void *arg, bool waiting)
{
	struct stg_conn *c = arg;
	struct session *s = c->admit_arg;
	if (waiting && !s->said_wait) {
		s->said_wait = true;
		stg_log(STG_LOG_INFO, "%s: uid %u waits for frame memory (%zu of %zu MiB in use)",
			c->peer, s->uid, stg_conn_budget_held(&s->srv->frames) >> 20,
			s->srv->frames.limit >> 20);
	}
	return admit_idle(&s->srv->admit, s->slot, waiting);
}

/* Memory of the frame budget for decoding a chunk (besides its frame). */
static int take_frame_memory(struct session *s, size_t n)
{
	return stg_conn_budget_take(&s->srv->frames, s->uid, n, s->srv->timeout_ms, budget_wait,
				    &s->conn);
}

/* The chunk h was stored already, and not by this user: it becomes the
 * user's only if the bytes it sent are the stored ones (store.h,
 * stg_store_same). Returns 0, -EEXIST (they differ) or -errno. */
static int claim(struct session *s, const struct stg_msg *req, const struct stg_hash *h)
{
	const uint8_t *obj = req->put_chunk.obj;
	size_t len = req->put_chunk.len;
	/* Both copies decoded, one after the other: the sent one as a put
	 * decodes it, the stored one through its chain (a base's copy, a
	 * link's record, a filter's buffer aside). */
	size_t raw = stg_get_le32(obj + 8), sent = stg_chunk_decode_memory(obj, len);
	size_t dm = 2 * raw + (sent > 3 * raw ? sent : 3 * raw);
	if (take_frame_memory(s, dm) < 0)
		return -EBUSY;
	int r = stg_store_same(s->srv->store, h, obj, len);
	stg_conn_budget_give(&s->srv->frames, s->uid, dm);
	if (r == 0) {
		char hex[STG_HASH_HEX_LEN + 1];
		stg_hash_hex(h, hex);
		stg_log(STG_LOG_WARN, "%s: uid %u sent chunk %s, whose bytes differ from the "
			"stored copy of that id (an XXH3-128 collision, or the copy is damaged): "
			"refused", s->conn.peer, s->uid, hex);
		return -EEXIST;
	}
	return r < 0 ? r : stg_owners_add(s->srv->owners, s->uid, h);
}

static int on_put_chunk(struct session *s, const struct stg_msg *req)
{
	struct stg_hash h, base;
	/* Decompressing takes memory of the frame budget too: a small frame
	 * may expand to 64 MiB. */
	size_t dm = stg_chunk_decode_memory(req->put_chunk.obj, req->put_chunk.len);
	if (dm && take_frame_memory(s, dm) < 0)
		return stg_conn_send_error(&s->conn, req->tag, -EBUSY, "the server's frame memory "
					   "is in use: try again later");
	int r = stg_store_validate(req->put_chunk.obj, req->put_chunk.len, &h);
	if (dm)
		stg_conn_budget_give(&s->srv->frames, s->uid, dm);
	if (r < 0) {
		stg_log(STG_LOG_WARN, "%s: rejected a chunk that fails verification",
			s->conn.peer);
		return stg_conn_send_error(&s->conn, req->tag, -EBADMSG,
					   "chunk object fails verification");
	}
	/* A delta against a chunk the user may not see would reveal it (the
	 * delta of a copy decodes to the base): refused as if it were absent. */
	bool delta = stg_chunk_base(req->put_chunk.obj, req->put_chunk.len, &base);
	if (delta && !stg_owners_has(s->srv->owners, s->uid, &base))
		r = -ENOLINK;
	/* A delta object is decoded with its base to be checked: memory again. */
	else if (dm && delta && take_frame_memory(s, dm) < 0)
		return stg_conn_send_error(&s->conn, req->tag, -EBUSY, "the server's frame memory "
					   "is in use: try again later");
	else {
		r = stg_store_put(s->srv->store, req->put_chunk.obj, req->put_chunk.len, &h);
		if (dm && delta)
			stg_conn_budget_give(&s->srv->frames, s->uid, dm);
	}
	if (r == 0)
		r = stg_owners_add(s->srv->owners, s->uid, &h);
	else if (r == 1 && !stg_owners_has(s->srv->owners, s->uid, &h))
		r = claim(s, req, &h);
	else if (r == 1)
		r = 0;
	if (r == -EEXIST)
		return stg_conn_send_error(&s->conn, req->tag, -EEXIST, "another chunk with this "
					   "id is stored here (a hash collision)");
	if (r == -EBUSY)
		return stg_conn_send_error(&s->conn, req->tag, -EBUSY, "the server's frame memory "
					   "is in use: try again later");
	if (r == -ENOENT) /* collected between the put and the comparison */
		return stg_conn_send_error(&s->conn, req->tag, -EBUSY, "the chunk was collected "
					   "while it was stored: try again");
	if (r == -ENOLINK) {
		char hex[STG_HASH_HEX_LEN + 1];
		stg_hash_hex(&base, hex);
		return stg_conn_send_error(&s->conn, req->tag, -ENOENT, "the delta's base chunk "
					   "%s is not stored here", hex);
	}
	if (r == -EBADMSG) {
		stg_log(STG_LOG_WARN, "%s: rejected a delta object that does not decode with "
			"its base", s->conn.peer);
		return stg_conn_send_error(&s->conn, req->tag, -EBADMSG,
					   "chunk object fails verification");
	}
	if (r == -ESTALE)
		return stg_conn_send_error(&s->conn, req->tag, -EBUSY, "the delta's base changed "
					   "while it was read: try again");
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "storing a chunk from %s", s->conn.peer);
		return stg_conn_send_error(&s->conn, req->tag, r, "cannot store the chunk: %s",
					   strerror(-r));
	}
	s->srv->counters.chunks_in++;
	s->srv->counters.chunk_bytes_in += req->put_chunk.len;
	struct stg_msg m = {.type = STG_MSG_OK};
	return reply(s, &m, req->tag);
}

static bool held(const uint8_t *map, uint32_t i)
{
	return map[i / 8] & (1u << (i % 8));
}

/* Checks the chunks the manifest says this server holds; lists the absent
 * ones in missing (nchunks entries). Returns how many are absent. */
static uint32_t find_missing(struct session *s, const struct stg_manifest *mf, const uint8_t *map,
			     uint8_t *missing)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < mf->nchunks; i++) {
		if (!held(map, i))
			continue;
		/* A chunk counts as held only if it is the user's own. */
		const struct stg_hash *h = &mf->entries[i].hash;
		if (!stg_owners_has(s->srv->owners, s->uid, h) || !stg_store_touch(s->srv->store, h))
			stg_put_le32(missing + 4 * (size_t)n++, i);
	}
	return n;
}

static int on_put_manifest(struct session *s, const struct stg_msg *req)
{
	const struct stg_msg_put_manifest *p = &req->put_manifest;
	struct stg_manifest mf;
	int r = stg_manifest_decode(p->manifest, p->manifest_len, &mf);
	if (r == -EPROTONOSUPPORT)
		return stg_conn_send_error(&s->conn, req->tag, -EBADMSG,
					   "a manifest format newer than this server reads (%u)",
					   STG_MANIFEST_FORMAT);
	if (r < 0)
		return stg_conn_send_error(&s->conn, req->tag, -EBADMSG, "malformed manifest");
	if (p->held_len != (mf.nchunks + 7) / 8) {
		r = stg_conn_send_error(&s->conn, req->tag, -EBADMSG,
					"held bitmap of %u bytes for %u chunks", p->held_len,
					mf.nchunks);
		goto out;
	}
	for (uint32_t i = mf.nchunks; i < p->held_len * 8u; i++)
		if (held(p->held, i)) {
			r = stg_conn_send_error(&s->conn, req->tag, -EBADMSG,
						"held bit past the last chunk");
			goto out;
		}
	for (uint32_t i = 0; i < mf.nchunks; i++)
		if (held(p->held, i) && (mf.entries[i].flags & STG_ENTRY_ZERO)) {
			r = stg_conn_send_error(&s->conn, req->tag, -EBADMSG,
						"chunk %u is a hole and cannot be held", i);
			goto out;
		}
	char path[STG_WIRE_MAX_PATH + 1];
	memcpy(path, p->path, p->path_len);
	path[p->path_len] = '\0';

	uint8_t *missing = malloc(4 * (size_t)mf.nchunks + 1);
	if (!missing) {
		r = stg_conn_send_error(&s->conn, req->tag, -ENOMEM, "out of memory");
		goto out;
	}
	pthread_rwlock_rdlock(&s->srv->manifest_lock);
	uint32_t nmissing = find_missing(s, &mf, p->held, missing);
	int removed = 0;
	if (nmissing == 0) {
		/* The chunks are durable before the manifest that names them;
		 * an older server must refuse a store holding one it cannot read. */
		r = stg_store_sync(s->srv->store);
		if (r == 0 && mf.chunking == STG_CHUNKING_CDC)
			r = stg_store_require_format(s->srv->store, 2);
		if (r == 0)
			removed = stg_files_put(s->srv->files, s->uid, path, p->manifest,
						p->manifest_len, mf.version, p->keep, p->held);
		else
			removed = r;
	}
	pthread_rwlock_unlock(&s->srv->manifest_lock);
	if (nmissing > 0) {
		struct stg_msg m = {.type = STG_MSG_MISSING};
		m.missing.count = nmissing;
		m.missing.entries = missing;
		r = reply(s, &m, req->tag);
	} else if (removed < 0) {
		/* A held id is refused as EXIST: the client re-mints its version
		 * (docs/FORMAT.md, "Version ids"), so it is no failure here. */
		stg_log_errno(removed == -EEXIST ? STG_LOG_WARN : STG_LOG_ERROR, removed,
			      "storing version %llu of '%s' (uid %u)",
			      (unsigned long long)stg_version_seq(mf.version), path, s->uid);
		r = stg_conn_send_error(&s->conn, req->tag, removed, "cannot store the manifest: %s",
					removed == -EEXIST ? "another version is held under its id"
							   : strerror(-removed));
	} else {
		stg_log(STG_LOG_INFO, "%s: version %llu of '%s' (uid %u)%s", s->conn.peer,
			(unsigned long long)stg_version_seq(mf.version), path, s->uid,
			removed > 0 ? ", older versions retired" : "");
		if (removed > 0)
			server_collector_wake(s->srv);
		s->srv->counters.manifests_in++;
		struct stg_msg m = {.type = STG_MSG_OK};
		r = reply(s, &m, req->tag);
	}
	free(missing);
out:
	stg_manifest_done(&mf);
	return r;
}

struct list_state {
	uint8_t *buf;
	size_t cap, len;
	uint32_t count;
	bool flagged; /* a LIST_REPLY_FLAGS */
};

static int list_one(void *arg, const char *path, const struct stg_manifest *m, bool deleted)
{
	struct list_state *ls = arg;
	struct stg_list_entry e = {
		.version = m->version,
		.size = m->size,
		.mtime_ns = m->mtime_ns,
		.commit_ns = m->commit_ns,
		.mode = m->mode,
		.nchunks = m->nchunks,
		.new_chunks = stg_manifest_new_chunks(m),
		.stored = stg_manifest_stored_bytes(m),
		.flags = m->flags | (deleted ? STG_LIST_ENTRY_DELETED : 0),
		.path = path,
		.path_len = (uint32_t)strlen(path),
	};
	for (;;) {
		int r = stg_wire_list_add(ls->buf, ls->cap, &ls->len, &e, ls->flagged);
		if (r != -ENOSPC)
			return r;
		if (ls->cap * 2 > STG_WIRE_MAX_BODY - 4)
			return -E2BIG;
		if (STG_GROW(ls->buf, ls->cap, ls->cap * 2) < 0)
			return -ENOMEM;
	}
}

static int on_list(struct session *s, const struct stg_msg *req)
{
	char prefix[STG_WIRE_MAX_PATH + 1];
	memcpy(prefix, req->list.prefix, req->list.prefix_len);
	prefix[req->list.prefix_len] = '\0';
	struct list_state ls = {.cap = 64 << 10, .flagged = req->list.flags & STG_LIST_FLAGS};
	ls.buf = malloc(ls.cap);
	if (!ls.buf)
		return stg_conn_send_error(&s->conn, req->tag, -ENOMEM, "out of memory");
	int r = stg_files_list(s->srv->files, s->uid, prefix, req->list.flags & STG_LIST_DELETED,
			       list_one, &ls);
	if (r < 0) {
		free(ls.buf);
		return stg_conn_send_error(&s->conn, req->tag, r, "cannot list: %s",
					   strerror(-r));
	}
	uint32_t off = 0, count = 0;
	struct stg_msg m = {.type = ls.flagged ? STG_MSG_LIST_REPLY_FLAGS : STG_MSG_LIST_REPLY};
	m.list_reply.entries = ls.buf;
	m.list_reply.len = (uint32_t)ls.len;
	m.list_reply.flagged = ls.flagged;
	struct stg_list_entry e;
	while (stg_wire_list_next(&m.list_reply, &off, &e))
		count++;
	m.list_reply.count = count;
	r = reply(s, &m, req->tag);
	free(ls.buf);
	return r;
}

static int on_get_manifest(struct session *s, const struct stg_msg *req)
{
	char path[STG_WIRE_MAX_PATH + 1];
	memcpy(path, req->get_manifest.path, req->get_manifest.path_len);
	path[req->get_manifest.path_len] = '\0';
	uint8_t *mf;
	size_t len;
	int r = stg_files_get(s->srv->files, s->uid, path, req->get_manifest.version, &mf, &len);
	if (r < 0)
		return stg_conn_send_error(&s->conn, req->tag, r, "no version %llu of '%s': %s",
					   (unsigned long long)stg_version_seq(req->get_manifest.version), path,
					   strerror(-r));
	struct stg_msg m = {.type = STG_MSG_MANIFEST};
	m.manifest.manifest = mf;
	m.manifest.len = (uint32_t)len;
	r = reply(s, &m, req->tag);
	free(mf);
	return r;
}

static int on_get_chunk(struct session *s, const struct stg_msg *req)
{
	struct stg_store_obj o;
	const struct stg_hash *h = &req->get_chunk.hash;
	struct stg_hash base;
	/* Another user's chunk is absent for this one, as on HAVE. */
	int r = stg_owners_has(s->srv->owners, s->uid, h) ? stg_store_get(s->srv->store, h, &o)
							   : -ENOENT;
	/* A delta goes as it is only to a user who may see its base. */
	if (r == 0 && stg_chunk_base(o.obj, o.len, &base) &&
	    !stg_owners_has(s->srv->owners, s->uid, &base)) {
		stg_store_obj_free(&o);
		r = stg_store_get_whole(s->srv->store, h, &o);
	}
	if (r < 0) {
		char hex[STG_HASH_HEX_LEN + 1];
		stg_hash_hex(&req->get_chunk.hash, hex);
		if (r == -EBADMSG)
			stg_log(STG_LOG_ERROR, "stored copy of chunk %s is corrupt", hex);
		return stg_conn_send_error(&s->conn, req->tag, r, "chunk %s: %s", hex,
					   strerror(-r));
	}
	/* The object goes as it is, without a copy into a frame buffer. */
	r = stg_conn_send_bulk(&s->conn, STG_MSG_CHUNK, req->tag, o.obj, (uint32_t)o.len);
	if (r == 0) {
		s->srv->counters.chunks_out++;
		s->srv->counters.chunk_bytes_out += o.len;
	}
	stg_store_obj_free(&o);
	return r;
}

static int on_delete_path(struct session *s, const struct stg_msg *req)
{
	const struct stg_msg_delete_path *d = &req->delete_path;
	char path[STG_WIRE_MAX_PATH + 1];
	memcpy(path, d->path, d->path_len);
	path[d->path_len] = '\0';
	struct stg_tombstone t = {.upto = d->upto, .at_ns = d->at_ns, .retain_s = d->retain_s,
				  .flags = d->flags};
	pthread_rwlock_rdlock(&s->srv->manifest_lock);
	int r = stg_files_delete(s->srv->files, s->uid, path, &t);
	pthread_rwlock_unlock(&s->srv->manifest_lock);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "recording the deletion of '%s' (uid %u)", path,
			      s->uid);
		return stg_conn_send_error(&s->conn, req->tag, r, "cannot record the deletion: %s",
					   strerror(-r));
	}
	stg_log(STG_LOG_INFO, "%s: '%s' (uid %u) %s up to version %llu, kept %u s",
		s->conn.peer, path, s->uid, d->flags & STG_TOMBSTONE_RENAMED ? "renamed away"
									    : "deleted",
		(unsigned long long)stg_version_seq(d->upto), d->retain_s);
	/* A deletion kept 0 s goes with the next collection: run it soon. */
	if (d->retain_s == 0)
		server_collector_wake(s->srv);
	struct stg_msg m = {.type = STG_MSG_OK};
	return reply(s, &m, req->tag);
}

static int on_withdraw(struct session *s, const struct stg_msg *req)
{
	const struct stg_msg_withdraw *w = &req->withdraw;
	char path[STG_WIRE_MAX_PATH + 1];
	memcpy(path, w->path, w->path_len);
	path[w->path_len] = '\0';
	pthread_rwlock_rdlock(&s->srv->manifest_lock);
	int r = stg_files_withdraw(s->srv->files, s->uid, path, w->version, w->manifest_hash);
	pthread_rwlock_unlock(&s->srv->manifest_lock);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "withdrawing version %llu of '%s' (uid %u)",
			      (unsigned long long)stg_version_seq(w->version), path, s->uid);
		return stg_conn_send_error(&s->conn, req->tag, r, "cannot withdraw the version: %s",
					   strerror(-r));
	}
	if (r > 0) {
		stg_log(STG_LOG_INFO, "%s: version %llu of '%s' (uid %u) withdrawn: its node "
			"ships it under another id", s->conn.peer,
			(unsigned long long)stg_version_seq(w->version), path, s->uid);
	}
	struct stg_msg m = {.type = STG_MSG_OK};
	return reply(s, &m, req->tag);
}

static int on_stat(struct session *s, const struct stg_msg *req)
{
	struct stg_store_stats st;
	stg_store_stats(s->srv->store, &st);
	struct stg_msg m = {.type = STG_MSG_STAT_REPLY};
	m.stat_reply.chunks = st.chunks;
	m.stat_reply.chunk_bytes = st.chunk_bytes;
	m.stat_reply.segments = st.segments;
	m.stat_reply.segment_bytes = st.segment_bytes;
	m.stat_reply.index_bytes = st.index_bytes;
	m.stat_reply.uptime_s = (uint64_t)((stg_now_ns() - s->srv->started_ns) / 1000000000);
	m.stat_reply.connections = admit_connections(&s->srv->admit);
	return reply(s, &m, req->tag);
}

static int handle(struct session *s, const struct stg_msg *m)
{
	switch (m->type) {
	case STG_MSG_HAVE: return on_have(s, m);
	case STG_MSG_PUT_CHUNK: return on_put_chunk(s, m);
	case STG_MSG_PUT_MANIFEST: return on_put_manifest(s, m);
	case STG_MSG_LIST: return on_list(s, m);
	case STG_MSG_GET_MANIFEST: return on_get_manifest(s, m);
	case STG_MSG_GET_CHUNK: return on_get_chunk(s, m);
	case STG_MSG_STAT: return on_stat(s, m);
	case STG_MSG_DELETE_PATH: return on_delete_path(s, m);
	case STG_MSG_WITHDRAW: return on_withdraw(s, m);
	default:
		stg_log(STG_LOG_WARN, "%s: dropped: %s is not a request", s->conn.peer,
			stg_msg_type_name(m->type));
		stg_conn_send_error(&s->conn, m->tag, -EPROTO, "%s is not a request",
				    stg_msg_type_name(m->type));
		return -EPROTO;
	}
}

/* Serves one request, counted for the metrics. */
static int dispatch(struct session *s, const struct stg_msg *m)
{
	int64_t start = stg_now_ns();
	uint64_t errors = s->conn.errors_sent;
	int r = handle(s, m);
	struct server_counters *k = &s->srv->counters;
	k->requests++;
	k->request_ns += (uint64_t)(stg_now_ns() - start);
	if (r < 0 || s->conn.errors_sent != errors)
		k->request_errors++;
	return r;
}

/* The client took longer than --handshake-timeout to log in: told BUSY. */
static void login_expired(struct session *s)
{
	char what[400];
	snprintf(what, sizeof(what), "%s: logging in took longer than %d s", s->conn.peer,
		 s->srv->handshake_ms / 1000);
	admit_refused(what);
	stg_conn_send_error(&s->conn, 0, -EBUSY, "logging in took longer than %d s",
			    s->srv->handshake_ms / 1000);
}

static int admit_uid(struct stg_conn *c, uint32_t uid, char *why, size_t whylen)
{
	struct session *s = c->admit_arg;
	return admit_login(&s->srv->admit, s->slot, uid, why, whylen);
}

struct session *session_new(struct server *srv, const struct stg_conn *c, int slot)
{
	struct session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->srv = srv;
	s->conn = *c;
	s->slot = slot;
	s->state = SESSION_NEW;
	s->conn.budget = &srv->frames;
	s->conn.budget_wait = budget_wait;
	s->conn.admit_uid = admit_uid;
	s->conn.admit_arg = s;
	return s;
}

void session_free(struct session *s)
{
	/* A last ERROR still queued goes if the client takes it at once. */
	if (s->conn.t)
		stg_conn_flush(&s->conn);
	admit_release(&s->srv->admit, s->slot);
	stg_conn_close(&s->conn);
	free(s);
}

/* Logs in, with the client's answer to the challenge (r: how receiving it
 * went): a short deadline for each step, so that strangers hold their slot
 * briefly. A client refused for being one too many (or too slow) is told
 * BUSY, and tries again later. Returns 0 or -errno. */
static int login(struct session *s, int r, const struct stg_msg *answer)
{
	struct server *srv = s->srv;
	s->conn.timeout_ms = srv->handshake_ms;
	if (r == 0)
		r = stg_conn_auth_answer(&s->conn, &srv->secret, srv->accept_v1, &s->challenge,
					 answer, &s->uid);
	else
		stg_conn_refuse_preauth(&s->conn, r);
	s->conn.timeout_ms = srv->timeout_ms;
	if (r == 0) {
		if (s->conn.version < STG_WIRE_VERSION)
			stg_log(STG_LOG_WARN, "%s: uid %u speaks protocol version %u: its frames "
				"carry no MAC", s->conn.peer, s->uid, s->conn.version);
		stg_log(STG_LOG_DEBUG, "%s: authenticated as uid %u", s->conn.peer, s->uid);
		s->conn.budget_uid = s->uid;
		return 0;
	}
	if (r == -EBUSY)
		return r;
	if (admit_evicted(&srv->admit, s->slot)) {
		stg_conn_send_error(&s->conn, 0, -EBUSY, "too many connections logging in");
		return -EBUSY;
	}
	if (r == -ETIMEDOUT)
		return login_expired(s), r;
	if (s->conn.error[0])
		stg_log(STG_LOG_WARN, "%s: dropped: authentication failed: %s", s->conn.peer,
			s->conn.error);
	else
		stg_log_errno(STG_LOG_WARN, r, "%s: dropped: authentication failed", s->conn.peer);
	return r;
}

/* A receive failed: says why in the log, and to the client where it may
 * learn it, before the connection closes. */
static void receive_failed(struct session *s, int r)
{
	if (r == -EPIPE)
		return;
	if (r == -ECANCELED) {
		stg_log(STG_LOG_DEBUG, "%s: closed while it waited for frame memory, for "
			"a new connection", s->conn.peer);
	} else if (r == -ENOBUFS) {
		if (s->conn.error[0])
			stg_log(STG_LOG_WARN, "%s: dropped: uid %u: %s", s->conn.peer, s->uid,
				s->conn.error);
		else
			stg_log(STG_LOG_WARN, "%s: dropped: uid %u: its frame waited %d s for "
				"memory (--frame-memory is in use)", s->conn.peer, s->uid,
				s->srv->timeout_ms / 1000);
		stg_conn_send_error(&s->conn, 0, -EBUSY, "the server's frame memory is in "
				    "use: try again later");
		stg_conn_skip(&s->conn);
	} else if (r == -EPROTO || r == -EBADMSG || r == -EBADE) {
		/* The peer learns why, before the close. */
		stg_log(STG_LOG_WARN, "%s: dropped: %s", s->conn.peer, s->conn.error);
		stg_conn_send_error(&s->conn, 0, -EPROTO, "refused: %s", s->conn.error);
	} else {
		stg_log_errno(STG_LOG_WARN, r, "%s: dropped", s->conn.peer);
	}
}

/* Requests served in one turn before the connection waits its turn again,
 * so that a client streaming requests does not keep a thread to itself. */
#define TURN_REQUESTS 32

/* How long a frame that has begun may wait in its loop: until its deadline
 * (--timeout from its start), and while it holds memory of the budget, no
 * longer than the next check of its rate. */
static int64_t frame_wait_until(struct session *s)
{
	int64_t until = s->frame_deadline_ms;
	if (stg_conn_holds_large_frame(&s->conn) &&
	    until - stg_monotonic_ms() > STG_CONN_RATE_CHECK_MS)
		until = stg_monotonic_ms() + STG_CONN_RATE_CHECK_MS;
	return until;
}

/* Receives what has arrived, without waiting for more, and serves each
 * request complete. */
static enum session_next serve(struct session *s)
{
	for (int n = 0; n < TURN_REQUESTS; n++) {
		if (s->state != SESSION_FRAME) {
			s->said_wait = false;
			s->conn.error[0] = '\0';
		}
		struct stg_msg m;
		int r = stg_conn_try_recv(&s->conn, STG_WIRE_MAX_BODY, &m);
		if (r == -EAGAIN && !stg_conn_receiving(&s->conn)) {
			s->state = SESSION_IDLE;
			return SESSION_WAIT;
		}
		if (r == -EAGAIN) {
			/* Its frame waits in the loop for the rest, holding no
			 * thread. */
			if (s->state != SESSION_FRAME) {
				s->state = SESSION_FRAME;
				s->frame_deadline_ms = stg_monotonic_ms() + s->srv->timeout_ms;
			}
			s->deadline_ms = frame_wait_until(s);
			return SESSION_WAIT;
		}
		s->state = SESSION_IDLE;
		if (r < 0) {
			receive_failed(s, r);
			return SESSION_CLOSE;
		}
		if (dispatch(s, &m) < 0)
			return SESSION_CLOSE;
		if (stg_conn_sending(&s->conn)) {
			/* The client reads its reply before the next request is
			 * taken in; meanwhile the session waits in the loop. */
			s->state = SESSION_REPLY;
			s->frame_deadline_ms = stg_monotonic_ms() + s->srv->timeout_ms;
			s->deadline_ms = s->frame_deadline_ms;
			return SESSION_WAIT;
		}
	}
	return SESSION_AGAIN;
}

/* Sends what the client takes of its reply. Returns 0 (all of it),
 * -EAGAIN, or -errno (said in the log). */
static int send_reply(struct session *s)
{
	int r = stg_conn_flush(&s->conn);
	if (r < 0 && r != -EAGAIN)
		stg_log_errno(STG_LOG_WARN, r, "%s: dropped", s->conn.peer);
	return r;
}

/* The session waits for its next request: an idle client may sit between
 * requests for --idle-timeout. Idle, its slot may be taken for a newcomer,
 * and it holds no buffer. */
static enum session_next wait_idle(struct session *s)
{
	admit_idle(&s->srv->admit, s->slot, true);
	stg_conn_rest(&s->conn);
	s->deadline_ms = stg_monotonic_ms() + s->srv->idle_ms;
	return SESSION_WAIT;
}

enum session_next session_step(struct session *s)
{
	struct server *srv = s->srv;
	switch (s->state) {
	case SESSION_NEW:
		s->conn.timeout_ms = srv->handshake_ms;
		if (stg_conn_auth_challenge(&s->conn, &s->challenge) < 0)
			return SESSION_CLOSE;
		s->conn.timeout_ms = srv->timeout_ms;
		s->state = SESSION_LOGIN;
		s->deadline_ms = stg_monotonic_ms() + srv->handshake_ms;
		return SESSION_WAIT;
	case SESSION_LOGIN: {
		/* The answer is taken in as it arrives, holding no thread
		 * between its pieces, until the deadline set with the
		 * challenge. */
		struct stg_msg m;
		int r = stg_conn_try_recv(&s->conn, STG_WIRE_MAX_PREAUTH_MUNGE, &m);
		if (r == -EAGAIN)
			return SESSION_WAIT;
		if (login(s, r, &m) < 0)
			return SESSION_CLOSE;
		stg_conn_queue_replies(&s->conn);
		s->state = SESSION_IDLE;
		return wait_idle(s);
	}
	case SESSION_REPLY: {
		int r = send_reply(s);
		if (r == -EAGAIN)
			return SESSION_WAIT;
		if (r < 0)
			return SESSION_CLOSE;
		s->state = SESSION_IDLE;
		break;
	}
	case SESSION_IDLE:
		/* (A request that came just as the slot was taken is dropped
		 * with the connection: a client resends a request on a new
		 * connection when a reused one was closed under it.) */
		if (admit_idle(&srv->admit, s->slot, false)) {
			stg_log(STG_LOG_DEBUG, "%s: closed, idle, for a new connection",
				s->conn.peer);
			return SESSION_CLOSE;
		}
		break;
	case SESSION_FRAME:
		break;
	}
	enum session_next next = serve(s);
	return next == SESSION_WAIT && s->state == SESSION_IDLE ? wait_idle(s) : next;
}

enum session_next session_expired(struct session *s)
{
	switch (s->state) {
	case SESSION_LOGIN:
		login_expired(s);
		break;
	case SESSION_FRAME:
		if (stg_conn_too_slow(&s->conn)) {
			receive_failed(s, -ENOBUFS);
			break;
		}
		if (stg_monotonic_ms() < s->frame_deadline_ms) {
			/* Only its rate was due for a check. */
			s->deadline_ms = frame_wait_until(s);
			return SESSION_WAIT;
		}
		receive_failed(s, -ETIMEDOUT);
		break;
	case SESSION_REPLY:
		stg_log(STG_LOG_WARN, "%s: dropped: uid %u did not read its reply for %d s",
			s->conn.peer, s->uid, s->srv->timeout_ms / 1000);
		break;
	case SESSION_NEW:
	case SESSION_IDLE:
		stg_log(STG_LOG_DEBUG, "%s: closed after %d s idle", s->conn.peer,
			s->srv->idle_ms / 1000);
		break;
	}
	return SESSION_CLOSE;
}
