/* SPDX-License-Identifier: MIT */
/* Writes a checkpoint the way the Rust standard library and crates such as
 * tempfile do, through libc's generic syscall(): a temporary created with
 * openat, written, synced, checked with statx, renamed over the checkpoint
 * with renameat2(RENAME_NOREPLACE), then given a second name with linkat.
 * Checks each step's result as a file system gives it; exits 1 on the first
 * that differs.
 *   rawcalls DIR */
#include <errno.h>
#include <fcntl.h>
#include <linux/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SIZE 100000

static int fail(const char *what)
{
	fprintf(stderr, "rawcalls: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: rawcalls DIR\n");
		return 2;
	}
	char tmp[4096], ckpt[4096], second[4096];
	snprintf(tmp, sizeof(tmp), "%s/.tmpXk3q9", argv[1]);
	snprintf(ckpt, sizeof(ckpt), "%s/model", argv[1]);
	snprintf(second, sizeof(second), "%s/model.link", argv[1]);
	static char buf[SIZE];
	for (int i = 0; i < SIZE; i++)
		buf[i] = (char)('a' + i % 23);

	long fd = syscall(SYS_openat, AT_FDCWD, tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0)
		return fail("openat");
	if (syscall(SYS_write, fd, buf, (size_t)SIZE) != SIZE)
		return fail("write");
	if (syscall(SYS_fsync, fd) < 0)
		return fail("fsync");
	struct statx stx;
	if (syscall(SYS_statx, AT_FDCWD, tmp, 0, STATX_SIZE, &stx) < 0)
		return fail("statx of the temporary");
	if (stx.stx_size != SIZE) {
		fprintf(stderr, "rawcalls: statx says %llu bytes\n", (unsigned long long)stx.stx_size);
		return 1;
	}
	if (syscall(SYS_close, fd) < 0)
		return fail("close");
	if (syscall(SYS_renameat2, AT_FDCWD, tmp, AT_FDCWD, ckpt, RENAME_NOREPLACE) < 0)
		return fail("renameat2");
	struct stat st;
	if (syscall(SYS_newfstatat, AT_FDCWD, tmp, &st, 0) == 0 || errno != ENOENT)
		return fail("the temporary is still there");
	if (syscall(SYS_newfstatat, AT_FDCWD, ckpt, &st, 0) < 0 || st.st_size != SIZE)
		return fail("newfstatat of the checkpoint");
	if (syscall(SYS_faccessat, AT_FDCWD, ckpt, R_OK) < 0)
		return fail("faccessat");
	if (syscall(SYS_linkat, AT_FDCWD, ckpt, AT_FDCWD, second, 0) < 0)
		return fail("linkat");
	if (syscall(SYS_linkat, AT_FDCWD, ckpt, AT_FDCWD, second, 0) == 0 || errno != EEXIST)
		return fail("linkat onto an existing name");
	fd = syscall(SYS_openat, AT_FDCWD, second, O_RDONLY);
	if (fd < 0)
		return fail("openat of the second name");
	static char back[SIZE + 1];
	if (syscall(SYS_read, fd, back, (size_t)SIZE + 1) != SIZE || memcmp(back, buf, SIZE) != 0)
		return fail("read of the second name");
	syscall(SYS_close, fd);
	return 0;
}
