/* SPDX-License-Identifier: MIT */
/* How every wrapper of hooks.def is written, so that none gets the re-entry
 * guard or errno wrong:
 *
 *	SHIM_EXPORT int chmod(const char *path, mode_t mode)
 *	{
 *		SHIM_HANDLE(change_path(AT_FDCWD, path, &c));
 *		return REAL(chmod)(path, mode);
 *	}
 *
 * REAL(fn) is libc's fn, resolved on first use (a wrapper may run before the
 * shim's constructor). SHIM_HANDLE runs a handler unless this thread is
 * inside the shim already (its own I/O goes straight to libc) or the shim is
 * off. The handler runs with the guard held and returns SHIM_PASS ("not
 * ours: make the real call"), a result >= 0, or -errno. The wrapper returns
 * the result with errno as the caller left it, or -1 with errno set; on
 * SHIM_PASS it goes on, errno untouched, to the real call.
 *
 * Wrappers returning a pointer use shim_enter() and shim_leave() themselves. */
#pragma once

#include <errno.h>
#include <limits.h>
#include <stdbool.h>

#include "internal.h"
#include "real.h"

#define SHIM_EXPORT __attribute__((visibility("default")))

#define REAL(fn) (__builtin_expect(real_##fn != NULL, 1) ? real_##fn : (shim_real_init(), real_##fn))

#define SHIM_PASS LONG_MIN

/* Takes the guard and saves errno; false: pass through (nested or off). */
static inline bool shim_enter(int *saved_errno)
{
	if (shim_busy || !shim_active())
		return false;
	/* (a call the dispatch let run unguarded is over: guard again) */
	dispatch_guard();
	shim_busy++;
	*saved_errno = errno;
	return true;
}

/* Drops the guard; turns a handler's result into libc's convention. */
static inline long shim_leave(long r, int saved_errno)
{
	shim_busy--;
	if (r < 0 && r != SHIM_PASS) {
		errno = (int)-r;
		return -1;
	}
	errno = saved_errno;
	return r;
}

/* For wrappers that redo a libc function on the hooked calls (walk.c,
 * ftw.c): they run without the guard, or those calls would pass through.
 * True when there is nothing to show and the real function will do. */
static inline bool shim_idle(void)
{
	return shim_busy || !shim_active() || shim.policy->nrules == 0;
}

#define SHIM_HANDLE(handler_call)                                        \
	do {                                                             \
		int saved_errno_;                                        \
		if (shim_enter(&saved_errno_)) {                         \
			long r_ = shim_leave((long)(handler_call), saved_errno_); \
			if (r_ != SHIM_PASS)                             \
				return r_;                               \
		}                                                        \
	} while (0)
