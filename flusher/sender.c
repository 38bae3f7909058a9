/* SPDX-License-Identifier: MIT */
/* The chunk pipeline to one server, on the worker's io_uring: records are
 * read from the cache's packs into a bounded set of slots while earlier ones
 * are on the wire and later replies come back, so the disk, the network and
 * the server's work overlap. One send is in flight at a time (two sends on a
 * stream socket could interleave their bytes); reads run ahead of it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chunk.h"
#include "internal.h"
#include "log.h"
#include "pack.h"
#include "util.h"
#include "wire.h"

#define MAX_SLOTS 32
#define PACK_FDS 8
#define REPLY_BUF (64u << 10)

enum op { OP_READ = 1, OP_SEND = 2, OP_RECV = 3 };
enum slot_state { FREE, READING, READY, SENDING, WAITING };

struct slot {
	uint8_t *buf; /* frame header, then the record */
	uint32_t len; /* of the record */
	uint32_t entry;
	uint32_t tag;
	uint32_t sent;
	uint32_t ready_seq;
	enum slot_state state;
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
	uint32_t ready_counter;
	unsigned ops; /* submitted, not yet completed */
	bool sending, receiving;
	uint8_t reply[REPLY_BUF];
	size_t reply_fill;
	size_t done;
	int error;
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
	s->sent = 0;
	s->state = READING;
	struct io_uring_sqe *sqe = get_sqe(p);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, fd, s->buf + STG_WIRE_HEADER_SIZE, s->len, e->offset);
	io_uring_sqe_set_data64(sqe, user_data(i, OP_READ));
	p->ops++;
	return 0;
}

static int start_send(struct pipe *p)
{
	/* The slot that became ready first goes first. */
	int best = -1;
	for (unsigned i = 0; i < p->nslots; i++)
		if (p->slots[i].state == READY &&
		    (best < 0 || p->slots[i].ready_seq < p->slots[best].ready_seq))
			best = (int)i;
	if (best < 0)
		return 0;
	struct slot *s = &p->slots[best];
	s->state = SENDING;
	struct io_uring_sqe *sqe = get_sqe(p);
	if (!sqe)
		return -EBUSY;
	uint32_t total = STG_WIRE_HEADER_SIZE + s->len;
	io_uring_prep_send(sqe, p->srv->conn.fd, s->buf + s->sent, total - s->sent,
			   MSG_NOSIGNAL | MSG_WAITALL);
	io_uring_sqe_set_data64(sqe, user_data((unsigned)best, OP_SEND));
	p->ops++;
	p->sending = true;
	return 0;
}

static int start_recv(struct pipe *p)
{
	struct io_uring_sqe *sqe = get_sqe(p);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_recv(sqe, p->srv->conn.fd, p->reply + p->reply_fill,
			   REPLY_BUF - p->reply_fill, 0);
	io_uring_sqe_set_data64(sqe, user_data(0, OP_RECV));
	p->ops++;
	p->receiving = true;
	return 0;
}

static int on_read(struct pipe *p, unsigned i, int res)
{
	struct slot *s = &p->slots[i];
	const struct stg_manifest_entry *e = &p->job->manifest->entries[s->entry];
	struct stg_chunk_header h;
	if (res < 0 || (uint32_t)res != s->len ||
	    stg_chunk_header_decode(s->buf + STG_WIRE_HEADER_SIZE, s->len, &e->hash, e->raw_len,
				    &h) < 0) {
		char hex[STG_HASH_HEX_LEN + 1];
		stg_hash_hex(&e->hash, hex);
		int r = res < 0 ? res : -EBADMSG;
		p->srv->local_failure = true;
		return stg_log_errno(STG_LOG_ERROR, r,
				     "chunk %s of '%s' in pack %016llx: the cache's record is "
				     "unreadable",
				     hex, p->job->path, (unsigned long long)e->pack);
	}
	s->tag = p->srv->conn.next_tag++;
	stg_wire_header_encode(s->buf, STG_MSG_PUT_CHUNK, s->len, s->tag);
	s->state = READY;
	s->ready_seq = p->ready_counter++;
	return 0;
}

