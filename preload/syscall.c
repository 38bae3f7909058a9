/* SPDX-License-Identifier: MIT */
/* libc's generic syscall(): the Rust standard library and crates reach newer
 * system calls through it (statx, renameat2, openat2, copy_file_range...).
 * A call the shim handles that names a captured path or descriptor goes to
 * the hook of the libc function making that call, so a captured file looks
 * the same either way. Every other call goes straight to the kernel: callers
 * use syscall() to get past interposed libc functions (UCX's memory hooks
 * call syscall(SYS_mmap) from inside their mmap), and must get just that. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "hook.h"
#include "log.h"

/* openat2() of a captured path. Its resolve restrictions cannot be applied
 * to a file that lives in the cache: refused loudly. */
static long openat2_call(int dirfd, const char *path, const struct open_how *how, size_t size)
{
	if (size < sizeof(*how)) {
		errno = EINVAL;
		return -1;
	}
	if (how->resolve) {
		shim_log(STG_LOG_ERROR, "'%s': openat2 with RESOLVE_ flags is not supported "
			 "on captured paths", path);
		errno = EOPNOTSUPP;
		return -1;
	}
	return openat(dirfd, path, (int)how->flags, (mode_t)how->mode);
}

/* Does (dirfd, path) name something below a captured path? */
static bool captured_path(int dirfd, const char *path)
{
	int saved;
	if (!path || !shim_enter(&saved))
		return false;
	char abs[PATH_MAX];
	bool r = shim_resolve(dirfd, path, abs, sizeof(abs)) != NULL;
	shim_leave(0, saved);
	return r;
}

/* A captured file's descriptor, or one of the shim's own. */
static bool captured_fd(long fd)
{
	return fd >= 0 && fd <= INT32_MAX && (fdtable_peek((int)fd) || shim_fd_reserved((int)fd));
}

/* (dirfd, path) with its flags: with AT_EMPTY_PATH and "", the descriptor
 * itself. */
static bool captured_at(long dirfd, const char *path, int flags)
{
	return path && !path[0] && (flags & AT_EMPTY_PATH) ? captured_fd(dirfd) : captured_path((int)dirfd, path);
}

