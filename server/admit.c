/* SPDX-License-Identifier: MIT */
/* Who gets a connection. Every connection holds a slot from accept to close,
 * in one of three states: logging in, idle between requests, or at work.
 * Strangers get few slots and briefly, apart from the users': at most
 * max_handshakes logging in at once, a quarter of them from any one
 * address, each for a short deadline (the session's). Logged in, a user
 * holds at most max_per_user of the max_connections. When those run out,
 * the connection idle the longest makes room (its client opens a new one
 * when it needs it), else the oldest of the uid holding the most; when the
 * logging-in ones of an address do, its oldest (silent ones first); when
 * all logging-in ones do, the oldest of the address holding the most. An RDMA connection has no descriptor to be evicted by:
 * it is never the one making room, and closes after --idle-timeout like
 * any. Whoever is refused gets BUSY and retries later,
 * so a job restarting on every node at once is served as fast as the server
 * can, and no one can keep others out by holding connections. */
#include <errno.h>
#include <linux/tcp.h>
#include <netinet/in.h>
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
	a->counts = calloc(2 * (size_t)a->nslots, sizeof(*a->counts));
	if (!a->slots || !a->counts) {
		free(a->slots);
		free(a->counts);
		return -ENOMEM;
	}
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

/* Whether the peer of a TCP connection has sent nothing at all yet. */
static bool silent(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
	    len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
		return false;
	return ti.tcpi_bytes_received == 0;
}

/* The evictable slot logging in from addr that has done so the longest,
 * a silent one (nothing received yet) before any other; -1 if none. */
static int oldest_login_of(const struct admit *a, const char *addr)
{
	int best = -1;
	bool best_silent = false;
	for (unsigned i = 0; i < a->nslots; i++) {
		const struct admit_slot *s = &a->slots[i];
		if (s->state != ADMIT_HANDSHAKE || s->evicted || s->fd < 0 || strcmp(s->addr, addr))
			continue;
		bool quiet = silent(s->fd);
		if (best < 0 || (quiet && !best_silent) ||
		    (quiet == best_silent && s->since_ms < a->slots[best].since_ms)) {
			best = (int)i;
			best_silent = quiet;
		}
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
		/* An address is shared by every user of a node: the newcomer
		 * takes the place of the one of its address that has logged in
		 * the longest, silent ones first, so that no one keeps the
		 * others of a node out by opening connections. */
		int victim = oldest_login_of(a, addr);
		if (victim < 0) {
			snprintf(why, whylen, "%u connections from %s are logging in already",
				 mine, addr);
			goto out;
		}
		evict(a, (unsigned)victim);
		mine--;
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

/* With every logged-in slot at work: the oldest evictable connection of
 * the uid holding the most, when that uid holds more than one more than
 * the newcomer's (mine), so that each uid gets its share of the slots;
 * -1 otherwise. Its client sends its request again on a new connection.
 * Counts in a.counts, an open-addressing table of 2 * nslots entries. */
static int busiest_user_oldest(struct admit *a, unsigned mine)
{
	size_t cap = 2 * (size_t)a->nslots;
	memset(a->counts, 0, cap * sizeof(*a->counts));
	uint32_t uid = 0;
	unsigned most = 0;
	for (unsigned i = 0; i < a->nslots; i++) {
		const struct admit_slot *s = &a->slots[i];
		if ((s->state != ADMIT_IDLE && s->state != ADMIT_WORKING) || s->evicted)
			continue;
		size_t h = (s->uid * 2654435761u) % cap;
		while (a->counts[h].n && a->counts[h].uid != s->uid)
			h = (h + 1) % cap;
		a->counts[h].uid = s->uid;
		if (++a->counts[h].n > most) {
			most = a->counts[h].n;
			uid = s->uid;
		}
	}
	if (most <= mine + 1)
		return -1;
	int best = -1;
	for (unsigned i = 0; i < a->nslots; i++) {
		const struct admit_slot *s = &a->slots[i];
		if (s->state != ADMIT_WORKING || s->evicted || s->fd < 0 || s->uid != uid)
			continue;
		if (best < 0 || s->since_ms < a->slots[best].since_ms)
			best = (int)i;
	}
	return best;
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
		if (victim < 0)
			victim = busiest_user_oldest(a, mine);
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
