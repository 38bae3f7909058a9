/* SPDX-License-Identifier: MIT */
/* Talking to the staging servers from the tools: list, fetch manifests, and
 * rebuild files from chunks fetched in parallel with failover. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunk.h"
#include "remote.h"
#include "tool.h"
#include "util.h"
#include "version.h"
#include "thread.h"

#define FETCH_THREADS 4

int remote_init(struct remote *rm, const struct stg_policy *p)
{
	memset(rm, 0, sizeof(*rm));
	rm->policy = p;
	rm->uid = (uint32_t)getuid();
	rm->timeout_ms = (int)p->timeout_s * 1000;
	char err[512];
	int r = stg_secret_from_policy(p, &rm->secret, err, sizeof(err));
	if (r < 0)
		tool_error("%s", err);
	return r;
}

void remote_session_init(struct remote_session *s, struct remote *rm)
{
	memset(s, 0, sizeof(*s));
	s->rm = rm;
}

void remote_session_done(struct remote_session *s)
{
	for (size_t i = 0; i < s->rm->policy->nservers; i++)
		if (s->open[i])
			stg_conn_close(&s->conns[i]);
}

static void report_down(struct remote *rm, size_t i, int r, const char *detail)
{
	if (atomic_exchange(&rm->reported[i], true))
		return;
	tool_error("server %s: %s%s%s", rm->policy->server_list[i], strerror(-r),
		   detail && *detail ? ": " : "", detail ? detail : "");
}

struct stg_conn *remote_conn(struct remote_session *s, size_t i)
{
	struct remote *rm = s->rm;
	if (s->open[i])
		return &s->conns[i];
	if (atomic_load(&rm->down[i]))
		return NULL;
	char why[sizeof(s->why_not_rdma[i])];
	s->conns[i].error[0] = '\0';
	int r = stg_conn_login(rm->policy->server_list[i], rm->policy->transport, rm->timeout_ms,
			       &rm->secret, rm->uid, &s->conns[i], why, sizeof(why));
	snprintf(s->why_not_rdma[i], sizeof(s->why_not_rdma[i]), "%s", why);
	if (r < 0)
		report_down(rm, i, r, s->conns[i].error[0] ? s->conns[i].error : why);
	if (r < 0) {
		s->err[i] = r;
		atomic_store(&rm->down[i], true);
		return NULL;
	}
	s->open[i] = true;
	return &s->conns[i];
}

int remote_call(struct remote_session *s, size_t i, struct stg_msg *req, uint8_t want,
		size_t pool, struct stg_msg *ret)
{
	bool reused = s->open[i];
	int64_t deadline = stg_monotonic_ms() + s->rm->timeout_ms;
	for (int tries = 0;; tries++) {
		struct stg_conn *c = remote_conn(s, i);
		if (!c)
			return s->err[i] ? s->err[i] : -ECONNRESET;
		/* Where a chunk object may land: the connection's pool. */
		int r = pool ? stg_conn_pool(c, pool, STG_POOL_RECEIVE) : 0;
		if (r == 0)
			r = stg_conn_call(c, req, want, ret);
		if (r != -EPIPE && r != -ECONNRESET)
			return r;
		stg_conn_close(c);
		s->open[i] = false;
		/* A connection that served before may have been closed by the
		 * server meanwhile (idle too long): a new one at once. A new one
		 * closed before it answered made room for others (a user holding
		 * more than its share of the connections): again after a pause,
		 * as after BUSY, while there is time. */
		if (!reused) {
			int ms = stg_conn_pause_ms(tries);
			if (stg_monotonic_ms() + ms >= deadline)
				return r;
			usleep((useconds_t)ms * 1000);
		}
		reused = false;
	}
}

void remote_fail(struct remote_session *s, size_t i, int r)
{
	/* An answer ("no such chunk", "my copy is corrupt") leaves the
	 * connection usable; anything else means the stream or server is gone. */
	if (r == -ENOENT || r == -EBADMSG || r == -EIO || r == -ENOSPC)
		return;
	/* The server's last word, or what was wrong with what it sent. */
	char why[sizeof(s->conns[i].error)] = "";
	if (s->open[i]) {
		snprintf(why, sizeof(why), "%s", s->conns[i].error);
		stg_conn_close(&s->conns[i]);
		s->open[i] = false;
	}
	report_down(s->rm, i, r, why);
	atomic_store(&s->rm->down[i], true);
}

void remote_list_free(struct remote_version *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].path);
	free(v);
}

