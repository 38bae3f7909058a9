/* SPDX-License-Identifier: MIT */
/* Framed, authenticated connections with deadlines, over any transport
 * (transport.h). A frame is assembled without blocking (stg_conn_try_recv);
 * the blocking calls wait on the transport between tries, bounded by the
 * connection's timeout. On transports with one-sided operations, chunk
 * objects do not travel in the stream: PUT_CHUNK_REF / GET_CHUNK_REF name a
 * region of the client's pool and the server pulls or pushes the object; the
 * users of a connection still see PUT_CHUNK and CHUNK messages. From
 * protocol version 2 on, every frame after the handshake carries a MAC under
 * a session key of its direction, over its sequence number there: a frame
 * injected, replayed, reordered or dropped by someone on the path fails it. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "chunk.h"
#include "conn.h"
#include "internal.h"
#include "log.h"
#include "transport.h"
#include "util.h"

int stg_conn_refuse(struct stg_conn *c, int r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->error, sizeof(c->error), fmt, ap);
	va_end(ap);
	return r;
}

/* Time left before a deadline (at least 0). */
static int left_ms(int64_t deadline)
{
	int64_t left = deadline - stg_monotonic_ms();
	return left <= 0 ? 0 : left > 60000 ? 60000 : (int)left;
}

/* Waits for progress before the deadline. Returns 0 or -ETIMEDOUT. */
static int wait_until(struct stg_conn *c, bool for_write, int64_t deadline)
{
	for (;;) {
		if (deadline - stg_monotonic_ms() <= 0)
			return -ETIMEDOUT;
		int r = c->t->wait(c, for_write, left_ms(deadline));
		if (r != -ETIMEDOUT)
			return r;
	}
}

const char *stg_conn_transport(const struct stg_conn *c)
{
	return c->t ? c->t->name : "none";
}

/* Frames up to this size share one buffer per connection, kept for the
 * next; a larger one gets a buffer of its own size, taken from the
 * connection's budget (if any) and given back once the frame is done with. */
#define SMALL_FRAME (64u << 10)

/* Frees the receive buffer if it is larger than keep bytes. */
static void release_buffer(struct stg_conn *c, size_t keep)
{
	if (c->cap <= keep)
		return;
	free(c->buf);
	if (c->budget && c->cap > SMALL_FRAME)
		stg_conn_budget_give(c->budget, c->budget_uid, c->cap);
	c->buf = NULL;
	c->cap = 0;
}

/* Room for a body of len bytes in c->buf. Returns 0, -ENOMEM, -ENOBUFS
 * (the budget stayed spent for the connection's timeout) or -ECANCELED
 * (budget_wait gave the wait up). */
static int frame_buffer(struct stg_conn *c, size_t len)
{
	/* The previous frame is done with: a large buffer goes back. */
	release_buffer(c, SMALL_FRAME);
	if (len <= c->cap)
		return 0;
	size_t want = len <= SMALL_FRAME ? (len < 4096 ? 4096 : len) : len;
	if (want > SMALL_FRAME && c->budget) {
		int r = stg_conn_budget_take(c->budget, c->budget_uid, want, c->timeout_ms,
					     c->budget_wait, c);
		if (r < 0)
			return r;
		c->body_since_ms = stg_monotonic_ms();
	}
	uint8_t *nb = malloc(want);
	if (!nb) {
		if (want > SMALL_FRAME && c->budget) {
			/* Gives the bytes back (with the small buffer). */
			c->cap = want;
			release_buffer(c, 0);
		}
		return -ENOMEM;
	}
	free(c->buf);
	c->buf = nb;
	c->cap = want;
	return 0;
}

void stg_conn_close(struct stg_conn *c)
{
	if (c->t)
		c->t->close(c); /* first: it unregisters the pool */
	c->t = NULL;
	if (c->pool)
		munmap(c->pool, c->pool_size);
	c->pool = NULL;
	c->pool_size = 0;
	release_buffer(c, 0);
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_off = c->out_cap = 0;
	explicit_bzero(c->key_tx, sizeof(c->key_tx));
	explicit_bzero(c->key_rx, sizeof(c->key_rx));
}

/* What is queued to go next: the frame or header in tx, the body, its MAC.
 * Returns a pointer to the offset of that part, or NULL when all is sent. */
