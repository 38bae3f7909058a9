/* SPDX-License-Identifier: MIT */
/* The event loop: where sessions wait for their clients, and the threads
 * that run their steps (session.c). A session that would wait (for a
 * login's answer, between requests, for a reply to be read) is parked: its
 * descriptor joins one epoll set (one-shot), its deadline one heap. The
 * loop threads, one per core, all wait on that set: each takes one ready
 * session at a time, or one whose deadline passed, and runs its step. So
 * threads follow the steps running, not the connections held: 10,000 idle
 * connections hold none.
 *
 * A step may block (a manifest's fsync, a wait for frame memory, a MUNGE
 * login's second step). When every thread has been in a step for a while
 * and sessions are ready, the threads are blocked, not merely busy: the
 * listener (listen.c), which watches for that (loops_watch), starts one
 * more; one beyond the base ends once another thread has been waiting all
 * along for a while. When no thread can be started, the ready sessions
 * wait for the next free one. A thread done with a session that has more
 * to do takes in the ready ones first, so that every connection gets its
 * turn.
 *
 * Only the thread that holds a session touches it. An event names its
 * session by admission slot and arming (never by pointer), and is taken
 * under the lock only if the session still waits in that arming: an event
 * late for a session that expired, closed or was armed again meanwhile is
 * dropped. Over RDMA the descriptor is the connection's own epoll set of its
 * completion and connection channels (stg_conn_pollable). */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"
#include "log.h"
#include "thread.h"
#include "transport.h"
#include "util.h"

#define NOT_WAITING SIZE_MAX

/* A wait is cut to this, so that a deadline set meanwhile by another
 * thread (none is shorter than a second) is late by no more. */
#define MAX_WAIT_MS 200

/* A thread beyond the base ends when one thread or more has been waiting
 * all this time. */
#define IDLE_MS 10000

/* Ready sessions taken from the set at once before a queued one runs. */
#define TAKE_READY 16

/* When every thread has been in its step this long, none has begun one
 * for as long, and sessions are ready, the threads are blocked (on the
 * disk, the budget, a slow client), not merely busy or short of CPU. */
#define STUCK_MS 20

/* A step's stack: the handlers keep frames and paths on it. */
#define STACK_SIZE (256u << 10)

/* The event that wakes a thread for the queue (not a session's). */
#define WAKE_EVENT UINT64_MAX

struct loops {
	struct server *srv;
	int epfd;
	int wakefd;  /* in the set, one-shot: the queue has a session */
	int watchfd; /* the listener's: every thread has begun a step */
	pthread_mutex_t lock;
	struct session **heap; /* waiting sessions, earliest deadline first */
	size_t n, cap;
	struct session **by_slot; /* the session holding each admission slot */
	unsigned nslots;
	uint32_t armings; /* numbers each arming, for its events */
	struct session *head, *tail; /* steps to run, first come first */
	unsigned threads, base, waiting; /* running, never ending, in epoll_wait */
	int64_t last_start_ms; /* when a thread last began a step */
	int64_t all_busy_ms;   /* when none was left waiting, or one ended */
	bool watched;     /* the listener was told, and watches */
	bool said_failed; /* a failure to start a thread is logged once */
};

static bool earlier(const struct session *a, const struct session *b)
{
	return a->deadline_ms < b->deadline_ms;
}

static void place(struct loops *l, size_t i, struct session *s)
{
	l->heap[i] = s;
	s->heap_ix = i;
}