static int on_send(struct pipe *p, unsigned i, int res)
{
	struct slot *s = &p->slots[i];
	p->sending = false;
	if (res <= 0)
		return res < 0 ? res : -EPIPE;
	s->sent += (uint32_t)res;
	p->srv->conn.bytes_sent += (uint64_t)res;
	if (s->sent < STG_WIRE_HEADER_SIZE + s->len) {
		/* A short send (a signal): the rest goes next, before any other. */
		s->state = READY;
		s->ready_seq = 0;
		return 0;
	}
	s->state = WAITING;
	return 0;
}

static int on_reply(struct pipe *p, const struct stg_msg *m)
{
	for (unsigned i = 0; i < p->nslots; i++) {
		struct slot *s = &p->slots[i];
		if ((s->state != SENDING && s->state != WAITING) || s->tag != m->tag)
			continue;
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
		/* A reply can overtake our send's completion; the slot is freed
		 * only once both are in. */
		if (s->state == WAITING)
			s->state = FREE;
		else
			s->tag = 0;
		p->done++;
		p->srv->stats.chunks_sent++;
		return 0;
	}
	return -EPROTO;
}

static int on_recv(struct pipe *p, int res)
{
	p->receiving = false;
	if (res <= 0)
		return res < 0 ? res : -EPIPE;
	p->reply_fill += (size_t)res;
	size_t off = 0;
	while (p->reply_fill - off >= STG_WIRE_HEADER_SIZE) {
		struct stg_wire_header h;
		int r = stg_wire_header_decode(p->reply + off, STG_WIRE_MAX_ERROR_TEXT + 64, &h);
		if (r < 0)
			return r;
		if (p->reply_fill - off - STG_WIRE_HEADER_SIZE < h.length)
			break;
		struct stg_msg m;
		r = stg_wire_decode(&h, p->reply + off + STG_WIRE_HEADER_SIZE, &m);
		if (r < 0)
			return r;
		r = on_reply(p, &m);
		if (r < 0)
			return r;
		off += STG_WIRE_HEADER_SIZE + h.length;
	}
	memmove(p->reply, p->reply + off, p->reply_fill - off);
	p->reply_fill -= off;
	return 0;
}

static int on_completion(struct pipe *p, struct io_uring_cqe *cqe)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	unsigned slot = (unsigned)(ud >> 2);
	p->ops--;
	switch ((enum op)(ud & 3)) {
	case OP_READ: return on_read(p, slot, cqe->res);
	case OP_SEND: {
		int r = on_send(p, slot, cqe->res);
		/* Its reply came first: the slot is done. */
		if (r == 0 && p->slots[slot].state == WAITING && p->slots[slot].tag == 0)
			p->slots[slot].state = FREE;
		return r;
	}
	case OP_RECV: return on_recv(p, cqe->res);
	}
	return -EPROTO;
}

static unsigned slots_for(const struct job *job, uint64_t budget, uint32_t *ret_slot_size)
{
	uint32_t biggest = 0;
	for (uint32_t i = 0; i < job->manifest->nchunks; i++)
		if (job->manifest->entries[i].stored_len > biggest)
			biggest = job->manifest->entries[i].stored_len;
	*ret_slot_size = STG_WIRE_HEADER_SIZE + STG_CHUNK_HEADER_SIZE + biggest;
	uint64_t n = budget / *ret_slot_size;
	return n < 2 ? 2 : n > MAX_SLOTS ? MAX_SLOTS : (unsigned)n;
}

#define OP_RECV_DATA 4

/* Waits for one of our operations to complete (retrying on EINTR: the
 * buffers must outlive every operation). Returns OP_RECV_DATA for a receive
 * that got bytes, else 0. */
