/* SPDX-License-Identifier: MIT */
/* A client connection's session on the server (session.c), private to
 * server/. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "conn.h"

struct server;

/* A connection's session: authentication, then requests until it closes.
 * It runs in steps on the loop's threads (loop.c), and between steps
 * waits in an event loop (loop.c) holding no thread and no buffer. */
enum session_state {
	SESSION_NEW,   /* accepted: the challenge is to be sent */
	SESSION_LOGIN, /* waiting for the client's answer */
	SESSION_IDLE,  /* logged in, between requests */
	SESSION_FRAME, /* a request has begun to arrive */
	SESSION_REPLY, /* its reply waits for the client to read it */
};

struct session {
	struct server *srv;
	struct stg_conn conn;
	int slot;
	uint32_t uid;
	enum session_state state;
	struct stg_auth_transcript challenge; /* while it logs in */
	bool said_wait; /* the wait for frame memory is logged once a frame */
	int64_t frame_deadline_ms; /* the request arriving, or the reply going, by then */

	/* Kept by the loop it waits in (loop.c). */
	int64_t deadline_ms;  /* when its wait ends */
	size_t heap_ix;       /* its place among the loop's deadlines */
	int polled_fd;        /* the descriptor the loop watches, -1: none yet */
	uint32_t arming;      /* the number of its wait, which its events carry */
	bool expired;         /* its deadline passed: session_expired is next */
	struct session *next; /* in the queue of steps to run */
};

enum session_next {
	SESSION_WAIT,  /* for the connection to become ready, until deadline_ms */
	SESSION_CLOSE, /* the connection is done with: session_free */
	SESSION_AGAIN, /* its turn is over, with more to do: queued again */
};

/* A session for an accepted, admitted connection (a copy of *c), or NULL
 * when out of memory (the caller closes c and gives its slot back). */
struct session *session_new(struct server *srv, const struct stg_conn *c, int slot);

/* Runs the session until it would wait for its client: sends the
 * challenge, takes the login, or serves the requests that have arrived. */
enum session_next session_step(struct session *s);

/* Its deadline passed while it waited: a frame arriving may wait on (only
 * its rate was due for a check); else logs why it closes, telling the
 * client where it may learn it (BUSY, when it was logging in). */
enum session_next session_expired(struct session *s);

/* Gives its slot back and closes the connection. */
void session_free(struct session *s);
