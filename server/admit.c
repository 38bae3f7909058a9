/* SPDX-License-Identifier: MIT */
/* Who gets a connection. Every connection holds a slot from accept to close,
 * in one of three states: logging in, idle between requests, or at work.
 * Strangers get few slots and briefly, apart from the users': at most
 * max_handshakes logging in at once, a quarter of them from any one
 * address, each for a short deadline (the session's). Logged in, a user
 * holds at most max_per_user of the max_connections. When those run out,
 * the connection idle the longest makes room (its client opens a new one
 * when it needs it); when the logging-in ones do, the oldest of the address
 * holding the most. An RDMA connection has no descriptor to be evicted by:
 * it is never the one making room, and closes after --idle-timeout like
 * any. Whoever is refused gets BUSY and retries later,
 * so a job restarting on every node at once is served as fast as the server
 * can, and no one can keep others out by holding connections. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"
#include "log.h"
#include "util.h"

int admit_init(struct admit *a, const struct admit_limits *l)
{
	memset(a, 0, sizeof(*a));
	a->limits = *l;
	/* Room for the slots being given back by evicted connections too. */
	a->nslots = l->max_connections + 2 * l->max_handshakes;
	a->slots = calloc(a->nslots, sizeof(*a->slots));
	if (!a->slots)
		return -ENOMEM;
	pthread_mutex_init(&a->lock, NULL);
	return 0;
}

/* Slots held (evicted ones not counted) in state st, or in any state for
 * ADMIT_HELD; from addr only when it is not NULL. */
static unsigned count(const struct admit *a, enum admit_state st, const char *addr)
{
	unsigned n = 0;
	for (unsigned i = 0; i < a->nslots; i++) {
		const struct admit_slot *s = &a->slots[i];
		if (s->state == ADMIT_FREE || s->evicted || (st != ADMIT_HELD && s->state != st))
			continue;
		n += !addr || strcmp(s->addr, addr) == 0;
	}
	return n;
}

/* Asks slot i's thread to close its connection: reading ends at once (the
 * session sees its peer leave), writing still works for a last ERROR. */
static void evict(struct admit *a, unsigned i)
{
	struct admit_slot *s = &a->slots[i];
	s->evicted = true;
	shutdown(s->fd, s->state == ADMIT_HANDSHAKE ? SHUT_RD : SHUT_RDWR);
}

/* The evictable slot in state st that has been in it the longest, from the
 * address holding the most such slots when by_address; -1 if none. */
static int oldest(const struct admit *a, enum admit_state st, bool by_address)
{
	const char *addr = NULL;
	unsigned most = 0;
	for (unsigned i = 0; by_address && i < a->nslots; i++) {
		const struct admit_slot *s = &a->slots[i];
		if (s->state != st || s->evicted || (addr && strcmp(s->addr, addr) == 0))
			continue;
		unsigned n = count(a, st, s->addr);
		if (n > most) {
			most = n;
			addr = s->addr;
		}
	}
	int best = -1;
	for (unsigned i = 0; i < a->nslots; i++) {
		const struct admit_slot *s = &a->slots[i];
		if (s->state != st || s->evicted || s->fd < 0 || (addr && strcmp(s->addr, addr)))
			continue;
		if (best < 0 || s->since_ms < a->slots[best].since_ms)
			best = (int)i;
	}
	return best;
}

