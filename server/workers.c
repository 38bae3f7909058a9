/* SPDX-License-Identifier: MIT */
/* The workers: threads that run session steps (session.c), which may block
 * on the store, on the frame budget or on a slow client, within the
 * session's deadlines. A step handed over waits in a queue for a free
 * worker; when none is free, one more starts, and a worker with nothing to
 * do for a while ends. So threads follow the sessions at work, not the
 * connections held: 10,000 idle connections hold none. When no thread can
 * be started, the step waits for the next free worker instead of being
 * dropped. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "internal.h"
#include "log.h"
#include "thread.h"

/* A worker with nothing to do this long ends. */
#define IDLE_S 10

/* A step's stack: the handlers keep frames and paths on it. */
#define STACK_SIZE (256u << 10)

struct workers {
	struct loops *loops;
	pthread_mutex_t lock;
	pthread_cond_t ready;
	struct session *head, *tail; /* steps to run, first come first */
	unsigned queued, threads, idle;
	bool said_failed; /* a failure to start one is logged once */
};

static struct session *pop(struct workers *w)
{
	struct session *s = w->head;
	w->head = s->next;
	if (!w->head)
		w->tail = NULL;
	s->next = NULL;
	w->queued--;
	return s;
}

static void *worker(void *arg)
{
	struct workers *w = arg;
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->head) {
			struct timespec until;
			clock_gettime(CLOCK_MONOTONIC, &until);
			until.tv_sec += IDLE_S;
			w->idle++;
			int r = pthread_cond_timedwait(&w->ready, &w->lock, &until);
			w->idle--;
			if (r == ETIMEDOUT && !w->head) {
				w->threads--;
				pthread_mutex_unlock(&w->lock);
				return NULL;
			}
		}
		struct session *s = pop(w);
		pthread_mutex_unlock(&w->lock);
		enum session_next next;
		if (s->expired) {
			session_expired(s);
			next = SESSION_CLOSE;
		} else {
			next = session_step(s);
		}
		loops_park(w->loops, s, next);
		pthread_mutex_lock(&w->lock);
	}
}

void workers_run(struct workers *w, struct session *s)
{
	pthread_mutex_lock(&w->lock);
	s->next = NULL;
	if (w->tail)
		w->tail->next = s;
	else
		w->head = s;
	w->tail = s;
	w->queued++;
	if (w->queued <= w->idle) {
		pthread_cond_signal(&w->ready);
	} else {
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
	pthread_mutex_unlock(&w->lock);
}

unsigned workers_threads(struct workers *w)
{
	pthread_mutex_lock(&w->lock);
	unsigned n = w->threads;
	pthread_mutex_unlock(&w->lock);
	return n;
}

struct workers *workers_new(struct loops *l)
{
	struct workers *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->loops = l;
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->ready, &ca);
	pthread_condattr_destroy(&ca);
	return w;
}
