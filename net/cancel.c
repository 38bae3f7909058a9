/* SPDX-License-Identifier: MIT */
/* The process's cancel descriptor (net/cancel.h). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cancel.h"

static int cancel_fd = -1;
static volatile sig_atomic_t cancelled;

int stg_cancel_init(void)
{
	if (cancel_fd >= 0)
		return 0;
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fd < 0)
		return -errno;
	cancel_fd = fd;
	return 0;
}

void stg_cancel(void)
{
	int saved = errno;
	cancelled = 1;
	if (cancel_fd >= 0) {
		uint64_t one = 1;
		/* Never read: the descriptor stays readable for every wait. */
		ssize_t n = write(cancel_fd, &one, sizeof(one));
		(void)n;
	}
	errno = saved;
}

int stg_cancel_fd(void)
{
	return cancel_fd;
}

bool stg_cancelled(void)
{
	return cancelled;
}

int stg_cancel_poll(int fd, short events, int timeout_ms)
{
	for (;;) {
		if (cancelled)
			return -ECANCELED;
		struct pollfd p[2] = {{.fd = fd, .events = events},
				      {.fd = cancel_fd, .events = POLLIN}};
		int r = poll(p, 2, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (p[1].revents)
			return -ECANCELED;
		return r == 0 ? -ETIMEDOUT : 0;
	}
}
