/* SPDX-License-Identifier: MIT */
/* One worker thread per staging server: it keeps the connection and carries
 * out the jobs of each version (ask which chunks the server lacks, send
 * those, then the manifest), so every server is served in parallel. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "hash.h"
#include "internal.h"
#include "log.h"
#include "util.h"
#include "wire.h"
#include "thread.h"

#define BACKOFF_MAX_NS (30ll * 1000000000)
#define MANIFEST_TRIES 3

bool server_available(const struct server *s, int64_t now_ns)
{
	return s->down_until_ns <= now_ns;
}

void server_failed(struct server *s, int r, const char *what)
{
	int64_t backoff = 1000000000ll << (s->failures < 5 ? s->failures : 5);
	if (backoff > BACKOFF_MAX_NS)
		backoff = BACKOFF_MAX_NS;
	s->failures++;
	s->errors++;
	s->down_until_ns = stg_now_ns() + backoff;
	snprintf(s->last_error, sizeof(s->last_error), "%s: %s%s%s", what, strerror(-r),
		 s->conn.error[0] ? ": " : "", s->conn.error);
	stg_log(STG_LOG_WARN, "server %s: %s; retrying in %llds", s->name, s->last_error,
		(long long)(backoff / 1000000000));
}

void server_succeeded(struct server *s)
{
	if (s->failures)
		stg_log(STG_LOG_INFO, "server %s is back", s->name);
	s->failures = 0;
	s->down_until_ns = 0;
	s->last_error[0] = '\0';
}

static int ensure_connected(struct server *s)
{
	if (s->connected)
		return 0;
	char why[sizeof(s->why_not_rdma)];
	s->conn.error[0] = '\0';
	/* A busy server is tried again within the timeout (stg_conn_login). */
	int r = stg_conn_login(s->name, s->fl->policy->transport, s->fl->timeout_ms,
			       &s->fl->secret, s->fl->uid, &s->conn, why, sizeof(why));
	if (r < 0) {
		if (r == -EACCES)
			stg_log(STG_LOG_ERROR,
				"server %s refused our secret (is secret_file the cluster's?)",
				s->name);
		else if (why[0] && !s->conn.error[0])
			snprintf(s->conn.error, sizeof(s->conn.error), "%s", why);
		return r;
	}
	/* Said on every new connection, and loudly when auto fell back. */
	if (why[0] && strcmp(why, s->why_not_rdma) != 0)
		stg_log(STG_LOG_WARN, "server %s: rdma unavailable (%s); using tcp", s->name, why);
	snprintf(s->why_not_rdma, sizeof(s->why_not_rdma), "%s", why);
	stg_log(STG_LOG_INFO, "server %s: connected over %s", s->name, stg_conn_transport(&s->conn));
	s->connected = true;
	return 0;
}

static bool bit(const uint8_t *map, size_t i)
{
	return map[i / 8] & (1u << (i % 8));
}

static bool is_held(const struct job *job, uint32_t i)
{
	return bit(job->held, i);
}

static int compare_by_hash(const void *a, const void *b, void *arg)
{
	const struct stg_manifest_entry *e = arg;
	return memcmp(e[*(const uint32_t *)a].hash.b, e[*(const uint32_t *)b].hash.b, 16);
}

/* The held entries, one per distinct chunk (a chunk repeated in a file
 * travels once). */
static uint32_t *distinct_held(const struct job *job, size_t *ret_n)
{
	const struct stg_manifest *m = job->manifest;
	uint32_t *idx = malloc(sizeof(*idx) * (job->nheld + 1));
	if (!idx)
		return NULL;
	size_t n = 0;
	for (uint32_t i = 0; i < m->nchunks; i++)
		if (is_held(job, i))
			idx[n++] = i;
	qsort_r(idx, n, sizeof(*idx), compare_by_hash, m->entries);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (k == 0 || !stg_hash_eq(&m->entries[idx[i]].hash, &m->entries[idx[k - 1]].hash))
			idx[k++] = idx[i];
	*ret_n = k;
	return idx;
}

/* Asks the server which of the chunks of entries idx[0..n) of m it holds
 * (HAVE, which also keeps them from being collected meanwhile); sets bit i
 * of held (zeroed) for each one it holds. */
