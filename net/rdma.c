/* SPDX-License-Identifier: MIT */
/* The RDMA transport. One RC queue pair per connection, set up with rdma_cm.
 *
 * The stream (every framed message) travels as two-sided SEND_WITH_IMM into
 * RECV_DEPTH receive buffers of MSG_SIZE bytes that each side posts once and
 * reposts as the reader consumes them. Credits bound the sender: it may use
 * only the receive buffers the peer has returned (the immediate value of each
 * SEND carries the count the sender gives back), so a slow reader stops its
 * peer instead of being overrun. The last credit is kept for a bare credit
 * return, so that two peers can never both wait for credits.
 *
 * Chunk objects travel one-sided: the client's pool is registered once and
 * the server pulls (RDMA READ, at most rd_atom reads outstanding, in pieces)
 * or pushes (RDMA WRITE) exactly the region a request names.
 *
 * Waits poll the completion queue for a bounded moment, then sleep on an
 * epoll set of the completion channel, the rdma_cm event channel and the
 * process's cancel descriptor, so a disconnect wakes them as well as a
 * completion, and a stop ends them (-ECANCELED). */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "cancel.h"
#include "conn.h"
#include "log.h"
#include "transport.h"
#include "util.h"
#include "thread.h"

#define MSG_SIZE (32u << 10)
#define RECV_DEPTH 16
#define SEND_DEPTH 16
#define CREDIT_RETURN (RECV_DEPTH / 2)
#define PIECE (256u << 10) /* bytes of one RDMA READ or WRITE */
#define MAX_RD_ATOM 16
#define MAX_INLINE 64
#define BUSY_POLL_NS 20000 /* before sleeping on the completion channel */

#define PRIV_MAGIC "SHRD"
#define PRIV_VERSION 1
#define PRIV_LEN 12

enum wr_kind { WR_RECV = 1, WR_SEND = 2, WR_CREDIT = 3, WR_READ = 4, WR_WRITE = 5 };

struct rdma_conn {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *comp;
	struct ibv_cq *cq;
	int epfd;
	bool server;
	bool established, closed, armed;
	int err; /* the first fatal error */

	uint8_t *rbuf, *sbuf;
	struct ibv_mr *rmr, *smr, *pool_mr;

	/* Received and not yet read, oldest first. */
	uint16_t rq[RECV_DEPTH];
	uint32_t rq_len[RECV_DEPTH];
	unsigned rq_head, rq_n;
	size_t rq_off;

	uint16_t sfree[SEND_DEPTH];
	unsigned nsfree;

	uint32_t peer_msg_size;
	int peer_depth; /* receive buffers the peer announced */
	int credits;   /* receive buffers of the peer we may fill */
	int to_return; /* our reposted buffers not yet announced */
	unsigned credit_sends; /* bare credit returns not completed */

	unsigned ops_out; /* RDMA READs and WRITEs in flight */
	unsigned ops_wait; /* move() sleeps until ops_out is below this */
	int ops_err;
	unsigned rd_atom;
	uint32_t max_inline;
};

static struct rdma_conn *impl(struct stg_conn *c)
{
	return c->impl;
}

static uint64_t wr_id(enum wr_kind kind, unsigned idx)
{
	return (uint64_t)kind | ((uint64_t)idx << 8);
}

static void fail(struct rdma_conn *r, int err)
{
	if (r->err == 0)
		r->err = err;
}

static int post_recv(struct rdma_conn *r, unsigned idx)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(r->rbuf + (size_t)idx * MSG_SIZE),
			      .length = MSG_SIZE,
			      .lkey = r->rmr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id(WR_RECV, idx), .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad;
	int e = ibv_post_recv(r->id->qp, &wr, &bad);
	if (e) {
		fail(r, -e);
		return -e;
	}
	return 0;
}

/* A bare SEND_WITH_IMM that gives receive buffers back. */
static void return_credits(struct rdma_conn *r)
{
	if (r->to_return < CREDIT_RETURN || r->credits < 1 || !r->established || r->err)
		return;
	struct ibv_send_wr wr = {.wr_id = wr_id(WR_CREDIT, 0),
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED,
				 .imm_data = htobe32((uint32_t)r->to_return)};
	struct ibv_send_wr *bad;
	int e = ibv_post_send(r->id->qp, &wr, &bad);
	if (e) {
		fail(r, -e);
		return;
	}
	r->credits--;
	r->to_return = 0;
	r->credit_sends++;
}

