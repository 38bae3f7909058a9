/* SPDX-License-Identifier: MIT */
/* The workers: threads that run session steps (session.c), which may block
 * on the store, on the frame budget or on a slow client, within the
 * session's deadlines. A step handed over waits in a queue for a free
 * worker. There is one worker per core; when a step has waited a few
 * milliseconds and none is free (all are blocked), one more starts, and
 * such a one ends after a while without work. So threads follow the steps
 * blocked at once, not the connections held: 10,000 idle connections hold
 * none. When no thread can be started, the step waits for the next free
 * worker instead of being dropped. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "internal.h"
#include "log.h"
#include "thread.h"
#include "util.h"

/* A worker beyond the base with nothing to do this long ends. */
#define IDLE_S 10

/* When a step has waited this long for a worker, none is free and none has
 * begun a step for as long, the workers are blocked (on the disk, the
 * budget, a slow client), not merely busy or short of CPU: one more starts. */
#define STUCK_MS 20

/* A step's stack: the handlers keep frames and paths on it. */
#define STACK_SIZE (256u << 10)

/* A worker waiting for a step. The one that waited the least is woken
 * first, so that those beyond what the load needs stay idle and end. */
struct idler {
	pthread_cond_t wake;
	bool woken;
	struct idler *below; /* in the stack of idle workers */
};

struct workers {
	struct loops *loops;
	pthread_mutex_t lock;
	struct idler *idle_top; /* the idle workers, the latest on top */
	struct session *head, *tail; /* steps to run, first come first */
	unsigned threads, idle;
	unsigned base; /* workers that never end */
	int64_t last_start_ms; /* when a worker last began a step */
	bool said_failed; /* a failure to start one is logged once */
};

static void *worker(void *arg);

/* Called with the lock held. */
static void start_one(struct workers *w)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, STACK_SIZE);
	pthread_t t;
	int r = stg_thread_start(&t, &attr, worker, w);
	pthread_attr_destroy(&attr);
	if (r == 0) {
		w->threads++;
		w->said_failed = false;
	} else if (!w->said_failed) {
		w->said_failed = true;
		stg_log_errno(STG_LOG_WARN, r, "cannot start another worker thread (%u "
			      "running): requests wait for a free one", w->threads);
	}
}

/* Called with the lock held: one more worker when every one is blocked. */
static void grow_if_stuck(struct workers *w)
{
	int64_t now = stg_monotonic_ms();
	if (w->head && w->idle == 0 && now - w->head->queued_ms >= STUCK_MS &&
	    now - w->last_start_ms >= STUCK_MS) {
		start_one(w);
		w->last_start_ms = now; /* the next one, if this one blocks too */
	}
}

static struct session *pop(struct workers *w)
{
	struct session *s = w->head;
	w->head = s->next;
	if (!w->head)
		w->tail = NULL;
	s->next = NULL;
	return s;
}

/* Called with the lock held: waits (as the top idler) until woken for a
 * step, or IDLE_S. Returns whether it was woken. */
static bool wait_idle(struct workers *w, struct idler *me)
{
	me->woken = false;
	me->below = w->idle_top;
	w->idle_top = me;
	w->idle++;
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += IDLE_S;
	while (!me->woken)
		if (pthread_cond_timedwait(&me->wake, &w->lock, &until) == ETIMEDOUT)
			break;
	if (me->woken)
		return true;
	/* Out of the stack (it is short: the idle workers). */
	struct idler **p = &w->idle_top;
	while (*p != me)
		p = &(*p)->below;
	*p = me->below;
	w->idle--;
	return false;
}

static void *worker(void *arg)
{
	struct workers *w = arg;
	struct idler me;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&me.wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->head) {
			if (!wait_idle(w, &me) && !w->head && w->threads > w->base) {
				w->threads--;
				pthread_mutex_unlock(&w->lock);
				pthread_cond_destroy(&me.wake);
				return NULL;
			}
		}
		struct session *s = pop(w);
		w->last_start_ms = stg_monotonic_ms();
		pthread_mutex_unlock(&w->lock);
		bool expired = s->expired;
		s->expired = false;
		enum session_next next = expired ? session_expired(s) : session_step(s);
		loops_park(w->loops, s, next);
		pthread_mutex_lock(&w->lock);
	}
}

void workers_run(struct workers *w, struct session *s)
{
	pthread_mutex_lock(&w->lock);
	s->next = NULL;
	s->queued_ms = stg_monotonic_ms();
	if (w->tail)
		w->tail->next = s;
	else
		w->head = s;
	w->tail = s;
	struct idler *top = w->idle_top;
	if (top) {
		w->idle_top = top->below;
		w->idle--;
		top->woken = true;
		pthread_cond_signal(&top->wake);
	}
	grow_if_stuck(w);
	pthread_mutex_unlock(&w->lock);
}

void workers_tick(struct workers *w)
{
	pthread_mutex_lock(&w->lock);
	grow_if_stuck(w);
	pthread_mutex_unlock(&w->lock);
}

unsigned workers_threads(struct workers *w)
{
	pthread_mutex_lock(&w->lock);
	unsigned n = w->threads;
	pthread_mutex_unlock(&w->lock);
	return n;
}

struct workers *workers_new(struct loops *l, unsigned base)
{
	struct workers *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->loops = l;
	w->base = base;
	pthread_mutex_init(&w->lock, NULL);
	pthread_mutex_lock(&w->lock);
	for (unsigned i = 0; i < base; i++)
		start_one(w);
	bool ok = w->threads == base;
	pthread_mutex_unlock(&w->lock);
	return ok ? w : NULL;
}
