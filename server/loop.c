/* SPDX-License-Identifier: MIT */
/* The event loops: where sessions wait for their clients without a thread.
 * A session that would wait (for a login's answer, or between requests) is
 * parked here: its descriptor joins the loop's epoll set (one-shot), its
 * deadline the loop's heap. The loop's thread hands it to a worker when the
 * descriptor becomes ready, or when the deadline passes (then it closes).
 * A connection is in one loop for its whole life (by its admission slot),
 * and only the thread that holds it (a worker, or its loop between events)
 * touches it: one-shot events and the heap hand it over under the loop's
 * lock. Over RDMA the descriptor is the connection's own epoll set of its
 * completion and connection channels (stg_conn_pollable). */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "internal.h"
#include "log.h"
#include "thread.h"
#include "util.h"

#define NOT_WAITING SIZE_MAX

/* A loop's wait is cut to this, so that a deadline set meanwhile by a
 * worker (none is shorter than a second) is late by no more. */
#define MAX_WAIT_MS 200

struct loop {
	struct loops *all;
	int epfd;
	pthread_mutex_t lock;
	struct session **heap; /* waiting sessions, earliest deadline first */
	size_t n, cap;
};

struct loops {
	struct server *srv;
	struct workers *workers;
	unsigned n;
	struct loop loop[];
};

static bool earlier(const struct session *a, const struct session *b)
{
	return a->deadline_ms < b->deadline_ms;
}

static void place(struct loop *lp, size_t i, struct session *s)
{
	lp->heap[i] = s;
	s->heap_ix = i;
}

static void sift_up(struct loop *lp, size_t i)
{
	struct session *s = lp->heap[i];
	while (i > 0 && earlier(s, lp->heap[(i - 1) / 2])) {
		place(lp, i, lp->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	place(lp, i, s);
}

static void sift_down(struct loop *lp, size_t i)
{
	struct session *s = lp->heap[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= lp->n)
			break;
		if (c + 1 < lp->n && earlier(lp->heap[c + 1], lp->heap[c]))
			c++;
		if (!earlier(lp->heap[c], s))
			break;
		place(lp, i, lp->heap[c]);
		i = c;
	}
	place(lp, i, s);
}

/* Called with the lock held. Returns 0 or -ENOMEM. */
static int heap_add(struct loop *lp, struct session *s)
{
	if (lp->n == lp->cap) {
		size_t cap = lp->cap ? 2 * lp->cap : 1024;
		struct session **h = realloc(lp->heap, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		lp->heap = h;
		lp->cap = cap;
	}
	place(lp, lp->n++, s);
	sift_up(lp, lp->n - 1);
	return 0;
}

/* Called with the lock held. */
static void heap_remove(struct loop *lp, struct session *s)
{
	size_t i = s->heap_ix;
	s->heap_ix = NOT_WAITING;
	struct session *last = lp->heap[--lp->n];
	if (i == lp->n)
		return;
	place(lp, i, last);
	if (i > 0 && earlier(last, lp->heap[(i - 1) / 2]))
		sift_up(lp, i);
	else
		sift_down(lp, i);
}

static struct loop *loop_of(struct loops *l, const struct session *s)
{
	return &l->loop[(unsigned)s->slot % l->n];
}

void loops_park(struct loops *l, struct session *s, enum session_next next)
{
	struct loop *lp = loop_of(l, s);
	if (next == SESSION_AGAIN) {
		workers_run(l->workers, s);
		return;
	}
	if (next == SESSION_CLOSE) {
		if (s->polled_fd >= 0)
			epoll_ctl(lp->epfd, EPOLL_CTL_DEL, s->polled_fd, NULL);
		session_free(s);
		return;
	}
	short events;
	int fd = stg_conn_pollable(&s->conn, &events);
	if (fd < 0 || events == 0) {
		/* Ready already (over RDMA, a completion came in as the
		 * channel was armed): its next step runs at once. */
		workers_run(l->workers, s);
		return;
	}
	struct epoll_event ev = {.events = EPOLLONESHOT | EPOLLRDHUP |
					   (events & POLLOUT ? EPOLLOUT : EPOLLIN),
				 .data.ptr = s};
	pthread_mutex_lock(&lp->lock);
	int r = heap_add(lp, s);
	if (r == 0) {
		if (s->polled_fd >= 0 && s->polled_fd != fd)
			epoll_ctl(lp->epfd, EPOLL_CTL_DEL, s->polled_fd, NULL);
		int op = s->polled_fd == fd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
		s->polled_fd = fd;
		if (epoll_ctl(lp->epfd, op, fd, &ev) < 0) {
			r = -errno;
			heap_remove(lp, s);
			s->polled_fd = -1;
		}
	}
	pthread_mutex_unlock(&lp->lock);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "%s: closed: cannot wait for it", s->conn.peer);
		session_free(s);
	}
}

