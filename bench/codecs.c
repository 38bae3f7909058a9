/* SPDX-License-Identifier: MIT */
/* Where each codec can run: single-core encode and decode speed and the
 * stored size of every codec and filter of chunk.c, on checkpoint-like data
 * built here, in 1 MiB chunks, beside the disk's write+fsync speed.
 * Usage: codecs [-s MiB per data set] [-d DIR to time the disk in]. */
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chunk.h"

#define CHUNK (1u << 20)

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static double uniform(uint64_t *s)
{
	return (double)(rng(s) >> 11) * 0x1p-53;
}

static double normal(uint64_t *s)
{
	double u = uniform(s) + 1e-300, v = uniform(s);
	return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Model weights: fp32 ~ N(0, 0.02). */
static void make_fp32(uint8_t *p, size_t n, uint64_t s)
{
	float *f = (float *)p;
	for (size_t i = 0; i < n / 4; i++)
		f[i] = (float)(0.02 * normal(&s));
}

/* The same as bf16: the top half of each fp32. */
static void make_bf16(uint8_t *p, size_t n, uint64_t s)
{
	uint16_t *h = (uint16_t *)p;
	for (size_t i = 0; i < n / 2; i++) {
		float f = (float)(0.02 * normal(&s));
		uint32_t u;
		memcpy(&u, &f, 4);
		h[i] = (uint16_t)(u >> 16);
	}
}

/* A smooth float64 simulation field on a 2-D grid, computed in full
 * precision (the low mantissa bits are arithmetic noise). */
static void make_field(uint8_t *p, size_t n, uint64_t s)
{
	(void)s;
	double *d = (double *)p;
	size_t w = 1024;
	for (size_t i = 0; i < n / 8; i++)
		d[i] = 300.0 + 20.0 * sin((double)(i % w) * 0.01) * cos((double)(i / w) * 0.013);
}

/* Positions and velocities of particles (x y z vx vy vz each) after a few
 * steps of a noisy integrator: every value moves a little. */
static void make_particles(uint8_t *p, size_t n, uint64_t s)
{
	double *d = (double *)p;
	size_t np = n / 48;
	for (size_t i = 0; i < np; i++) {
		double *a = d + 6 * i;
		for (int k = 0; k < 3; k++) {
			a[k] = 100.0 * uniform(&s);
			a[3 + k] = normal(&s);
		}
		for (int step = 0; step < 5; step++)
			for (int k = 0; k < 3; k++) {
				a[3 + k] += 0.01 * normal(&s);
				a[k] += 0.001 * a[3 + k];
			}
	}
}

/* A process image: 8-byte pointers into a few regions, small integers and
 * ASCII text, mixed. */
static void make_mixed(uint8_t *p, size_t n, uint64_t s)
{
	static const char words[] = "checkpoint restart particle solver mesh rank step ";
	size_t i = 0;
	while (i + 8 <= n) {
		uint64_t r = rng(&s), v;
		switch (r % 3) {
		case 0: v = 0x00007f0000000000ull + ((r >> 8) % 4 << 32) + ((r >> 16) & 0xffff8); break;
		case 1: v = (r >> 40) % 1000; break;
		default:
			memcpy(&v, words + (r >> 8) % (sizeof(words) - 9), 8);
		}
		memcpy(p + i, &v, 8);
		i += 8;
	}
	memset(p + i, 0, n - i);
}

static void make_random(uint8_t *p, size_t n, uint64_t s)
{
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v = rng(&s);
		memcpy(p + i, &v, 8);
	}
}

static const struct dataset {
	const char *name;
	void (*make)(uint8_t *p, size_t n, uint64_t seed);
	const char *element; /* the filter's element size for this data */
} datasets[] = {
	{"fp32 weights", make_fp32, "4"},
	{"bf16 weights", make_bf16, "2"},
	{"float64 field", make_field, "8"},
	{"float64 particles", make_particles, "8"},
	{"text/pointer mix", make_mixed, "8"},
	{"random", make_random, "8"},
};

static const struct config {
	const char *label;
	const char *compress;
	const char *filter; /* before the element size */
	int level;
} configs[] = {
	{"lz4", "lz4", "none", 0},
	{"zstd -1", "zstd", "none", -1},
	{"zstd 1", "zstd", "none", 1},
	{"zstd 3", "zstd", "none", 3},
	{"shuffle+lz4", "lz4", "shuffle", 0},
	{"bitshuffle+lz4", "lz4", "bitshuffle", 0},
	{"shuffle+zstd -1", "zstd", "shuffle", -1},
	{"shuffle+zstd 1", "zstd", "shuffle", 1},
	{"bitshuffle+zstd 1", "zstd", "bitshuffle", 1},
	{"auto", "auto", "none", 0},
};

