/* SPDX-License-Identifier: MIT */
/* Connections over real TCP on loopback: a frame that finds no room in the
 * frame memory budget is refused in a way its sender can read. */
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
	CHECK(stg_conn_budget_take(&b, BIG, 0) == 0); /* held by someone else */
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
	stg_conn_budget_give(&b, BIG);
}

int main(void)
{
	test_refused_frame_is_read();
	return harness_done();
}
