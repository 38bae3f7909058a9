/* SPDX-License-Identifier: MIT */
/* Content-defined chunking side by side with hashing the same bytes (XXH3, as
 * every chunk is hashed anyway), on checkpoint-like data built in memory:
 * speeds, their ratio, the chunk-size distribution, and how much survives an
 * insertion near the head (64 bytes; 10,000 with cdc, farther apart than any
 * byte value recurs) with fixed and with cdc chunks.
 *
 *   cdc [--mib N] [--trials N] [--portable]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunker-internal.h"
#include "chunker.h"
#include "hash.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_random(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double uniform(void) { return (double)(next_random() >> 11) / 9007199254740992.0; }

static double normal(void)
{
	double u = uniform() + 1e-300, v = uniform();
	return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

/* 10^6 particles in a box, positions then velocities (float64), after some
 * steps of a leapfrog with a random force: the bytes of one restart file. */
static size_t make_particles(uint8_t *buf, size_t cap)
{
	size_t np = 1000000;
	if (np * 48 > cap)
		np = cap / 48;
	double *x = (double *)buf, *v = x + 3 * np;
	for (size_t i = 0; i < 3 * np; i++) {
		x[i] = 100 * uniform();
		v[i] = normal();
	}
	for (int step = 0; step < 3; step++)
		for (size_t i = 0; i < 3 * np; i++) {
			v[i] += 0.01 * (-0.001 * (x[i] - 50) + 0.1 * normal());
			x[i] += 0.01 * v[i];
		}
	return np * 48;
}

/* Weights ~ N(0, 0.02), fp32. */
static size_t make_fp32(uint8_t *buf, size_t cap)
{
	float *w = (float *)buf;
	for (size_t i = 0; i < cap / 4; i++)
		w[i] = (float)(0.02 * normal());
	return cap / 4 * 4;
}

/* The same weights in bf16: the high half of each fp32. */
static size_t make_bf16(uint8_t *buf, size_t cap)
{
	uint16_t *w = (uint16_t *)buf;
	for (size_t i = 0; i < cap / 2; i++) {
		float f = (float)(0.02 * normal());
		uint32_t u;
		memcpy(&u, &f, 4);
		w[i] = (uint16_t)(u >> 16);
	}
	return cap / 2 * 2;
}

/* 4 KiB pages of a process image: zero pages, pointer-rich heap pages
 * (addresses, small integers, zeros), text, and float arrays. */
static size_t make_image(uint8_t *buf, size_t cap)
{
	static const char words[] = "libstagehand.so /usr/lib/x86_64-linux-gnu/libc.so.6 "
				    "checkpoint restart rank=17 step=004200 MPI_COMM_WORLD ";
	size_t len = cap / 4096 * 4096;
	for (size_t pg = 0; pg < len; pg += 4096) {
		uint8_t *p = buf + pg;
		uint64_t kind = next_random() % 10;
		if (kind < 3) {
			memset(p, 0, 4096);
		} else if (kind < 7) {
			for (size_t i = 0; i < 4096; i += 8) {
				uint64_t r = next_random(), w;
				if (r % 4 == 0)
					w = 0x00007f0000000000ull | ((r >> 8) & 0xffffffff8ull);
				else if (r % 4 == 1)
					w = 0x0000560000000000ull | ((r >> 8) & 0x3ffffff0ull);
				else if (r % 4 == 2)
					w = (r >> 32) % 1000;
				else
					w = 0;
				memcpy(p + i, &w, 8);
			}
		} else if (kind < 9) {
			for (size_t i = 0; i < 4096; i++)
				p[i] = (uint8_t)words[(pg / 7 + i) % (sizeof(words) - 1)];
		} else {
			for (size_t i = 0; i < 4096; i += 8) {
				double d = 1.0 + 0.001 * (double)(i / 8) + 1e-6 * normal();
				memcpy(p + i, &d, 8);
			}
		}
	}
	return len;
}

static size_t make_random(uint8_t *buf, size_t cap)
{
	for (size_t i = 0; i + 8 <= cap; i += 8) {
		uint64_t r = next_random();
		memcpy(buf + i, &r, 8);
	}
	return cap / 8 * 8;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The chunk lengths of data, the last one included. */
static size_t chunk(enum stg_chunking kind, uint32_t size, const uint8_t *data, size_t len,
		    uint32_t *lens, size_t cap)
{
	struct stg_chunker c;
	stg_chunker_init(&c, kind, size);
	size_t off = 0, n = 0, start = 0;
	while (off < len) {
		size_t used;
		bool end = stg_chunker_next(&c, data + off, len - off, &used);
		off += used;
		if (end || off == len) {
			if (n < cap)
				lens[n] = (uint32_t)(off - start);
			n++;
			start = off;
		}
	}
	return n < cap ? n : cap;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_hash(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct stg_hash));
}

