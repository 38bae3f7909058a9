/* SPDX-License-Identifier: MIT */
/* Where chunks end: fixed multiples, or where the content says (CDC).
 *
 * The CDC cuts after a byte when the 8 bytes ending with it hash into a
 * narrow range: a cut depends on those 8 bytes alone, so the cuts after an
 * insertion fall back onto the same content within a chunk. The first min
 * bytes of a chunk are skipped unread; cuts come on average avg - min bytes
 * later; a chunk without one ends at max. The hash is one multiply, 8
 * positions at a time with AVX2 where the CPU has it, else one at a time;
 * both give the same cuts.
 *
 * Hashless maxima (RAM, VectorCDC's fastest) were measured and rejected:
 * binary data holds a 0xff byte every few hundred bytes, so their chunks
 * are all window-sized, and after an insertion longer than that spacing the
 * cuts never fall back onto the old ones (bench/cdc). */
#include "chunker.h"

#include <pthread.h>
#include <string.h>

#include "chunker-internal.h"
#include "policy.h"
#include "util.h"

#define MUL 0x9e3779b1u /* odd: the product's high bits depend on every bit */
/* Bytes ahead of the scan to ask the cache for: the scan outruns what the
 * hardware prefetches by itself (2.7-3.2 GB/s without, 8.6-20.7 with,
 * bench/cdc). */
#define PREFETCH 4096

/* The hash of the 8 bytes at p, offset by 2^31: a cut when below the
 * threshold. The offset keeps runs of zeros (hash 0) from cutting everywhere,
 * and lets AVX2 compare with its signed comparison. Little-endian loads:
 * the same cuts on every machine. */
static inline uint32_t position_hash(const uint8_t *p)
{
	uint32_t lo = stg_get_le32(p), hi = stg_get_le32(p + 4);
	return (lo ^ (hi >> 16 | hi << 16)) * MUL ^ 0x80000000u;
}

/* The first i in [from, to) where the 8 bytes ending at p[i] cut, or to.
 * p[from - 7] must be readable. */
static size_t find_cut_portable(const uint8_t *p, size_t from, size_t to, uint32_t threshold)
{
	for (size_t i = from; i < to; i++)
		if (position_hash(p + i - 7) < threshold)
			return i;
	return to;
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static size_t find_cut_avx2(const uint8_t *p, size_t from,
							    size_t to, uint32_t threshold)
{
	const __m256i mul = _mm256_set1_epi32((int)MUL);
	/* h ^ 2^31 < threshold, unsigned, is h < threshold - 2^31, signed */
	const __m256i limit = _mm256_set1_epi32((int)(threshold ^ 0x80000000u));
	const __m256i rot16 = _mm256_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13,
					       2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
	size_t i = from;
	for (; i + 32 <= to; i += 32) {
		__builtin_prefetch(p + i + PREFETCH);
		/* Load r holds the positions i + r + 4k in its 32-bit lanes. */
		__m256i hit = _mm256_setzero_si256();
		for (int r = 0; r < 4; r++) {
			__m256i lo = _mm256_loadu_si256((const __m256i *)(p + i + r - 7));
			__m256i hi = _mm256_loadu_si256((const __m256i *)(p + i + r - 3));
			__m256i h = _mm256_mullo_epi32(_mm256_xor_si256(lo, _mm256_shuffle_epi8(hi, rot16)), mul);
			hit = _mm256_or_si256(hit, _mm256_cmpgt_epi32(limit, h));
		}
		if (!_mm256_testz_si256(hit, hit))
			return find_cut_portable(p, i, i + 32, threshold);
	}
	return find_cut_portable(p, i, to, threshold);
}
#endif

static size_t (*find_cut)(const uint8_t *p, size_t from, size_t to,
			  uint32_t threshold) = find_cut_portable;
static pthread_once_t pick_once = PTHREAD_ONCE_INIT;

static void pick(void)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2"))
		find_cut = find_cut_avx2;
#endif
}

bool stg_chunker_use_simd(bool on)
{
	pthread_once(&pick_once, pick);
	find_cut = find_cut_portable;
	if (on)
		pick();
	return find_cut != find_cut_portable;
}

void stg_chunker_init(struct stg_chunker *c, enum stg_chunking kind, uint32_t chunk_size)
{
	*c = (struct stg_chunker){.kind = kind, .min = chunk_size, .avg = chunk_size,
				  .max = chunk_size};
	if (kind == STG_CHUNKING_CDC) {
		uint64_t max = (uint64_t)chunk_size * 4;
		c->min = chunk_size / 4;
		c->max = max > STG_CHUNK_MAX ? STG_CHUNK_MAX : (uint32_t)max;
		pthread_once(&pick_once, pick);
	}
}

void stg_chunker_reset(struct stg_chunker *c)
{
	c->in_chunk = 0;
	c->state = 0;
}

/* Ends the chunk after n more bytes. */
static bool cut(struct stg_chunker *c, size_t n, size_t *used)
{
	*used = n;
	stg_chunker_reset(c);
	return true;
}

/* The CDC over data[0, n), n < the room left: the index of the byte the
 * chunk ends with, or n. c->state holds the chunk's last 8 bytes so far
 * (the newest in the high byte: little-endian, whatever the machine's
 * order), for the positions whose 8 bytes began in an earlier piece. */
static size_t cdc_scan(struct stg_chunker *c, const uint8_t *data, size_t n)
{
	uint32_t threshold = (uint32_t)((1ull << 32) / (c->avg - c->min));
	/* Chunk offset q may end a chunk from min - 1 on: data index q - in_chunk. */
	size_t from = c->in_chunk + 1 >= c->min ? 0 : c->min - 1 - c->in_chunk;
	if (from < 7 && from < n) {
		uint8_t state[8], edge[14];
		stg_put_le64(state, c->state);
		memcpy(edge, state + 1, 7);
		size_t k = n < 7 ? n : 7;
		memcpy(edge + 7, data, k);
		size_t at = find_cut_portable(edge, from + 7, k + 7, threshold);
		if (at < k + 7)
			return at - 7;
		from = 7;
	}
	if (from < n) {
		size_t at = find_cut(data, from, n, threshold);
		if (at < n)
			return at;
	}
	if (n >= 8) {
		c->state = stg_get_le64(data + n - 8);
	} else if (n) {
		uint8_t last[8];
		stg_put_le64(last, c->state >> (8 * n));
		memcpy(last + 8 - n, data, n);
		c->state = stg_get_le64(last);
	}
	return n;
}

bool stg_chunker_next(struct stg_chunker *c, const uint8_t *data, size_t len, size_t *used)
{
	size_t room = c->max - c->in_chunk;
	size_t n = len < room ? len : room;
	if (c->kind == STG_CHUNKING_CDC) {
		size_t at = cdc_scan(c, data, n);
		if (at < n)
			return cut(c, at + 1, used);
	}
	if (n == room)
		return cut(c, n, used);
	c->in_chunk += (uint32_t)n;
	*used = n;
	return false;
}
