/* SPDX-License-Identifier: MIT */
/* Memory for large frames, shared by the connections that name it: a
 * server's bound on what its clients make it hold (docs/PROTOCOL.md,
 * "Timeouts and limits"). Each uid gets a fair share while others wait. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What one uid holds, and how many of its takes wait. */
struct stg_budget_user {
	uint32_t uid;
	unsigned waiting;
	size_t held;
};

struct stg_conn_budget {
	pthread_mutex_t lock;
	pthread_cond_t freed;
	size_t limit, held;
	unsigned waiting;              /* takes waiting, of every uid */
	struct stg_budget_user *users; /* the uids holding or waiting */
	size_t nusers, users_cap;
};

void stg_conn_budget_init(struct stg_conn_budget *b, size_t limit);

/* Asked while a take waits (waiting: true, about every 200 ms) and once it
 * is over (false): true gives the wait up. */
typedef bool (*stg_budget_wait_fn)(void *arg, bool waiting);

/* Takes n bytes of b for uid, waiting up to timeout_ms for them. A uid gets
 * more than limit / (uids holding or waiting) only while no other uid
 * waits. Returns 0, -ENOBUFS (timed out) or -ECANCELED (given up). */
int stg_conn_budget_take(struct stg_conn_budget *b, uint32_t uid, size_t n, int timeout_ms,
			 stg_budget_wait_fn wait, void *arg);
void stg_conn_budget_give(struct stg_conn_budget *b, uint32_t uid, size_t n);

/* Whether some take waits now (read without the lock: a hint). */
bool stg_conn_budget_contended(struct stg_conn_budget *b);

/* Bytes held now, of all uids. */
size_t stg_conn_budget_held(struct stg_conn_budget *b);
