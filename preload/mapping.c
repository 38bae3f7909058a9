/* SPDX-License-Identifier: MIT */
/* Writable shared mappings of captured files: their writes land in the shadow
 * whenever they happen, so the commit waits for munmap() (or msync()). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"
#include "real.h"
#include "util.h"

struct mapping {
	uintptr_t start, end;
	struct session *s;
};

static struct mapping *maps;
static size_t nmaps, capmaps;

void mapping_add(int fd, void *addr, size_t len)
{
	pthread_mutex_lock(&shim.lock);
	struct session *s = fdtable_get(fd);
	if (s && !s->readonly) {
		if (STG_GROW(maps, capmaps, nmaps + 1) == 0) {
			maps[nmaps++] = (struct mapping){(uintptr_t)addr, (uintptr_t)addr + len, s};
			s->nmaps++;
		}
	}
	pthread_mutex_unlock(&shim.lock);
}

static int commit_orphan(struct session *s)
{
	/* Neither descriptors nor mappings remain: this was the last reference. */
	int r = session_commit(s, s->keep_fd, true);
	shim_release_fd(s->keep_fd);
	real_close(s->keep_fd);
	session_free(s);
	return r;
}

void mapping_forget(struct session *s)
{
	pthread_mutex_lock(&shim.lock);
	for (size_t i = 0; i < nmaps;) {
		if (maps[i].s == s)
			maps[i] = maps[--nmaps];
		else
			i++;
	}
	s->nmaps = 0;
	pthread_mutex_unlock(&shim.lock);
}

int mapping_remove(void *addr, size_t len, bool sync_only)
{
	uintptr_t a = (uintptr_t)addr, b = a + len;
	int result = 0;
	pthread_mutex_lock(&shim.lock);
	for (size_t i = 0; i < nmaps;) {
		struct mapping *m = &maps[i];
		if (m->end <= a || m->start >= b) {
			i++;
			continue;
		}
		struct session *s = m->s;
		if (sync_only) {
			int fd = s->refs > 0 ? session_any_fd(s) : s->keep_fd;
			int r = fd >= 0 ? session_commit(s, fd, false) : 0;
			if (r < 0 && result == 0)
				result = r;
			i++;
			continue;
		}
		/* Part of the mapping stays mapped: only the rest is gone. */
		if (m->start < a || m->end > b) {
			if (m->start >= a)
				m->start = b;
			else if (m->end <= b)
				m->end = a;
			/* else a hole in the middle: both sides stay mapped */
			i++;
			continue;
		}
		*m = maps[--nmaps];
		if (--s->nmaps == 0 && s->refs == 0 && s->keep_fd >= 0) {
			int r = commit_orphan(s);
			if (r < 0 && result == 0)
				result = r;
		}
	}
	pthread_mutex_unlock(&shim.lock);
	return result;
}

void mapping_exit(void)
{
	pthread_mutex_lock(&shim.lock);
	while (nmaps > 0) {
		struct session *s = maps[--nmaps].s;
		if (--s->nmaps == 0 && s->refs == 0 && s->keep_fd >= 0)
			commit_orphan(s);
	}
	pthread_mutex_unlock(&shim.lock);
}