static void sift_up(struct loops *l, size_t i)
{
	struct session *s = l->heap[i];
	while (i > 0 && earlier(s, l->heap[(i - 1) / 2])) {
		place(l, i, l->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	place(l, i, s);
}

static void sift_down(struct loops *l, size_t i)
{
	struct session *s = l->heap[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= l->n)
			break;
		if (c + 1 < l->n && earlier(l->heap[c + 1], l->heap[c]))
			c++;
		if (!earlier(l->heap[c], s))
			break;
		place(l, i, l->heap[c]);
		i = c;
	}
	place(l, i, s);
}

/* Called with the lock held. Returns 0 or -ENOMEM. */
static int heap_add(struct loops *l, struct session *s)
{
	if (STG_GROW(l->heap, l->cap, l->n + 1) < 0)
		return -ENOMEM;
	place(l, l->n++, s);
	sift_up(l, l->n - 1);
	return 0;
}

/* Called with the lock held. */
static void heap_remove(struct loops *l, struct session *s)
{
	size_t i = s->heap_ix;
	s->heap_ix = NOT_WAITING;
	struct session *last = l->heap[--l->n];
	if (i == l->n)
		return;
	place(l, i, last);
	if (i > 0 && earlier(last, l->heap[(i - 1) / 2]))
		sift_up(l, i);
	else
		sift_down(l, i);
}

/* Called with the lock held: a thread in epoll_wait takes the queue. */
static void wake_one(struct loops *l)
{
	if (l->waiting == 0)
		return;
	uint64_t one = 1;
	if (write(l->wakefd, &one, sizeof(one)) < 0) {
		/* (Only when it holds 2^64 - 2: a wake is pending anyway.) */
	}
}

/* Called with the lock held. wake: the caller will not take the queue
 * itself (it is not a loop thread). */
static void push(struct loops *l, struct session *s, bool wake)
{
	s->next = NULL;
	if (l->tail)
		l->tail->next = s;
	else
		l->head = s;
	l->tail = s;
	if (wake)
		wake_one(l);
}

static struct session *pop(struct loops *l)
{
	struct session *s = l->head;
	l->head = s->next;
	if (!l->head)
		l->tail = NULL;
	s->next = NULL;
	return s;
}

/* Called with the lock held: a thread begins a step. The last one to leave
 * the wait tells the listener, which then watches for blocked threads. */
static void began(struct loops *l, int64_t now)
{
	l->last_start_ms = now;
	if (l->waiting == 0)
		l->all_busy_ms = now;
	if (l->waiting == 0 && !l->watched) {
		l->watched = true;
		uint64_t one = 1;
		if (write(l->watchfd, &one, sizeof(one)) < 0) {
			/* (A wake is pending anyway.) */
		}
	}
}

/* Out of the set and the slot table, then freed. */
static void close_session(struct loops *l, struct session *s)
{
	pthread_mutex_lock(&l->lock);
	if (s->polled_fd >= 0)
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, s->polled_fd, NULL);
	l->by_slot[s->slot] = NULL;
	pthread_mutex_unlock(&l->lock);
	session_free(s);
}

/* wake: as for push. */
static void park(struct loops *l, struct session *s, enum session_next next, bool wake)
{
	if (next == SESSION_CLOSE) {
		close_session(l, s);
		return;
	}
	short events = 0;
	int fd = next == SESSION_AGAIN ? -1 : stg_conn_pollable(&s->conn, &events);
	if (fd < 0 || events == 0) {
		/* More to do, or ready already (over RDMA, a completion came
		 * in as the channel was armed): its next step runs soon. */
		pthread_mutex_lock(&l->lock);
		push(l, s, wake);
		pthread_mutex_unlock(&l->lock);
		return;
	}
	pthread_mutex_lock(&l->lock);
	uint32_t arming = ++l->armings;
	s->arming = arming;
	struct epoll_event ev = {.events = EPOLLONESHOT | EPOLLRDHUP |
					   (events & POLLOUT ? EPOLLOUT : EPOLLIN),
				 .data.u64 = (uint64_t)arming << 32 | (uint32_t)s->slot};
	int r = heap_add(l, s);
	if (r == 0) {
		if (s->polled_fd >= 0 && s->polled_fd != fd)
			epoll_ctl(l->epfd, EPOLL_CTL_DEL, s->polled_fd, NULL);
		int op = s->polled_fd == fd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
		s->polled_fd = fd;
		if (epoll_ctl(l->epfd, op, fd, &ev) < 0) {
			r = -errno;
			heap_remove(l, s);
			s->polled_fd = -1;
		}
	}
	pthread_mutex_unlock(&l->lock);
	if (r < 0) {
		stg_log_errno(STG_LOG_ERROR, r, "%s: closed: cannot wait for it", s->conn.peer);
		close_session(l, s);
	}
}

