/* SPDX-License-Identifier: MIT */
/* Positioned full-length I/O through a lazily created per-thread io_uring. */
#include "ringio.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "log.h"

#define RING_ENTRIES 8

static pthread_key_t ring_key;
static pthread_once_t ring_once = PTHREAD_ONCE_INIT;
static bool ring_key_ok;

static __thread struct io_uring *tl_ring;
static __thread bool tl_ring_unavailable;

static void ring_destroy(void *p)
{
	io_uring_queue_exit(p);
	free(p);
}

static void ring_key_init(void)
{
	ring_key_ok = pthread_key_create(&ring_key, ring_destroy) == 0;
}

/* The thread's ring, created at its first use and destroyed when the thread
 * exits (the key's destructor), or NULL when io_uring cannot be had here
 * (old kernel, seccomp, io_uring_disabled): callers fall back to syscalls. */
static struct io_uring *thread_ring(void)
{
	if (tl_ring || tl_ring_unavailable)
		return tl_ring;
	pthread_once(&ring_once, ring_key_init);
	struct io_uring *ring = malloc(sizeof(*ring));
	int r = ring && ring_key_ok ? io_uring_queue_init(RING_ENTRIES, ring, 0) : -ENOMEM;
	if (r == 0 && pthread_setspecific(ring_key, ring) != 0) {
		io_uring_queue_exit(ring);
		r = -ENOMEM;
	}
	if (r < 0) {
		stg_log_errno(STG_LOG_DEBUG, r, "io_uring unavailable, using preadv/pwritev");
		free(ring);
		tl_ring_unavailable = true;
		return NULL;
	}
	tl_ring = ring;
	return ring;
}

/* A ring whose submission failed may still hold our sqe, pointing at the
 * caller's buffers: it is torn down rather than reused. */
static void ring_abandon(void)
{
	pthread_setspecific(ring_key, NULL);
	ring_destroy(tl_ring);
	tl_ring = NULL;
	tl_ring_unavailable = true;
}

/* One readv or writev; returns bytes transferred or -errno. */
static ssize_t rw_once(bool write, int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
	struct io_uring *ring = thread_ring();
	if (!ring) {
		ssize_t n = write ? pwritev(fd, iov, iovcnt, (off_t)off)
				  : preadv(fd, iov, iovcnt, (off_t)off);
		return n < 0 ? -errno : n;
	}
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (!sqe) {
		ring_abandon();
		return rw_once(write, fd, iov, iovcnt, off);
	}
	if (write)
		io_uring_prep_writev(sqe, fd, iov, (unsigned)iovcnt, off);
	else
		io_uring_prep_readv(sqe, fd, iov, (unsigned)iovcnt, off);
	int r = io_uring_submit(ring);
	if (r != 1) {
		ring_abandon();
		return rw_once(write, fd, iov, iovcnt, off);
	}
	/* The kernel owns our buffers until the completion arrives: wait for it
	 * whatever signals come. */
	struct io_uring_cqe *cqe;
	while ((r = io_uring_wait_cqe(ring, &cqe)) == -EINTR)
		;
	if (r < 0)
		return r;
	ssize_t res = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return res;
}

static int rw_all(bool write, int fd, struct iovec *iov, int iovcnt, uint64_t off)
{
	while (iovcnt > 0) {
		if (iov->iov_len == 0) {
			iov++;
			iovcnt--;
			continue;
		}
		ssize_t n = rw_once(write, fd, iov, iovcnt, off);
		if (n == -EINTR || n == -EAGAIN)
			continue;
		if (n < 0)
			return (int)n;
		if (n == 0)
			return write ? -EIO : -ENODATA;
		off += (uint64_t)n;
		while (n > 0) {
			size_t step = (size_t)n < iov->iov_len ? (size_t)n : iov->iov_len;
			iov->iov_base = (uint8_t *)iov->iov_base + step;
			iov->iov_len -= step;
			n -= (ssize_t)step;
			if (iov->iov_len == 0) {
				iov++;
				iovcnt--;
			}
		}
	}
	return 0;
}

int stg_ringio_preadv(int fd, struct iovec *iov, int iovcnt, uint64_t off)
{
	return rw_all(false, fd, iov, iovcnt, off);
}

int stg_ringio_pwritev(int fd, struct iovec *iov, int iovcnt, uint64_t off)
{
	return rw_all(true, fd, iov, iovcnt, off);
}