bool syscall_route(long nr, const long *a, long *ret)
{
#define P(i) ((const char *)a[i])
#define I(i) ((int)a[i])
#define AT(d, p) if (!captured_path(d, p)) return false
#define ATE(d, p, fl) if (!captured_at(d, p, fl)) return false
#define AT2(d1, p1, d2, p2) if (!captured_path(d1, p1) && !captured_path(d2, p2)) return false
#define FD(f) if (!captured_fd(f)) return false
#define FD2(f1, f2) if (!captured_fd(f1) && !captured_fd(f2)) return false
	switch (nr) {
	case SYS_open: AT(AT_FDCWD, P(0)); *ret = open(P(0), I(1), (mode_t)a[2]); break;
	case SYS_openat: AT(I(0), P(1)); *ret = openat(I(0), P(1), I(2), (mode_t)a[3]); break;
	case SYS_openat2: AT(I(0), P(1)); *ret = openat2_call(I(0), P(1), (const struct open_how *)a[2], (size_t)a[3]); break;
	case SYS_creat: AT(AT_FDCWD, P(0)); *ret = creat(P(0), (mode_t)a[1]); break;
	case SYS_close: FD(a[0]); *ret = close(I(0)); break;
	case SYS_close_range: if (!shim.ready) return false; *ret = close_range((unsigned)a[0], (unsigned)a[1], I(2)); break;
	case SYS_dup: FD(a[0]); *ret = dup(I(0)); break;
	case SYS_dup2: FD2(a[0], a[1]); *ret = dup2(I(0), I(1)); break;
	case SYS_dup3: FD2(a[0], a[1]); *ret = dup3(I(0), I(1), I(2)); break;
	case SYS_fcntl: FD(a[0]); *ret = fcntl(I(0), I(1), a[2]); break;
	case SYS_stat: AT(AT_FDCWD, P(0)); *ret = stat(P(0), (struct stat *)a[1]); break;
	case SYS_lstat: AT(AT_FDCWD, P(0)); *ret = lstat(P(0), (struct stat *)a[1]); break;
	case SYS_fstat: FD(a[0]); *ret = fstat(I(0), (struct stat *)a[1]); break;
	case SYS_newfstatat: ATE(I(0), P(1), I(3)); *ret = fstatat(I(0), P(1), (struct stat *)a[2], I(3)); break;
	case SYS_statx: ATE(I(0), P(1), I(2)); *ret = statx(I(0), P(1), I(2), (unsigned)a[3], (struct statx *)a[4]); break;
	case SYS_access: AT(AT_FDCWD, P(0)); *ret = access(P(0), I(1)); break;
	case SYS_faccessat: AT(I(0), P(1)); *ret = faccessat(I(0), P(1), I(2), 0); break;
	case SYS_faccessat2: ATE(I(0), P(1), I(3)); *ret = faccessat(I(0), P(1), I(2), I(3)); break;
	case SYS_rename: AT2(AT_FDCWD, P(0), AT_FDCWD, P(1)); *ret = rename(P(0), P(1)); break;
	case SYS_renameat: AT2(I(0), P(1), I(2), P(3)); *ret = renameat(I(0), P(1), I(2), P(3)); break;
	case SYS_renameat2: AT2(I(0), P(1), I(2), P(3)); *ret = renameat2(I(0), P(1), I(2), P(3), (unsigned)a[4]); break;
	case SYS_link: AT2(AT_FDCWD, P(0), AT_FDCWD, P(1)); *ret = link(P(0), P(1)); break;
	case SYS_linkat:
		if (!captured_at(I(0), P(1), I(4)) && !captured_path(I(2), P(3)))
			return false;
		*ret = linkat(I(0), P(1), I(2), P(3), I(4));
		break;
	case SYS_unlink: AT(AT_FDCWD, P(0)); *ret = unlink(P(0)); break;
	case SYS_unlinkat: AT(I(0), P(1)); *ret = unlinkat(I(0), P(1), I(2)); break;
	case SYS_truncate: AT(AT_FDCWD, P(0)); *ret = truncate(P(0), (off_t)a[1]); break;
	case SYS_chmod: AT(AT_FDCWD, P(0)); *ret = chmod(P(0), (mode_t)a[1]); break;
	case SYS_fchmod: FD(a[0]); *ret = fchmod(I(0), (mode_t)a[1]); break;
	case SYS_fchmodat: AT(I(0), P(1)); *ret = fchmodat(I(0), P(1), (mode_t)a[2], 0); break;
	case SYS_utimensat:
		/* (a NULL path: dirfd itself) */
		if (!(a[1] ? captured_path(I(0), P(1)) : captured_fd(a[0])))
			return false;
		*ret = utimensat(I(0), P(1), (const struct timespec *)a[2], I(3)); break;
	case SYS_chown: AT(AT_FDCWD, P(0)); *ret = chown(P(0), (uid_t)a[1], (gid_t)a[2]); break;
	case SYS_lchown: AT(AT_FDCWD, P(0)); *ret = lchown(P(0), (uid_t)a[1], (gid_t)a[2]); break;
	case SYS_fchownat: ATE(I(0), P(1), I(4)); *ret = fchownat(I(0), P(1), (uid_t)a[2], (gid_t)a[3], I(4)); break;
	case SYS_readlink: AT(AT_FDCWD, P(0)); *ret = readlink(P(0), (char *)a[1], (size_t)a[2]); break;
	case SYS_readlinkat: AT(I(0), P(1)); *ret = readlinkat(I(0), P(1), (char *)a[2], (size_t)a[3]); break;
	case SYS_statfs: AT(AT_FDCWD, P(0)); *ret = statfs(P(0), (struct statfs *)a[1]); break;
	case SYS_name_to_handle_at: AT(I(0), P(1)); *ret = name_to_handle_at(I(0), P(1), (struct file_handle *)a[2], (int *)a[3], I(4)); break;
	case SYS_mkdir: AT(AT_FDCWD, P(0)); *ret = mkdir(P(0), (mode_t)a[1]); break;
	case SYS_mkdirat: AT(I(0), P(1)); *ret = mkdirat(I(0), P(1), (mode_t)a[2]); break;
	case SYS_mknod: AT(AT_FDCWD, P(0)); *ret = mknod(P(0), (mode_t)a[1], (dev_t)a[2]); break;
	case SYS_mknodat: AT(I(0), P(1)); *ret = mknodat(I(0), P(1), (mode_t)a[2], (dev_t)a[3]); break;
	case SYS_symlink: AT(AT_FDCWD, P(1)); *ret = symlink(P(0), P(1)); break;
	case SYS_symlinkat: AT(I(1), P(2)); *ret = symlinkat(P(0), I(1), P(2)); break;
	case SYS_rmdir: AT(AT_FDCWD, P(0)); *ret = rmdir(P(0)); break;
	case SYS_chdir: AT(AT_FDCWD, P(0)); *ret = chdir(P(0)); break;
	case SYS_getxattr: AT(AT_FDCWD, P(0)); *ret = getxattr(P(0), P(1), (void *)a[2], (size_t)a[3]); break;
	case SYS_lgetxattr: AT(AT_FDCWD, P(0)); *ret = lgetxattr(P(0), P(1), (void *)a[2], (size_t)a[3]); break;
	case SYS_listxattr: AT(AT_FDCWD, P(0)); *ret = listxattr(P(0), (char *)a[1], (size_t)a[2]); break;
	case SYS_llistxattr: AT(AT_FDCWD, P(0)); *ret = llistxattr(P(0), (char *)a[1], (size_t)a[2]); break;
	case SYS_setxattr: AT(AT_FDCWD, P(0)); *ret = setxattr(P(0), P(1), (const void *)a[2], (size_t)a[3], I(4)); break;
	case SYS_lsetxattr: AT(AT_FDCWD, P(0)); *ret = lsetxattr(P(0), P(1), (const void *)a[2], (size_t)a[3], I(4)); break;
	case SYS_removexattr: AT(AT_FDCWD, P(0)); *ret = removexattr(P(0), P(1)); break;
	case SYS_lremovexattr: AT(AT_FDCWD, P(0)); *ret = lremovexattr(P(0), P(1)); break;
	case SYS_fgetxattr: FD(a[0]); *ret = fgetxattr(I(0), P(1), (void *)a[2], (size_t)a[3]); break;
	case SYS_fsetxattr: FD(a[0]); *ret = fsetxattr(I(0), P(1), (const void *)a[2], (size_t)a[3], I(4)); break;
	case SYS_flistxattr: FD(a[0]); *ret = flistxattr(I(0), (char *)a[1], (size_t)a[2]); break;
	case SYS_fremovexattr: FD(a[0]); *ret = fremovexattr(I(0), P(1)); break;
	case SYS_fchown: FD(a[0]); *ret = fchown(I(0), (uid_t)a[1], (gid_t)a[2]); break;
	case SYS_utime: AT(AT_FDCWD, P(0)); *ret = utime(P(0), (const struct utimbuf *)a[1]); break;
	case SYS_utimes: AT(AT_FDCWD, P(0)); *ret = utimes(P(0), (const struct timeval *)a[1]); break;
	case SYS_futimesat: AT(I(0), P(1)); *ret = futimesat(I(0), P(1), (const struct timeval *)a[2]); break;
	case SYS_write: FD(a[0]); *ret = write(I(0), (const void *)a[1], (size_t)a[2]); break;
	case SYS_pwrite64: FD(a[0]); *ret = pwrite(I(0), (const void *)a[1], (size_t)a[2], (off_t)a[3]); break;
	case SYS_writev: FD(a[0]); *ret = writev(I(0), (const struct iovec *)a[1], I(2)); break;
	case SYS_pwritev: FD(a[0]); *ret = pwritev(I(0), (const struct iovec *)a[1], I(2), (off_t)a[3]); break;
	/* (x86-64 passes the whole offset in the low word; flags after the high one) */
	case SYS_pwritev2: FD(a[0]); *ret = pwritev2(I(0), (const struct iovec *)a[1], I(2), (off_t)a[3], I(5)); break;
	case SYS_read: FD(a[0]); *ret = read(I(0), (void *)a[1], (size_t)a[2]); break;
	case SYS_pread64: FD(a[0]); *ret = pread(I(0), (void *)a[1], (size_t)a[2], (off_t)a[3]); break;
	case SYS_readv: FD(a[0]); *ret = readv(I(0), (const struct iovec *)a[1], I(2)); break;
	case SYS_preadv: FD(a[0]); *ret = preadv(I(0), (const struct iovec *)a[1], I(2), (off_t)a[3]); break;
	case SYS_preadv2: FD(a[0]); *ret = preadv2(I(0), (const struct iovec *)a[1], I(2), (off_t)a[3], I(5)); break;
	case SYS_lseek: FD(a[0]); *ret = lseek(I(0), (off_t)a[1], I(2)); break;
	case SYS_fsync: FD(a[0]); *ret = fsync(I(0)); break;
	case SYS_fdatasync: FD(a[0]); *ret = fdatasync(I(0)); break;
	case SYS_ftruncate: FD(a[0]); *ret = ftruncate(I(0), (off_t)a[1]); break;
	case SYS_fallocate: FD(a[0]); *ret = fallocate(I(0), I(1), (off_t)a[2], (off_t)a[3]); break;
	case SYS_sendfile: FD2(a[0], a[1]); *ret = sendfile(I(0), I(1), (off_t *)a[2], (size_t)a[3]); break;
	case SYS_copy_file_range:
		FD2(a[0], a[2]);
		*ret = copy_file_range(I(0), (off_t *)a[1], I(2), (off_t *)a[3], (size_t)a[4],
				       (unsigned)a[5]);
		break;
	case SYS_splice:
		FD2(a[0], a[2]);
		*ret = splice(I(0), (off_t *)a[1], I(2), (off_t *)a[3], (size_t)a[4], (unsigned)a[5]);
		break;
	case SYS_mmap: {
		/* (munmap and msync go straight on: a mapping of a captured
		 * file is then committed at its close, not at the munmap) */
		if ((a[3] & MAP_ANONYMOUS) || !captured_fd(a[4]))
			return false;
		void *p = mmap((void *)a[0], (size_t)a[1], I(2), I(3), I(4), (off_t)a[5]);
		*ret = p == MAP_FAILED ? -1 : (long)p;
		break;
	}
	case SYS_execve: if (!shim.ready) return false; *ret = execve(P(0), (char *const *)a[1], (char *const *)a[2]); break;
	case SYS_exit_group:
		/* (the shim's _exit commits what the process holds last) */
		if (!shim.ready)
			return false;
		_exit(I(0));
	case SYS_execveat:
		if (!shim.ready)
			return false;
		*ret = execveat(I(0), P(1), (char *const *)a[2], (char *const *)a[3], I(4));
		break;
	default: return false;
	}
	return true;
#undef P
#undef I
#undef AT
#undef ATE
#undef AT2
#undef FD
#undef FD2
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
	if (!shim_busy && syscall_route(nr, a, &r))
		return r;
	return REAL(syscall)(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
