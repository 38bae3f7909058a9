/* SPDX-License-Identifier: MIT */
/* The benchmark's application: builds a float64 field with noise in memory
 * (untimed), then times open + write() in 1 MiB calls + fsync + close, and
 * prints the seconds. --version N changes 10% of the 1 MiB blocks per version
 * after the first; --block B writes in B-byte calls instead. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	long mib = 2048, block = 1 << 20;
	int version = 1, nosync = 0, count = 0, repeat = 1;
	int c;
	while ((c = getopt(argc, argv, "s:v:b:ncr:")) != -1) {
		switch (c) {
		case 'r': repeat = atoi(optarg); break;
		case 'c': count = 1; break;
		case 's': mib = atol(optarg); break;
		case 'v': version = atoi(optarg); break;
		case 'b': block = atol(optarg); break;
		case 'n': nosync = 1; break;
		default:
			fprintf(stderr, "usage: ckpt-writer [-s MIB] [-v VERSION] [-b BLOCK] [-n] [-c] [-r REPEAT] PATH\n");
			return 2;
		}
	}
	if (optind != argc - 1 || mib <= 0 || block <= 0) {
		fprintf(stderr, "usage: ckpt-writer [-s MIB] [-v VERSION] [-b BLOCK] [-n] [-c] [-r REPEAT] PATH\n");
		return 2;
	}
	size_t bytes = (size_t)mib << 20;
	double *f = malloc(bytes);
	if (!f) {
		perror("malloc");
		return 1;
	}
	size_t n = bytes / sizeof(double), per_mib = (1u << 20) / sizeof(double);
	uint64_t s = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < n; i++)
		f[i] = sin((double)i * 1e-4) * 100.0 + (double)(rng(&s) >> 11) * 0x1p-53;
	size_t changed = 0;
	for (int v = 2; v <= version; v++) {
		uint64_t vs = 0x5151u + (uint64_t)v;
		changed = 0;
		for (size_t b = 0; b * per_mib < n; b++)
			if (rng(&vs) % 10 == 0) {
				changed++;
				for (size_t i = b * per_mib; i < (b + 1) * per_mib && i < n; i++)
					f[i] += (double)(rng(&vs) >> 11) * 0x1p-50;
			}
	}
	if (count) {
		/* -c: how many 1 MiB blocks this version changed, nothing written */
		printf("%zu\n", changed);
		return 0;
	}
	double t0 = now();
	int fd = open(argv[optind], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		fprintf(stderr, "ckpt-writer: %s: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	const char *p = (const char *)f;
	/* -r N writes the buffer N times over (to /dev/null: many calls, little memory) */
	for (int rep = 0; rep < repeat; rep++) {
		for (size_t off = 0; off < bytes;) {
			size_t len = bytes - off < (size_t)block ? bytes - off : (size_t)block;
			ssize_t w = write(fd, p + off, len);
			if (w < 0) {
				fprintf(stderr, "ckpt-writer: write: %s\n", strerror(errno));
				return 1;
			}
			off += (size_t)w;
		}
	}
	if ((!nosync && fsync(fd) < 0) || close(fd) < 0) {
		fprintf(stderr, "ckpt-writer: %s\n", strerror(errno));
		return 1;
	}
	printf("%.6f\n", now() - t0);
	return 0;
}