void loops_add(struct loops *l, struct session *s)
{
	s->heap_ix = NOT_WAITING;
	s->polled_fd = -1;
	pthread_mutex_lock(&l->lock);
	l->by_slot[s->slot] = s;
	if (s->conn.t != &stg_tcp_transport) {
		/* Over RDMA the first send waits for the connection to be
		 * established: on a loop thread, not the listener's. */
		push(l, s, true);
		pthread_mutex_unlock(&l->lock);
		return;
	}
	pthread_mutex_unlock(&l->lock);
	/* The challenge goes out at once, from the listener (a new TCP
	 * connection's send never waits): a crowd logging in from one address
	 * answers it before newcomers of that address, silent, would take
	 * their place (admit.c). */
	park(l, s, session_step(s), true);
}

/* Called with the lock held: the sessions whose deadline passed go to the
 * queue, out of the set, so that no event comes for one being closed. */
static void expire(struct loops *l, int64_t now)
{
	while (l->n && l->heap[0]->deadline_ms <= now) {
		struct session *s = l->heap[0];
		heap_remove(l, s);
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, s->polled_fd, NULL);
		s->polled_fd = -1;
		s->expired = true;
		push(l, s, false);
	}
}

/* Called with the lock held: the session an event is for, if it still
 * waits in the arming the event names. */
static struct session *armed(struct loops *l, uint64_t data)
{
	uint32_t slot = (uint32_t)data;
	struct session *s = slot < l->nslots ? l->by_slot[slot] : NULL;
	if (!s || s->heap_ix == NOT_WAITING || s->arming != (uint32_t)(data >> 32))
		return NULL;
	heap_remove(l, s);
	return s;
}

/* Called with the lock held: the wait's bound, by the earliest deadline. */
static int wait_ms(struct loops *l, int64_t now)
{
	int64_t left = l->n ? l->heap[0]->deadline_ms - now : MAX_WAIT_MS;
	return left < 0 ? 0 : left > MAX_WAIT_MS ? MAX_WAIT_MS : (int)left;
}

/* Called with the lock held: the wake event, taken: armed again. */
static void rearm_wake(struct loops *l)
{
	uint64_t v;
	if (read(l->wakefd, &v, sizeof(v)) < 0) {
		/* (Nothing to take: another thread did.) */
	}
	struct epoll_event again = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = WAKE_EVENT};
	if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, l->wakefd, &again) < 0)
		stg_log_errno(STG_LOG_ERROR, -errno, "cannot wait for the loop's wake event: "
			      "queued requests wait up to %d ms", MAX_WAIT_MS);
}

/* Called with the lock held: the sessions ready in the set go to the
 * queue behind those there, without waiting, so that sessions with more
 * to do (SESSION_AGAIN) take turns with those that wait. */
static void take_ready(struct loops *l)
{
	struct epoll_event evs[TAKE_READY];
	int n = epoll_wait(l->epfd, evs, TAKE_READY, 0);
	for (int i = 0; i < n; i++) {
		if (evs[i].data.u64 == WAKE_EVENT) {
			rearm_wake(l);
			continue;
		}
		struct session *s = armed(l, evs[i].data.u64);
		if (s)
			push(l, s, false);
	}
}

/* The next session whose step is to run, or NULL when this thread, one
 * beyond the base, is not needed: another has been waiting all along for
 * IDLE_MS. */
