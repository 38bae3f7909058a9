/* SPDX-License-Identifier: MIT */
/* The chunk pipeline to one server, on the worker's io_uring: records are
 * read from the cache's packs into slots of the connection's pool while
 * earlier ones are on their way and later replies come back, so the disk, the
 * network and the server's work overlap. How a record travels is the
 * connection's business (in the stream over TCP; over RDMA the server pulls
 * it from the pool): the ring waits on the pack reads and on the
 * connection's descriptor alike. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cancel.h"
#include "chunk.h"
#include "internal.h"
#include "log.h"
#include "pack.h"
#include "util.h"
#include "wire.h"

#define MAX_SLOTS 32
#define PACK_FDS 8
#define MAX_REPLY (STG_WIRE_MAX_ERROR_TEXT + 64)

enum op { OP_READ = 1, OP_POLL = 2, OP_POLL_REMOVE = 3 };
enum slot_state { FREE, READING, READY, WAITING };

struct slot {
	uint8_t *buf; /* the record, in the connection's pool */
	uint32_t len;
	uint32_t entry;
	uint32_t tag;
	uint32_t ready_seq;
	enum slot_state state;
	bool delta; /* it went as a delta */
};

struct pipe {
	struct server *srv;
	const struct job *job;
	struct io_uring *ring;
	struct slot slots[MAX_SLOTS];
	unsigned nslots;
	struct {
		uint64_t pack;
		int fd;
	} packs[PACK_FDS];
	unsigned next_pack;
	uint8_t *raw, *recoded; /* the job's recode: a chunk decoded, then encoded */
	const uint8_t *delta_ok; /* entries that may go as deltas (NULL: none) */
	uint8_t *base_obj, *base_raw, *delta_out; /* a delta's base, read and decoded */
	uint32_t *whole; /* entries whose delta the server refused: sent again whole */
	size_t nwhole;
	uint32_t ready_counter;
	unsigned ops; /* submitted, not yet completed */
	bool polling, removing;
	short poll_events;
	size_t done;
};

static uint64_t user_data(unsigned slot, enum op op)
{
	return ((uint64_t)slot << 2) | op;
}

static int pack_fd(struct pipe *p, uint64_t pack)
{
	for (unsigned i = 0; i < PACK_FDS; i++)
		if (p->packs[i].fd >= 0 && p->packs[i].pack == pack)
			return p->packs[i].fd;
	char rel[48];
	stg_pack_relpath(pack, rel);
	int fd = openat(p->srv->fl->cache->dirfd, rel, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	unsigned i = p->next_pack++ % PACK_FDS;
	if (p->packs[i].fd >= 0) {
		/* A read prepared on it but not yet submitted would find the
		 * number closed (or reused): submitted requests hold their file. */
		io_uring_submit(p->ring);
		close(p->packs[i].fd);
	}
	p->packs[i].pack = pack;
	p->packs[i].fd = fd;
	return fd;
}

static struct io_uring_sqe *get_sqe(struct pipe *p)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(p->ring);
	if (!sqe) {
		io_uring_submit(p->ring);
		sqe = io_uring_get_sqe(p->ring);
	}
	return sqe;
}

static int start_read(struct pipe *p, unsigned i, uint32_t entry)
{
	const struct stg_manifest_entry *e = &p->job->manifest->entries[entry];
	int fd = pack_fd(p, e->pack);
	if (fd < 0) {
		char hex[STG_HASH_HEX_LEN + 1];
		stg_hash_hex(&e->hash, hex);
		p->srv->local_failure = true;
		return stg_log_errno(STG_LOG_ERROR, fd, "chunk %s of '%s': cannot open its pack",
				     hex, p->job->path);
	}
	struct slot *s = &p->slots[i];
	s->entry = entry;
	s->len = STG_CHUNK_HEADER_SIZE + e->stored_len;
	s->state = READING;
	struct io_uring_sqe *sqe = get_sqe(p);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, fd, s->buf, s->len, e->offset);
	io_uring_sqe_set_data64(sqe, user_data(i, OP_READ));
	p->ops++;
	return 0;
}

/* Hands ready records to the connection, oldest first, while it takes them. */
static int post_ready(struct pipe *p)
{
	for (;;) {
		int best = -1;
		for (unsigned i = 0; i < p->nslots; i++)
			if (p->slots[i].state == READY &&
			    (best < 0 || p->slots[i].ready_seq < p->slots[best].ready_seq))
				best = (int)i;
		if (best < 0)
			return 0;
		struct slot *s = &p->slots[best];
		int r = stg_conn_post_bulk(&p->srv->conn, STG_MSG_PUT_CHUNK, s->tag, s->buf, s->len);
		if (r == -EAGAIN)
			return 0;
		if (r < 0)
			return r;
		s->state = WAITING;
	}
}

