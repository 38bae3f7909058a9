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

/* Lists of slots, linked by index. */

static void list_append(struct admit *a, struct admit_list *l, int i)
{
	struct admit_slot *s = &a->slots[i];
	s->prev = l->tail;
	s->next = -1;
	if (l->tail >= 0)
		a->slots[l->tail].next = i;
	else
		l->head = i;
	l->tail = i;
}

static void list_unlink(struct admit *a, struct admit_list *l, int i)
{
	struct admit_slot *s = &a->slots[i];
	if (s->prev >= 0)
		a->slots[s->prev].next = s->next;
	else
		l->head = s->next;
	if (s->next >= 0)
		a->slots[s->next].prev = s->prev;
	else
		l->tail = s->prev;
	s->prev = s->next = -1;
}

/* The count of uid's logged-in connections (linear probing). */
static struct admit_count *uid_count(struct admit *a, uint32_t uid)
{
	size_t mask = a->counts_cap - 1, h = (uid * 2654435761u) & mask;
	while (a->counts[h].n && a->counts[h].uid != uid)
		h = (h + 1) & mask;
	a->counts[h].uid = uid;
	return &a->counts[h];
}

static void uid_count_drop(struct admit *a, uint32_t uid)
{
	struct admit_count *c = uid_count(a, uid);
	if (c->n > 1) {
		c->n--;
		return;
	}
	/* Its last: out of users (the last one there takes its place), while
	 * every probe still passes over it. */
	uint32_t last = a->users[--a->nusers];
	a->users[c->ix] = last;
	if (last != uid)
		uid_count(a, last)->ix = c->ix;
	c->n = 0;
	/* Emptied: the entries after it in its run move up where they may
	 * (deletion without tombstones). */
	size_t mask = a->counts_cap - 1, hole = (size_t)(c - a->counts);
	for (size_t j = (hole + 1) & mask; a->counts[j].n; j = (j + 1) & mask) {
		size_t home = (a->counts[j].uid * 2654435761u) & mask;
		if (((j - home) & mask) >= ((j - hole) & mask)) {
			a->counts[hole] = a->counts[j];
			a->counts[j].n = 0;
			hole = j;
		}
	}
}

/* Slot i, not evicted, enters state st (its uid set for a logged-in one). */
static void enter(struct admit *a, int i, enum admit_state st)
{
	struct admit_slot *s = &a->slots[i];
	s->state = st;
	s->since_ms = stg_monotonic_ms();
	if (st == ADMIT_HANDSHAKE) {
		a->logging_in++;
		list_append(a, &a->handshakes, i);
		return;
	}
	a->logged_in++;
	struct admit_count *c = uid_count(a, s->uid);
	if (c->n++ == 0) {
		c->ix = a->nusers;
		a->users[a->nusers++] = s->uid;
		c->working = (struct admit_list){-1, -1};
	}
	if (s->fd >= 0)
		list_append(a, st == ADMIT_IDLE ? &a->idle : &c->working, i);
}

/* Slot i, not evicted, leaves its state: it counts no more. */
static void leave(struct admit *a, int i)
{
	struct admit_slot *s = &a->slots[i];
	if (s->state == ADMIT_HANDSHAKE) {
		a->logging_in--;
		list_unlink(a, &a->handshakes, i);
		return;
	}
	a->logged_in--;
	if (s->fd >= 0)
		list_unlink(a, s->state == ADMIT_IDLE ? &a->idle : &uid_count(a, s->uid)->working, i);
	uid_count_drop(a, s->uid);
}

int admit_init(struct admit *a, const struct admit_limits *l)
{
	memset(a, 0, sizeof(*a));
	a->limits = *l;
	/* Room for the slots being given back by evicted connections too. */
	a->nslots = l->max_connections + 2 * l->max_handshakes;
	a->counts_cap = 16;
	while (a->counts_cap < 2 * (size_t)a->nslots)
		a->counts_cap *= 2;
	a->slots = calloc(a->nslots, sizeof(*a->slots));
	a->counts = calloc(a->counts_cap, sizeof(*a->counts));
	a->users = calloc(a->nslots, sizeof(*a->users));
	if (!a->slots || !a->counts || !a->users) {
		free(a->slots);
		free(a->counts);
		free(a->users);
		return -ENOMEM;
	}
	a->free = a->handshakes = a->idle = (struct admit_list){-1, -1};
	for (unsigned i = 0; i < a->nslots; i++)
		list_append(a, &a->free, (int)i);
	pthread_mutex_init(&a->lock, NULL);
	return 0;
}

void admit_free(struct admit *a)
{
	free(a->slots);
	free(a->counts);
	free(a->users);
	pthread_mutex_destroy(&a->lock);
}

/* Slots logging in (evicted ones not counted) from addr. */
static unsigned logging_in_from(const struct admit *a, const char *addr)
{
	unsigned n = 0;
	for (int i = a->handshakes.head; i >= 0; i = a->slots[i].next)
		n += strcmp(a->slots[i].addr, addr) == 0;
	return n;
}

/* Asks slot i's session to close its connection: reading ends at once (its
 * loop sees the peer leave), writing still works for a last ERROR. It
 * counts free from now on. */