static size_t *tx_next(struct stg_conn *c, const uint8_t **ret_p, size_t *ret_n)
{
	if (c->tx_off < c->tx_len) {
		*ret_p = c->tx + c->tx_off;
		*ret_n = c->tx_len - c->tx_off;
		return &c->tx_off;
	}
	if (c->tx_body_off < c->tx_body_len) {
		*ret_p = c->tx_body + c->tx_body_off;
		*ret_n = c->tx_body_len - c->tx_body_off;
		return &c->tx_body_off;
	}
	if (c->tx_mac_off < c->tx_mac_len) {
		*ret_p = c->tx_mac + c->tx_mac_off;
		*ret_n = c->tx_mac_len - c->tx_mac_off;
		return &c->tx_mac_off;
	}
	return NULL;
}

static bool tx_pending(struct stg_conn *c)
{
	const uint8_t *p;
	size_t n;
	return tx_next(c, &p, &n) != NULL || stg_conn_sending(c);
}

bool stg_conn_sending(const struct stg_conn *c)
{
	return c->out_off < c->out_len;
}

void stg_conn_queue_replies(struct stg_conn *c)
{
	c->queue_replies = true;
}

/* Writes the queued replies as far as the peer takes them. */
static int flush_out(struct stg_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t w = c->t->write(c, c->out + c->out_off, c->out_len - c->out_off);
		if (w < 0)
			return (int)w;
		c->out_off += (size_t)w;
		c->bytes_sent += (uint64_t)w;
	}
	c->out_off = c->out_len = 0;
	if (c->out_cap > SMALL_FRAME) {
		/* A large reply's memory goes back once it is out. */
		free(c->out);
		c->out = NULL;
		c->out_cap = 0;
	}
	return 0;
}

/* Queues len bytes of buf after the replies queued, writing what the peer
 * takes at once. Returns 0 or -errno (-ENOMEM; a failed write). */
static int queue_out(struct stg_conn *c, const void *buf, size_t len)
{
	if (!stg_conn_sending(c)) {
		while (len > 0) {
			ssize_t w = c->t->write(c, buf, len);
			if (w == -EAGAIN)
				break;
			if (w < 0)
				return (int)w;
			buf = (const uint8_t *)buf + w;
			len -= (size_t)w;
			c->bytes_sent += (uint64_t)w;
		}
		if (len == 0)
			return 0;
	}
	if (c->out_len + len > c->out_cap) {
		size_t cap = c->out_cap ? c->out_cap : 4096;
		while (cap < c->out_len + len)
			cap *= 2;
		uint8_t *nb = realloc(c->out, cap);
		if (!nb)
			return -ENOMEM;
		c->out = nb;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, buf, len);
	c->out_len += len;
	return 0;
}

static void tx_reset(struct stg_conn *c)
{
	c->tx_len = c->tx_off = 0;
	c->tx_body = NULL;
	c->tx_body_len = c->tx_body_off = 0;
	c->tx_mac_len = c->tx_mac_off = 0;
}

int stg_conn_flush(struct stg_conn *c)
{
	const uint8_t *p;
	size_t n, *off;
	while ((off = tx_next(c, &p, &n))) {
		ssize_t w = c->t->write(c, p, n);
		if (w < 0)
			return (int)w;
		*off += (size_t)w;
		c->bytes_sent += (uint64_t)w;
	}
	tx_reset(c);
	return flush_out(c);
}

/* Sends everything queued before the deadline. */
static int flush_until(struct stg_conn *c, int64_t deadline)
{
	for (;;) {
		int r = stg_conn_flush(c);
		if (r != -EAGAIN)
			return r;
		r = wait_until(c, true, deadline);
		if (r < 0)
			return r;
	}
}

/* Sends everything queued, then len bytes of buf, before the deadline. */
static int send_until(struct stg_conn *c, const void *buf, size_t len, int64_t deadline)
{
	if (c->queue_replies)
		return queue_out(c, buf, len);
	int r = flush_until(c, deadline);
	if (r < 0)
		return r;
	const uint8_t *p = buf;
	while (len > 0) {
		ssize_t n = c->t->write(c, p, len);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			c->bytes_sent += (uint64_t)n;
			continue;
		}
		if (n != -EAGAIN)
			return (int)n;
		r = wait_until(c, true, deadline);
		if (r < 0)
			return r;
	}
	return 0;
}

int stg_conn_send(struct stg_conn *c, const void *buf, size_t len)
{
	return send_until(c, buf, len, stg_monotonic_ms() + c->timeout_ms);
}

/* The version of the frames this side sends: the one chosen, or during the
 * handshake the oldest, which every peer reads. */
