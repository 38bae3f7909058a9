/* SPDX-License-Identifier: MIT */
/* A tiny test harness: checks print file:line and both values; the exit status
 * is 0 (pass), 1 (fail) or 77 (skip). */
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int harness_failures;
static int harness_checks;

#define CHECK(cond)                                                                    \
	do {                                                                           \
		harness_checks++;                                                      \
		if (!(cond)) {                                                         \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			harness_failures++;                                            \
		}                                                                      \
	} while (0)

#define CHECK_EQ(a, b)                                                                 \
	do {                                                                           \
		long long va_ = (long long)(a), vb_ = (long long)(b);                 \
		harness_checks++;                                                      \
		if (va_ != vb_) {                                                      \
			fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, \
				__LINE__, #a, #b, va_, vb_);                           \
			harness_failures++;                                            \
		}                                                                      \
	} while (0)

#define CHECK_STR(a, b)                                                                \
	do {                                                                           \
		const char *sa_ = (a), *sb_ = (b);                                     \
		harness_checks++;                                                      \
		if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0) {                           \
			fprintf(stderr, "%s:%d: %s == %s failed: '%s' != '%s'\n", __FILE__, \
				__LINE__, #a, #b, sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)"); \
			harness_failures++;                                            \
		}                                                                      \
	} while (0)

static inline int harness_done(void)
{
	if (harness_failures) {
		fprintf(stderr, "%d of %d checks failed\n", harness_failures, harness_checks);
		return 1;
	}
	printf("%d checks passed\n", harness_checks);
	return 0;
}

/* A fixed pseudo-random sequence (xorshift64): test data that is the same
 * on every run. */
static inline uint64_t harness_random(void)
{
	static uint64_t s = 0x9e3779b97f4a7c15ull;
	s ^= s << 13;
	s ^= s >> 7;
	s ^= s << 17;
	return s;
}

/* A fresh temporary directory for the test (removed by the caller's rm -rf
 * in the shell, or left for inspection on failure). */
static inline char *harness_tmpdir(void)
{
	static char dir[] = "/tmp/stagehand-unit-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(1);
	}
	return dir;
}

/* Reads a whole fixture file; exits with a message when it is missing. */
static inline uint8_t *harness_fixture(const char *name, size_t *ret_len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", FIXTURES, name);
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "fixture %s: %s\n", path, strerror(errno));
		exit(1);
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "fixture %s: short read\n", path);
		exit(1);
	}
	fclose(f);
	*ret_len = (size_t)n;
	return buf;
}

/* With STAGEHAND_REGEN_GOLDEN=1, rewrites a fixture instead of comparing. */
static inline int harness_golden(const char *name, const uint8_t *data, size_t len)
{
	if (getenv("STAGEHAND_REGEN_GOLDEN")) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", FIXTURES, name);
		FILE *f = fopen(path, "wb");
		if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
			fprintf(stderr, "cannot write %s\n", path);
			return 0;
		}
		return 1;
	}
	size_t flen;
	uint8_t *want = harness_fixture(name, &flen);
	int same = flen == len && memcmp(want, data, len) == 0;
	if (!same)
		fprintf(stderr, "golden %s differs from the encoder's output (%zu vs %zu bytes)\n",
			name, flen, len);
	free(want);
	return same;
}
