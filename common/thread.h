/* SPDX-License-Identifier: MIT */
/* Starting the daemons' and tools' own threads. */
#pragma once

#include <pthread.h>

/* pthread_create with every signal blocked in the new thread: signals go to
 * the thread that waits for them (the main one), never interrupt a worker's
 * system call, and a handler never runs on a worker's small stack. attr
 * may be NULL. Returns 0 or -errno. */
int stg_thread_start(pthread_t *ret, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
