/* SPDX-License-Identifier: MIT */
/* Where sessions wait, and the threads that run them (loop.c),
 * private to server/. */
#pragma once

#include "session.h"

/* The event loop (loop.c): sessions waiting for their clients, in one
 * epoll set and one heap of deadlines, and the threads that run their
 * steps. */
struct loops;

/* Starts the loop with threads threads (more start while all are blocked),
 * for sessions holding admission slots below nslots. Returns NULL when it
 * cannot start. */
struct loops *loops_start(struct server *srv, unsigned threads, unsigned nslots);

/* Starts a new session: runs its first step (the challenge) on the calling
 * thread and parks it. */
void loops_add(struct loops *l, struct session *s);

/* The descriptor that becomes readable when every thread has begun a step:
 * the listener then calls loops_watch. */
int loops_watch_fd(const struct loops *l);

/* Starts one more thread if every thread is blocked while sessions are
 * ready. Returns in how many ms to call it again, or -1: not before the
 * watch descriptor is readable again. */
int loops_watch(struct loops *l);

/* Threads running now (for the metrics). */
unsigned loops_threads(struct loops *l);