static struct session *next_step(struct loops *l)
{
	pthread_mutex_lock(&l->lock);
	for (;;) {
		int64_t now = stg_monotonic_ms();
		expire(l, now);
		if (l->head) {
			take_ready(l);
			began(l, now);
			struct session *s = pop(l);
			if (l->head)
				wake_one(l); /* a hand with the rest */
			pthread_mutex_unlock(&l->lock);
			return s;
		}
		/* (Only while another waits: one of them ending unnoticed
		 * while the rest are blocked would leave none to wait.) */
		if (l->threads > l->base && l->waiting > 0 && now - l->all_busy_ms >= IDLE_MS) {
			l->threads--;
			pthread_mutex_unlock(&l->lock);
			return NULL;
		}
		int ms = wait_ms(l, now);
		l->waiting++;
		pthread_mutex_unlock(&l->lock);
		struct epoll_event ev;
		int n = epoll_wait(l->epfd, &ev, 1, ms);
		pthread_mutex_lock(&l->lock);
		l->waiting--;
		if (n == 1 && ev.data.u64 == WAKE_EVENT) {
			rearm_wake(l);
			continue;
		}
		struct session *s = n == 1 ? armed(l, ev.data.u64) : NULL;
		if (s) {
			began(l, stg_monotonic_ms());
			pthread_mutex_unlock(&l->lock);
			return s;
		}
	}
}

static void *loop_thread(void *arg)
{
	struct loops *l = arg;
	struct session *s;
	while ((s = next_step(l))) {
		bool expired = s->expired;
		s->expired = false;
		park(l, s, expired ? session_expired(s) : session_step(s), false);
	}
	return NULL;
}

/* Called with the lock held. */
static void start_thread(struct loops *l)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, STACK_SIZE);
	pthread_t t;
	int r = stg_thread_start(&t, &attr, loop_thread, l);
	pthread_attr_destroy(&attr);
	if (r == 0) {
		pthread_setname_np(t, "loop");
		l->threads++;
		l->said_failed = false;
	} else if (!l->said_failed) {
		l->said_failed = true;
		stg_log_errno(STG_LOG_WARN, r, "cannot start another loop thread (%u running): "
			      "requests wait for a free one", l->threads);
	}
}

int loops_watch(struct loops *l)
{
	uint64_t v;
	if (read(l->watchfd, &v, sizeof(v)) < 0) {
		/* (Not told since the last call.) */
	}
	pthread_mutex_lock(&l->lock);
	int64_t now = stg_monotonic_ms();
	int ms = -1;
	if (l->waiting > 0) {
		l->watched = false;
	} else if (now - l->last_start_ms < STUCK_MS) {
		ms = (int)(STUCK_MS - (now - l->last_start_ms));
	} else {
		/* Ready: a session queued, one whose deadline passed (a slow
		 * frame's rate check may free the memory the threads wait
		 * for), or an event. */
		expire(l, now);
		struct pollfd p = {.fd = l->epfd, .events = POLLIN};
		if (l->head || poll(&p, 1, 0) == 1) {
			start_thread(l);
			l->last_start_ms = now; /* the next one, if this one blocks too */
			l->all_busy_ms = now;
		}
		ms = STUCK_MS;
	}
	pthread_mutex_unlock(&l->lock);
	return ms;
}

int loops_watch_fd(const struct loops *l)
{
	return l->watchfd;
}

unsigned loops_threads(struct loops *l)
{
	pthread_mutex_lock(&l->lock);
	unsigned n = l->threads;
	pthread_mutex_unlock(&l->lock);
	return n;
}

struct loops *loops_start(struct server *srv, unsigned threads, unsigned nslots)
{
	struct loops *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->srv = srv;
	l->base = threads;
	l->nslots = nslots;
	pthread_mutex_init(&l->lock, NULL);
	l->by_slot = calloc(nslots, sizeof(*l->by_slot));
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	l->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	l->watchfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = WAKE_EVENT};
	if (!l->by_slot || l->epfd < 0 || l->wakefd < 0 || l->watchfd < 0 ||
	    epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &ev) < 0) {
		stg_log_errno(STG_LOG_ERROR, l->by_slot ? -errno : -ENOMEM,
			      "cannot set up the event loop");
		return NULL;
	}
	pthread_mutex_lock(&l->lock);
	for (unsigned i = 0; i < threads; i++)
		start_thread(l);
	bool ok = l->threads == threads;
	pthread_mutex_unlock(&l->lock);
	return ok ? l : NULL;
}
