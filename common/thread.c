/* SPDX-License-Identifier: MIT */
/* Starting threads with signals blocked. */
#include "thread.h"

#include <signal.h>

int stg_thread_start(pthread_t *ret, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	/* The new thread inherits the mask in force at its creation. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int r = pthread_create(ret, attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -r;
}