/* Encodes the chunk in slot s (its cache record) as a delta against the
 * base version's chunk at its offset, into p->delta_out; returns its length
 * (0: none). The base's record is read from the cache here; when it cannot
 * be, the chunk simply goes whole. */
static size_t encode_delta(struct pipe *p, struct slot *s, const struct stg_manifest_entry *e)
{
	const struct stg_manifest_entry *b = &p->job->base->entries[s->entry];
	size_t blen = STG_CHUNK_HEADER_SIZE + (size_t)b->stored_len;
	int fd = pack_fd(p, b->pack);
	const uint8_t *data;
	if (fd < 0 || stg_pread_all(fd, p->base_obj, blen, (off_t)b->offset) < 0 ||
	    stg_chunk_decode(p->base_obj, blen, &b->hash, b->raw_len, p->base_raw) < 0 ||
	    stg_chunk_decode_view(s->buf, s->len, &e->hash, e->raw_len, p->raw, &data) < 0) {
		char hex[STG_HASH_HEX_LEN + 1];
		stg_hash_hex(&b->hash, hex);
		stg_debug("chunk %s of '%s' (the base of a delta) is unreadable in the cache; "
			  "its successor goes whole", hex, p->job->path);
		return 0;
	}
	return stg_chunk_encode_delta(data, e->raw_len, &e->hash, p->base_raw, &b->hash,
				      p->job->delta, p->delta_out);
}

static bool delta_ok(const struct pipe *p, uint32_t entry)
{
	return p->delta_ok && (p->delta_ok[entry / 8] & (1u << (entry % 8)));
}

static int on_read(struct pipe *p, unsigned i, int res)
{
	struct slot *s = &p->slots[i];
	const struct stg_manifest_entry *e = &p->job->manifest->entries[s->entry];
	struct stg_chunk_header h;
	if (res < 0 || (uint32_t)res != s->len ||
	    stg_chunk_header_decode(s->buf, s->len, &e->hash, e->raw_len, &h) < 0) {
		char hex[STG_HASH_HEX_LEN + 1];
		stg_hash_hex(&e->hash, hex);
		int r = res < 0 ? res : -EBADMSG;
		p->srv->local_failure = true;
		return stg_log_errno(STG_LOG_ERROR, r,
				     "chunk %s of '%s' in pack %016llx: the cache's record is "
				     "unreadable",
				     hex, p->job->path, (unsigned long long)e->pack);
	}
	/* A delta that saves an eighth of the cache's record goes without
	 * trying the recode (which would cost as much again); one that saves
	 * less goes if it beats the recode too. Smaller either way: it fits the
	 * slot. */
	size_t delta = delta_ok(p, s->entry) ? encode_delta(p, s, e) : 0;
	s->delta = false;
	if (delta && delta <= s->len - s->len / 8) {
		memcpy(s->buf, p->delta_out, delta);
		s->len = (uint32_t)delta;
		s->delta = true;
	} else if (p->job->recode) {
		/* Smaller, or left as it is: it fits its slot either way. */
		ssize_t n = stg_chunk_recode(s->buf, s->len, e->raw_len, p->job->recode, p->raw,
					     p->recoded);
		if (n < 0) {
			char hex[STG_HASH_HEX_LEN + 1];
			stg_hash_hex(&e->hash, hex);
			p->srv->local_failure = true;
			return stg_log_errno(STG_LOG_ERROR, (int)n,
					     "chunk %s of '%s' in pack %016llx: cannot recode the "
					     "cache's record", hex, p->job->path,
					     (unsigned long long)e->pack);
		}
		if (n > 0) {
			memcpy(s->buf, p->recoded, (size_t)n);
			s->len = (uint32_t)n;
		}
	}
	if (delta && delta < s->len) {
		memcpy(s->buf, p->delta_out, delta);
		s->len = (uint32_t)delta;
		s->delta = true;
	}
	s->tag = p->srv->conn.next_tag++;
	s->state = READY;
	s->ready_seq = p->ready_counter++;
	return 0;
}

