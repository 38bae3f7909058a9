/* SPDX-License-Identifier: MIT */
/* Makes one libc call on a path and prints its answer: the result, or the
 * errno's name. path-names.bats compares the answers on a real file and on
 * a captured one. Built plain and with FORTIFY (which turns realpath and
 * readlink into __realpath_chk and __readlink_chk); "sys-" calls go through
 * syscall().
 *   pathcalls CALL PATH */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>
#include <utime.h>

/* Binaries built against glibc < 2.33 call these (no declarations since). */
extern int __xmknod(int ver, const char *path, mode_t mode, dev_t *dev);
extern int __xstat(int ver, const char *path, struct stat *st);
extern int __xstat64(int ver, const char *path, struct stat64 *st);
extern int __lxstat(int ver, const char *path, struct stat *st);
extern int __lxstat64(int ver, const char *path, struct stat64 *st);
extern int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
extern int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags);

/* The file system's answer for a captured file is its directory's: the
 * numbers that do not move while the test runs. */
static void print_fs(long type, long bsize, long namelen)
{
	printf("type %lx bsize %ld namelen %ld\n", type, bsize, namelen);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: pathcalls CALL PATH\n");
		return 2;
	}
	const char *call = argv[1], *path = argv[2];
	char buf[PATH_MAX];
	struct statfs sf;
	struct statvfs sv;
	const char *out = NULL;
	long r = 0;
	errno = 0;
	if (!strcmp(call, "realpath")) {
		out = realpath(path, buf);
	} else if (!strcmp(call, "realpath-alloc")) {
		out = realpath(path, NULL);
	} else if (!strcmp(call, "canonicalize")) {
		out = canonicalize_file_name(path);
	} else if (!strcmp(call, "readlink") || !strcmp(call, "readlinkat")) {
		/* (a size unknown at compile time: FORTIFY checks it) */
		volatile size_t size = sizeof(buf);
		r = call[8] ? readlinkat(AT_FDCWD, path, buf, size) : readlink(path, buf, size);
	} else if (!strcmp(call, "sys-readlink")) {
		r = syscall(SYS_readlink, path, buf, sizeof(buf));
	} else if (!strcmp(call, "statfs") || !strcmp(call, "sys-statfs")) {
		r = call[0] == 's' && call[1] == 'y' ? syscall(SYS_statfs, path, &sf) : statfs(path, &sf);
		if (r == 0)
			print_fs((long)sf.f_type, (long)sf.f_bsize, (long)sf.f_namelen);
	} else if (!strcmp(call, "statvfs")) {
		if ((r = statvfs(path, &sv)) == 0)
			print_fs(0, (long)sv.f_bsize, (long)sv.f_namemax);
	} else if (!strcmp(call, "lchmod")) {
		r = lchmod(path, 0640);
	} else if (!strcmp(call, "handle")) {
		struct file_handle *h = malloc(sizeof(*h) + MAX_HANDLE_SZ);
		int mount_id;
		h->handle_bytes = MAX_HANDLE_SZ;
		r = name_to_handle_at(AT_FDCWD, path, h, &mount_id, 0);
		free(h);
	} else if (!strcmp(call, "xmknod")) {
		dev_t dev = 0;
		r = __xmknod(0, path, S_IFIFO | 0644, &dev);
	} else if (!strcmp(call, "mknodat")) {
		r = mknodat(AT_FDCWD, path, S_IFIFO | 0644, 0);
	} else if (!strcmp(call, "mkfifoat")) {
		r = mkfifoat(AT_FDCWD, path, 0644);
	} else if (!strcmp(call, "symlinkat")) {
		r = symlinkat("x", AT_FDCWD, path);
	} else if (!strcmp(call, "mkdirat")) {
		r = mkdirat(AT_FDCWD, path, 0755);
	} else if (!strcmp(call, "sys-mkdir")) {
		r = syscall(SYS_mkdir, path, 0755);
	} else if (!strcmp(call, "sys-mknodat")) {
		r = syscall(SYS_mknodat, AT_FDCWD, path, S_IFIFO | 0644, 0);
	} else if (!strcmp(call, "sys-symlink")) {
		r = syscall(SYS_symlink, "x", path);
	} else if (!strcmp(call, "sys-rmdir")) {
		r = syscall(SYS_rmdir, path);
	} else if (!strcmp(call, "sys-chdir")) {
		r = syscall(SYS_chdir, path);
	} else if (!strcmp(call, "sys-chown")) {
		r = syscall(SYS_chown, path, getuid(), getgid());
	} else if (!strcmp(call, "sys-chown-other")) {
		r = syscall(SYS_chown, path, getuid() + 1, -1);
	} else if (!strncmp(call, "xstat", 5) || !strncmp(call, "lxstat", 6) ||
		   !strncmp(call, "fxstatat", 8)) {
		/* _STAT_VER_LINUX is 1 on x86-64; 64-bit names take the same struct. */
		struct stat st;
		bool is64 = strstr(call, "64");
		if (call[0] == 'x')
			r = is64 ? __xstat64(1, path, (struct stat64 *)&st) : __xstat(1, path, &st);
		else if (call[0] == 'l')
			r = is64 ? __lxstat64(1, path, (struct stat64 *)&st) : __lxstat(1, path, &st);
		else
			r = is64 ? __fxstatat64(1, AT_FDCWD, path, (struct stat64 *)&st, 0)
				 : __fxstatat(1, AT_FDCWD, path, &st, 0);
		if (r == 0)
			printf("size %lld mode %o\n", (long long)st.st_size, (unsigned)st.st_mode);
	} else if (!strcmp(call, "remove")) {
		r = remove(path);
	} else if (!strncmp(call, "utime", 5) || !strcmp(call, "lutimes") || !strcmp(call, "futimesat")) {
		/* Sets a fixed time the caller then reads with stat. */
		struct utimbuf ub = {.actime = 1000000000, .modtime = 1000000000};
		struct timeval tv[2] = {{1000000000, 0}, {1000000000, 0}};
		if (!strcmp(call, "utime"))
			r = utime(path, &ub);
		else if (!strcmp(call, "utimes"))
			r = utimes(path, tv);
		else if (!strcmp(call, "lutimes"))
			r = lutimes(path, tv);
		else
			r = futimesat(AT_FDCWD, path, tv);
		struct stat st;
		if (r == 0 && (r = stat(path, &st)) == 0)
			printf("mtime %lld\n", (long long)st.st_mtime);
	} else if (!strcmp(call, "sys-handle")) {
		struct file_handle *h = malloc(sizeof(*h) + MAX_HANDLE_SZ);
		int mount_id;
		h->handle_bytes = MAX_HANDLE_SZ;
		r = syscall(SYS_name_to_handle_at, AT_FDCWD, path, h, &mount_id, 0);
		free(h);
	} else {
		fprintf(stderr, "pathcalls: unknown call '%s'\n", call);
		return 2;
	}
	bool returns_name = !strncmp(call, "realpath", 8) || !strcmp(call, "canonicalize");
	if (returns_name ? !out : r < 0) {
		printf("%s\n", strerrorname_np(errno));
		return 1;
	}
	if (out)
		printf("%s\n", out);
	else if (strstr(call, "readlink"))
		printf("%.*s\n", (int)r, buf);
	else if (!strstr(call, "stat") && !strstr(call, "utime"))
		printf("ok\n");
	return 0;
}