static int cmp_versions(const void *a, const void *b)
{
	const struct remote_version *x = a, *y = b;
	int c = strcmp(x->path, y->path);
	if (c)
		return c;
	return x->e.version < y->e.version ? -1 : x->e.version > y->e.version;
}

static bool is_open_whole(const struct remote_version *v)
{
	return (v->e.flags & (STG_MANIFEST_OPEN | STG_MANIFEST_PART)) == STG_MANIFEST_OPEN;
}

/* What a server holding every copy keeps (stg_catalog_prune's rule): an open
 * whole version goes once a closed version is newer, or a newer whole one
 * took its number. A server that missed the newer one (down when it
 * shipped, or outside its placement) still lists the open one; it is no
 * version of the path. v is merged and sorted; returns the count left. */
static size_t drop_superseded(struct remote_version *v, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		bool go = false;
		for (size_t j = i + 1; is_open_whole(&v[i]) && !go && j < n &&
				       strcmp(v[j].path, v[i].path) == 0;
		     j++)
			go = !(v[j].e.flags & STG_MANIFEST_OPEN) ||
			     (!(v[j].e.flags & STG_MANIFEST_PART) &&
			      stg_version_seq(v[j].e.version) == stg_version_seq(v[i].e.version));
		if (go)
			free(v[i].path);
		else
			v[k++] = v[i];
	}
	return k;
}

/* One server's listing, by a thread of its own: all servers at once. */
struct server_listing {
	struct remote_session *s;
	size_t i;
	const char *prefix;
	bool deleted_too;
	struct remote_version *v;
	size_t n;
	bool reached;
	int r; /* -ENOMEM; a server that cannot answer is no error */
};

static void *list_server(void *arg)
{
	struct server_listing *l = arg;
	struct remote_session *s = l->s;
	size_t i = l->i, cap = 0;
	if (!remote_conn(s, i))
		return NULL;
	struct stg_msg req = {.type = STG_MSG_LIST}, rep;
	req.list.prefix = l->prefix ? l->prefix : "";
	req.list.prefix_len = l->prefix ? (uint32_t)strlen(l->prefix) : 0;
	req.list.flags = STG_LIST_FLAGS | (l->deleted_too ? STG_LIST_DELETED : 0);
	int cr = remote_call(s, i, &req, STG_MSG_LIST_REPLY_FLAGS, 0, &rep);
	if (cr == -EPROTO && l->deleted_too) {
		/* A server older than deletions drops the connection on
		 * DELETED: list again without (it deleted nothing). */
		stg_conn_close(&s->conns[i]);
		s->open[i] = false;
		req.list.flags = STG_LIST_FLAGS;
		cr = remote_call(s, i, &req, STG_MSG_LIST_REPLY_FLAGS, 0, &rep);
	}
	if (cr == -EPROTO) {
		/* A server older than LIST_REPLY_FLAGS drops the connection
		 * on the flag: list again without (it holds no parts, which
		 * it refuses, so its versions are whole). */
		stg_conn_close(&s->conns[i]);
		s->open[i] = false;
		req.list.flags = 0;
		cr = remote_call(s, i, &req, STG_MSG_LIST_REPLY, 0, &rep);
	}
	if (cr < 0) {
		remote_fail(s, i, cr);
		return NULL;
	}
	l->reached = true;
	uint32_t off = 0;
	struct stg_list_entry e;
	while (stg_wire_list_next(&rep.list_reply, &off, &e)) {
		if (STG_GROW(l->v, cap, l->n + 1) < 0) {
			l->r = -ENOMEM;
			break;
		}
		l->v[l->n].path = strndup(e.path, e.path_len);
		if (!l->v[l->n].path) {
			l->r = -ENOMEM;
			break;
		}
		l->v[l->n].e = e;
		l->v[l->n].servers = 1ull << i;
		l->n++;
	}
	return NULL;
}