static void on_completion(struct rdma_conn *r, const struct ibv_wc *wc)
{
	enum wr_kind kind = (enum wr_kind)(wc->wr_id & 0xff);
	unsigned idx = (unsigned)(wc->wr_id >> 8);
	if (wc->status != IBV_WC_SUCCESS) {
		/* Once the queue pair is in error (a disconnect, or an error
		 * already recorded), every outstanding request completes
		 * flushed; any other status is the error itself. */
		if (wc->status == IBV_WC_WR_FLUSH_ERR) {
			r->closed = true;
		} else {
			stg_log(STG_LOG_WARN, "rdma: a %s failed: %s",
				kind == WR_READ	   ? "read of the peer's memory"
				: kind == WR_WRITE ? "write into the peer's memory"
				: kind == WR_RECV  ? "receive"
						   : "send",
				ibv_wc_status_str(wc->status));
			fail(r, wc->status == IBV_WC_REM_ACCESS_ERR ? -EACCES : -ECONNRESET);
		}
		if (kind == WR_SEND)
			r->sfree[r->nsfree++] = (uint16_t)idx;
		if (kind == WR_CREDIT)
			r->credit_sends--;
		if (kind == WR_READ || kind == WR_WRITE) {
			r->ops_out--;
			r->ops_err = -EIO;
		}
		return;
	}
	switch (kind) {
	case WR_RECV:
		if (wc->wc_flags & IBV_WC_WITH_IMM) {
			/* A peer never has more buffers to give back than it
			 * announced: more is a peer not speaking our protocol. */
			uint32_t back = be32toh(wc->imm_data);
			if (back > (uint32_t)(r->peer_depth - r->credits)) {
				stg_log(STG_LOG_WARN, "rdma: the peer returned %u receive buffers, "
					"more than it has", back);
				fail(r, -EPROTO);
			} else {
				r->credits += (int)back;
			}
		}
		if (wc->byte_len == 0) {
			/* A bare credit return: the buffer is free again at once. */
			r->to_return++;
			post_recv(r, idx);
			break;
		}
		{
			unsigned at = (r->rq_head + r->rq_n) % RECV_DEPTH;
			r->rq[at] = (uint16_t)idx;
			r->rq_len[at] = wc->byte_len;
			r->rq_n++;
		}
		break;
	case WR_SEND:
		r->sfree[r->nsfree++] = (uint16_t)idx;
		break;
	case WR_CREDIT:
		r->credit_sends--;
		break;
	case WR_READ:
	case WR_WRITE:
		r->ops_out--;
		break;
	}
}

