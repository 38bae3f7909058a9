/* SPDX-License-Identifier: MIT */
/* The frame memory budget (budget.h). A take waits while the bytes are not
 * there, or while its uid holds more than its share and another uid waits:
 * so one user's frames cannot keep another's out for longer than they take
 * to arrive (conn.c drops a frame that arrives too slowly while a take
 * waits). */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "budget.h"
#include "util.h"

void stg_conn_budget_init(struct stg_conn_budget *b, size_t limit)
{
	pthread_mutex_init(&b->lock, NULL);
	/* Waits are timed by the clock that does not jump. */
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&b->freed, &ca);
	pthread_condattr_destroy(&ca);
	b->limit = limit;
	b->held = 0;
	b->waiting = 0;
	b->users = NULL;
	b->nusers = b->users_cap = 0;
}

/* uid's entry, made if needed; NULL when out of memory. Lock held. */
static struct stg_budget_user *user(struct stg_conn_budget *b, uint32_t uid)
{
	for (size_t i = 0; i < b->nusers; i++)
		if (b->users[i].uid == uid)
			return &b->users[i];
	if (STG_GROW(b->users, b->users_cap, b->nusers + 1) < 0)
		return NULL;
	b->users[b->nusers] = (struct stg_budget_user){.uid = uid};
	return &b->users[b->nusers++];
}

/* Forgets u once it holds nothing and waits for nothing; the table goes
 * with the last one (a budget that holds nothing holds no memory). Lock
 * held. */
static void forget_if_done(struct stg_conn_budget *b, struct stg_budget_user *u)
{
	if (u->held || u->waiting)
		return;
	*u = b->users[--b->nusers];
	if (b->nusers == 0) {
		free(b->users);
		b->users = NULL;
		b->users_cap = 0;
	}
}

/* Whether u may take n bytes now. Lock held. */
static bool grantable(const struct stg_conn_budget *b, const struct stg_budget_user *u, size_t n)
{
	if (b->held + n > b->limit)
		return false;
	size_t active = 0;
	bool others = false;
	for (size_t i = 0; i < b->nusers; i++) {
		const struct stg_budget_user *o = &b->users[i];
		active += o->held || o->waiting;
		others |= o != u && o->waiting;
	}
	return !others || u->held + n <= b->limit / (active ? active : 1);
}

int stg_conn_budget_take(struct stg_conn_budget *b, uint32_t uid, size_t n, int timeout_ms,
			 stg_budget_wait_fn wait, void *arg)
{
	int64_t deadline = stg_monotonic_ms() + timeout_ms;
	int r = 0;
	bool waited = false;
	pthread_mutex_lock(&b->lock);
	struct stg_budget_user *u = user(b, uid);
	if (!u) {
		pthread_mutex_unlock(&b->lock);
		return -ENOBUFS;
	}
	u->waiting++;
	__atomic_add_fetch(&b->waiting, 1, __ATOMIC_RELAXED);
	while (!grantable(b, u, n)) {
		int64_t left = deadline - stg_monotonic_ms();
		if (left <= 0) {
			r = -ENOBUFS;
			break;
		}
		if (wait) {
			/* Told without the lock: the caller may take locks of
			 * its own. Entries move when others are forgotten. */
			pthread_mutex_unlock(&b->lock);
			bool give_up = wait(arg, true);
			waited = true;
			pthread_mutex_lock(&b->lock);
			u = user(b, uid);
			if (give_up) {
				r = -ECANCELED;
				break;
			}
		}
		if (left > 200)
			left = 200;
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += left / 1000;
		until.tv_nsec += (long)(left % 1000) * 1000000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&b->freed, &b->lock, &until);
		u = user(b, uid);
	}
	u->waiting--;
	__atomic_sub_fetch(&b->waiting, 1, __ATOMIC_RELAXED);
	if (r == 0) {
		u->held += n;
		b->held += n;
	} else {
		forget_if_done(b, u);
		/* This uid's wait may have been what held others back. */
		pthread_cond_broadcast(&b->freed);
	}
	pthread_mutex_unlock(&b->lock);
	if (waited)
		wait(arg, false);
	return r;
}

void stg_conn_budget_give(struct stg_conn_budget *b, uint32_t uid, size_t n)
{
	pthread_mutex_lock(&b->lock);
	struct stg_budget_user *u = user(b, uid);
	b->held -= n;
	if (u) {
		u->held -= n;
		forget_if_done(b, u);
	}
	pthread_cond_broadcast(&b->freed);
	pthread_mutex_unlock(&b->lock);
}

bool stg_conn_budget_contended(struct stg_conn_budget *b)
{
	return __atomic_load_n(&b->waiting, __ATOMIC_RELAXED) > 0;
}

size_t stg_conn_budget_held(struct stg_conn_budget *b)
{
	pthread_mutex_lock(&b->lock);
	size_t held = b->held;
	pthread_mutex_unlock(&b->lock);
	return held;
}
