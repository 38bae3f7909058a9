/* SPDX-License-Identifier: MIT */
/* Ships one version: places each distinct chunk on `replicas` servers by
 * rendezvous hashing of its id and the manifest on the path's `replicas`
 * owners plus every server holding one of its chunks (each server's
 * collector must know what its chunks are for), then hands each server its
 * job. A server that fails drops out and the placement is made again over
 * the others, so replicas are re-chosen and what already arrived is not sent
 * twice. A server holding another node's version under the id (both minted
 * it in the same millisecond) refuses it: the version gets a new id in the
 * cache and is shipped again under it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cancel.h"
#include "catalog.h"
#include "gc.h"
#include "internal.h"
#include "log.h"
#include "placement.h"
#include "queue.h"
#include "util.h"
#include "version.h"

/* New ids one version may take in a row before it waits for the next pass. */
#define REMINT_MAX 8

struct placement {
	struct job jobs[STG_CLUSTER_MAX_SERVERS];
	struct job *active[STG_CLUSTER_MAX_SERVERS];
};

static void placement_done(struct placement *pl, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(pl->jobs[i].held);
}

/* Ranks the available servers for key and returns how many there are. */
static size_t rank_available(struct flusher *fl, const void *key, size_t keylen, int64_t now,
			     uint32_t *out)
{
	uint32_t order[STG_CLUSTER_MAX_SERVERS];
	stg_placement_rank(fl->policy->server_list, fl->nservers, key, keylen, order);
	size_t k = 0;
	for (size_t i = 0; i < fl->nservers; i++)
		if (server_available(&fl->servers[order[i]], now))
			out[k++] = order[i];
	return k;
}

/* Builds the jobs; -EAGAIN when fewer than `replicas` servers are available.
 * by_slot: chunks are placed by their place in the path, not their content
 * (delta = xor: a delta goes where its base is). */
static int place(struct flusher *fl, const char *path, const struct stg_manifest *m,
		 bool by_slot, struct placement *pl)
{
	uint32_t replicas = fl->policy->replicas;
	int64_t now = stg_now_ns();
	uint32_t order[STG_CLUSTER_MAX_SERVERS];
	memset(pl, 0, sizeof(*pl));
	size_t bytes = (m->nchunks + 7) / 8 + 1;
	for (size_t i = 0; i < fl->nservers; i++) {
		pl->jobs[i].held = calloc(1, bytes);
		if (!pl->jobs[i].held)
			return -ENOMEM;
	}
	if (rank_available(fl, path, strlen(path), now, order) < replicas)
		return -EAGAIN;
	for (uint32_t r = 0; r < replicas; r++)
		pl->active[order[r]] = &pl->jobs[order[r]];
	for (uint32_t c = 0; c < m->nchunks; c++) {
		const struct stg_manifest_entry *e = &m->entries[c];
		if (e->flags & STG_ENTRY_ZERO)
			continue;
		uint8_t slot[STG_PLACEMENT_SLOT_KEY_LEN];
		if (by_slot)
			stg_placement_slot_key(path, c, slot);
		rank_available(fl, by_slot ? slot : e->hash.b,
			       by_slot ? sizeof(slot) : sizeof(e->hash.b), now, order);
		for (uint32_t r = 0; r < replicas; r++) {
			struct job *j = &pl->jobs[order[r]];
			j->held[c / 8] |= (uint8_t)(1u << (c % 8));
			j->nheld++;
			pl->active[order[r]] = j;
		}
	}
	return 0;
}