static void cm_events(struct rdma_conn *r)
{
	struct rdma_cm_event *ev;
	while (rdma_get_cm_event(r->ch, &ev) == 0) {
		/* (as an int: librdmacm's enum grows, and what is not named
		 * here is nothing to this connection) */
		switch ((int)ev->event) {
		case RDMA_CM_EVENT_ESTABLISHED:
			r->established = true;
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_TIMEWAIT_EXIT:
			r->closed = true;
			break;
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
			r->closed = true;
			fail(r, -ECONNRESET);
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
}

/* Takes in every completion and connection event there is. */
static void progress(struct rdma_conn *r)
{
	if (r->armed) {
		/* The channel fired (or will): consume its events, or the
		 * descriptor stays readable. */
		struct ibv_cq *cq;
		void *ctx;
		while (ibv_get_cq_event(r->comp, &cq, &ctx) == 0)
			ibv_ack_cq_events(cq, 1);
		r->armed = false;
	}
	cm_events(r);
	struct ibv_wc wc[16];
	int n;
	while ((n = ibv_poll_cq(r->cq, 16, wc)) > 0)
		for (int i = 0; i < n; i++)
			on_completion(r, &wc[i]);
	if (n < 0)
		fail(r, -EIO);
	return_credits(r);
}

static bool can_write(const struct rdma_conn *r)
{
	return r->established && r->nsfree > 0 && r->credits >= 2;
}

static bool ready(const struct rdma_conn *r, bool for_write)
{
	if (r->err || r->closed)
		return true;
	return for_write ? can_write(r) : r->rq_n > 0;
}

/* Requests an event for the next completion; returns true when one came in
 * meanwhile (no event would tell of it). */
static bool arm(struct rdma_conn *r)
{
	if (!r->armed) {
		if (ibv_req_notify_cq(r->cq, 0)) {
			fail(r, -EIO);
			return true;
		}
		r->armed = true;
	}
	struct ibv_wc wc[16];
	int n, got = 0;
	while ((n = ibv_poll_cq(r->cq, 16, wc)) > 0) {
		got += n;
		for (int i = 0; i < n; i++)
			on_completion(r, &wc[i]);
	}
	return got > 0;
}

/* Sleeps until a completion or a connection event, at most timeout_ms (< 0:
 * no limit), after polling for a moment. Returns 0, -ETIMEDOUT or
 * -ECANCELED. */
static int sleep_for_event(struct rdma_conn *r, bool (*done)(struct rdma_conn *, bool), bool arg,
			   int timeout_ms)
{
	int64_t until = stg_now_ns() + BUSY_POLL_NS;
	do {
		progress(r);
		if (done(r, arg))
			return 0;
	} while (stg_now_ns() < until);
	if (arm(r))
		return 0;
	for (;;) {
		if (stg_cancelled())
			return -ECANCELED;
		struct epoll_event ev;
		int n = epoll_wait(r->epfd, &ev, 1, timeout_ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (stg_cancelled())
			return -ECANCELED;
		return n == 0 ? -ETIMEDOUT : 0;
	}
}

static bool ready_cb(struct rdma_conn *r, bool for_write)
{
	return ready(r, for_write);
}

static bool op_done_cb(struct rdma_conn *r, bool unused)
{
	(void)unused;
	return r->ops_out < r->ops_wait || r->err || r->closed;
}

static ssize_t rdma_read(struct stg_conn *c, void *buf, size_t len)
{
	struct rdma_conn *r = impl(c);
	progress(r);
	if (r->rq_n == 0) {
		if (r->err)
			return r->err;
		return r->closed ? 0 : -EAGAIN;
	}
	unsigned idx = r->rq[r->rq_head];
	size_t avail = r->rq_len[r->rq_head] - r->rq_off;
	size_t n = len < avail ? len : avail;
	memcpy(buf, r->rbuf + (size_t)idx * MSG_SIZE + r->rq_off, n);
	r->rq_off += n;
	if (r->rq_off == r->rq_len[r->rq_head]) {
		r->rq_head = (r->rq_head + 1) % RECV_DEPTH;
		r->rq_n--;
		r->rq_off = 0;
		if (!r->closed && !r->err && post_recv(r, idx) == 0) {
			r->to_return++;
			return_credits(r);
		}
	}
	return (ssize_t)n;
}

static ssize_t rdma_write(struct stg_conn *c, const void *buf, size_t len)
{
	struct rdma_conn *r = impl(c);
	progress(r);
	if (r->err)
		return r->err;
	if (r->closed)
		return -EPIPE;
	if (!can_write(r))
		return -EAGAIN;
	size_t n = len;
	if (n > MSG_SIZE)
		n = MSG_SIZE;
	if (n > r->peer_msg_size)
		n = r->peer_msg_size;
	unsigned idx = r->sfree[--r->nsfree];
	uint8_t *p = r->sbuf + (size_t)idx * MSG_SIZE;
	memcpy(p, buf, n);
	struct ibv_sge sge = {.addr = (uintptr_t)p, .length = (uint32_t)n, .lkey = r->smr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id(WR_SEND, idx),
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED |
					       (n <= r->max_inline ? IBV_SEND_INLINE : 0),
				 .imm_data = htobe32((uint32_t)r->to_return)};
	struct ibv_send_wr *bad;
	int e = ibv_post_send(r->id->qp, &wr, &bad);
	if (e) {
		r->sfree[r->nsfree++] = (uint16_t)idx;
		fail(r, -e);
		return -e;
	}
	r->credits--;
	r->to_return = 0;
	return (ssize_t)n;
}

/* Returns only once the stream can move (or has failed), or at the timeout:
 * a completion of something else (a send of ours) does not count. */
static int rdma_wait(struct stg_conn *c, bool for_write, int timeout_ms)
{
	struct rdma_conn *r = impl(c);
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : stg_monotonic_ms() + timeout_ms;
	for (;;) {
		progress(r);
		if (ready(r, for_write))
			return 0;
		int64_t left = deadline - stg_monotonic_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		int e = sleep_for_event(r, ready_cb, for_write,
					timeout_ms < 0 ? -1 : (int)(left > 60000 ? 60000 : left));
		if (e < 0 && e != -ETIMEDOUT)
			return e;
	}
}

static int rdma_pollable(struct stg_conn *c, bool for_write, short *events)
{
	struct rdma_conn *r = impl(c);
	progress(r);
	/* Ready already, or a completion raced the arming: no event will
	 * come for it, so the caller must try again without waiting. */
	*events = ready(r, for_write) || r->rq_n > 0 || arm(r) ? 0 : POLLIN;
	return r->epfd;
}

/* One-sided moves of len bytes between the pool and (addr, rkey), in pieces,
 * at most rd_atom outstanding. */
static int move(struct stg_conn *c, enum ibv_wr_opcode op, uint32_t len, uint64_t addr,
		uint32_t rkey)
{
	struct rdma_conn *r = impl(c);
	if (!r->pool_mr || len > c->pool_size)
		return -EINVAL;
	int64_t deadline = stg_monotonic_ms() + c->timeout_ms;
	uint32_t off = 0;
	r->ops_err = 0;
	while (off < len || r->ops_out > 0) {
		while (off < len && r->ops_out < r->rd_atom && !r->err) {
			uint32_t n = len - off < PIECE ? len - off : PIECE;
			struct ibv_sge sge = {.addr = (uintptr_t)(c->pool + off),
					      .length = n,
					      .lkey = r->pool_mr->lkey};
			struct ibv_send_wr wr = {
				.wr_id = wr_id(op == IBV_WR_RDMA_READ ? WR_READ : WR_WRITE, 0),
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = op,
				.send_flags = IBV_SEND_SIGNALED,
				.wr.rdma = {.remote_addr = addr + off, .rkey = rkey}};
			struct ibv_send_wr *bad;
			int e = ibv_post_send(r->id->qp, &wr, &bad);
			if (e) {
				fail(r, -e);
				break;
			}
			r->ops_out++;
			off += n;
		}
		if (r->err && r->ops_out == 0)
			return r->err;
		unsigned before = r->ops_out;
		progress(r);
		if (r->ops_out < before || (r->err && r->ops_out == 0))
			continue;
		int64_t left = deadline - stg_monotonic_ms();
		if (left <= 0) {
			/* The buffers may still be in use by the device: the
			 * connection is unusable from here on. */
			fail(r, -ETIMEDOUT);
			return -ETIMEDOUT;
		}
		r->ops_wait = before;
		if (sleep_for_event(r, op_done_cb, false, (int)(left > 1000 ? 1000 : left)) ==
		    -ECANCELED) {
			/* As at the deadline: the device may still use the buffers. */
			fail(r, -ECANCELED);
			return -ECANCELED;
		}
	}
	if (r->ops_err)
		return r->err ? r->err : r->ops_err;
	return r->err;
}

static int rdma_pull(struct stg_conn *c, uint64_t addr, uint32_t rkey, uint32_t len)
{
	return move(c, IBV_WR_RDMA_READ, len, addr, rkey);
}

static int rdma_push(struct stg_conn *c, uint32_t len, uint64_t addr, uint32_t rkey)
{
	return move(c, IBV_WR_RDMA_WRITE, len, addr, rkey);
}

static int rdma_pool_register(struct stg_conn *c)
{
	struct rdma_conn *r = impl(c);
	if (r->pool_mr)
		ibv_dereg_mr(r->pool_mr);
	r->pool_mr = NULL;
	/* A server only reads into and writes from its own pool; a client
	 * lets its server reach its pool, in the one way its use needs. */
	int access = IBV_ACCESS_LOCAL_WRITE;
	if (!r->server && c->pool_use == STG_POOL_SEND)
		access |= IBV_ACCESS_REMOTE_READ;
	if (!r->server && c->pool_use == STG_POOL_RECEIVE)
		access |= IBV_ACCESS_REMOTE_WRITE;
	r->pool_mr = ibv_reg_mr(r->pd, c->pool, c->pool_size, access);
	if (!r->pool_mr) {
		int e = errno;
		struct rlimit rl = {0};
		getrlimit(RLIMIT_MEMLOCK, &rl);
		stg_log(STG_LOG_ERROR,
			"rdma: cannot register %zu MiB of buffers: %s (locked-memory limit: %s; "
			"raise it with ulimit -l or limits.conf)",
			c->pool_size >> 20, strerror(e),
			rl.rlim_cur == RLIM_INFINITY ? "unlimited" : "limited");
		return -e;
	}
	return 0;
}

static uint32_t rdma_pool_rkey(struct stg_conn *c)
{
	return impl(c)->pool_mr ? impl(c)->pool_mr->rkey : 0;
}

static bool sends_done_cb(struct rdma_conn *r, bool unused)
{
	(void)unused;
	return (r->nsfree == SEND_DEPTH && r->credit_sends == 0) || r->err || r->closed;
}

static void destroy(struct rdma_conn *r)
{
	if (!r)
		return;
	if (r->id && r->established && !r->closed) {
		/* A disconnect flushes sends not yet on the wire: the last
		 * message (an ERROR saying why) must go out first. */
		int64_t until = stg_monotonic_ms() + 1000;
		while (!sends_done_cb(r, false) && stg_monotonic_ms() < until)
			if (sleep_for_event(r, sends_done_cb, false, 100) == -ECANCELED)
				break;
		rdma_disconnect(r->id);
	}
	if (r->id && r->id->qp)
		rdma_destroy_qp(r->id);
	if (r->pool_mr)
		ibv_dereg_mr(r->pool_mr);
	if (r->rmr)
		ibv_dereg_mr(r->rmr);
	if (r->smr)
		ibv_dereg_mr(r->smr);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->comp)
		ibv_destroy_comp_channel(r->comp);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->id)
		rdma_destroy_id(r->id);
	if (r->ch) {
		/* Events still queued must be acknowledged first. */
		struct rdma_cm_event *ev;
		while (rdma_get_cm_event(r->ch, &ev) == 0)
			rdma_ack_cm_event(ev);
		rdma_destroy_event_channel(r->ch);
	}
	if (r->epfd >= 0)
		close(r->epfd);
	free(r->rbuf);
	free(r->sbuf);
	free(r);
}

static void *destroy_thread(void *arg)
{
	destroy(arg);
	return NULL;
}

/* Destroying a connection whose peer vanished without a disconnect blocks
 * in the kernel (the connection manager waits out its disconnect request,
 * up to about a minute): that wait happens in a thread of its own, so that
 * the caller moves on to the other servers at once. */
static void rdma_close(struct stg_conn *c)
{
	struct rdma_conn *r = impl(c);
	c->impl = NULL;
	if (!r)
		return;
	if (r->established && !r->closed) {
		pthread_attr_t attr;
		pthread_t t;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 64 << 10);
		int e = stg_thread_start(&t, &attr, destroy_thread, r);
		pthread_attr_destroy(&attr);
		if (e == 0)
			return;
	}
	destroy(r);
}