static int ask_held(struct server *s, const struct stg_manifest *m, const uint32_t *idx, size_t n,
		    uint8_t *held)
{
	uint8_t *hashes = malloc((size_t)STG_WIRE_MAX_HAVE * 16);
	if (!hashes)
		return -ENOMEM;
	int r = 0;
	for (size_t at = 0; at < n && r == 0; at += STG_WIRE_MAX_HAVE) {
		size_t batch = n - at < STG_WIRE_MAX_HAVE ? n - at : STG_WIRE_MAX_HAVE;
		for (size_t i = 0; i < batch; i++)
			memcpy(hashes + i * 16, m->entries[idx[at + i]].hash.b, 16);
		struct stg_msg req = {.type = STG_MSG_HAVE}, rep;
		req.have.count = (uint32_t)batch;
		req.have.hashes = hashes;
		r = stg_conn_call(&s->conn, &req, STG_MSG_HAVE_REPLY, &rep);
		if (r == 0 && rep.have_reply.count != batch)
			r = -EPROTO;
		for (size_t i = 0; r == 0 && i < batch; i++)
			if (rep.have_reply.bitmap[i / 8] & (1u << (i % 8)))
				held[(at + i) / 8] |= (uint8_t)(1u << ((at + i) % 8));
	}
	free(hashes);
	return r;
}

/* Asks which of the entries the server lacks; compacts them into absent. */
static int ask_have(struct server *s, const struct job *job, const uint32_t *idx, size_t n,
		    uint32_t *absent, size_t *ret_nabsent)
{
	uint8_t *held = calloc(1, n / 8 + 1);
	if (!held)
		return -ENOMEM;
	int r = ask_held(s, job->manifest, idx, n, held);
	size_t nabsent = 0;
	for (size_t i = 0; r == 0 && i < n; i++)
		if (!bit(held, i))
			absent[nabsent++] = idx[i];
	free(held);
	*ret_nabsent = nabsent;
	return r;
}

/* Whether entry i can go as a delta against the base version's entry at
 * its offset: both hold data of one length, and differ. */
static bool delta_candidate(const struct job *job, uint32_t i)
{
	if (!job->base || i >= job->base->nchunks)
		return false;
	const struct stg_manifest_entry *e = &job->manifest->entries[i], *b = &job->base->entries[i];
	return !(b->flags & STG_ENTRY_ZERO) && b->raw_len == e->raw_len &&
	       !stg_hash_eq(&b->hash, &e->hash);
}

/* The entries of absent whose base the server holds, as a bitmap by entry
 * (NULL when none can go as a delta): only those are sent as deltas. */
static int ask_bases(struct server *s, const struct job *job, const uint32_t *absent,
		     size_t nabsent, uint8_t **ret_ok)
{
	*ret_ok = NULL;
	if (!job->base)
		return 0;
	uint32_t *cand = malloc(sizeof(*cand) * (nabsent + 1));
	uint8_t *held = calloc(1, nabsent / 8 + 1);
	uint8_t *ok = calloc(1, job->manifest->nchunks / 8 + 1);
	int r = cand && held && ok ? 0 : -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; r == 0 && i < nabsent; i++)
		if (delta_candidate(job, absent[i]))
			cand[n++] = absent[i];
	if (r == 0 && n > 0)
		r = ask_held(s, job->base, cand, n, held);
	for (size_t i = 0; r == 0 && i < n; i++)
		if (bit(held, i))
			ok[cand[i] / 8] |= (uint8_t)(1u << (cand[i] % 8));
	free(cand);
	free(held);
	if (r == 0 && n > 0)
		*ret_ok = ok;
	else
		free(ok);
	return r;
}