static void evict(struct admit *a, int i)
{
	struct admit_slot *s = &a->slots[i];
	leave(a, i);
	s->evicted = true;
	shutdown(s->fd, s->state == ADMIT_HANDSHAKE ? SHUT_RD : SHUT_RDWR);
}

/* The evictable slot logging in the longest, from the address logging in
 * the most; -1 if none. (Logging-in slots are a few hundred at most.) */
static int oldest_login_of_busiest(const struct admit *a)
{
	const char *addr = NULL;
	unsigned most = 0;
	for (int i = a->handshakes.head; i >= 0; i = a->slots[i].next) {
		const struct admit_slot *s = &a->slots[i];
		if (addr && strcmp(s->addr, addr) == 0)
			continue;
		unsigned n = logging_in_from(a, s->addr);
		if (n > most) {
			most = n;
			addr = s->addr;
		}
	}
	for (int i = a->handshakes.head; i >= 0; i = a->slots[i].next)
		if (a->slots[i].fd >= 0 && strcmp(a->slots[i].addr, addr) == 0)
			return i;
	return -1;
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
	for (int i = a->handshakes.head; i >= 0; i = a->slots[i].next) {
		const struct admit_slot *s = &a->slots[i];
		if (s->fd < 0 || strcmp(s->addr, addr))
			continue;
		if (silent(s->fd))
			return i; /* the oldest silent one: the list is oldest first */
		if (best < 0)
			best = i;
	}
	return best;
}

int admit_accept(struct admit *a, const char *addr, int fd, char *why, size_t whylen)
{
	const struct admit_limits *l = &a->limits;
	unsigned per_address = l->max_handshakes / 4 ? l->max_handshakes / 4 : 1;
	pthread_mutex_lock(&a->lock);
	unsigned mine = logging_in_from(a, addr);
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
		evict(a, victim);
		mine--;
	}
	if (a->logging_in >= l->max_handshakes) {
		int victim = oldest_login_of_busiest(a);
		/* Only an address holding more than this one's share gives way. */
		if (victim < 0 || logging_in_from(a, a->slots[victim].addr) <= mine + 1) {
			snprintf(why, whylen, "%u connections are logging in already",
				 l->max_handshakes);
			goto out;
		}
		evict(a, victim);
	}
	r = a->free.head;
	if (r < 0) {
		snprintf(why, whylen, "connections being closed fill every slot");
		r = -EBUSY;
		goto out;
	}
	list_unlink(a, &a->free, r);
	struct admit_slot *s = &a->slots[r];
	*s = (struct admit_slot){.fd = fd, .prev = -1, .next = -1};
	snprintf(s->addr, sizeof(s->addr), "%s", addr);
	enter(a, r, ADMIT_HANDSHAKE);
out:
	pthread_mutex_unlock(&a->lock);
	return r;
}

/* With every logged-in slot at work: the oldest evictable connection of
 * the uid holding the most, when that uid holds more than one more than
 * the newcomer's (mine), so that each uid gets its share of the slots;
 * -1 otherwise. Its client sends its request again on a new connection.
 * (It looks at each uid logged in, not at each connection.) */
static int busiest_user_oldest(struct admit *a, unsigned mine)
{
	struct admit_count *most = NULL;
	for (unsigned k = 0; k < a->nusers; k++) {
		struct admit_count *c = uid_count(a, a->users[k]);
		if (!most || c->n > most->n)
			most = c;
	}
	if (!most || most->n <= mine + 1)
		return -1;
	return most->working.head;
}

/* Called with the lock held. Returns 0 or -EBUSY with why. */
static int take_on(struct admit *a, int i, uint32_t uid, char *why, size_t whylen)
{
	struct admit_slot *s = &a->slots[i];
	if (s->evicted) {
		snprintf(why, whylen, "too many connections logging in");
		return -EBUSY;
	}
	unsigned mine = uid_count(a, uid)->n;
	if (mine >= a->limits.max_per_user) {
		snprintf(why, whylen, "uid %u has %u connections already", uid, mine);
		return -EBUSY;
	}
	if (a->logged_in >= a->limits.max_connections) {
		int victim = a->idle.head;
		if (victim < 0)
			victim = busiest_user_oldest(a, mine);
		if (victim < 0) {
			snprintf(why, whylen, "%u connections, none idle",
				 a->limits.max_connections);
			return -EBUSY;
		}
		evict(a, victim);
	}
	leave(a, i);
	s->uid = uid;
	enter(a, i, ADMIT_WORKING);
	return 0;
}

int admit_login(struct admit *a, int slot, uint32_t uid, char *why, size_t whylen)
{
	pthread_mutex_lock(&a->lock);
	struct admit_slot *s = &a->slots[slot];
	int r = take_on(a, slot, uid, why, whylen);
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
	bool evicted = s->evicted;
	if (!evicted && (s->state == ADMIT_IDLE || s->state == ADMIT_WORKING)) {
		leave(a, slot);
		enter(a, slot, idle ? ADMIT_IDLE : ADMIT_WORKING);
	}
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
	if (!evicted)
		leave(a, slot);
	s->state = ADMIT_FREE;
	s->evicted = false;
	list_append(a, &a->free, slot);
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
	unsigned n = a->logging_in + a->logged_in;
	pthread_mutex_unlock(&a->lock);
	return n;
}