static bool wildcard(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

/* Locked memory is what registration needs: take all the hard limit allows. */
static void raise_memlock(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_MEMLOCK, &rl);
	}
}

static struct rdma_conn *conn_new(bool server)
{
	struct rdma_conn *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->epfd = -1;
	r->server = server;
	return r;
}

/* Protection domain, queues and buffers for r->id (bound to a device). */
static int setup_verbs(struct rdma_conn *r)
{
	struct ibv_context *ctx = r->id->verbs;
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		return -errno;
	r->pd = ibv_alloc_pd(ctx);
	r->comp = r->pd ? ibv_create_comp_channel(ctx) : NULL;
	int cqe = RECV_DEPTH + SEND_DEPTH + RECV_DEPTH + MAX_RD_ATOM + 8;
	r->cq = r->comp ? ibv_create_cq(ctx, cqe, NULL, r->comp, 0) : NULL;
	if (!r->cq)
		return errno ? -errno : -ENOMEM;
	int e = set_nonblock(r->comp->fd);
	if (e < 0)
		return e;
	struct ibv_qp_init_attr qa = {
		.send_cq = r->cq,
		.recv_cq = r->cq,
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = SEND_DEPTH + RECV_DEPTH + MAX_RD_ATOM + 4,
			.max_recv_wr = RECV_DEPTH,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = MAX_INLINE},
	};
	if (rdma_create_qp(r->id, r->pd, &qa)) {
		/* A device without inline sends: without. */
		qa.cap.max_inline_data = 0;
		if (rdma_create_qp(r->id, r->pd, &qa))
			return -errno;
	}
	r->max_inline = qa.cap.max_inline_data;
	r->rbuf = aligned_alloc(4096, (size_t)RECV_DEPTH * MSG_SIZE);
	r->sbuf = aligned_alloc(4096, (size_t)SEND_DEPTH * MSG_SIZE);
	if (!r->rbuf || !r->sbuf)
		return -ENOMEM;
	r->rmr = ibv_reg_mr(r->pd, r->rbuf, (size_t)RECV_DEPTH * MSG_SIZE, IBV_ACCESS_LOCAL_WRITE);
	r->smr = r->rmr ? ibv_reg_mr(r->pd, r->sbuf, (size_t)SEND_DEPTH * MSG_SIZE, 0) : NULL;
	if (!r->smr)
		return -errno;
	for (unsigned i = 0; i < SEND_DEPTH; i++)
		r->sfree[r->nsfree++] = (uint16_t)i;
	for (unsigned i = 0; i < RECV_DEPTH; i++) {
		e = post_recv(r, i);
		if (e < 0)
			return e;
	}
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (r->epfd < 0)
		return -errno;
	struct epoll_event ev = {.events = EPOLLIN};
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->comp->fd, &ev) < 0 ||
	    epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->ch->fd, &ev) < 0 ||
	    (stg_cancel_fd() >= 0 && epoll_ctl(r->epfd, EPOLL_CTL_ADD, stg_cancel_fd(), &ev) < 0))
		return -errno;
	r->rd_atom = (unsigned)(da.max_qp_init_rd_atom < MAX_RD_ATOM ? da.max_qp_init_rd_atom
								      : MAX_RD_ATOM);
	if (r->rd_atom == 0)
		r->rd_atom = 1;
	return 0;
}