static int wait_one(struct pipe *p)
{
	for (;;) {
		struct io_uring_cqe *cqe;
		io_uring_submit(p->ring);
		int r = io_uring_wait_cqe(p->ring, &cqe);
		if (r == -EINTR || r == -EAGAIN)
			continue;
		if (r < 0) {
			/* Cannot happen with a valid ring; never free buffers still
			 * in use: keep them (a leak, not a corruption). */
			stg_log_errno(STG_LOG_ERROR, r, "io_uring wait");
			abort();
		}
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(p->ring, cqe);
		if (ud == LIBURING_UDATA_TIMEOUT)
			continue;
		p->ops--;
		return (ud & 3) == OP_RECV && res > 0 ? OP_RECV_DATA : 0;
	}
}

/* Waits for every operation still in the ring after a failure: the socket is
 * shut down first, so that none of them can wait for the peer. */
static void drain(struct pipe *p)
{
	shutdown(p->srv->conn.fd, SHUT_RDWR);
	while (p->ops > 0)
		wait_one(p);
}

int sender_put(struct server *srv, const struct job *job, const uint32_t *entries, size_t n)
{
	if (n == 0)
		return 0;
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
	int r = 0;
	for (unsigned i = 0; i < p->nslots && r == 0; i++) {
		p->slots[i].buf = malloc(slot_size);
		if (!p->slots[i].buf)
			r = -ENOMEM;
	}
	/* io_uring waits on the socket itself; on a non-blocking one it would
	 * hand back EAGAIN instead. */
	int fd = srv->conn.fd;
	int fl = fcntl(fd, F_GETFL);
	if (r == 0 && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
		r = -errno;

	size_t next = 0;
	struct __kernel_timespec ts = {.tv_sec = srv->fl->timeout_ms / 1000,
				       .tv_nsec = (srv->fl->timeout_ms % 1000) * 1000000ll};
	while (r == 0 && p->done < n) {
		for (unsigned i = 0; i < p->nslots && next < n && r == 0; i++)
			if (p->slots[i].state == FREE)
				r = start_read(p, i, entries[next++]);
		if (r == 0 && !p->sending)
			r = start_send(p);
		if (r == 0 && !p->receiving)
			r = start_recv(p);
		if (r < 0)
			break;
		io_uring_submit(p->ring);
		struct io_uring_cqe *cqe;
		do
			r = io_uring_wait_cqe_timeout(p->ring, &cqe, &ts);
		while (r == -EINTR); /* a stop and continue, a debugger */
		if (r == -ETIME) {
			r = -ETIMEDOUT;
			break;
		}
		if (r < 0)
			break;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(p->ring, head, cqe)
		{
			seen++;
			/* Older kernels time the wait out with a request of liburing's. */
			if (io_uring_cqe_get_data64(cqe) == LIBURING_UDATA_TIMEOUT)
				continue;
			if (r == 0)
				r = on_completion(p, cqe);
			else
				p->ops--;
		}
		io_uring_cq_advance(p->ring, seen);
	}
	if (p->ops > 0) {
		if (r == 0) {
			/* Done, with a receive still posted: cancel it. */
			struct io_uring_sqe *sqe = get_sqe(p);
			if (sqe) {
				io_uring_prep_cancel64(sqe, user_data(0, OP_RECV), 0);
				io_uring_sqe_set_data64(sqe, user_data(0, 0));
				p->ops++;
			}
			while (p->ops > 0) {
				/* A reply that raced the cancel would be lost: fail. */
				if (wait_one(p) == OP_RECV_DATA)
					r = -EPROTO;
			}
		} else {
			drain(p);
		}
	}
	if (fl >= 0 && r == 0)
		fcntl(fd, F_SETFL, fl);
	for (unsigned i = 0; i < PACK_FDS; i++)
		if (p->packs[i].fd >= 0)
			close(p->packs[i].fd);
	for (unsigned i = 0; i < p->nslots; i++)
		free(p->slots[i].buf);
	free(p);
	return r;
}
