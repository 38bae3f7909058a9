/* SPDX-License-Identifier: MIT */
/* fortify: open/openat/read as a _FORTIFY_SOURCE=2 -O2 build calls them. */
/*
 * usage: fortify PATH
 *
 * Built with -D_FORTIFY_SOURCE=2 -O2, the two-argument open()/openat() with
 * flags unknown at compile time become calls to __open_2/__openat_2 (or
 * __open64_2/__openat64_2 with _FILE_OFFSET_BITS=64), read() into a buffer of
 * known size becomes __read_chk and fprintf() __fprintf_chk. Three commits:
 * create, modify in place, append.
 */
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng = 42;

static uint64_t next(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void fail(const char *what)
{
	perror(what);
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fortify PATH\n");
		return 2;
	}
	const char *path = argv[1];
	/* Flags the compiler cannot see through. */
	volatile int rdwr = O_RDWR, append = O_WRONLY | O_APPEND;
	volatile size_t nsmall = 4096;
	static char buf[300000];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)next();

	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		fail("open O_CREAT");
	if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
		fail("write");
	if (close(fd) < 0)
		fail("close");

	fd = open(path, rdwr); /* __open_2 */
	if (fd < 0)
		fail("open (fortified)");
	char small[4096];
	if (read(fd, small, nsmall) != (ssize_t)sizeof(small)) /* __read_chk */
		fail("read");
	if (memcmp(small, buf, sizeof(small)) != 0) {
		fprintf(stderr, "fortify: read back other bytes than written\n");
		return 1;
	}
	if (pwrite(fd, small, sizeof(small), 150000) != (ssize_t)sizeof(small))
		fail("pwrite");
	if (pwrite(fd, buf, 100000, 250000) != 100000)
		fail("pwrite past the end");
	if (close(fd) < 0)
		fail("close");

	char d[4096], b[4096];
	snprintf(d, sizeof(d), "%s", path);
	snprintf(b, sizeof(b), "%s", path);
	int dfd = open(dirname(d), O_RDONLY | O_DIRECTORY);
	if (dfd < 0)
		fail("open dir");
	fd = openat(dfd, basename(b), append); /* __openat_2 */
	if (fd < 0)
		fail("openat (fortified)");
	FILE *f = fdopen(fd, "a");
	if (!f)
		fail("fdopen");
	for (int i = 0; i < 2000; i++)
		fprintf(f, "%d %llx\n", i, (unsigned long long)next()); /* __fprintf_chk */
	if (fclose(f) != 0)
		fail("fclose");
	close(dfd);
	return 0;
}
