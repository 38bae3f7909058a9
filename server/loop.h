/* SPDX-License-Identifier: MIT */
/* Where sessions wait (loop.c) and the threads that run them (workers.c),
 * private to server/. */
#pragma once

#include "session.h"

/* The event loops (loop.c): sessions waiting for their clients, one epoll
 * set and one heap of deadlines per loop, a thread each. */
struct loops;

/* Starts n loops and n workers; the loops hand ready or expired sessions
 * to the workers. Returns NULL when the threads cannot start. */
struct loops *loops_start(struct server *srv, unsigned n);

/* Starts a new session: runs its first step (the challenge) and parks it. */
void loops_add(struct loops *l, struct session *s);

/* The session's step is done: it waits in its loop, or is freed. */
void loops_park(struct loops *l, struct session *s, enum session_next next);

/* The loops' workers. */
struct workers *loops_workers(struct loops *l);

/* The workers (workers.c): threads that run session steps, base of them
 * always, more while steps wait because all are blocked. Returns NULL when
 * the base cannot start. */
struct workers;

struct workers *workers_new(struct loops *l, unsigned base);

/* Starts a worker if the steps queued waited too long (the loops call it
 * at each turn). */
void workers_tick(struct workers *w);

/* Queues a session whose step is to run. */
void workers_run(struct workers *w, struct session *s);

/* Workers running now (for the metrics). */
unsigned workers_threads(struct workers *w);
