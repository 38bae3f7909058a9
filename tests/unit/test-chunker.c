/* SPDX-License-Identifier: MIT */
/* The chunkers: the same cuts whatever the pieces, lengths within bounds, and
 * CDC cuts that follow the content when bytes are inserted. */
#include "chunker-internal.h"
#include "chunker.h"
#include "harness.h"
#include "hash.h"
#include "policy.h"

#define MIB (1u << 20)

/* Checkpoint-like bytes: float64 positions drifting with noise, a little
 * text, and some zero runs. */
static void fill_realistic(uint8_t *p, size_t n)
{
	size_t i = 0;
	double x = 1.0;
	while (i < n) {
		uint64_t kind = harness_random() % 16;
		size_t run = 4096 + harness_random() % 65536;
		for (size_t j = 0; j < run && i < n; j++, i++) {
			if (kind == 0) {
				p[i] = 0;
			} else if (kind == 1) {
				p[i] = (uint8_t)"stagehand checkpoint text, "[j % 27];
			} else {
				if (j % 8 == 0)
					x += (double)(harness_random() % 2001) / 1e6 - 1e-3;
				memcpy(&p[i], (uint8_t *)&x + j % 8, 1);
			}
		}
	}
}

/* Float64 values that all moved a little: no zero runs, no text. */
static void fill_floats(uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 8 <= n; i += 8) {
		double x = 50.0 + (double)(harness_random() >> 11) * 1e-14;
		memcpy(p + i, &x, 8);
	}
}

/* Runs data through a chunker in pieces of piece(k) bytes; returns the
 * number of chunks and their end offsets in ends[]. */
static size_t chunk_ends(enum stg_chunking kind, uint32_t size, const uint8_t *data, size_t len,
			 size_t (*piece)(size_t k), size_t *ends, size_t max_ends)
{
	struct stg_chunker c;
	stg_chunker_init(&c, kind, size);
	size_t off = 0, n = 0;
	for (size_t k = 0; off < len; k++) {
		size_t want = piece(k);
		if (want > len - off)
			want = len - off;
		while (want) {
			size_t used;
			bool end = stg_chunker_next(&c, data + off, want, &used);
			off += used;
			want -= used;
			if (end && n < max_ends)
				ends[n++] = off;
			if (!end && want) {
				fprintf(stderr, "chunker took %zu of %zu bytes without a cut\n", used,
					used + want);
				harness_failures++;
				return n;
			}
		}
	}
	stg_chunker_reset(&c);
	if (n < max_ends && (n == 0 || ends[n - 1] != len))
		ends[n++] = len;
	return n;
}

static size_t whole(size_t k) { (void)k; return SIZE_MAX; }
static size_t one_byte(size_t k) { (void)k; return 1; }
static size_t odd(size_t k) { return (size_t[]){7, 4093, 65537, 1, 300001, 13}[k % 6]; }
static size_t huge(size_t k) { (void)k; return 40 * MIB; }

static void test_init(void)
{
	struct stg_chunker c;
	stg_chunker_init(&c, STG_CHUNKING_CDC, 64 << 10);
	CHECK_EQ(c.min, 16 << 10);
	CHECK_EQ(c.avg, 64 << 10);
	CHECK_EQ(c.max, 256 << 10);
	stg_chunker_init(&c, STG_CHUNKING_CDC, STG_CHUNK_MAX / 4);
	CHECK_EQ(c.max, STG_CHUNK_MAX);
	stg_chunker_init(&c, STG_CHUNKING_FIXED, MIB);
	CHECK(c.min == MIB && c.avg == MIB && c.max == MIB);
}

/* The same cuts in one call, a byte at a time, in odd pieces and twice. */
static void test_pieces(enum stg_chunking kind, const uint8_t *data, size_t len)
{
	size_t cap = len / 1024 + 2;
	size_t *a = malloc(cap * sizeof(*a)), *b = malloc(cap * sizeof(*b));
	size_t na = chunk_ends(kind, 64 << 10, data, len, whole, a, cap);
	size_t (*pieces[])(size_t) = {whole, one_byte, odd, huge};
	for (size_t p = 0; p < sizeof(pieces) / sizeof(pieces[0]); p++) {
		size_t nb = chunk_ends(kind, 64 << 10, data, len, pieces[p], b, cap);
		CHECK_EQ(nb, na);
		CHECK(nb == na && memcmp(a, b, na * sizeof(*a)) == 0);
	}
	free(a);
	free(b);
}

