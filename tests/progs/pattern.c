/* SPDX-License-Identifier: MIT */
/* pattern: writes numbered versions of a file whose bytes can be checked. */
/*
 * usage: pattern write seq|shadow PATH VERSION SIZE
 *        pattern check PATH
 *
 * Version V of SIZE bytes starts with a 32-byte header naming V and SIZE;
 * the rest comes from a generator keyed by the 4 KiB block and, for one
 * block in 16, by V: successive versions share most of their bytes, as
 * checkpoints do. check reads the header of PATH, regenerates that version
 * and compares, so that no reference copy is needed: it prints "V" and
 * exits 0 when every byte matches, 1 (with the first differing offset on
 * stderr) when not.
 *
 * write seq writes front to back in 64 KiB pieces (the shim's fast path);
 * shadow writes the blocks back to front with pwrite (a write away from
 * the end: the shim's shadow file; 32 MiB or more with durability = local
 * makes a pending commit). Both open with O_TRUNC and close at the end; the
 * version is committed when close returns.
 *
 * Exit status: 0 done, 1 a call failed or the bytes differ, 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 4096
#define HEADER 32

static uint64_t next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* Fills buf with the bytes of block b of version v (size bytes long). */
static void gen_block(uint64_t v, uint64_t size, uint64_t b, unsigned char *buf)
{
	uint64_t s = (b + 1) * 0x9e3779b97f4a7c15ULL ^ (b % 16 == v % 16 ? v << 32 : 0);

	s |= 1;
	for (size_t i = 0; i < BLOCK; i += 8) {
		uint64_t x = next(&s);

		memcpy(buf + i, &x, 8);
	}
	if (b == 0) {
		char h[64];

		snprintf(h, sizeof(h), "pattern v%010" PRIu64 " s%010" PRIu64 "\n", v, size);
		memcpy(buf, h, HEADER);
	}
}

static int fail(const char *what, const char *path)
{
	fprintf(stderr, "pattern: %s '%s': %s\n", what, path, strerror(errno));
	return 1;
}

static int pwrite_all(int fd, const unsigned char *p, size_t n, off_t off)
{
	while (n > 0) {
		ssize_t w = pwrite(fd, p, n, off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

static int cmd_write(const char *mode, const char *path, uint64_t v, uint64_t size)
{
	static unsigned char buf[16 * BLOCK];
	uint64_t nblocks = (size + BLOCK - 1) / BLOCK;
	int shadow = !strcmp(mode, "shadow");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		return fail("open", path);
	for (uint64_t g = 0, groups = (nblocks + 15) / 16; g < groups; g++) {
		/* Back to front for shadow: the first pwrite lands at the end. */
		uint64_t first = (shadow ? groups - 1 - g : g) * 16;
		uint64_t off = first * BLOCK;
		size_t n = 0;

		for (uint64_t b = first; b < first + 16 && b < nblocks; b++, n += BLOCK)
			gen_block(v, size, b, buf + n);
		if (off + n > size)
			n = (size_t)(size - off);
		if (pwrite_all(fd, buf, n, (off_t)off) < 0)
			return fail("write", path);
	}
	if (close(fd) < 0)
		return fail("close", path);
	return 0;
}

static int cmd_check(const char *path)
{
	static unsigned char want[BLOCK], got[BLOCK];
	char h[HEADER + 1];
	uint64_t v, size, off = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (fd < 0)
		return fail("open", path);
	r = pread(fd, h, HEADER, 0);
	if (r != HEADER)
		return fprintf(stderr, "pattern: '%s' has no header\n", path), 1;
	h[HEADER] = '\0';
	if (sscanf(h, "pattern v%10" SCNu64 " s%10" SCNu64 "\n", &v, &size) != 2)
		return fprintf(stderr, "pattern: '%s' has a bad header\n", path), 1;
	for (uint64_t b = 0; off < size; b++, off += BLOCK) {
		size_t n = size - off < BLOCK ? (size_t)(size - off) : BLOCK;

		gen_block(v, size, b, want);
		r = pread(fd, got, n, (off_t)off);
		if (r < 0)
			return fail("read", path);
		if ((size_t)r != n || memcmp(want, got, n) != 0) {
			fprintf(stderr, "pattern: '%s' (version %" PRIu64 ") differs in block %" PRIu64
				"\n", path, v, b);
			return 1;
		}
	}
	if (pread(fd, got, 1, (off_t)size) != 0) {
		fprintf(stderr, "pattern: '%s' runs past %" PRIu64 " bytes\n", path, size);
		return 1;
	}
	close(fd);
	printf("%" PRIu64 "\n", v);
	return 0;
}

static uint64_t number(const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v == 0 || v > 9999999999ULL) {
		fprintf(stderr, "pattern: '%s' is not a number from 1 to 9999999999\n", s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	if (argc == 6 && !strcmp(argv[1], "write") &&
	    (!strcmp(argv[2], "seq") || !strcmp(argv[2], "shadow"))) {
		uint64_t size = number(argv[5]);

		if (size < HEADER) {
			fprintf(stderr, "pattern: SIZE must be %d bytes at least\n", HEADER);
			return 2;
		}
		return cmd_write(argv[2], argv[3], number(argv[4]), size);
	}
	if (argc == 3 && !strcmp(argv[1], "check"))
		return cmd_check(argv[2]);
	fputs("usage: pattern write seq|shadow PATH VERSION SIZE\n"
	      "       pattern check PATH\n",
	      stderr);
	return 2;
}
