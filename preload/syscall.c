/* SPDX-License-Identifier: MIT */
/* libc's generic syscall(): the Rust standard library and crates reach newer
 * system calls through it (statx, renameat2, openat2, copy_file_range...).
 * Every number the shim handles goes to the hook of the libc function that
 * makes that call, so a captured path looks the same either way; any other
 * number goes straight on. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "hook.h"
#include "log.h"

/* openat2() with resolve restrictions cannot be applied to a captured path,
 * which lives in the cache: refused loudly there, real elsewhere. */
static long openat2_call(int dirfd, const char *path, const struct open_how *how, size_t size)
{
	if (size < sizeof(*how)) {
		errno = EINVAL;
		return -1;
	}
	char abs[PATH_MAX];
	int saved;
	if (how->resolve && shim_enter(&saved)) {
		bool captured = shim_resolve(dirfd, path, abs, sizeof(abs)) != NULL;
		if (captured)
			shim_log(STG_LOG_ERROR, "'%s': openat2 with RESOLVE_ flags is not supported "
				 "on captured paths", abs);
		if (shim_leave(captured ? -EOPNOTSUPP : 0, saved) < 0)
			return -1;
	}
	if (how->resolve)
		return REAL(syscall)(SYS_openat2, dirfd, path, how, size);
	return openat(dirfd, path, (int)how->flags, (mode_t)how->mode);
}