int remote_list(struct remote *rm, const char *prefix, bool deleted_too,
		struct remote_version **ret, size_t *ret_n, size_t *ret_reached)
{
	struct remote_session s;
	remote_session_init(&s, rm);
	size_t ns = rm->policy->nservers;
	struct server_listing l[STG_CLUSTER_MAX_SERVERS];
	pthread_t th[STG_CLUSTER_MAX_SERVERS];
	bool started[STG_CLUSTER_MAX_SERVERS];
	for (size_t i = 0; i < ns; i++) {
		l[i] = (struct server_listing){.s = &s, .i = i, .prefix = prefix,
					       .deleted_too = deleted_too};
		started[i] = ns > 1 && stg_thread_start(&th[i], NULL, list_server, &l[i]) == 0;
		if (!started[i])
			list_server(&l[i]);
	}
	struct remote_version *v = NULL;
	size_t n = 0, total = 0, reached = 0;
	int r = 0;
	for (size_t i = 0; i < ns; i++) {
		if (started[i])
			pthread_join(th[i], NULL);
		total += l[i].n;
		reached += l[i].reached;
		if (l[i].r < 0)
			r = l[i].r;
	}
	if (r == 0 && total && !(v = malloc(total * sizeof(*v))))
		r = -ENOMEM;
	for (size_t i = 0; i < ns; i++) {
		if (r == 0) {
			if (l[i].n)
				memcpy(v + n, l[i].v, l[i].n * sizeof(*v));
			n += l[i].n;
			free(l[i].v);
		} else {
			remote_list_free(l[i].v, l[i].n);
		}
	}
	remote_session_done(&s);
	if (r < 0) {
		remote_list_free(v, n);
		return r;
	}
	/* Merge the copies of each version. */
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_versions);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (k > 0 && cmp_versions(&v[k - 1], &v[i]) == 0) {
			struct remote_version *kept = &v[k - 1];
			/* Deleted on one server: deleted (the others learn it
			 * next, or missed it while down). */
			uint32_t deleted = (kept->e.flags | v[i].e.flags) & STG_LIST_ENTRY_DELETED;
			v[i].e.flags |= deleted;
			kept->e.flags |= deleted;
			if (!is_open_whole(kept) == !is_open_whole(&v[i])) {
				kept->servers |= v[i].servers;
			} else if (is_open_whole(kept)) {
				/* A closed version under an open one's id
				 * supersedes it: its copies alone count. */
				uint64_t servers = v[i].servers;
				kept->e = v[i].e;
				kept->servers = servers;
			}
			free(v[i].path);
			continue;
		}
		v[k++] = v[i];
	}
	k = drop_superseded(v, k);
	for (size_t i = 0; i < k; i++) {
		v[i].e.path = v[i].path;
		v[i].e.path_len = (uint32_t)strlen(v[i].path);
	}
	*ret = v;
	*ret_n = k;
	*ret_reached = reached;
	return 0;
}

/* remote_get_manifest over the connections of s. */
static int get_manifest(struct remote_session *s, const char *path, uint64_t version,
			uint64_t mask, struct stg_manifest *ret)
{
	struct remote *rm = s->rm;
	size_t n = rm->policy->nservers;
	uint32_t order[STG_CLUSTER_MAX_SERVERS];
	stg_placement_rank(rm->policy->server_list, n, path, strlen(path), order);
	int r = -ENOENT;
	for (size_t k = 0; k < n; k++) {
		size_t i = order[k];
		if (mask && !(mask & (1ull << i)))
			continue;
		if (!remote_conn(s, i))
			continue;
		struct stg_msg req = {.type = STG_MSG_GET_MANIFEST}, rep;
		req.get_manifest.version = version;
		req.get_manifest.path = path;
		req.get_manifest.path_len = (uint32_t)strlen(path);
		int cr = remote_call(s, i, &req, STG_MSG_MANIFEST, 0, &rep);
		if (cr < 0) {
			remote_fail(s, i, cr);
			if (cr != -ENOENT)
				r = cr;
			continue;
		}
		cr = stg_manifest_decode(rep.manifest.manifest, rep.manifest.len, ret);
		if (cr == 0 && version && ret->version != version) {
			stg_manifest_done(ret);
			cr = -EBADMSG;
		}
		if (cr < 0) {
			tool_error("server %s: the manifest of '%s' it sent is corrupt; trying the "
				   "next",
				   rm->policy->server_list[i], path);
			r = cr;
			continue;
		}
		r = 0;
		break;
	}
	return r;
}

int remote_get_manifest(struct remote *rm, const char *path, uint64_t version, uint64_t mask,
			struct stg_manifest *ret)
{
	struct remote_session s;
	remote_session_init(&s, rm);
	int r = get_manifest(&s, path, version, mask, ret);
	remote_session_done(&s);
	return r;
}

