/* SPDX-License-Identifier: MIT */
/* Pointers to the libc functions the shim wraps. */
#pragma once

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <spawn.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <utime.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#define HOOK(name, ret, params) extern ret(*real_##name) params;
#include "hooks.def"
#undef HOOK

/* Resolves every real_* pointer (idempotent, thread-safe). Returns 0 when all
 * the required ones were found. */
int shim_real_init(void);