static uint8_t frame_version(const struct stg_conn *c)
{
	return c->version ? c->version : STG_WIRE_VERSION_OLDEST;
}

/* Encodes m into out (cap bytes) as this connection's next frame, sealed
 * with its MAC when the connection has them. Returns the length or 0. */
static size_t encode_frame(struct stg_conn *c, const struct stg_msg *m, uint8_t *out, size_t cap)
{
	struct stg_msg f = *m;
	if (!f.version)
		f.version = frame_version(c);
	size_t n = stg_wire_encode(&f, out, cap);
	if (n && c->macs)
		n = stg_wire_seal(out, n, cap, c->key_tx, c->seq_tx++);
	return n;
}

int stg_conn_send_msg(struct stg_conn *c, const struct stg_msg *m)
{
	size_t n = stg_wire_encoded_size(m);
	if (n == 0)
		return -EINVAL;
	n += STG_WIRE_MAC_SIZE;
	uint8_t small[512 + STG_WIRE_MAC_SIZE];
	uint8_t *buf = n <= sizeof(small) ? small : malloc(n);
	if (!buf)
		return -ENOMEM;
	n = encode_frame(c, m, buf, n);
	int r = n ? stg_conn_send(c, buf, n) : -EINVAL;
	c->frames_sent += r == 0;
	if (buf != small)
		free(buf);
	return r;
}

int stg_conn_send_error(struct stg_conn *c, uint32_t tag, int negerr, const char *fmt, ...)
{
	char text[STG_WIRE_MAX_ERROR_TEXT + 1];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(text))
		n = sizeof(text) - 1;
	/* Only printable ASCII travels in an ERROR. */
	for (int i = 0; i < n; i++)
		if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] > 0x7e)
			text[i] = '?';
	c->errors_sent++;
	struct stg_msg m = {.type = STG_MSG_ERROR, .tag = tag};
	m.error.code = stg_wire_error_from_errno(negerr);
	m.error.text = text;
	m.error.text_len = (uint32_t)n;
	return stg_conn_send_msg(c, &m);
}


/* Queues a chunk object: on a one-sided transport a reference to it, else
 * the frame header with the object as its body. */
static int queue_bulk(struct stg_conn *c, uint8_t type, uint32_t tag, const uint8_t *obj,
		      uint32_t len)
{
	c->frames_sent++;
	if (c->t->one_sided && type == STG_MSG_PUT_CHUNK) {
		if (!c->authenticated || c->pool_use != STG_POOL_SEND || obj < c->pool || obj + len > c->pool + c->pool_size)
			return -EINVAL; /* only the pool is exposed */
		struct stg_msg m = {.type = STG_MSG_PUT_CHUNK_REF, .tag = tag};
		m.put_chunk_ref.addr = (uint64_t)(uintptr_t)obj;
		m.put_chunk_ref.rkey = c->t->pool_rkey(c);
		m.put_chunk_ref.len = len;
		c->tx_len = encode_frame(c, &m, c->tx, sizeof(c->tx));
		c->tx_off = 0;
		return c->tx_len ? 0 : -EINVAL;
	}
	struct stg_wire_header h = {.version = frame_version(c), .type = type, .length = len,
				    .tag = tag};
	if (c->macs)
		h.flags = STG_WIRE_FLAG_MAC;
	stg_wire_header_encode(c->tx, &h);
	c->tx_len = STG_WIRE_HEADER_SIZE;
	c->tx_off = 0;
	c->tx_body = obj;
	c->tx_body_len = len;
	c->tx_body_off = 0;
	/* The MAC covers the object's header only (stg_wire_mac_covered): it
	 * names the content hash, against which the payload is verified. */
	c->tx_mac_len = c->tx_mac_off = 0;
	if (c->macs) {
		int r = stg_wire_frame_mac(c->key_tx, c->seq_tx++, c->tx, obj, c->tx_mac);
		if (r < 0)
			return r;
		c->tx_mac_len = STG_WIRE_MAC_SIZE;
	}
	return 0;
}

int stg_conn_post_bulk(struct stg_conn *c, uint8_t type, uint32_t tag, const uint8_t *obj,
		       uint32_t len)
{
	if (tx_pending(c))
		return -EAGAIN;
	int r = queue_bulk(c, type, tag, obj, len);
	if (r < 0)
		return r;
	r = stg_conn_flush(c);
	return r == -EAGAIN ? 0 : r;
}