static int on_reply(struct pipe *p, const struct stg_msg *m)
{
	for (unsigned i = 0; i < p->nslots; i++) {
		struct slot *s = &p->slots[i];
		if (s->state != WAITING || s->tag != m->tag)
			continue;
		if (m->type == STG_MSG_ERROR && s->delta) {
			/* Its base is gone or unreadable there, or the server
			 * takes no deltas: the chunk goes again, whole (its
			 * delta was made from verified bytes). */
			const struct stg_manifest_entry *e = &p->job->manifest->entries[s->entry];
			char hex[STG_HASH_HEX_LEN + 1];
			stg_hash_hex(&e->hash, hex);
			stg_log(STG_LOG_INFO, "server %s refused chunk %s of '%s' as a delta (%.*s); "
				"sending it whole", p->srv->name, hex, p->job->path,
				(int)m->error.text_len, m->error.text);
			p->whole[p->nwhole++] = s->entry;
			s->state = FREE;
			p->done++;
			return 0;
		}
		if (m->type == STG_MSG_ERROR) {
			snprintf(p->srv->conn.error, sizeof(p->srv->conn.error), "%.*s",
				 (int)m->error.text_len, m->error.text);
			int r = stg_wire_error_to_errno(m->error.code);
			if (r == -EBADMSG) {
				/* The server verified the chunk and it is wrong: our
				 * copy is corrupt, and no other server would take it. */
				const struct stg_manifest_entry *e =
					&p->job->manifest->entries[s->entry];
				char hex[STG_HASH_HEX_LEN + 1];
				stg_hash_hex(&e->hash, hex);
				p->srv->local_failure = true;
				stg_log(STG_LOG_ERROR, "chunk %s of '%s' in pack %016llx is corrupt in "
					"the cache (the server's verification failed)", hex,
					p->job->path, (unsigned long long)e->pack);
			}
			return r;
		}
		if (m->type != STG_MSG_OK)
			return -EPROTO;
		s->state = FREE;
		p->done++;
		p->srv->stats.chunks_sent++;
		return 0;
	}
	return -EPROTO;
}

/* Takes every reply that has arrived. */
static int take_replies(struct pipe *p)
{
	for (;;) {
		struct stg_msg m;
		int r = stg_conn_try_recv(&p->srv->conn, MAX_REPLY, &m);
		if (r == -EAGAIN)
			return 0;
		if (r < 0)
			return r;
		r = on_reply(p, &m);
		if (r < 0)
			return r;
	}
}

/* Makes the ring wake up when the connection can progress. Returns false
 * when it can progress already (no wait). */
static bool watch_conn(struct pipe *p)
{
	short events;
	int fd = stg_conn_pollable(&p->srv->conn, &events);
	if (events == 0)
		return false;
	if (p->polling && (events & ~p->poll_events) && !p->removing) {
		/* Waiting for less than is needed now (output room, say):
		 * replace the poll once the removal has completed. */
		struct io_uring_sqe *sqe = get_sqe(p);
		if (sqe) {
			io_uring_prep_poll_remove(sqe, user_data(0, OP_POLL));
			io_uring_sqe_set_data64(sqe, user_data(0, OP_POLL_REMOVE));
			p->ops++;
			p->removing = true;
		}
	}
	if (!p->polling) {
		struct io_uring_sqe *sqe = get_sqe(p);
		if (!sqe)
			return true;
		io_uring_prep_poll_add(sqe, fd, (unsigned)events);
		io_uring_sqe_set_data64(sqe, user_data(0, OP_POLL));
		p->ops++;
		p->polling = true;
		p->poll_events = events;
	}
	return true;
}

static int on_completion(struct pipe *p, struct io_uring_cqe *cqe)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	unsigned slot = (unsigned)(ud >> 2);
	p->ops--;
	switch ((enum op)(ud & 3)) {
	case OP_READ: return on_read(p, slot, cqe->res);
	case OP_POLL:
		p->polling = false;
		return cqe->res < 0 && cqe->res != -ECANCELED && cqe->res != -ENOENT ? cqe->res
										     : 0;
	case OP_POLL_REMOVE:
		p->removing = false;
		return 0;
	}
	return -EPROTO;
}

static unsigned slots_for(const struct job *job, uint64_t budget, uint32_t *ret_slot_size)
{
	uint32_t biggest = 0;
	for (uint32_t i = 0; i < job->manifest->nchunks; i++)
		if (job->manifest->entries[i].stored_len > biggest)
			biggest = job->manifest->entries[i].stored_len;
	/* Records start on cache lines. */
	*ret_slot_size = (STG_CHUNK_HEADER_SIZE + biggest + 63) & ~63u;
	uint64_t n = budget / *ret_slot_size;
	return n < 2 ? 2 : n > MAX_SLOTS ? MAX_SLOTS : (unsigned)n;
}

/* Waits for every operation still in the ring (retrying on EINTR: the
 * buffers must outlive every operation); a poll is removed first. */