int admit_accept(struct admit *a, const char *addr, int fd, char *why, size_t whylen)
{
	const struct admit_limits *l = &a->limits;
	unsigned per_address = l->max_handshakes / 4 ? l->max_handshakes / 4 : 1;
	pthread_mutex_lock(&a->lock);
	unsigned mine = count(a, ADMIT_HANDSHAKE, addr);
	int r = -EBUSY;
	if (mine >= per_address) {
		snprintf(why, whylen, "%u connections from %s are logging in already", mine, addr);
		goto out;
	}
	if (count(a, ADMIT_HANDSHAKE, NULL) >= l->max_handshakes) {
		int victim = oldest(a, ADMIT_HANDSHAKE, true);
		/* Only an address holding more than this one's share gives way. */
		if (victim < 0 || count(a, ADMIT_HANDSHAKE, a->slots[victim].addr) <= mine + 1) {
			snprintf(why, whylen, "%u connections are logging in already",
				 l->max_handshakes);
			goto out;
		}
		evict(a, (unsigned)victim);
	}
	for (unsigned i = 0; i < a->nslots; i++) {
		struct admit_slot *s = &a->slots[i];
		if (s->state != ADMIT_FREE)
			continue;
		*s = (struct admit_slot){.fd = fd, .state = ADMIT_HANDSHAKE,
					 .since_ms = stg_monotonic_ms()};
		snprintf(s->addr, sizeof(s->addr), "%s", addr);
		r = (int)i;
		break;
	}
	if (r < 0)
		snprintf(why, whylen, "connections being closed fill every slot");
out:
	pthread_mutex_unlock(&a->lock);
	return r;
}

/* Called with the lock held. Returns 0 or -EBUSY with why. */
static int take_on(struct admit *a, struct admit_slot *s, uint32_t uid, char *why, size_t whylen)
{
	if (s->evicted) {
		snprintf(why, whylen, "too many connections logging in");
		return -EBUSY;
	}
	unsigned mine = 0;
	for (unsigned i = 0; i < a->nslots; i++) {
		const struct admit_slot *o = &a->slots[i];
		mine += (o->state == ADMIT_IDLE || o->state == ADMIT_WORKING) && !o->evicted &&
			o->uid == uid;
	}
	if (mine >= a->limits.max_per_user) {
		snprintf(why, whylen, "uid %u has %u connections already", uid, mine);
		return -EBUSY;
	}
	if (count(a, ADMIT_IDLE, NULL) + count(a, ADMIT_WORKING, NULL) >=
	    a->limits.max_connections) {
		int victim = oldest(a, ADMIT_IDLE, false);
		if (victim < 0) {
			snprintf(why, whylen, "%u connections, none idle",
				 a->limits.max_connections);
			return -EBUSY;
		}
		evict(a, (unsigned)victim);
	}
	s->uid = uid;
	s->state = ADMIT_WORKING;
	s->since_ms = stg_monotonic_ms();
	return 0;
}

int admit_login(struct admit *a, int slot, uint32_t uid, char *why, size_t whylen)
{
	pthread_mutex_lock(&a->lock);
	struct admit_slot *s = &a->slots[slot];
	int r = take_on(a, s, uid, why, whylen);
	if (r < 0 && !s->evicted) {
		char what[256];
		snprintf(what, sizeof(what), "%s: %s", s->addr, why);
		admit_refused(what);
	}
	pthread_mutex_unlock(&a->lock);
	return r;
}

bool admit_idle(struct admit *a, int slot, bool idle)
{
	pthread_mutex_lock(&a->lock);
	struct admit_slot *s = &a->slots[slot];
	s->state = idle ? ADMIT_IDLE : ADMIT_WORKING;
	s->since_ms = stg_monotonic_ms();
	bool evicted = s->evicted;
	pthread_mutex_unlock(&a->lock);
	return evicted;
}

bool admit_evicted(struct admit *a, int slot)
{
	pthread_mutex_lock(&a->lock);
	bool evicted = a->slots[slot].evicted;
	pthread_mutex_unlock(&a->lock);
	return evicted;
}

bool admit_release(struct admit *a, int slot)
{
	pthread_mutex_lock(&a->lock);
	struct admit_slot *s = &a->slots[slot];
	bool evicted = s->evicted;
	s->state = ADMIT_FREE;
	s->evicted = false;
	pthread_mutex_unlock(&a->lock);
	return evicted;
}

/* (The log's rate limit keeps a flood of these to a few lines and a count.) */
void admit_refused(const char *what)
{
	stg_log(STG_LOG_WARN, "refused (busy): %s", what);
}

unsigned admit_connections(struct admit *a)
{
	pthread_mutex_lock(&a->lock);
	unsigned n = count(a, ADMIT_HELD, NULL);
	pthread_mutex_unlock(&a->lock);
	return n;
}