static void priv_encode(uint8_t out[PRIV_LEN])
{
	memcpy(out, PRIV_MAGIC, 4);
	out[4] = PRIV_VERSION;
	out[5] = 0;
	stg_put_le16(out + 6, RECV_DEPTH);
	stg_put_le32(out + 8, MSG_SIZE);
}

/* Validates the peer's connection parameters. */
static int priv_decode(struct rdma_conn *r, const void *data, size_t len)
{
	const uint8_t *p = data;
	if (!p || len < PRIV_LEN || memcmp(p, PRIV_MAGIC, 4) != 0 || p[4] != PRIV_VERSION ||
	    p[5] != 0)
		return -EPROTO;
	uint16_t depth = stg_get_le16(p + 6);
	uint32_t msg = stg_get_le32(p + 8);
	if (depth < 2 || depth > 1024 || msg < 4096 || msg > (1u << 20))
		return -EPROTO;
	r->credits = depth;
	r->peer_depth = depth;
	r->peer_msg_size = msg;
	return 0;
}

static void attach(struct stg_conn *c, struct rdma_conn *r, const char *peer, int timeout_ms)
{
	memset(c, 0, sizeof(*c));
	c->t = &stg_rdma_transport;
	c->impl = r;
	c->fd = -1;
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : STG_CONN_TIMEOUT_MS;
	c->next_tag = 1;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
}

