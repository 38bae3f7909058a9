/* SPDX-License-Identifier: MIT */
/* The mkstemp family: glibc creates the file with an open the shim cannot
 * see, so in a captured directory the shim picks the name and creates it
 * itself, as a captured file. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "hook.h"

static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/* Fills the six X's at x with random letters and digits. */
static void fill_name(char *x)
{
	static __thread uint64_t state;
	uint64_t v;
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v)) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		state += (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
		v = state * 0xbf58476d1ce4e5b9ull;
	}
	for (int i = 0; i < 6; i++, v /= 62)
		x[i] = letters[v % 62];
}

/* SHIM_PASS when the template's file would not be captured, else the new
 * descriptor (the template holding its name) or -errno. */
static long tempname(char *tmpl, int suffixlen, int flags)
{
	size_t len = strlen(tmpl);
	if (suffixlen < 0 || len < 6 + (size_t)suffixlen)
		return -EINVAL;
	char *x = tmpl + len - 6 - suffixlen;
	if (memcmp(x, "XXXXXX", 6) != 0)
		return -EINVAL;
	char abs[PATH_MAX];
	if (!shim_resolve(AT_FDCWD, tmpl, abs, sizeof(abs)))
		return SHIM_PASS;
	flags = (flags & ~O_ACCMODE) | O_RDWR | O_CREAT | O_EXCL;
	/* O_EXCL in the shim's open sees captured names and real files alike. */
	for (int tries = 0; tries < TMP_MAX; tries++) {
		fill_name(x);
		const struct stg_path_rule *rule = shim_resolve(AT_FDCWD, tmpl, abs, sizeof(abs));
		int fd = rule ? session_open(abs, rule, flags, 0600, true) : SESSION_PASS;
		if (fd == SESSION_PASS) {
			fd = REAL(openat)(AT_FDCWD, tmpl, flags, 0600);
			if (fd < 0)
				fd = -errno;
		}
		if (fd != -EEXIST)
			return fd;
	}
	memcpy(x, "XXXXXX", 6);
	return -EEXIST;
}

SHIM_EXPORT int mkstemp(char *tmpl)
{
	SHIM_HANDLE(tempname(tmpl, 0, 0));
	return REAL(mkstemp)(tmpl);
}

SHIM_EXPORT int mkstemp64(char *tmpl)
{
	SHIM_HANDLE(tempname(tmpl, 0, O_LARGEFILE));
	return REAL(mkstemp64)(tmpl);
}

SHIM_EXPORT int mkostemp(char *tmpl, int flags)
{
	SHIM_HANDLE(tempname(tmpl, 0, flags));
	return REAL(mkostemp)(tmpl, flags);
}

SHIM_EXPORT int mkostemp64(char *tmpl, int flags)
{
	SHIM_HANDLE(tempname(tmpl, 0, flags | O_LARGEFILE));
	return REAL(mkostemp64)(tmpl, flags);
}

SHIM_EXPORT int mkstemps(char *tmpl, int suffixlen)
{
	SHIM_HANDLE(tempname(tmpl, suffixlen, 0));
	return REAL(mkstemps)(tmpl, suffixlen);
}

SHIM_EXPORT int mkstemps64(char *tmpl, int suffixlen)
{
	SHIM_HANDLE(tempname(tmpl, suffixlen, O_LARGEFILE));
	return REAL(mkstemps64)(tmpl, suffixlen);
}

SHIM_EXPORT int mkostemps(char *tmpl, int suffixlen, int flags)
{
	SHIM_HANDLE(tempname(tmpl, suffixlen, flags));
	return REAL(mkostemps)(tmpl, suffixlen, flags);
}

SHIM_EXPORT int mkostemps64(char *tmpl, int suffixlen, int flags)
{
	SHIM_HANDLE(tempname(tmpl, suffixlen, flags | O_LARGEFILE));
	return REAL(mkostemps64)(tmpl, suffixlen, flags);
}
