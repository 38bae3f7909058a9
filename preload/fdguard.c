/* SPDX-License-Identifier: MIT */
/* The shim's own long-lived descriptors (the cache's directories, the
 * holders of open captured files, the log): kept at high numbers and out of
 * reach of the application's close() loops, close_range() and dup2(). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"
#include "real.h"
#include "util.h"

struct reserved {
	int fd;
	int *where;
};

static struct reserved *res;
static size_t nres, capres;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* One bit per descriptor number: close() of any descriptor asks, so the
 * answer for the application's own must not take the lock. */
#define BITS (1u << 20)
static uint8_t bits[BITS / 8];

static void mark(int fd, bool on)
{
	if (fd < 0 || (unsigned)fd >= BITS)
		return;
	uint8_t m = (uint8_t)(1u << (fd & 7));
	if (on)
		__atomic_fetch_or(&bits[fd >> 3], m, __ATOMIC_RELEASE);
	else
		__atomic_fetch_and(&bits[fd >> 3], (uint8_t)~m, __ATOMIC_RELEASE);
}

void shim_reserve_fd(int fd, int *where)
{
	pthread_mutex_lock(&lock);
	if (STG_GROW(res, capres, nres + 1) == 0) {
		res[nres++] = (struct reserved){fd, where};
		mark(fd, true);
	}
	pthread_mutex_unlock(&lock);
}

void shim_release_fd(int fd)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nres; i++)
		if (res[i].fd == fd) {
			res[i] = res[--nres];
			mark(fd, false);
			break;
		}
	pthread_mutex_unlock(&lock);
}

bool shim_fd_reserved(int fd)
{
	if (fd >= 0 && (unsigned)fd < BITS &&
	    !(__atomic_load_n(&bits[fd >> 3], __ATOMIC_ACQUIRE) & (1u << (fd & 7))))
		return false;
	bool found = false;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nres && !found; i++)
		found = res[i].fd == fd;
	pthread_mutex_unlock(&lock);
	return found;
}

size_t shim_reserved_count(void)
{
	return __atomic_load_n(&nres, __ATOMIC_RELAXED);
}

void shim_fd_evict(int fd)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nres; i++) {
		if (res[i].fd != fd)
			continue;
		int nfd = real_fcntl(fd, F_DUPFD_CLOEXEC, fd + 1);
		if (nfd >= 0) {
			/* Ours moves on; the application's dup2 then replaces the old
			 * number atomically (not closed here: a thread of ours may be
			 * writing through it this very moment). */
			__atomic_store_n(res[i].where, nfd, __ATOMIC_RELEASE);
			res[i].fd = nfd;
			mark(fd, false);
			mark(nfd, true);
		}
		break;
	}
	pthread_mutex_unlock(&lock);
}

/* The reserved descriptors in [first, last], ascending, into out (at most
 * max); returns how many. */
size_t shim_reserved_in(unsigned first, unsigned last, int *out, size_t max)
{
	size_t n = 0;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nres && n < max; i++)
		if ((unsigned)res[i].fd >= first && (unsigned)res[i].fd <= last)
			out[n++] = res[i].fd;
	pthread_mutex_unlock(&lock);
	for (size_t i = 1; i < n; i++)
		for (size_t k = i; k > 0 && out[k - 1] > out[k]; k--) {
			int t = out[k];
			out[k] = out[k - 1];
			out[k - 1] = t;
		}
	return n;
}

int shim_move_high(int *fd)
{
	int hi = real_fcntl(*fd, F_DUPFD_CLOEXEC, SHIM_HIGH_FD);
	if (hi >= 0) {
		real_close(*fd);
		*fd = hi;
	}
	shim_reserve_fd(*fd, fd);
	return *fd;
}

void shim_fdguard_after_fork(void)
{
	pthread_mutex_init(&lock, NULL);
}


void shim_keep_fd(int *fd)
{
	shim_move_high(fd);
}