static int read_version(struct flusher *fl, const char *id, uint64_t version, int *ret_dirfd,
			char *path, size_t pathlen, struct stg_manifest *m)
{
	int dirfd = openat(fl->cache->files_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	int r = stg_catalog_read_path(dirfd, path, pathlen);
	if (r == 0)
		r = stg_catalog_read(dirfd, version, m);
	else
		path[0] = '\0'; /* (which tells the two failures apart) */
	if (r < 0) {
		close(dirfd);
		return r;
	}
	*ret_dirfd = dirfd;
	return 0;
}

/* The version of the path before version (its deltas' base): 0, or -ENOENT
 * when the cache holds none. */
static int read_base(int dirfd, uint64_t version, struct stg_manifest *ret)
{
	uint64_t *v;
	size_t n;
	int r = stg_catalog_versions(dirfd, &v, &n);
	if (r < 0)
		return r;
	uint64_t prev = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i] < version)
			prev = v[i];
	free(v);
	return prev ? stg_catalog_read(dirfd, prev, ret) : -ENOENT;
}

/* "a:1,b:2": where the version is, for `stagehand ls`. */
static void describe(struct flusher *fl, struct placement *pl, char *out, size_t len)
{
	size_t at = 0;
	out[0] = '\0';
	for (size_t i = 0; i < fl->nservers && at + 1 < len; i++)
		if (pl->active[i])
			at += (size_t)snprintf(out + at, len - at, "%s%s", at ? "," : "",
					       fl->servers[i].name);
}

/* The version is shipped again under a new id, another node's holding its
 * id on some server: the servers that took it under the old one give it
 * back (WITHDRAW removes only a manifest byte for byte ours), so that no
 * id names two contents, nor one content two versions. A server down now
 * keeps it: the log says so. */
static void withdraw(struct flusher *fl, const char *path, const struct stg_manifest *m,
		     const uint8_t *enc, size_t enc_len)
{
	struct job job = {.path = path, .withdraw = true, .manifest = m, .encoded = enc,
			  .encoded_len = enc_len};
	struct job **jobs = calloc(fl->nservers, sizeof(*jobs));
	if (!jobs)
		return;
	int64_t now = stg_now_ns();
	for (size_t i = 0; i < fl->nservers; i++)
		jobs[i] = server_available(&fl->servers[i], now) ? &job : NULL;
	servers_run(fl, jobs);
	for (size_t i = 0; i < fl->nservers; i++)
		if (!jobs[i] || fl->servers[i].result < 0)
			stg_log(STG_LOG_WARN, "'%s' version %llu: server %s may keep it under the id "
				"another node's holds: %s", path,
				(unsigned long long)stg_version_seq(m->version), fl->servers[i].name,
				jobs[i] ? strerror(-fl->servers[i].result) : "down");
	free(jobs);
}

/* Marks the version replicated, unless it was republished meanwhile (chmod
 * or utime after close amend it in place): under the path's lock, so that
 * an amend comes wholly before (seen here: shipped again) or after (it
 * unmarks and queues again). Returns 0, -EAGAIN (changed: still queued),
 * -ENOENT (gone from the cache: its successor has an entry of its own) or
 * -errno (the mark could not be written: still queued). */
static int mark_if_unchanged(struct flusher *fl, const char *path, uint64_t version,
			     const uint8_t *enc, size_t enc_len, const char *where)
{
	struct stg_catalog_file f;
	int r = stg_catalog_lock(fl->cache, path, false, &f);
	if (r < 0)
		return r;
	struct stg_manifest now;
	r = stg_catalog_read(f.dirfd, version, &now);
	if (r == 0) {
		size_t len = stg_manifest_encoded_size(&now);
		uint8_t *buf = malloc(len);
		if (!buf)
			r = -ENOMEM;
		else if (stg_manifest_encode(&now, buf) != enc_len || memcmp(buf, enc, enc_len))
			r = -EAGAIN;
		free(buf);
		stg_manifest_done(&now);
	}
	if (r == 0)
		r = stg_queue_mark(f.dirfd, version, where);
	if (r == -ENOENT)
		stg_debug("'%s' version %llu left the cache (pruned, or given a new id) before it "
			  "was marked replicated; dropped from the queue", path,
			  (unsigned long long)stg_version_seq(version));
	else if (r < 0 && r != -EAGAIN)
		stg_log_errno(STG_LOG_ERROR, r, "cannot mark '%s' version %llu replicated", path,
			      (unsigned long long)stg_version_seq(version));
	stg_catalog_unlock(&f);
	return r;
}