static int put_manifest(struct server *s, const struct job *job, uint32_t *missing,
			size_t *ret_nmissing)
{
	struct stg_msg req = {.type = STG_MSG_PUT_MANIFEST}, rep;
	req.put_manifest.keep = job->keep;
	req.put_manifest.path = job->path;
	req.put_manifest.path_len = (uint32_t)strlen(job->path);
	req.put_manifest.manifest = job->encoded;
	req.put_manifest.manifest_len = (uint32_t)job->encoded_len;
	req.put_manifest.held = job->held;
	req.put_manifest.held_len = (job->manifest->nchunks + 7) / 8;
	req.tag = s->conn.next_tag++;
	int r = stg_conn_send_msg(&s->conn, &req);
	if (r < 0)
		return r;
	r = stg_conn_recv(&s->conn, STG_WIRE_MAX_BODY, &rep);
	if (r < 0)
		return r;
	if (rep.tag != req.tag)
		return -EPROTO;
	*ret_nmissing = 0;
	switch (rep.type) {
	case STG_MSG_OK:
		return 0;
	case STG_MSG_MISSING:
		/* The server collected a chunk we were told it held, between our
		 * question and the manifest: send it again. */
		for (uint32_t i = 0; i < rep.missing.count; i++) {
			uint32_t e = stg_get_le32(rep.missing.entries + 4 * (size_t)i);
			if (e >= job->manifest->nchunks || !is_held(job, e))
				return -EPROTO;
			missing[(*ret_nmissing)++] = e;
			if (*ret_nmissing > job->nheld)
				return -EPROTO;
		}
		return -EAGAIN;
	case STG_MSG_ERROR:
		snprintf(s->conn.error, sizeof(s->conn.error), "%.*s", (int)rep.error.text_len,
			 rep.error.text);
		return stg_wire_error_to_errno(rep.error.code);
	default:
		return -EPROTO;
	}
}

/* One DELETE_PATH, or WITHDRAW, and its answer. */
static int name_request(struct server *s, const struct job *job)
{
	struct stg_msg req = {.type = job->tombstone ? STG_MSG_DELETE_PATH : STG_MSG_WITHDRAW}, rep;
	if (job->tombstone)
		req.delete_path = (struct stg_msg_delete_path){
			.upto = job->tombstone->upto, .at_ns = job->tombstone->at_ns,
			.retain_s = job->tombstone->retain_s, .flags = job->tombstone->flags,
			.path = job->path, .path_len = (uint32_t)strlen(job->path)};
	else
		req.withdraw = (struct stg_msg_withdraw){
			.version = job->manifest->version,
			.manifest_hash = stg_hash64(job->encoded, job->encoded_len),
			.path = job->path, .path_len = (uint32_t)strlen(job->path)};
	return stg_conn_call(&s->conn, &req, STG_MSG_OK, &rep);
}

static int run_job(struct server *s, const struct job *job)
{
	s->conn.error[0] = '\0';
	s->local_failure = false;
	bool reused = s->connected;
	int r = ensure_connected(s);
	if (r < 0)
		return r;
	if (job->tombstone || job->withdraw) {
		r = name_request(s, job);
		/* (A reused connection may have been cut: one new try.) */
		if (r < 0 && reused && r != -EPROTO && !s->conn.error[0]) {
			stg_conn_close(&s->conn);
			s->connected = false;
			r = ensure_connected(s);
			if (r == 0)
				r = name_request(s, job);
		}
		return r;
	}
	uint64_t sent_before = s->conn.bytes_sent;
	uint64_t fout_before = s->conn.frames_sent, fin_before = s->conn.frames_received;
	size_t n = 0, nabsent = 0;
	uint8_t *delta_ok = NULL; /* which absent entries go as deltas */
	uint32_t *idx = distinct_held(job, &n);
	uint32_t *absent = malloc(sizeof(*absent) * (job->nheld + 1));
	if (!idx || !absent) {
		r = -ENOMEM;
		goto out;
	}
	r = ask_have(s, job, idx, n, absent, &nabsent);
	if (r < 0 && reused && r != -ENOMEM) {
		/* A connection idle since the last version may have been cut
		 * (the server restarted, a firewall forgot it): one new try
		 * before calling the server down. */
		stg_conn_close(&s->conn);
		s->connected = false;
		r = ensure_connected(s);
		sent_before = s->conn.bytes_sent;
		fout_before = s->conn.frames_sent;
		fin_before = s->conn.frames_received;
		if (r == 0)
			r = ask_have(s, job, idx, n, absent, &nabsent);
	}
	if (r == 0)
		r = ask_bases(s, job, absent, nabsent, &delta_ok);
	if (r == 0) {
		s->stats.chunks_present += n - nabsent;
		r = sender_put(s, job, absent, nabsent, delta_ok);
	}
	for (int tries = 0; r == 0; tries++) {
		r = put_manifest(s, job, absent, &nabsent);
		if (r != -EAGAIN)
			break;
		if (tries == MANIFEST_TRIES) {
			r = -EIO;
			break;
		}
		r = sender_put(s, job, absent, nabsent, NULL);
	}
out:
	free(delta_ok);
	free(idx);
	free(absent);
	s->stats.bytes_sent += s->conn.bytes_sent - sent_before;
	s->stats.frames_sent += s->conn.frames_sent - fout_before;
	s->stats.frames_received += s->conn.frames_received - fin_before;
	return r;
}

