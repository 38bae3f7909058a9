/* SPDX-License-Identifier: MIT */
/* Connections over real TCP on loopback and the frame memory budget: a
 * frame that finds no room is refused in a way its sender can read; a uid
 * holding memory gets no more than its share while another waits; a frame
 * that stalls while others wait loses its memory; a wait can be given up. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "conn.h"
#include "harness.h"
#include "wire.h"

/* Two ends of one TCP connection on loopback. */
static int tcp_pair(int *client, int *server)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		return -1;
	*client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*client < 0 || connect(*client, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -1;
	*server = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	close(l);
	return *server < 0 ? -1 : 0;
}

#define BIG (4u << 20)

struct sender {
	int fd;
	int send_errno; /* of sending the frame, 0 when it all went */
	int reply_type; /* of the frame read back, -errno when none came */
};

/* Sends a PUT_CHUNK of BIG bytes, as a client does, then reads the reply's
 * header. */
static void *send_big(void *arg)
{
	struct sender *s = arg;
	uint8_t *f = calloc(1, STG_WIRE_HEADER_SIZE + BIG);
	struct stg_wire_header h = {.version = STG_WIRE_VERSION, .type = STG_MSG_PUT_CHUNK,
				    .length = BIG, .tag = 5};
	stg_wire_header_encode(f, &h);
	for (size_t off = 0; off < STG_WIRE_HEADER_SIZE + BIG;) {
		ssize_t n = send(s->fd, f + off, STG_WIRE_HEADER_SIZE + BIG - off, MSG_NOSIGNAL);
		if (n < 0) {
			s->send_errno = errno;
			break;
		}
		off += (size_t)n;
	}
	free(f);
	uint8_t hdr[STG_WIRE_HEADER_SIZE];
	size_t got = 0;
	while (got < sizeof(hdr)) {
		ssize_t n = recv(s->fd, hdr + got, sizeof(hdr) - got, 0);
		if (n <= 0) {
			s->reply_type = n < 0 ? -errno : -EPIPE;
			return NULL;
		}
		got += (size_t)n;
	}
	s->reply_type = hdr[5];
	return NULL;
}

/* The budget is spent for longer than the connection's timeout: the frame
 * is refused with ENOBUFS, and its sender still reads the ERROR sent then,
 * not a reset (its body was read and dropped). */
static void test_refused_frame_is_read(void)
{
	int cfd = -1, sfd = -1;
	CHECK(tcp_pair(&cfd, &sfd) == 0);
	struct stg_conn_budget b;
	stg_conn_budget_init(&b, BIG);
	CHECK(stg_conn_budget_take(&b, 1, BIG, 0, NULL, NULL) == 0); /* held by someone else */
	struct stg_conn c;
	stg_conn_init(&c, sfd, "test", 200);
	c.budget = &b;
	struct sender s = {.fd = cfd};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, send_big, &s) == 0);
	struct stg_msg m;
	CHECK_EQ(stg_conn_recv(&c, STG_WIRE_MAX_BODY, &m), -ENOBUFS);
	CHECK(stg_conn_send_error(&c, 0, -EBUSY, "no memory for the frame") == 0);
	CHECK_EQ(stg_conn_skip(&c), 0);
	stg_conn_close(&c);
	pthread_join(t, NULL);
	CHECK_EQ(s.send_errno, 0);
	CHECK_EQ(s.reply_type, STG_MSG_ERROR);
	close(cfd);
	stg_conn_budget_give(&b, 1, BIG);
}

struct taker {
	struct stg_conn_budget *b;
	uint32_t uid;
	size_t n;
	size_t after; /* takes once this much is held by others */
	int r;
};

static void *take(void *arg)
{
	struct taker *t = arg;
	for (int i = 0; i < 60000 && stg_conn_budget_held(t->b) < t->after; i++)
		usleep(1000);
	t->r = stg_conn_budget_take(t->b, t->uid, t->n, 60000, NULL, NULL);
	return NULL;
}

/* Waits (generously) until n takes of b wait. */
static bool waiters(struct stg_conn_budget *b, unsigned n)
{
	for (int i = 0; i < 60000; i++) {
		pthread_mutex_lock(&b->lock);
		unsigned w = b->waiting;
		pthread_mutex_unlock(&b->lock);
		if (w == n)
			return true;
		usleep(1000);
	}
	return false;
}