/* Ships one version once. Returns as ship_version does, or -EEXIST when a
 * server holds another version under its id (*ret_refused: the first such
 * server): it stays queued. path receives the version's path. */
static int ship_once(struct flusher *fl, const char *id, uint64_t version, char *path,
		     size_t pathlen, const char **ret_refused)
{
	struct stg_manifest m;
	int dirfd = -1;
	int r = read_version(fl, id, version, &dirfd, path, pathlen, &m);
	if (r == -ENOENT) {
		/* Renamed, pruned or rewritten since it was queued: its successor
		 * has an entry of its own. */
		stg_debug("version %llu of %s is gone; dropped from the queue",
			  (unsigned long long)stg_version_seq(version), id);
		stg_queue_remove(fl->cache, id, version);
		return 0;
	}
	if (r == -EBADMSG && *path) {
		/* A disk that lost its writes: the version can never be shipped,
		 * and waiting for it would hold up every flush --wait. ls and
		 * restore still name it damaged. */
		stg_log(STG_LOG_ERROR, "version %llu of '%s' is damaged in the cache (its manifest "
			"is corrupt): it cannot be shipped; dropped from the queue",
			(unsigned long long)stg_version_seq(version), path);
		stg_queue_remove(fl->cache, id, version);
		return 0;
	}
	if (r < 0)
		return stg_log_errno(STG_LOG_ERROR, r, "cannot read queued version %llu of %s",
				     (unsigned long long)stg_version_seq(version), id);
	/* Keep the cache's collector from moving the records we read. */
	int pin = stg_gc_pin(fl->cache);
	if (pin < 0) {
		r = pin;
		goto out_manifest;
	}
	/* Read again under the pin: a compaction before it may have moved them. */
	stg_manifest_done(&m);
	r = stg_catalog_read(dirfd, version, &m);
	if (r < 0) {
		stg_gc_unpin(pin);
		close(dirfd);
		if (r == -ENOENT) {
			stg_queue_remove(fl->cache, id, version);
			return 0;
		}
		return r;
	}
	const struct stg_path_rule *rule = stg_policy_match(fl->policy, path);
	bool by_slot = rule && rule->delta && m.chunking == STG_CHUNKING_FIXED;
	struct stg_manifest base;
	bool have_base = by_slot && read_base(dirfd, version, &base) == 0;
	char where[1024];
	if (stg_queue_read_mark(dirfd, version, where, sizeof(where)) == 0) {
		/* Replicated before; only its drain failed or was cut short. */
		r = rule && rule->drain ? drain_version(fl, path, rule, &m) : 0;
		if (r == 0)
			stg_queue_remove(fl->cache, id, version);
		goto out_unpin;
	}
	size_t enc_len = stg_manifest_encoded_size(&m);
	uint8_t *enc = malloc(enc_len);
	if (!enc) {
		r = -ENOMEM;
		goto out_unpin;
	}
	stg_manifest_encode(&m, enc);

	struct placement *pl = malloc(sizeof(*pl));
	if (!pl) {
		r = -ENOMEM;
		goto out_enc;
	}
	for (;;) {
		r = place(fl, path, &m, by_slot, pl);
		if (r < 0) {
			placement_done(pl, fl->nservers);
			break;
		}
		for (size_t i = 0; i < fl->nservers; i++) {
			pl->jobs[i].path = path;
			pl->jobs[i].manifest = &m;
			pl->jobs[i].encoded = enc;
			pl->jobs[i].encoded_len = enc_len;
			pl->jobs[i].keep = rule ? rule->keep : STG_KEEP_DEFAULT;
			pl->jobs[i].recode = rule && stg_chunk_codec_background(&rule->codec)
						     ? &rule->codec
						     : NULL;
			pl->jobs[i].base = have_base ? &base : NULL;
			pl->jobs[i].delta = have_base ? &rule->codec : NULL;
		}
		size_t failed = servers_run(fl, pl->active);
		if (stg_cancelled()) {
			/* Stopping: no server failed, the version stays queued. */
			placement_done(pl, fl->nservers);
			r = -ECANCELED;
			break;
		}
		bool local = false;
		*ret_refused = NULL;
		for (size_t i = 0; i < fl->nservers; i++) {
			if (!pl->active[i])
				continue;
			struct server *s = &fl->servers[i];
			if (s->result < 0 && s->local_failure) {
				local = true;
				r = s->result;
			} else if (s->result == -EEXIST) {
				/* Not the server's failure: the id is taken. */
				if (!*ret_refused)
					*ret_refused = s->name;
			} else if (s->result < 0) {
				server_failed(s, s->result, "shipping failed");
			} else {
				server_succeeded(s);
			}
		}
		if (local) {
			/* Our copy is bad: no server can help. It stays queued and
			 * the log says which chunk. */
			placement_done(pl, fl->nservers);
			break;
		}
		if (*ret_refused) {
			placement_done(pl, fl->nservers);
			withdraw(fl, path, &m, enc, enc_len);
			r = -EEXIST;
			break;
		}
		if (failed == 0) {
			describe(fl, pl, where, sizeof(where));
			placement_done(pl, fl->nservers);
			r = mark_if_unchanged(fl, path, version, enc, enc_len, where);
			if (r == -ENOENT) {
				stg_queue_remove(fl->cache, id, version);
				r = 0;
				break;
			}
			if (r < 0)
				break;
			stg_log(STG_LOG_INFO, "'%s' version %llu replicated on %s", path,
				(unsigned long long)stg_version_seq(version), where);
			/* Drained before it leaves the queue: flush --wait then
			 * means drained too, and a flusher killed while draining
			 * leaves the entry for the next one. */
			if (rule && rule->drain)
				r = drain_version(fl, path, rule, &m);
			if (r == 0) {
				stg_queue_remove(fl->cache, id, version);
				fl->versions_shipped++;
			}
			break;
		}
		placement_done(pl, fl->nservers);
		/* Place again over the servers still standing. */
	}
	free(pl);
out_enc:
	free(enc);
out_unpin:
	if (have_base)
		stg_manifest_done(&base);
	stg_gc_unpin(pin);
out_manifest:
	stg_manifest_done(&m);
	close(dirfd);
	return r;
}

