/* SPDX-License-Identifier: MIT */
/* One captured file written by several processes of the node at once: they
 * share one shadow, found under a name in the cache, and a page of state
 * through which a process joining takes the file over from another's fast
 * path (docs/CAPTURE.md, "Several processes, one file"). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "internal.h"
#include "log.h"
#include "pending.h"
#include "real.h"
#include "util.h"

/* The page, at the start of the shadow's hold file: what every process
 * writing the file must agree on (docs/FORMAT.md, tmp/). */
enum { SHARE_NONE, SHARE_FAST, SHARE_HANDOVER };
#define PAGE_BYTES 4096
#define PAGE_PATH_MAX (PAGE_BYTES - 64)
struct share_page {
	uint32_t state;        /* SHARE_*: futex word */
	uint32_t busy;         /* the fast path's owner is inside a write */
	int32_t owner;         /* its pid */
	uint32_t mode;         /* the file's mode, with MODE_SET */
	uint64_t staged;       /* bytes the fast path holds */
	uint64_t open_version; /* the open version a sync published (0: none) */
	uint32_t flags;        /* PAGE_BROKEN, PAGE_GONE */
	uint32_t pad0;
	int64_t begin_ns;      /* when the writing began (file-time clock) */
	uint32_t joined;       /* another process joined the writing to write */
	uint8_t pad[12];
	char path[PAGE_PATH_MAX]; /* the path it was renamed to ("": its own) */
};
#define MODE_SET (1u << 31)
#define PAGE_BROKEN 1u /* a process lost content: never commit it */
#define PAGE_GONE 2u   /* unlinked, or renamed over: never commit it */
_Static_assert(sizeof(struct share_page) == PAGE_BYTES, "one page");

static void name_of(const char *path, const char *suffix, char out[64])
{
	char id[STG_HASH_HEX_LEN + 1];
	stg_catalog_file_id(path, id);
	snprintf(out, 64, "%s.%s", id, suffix);
}

/* The open locks this process holds: a fork child lets go of its copies
 * (another thread may have held one at the fork), or it would block the
 * parent's next open or close of that path for as long as it lives. */
#define MAX_HELD 64
static int held_locks[MAX_HELD]; /* fd + 1; 0: free */