/* uid 1 holds 90 of 100 while no one waits; uid 2 then waits for 20, and
 * uid 1 gets nothing more (it holds more than its half) until 2 has its
 * 20; then 1 may take again. */
static void test_fair_share(void)
{
	struct stg_conn_budget b;
	stg_conn_budget_init(&b, 100);
	CHECK_EQ(stg_conn_budget_take(&b, 1, 90, 0, NULL, NULL), 0);
	struct taker two = {.b = &b, .uid = 2, .n = 20};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, take, &two) == 0);
	CHECK(waiters(&b, 1));
	/* Room for 5 more, but uid 2 waits and 1 holds more than 100 / 2. */
	CHECK_EQ(stg_conn_budget_take(&b, 1, 5, 300, NULL, NULL), -ENOBUFS);
	stg_conn_budget_give(&b, 1, 90);
	pthread_join(t, NULL);
	CHECK_EQ(two.r, 0);
	CHECK_EQ(stg_conn_budget_take(&b, 1, 80, 0, NULL, NULL), 0);
	stg_conn_budget_give(&b, 1, 80);
	stg_conn_budget_give(&b, 2, 20);
	CHECK_EQ(stg_conn_budget_held(&b), 0);
	CHECK_EQ(b.nusers, 0);
}

static int wait_calls;

static bool give_up_at_third(void *arg, bool waiting)
{
	(void)arg;
	return waiting && ++wait_calls == 3;
}

/* A waiting take tells its caller, which may give the wait up. */
static void test_wait_given_up(void)
{
	struct stg_conn_budget b;
	stg_conn_budget_init(&b, 100);
	CHECK_EQ(stg_conn_budget_take(&b, 1, 100, 0, NULL, NULL), 0);
	CHECK_EQ(stg_conn_budget_take(&b, 2, 1, 60000, give_up_at_third, NULL), -ECANCELED);
	CHECK_EQ(wait_calls, 3);
	CHECK_EQ(b.waiting, 0);
	stg_conn_budget_give(&b, 1, 100);
	CHECK_EQ(b.nusers, 0);
}

/* Sends the header of a PUT_CHUNK of BIG bytes and one body byte, then
 * nothing until the other end closes. */
static void *send_header_and_stall(void *arg)
{
	struct sender *s = arg;
	uint8_t f[STG_WIRE_HEADER_SIZE + 1] = {0};
	struct stg_wire_header h = {.version = STG_WIRE_VERSION, .type = STG_MSG_PUT_CHUNK,
				    .length = BIG, .tag = 5};
	stg_wire_header_encode(f, &h);
	if (send(s->fd, f, sizeof(f), MSG_NOSIGNAL) != (ssize_t)sizeof(f))
		s->send_errno = errno;
	char c;
	s->reply_type = (int)recv(s->fd, &c, 1, 0);
	return NULL;
}

/* A frame whose sender stalls keeps its memory while no one else wants
 * some; once a take waits, the frame is dropped, saying why, and its
 * memory goes to the one waiting. */
static void test_stalled_frame_dropped(void)
{
	int cfd = -1, sfd = -1;
	CHECK(tcp_pair(&cfd, &sfd) == 0);
	struct stg_conn_budget b;
	stg_conn_budget_init(&b, BIG);
	struct stg_conn c;
	stg_conn_init(&c, sfd, "test", 60000);
	c.budget = &b;
	c.budget_uid = 1;
	struct sender s = {.fd = cfd};
	pthread_t t, w;
	CHECK(pthread_create(&t, NULL, send_header_and_stall, &s) == 0);
	struct taker two = {.b = &b, .uid = 2, .n = BIG, .after = BIG};
	CHECK(pthread_create(&w, NULL, take, &two) == 0);
	struct stg_msg m;
	CHECK_EQ(stg_conn_recv(&c, STG_WIRE_MAX_BODY, &m), -ENOBUFS);
	CHECK(strstr(c.error, "while others waited for frame memory") != NULL);
	stg_conn_close(&c);
	pthread_join(w, NULL);
	CHECK_EQ(two.r, 0);
	pthread_join(t, NULL);
	close(cfd);
	stg_conn_budget_give(&b, 2, BIG);
}

int main(void)
{
	test_refused_frame_is_read();
	test_fair_share();
	test_wait_given_up();
	test_stalled_frame_dropped();
	return harness_done();
}
