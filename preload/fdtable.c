/* SPDX-License-Identifier: MIT */
/* Which descriptors refer to captured files: a flat array indexed by fd. */
#include <errno.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "internal.h"
#include "real.h"

/* Reserved, not committed: untouched pages cost nothing. */
#define FDTABLE_MAX (1 << 20)

struct session **shim_fdtable;
int shim_fdtable_len;
#define table shim_fdtable
#define table_len shim_fdtable_len
static int high_water; /* one past the highest fd ever set */

int fdtable_init(void)
{
	struct rlimit rl;
	int len = FDTABLE_MAX;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
	    rl.rlim_max < (rlim_t)len)
		len = (int)rl.rlim_max;
	void *p = real_mmap(NULL, (size_t)len * sizeof(*table), PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	table = p;
	__atomic_store_n(&table_len, len, __ATOMIC_RELEASE);
	return 0;
}

struct session *fdtable_get(int fd)
{
	if (fd < 0 || fd >= __atomic_load_n(&table_len, __ATOMIC_ACQUIRE))
		return NULL;
	return __atomic_load_n(&table[fd], __ATOMIC_ACQUIRE);
}

int fdtable_set(int fd, struct session *s)
{
	if (fd < 0 || fd >= table_len)
		return -EMFILE;
	__atomic_store_n(&table[fd], s, __ATOMIC_RELEASE);
	if (s && fd >= high_water)
		high_water = fd + 1;
	return 0;
}

int fdtable_next(int fd, struct session **ret)
{
	for (fd = fd < 0 ? 0 : fd; fd < high_water; fd++)
		if (table[fd]) {
			*ret = table[fd];
			return fd;
		}
	return -1;
}