static void note_lock(int fd)
{
	for (int i = 0; i < MAX_HELD; i++) {
		int free_slot = 0;
		if (__atomic_compare_exchange_n(&held_locks[i], &free_slot, fd + 1, false,
						__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return;
	}
}

void share_after_fork_child(void)
{
	for (int i = 0; i < MAX_HELD; i++) {
		int v = __atomic_exchange_n(&held_locks[i], 0, __ATOMIC_SEQ_CST);
		if (v)
			real_close(v - 1);
	}
}

int share_lock(const char *path)
{
	char name[64];
	name_of(path, "open", name);
	int fd = real_openat(shim.cache->tmp_fd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* Out of the way: the shadow opened next gets the number open() would. */
	int high = real_fcntl(fd, F_DUPFD_CLOEXEC, SHIM_HIGH_FD);
	if (high >= 0) {
		real_close(fd);
		fd = high;
	}
	int r = stg_flock(fd, LOCK_EX);
	if (r < 0) {
		real_close(fd);
		return r;
	}
	note_lock(fd);
	return fd;
}

void share_unlock(int lockfd)
{
	if (lockfd < 0)
		return;
	for (int i = 0; i < MAX_HELD; i++) {
		int v = lockfd + 1;
		if (__atomic_compare_exchange_n(&held_locks[i], &v, 0, false, __ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST))
			break;
	}
	real_close(lockfd);
}

/* Does any process hold the shadow open for writing? */
static bool held(int shadowfd)
{
	struct stat st;
	return real_fstat(shadowfd, &st) == 0 && stg_cache_shadow_held(shim.cache, st.st_dev, st.st_ino);
}

int share_open_live(const char *path, int flags)
{
	char name[64];
	name_of(path, "shadow", name);
	int fd = real_openat(shim.cache->tmp_fd, name, (flags & O_ACCMODE) | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (held(fd))
		return fd;
	/* Its writers died without closing it: what they wrote was never
	 * committed, so it is not the file's content. */
	real_close(fd);
	unlinkat(shim.cache->tmp_fd, name, 0);
	return -ENOENT;
}

int share_name(int shadowfd, const char *path)
{
	char name[64], link[64];
	name_of(path, "shadow", name);
	snprintf(link, sizeof(link), "/proc/self/fd/%d", shadowfd);
	if (linkat(AT_FDCWD, link, shim.cache->tmp_fd, name, AT_SYMLINK_FOLLOW) == 0)
		return 0;
	return -errno;
}

void share_unname(int shadowfd, const char *path)
{
	char name[64];
	name_of(path, "shadow", name);
	struct stat mine, named;
	if (real_fstat(shadowfd, &mine) == 0 &&
	    fstatat(shim.cache->tmp_fd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
	    mine.st_dev == named.st_dev && mine.st_ino == named.st_ino)
		unlinkat(shim.cache->tmp_fd, name, 0);
}

struct share_page *share_map(int holdfd)
{
	struct stat st;
	if (real_fstat(holdfd, &st) < 0)
		return NULL;
	/* Grown once, by whoever maps first: a larger size never shrinks. */
	if (st.st_size < PAGE_BYTES && real_ftruncate(holdfd, PAGE_BYTES) < 0)
		return NULL;
	void *p = real_mmap(NULL, PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, holdfd, 0);
	return p == MAP_FAILED ? NULL : p;
}

void share_unmap(struct share_page *p)
{
	if (p)
		real_munmap(p, PAGE_BYTES);
}

void share_begin(struct share_page *p, uint32_t mode)
{
	/* A hold file of a dead writing whose inode number came back may
	 * hold anything: the first holder starts afresh, under the lock. */
	memset(p, 0, sizeof(*p));
	/* The coarse clock file times are taken from: a pack made after this
	 * has a ctime no earlier. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	__atomic_store_n(&p->begin_ns, (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&p->mode, mode | MODE_SET, __ATOMIC_RELEASE);
}

bool share_mode(struct share_page *p, uint32_t *mode)
{
	uint32_t m = __atomic_load_n(&p->mode, __ATOMIC_ACQUIRE);
	if (!(m & MODE_SET))
		return false;
	*mode = m & 07777;
	return true;
}

void share_set_mode(struct share_page *p, uint32_t mode)
{
	__atomic_store_n(&p->mode, (mode & 07777) | MODE_SET, __ATOMIC_RELEASE);
}

int64_t share_begin_ns(struct share_page *p)
{
	return __atomic_load_n(&p->begin_ns, __ATOMIC_ACQUIRE);
}

uint64_t share_open_version(struct share_page *p)
{
	return __atomic_load_n(&p->open_version, __ATOMIC_ACQUIRE);
}

void share_set_open_version(struct share_page *p, uint64_t v)
{
	__atomic_store_n(&p->open_version, v, __ATOMIC_RELEASE);
}

void share_set_joined(struct share_page *p)
{
	__atomic_store_n(&p->joined, 1, __ATOMIC_RELEASE);
}

bool share_joined(struct share_page *p)
{
	return __atomic_load_n(&p->joined, __ATOMIC_ACQUIRE);
}

void share_set_broken(struct share_page *p)
{
	__atomic_fetch_or(&p->flags, PAGE_BROKEN, __ATOMIC_SEQ_CST);
}

bool share_broken(struct share_page *p)
{
	return __atomic_load_n(&p->flags, __ATOMIC_SEQ_CST) & PAGE_BROKEN;
}

bool share_gone(struct share_page *p)
{
	return __atomic_load_n(&p->flags, __ATOMIC_SEQ_CST) & PAGE_GONE;
}

bool share_path(struct share_page *p, char *out, size_t len)
{
	/* Written under the path's open lock, which the caller holds. */
	if (!p->path[0] || strnlen(p->path, PAGE_PATH_MAX) >= PAGE_PATH_MAX)
		return false;
	snprintf(out, len, "%s", p->path);
	return true;
}

/* The page of the shadow named for path, mapped, or NULL. */
static struct share_page *named_page(const char *path, int *ret_holdfd)
{
	char name[64];
	name_of(path, "shadow", name);
	struct stat st;
	if (fstatat(shim.cache->tmp_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return NULL;
	char hold[64];
	stg_cache_hold_name(st.st_dev, st.st_ino, hold);
	int h = real_openat(shim.cache->tmp_fd, hold, O_RDWR | O_CLOEXEC);
	if (h < 0)
		return NULL;
	struct share_page *p = share_map(h);
	if (!p) {
		real_close(h);
		return NULL;
	}
	*ret_holdfd = h;
	return p;
}

bool share_stat_live(const char *path, uint64_t *ret_size, struct timespec *ret_mtime,
		     uint32_t *ret_mode)
{
	char name[64];
	name_of(path, "shadow", name);
	int fd = real_openat(shim.cache->tmp_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	struct stat st;
	bool live = real_fstat(fd, &st) == 0 && held(fd);
	real_close(fd);
	if (!live)
		return false;
	*ret_size = (uint64_t)st.st_size;
	*ret_mtime = st.st_mtim;
	int h;
	struct share_page *p = named_page(path, &h);
	if (p) {
		/* A fast path keeps its data out of the shadow. */
		uint64_t staged = __atomic_load_n(&p->staged, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != SHARE_NONE && staged > *ret_size)
			*ret_size = staged;
		if (!share_mode(p, ret_mode))
			*ret_mode = 0;
		share_unmap(p);
		real_close(h);
	}
	return true;
}

/* share_forget under path's lock; with move_name, the shadow's name goes to
 * renamed_to's (whose lock the caller holds too) rather than away. */
static void forget_locked(const char *path, const char *renamed_to,
			  const struct stg_catalog_moved *moved, bool move_name)
{
	int h;
	struct share_page *p = named_page(path, &h);
	bool follows = p && renamed_to && strlen(renamed_to) < PAGE_PATH_MAX;
	if (p) {
		/* Its writers go on writing; whoever lets go last commits under
		 * the new name, or not at all. */
		if (follows) {
			snprintf(p->path, PAGE_PATH_MAX, "%s", renamed_to);
			uint64_t from = moved ? moved->from : 0;
			if (moved)
				__atomic_compare_exchange_n(&p->open_version, &from, moved->to, false,
							    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		} else
			__atomic_fetch_or(&p->flags, PAGE_GONE, __ATOMIC_SEQ_CST);
		share_unmap(p);
		real_close(h);
	}
	char name[64], to[64];
	name_of(path, "shadow", name);
	if (follows && move_name) {
		name_of(renamed_to, "shadow", to);
		if (renameat(shim.cache->tmp_fd, name, shim.cache->tmp_fd, to) < 0)
			unlinkat(shim.cache->tmp_fd, name, 0);
	} else {
		unlinkat(shim.cache->tmp_fd, name, 0);
	}
	/* A sync's pending commit is of the old name (CAPTURE.md). */
	stg_pending_drop(shim.cache, path);
}

void share_forget(const char *path, const char *renamed_to, const struct stg_catalog_moved *moved)
{
	int lk = share_lock(path);
	if (lk < 0)
		return;
	forget_locked(path, renamed_to, moved, false);
	share_unlock(lk);
}

void share_moved(const char *from, const char *to, const struct stg_catalog_moved *moved)
{
	char a[64], b[64];
	name_of(from, "open", a);
	name_of(to, "open", b);
	int order = strcmp(a, b);
	if (order == 0)
		return; /* one name */
	/* Both names' locks, taken in the order of their names by every
	 * process: nobody decides under either while the writing and its
	 * shadow's name move from one to the other. */
	int first = share_lock(order < 0 ? from : to);
	int second = first < 0 ? -1 : share_lock(order < 0 ? to : from);
	if (second < 0) {
		share_unlock(first);
		/* The writing goes on without a name: its close packs it. */
		share_forget(to, NULL, NULL);
		share_forget(from, to, moved);
		return;
	}
	/* What was written under the new name is an unlinked file now. */
	forget_locked(to, NULL, NULL, false);
	/* The shadow's name follows the file: who opens the new name joins
	 * the writing, and its close can link the shadow as a pending commit
	 * (a file whose last name went cannot be linked again). */
	forget_locked(from, to, moved, true);
	share_unlock(second);
	share_unlock(first);
}

static void wake(struct share_page *p)
{
	syscall(SYS_futex, &p->state, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void share_fast_start(struct share_page *p)
{
	__atomic_store_n(&p->owner, (int32_t)getpid(), __ATOMIC_RELAXED);
	__atomic_store_n(&p->staged, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&p->state, SHARE_FAST, __ATOMIC_SEQ_CST);
}

bool share_fast_enter(struct share_page *p)
{
	/* Dekker with share_take_over: either it sees us busy, or we see its
	 * request (both sides use sequentially consistent operations). */
	__atomic_store_n(&p->busy, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&p->state, __ATOMIC_SEQ_CST) == SHARE_FAST)
		return true;
	__atomic_store_n(&p->busy, 0, __ATOMIC_SEQ_CST);
	return false;
}

void share_fast_leave(struct share_page *p, uint64_t staged)
{
	__atomic_store_n(&p->staged, staged, __ATOMIC_SEQ_CST);
	__atomic_store_n(&p->busy, 0, __ATOMIC_SEQ_CST);
}

bool share_handover_requested(struct share_page *p)
{
	return __atomic_load_n(&p->state, __ATOMIC_SEQ_CST) == SHARE_HANDOVER;
}

void share_fast_end(struct share_page *p)
{
	__atomic_store_n(&p->state, SHARE_NONE, __ATOMIC_SEQ_CST);
	wake(p);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int timeout_s(void)
{
	const char *e = getenv("STAGEHAND_SHARE_TIMEOUT");
	int t = e ? atoi(e) : 0;
	return t > 0 ? t : 30;
}

int share_take_over(struct share_page *p, const char *path)
{
	uint32_t st = SHARE_FAST;
	if (!__atomic_compare_exchange_n(&p->state, &st, SHARE_HANDOVER, false, __ATOMIC_SEQ_CST,
					 __ATOMIC_SEQ_CST) &&
	    st == SHARE_NONE)
		return 0; /* no fast path: the shadow is the content */
	int64_t deadline = now_ms() + timeout_s() * 1000;
	pid_t owner = __atomic_load_n(&p->owner, __ATOMIC_RELAXED);
	/* A write in progress finishes first (it saw no request). */
	while (__atomic_load_n(&p->busy, __ATOMIC_SEQ_CST) && now_ms() < deadline) {
		if (owner > 0 && kill(owner, 0) < 0 && errno == ESRCH) {
			share_fast_end(p); /* it died mid-write: nothing to wait for */
			return 0;
		}
		sched_yield();
	}
	/* Nothing staged: nothing to wait for. The owner leaves its fast path
	 * at its next call, without touching the shadow's content. */
	if (!__atomic_load_n(&p->busy, __ATOMIC_SEQ_CST) &&
	    __atomic_load_n(&p->staged, __ATOMIC_SEQ_CST) == 0)
		return 0;
	while (__atomic_load_n(&p->state, __ATOMIC_SEQ_CST) == SHARE_HANDOVER) {
		if (owner > 0 && kill(owner, 0) < 0 && errno == ESRCH) {
			/* It died: what it staged was never committed. */
			share_fast_end(p);
			break;
		}
		int64_t left = deadline - now_ms();
		if (left <= 0) {
			shim_log(STG_LOG_ERROR,
				 "'%s' is being written by process %d, which did not hand it over "
				 "within %ds (it writes through the fast path and makes no call on "
				 "it meanwhile); run such programs with STAGEHAND_FAST=0",
				 path, (int)owner, timeout_s());
			return -EBUSY;
		}
		struct timespec ts = {.tv_nsec = (left < 100 ? left : 100) * 1000000};
		syscall(SYS_futex, &p->state, FUTEX_WAIT, SHARE_HANDOVER, &ts, NULL, 0);
	}
	return 0;
}
