/* SPDX-License-Identifier: MIT */
/* A sample application that checkpoints like a simulation: a float64 field
 * evolving a little each step, written every step with write() + fsync() +
 * close(), plus a small text file with fprintf. --verify checks a restored
 * checkpoint against the bytes step N wrote. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: sample-sim --dir DIR [--steps N] [--size MIB]\n"
		   "       sample-sim --verify FILE --step N [--size MIB]\n"
		   "\n"
		   "Writes DIR/field.ckpt (a float64 field of MIB MiB) and DIR/step.txt\n"
		   "after each of N steps; each step changes about a tenth of the field.\n"
		   "--verify exits 0 when FILE holds exactly what step N wrote.\n");
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* The field after `step` steps: deterministic, so --verify can rebuild it. */
static void evolve(double *field, size_t n, int step)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < n; i++)
		field[i] = sin((double)i * 1e-3) + (double)(rng(&s) >> 11) * 0x1p-60;
	size_t block = (1u << 20) / sizeof(double); /* one MiB */
	for (int k = 1; k <= step; k++) {
		uint64_t ks = 0x12345678u + (uint64_t)k;
		for (size_t b = 0; b * block < n; b++) {
			if (rng(&ks) % 10 != 0)
				continue; /* about 10% of the blocks change per step */
			for (size_t i = b * block; i < n && i < (b + 1) * block; i++)
				field[i] = field[i] * 0.99 + (double)(rng(&ks) >> 11) * 0x1p-62;
		}
	}
}

static int write_checkpoint(const char *dir, const double *field, size_t bytes, int step)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/field.ckpt", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		fprintf(stderr, "sample-sim: %s: %s\n", path, strerror(errno));
		return -1;
	}
	const char *p = (const char *)field;
	for (size_t off = 0; off < bytes;) {
		size_t n = bytes - off < (1u << 20) ? bytes - off : (1u << 20);
		ssize_t w = write(fd, p + off, n);
		if (w < 0) {
			fprintf(stderr, "sample-sim: writing %s: %s\n", path, strerror(errno));
			close(fd);
			return -1;
		}
		off += (size_t)w;
	}
	if (fsync(fd) < 0 || close(fd) < 0) {
		fprintf(stderr, "sample-sim: finishing %s: %s\n", path, strerror(errno));
		return -1;
	}
	snprintf(path, sizeof(path), "%s/step.txt", dir);
	FILE *f = fopen(path, "w");
	if (!f || fprintf(f, "step %d\nfield.ckpt %zu bytes\n", step, bytes) < 0 || fclose(f)) {
		fprintf(stderr, "sample-sim: %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'},   {"steps", required_argument, NULL, 'n'},
		{"size", required_argument, NULL, 's'},  {"verify", required_argument, NULL, 'v'},
		{"step", required_argument, NULL, 't'},  {"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *dir = NULL, *verify = NULL;
	int steps = 4, step = -1;
	long mib = 64;
	int c;
	while ((c = getopt_long(argc, argv, "d:n:s:v:t:h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'n': steps = atoi(optarg); break;
		case 's': mib = atol(optarg); break;
		case 'v': verify = optarg; break;
		case 't': step = atoi(optarg); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if ((!dir && !verify) || mib <= 0 || steps <= 0 || (verify && step < 1)) {
		usage(stderr);
		return 2;
	}
	size_t bytes = (size_t)mib << 20;
	double *field = malloc(bytes);
	if (!field) {
		fprintf(stderr, "sample-sim: out of memory\n");
		return 1;
	}
	if (verify) {
		evolve(field, bytes / sizeof(double), step);
		FILE *f = fopen(verify, "rb");
		if (!f) {
			fprintf(stderr, "sample-sim: %s: %s\n", verify, strerror(errno));
			return 1;
		}
		char *buf = malloc(bytes + 1);
		size_t got = buf ? fread(buf, 1, bytes + 1, f) : 0;
		fclose(f);
		int same = got == bytes && memcmp(buf, field, bytes) == 0;
		printf("%s: %s step %d\n", verify, same ? "identical to" : "DIFFERS from", step);
		return same ? 0 : 1;
	}
	for (int s = 1; s <= steps; s++) {
		evolve(field, bytes / sizeof(double), s);
		if (write_checkpoint(dir, field, bytes, s) < 0)
			return 1;
		printf("step %d: checkpoint written (%ld MiB)\n", s, mib);
	}
	return 0;
}
