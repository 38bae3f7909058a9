/* SPDX-License-Identifier: MIT */
/* Positioned full-length reads and writes through a small io_uring per
 * thread (plain preadv/pwritev where io_uring is unavailable). */
#pragma once

#include <stdint.h>
#include <sys/uio.h>

/* Reads exactly the bytes iov describes at off; iov is consumed (changed).
 * Returns 0, -ENODATA (end of file first) or -errno. */
int stg_ringio_preadv(int fd, struct iovec *iov, int iovcnt, uint64_t off);

/* Writes exactly the bytes iov describes at off; iov is consumed (changed).
 * Returns 0 or -errno. */
int stg_ringio_pwritev(int fd, struct iovec *iov, int iovcnt, uint64_t off);