/* Waits for the next event on r's channel, of type want. */
static int expect_event(struct rdma_conn *r, enum rdma_cm_event_type want, int64_t deadline,
			char *why, size_t whylen)
{
	for (;;) {
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(r->ch, &ev) == 0) {
			enum rdma_cm_event_type got = ev->event;
			int status = ev->status;
			int r2 = 0;
			if (got == want && want == RDMA_CM_EVENT_ESTABLISHED)
				r2 = priv_decode(r, ev->param.conn.private_data,
						 ev->param.conn.private_data_len);
			rdma_ack_cm_event(ev);
			if (got == want) {
				if (r2 < 0)
					snprintf(why, whylen, "the server's RDMA parameters are "
						 "not stagehand's");
				return r2;
			}
			if (got == RDMA_CM_EVENT_REJECTED) {
				snprintf(why, whylen, "the server does not accept RDMA connections");
				return -ECONNREFUSED;
			}
			snprintf(why, whylen, "%s (%s)", rdma_event_str(got),
				 strerror(status < 0 ? -status : status));
			if (got == RDMA_CM_EVENT_ADDR_ERROR)
				return status == -ETIMEDOUT ? -ETIMEDOUT : -ENODEV;
			return got == RDMA_CM_EVENT_ROUTE_ERROR ? -EHOSTUNREACH : -ECONNRESET;
		}
		if (errno != EAGAIN) {
			snprintf(why, whylen, "rdma_get_cm_event: %s", strerror(errno));
			return -errno;
		}
		int64_t left = deadline - stg_monotonic_ms();
		if (left <= 0) {
			snprintf(why, whylen, "no answer within the timeout (%s)",
				 rdma_event_str(want));
			return -ETIMEDOUT;
		}
		int e = stg_cancel_poll(r->ch->fd, POLLIN, (int)left);
		if (e == -ECANCELED) {
			snprintf(why, whylen, "stopped while connecting");
			return e;
		}
		if (e < 0 && e != -ETIMEDOUT)
			return e;
	}
}

/* Resolves the address to a local device, in attempts of growing length:
 * the first neighbour resolution on a quiet link can be lost, and one long
 * attempt would then spend the whole timeout on it. */
static int resolve_addr(struct rdma_conn *r, struct sockaddr *addr, const char *host,
			int64_t deadline, char *why, size_t whylen)
{
	for (int attempt_ms = 500;; attempt_ms *= 2) {
		if (rdma_create_id(r->ch, &r->id, NULL, RDMA_PS_TCP)) {
			snprintf(why, whylen, "rdma_create_id: %s", strerror(errno));
			return -errno;
		}
		int64_t left = deadline - stg_monotonic_ms();
		if (left <= 0) {
			snprintf(why, whylen, "no RDMA address resolution of %s within the timeout",
				 host);
			return -ETIMEDOUT;
		}
		int t = left < attempt_ms ? (int)left : attempt_ms;
		if (rdma_resolve_addr(r->id, NULL, addr, t)) {
			snprintf(why, whylen, "no RDMA device reaches %s: %s", host, strerror(errno));
			return -errno;
		}
		int e = expect_event(r, RDMA_CM_EVENT_ADDR_RESOLVED, stg_monotonic_ms() + t + 200,
				     why, whylen);
		if (e == -ENODEV)
			snprintf(why, whylen, "no RDMA device reaches %s", host);
		if (e != -ETIMEDOUT)
			return e;
		rdma_destroy_id(r->id);
		r->id = NULL;
	}
}