/* Times encoding and decoding data (n bytes) in 1 MiB chunks, best of two. */
static void run(const struct dataset *ds, const struct config *cf, const uint8_t *data, size_t n,
		uint8_t *obj, uint8_t *out)
{
	struct stg_chunk_codec c = stg_chunk_codec_default;
	char err[256], filter[32];
	if (strcmp(cf->filter, "none") == 0)
		snprintf(filter, sizeof(filter), "none");
	else
		snprintf(filter, sizeof(filter), "%s%s", cf->filter, ds->element);
	if (stg_chunk_codec_parse(&c, "compress", cf->compress, err, sizeof(err)) < 0 ||
	    stg_chunk_codec_parse(&c, "filter", filter, err, sizeof(err)) < 0) {
		fprintf(stderr, "codecs: %s\n", err);
		exit(1);
	}
	c.level = (int8_t)cf->level;
	size_t nchunks = n / CHUNK, stride = stg_chunk_bound(CHUNK);
	size_t *lens = malloc(nchunks * sizeof(*lens));
	struct stg_hash *hashes = malloc(nchunks * sizeof(*hashes));
	for (size_t i = 0; i < nchunks; i++)
		stg_hash_compute(data + i * CHUNK, CHUNK, &hashes[i]);
	double enc = 1e9, dec = 1e9;
	size_t stored = 0;
	for (int rep = 0; rep < 2; rep++) {
		double t = now();
		stored = 0;
		for (size_t i = 0; i < nchunks; i++) {
			lens[i] = stg_chunk_encode(data + i * CHUNK, CHUNK, &hashes[i], &c,
						   obj + i * stride);
			stored += lens[i];
		}
		double te = now() - t;
		t = now();
		for (size_t i = 0; i < nchunks; i++)
			if (stg_chunk_decode(obj + i * stride, lens[i], &hashes[i], CHUNK,
					     out + i * CHUNK) < 0) {
				fprintf(stderr, "codecs: %s %s: chunk %zu does not decode\n", ds->name,
					cf->label, i);
				exit(1);
			}
		double td = now() - t;
		enc = te < enc ? te : enc;
		dec = td < dec ? td : dec;
	}
	if (memcmp(out, data, nchunks * CHUNK) != 0) {
		fprintf(stderr, "codecs: %s %s: round trip differs\n", ds->name, cf->label);
		exit(1);
	}
	printf("| %-17s | %-18s | %5.1f%% | %5.2f | %5.2f |\n", ds->name, cf->label,
	       100.0 * (double)stored / (double)(nchunks * CHUNK), (double)n / enc / 1e9,
	       (double)n / dec / 1e9);
	free(lens);
	free(hashes);
}

/* Buffered write + fsync of n bytes into dir, as the capture path's disk. */
static double disk_speed(const char *dir, const uint8_t *data, size_t n)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/codecs-bench.tmp", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return 0;
	double t = now();
	for (size_t off = 0; off < n; off += CHUNK)
		if (write(fd, data + off, CHUNK) != CHUNK)
			break;
	fsync(fd);
	t = now() - t;
	close(fd);
	unlink(path);
	return (double)n / t / 1e9;
}

int main(int argc, char **argv)
{
	size_t mib = 64;
	const char *dir = NULL;
	int opt;
	while ((opt = getopt(argc, argv, "s:d:")) != -1) {
		if (opt == 's')
			mib = (size_t)atol(optarg);
		else if (opt == 'd')
			dir = optarg;
		else {
			fprintf(stderr, "usage: codecs [-s MiB per data set] [-d DIR]\n");
			return 2;
		}
	}
	size_t n = (mib ? mib : 1) * CHUNK;
	uint8_t *data = malloc(n), *out = malloc(n);
	uint8_t *obj = malloc(n / CHUNK * stg_chunk_bound(CHUNK));
	if (!data || !out || !obj)
		return 1;
	/* Touch every page first: the first write into fresh pages costs more
	 * than any codec. */
	memset(out, 1, n);
	memset(obj, 1, n / CHUNK * stg_chunk_bound(CHUNK));
	printf("%zu MiB per data set, 1 MiB chunks, one core; stored = %% of the raw bytes, "
	       "GB/s of raw bytes\n\n",
	       n >> 20);
	printf("| data set          | codec              | stored | enc GB/s | dec GB/s |\n");
	printf("|---|---|---:|---:|---:|\n");
	for (size_t d = 0; d < sizeof(datasets) / sizeof(*datasets); d++) {
		datasets[d].make(data, n, 0x9e3779b97f4a7c15ull + d);
		for (size_t c = 0; c < sizeof(configs) / sizeof(*configs); c++)
			run(&datasets[d], &configs[c], data, n, obj, out);
	}
	if (dir) {
		make_random(data, n, 1);
		printf("\ndisk: buffered write + fsync into %s: %.2f GB/s\n", dir,
		       disk_speed(dir, data, n));
	}
	return 0;
}