ssize_t remote_get_parts(struct remote_session *s, const char *path, uint64_t version,
			 uint64_t mask, struct stg_manifest **ret)
{
	size_t nservers = s->rm->policy->nservers, n = 0;
	struct stg_manifest *v = calloc(nservers, sizeof(*v));
	int r = v ? -ENOENT : -ENOMEM;
	for (size_t i = 0; v && i < nservers; i++) {
		if (!(mask & (1ull << i)))
			continue;
		struct stg_manifest m;
		int gr = get_manifest(s, path, version, 1ull << i, &m);
		if (gr < 0) {
			r = r == -ENOENT ? gr : r;
			continue;
		}
		bool seen = false;
		for (size_t k = 0; k < n && !seen; k++)
			seen = stg_part_equal(v[k].part, m.part);
		if (seen)
			stg_manifest_done(&m);
		else
			v[n++] = m;
	}
	if (n == 0) {
		free(v);
		return r;
	}
	*ret = v;
	return (ssize_t)n;
}

struct fetch {
	struct remote *rm;
	const char *path;
	const struct stg_manifest *m;
	int fd;
	atomic_uint_fast64_t next;
	atomic_uint_fast64_t done_bytes;
	atomic_int failed; /* 0, or the first -errno */
	atomic_uint_fast64_t failed_chunk;
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *arg;
};

/* Decodes obj, a delta object of entry e that server srv sent, into out:
 * its chain of bases is fetched from the same server (the flusher places a
 * delta with its base), then decoded root first. */
static int decode_delta(struct remote_session *s, size_t srv, const uint8_t *obj, size_t len,
			const struct stg_manifest_entry *e, uint8_t *out)
{
	uint8_t *objs[STG_CHUNK_DELTA_DEPTH + 1];
	size_t lens[STG_CHUNK_DELTA_DEPTH + 1];
	struct stg_hash hashes[STG_CHUNK_DELTA_DEPTH + 1], base;
	unsigned n = 0;
	int r = 0;
	const uint8_t *next = obj;
	size_t next_len = len;
	hashes[0] = e->hash;
	for (;;) {
		/* The connection's buffer is reused by the next call: a copy. */
		if (!(objs[n] = malloc(next_len))) {
			r = -ENOMEM;
			break;
		}
		memcpy(objs[n], next, next_len);
		lens[n++] = next_len;
		if (!stg_chunk_base(objs[n - 1], lens[n - 1], &base))
			break;
		if (n == STG_CHUNK_DELTA_DEPTH + 1) {
			r = -EBADMSG; /* deeper than servers keep them */
			break;
		}
		struct stg_msg req = {.type = STG_MSG_GET_CHUNK}, rep;
		req.get_chunk.hash = base;
		r = remote_call(s, srv, &req, STG_MSG_CHUNK,
				stg_chunk_bound(e->raw_len) + STG_CHUNK_BASE_SIZE, &rep);
		if (r < 0)
			break;
		hashes[n] = base;
		next = rep.chunk.obj;
		next_len = rep.chunk.len;
	}
	uint8_t *tmp = r == 0 ? malloc(e->raw_len) : NULL;
	if (r == 0 && !tmp)
		r = -ENOMEM;
	if (r == 0)
		r = stg_chunk_decode(objs[n - 1], lens[n - 1], &hashes[n - 1], e->raw_len, out);
	for (unsigned i = n - 1; i-- > 0 && r == 0;) {
		memcpy(tmp, out, e->raw_len);
		r = stg_chunk_decode_delta(objs[i], lens[i], &hashes[i], e->raw_len, tmp, out);
	}
	free(tmp);
	for (unsigned i = 0; i < n; i++)
		free(objs[i]);
	return r;
}

/* Fetches chunk i from the first replica with a good copy; *ret_data points
 * at its bytes (in buf, or in the connection's buffer until its next use). */