int stg_conn_send_bulk(struct stg_conn *c, uint8_t type, uint32_t tag, const uint8_t *obj,
		       uint32_t len)
{
	int64_t deadline = stg_monotonic_ms() + c->timeout_ms;
	if (c->t->one_sided && type == STG_MSG_CHUNK && c->landing && c->landing_tag == tag) {
		/* The reply to a GET_CHUNK_REF: written into the region the
		 * client named for this request, and nowhere else. (A plain
		 * GET_CHUNK gets its object in the stream, as over TCP.) */
		c->landing = false;
		if (len > c->landing_cap)
			return stg_conn_send_error(c, tag, -EBADMSG,
						   "the chunk object (%u bytes) exceeds the %u "
						   "bytes given for it", len, c->landing_cap);
		int r = stg_conn_pool(c, len, STG_POOL_LOCAL);
		if (r < 0)
			return r;
		memcpy(c->pool, obj, len);
		r = c->t->push(c, len, c->landing_addr, c->landing_rkey);
		if (r < 0)
			return r;
		struct stg_msg m = {.type = STG_MSG_CHUNK_REF, .tag = tag};
		m.chunk_ref.len = len;
		return stg_conn_send_msg(c, &m);
	}
	int r = c->queue_replies ? 0 : flush_until(c, deadline);
	if (r == 0)
		r = queue_bulk(c, type, tag, obj, len);
	if (r == 0 && c->queue_replies) {
		/* Copied into the queue: the object stays the caller's. */
		r = queue_out(c, c->tx, c->tx_len);
		if (r == 0)
			r = queue_out(c, obj, len);
		if (r == 0)
			r = queue_out(c, c->tx_mac, c->tx_mac_len);
		tx_reset(c);
		return r;
	}
	if (r == 0)
		r = flush_until(c, deadline);
	if (r < 0)
		tx_reset(c); /* nothing of the caller's may stay queued */
	return r;
}

/* A frame is complete: decodes it, and turns the references of one-sided
 * transports into the messages they stand for. */
static int finish_frame(struct stg_conn *c, struct stg_msg *ret)
{
	struct stg_wire_header h;
	int r = stg_wire_header_decode(c->hdr, UINT32_MAX, &h);
	c->hdr_got = 0;
	c->in_body = false;
	if (r < 0)
		return r;
	if (c->macs) {
		/* Checked before anything of the frame is believed: the MAC
		 * proves its sender, and its number that nothing was replayed,
		 * reordered or dropped before it. */
		uint8_t want[STG_WIRE_MAC_SIZE];
		r = stg_wire_frame_mac(c->key_rx, c->seq_rx, c->hdr, c->buf, want);
		if (r < 0)
			return stg_conn_refuse(c, r, "cannot compute the MAC of frame %llu",
				      (unsigned long long)c->seq_rx);
		if (!stg_auth_mac_equal(want, c->buf + h.length))
			return stg_conn_refuse(c, -EBADE,
				      "frame %llu of the connection fails its MAC: forged, "
				      "replayed, reordered or dropped on the way",
				      (unsigned long long)c->seq_rx);
		c->seq_rx++;
	}
	struct stg_msg m;
	r = stg_wire_decode(&h, c->buf, &m);
	if (r < 0)
		return stg_conn_refuse(c, r, "malformed %s", stg_msg_type_name(h.type));
	c->frames_received++;
	switch (m.type) {
	case STG_MSG_ERROR:
		/* Kept for the caller's message, whichever request it answers
		 * (tag 0: the server's last word before it closes). */
		stg_conn_refuse(c, 0, "%.*s", (int)m.error.text_len, m.error.text);
		break;
	case STG_MSG_PUT_CHUNK_REF: {
		if (!c->t->one_sided || !c->authenticated)
			return stg_conn_refuse(c, -EPROTO, "PUT_CHUNK_REF is not valid here");
		struct stg_msg_put_chunk_ref ref = m.put_chunk_ref;
		r = stg_conn_pool(c, ref.len, STG_POOL_LOCAL);
		if (r < 0)
			return r;
		r = c->t->pull(c, ref.addr, ref.rkey, ref.len);
		if (r < 0)
			return r;
		m.type = STG_MSG_PUT_CHUNK;
		m.put_chunk.obj = c->pool;
		m.put_chunk.len = ref.len;
		break;
	}
	case STG_MSG_GET_CHUNK_REF: {
		if (!c->t->one_sided || !c->authenticated)
			return stg_conn_refuse(c, -EPROTO, "GET_CHUNK_REF is not valid here");
		struct stg_msg_get_chunk_ref ref = m.get_chunk_ref;
		c->landing = true;
		c->landing_tag = m.tag;
		c->landing_addr = ref.addr;
		c->landing_rkey = ref.rkey;
		c->landing_cap = ref.cap;
		m.type = STG_MSG_GET_CHUNK;
		m.get_chunk.hash = ref.hash;
		break;
	}
	case STG_MSG_CHUNK_REF: {
		if (!c->t->one_sided || !c->landing || c->landing_tag != m.tag ||
		    m.chunk_ref.len > c->landing_cap)
			return stg_conn_refuse(c, -EPROTO, "CHUNK_REF answers no GET_CHUNK_REF");
		uint32_t len = m.chunk_ref.len;
		c->landing = false;
		m.type = STG_MSG_CHUNK;
		m.chunk.obj = c->pool;
		m.chunk.len = len;
		break;
	}
	default:
		break;
	}
	*ret = m;
	return 0;
}

