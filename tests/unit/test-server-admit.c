/* SPDX-License-Identifier: MIT */
/* Admission: with every slot at work, a newcomer takes the place of the
 * oldest connection at work of the uid holding the most, and a uid's
 * turns between idle and at work keep that order; counts and lists stay
 * right through many users coming and going. Connections are socket
 * pairs, so that an eviction's shutdown is seen on the peer's end. */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"

enum { MAX = 6 };

static int fds[64][2];

/* A connection from addr, logged in as uid: its slot, or -1. */
static int connect_as(struct admit *a, int k, const char *addr, uint32_t uid)
{
	char why[200];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds[k]), 0);
	int slot = admit_accept(a, addr, fds[k][0], why, sizeof(why));
	if (slot < 0)
		return -1;
	if (admit_login(a, slot, uid, why, sizeof(why)) < 0) {
		admit_release(a, slot);
		return -1;
	}
	return slot;
}

/* uid's logged-in connections, and the first of its list at work. */
static unsigned uid_count_of(const struct admit *a, uint32_t uid)
{
	for (size_t h = 0; h < a->counts_cap; h++)
		if (a->counts[h].n && a->counts[h].uid == uid)
			return a->counts[h].n;
	return 0;
}

static int working_head(const struct admit *a, uint32_t uid)
{
	for (size_t h = 0; h < a->counts_cap; h++)
		if (a->counts[h].n && a->counts[h].uid == uid)
			return a->counts[h].working.head;
	return -2;
}

/* Whether connection k was asked to close (its peer sees the end). */
static bool evicted(int k)
{
	char c;
	return recv(fds[k][1], &c, 1, MSG_DONTWAIT) == 0;
}

static void busiest_user_gives_way(void)
{
	struct admit a;
	struct admit_limits l = {.max_connections = MAX, .max_handshakes = 8, .max_per_user = MAX};
	CHECK_EQ(admit_init(&a, &l), 0);
	int slot[64];
	/* uid 1 holds 4, uid 2 holds 2, every one at work */
	for (int k = 0; k < 6; k++)
		CHECK((slot[k] = connect_as(&a, k, "10.0.0.1", k < 4 ? 1 : 2)) >= 0);
	CHECK_EQ(admit_connections(&a), 6);
	/* uid 1's first goes idle, then to work again: now its newest at work */
	CHECK(!admit_idle(&a, slot[0], true));
	CHECK(!admit_idle(&a, slot[0], false));
	/* uid 3 comes: uid 1's oldest at work (connection 1) makes room */
	CHECK((slot[6] = connect_as(&a, 6, "10.0.0.2", 3)) >= 0);
	CHECK(evicted(1));
	for (int k = 0; k < 6; k++)
		if (k != 1)
			CHECK(!evicted(k));
	CHECK(admit_release(&a, slot[1])); /* it closes */
	/* uid 4 comes: uid 1 holds 3, one more than 1 + uid 4's none */
	CHECK((slot[7] = connect_as(&a, 7, "10.0.0.3", 4)) >= 0);
	CHECK(evicted(2));
	CHECK(admit_release(&a, slot[2]));
	/* uids 1 and 2 hold 2 each, 3 and 4 one: uid 1, the first of those
	 * holding the most, gives its oldest at work (3) */
	CHECK((slot[8] = connect_as(&a, 8, "10.0.0.4", 5)) >= 0);
	CHECK(evicted(3));
	CHECK(admit_release(&a, slot[3]));
	/* now 1, 2, 1, 1, 1 (uid 1's connection 0 is left): uid 2 holds 2 */
	CHECK((slot[9] = connect_as(&a, 9, "10.0.0.5", 6)) >= 0);
	CHECK(evicted(4));
	CHECK(admit_release(&a, slot[4]));
	/* every uid holds one: the next is refused, busy */
	CHECK_EQ(connect_as(&a, 10, "10.0.0.6", 7), -1);
	/* an idle one makes room before any at work */
	CHECK(!admit_idle(&a, slot[5], true));
	CHECK((slot[11] = connect_as(&a, 11, "10.0.0.6", 7)) >= 0);
	CHECK(evicted(5));
	CHECK(admit_release(&a, slot[5]));
	for (int k = 0; k < 12; k++) {
		close(fds[k][0]);
		close(fds[k][1]);
	}
	admit_free(&a);
}

/* Many users logging in and out in turn: the count of users, and each
 * user's list, stay right (every remaining connection is found again). */
static void users_come_and_go(void)
{
	struct admit a;
	struct admit_limits l = {.max_connections = 40, .max_handshakes = 64, .max_per_user = 40};
	CHECK_EQ(admit_init(&a, &l), 0);
	int slots[16], fd[16][2];
	for (int k = 0; k < 16; k++) {
		char why[200];
		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd[k]), 0);
		CHECK((slots[k] = admit_accept(&a, "10.0.0.9", fd[k][0], why, sizeof(why))) >= 0);
		CHECK_EQ(admit_login(&a, slots[k], 100 + k % 7, why, sizeof(why)), 0);
	}
	CHECK_EQ(a.nusers, 7);
	/* uids 100-106 leave in turn, all but 103's connections (3 and 10) */
	for (int k = 0; k < 16; k++)
		if (k % 7 != 3)
			CHECK(!admit_release(&a, slots[k]));
	CHECK_EQ(a.nusers, 1);
	CHECK_EQ(a.users[0], 103);
	CHECK_EQ(admit_connections(&a), 2);
	/* the one at work the longest of 103's is at its list's head */
	CHECK(!admit_idle(&a, slots[3], true));
	CHECK(!admit_idle(&a, slots[3], false));
	CHECK_EQ(uid_count_of(&a, 103), 2);
	CHECK_EQ(working_head(&a, 103), slots[10]);
	CHECK(!admit_release(&a, slots[3]));
	CHECK(!admit_release(&a, slots[10]));
	CHECK_EQ(a.nusers, 0);
	CHECK_EQ(admit_connections(&a), 0);
	for (int k = 0; k < 16; k++) {
		close(fd[k][0]);
		close(fd[k][1]);
	}
	admit_free(&a);
}

int main(void)
{
	busiest_user_gives_way();
	users_come_and_go();
	return harness_done();
}