static int fetch_chunk(struct fetch *f, struct remote_session *s, uint64_t i, uint8_t *buf,
		       const uint8_t **ret_data)
{
	const struct stg_manifest_entry *e = &f->m->entries[i];
	size_t n = f->rm->policy->nservers;
	uint32_t order[STG_CLUSTER_MAX_SERVERS];
	/* Where the flusher put it first (every server is asked in the end). */
	const struct stg_path_rule *rule = stg_policy_match(f->rm->policy, f->path);
	uint8_t slot[STG_PLACEMENT_SLOT_KEY_LEN];
	bool by_slot = rule && rule->delta && f->m->chunking == STG_CHUNKING_FIXED;
	if (by_slot)
		stg_placement_slot_key(f->path, i, slot);
	stg_placement_rank(f->rm->policy->server_list, n, by_slot ? slot : e->hash.b,
			   by_slot ? sizeof(slot) : sizeof(e->hash.b), order);
	int r = -ENOENT;
	for (size_t k = 0; k < n; k++) {
		size_t srv = order[k];
		if (!remote_conn(s, srv))
			continue;
		struct stg_msg req = {.type = STG_MSG_GET_CHUNK}, rep;
		req.get_chunk.hash = e->hash;
		/* A server may hold it encoded otherwise than the cache did
		 * (zstd, a delta): any size an object of it can have. */
		int cr = remote_call(s, srv, &req, STG_MSG_CHUNK,
				     stg_chunk_bound(e->raw_len) + STG_CHUNK_BASE_SIZE, &rep);
		if (cr == 0)
			cr = stg_chunk_decode_view(rep.chunk.obj, rep.chunk.len, &e->hash, e->raw_len,
						   buf, ret_data);
		if (cr == -ENOLINK) {
			cr = decode_delta(s, srv, rep.chunk.obj, rep.chunk.len, e, buf);
			if (cr == 0)
				*ret_data = buf;
		}
		if (cr == 0)
			return 0;
		if (cr == -EBADMSG) {
			char hex[STG_HASH_HEX_LEN + 1];
			stg_hash_hex(&e->hash, hex);
			tool_error("server %s: its copy of chunk %llu of '%s' (%s) is corrupt; "
				   "using another replica",
				   f->rm->policy->server_list[srv], (unsigned long long)i, f->path,
				   hex);
			r = -EBADMSG;
		}
		remote_fail(s, srv, cr);
	}
	return r;
}

static void *fetch_worker(void *arg)
{
	struct fetch *f = arg;
	struct remote_session s;
	remote_session_init(&s, f->rm);
	uint8_t *buf = malloc(f->m->chunk_max);
	if (!buf) {
		int zero = 0;
		atomic_compare_exchange_strong(&f->failed, &zero, -ENOMEM);
	}
	while (buf && atomic_load(&f->failed) == 0) {
		uint64_t i = atomic_fetch_add(&f->next, 1);
		if (i >= f->m->nchunks)
			break;
		const struct stg_manifest_entry *e = &f->m->entries[i];
		int r = 0;
		if (!(e->flags & STG_ENTRY_ZERO)) {
			const uint8_t *data;
			r = fetch_chunk(f, &s, i, buf, &data);
			off_t off = (off_t)e->at;
			if (r == 0)
				r = stg_pwrite_all(f->fd, data, e->raw_len, off);
			/* Start the write-back now, so that the final fsync finds
			 * little left to do: the disk works while we fetch. */
			if (r == 0)
				sync_file_range(f->fd, off, e->raw_len, SYNC_FILE_RANGE_WRITE);
		}
		if (r < 0) {
			int zero = 0;
			if (atomic_compare_exchange_strong(&f->failed, &zero, r))
				atomic_store(&f->failed_chunk, i);
			break;
		}
		atomic_fetch_add(&f->done_bytes, e->raw_len);
	}
	free(buf);
	remote_session_done(&s);
	return NULL;
}

int remote_materialize(struct remote *rm, const char *path, const struct stg_manifest *m,
		       int fd, void (*progress)(void *arg, uint64_t done, uint64_t total),
		       void *arg, uint64_t *ret_chunk)
{
	if (ftruncate(fd, (off_t)m->size) < 0)
		return -errno;
	struct fetch f = {.rm = rm, .path = path, .m = m, .fd = fd, .progress = progress,
			  .arg = arg};
	pthread_t threads[FETCH_THREADS];
	size_t started = 0;
	size_t want = m->nchunks < FETCH_THREADS ? (m->nchunks ? m->nchunks : 1) : FETCH_THREADS;
	for (; started < want; started++)
		if (stg_thread_start(&threads[started], NULL, fetch_worker, &f) != 0)
			break;
	if (started == 0)
		fetch_worker(&f);
	/* Progress from here while the workers fetch. */
	while (progress && started) {
		uint64_t done = atomic_load(&f.done_bytes);
		progress(arg, done, m->size);
		if (done >= m->size || atomic_load(&f.failed) ||
		    atomic_load(&f.next) >= m->nchunks + started)
			break;
		usleep(100000);
	}
	for (size_t i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	if (progress && !atomic_load(&f.failed))
		progress(arg, m->size, m->size);
	*ret_chunk = atomic_load(&f.failed_chunk);
	return atomic_load(&f.failed);
}

int remote_fetch_chunk(struct remote_session *s, const char *path, const struct stg_manifest *m,
		       uint32_t i, uint8_t *buf)
{
	struct fetch f = {.rm = s->rm, .path = path, .m = m};
	const uint8_t *data;
	int r = fetch_chunk(&f, s, i, buf, &data);
	if (r == 0 && data != buf)
		memcpy(buf, data, m->entries[i].raw_len);
	return r;
}