static int rdma_open(const char *hostport, int connect_ms, int timeout_ms, struct stg_conn *ret,
		     char *why, size_t whylen)
{
	char host[256], port[16];
	why[0] = '\0';
	if (stg_conn_split(hostport, host, sizeof(host), port, sizeof(port)) < 0 ||
	    strcmp(port, "0") == 0)
		return -EINVAL;
	if (timeout_ms <= 0)
		timeout_ms = STG_CONN_TIMEOUT_MS;
	if (connect_ms <= 0)
		connect_ms = timeout_ms;
	raise_memlock();
	struct addrinfo *ai;
	if (stg_conn_resolve(host, port, 0, &ai) != 0) {
		snprintf(why, whylen, "cannot resolve '%s'", host);
		return -EHOSTUNREACH;
	}
	int64_t deadline = stg_monotonic_ms() + connect_ms;
	struct rdma_conn *r = conn_new(false);
	int e = r ? 0 : -ENOMEM;
	if (e == 0 && !(r->ch = rdma_create_event_channel()))
		e = -errno;
	if (e == 0)
		e = set_nonblock(r->ch->fd);
	if (e < 0) {
		snprintf(why, whylen, "cannot open the RDMA connection manager: %s", strerror(-e));
		goto out;
	}
	e = resolve_addr(r, ai->ai_addr, host, deadline, why, whylen);
	if (e == 0 && rdma_resolve_route(r->id, connect_ms))
		e = -errno;
	if (e == 0)
		e = expect_event(r, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, why, whylen);
	if (e < 0)
		goto out;
	e = setup_verbs(r);
	if (e < 0) {
		snprintf(why, whylen, "cannot set up the queue pair on %s: %s",
			 ibv_get_device_name(r->id->verbs->device), strerror(-e));
		goto out;
	}
	struct ibv_device_attr da;
	ibv_query_device(r->id->verbs, &da);
	uint8_t priv[PRIV_LEN];
	priv_encode(priv);
	struct rdma_conn_param cp = {
		.private_data = priv,
		.private_data_len = PRIV_LEN,
		.responder_resources = (uint8_t)(da.max_qp_rd_atom < MAX_RD_ATOM ? da.max_qp_rd_atom
										 : MAX_RD_ATOM),
		.initiator_depth = (uint8_t)r->rd_atom,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	if (rdma_connect(r->id, &cp)) {
		e = -errno;
		snprintf(why, whylen, "rdma_connect: %s", strerror(errno));
		goto out;
	}
	e = expect_event(r, RDMA_CM_EVENT_ESTABLISHED, deadline, why, whylen);
	if (e < 0)
		goto out;
	r->established = true;
	attach(ret, r, hostport, timeout_ms);
	stg_log(STG_LOG_DEBUG, "rdma: connected to %s through %s", hostport,
		ibv_get_device_name(r->id->verbs->device));
	r = NULL;
out:
	freeaddrinfo(ai);
	destroy(r);
	return e;
}

struct rdma_listener {
	struct stg_listener l; /* first: the transport's view */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
};

static void rdma_unlisten(struct stg_listener *sl);

static int rdma_listen_on(const char *host, int port, struct stg_listener **ret, char *why,
			  size_t whylen)
{
	why[0] = '\0';
	raise_memlock();
	char ports[16];
	snprintf(ports, sizeof(ports), "%d", port);
	struct addrinfo *ai;
	if (stg_conn_resolve(host, ports, AI_PASSIVE, &ai) != 0) {
		snprintf(why, whylen, "cannot resolve '%s'", host);
		return -EINVAL;
	}
	struct rdma_listener *l = calloc(1, sizeof(*l));
	int e = l ? 0 : -ENOMEM;
	char dev[64] = "any";
	if (e == 0 && !(l->ch = rdma_create_event_channel()))
		e = -errno;
	if (e == 0)
		e = set_nonblock(l->ch->fd);
	if (e == 0 && rdma_create_id(l->ch, &l->id, NULL, RDMA_PS_TCP))
		e = -errno;
	if (e < 0) {
		snprintf(why, whylen, "cannot open the RDMA connection manager: %s", strerror(-e));
		goto fail;
	}
	if (rdma_bind_addr(l->id, ai->ai_addr)) {
		e = -errno;
		snprintf(why, whylen, "cannot bind %s:%d: %s", host, port, strerror(errno));
		goto fail;
	}
	/* A wildcard address binds to every device; a specific one must
	 * belong to a device (loopback, for one, has none). */
	if (l->id->verbs)
		snprintf(dev, sizeof(dev), "%s", ibv_get_device_name(l->id->verbs->device));
	else if (!wildcard(ai->ai_addr)) {
		e = -ENODEV;
		snprintf(why, whylen, "no RDMA device has the address %s", host);
		goto fail;
	}
	if (rdma_listen(l->id, 128)) {
		e = -errno;
		snprintf(why, whylen, "rdma_listen: %s", strerror(errno));
		goto fail;
	}
	freeaddrinfo(ai);
	l->l.t = &stg_rdma_transport;
	l->l.fd = l->ch->fd;
	l->l.port = port;
	snprintf(l->l.where, sizeof(l->l.where), "%s:%d (device %s)", host, port, dev);
	*ret = &l->l;
	return 0;
fail:
	freeaddrinfo(ai);
	rdma_unlisten(l ? &l->l : NULL);
	return e;
}

static void rdma_unlisten(struct stg_listener *sl)
{
	if (!sl)
		return;
	struct rdma_listener *l = (struct rdma_listener *)sl;
	if (l->id)
		rdma_destroy_id(l->id);
	if (l->ch)
		rdma_destroy_event_channel(l->ch);
	free(l);
}

static int rdma_take(struct stg_listener *sl, stg_admit_fn *admit, void *admit_arg,
		     int conn_timeout_ms, struct stg_conn *ret)
{
	struct rdma_listener *l = (struct rdma_listener *)sl;
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(l->ch, &ev) < 0)
		return errno == EAGAIN ? -EAGAIN : -errno;
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		rdma_ack_cm_event(ev);
		return -EAGAIN;
	}
	struct rdma_cm_id *id = ev->id;
	struct rdma_conn *r = conn_new(true);
	int e = r ? priv_decode(r, ev->param.conn.private_data, ev->param.conn.private_data_len)
		  : -ENOMEM;
	uint8_t want_rd = ev->param.conn.initiator_depth;
	uint8_t want_resp = ev->param.conn.responder_resources;
	rdma_ack_cm_event(ev);
	char peer[128] = "?";
	struct sockaddr *sa = rdma_get_peer_addr(id);
	char h[64] = "?", p[16];
	if (getnameinfo(sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						      : sizeof(struct sockaddr_in),
			h, sizeof(h), p, sizeof(p), NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(peer, sizeof(peer), "%s:%s (rdma)", h, p);
	char why[200];
	/* No descriptor to evict it by: an RDMA connection closes itself. */
	int slot = e < 0 ? -1 : admit(admit_arg, h, peer, -1, why, sizeof(why));
	if (slot < 0) {
		if (e == -ENOMEM)
			stg_log(STG_LOG_WARN, "%s: refused: out of memory", peer);
		else if (e < 0)
			stg_log(STG_LOG_WARN, "%s: refused: not a stagehand RDMA client", peer);
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		free(r);
		return e == -ENOMEM ? -ECONNABORTED : e < 0 ? e : -EBUSY;
	}
	if (!(r->ch = rdma_create_event_channel()) || set_nonblock(r->ch->fd) < 0 ||
	    rdma_migrate_id(id, r->ch)) {
		stg_log_errno(STG_LOG_WARN, errno ? -errno : -EIO, "%s: cannot accept the RDMA "
			      "connection", peer);
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		destroy(r);
		return -ECONNABORTED;
	}
	r->id = id;
	e = setup_verbs(r);
	if (e == 0) {
		struct ibv_device_attr da;
		ibv_query_device(id->verbs, &da);
		unsigned rd = r->rd_atom < want_rd ? r->rd_atom : want_rd;
		r->rd_atom = rd ? rd : 1;
		uint8_t priv[PRIV_LEN];
		priv_encode(priv);
		unsigned resp = (unsigned)da.max_qp_rd_atom < want_resp ? (unsigned)da.max_qp_rd_atom
									: want_resp;
		struct rdma_conn_param cp = {
			.private_data = priv,
			.private_data_len = PRIV_LEN,
			.responder_resources = (uint8_t)(resp > MAX_RD_ATOM ? MAX_RD_ATOM : resp),
			.initiator_depth = (uint8_t)r->rd_atom,
			.retry_count = 7,
			.rnr_retry_count = 7,
		};
		if (rdma_accept(id, &cp))
			e = errno ? -errno : -EIO;
	}
	if (e < 0) {
		stg_log_errno(STG_LOG_WARN, e, "%s: cannot accept the RDMA connection", peer);
		rdma_reject(id, NULL, 0);
		destroy(r);
		return -ECONNABORTED;
	}
	/* ESTABLISHED arrives on the connection's own channel: its first send
	 * waits for it. */
	attach(ret, r, peer, conn_timeout_ms);
	return 0;
}

const struct stg_transport stg_rdma_transport = {
	.name = "rdma",
	.connect = rdma_open,
	.listen = rdma_listen_on,
	.accept = rdma_take,
	.unlisten = rdma_unlisten,
	.read = rdma_read,
	.write = rdma_write,
	.wait = rdma_wait,
	.pollable = rdma_pollable,
	.close = rdma_close,
	.one_sided = true,
	.pool_register = rdma_pool_register,
	.pool_rkey = rdma_pool_rkey,
	.pull = rdma_pull,
	.push = rdma_push,
};