static void drain(struct pipe *p)
{
	if (p->polling && !p->removing) {
		struct io_uring_sqe *sqe = get_sqe(p);
		if (sqe) {
			io_uring_prep_poll_remove(sqe, user_data(0, OP_POLL));
			io_uring_sqe_set_data64(sqe, user_data(0, OP_POLL_REMOVE));
			p->ops++;
		}
	}
	while (p->ops > 0) {
		struct io_uring_cqe *cqe;
		io_uring_submit(p->ring);
		int r = io_uring_wait_cqe(p->ring, &cqe);
		if (r == -EINTR || r == -EAGAIN)
			continue;
		if (r < 0) {
			/* Cannot happen with a valid ring; never reuse buffers
			 * still in use. */
			stg_log_errno(STG_LOG_ERROR, r, "io_uring wait");
			abort();
		}
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		io_uring_cqe_seen(p->ring, cqe);
		if (ud != LIBURING_UDATA_TIMEOUT && ud != RING_CANCEL)
			p->ops--;
	}
}

int sender_put(struct server *srv, const struct job *job, const uint32_t *entries, size_t n,
	       const uint8_t *delta_ok)
{
	if (n == 0)
		return 0;
	if (stg_cancelled())
		return -ECANCELED;
	struct pipe *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->srv = srv;
	p->job = job;
	p->ring = &srv->ring;
	for (unsigned i = 0; i < PACK_FDS; i++)
		p->packs[i].fd = -1;
	uint32_t slot_size;
	p->nslots = slots_for(job, srv->fl->slot_budget, &slot_size);
	if (p->nslots > n)
		p->nslots = (unsigned)n;
	struct stg_conn *c = &srv->conn;
	int r = 0;
	uint32_t max = job->manifest->chunk_max;
	if (job->recode || delta_ok) {
		p->raw = malloc(max);
		p->recoded = malloc(stg_chunk_bound(max));
		r = p->raw && p->recoded ? 0 : -ENOMEM;
	}
	if (r == 0 && delta_ok && job->base && job->delta) {
		p->delta_ok = delta_ok;
		p->base_obj = malloc(stg_chunk_bound(max));
		p->base_raw = malloc(max);
		p->delta_out = malloc(stg_chunk_bound(max) + STG_CHUNK_BASE_SIZE);
		p->whole = malloc(sizeof(*p->whole) * n);
		r = p->base_obj && p->base_raw && p->delta_out && p->whole ? 0 : -ENOMEM;
	}
	if (r == 0)
		r = stg_conn_pool(c, (size_t)p->nslots * slot_size, STG_POOL_SEND);
	for (unsigned i = 0; i < p->nslots && r == 0; i++)
		p->slots[i].buf = c->pool + (size_t)i * slot_size;

	size_t next = 0;
	struct __kernel_timespec ts = {.tv_sec = srv->fl->timeout_ms / 1000,
				       .tv_nsec = (srv->fl->timeout_ms % 1000) * 1000000ll};
	while (r == 0) {
		/* Replies first: the slots they free are refilled before the
		 * wait, which would otherwise wait for nothing at all. */
		r = take_replies(p);
		if (r < 0 || p->done == n)
			break;
		for (unsigned i = 0; i < p->nslots && next < n && r == 0; i++)
			if (p->slots[i].state == FREE)
				r = start_read(p, i, entries[next++]);
		if (r == 0)
			r = post_ready(p);
		if (r == 0) {
			r = stg_conn_flush(c);
			if (r == -EAGAIN)
				r = 0;
		}
		if (r < 0)
			break;
		bool wait = watch_conn(p);
		io_uring_submit(p->ring);
		struct io_uring_cqe *cqe;
		if (wait) {
			do
				r = io_uring_wait_cqe_timeout(p->ring, &cqe, &ts);
			while (r == -EINTR); /* a stop and continue, a debugger */
			if (r == -ETIME) {
				r = -ETIMEDOUT;
				break;
			}
			if (r < 0)
				break;
		}
		unsigned head, seen = 0;
		io_uring_for_each_cqe(p->ring, head, cqe)
		{
			seen++;
			/* Older kernels time the wait out with a request of liburing's. */
			if (io_uring_cqe_get_data64(cqe) == LIBURING_UDATA_TIMEOUT)
				continue;
			if (io_uring_cqe_get_data64(cqe) == RING_CANCEL) {
				r = r ? r : -ECANCELED;
				continue;
			}
			if (r == 0)
				r = on_completion(p, cqe);
			else
				p->ops--;
		}
		io_uring_cq_advance(p->ring, seen);
	}
	drain(p);
	for (unsigned i = 0; i < PACK_FDS; i++)
		if (p->packs[i].fd >= 0)
			close(p->packs[i].fd);
	stg_conn_pool_idle(c);
	free(p->raw);
	free(p->recoded);
	free(p->base_obj);
	free(p->base_raw);
	free(p->delta_out);
	uint32_t *whole = p->whole;
	size_t nwhole = p->nwhole;
	free(p);
	if (r == 0 && nwhole)
		r = sender_put(srv, job, whole, nwhole, NULL);
	free(whole);
	return r;
}