int ship_version(struct flusher *fl, const char *id, uint64_t version)
{
	char path[4096];
	for (int remints = 0;; remints++) {
		const char *refused = NULL;
		int r = ship_once(fl, id, version, path, sizeof(path), &refused);
		if (r != -EEXIST || !refused)
			return r;
		unsigned long long seq = (unsigned long long)stg_version_seq(version);
		/* Each new id was refused too: another node keeps minting the same
		 * ones. Left queued, tried again at the next pass. */
		if (remints == REMINT_MAX)
			return stg_log_errno(STG_LOG_ERROR, r,
					     "'%s' version %llu: another node took its id on %s, "
					     "and %d new ids after it; still queued",
					     path, seq, refused, REMINT_MAX);
		uint64_t next;
		r = stg_catalog_remint(fl->cache, path, version, &next);
		if (r == -ENOENT) {
			/* Gone meanwhile (pruned, renamed): nothing left to ship. */
			stg_queue_remove(fl->cache, id, version);
			return 0;
		}
		if (r < 0)
			return stg_log_errno(STG_LOG_ERROR, r,
					     "'%s' version %llu: another node took its id on %s, "
					     "and it cannot have another%s; still queued",
					     path, seq, refused,
					     r == -ERANGE ? " (none is free before its next version)"
							  : "");
		stg_log(STG_LOG_WARN, "'%s' version %llu: another node took its id on %s; shipped "
			"as id %llu", path, seq, refused, (unsigned long long)next);
		version = next;
	}
}