/* Is a frame's header what this point of the connection allows? During the
 * handshake, any version this build reads and no MAC; then the version
 * chosen, with a MAC from version 2 on. */
static int check_header(struct stg_conn *c, const struct stg_wire_header *h)
{
	bool mac = h->flags & STG_WIRE_FLAG_MAC;
	if (!c->version)
		return mac ? stg_conn_refuse(c, -EPROTO, "a frame with a MAC before authentication") : 0;
	if (h->version != c->version)
		return stg_conn_refuse(c, -EPROTO, "a frame of protocol version %u on a connection of version %u",
			      h->version, c->version);
	if (mac != c->macs)
		return stg_conn_refuse(c, -EPROTO, mac ? "a frame with a MAC on a connection without"
					      : "a frame without the MAC it must carry");
	return 0;
}

int stg_conn_try_recv(struct stg_conn *c, uint32_t max_body, struct stg_msg *ret)
{
	while (!c->in_body) {
		ssize_t n = c->t->read(c, c->hdr + c->hdr_got, STG_WIRE_HEADER_SIZE - c->hdr_got);
		if (n == 0)
			return c->hdr_got == 0 ? -EPIPE
					       : stg_conn_refuse(c, -EPROTO, "the peer closed within a frame");
		if (n < 0)
			return (int)n;
		c->hdr_got += (size_t)n;
		c->bytes_received += (uint64_t)n;
		if (c->hdr_got < STG_WIRE_HEADER_SIZE)
			continue;
		struct stg_wire_header h;
		int r = stg_wire_header_decode(c->hdr, max_body, &h);
		if (r < 0)
			return stg_conn_refuse(c, r, "malformed frame header");
		r = check_header(c, &h);
		if (r < 0)
			return r;
		size_t body = stg_wire_frame_size(&h) - STG_WIRE_HEADER_SIZE;
		r = frame_buffer(c, body);
		if (r < 0) {
			c->hdr_got = 0;
			if (r == -ENOBUFS)
				c->unread = body;
			return r;
		}
		c->body_len = (uint32_t)body;
		c->body_got = 0;
		c->in_body = true;
	}
	while (c->body_got < c->body_len) {
		ssize_t n = c->t->read(c, c->buf + c->body_got, c->body_len - c->body_got);
		if (n == 0)
			return stg_conn_refuse(c, -EPROTO, "the peer closed within a frame");
		if (n < 0)
			return (int)n;
		c->body_got += (size_t)n;
		c->bytes_received += (uint64_t)n;
	}
	return finish_frame(c, ret);
}

/* A large frame keeps its memory while others wait for some only if its
 * body arrives at this rate at least (on average, after a grace): a frame
 * whose sender stalls must not keep everyone else's frames out. */
#define MIN_RATE_BYTES_PER_S (1u << 20)
#define MIN_RATE_GRACE_MS 2000

bool stg_conn_receiving(const struct stg_conn *c)
{
	return c->hdr_got > 0 || c->in_body;
}

bool stg_conn_holds_large_frame(const struct stg_conn *c)
{
	return c->in_body && c->budget && c->cap > SMALL_FRAME;
}

bool stg_conn_too_slow(struct stg_conn *c)
{
	if (!c->in_body || !c->budget || c->cap <= SMALL_FRAME ||
	    !stg_conn_budget_contended(c->budget))
		return false;
	int64_t ms = stg_monotonic_ms() - c->body_since_ms;
	if (ms < MIN_RATE_GRACE_MS || (uint64_t)c->body_got * 1000 >= (uint64_t)ms * MIN_RATE_BYTES_PER_S)
		return false;
	stg_conn_refuse(c, -ENOBUFS, "its frame of %u bytes arrived at %llu KiB/s (%zu bytes in "
			"%lld ms) while others waited for frame memory",
			c->body_len, (unsigned long long)((uint64_t)c->body_got * 1000 / 1024 / (uint64_t)ms),
			c->body_got, (long long)ms);
	return true;
}