static void *worker(void *arg)
{
	struct server *s = arg;
	struct flusher *fl = s->fl;
	pthread_mutex_lock(&fl->lock);
	for (;;) {
		while (!s->job && !fl->stopping)
			pthread_cond_wait(&fl->job_cond, &fl->lock);
		if (fl->stopping)
			break;
		struct job *job = s->job;
		pthread_mutex_unlock(&fl->lock);
		int64_t start = stg_now_ns();
		int r = run_job(s, job);
		if (r == 0) {
			s->ships++;
			s->ship_ns += stg_now_ns() - start;
		}
		if (r < 0 && s->connected) {
			/* After a failure mid-exchange the stream's state is unknown. */
			stg_conn_close(&s->conn);
			s->connected = false;
		}
		pthread_mutex_lock(&fl->lock);
		s->result = r;
		s->job = NULL;
		s->busy = false;
		pthread_cond_broadcast(&fl->done_cond);
	}
	pthread_mutex_unlock(&fl->lock);
	return NULL;
}

int servers_start(struct flusher *fl)
{
	fl->servers = calloc(fl->nservers, sizeof(*fl->servers));
	if (!fl->servers)
		return -ENOMEM;
	for (size_t i = 0; i < fl->nservers; i++) {
		struct server *s = &fl->servers[i];
		s->fl = fl;
		s->name = fl->policy->server_list[i];
		s->conn.fd = -1;
		int r = io_uring_queue_init(64, &s->ring, 0);
		if (r < 0)
			return stg_log_errno(STG_LOG_ERROR, r, "cannot set up io_uring");
		s->ring_ready = true;
		/* Every wait on the ring also ends at a stop (SIGTERM): one
		 * poll of the cancel descriptor, for the ring's lifetime. */
		if (stg_cancel_fd() >= 0) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
			io_uring_prep_poll_add(sqe, stg_cancel_fd(), POLLIN);
			io_uring_sqe_set_data64(sqe, RING_CANCEL);
			io_uring_submit(&s->ring);
		}
		/* Signals go to the main thread; a worker's io_uring waits are
		 * not interrupted by them. */
		r = stg_thread_start(&s->thread, NULL, worker, s);
		if (r < 0)
			return stg_log_errno(STG_LOG_ERROR, r, "cannot start a worker thread");
	}
	return 0;
}

void servers_stop(struct flusher *fl)
{
	if (!fl->servers)
		return;
	pthread_mutex_lock(&fl->lock);
	fl->stopping = true;
	pthread_cond_broadcast(&fl->job_cond);
	pthread_mutex_unlock(&fl->lock);
	for (size_t i = 0; i < fl->nservers; i++) {
		struct server *s = &fl->servers[i];
		if (s->thread)
			pthread_join(s->thread, NULL);
		if (s->stats.frames_sent)
			stg_log(STG_LOG_INFO,
				"server %s: %llu chunks sent, %llu present; %llu messages out, %llu "
				"in, %llu bytes in the stream",
				s->name, (unsigned long long)s->stats.chunks_sent,
				(unsigned long long)s->stats.chunks_present,
				(unsigned long long)s->stats.frames_sent,
				(unsigned long long)s->stats.frames_received,
				(unsigned long long)s->stats.bytes_sent);
		if (s->connected)
			stg_conn_close(&s->conn);
		if (s->ring_ready)
			io_uring_queue_exit(&s->ring);
	}
	free(fl->servers);
	fl->servers = NULL;
}

size_t servers_run(struct flusher *fl, struct job **jobs)
{
	pthread_mutex_lock(&fl->lock);
	for (size_t i = 0; i < fl->nservers; i++) {
		if (!jobs[i])
			continue;
		fl->servers[i].job = jobs[i];
		fl->servers[i].busy = true;
		fl->servers[i].result = 0;
	}
	pthread_cond_broadcast(&fl->job_cond);
	size_t failed = 0;
	for (size_t i = 0; i < fl->nservers; i++) {
		while (fl->servers[i].busy)
			pthread_cond_wait(&fl->done_cond, &fl->lock);
		if (jobs[i] && fl->servers[i].result < 0)
			failed++;
	}
	pthread_mutex_unlock(&fl->lock);
	return failed;
}