/* The share of b's bytes in chunks that a holds too. */
static double shared_bytes(enum stg_chunking kind, uint32_t size, const uint8_t *a, size_t alen,
			   const uint8_t *b, size_t blen, uint32_t *lens, size_t cap)
{
	size_t na = chunk(kind, size, a, alen, lens, cap);
	struct stg_hash *ha = malloc(na * sizeof(*ha));
	size_t off = 0;
	for (size_t i = 0; i < na; off += lens[i++])
		stg_hash_compute(a + off, lens[i], &ha[i]);
	qsort(ha, na, sizeof(*ha), cmp_hash);
	size_t nb = chunk(kind, size, b, blen, lens, cap), same = 0;
	off = 0;
	for (size_t i = 0; i < nb; off += lens[i++]) {
		struct stg_hash h;
		stg_hash_compute(b + off, lens[i], &h);
		if (bsearch(&h, ha, na, sizeof(*ha), cmp_hash))
			same += lens[i];
	}
	free(ha);
	return (double)same / (double)blen;
}

int main(int argc, char **argv)
{
	size_t mib = 64;
	int trials = 5;
	bool simd = stg_chunker_use_simd(true);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
			mib = strtoul(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--trials") == 0 && i + 1 < argc)
			trials = atoi(argv[++i]);
		else if (strcmp(argv[i], "--portable") == 0)
			simd = stg_chunker_use_simd(false);
		else {
			fprintf(stderr, "usage: cdc [--mib N] [--trials N] [--portable]\n");
			return 2;
		}
	}
	if (mib < 8 || trials < 1) {
		fprintf(stderr, "cdc: --mib must be at least 8 and --trials at least 1\n");
		return 2;
	}
	static const struct {
		const char *name;
		size_t (*make)(uint8_t *, size_t);
	} sets[] = {
		{"float64 particles", make_particles}, {"fp32 weights", make_fp32},
		{"bf16 weights", make_bf16},           {"process image", make_image},
		{"random bytes", make_random},
	};
	size_t cap = mib << 20;
	size_t ins = 10000;
	uint8_t *data = malloc(cap), *shifted = malloc(cap + ins), *shifted_far = malloc(cap + ins);
	size_t lcap = cap / 4096 + 16;
	uint32_t *lens = malloc(lcap * sizeof(*lens));
	printf("cdc: %zu MiB per data set, best of %d trials, %s scan\n\n", mib, trials,
	       simd ? "vector" : "portable");
	printf("| data set | avg | cdc GB/s | XXH3 GB/s | ratio | min | p10 | median | p90 | max "
	       "| mean | cut at max | kept, 64 B inserted: fixed | cdc | kept, 10 kB: cdc |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
	for (size_t s = 0; s < sizeof(sets) / sizeof(sets[0]); s++) {
		size_t len = sets[s].make(data, cap);
		memcpy(shifted, data, 4096);
		memcpy(shifted_far, data, 4096);
		for (size_t i = 0; i < ins; i++)
			shifted[4096 + i] = shifted_far[4096 + i] = (uint8_t)next_random();
		memcpy(shifted + 4096 + 64, data + 4096, len - 4096);
		memcpy(shifted_far + 4096 + ins, data + 4096, len - 4096);
		for (uint32_t size = 64 << 10; size <= 1 << 20; size <<= 4) {
			double tc = 1e9, th = 1e9;
			size_t n = 0;
			for (int t = 0; t < trials; t++) {
				double t0 = now();
				n = chunk(STG_CHUNKING_CDC, size, data, len, lens, lcap);
				double t1 = now();
				struct stg_hash h;
				stg_hash_compute(data, len, &h);
				double t2 = now();
				tc = t1 - t0 < tc ? t1 - t0 : tc;
				th = t2 - t1 < th ? t2 - t1 : th;
			}
			struct stg_chunker c;
			stg_chunker_init(&c, STG_CHUNKING_CDC, size);
			size_t at_max = 0;
			for (size_t i = 0; i + 1 < n; i++)
				at_max += lens[i] == c.max;
			double fixed = shared_bytes(STG_CHUNKING_FIXED, size, data, len, shifted,
						    len + 64, lens, lcap);
			double cdc = shared_bytes(STG_CHUNKING_CDC, size, data, len, shifted, len + 64,
						  lens, lcap);
			double far = shared_bytes(STG_CHUNKING_CDC, size, data, len, shifted_far,
						  len + ins, lens, lcap);
			/* the lengths again (shared_bytes reused lens); the last chunk
			 * is cut by the end */
			n = chunk(STG_CHUNKING_CDC, size, data, len, lens, lcap);
			size_t full = n > 1 ? n - 1 : n;
			qsort(lens, full, sizeof(*lens), cmp_u32);
			printf("| %s | %uK | %.1f | %.1f | %.2f | %u | %u | %u | %u | %u | %.0f | %.1f%% | "
			       "%.1f%% | %.1f%% | %.1f%% |\n",
			       sets[s].name, size >> 10, (double)len / tc / 1e9, (double)len / th / 1e9,
			       th / tc, lens[0], lens[full / 10], lens[full / 2], lens[full * 9 / 10],
			       lens[full - 1], (double)len / (double)n, 100.0 * (double)at_max / (double)full,
			       100 * fixed, 100 * cdc, 100 * far);
		}
	}
	free(data);
	free(shifted);
	free(shifted_far);
	free(lens);
	return 0;
}