/* true with *ret set when nr is a call the shim handles. */
static bool route(long nr, const long *a, long *ret)
{
#define P(i) ((const char *)a[i])
#define I(i) ((int)a[i])
	switch (nr) {
	case SYS_open: *ret = open(P(0), I(1), (mode_t)a[2]); break;
	case SYS_openat: *ret = openat(I(0), P(1), I(2), (mode_t)a[3]); break;
	case SYS_openat2: *ret = openat2_call(I(0), P(1), (const struct open_how *)a[2], (size_t)a[3]); break;
	case SYS_creat: *ret = creat(P(0), (mode_t)a[1]); break;
	case SYS_close: *ret = close(I(0)); break;
	case SYS_close_range: *ret = close_range((unsigned)a[0], (unsigned)a[1], I(2)); break;
	case SYS_dup: *ret = dup(I(0)); break;
	case SYS_dup2: *ret = dup2(I(0), I(1)); break;
	case SYS_dup3: *ret = dup3(I(0), I(1), I(2)); break;
	case SYS_fcntl: *ret = fcntl(I(0), I(1), a[2]); break;
	case SYS_stat: *ret = stat(P(0), (struct stat *)a[1]); break;
	case SYS_lstat: *ret = lstat(P(0), (struct stat *)a[1]); break;
	case SYS_fstat: *ret = fstat(I(0), (struct stat *)a[1]); break;
	case SYS_newfstatat: *ret = fstatat(I(0), P(1), (struct stat *)a[2], I(3)); break;
	case SYS_statx: *ret = statx(I(0), P(1), I(2), (unsigned)a[3], (struct statx *)a[4]); break;
	case SYS_access: *ret = access(P(0), I(1)); break;
	case SYS_faccessat: *ret = faccessat(I(0), P(1), I(2), 0); break;
	case SYS_faccessat2: *ret = faccessat(I(0), P(1), I(2), I(3)); break;
	case SYS_rename: *ret = rename(P(0), P(1)); break;
	case SYS_renameat: *ret = renameat(I(0), P(1), I(2), P(3)); break;
	case SYS_renameat2: *ret = renameat2(I(0), P(1), I(2), P(3), (unsigned)a[4]); break;
	case SYS_link: *ret = link(P(0), P(1)); break;
	case SYS_linkat: *ret = linkat(I(0), P(1), I(2), P(3), I(4)); break;
	case SYS_unlink: *ret = unlink(P(0)); break;
	case SYS_unlinkat: *ret = unlinkat(I(0), P(1), I(2)); break;
	case SYS_truncate: *ret = truncate(P(0), (off_t)a[1]); break;
	case SYS_chmod: *ret = chmod(P(0), (mode_t)a[1]); break;
	case SYS_fchmod: *ret = fchmod(I(0), (mode_t)a[1]); break;
	case SYS_fchmodat: *ret = fchmodat(I(0), P(1), (mode_t)a[2], 0); break;
	case SYS_utimensat: *ret = utimensat(I(0), P(1), (const struct timespec *)a[2], I(3)); break;
	case SYS_getxattr: *ret = getxattr(P(0), P(1), (void *)a[2], (size_t)a[3]); break;
	case SYS_lgetxattr: *ret = lgetxattr(P(0), P(1), (void *)a[2], (size_t)a[3]); break;
	case SYS_listxattr: *ret = listxattr(P(0), (char *)a[1], (size_t)a[2]); break;
	case SYS_llistxattr: *ret = llistxattr(P(0), (char *)a[1], (size_t)a[2]); break;
	case SYS_write: *ret = write(I(0), (const void *)a[1], (size_t)a[2]); break;
	case SYS_pwrite64: *ret = pwrite(I(0), (const void *)a[1], (size_t)a[2], (off_t)a[3]); break;
	case SYS_writev: *ret = writev(I(0), (const struct iovec *)a[1], I(2)); break;
	case SYS_pwritev: *ret = pwritev(I(0), (const struct iovec *)a[1], I(2), (off_t)a[3]); break;
	case SYS_read: *ret = read(I(0), (void *)a[1], (size_t)a[2]); break;
	case SYS_pread64: *ret = pread(I(0), (void *)a[1], (size_t)a[2], (off_t)a[3]); break;
	case SYS_readv: *ret = readv(I(0), (const struct iovec *)a[1], I(2)); break;
	case SYS_preadv: *ret = preadv(I(0), (const struct iovec *)a[1], I(2), (off_t)a[3]); break;
	case SYS_lseek: *ret = lseek(I(0), (off_t)a[1], I(2)); break;
	case SYS_fsync: *ret = fsync(I(0)); break;
	case SYS_fdatasync: *ret = fdatasync(I(0)); break;
	case SYS_ftruncate: *ret = ftruncate(I(0), (off_t)a[1]); break;
	case SYS_fallocate: *ret = fallocate(I(0), I(1), (off_t)a[2], (off_t)a[3]); break;
	case SYS_sendfile: *ret = sendfile(I(0), I(1), (off_t *)a[2], (size_t)a[3]); break;
	case SYS_copy_file_range:
		*ret = copy_file_range(I(0), (off_t *)a[1], I(2), (off_t *)a[3], (size_t)a[4],
				       (unsigned)a[5]);
		break;
	case SYS_splice:
		*ret = splice(I(0), (off_t *)a[1], I(2), (off_t *)a[3], (size_t)a[4], (unsigned)a[5]);
		break;
	case SYS_mmap: {
		void *p = mmap((void *)a[0], (size_t)a[1], I(2), I(3), I(4), (off_t)a[5]);
		*ret = p == MAP_FAILED ? -1 : (long)p;
		break;
	}
	case SYS_munmap: *ret = munmap((void *)a[0], (size_t)a[1]); break;
	case SYS_msync: *ret = msync((void *)a[0], (size_t)a[1], I(2)); break;
	case SYS_execve: *ret = execve(P(0), (char *const *)a[1], (char *const *)a[2]); break;
	default: return false;
	}
	return true;
#undef P
#undef I
}

/* Reading six arguments whatever the call takes is what glibc's syscall()
 * does itself: the unused ones are whatever the registers hold. */
SHIM_EXPORT long syscall(long nr, ...)
{
	long a[6];
	va_list ap;
	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	long r;
	if (!shim_busy && route(nr, a, &r))
		return r;
	return REAL(syscall)(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