int stg_conn_recv(struct stg_conn *c, uint32_t max_body, struct stg_msg *ret)
{
	int64_t deadline = stg_monotonic_ms() + c->timeout_ms;
	for (;;) {
		int r = stg_conn_try_recv(c, max_body, ret);
		if (r != -EAGAIN)
			return r;
		if (stg_conn_too_slow(c))
			return -ENOBUFS;
		/* In slices while a large frame arrives, to check its rate. */
		int64_t until = deadline;
		if (stg_conn_holds_large_frame(c) && until - stg_monotonic_ms() > STG_CONN_RATE_CHECK_MS)
			until = stg_monotonic_ms() + STG_CONN_RATE_CHECK_MS;
		r = wait_until(c, false, until);
		if (r == -ETIMEDOUT && until != deadline)
			continue;
		if (r < 0)
			return r;
	}
}

int stg_conn_skip(struct stg_conn *c)
{
	int64_t deadline = stg_monotonic_ms() + c->timeout_ms;
	uint8_t scratch[16384];
	while (c->unread > 0) {
		ssize_t n = c->t->read(c, scratch,
				       c->unread < sizeof(scratch) ? c->unread : sizeof(scratch));
		if (n == 0)
			return -EPIPE;
		if (n == -EAGAIN) {
			int r = wait_until(c, false, deadline);
			if (r < 0)
				return r;
			continue;
		}
		if (n < 0)
			return (int)n;
		c->unread -= (size_t)n;
		c->bytes_received += (uint64_t)n;
	}
	return 0;
}

int stg_conn_wait(struct stg_conn *c, int timeout_ms)
{
	if (stg_conn_receiving(c))
		return 0;
	/* Between frames: an idle connection holds no large buffer. */
	release_buffer(c, SMALL_FRAME);
	return c->t->wait(c, false, timeout_ms);
}

void stg_conn_rest(struct stg_conn *c)
{
	if (!stg_conn_receiving(c))
		release_buffer(c, 0);
	if (!stg_conn_sending(c)) {
		free(c->out);
		c->out = NULL;
		c->out_len = c->out_off = c->out_cap = 0;
	}
	stg_conn_pool_idle(c);
}

int stg_conn_pollable(struct stg_conn *c, short *events)
{
	return c->t->pollable(c, tx_pending(c), events);
}

int stg_conn_call(struct stg_conn *c, struct stg_msg *req, uint8_t want, struct stg_msg *ret)
{
	c->error[0] = '\0';
	req->tag = c->next_tag++;
	struct stg_msg sent = *req;
	if (c->t->one_sided && req->type == STG_MSG_GET_CHUNK) {
		/* The object is to be written into our pool. */
		if (!c->authenticated || c->pool_size < STG_CHUNK_HEADER_SIZE ||
		    c->pool_use != STG_POOL_RECEIVE)
			return -EINVAL;
		sent.type = STG_MSG_GET_CHUNK_REF;
		sent.get_chunk_ref.hash = req->get_chunk.hash;
		sent.get_chunk_ref.addr = (uint64_t)(uintptr_t)c->pool;
		sent.get_chunk_ref.rkey = c->t->pool_rkey(c);
		sent.get_chunk_ref.cap = c->pool_size > UINT32_MAX ? UINT32_MAX
								     : (uint32_t)c->pool_size;
		c->landing = true;
		c->landing_tag = req->tag;
		c->landing_cap = sent.get_chunk_ref.cap;
	}
	int r = stg_conn_send_msg(c, &sent);
	struct stg_msg m;
	if (r == 0)
		r = stg_conn_recv(c, STG_WIRE_MAX_BODY, &m);
	c->landing = false;
	if (r < 0)
		return r;
	if (m.type == STG_MSG_ERROR && (m.tag == req->tag || m.tag == 0))
		return stg_wire_error_to_errno(m.error.code);
	if (m.tag != req->tag)
		return stg_conn_refuse(c, -EPROTO, "a reply to another request");
	if (m.type != want)
		return stg_conn_refuse(c, -EPROTO, "expected %s, got %s", stg_msg_type_name(want),
			      stg_msg_type_name(m.type));
	*ret = m;
	return 0;
}