void loops_add(struct loops *l, struct session *s)
{
	s->heap_ix = NOT_WAITING;
	s->polled_fd = -1;
	/* The challenge goes out at once, from the accepting thread (a new
	 * connection's send never waits): a crowd logging in from one address
	 * answers it before newcomers of that address, silent, would take
	 * their place (admit.c). */
	loops_park(l, s, session_step(s));
}

static int wait_ms(struct loop *lp)
{
	pthread_mutex_lock(&lp->lock);
	int64_t left = lp->n ? lp->heap[0]->deadline_ms - stg_monotonic_ms() : MAX_WAIT_MS;
	pthread_mutex_unlock(&lp->lock);
	return left < 0 ? 0 : left > MAX_WAIT_MS ? MAX_WAIT_MS : (int)left;
}

static void *loop_main(void *arg)
{
	struct loop *lp = arg;
	struct workers *w = lp->all->workers;
	struct epoll_event evs[64];
	for (;;) {
		int n = epoll_wait(lp->epfd, evs, 64, wait_ms(lp));
		workers_tick(w);
		for (int i = 0; i < n; i++) {
			struct session *s = evs[i].data.ptr;
			pthread_mutex_lock(&lp->lock);
			/* (Armed only while in the heap: never skipped.) */
			bool waiting = s->heap_ix != NOT_WAITING;
			if (waiting)
				heap_remove(lp, s);
			pthread_mutex_unlock(&lp->lock);
			if (waiting)
				workers_run(w, s);
		}
		/* The deadlines passed: out of the set, so that no event comes
		 * for a session being closed. */
		int64_t now = stg_monotonic_ms();
		pthread_mutex_lock(&lp->lock);
		while (lp->n && lp->heap[0]->deadline_ms <= now) {
			struct session *s = lp->heap[0];
			heap_remove(lp, s);
			epoll_ctl(lp->epfd, EPOLL_CTL_DEL, s->polled_fd, NULL);
			s->polled_fd = -1;
			s->expired = true;
			pthread_mutex_unlock(&lp->lock);
			workers_run(w, s);
			pthread_mutex_lock(&lp->lock);
		}
		pthread_mutex_unlock(&lp->lock);
	}
	return NULL;
}

struct loops *loops_start(struct server *srv, unsigned n)
{
	struct loops *l = calloc(1, sizeof(*l) + n * sizeof(l->loop[0]));
	if (!l)
		return NULL;
	l->srv = srv;
	l->n = n;
	l->workers = workers_new(l, n);
	if (!l->workers)
		return NULL;
	for (unsigned i = 0; i < n; i++) {
		struct loop *lp = &l->loop[i];
		lp->all = l;
		pthread_mutex_init(&lp->lock, NULL);
		lp->epfd = epoll_create1(EPOLL_CLOEXEC);
		pthread_t t;
		if (lp->epfd < 0 || stg_thread_start(&t, NULL, loop_main, lp) != 0) {
			stg_log_errno(STG_LOG_ERROR, -errno, "cannot start event loop %u", i);
			return NULL;
		}
		pthread_detach(t);
	}
	return l;
}

struct workers *loops_workers(struct loops *l)
{
	return l->workers;
}