static void test_bounds(const uint8_t *data, size_t len)
{
	size_t ends[4096];
	size_t n = chunk_ends(STG_CHUNKING_CDC, 64 << 10, data, len, odd, ends, 4096);
	struct stg_chunker c;
	stg_chunker_init(&c, STG_CHUNKING_CDC, 64 << 10);
	size_t at_min = 0, at_max = 0;
	for (size_t i = 0; i + 1 < n; i++) {
		size_t l = ends[i] - (i ? ends[i - 1] : 0);
		CHECK(l >= c.min && l <= c.max);
		at_min += l == c.min;
		at_max += l == c.max;
	}
	/* About avg on average, and not stuck at either bound. */
	CHECK(n > len / (128 << 10) && n < len / (32 << 10));
	CHECK(at_min < n / 10 && at_max < n / 10);

	n = chunk_ends(STG_CHUNKING_FIXED, 64 << 10, data, len, odd, ends, 4096);
	CHECK_EQ(n, (len + (64 << 10) - 1) / (64 << 10));
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(ends[i], i + 1 < n ? (i + 1) * (64 << 10) : len);
}

/* Hashes each chunk of data. */
static size_t chunk_hashes(enum stg_chunking kind, const uint8_t *data, size_t len,
			   struct stg_hash *h, size_t cap)
{
	size_t ends[4096];
	size_t n = chunk_ends(kind, 64 << 10, data, len, whole, ends, 4096);
	for (size_t i = 0; i < n && i < cap; i++) {
		size_t start = i ? ends[i - 1] : 0;
		stg_hash_compute(data + start, ends[i] - start, &h[i]);
	}
	return n < cap ? n : cap;
}

/* How many of b's chunks after its first few are also among a's. */
static size_t shared_after_insert(enum stg_chunking kind, const uint8_t *a, size_t alen,
				  const uint8_t *b, size_t blen, size_t *ret_total)
{
	static struct stg_hash ha[4096], hb[4096];
	size_t na = chunk_hashes(kind, a, alen, ha, 4096);
	size_t nb = chunk_hashes(kind, b, blen, hb, 4096);
	size_t shared = 0;
	for (size_t i = 4; i < nb; i++)
		for (size_t j = 0; j < na; j++)
			if (stg_hash_eq(&hb[i], &ha[j])) {
				shared++;
				break;
			}
	*ret_total = nb - 4;
	return shared;
}

/* A few bytes, and more than the spacing of any one byte value (which
 * defeats chunkers cutting at the first large byte after a window). */
static void test_insert(const uint8_t *data, size_t len, size_t ins)
{
	uint8_t *shifted = malloc(len + ins);
	memcpy(shifted, data, 1000);
	memset(shifted + 1000, 0xa5, ins);
	memcpy(shifted + 1000 + ins, data + 1000, len - 1000);
	size_t total;
	size_t cdc = shared_after_insert(STG_CHUNKING_CDC, data, len, shifted, len + ins, &total);
	CHECK(cdc >= total * 95 / 100);
	size_t fixed = shared_after_insert(STG_CHUNKING_FIXED, data, len, shifted, len + ins, &total);
	CHECK(fixed <= total / 10); /* what cdc is for */
	free(shifted);
}

/* The vector and the portable scans cut at the same bytes. */
static void test_simd(const uint8_t *data, size_t len)
{
	if (!stg_chunker_use_simd(true)) {
		printf("no vector scan on this CPU: the portable one only\n");
		return;
	}
	static size_t a[4096], b[4096];
	size_t na = chunk_ends(STG_CHUNKING_CDC, 64 << 10, data, len, odd, a, 4096);
	stg_chunker_use_simd(false);
	size_t nb = chunk_ends(STG_CHUNKING_CDC, 64 << 10, data, len, odd, b, 4096);
	stg_chunker_use_simd(true);
	CHECK_EQ(na, nb);
	CHECK(na == nb && memcmp(a, b, na * sizeof(*a)) == 0);
}

/* Zeros hold no content to cut at: chunks of one length. */
static void test_zeros(void)
{
	size_t len = 4 * MIB;
	uint8_t *zeros = calloc(1, len);
	size_t ends[64];
	size_t n = chunk_ends(STG_CHUNKING_CDC, 64 << 10, zeros, len, odd, ends, 64);
	CHECK_EQ(n, 16);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(ends[i], (i + 1) * (256 << 10));
	free(zeros);
}

int main(void)
{
	size_t len = 16 * MIB;
	uint8_t *data = malloc(len);
	fill_realistic(data, len);
	test_init();
	test_pieces(STG_CHUNKING_CDC, data, 4 * MIB);
	test_pieces(STG_CHUNKING_FIXED, data, 4 * MIB);
	test_bounds(data, len);
	test_insert(data, len, 64);
	test_insert(data, len, 10000);
	test_simd(data, len);
	uint8_t *floats = malloc(len);
	fill_floats(floats, len);
	test_insert(floats, len, 10000);
	test_simd(floats, len);
	test_pieces(STG_CHUNKING_CDC, floats, 4 * MIB);
	free(floats);
	test_zeros();
	free(data);
	return harness_done();
}
