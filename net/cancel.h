/* SPDX-License-Identifier: MIT */
/* Ending every connection wait of a process at once: how a daemon stops
 * promptly while its peers do not answer. Once stg_cancel() has run, every
 * wait of net/ (connect, login, send, receive, RDMA moves) returns
 * -ECANCELED instead of waiting out its deadline. */
#pragma once

#include <stdbool.h>

/* Makes the descriptor waits watch (an eventfd). Returns 0 or -errno. */
int stg_cancel_init(void);

/* Cancels every wait, now and later. Async-signal-safe: a SIGTERM handler
 * calls it. */
void stg_cancel(void);

/* The descriptor that becomes readable once cancelled, for a wait of one's
 * own (poll, epoll, io_uring); -1 before stg_cancel_init. */
int stg_cancel_fd(void);

bool stg_cancelled(void);

/* poll() of fd for events, and of the cancel descriptor, at most timeout_ms
 * (< 0: no limit), retried on EINTR. Returns 0 (fd is ready), -ETIMEDOUT,
 * -ECANCELED or -errno. fd < 0: only sleeps, cancellably. */
int stg_cancel_poll(int fd, short events, int timeout_ms);
