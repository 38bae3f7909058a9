/* SPDX-License-Identifier: MIT */
/* The cost of one system call on a file stagehand does not capture, made
 * through libc and made without it (a syscall instruction of its own, as
 * rustix and liburing make them): `raw-syscalls DIR N` prints nanoseconds
 * per call for each kind. Under the shim, the second kind traps into its
 * Syscall User Dispatch handler. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long raw4(long nr, long a, long b, long c, long d)
{
	long ret;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: raw-syscalls DIR N\n");
		return 2;
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/raw-syscalls.dat", argv[1]);
	long n = atol(argv[2]);
	static char buf[4096];
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	double t0 = now();
	for (long i = 0; i < n; i++)
		pwrite(fd, buf, sizeof(buf), (i & 255) * 4096);
	double t1 = now();
	for (long i = 0; i < n; i++)
		raw4(SYS_pwrite64, fd, (long)buf, sizeof(buf), (i & 255) * 4096);
	double t2 = now();
	for (long i = 0; i < n; i++)
		getppid();
	double t3 = now();
	for (long i = 0; i < n; i++)
		raw4(SYS_getppid, 0, 0, 0, 0);
	double t4 = now();
	close(fd);
	unlink(path);
	printf("pwrite-libc %.0f\npwrite-raw %.0f\ngetppid-libc %.0f\ngetppid-raw %.0f\n",
	       (t1 - t0) / n, (t2 - t1) / n, (t3 - t2) / n, (t4 - t3) / n);
	return 0;
}
