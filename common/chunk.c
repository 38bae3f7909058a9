/* SPDX-License-Identifier: MIT */
/* A chunk object: a header naming the content hash, then the payload. The
 * codec and filter tables below are the only place that knows encodings. */
#include "chunk.h"

#include <errno.h>
#include <lz4.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "policy.h"
#include "util.h"

/* Compressing a sample first keeps incompressible data (the common case for
 * float fields) from paying for a full pass. */
#define PROBE_BYTES (64u << 10)
/* zstd's default level: bench/codecs measures the levels (bench/RESULTS.md, "Codecs"). */
#define ZSTD_LEVEL 1

/* Format 1 knows raw and lz4; format 2 adds codecs and filters; format 3 is
 * format 2 encoding the XOR of the chunk with a base chunk, whose hash starts
 * the payload (a delta object). */
enum { FORMAT_V1 = 1, FORMAT_V2 = 2, FORMAT_V3 = 3 };
#define BASE_BYTES 16

/* Codec ids, as stored in the header: never renumber. */
enum { CODEC_RAW = 0, CODEC_LZ4 = 1, CODEC_ZSTD = 2, NCODECS, COMPRESS_AUTO = 255 };
/* Filter ids, as stored in the header: never renumber. */
enum { FILTER_NONE = 0, FILTER_SHUFFLE = 1, FILTER_BITSHUFFLE = 2, NFILTERS };

const struct stg_chunk_codec stg_chunk_codec_default = {.compress = CODEC_LZ4};

/* Per-thread zstd contexts: creating one per chunk costs more than a small
 * chunk's compression. */
struct zstd_ctx {
	ZSTD_CCtx *c;
	ZSTD_DCtx *d;
};
static pthread_key_t zstd_key;
static pthread_once_t zstd_once = PTHREAD_ONCE_INIT;

static void zstd_ctx_free(void *p)
{
	struct zstd_ctx *z = p;
	ZSTD_freeCCtx(z->c);
	ZSTD_freeDCtx(z->d);
	free(z);
}

static void zstd_key_make(void)
{
	pthread_key_create(&zstd_key, zstd_ctx_free);
}

static struct zstd_ctx *zstd_ctx(void)
{
	pthread_once(&zstd_once, zstd_key_make);
	struct zstd_ctx *z = pthread_getspecific(zstd_key);
	if (z)
		return z;
	z = calloc(1, sizeof(*z));
	if (!z)
		return NULL;
	z->c = ZSTD_createCCtx();
	z->d = ZSTD_createDCtx();
	if (!z->c || !z->d || pthread_setspecific(zstd_key, z) != 0) {
		zstd_ctx_free(z);
		return NULL;
	}
	return z;
}

static size_t raw_bound(size_t n)
{
	return n;
}

static size_t lz4_bound(size_t n)
{
	return (size_t)LZ4_compressBound((int)n);
}

/* Returns the compressed length, 0 when it failed. */
static size_t lz4_compress(const uint8_t *in, size_t n, uint8_t *out, size_t cap, int level)
{
	(void)level;
	int r = LZ4_compress_default((const char *)in, (char *)out, (int)n, (int)cap);
	return r > 0 ? (size_t)r : 0;
}

static int lz4_decompress(const uint8_t *in, size_t n, uint8_t *out, size_t raw_len)
{
	int r = LZ4_decompress_safe((const char *)in, (char *)out, (int)n, (int)raw_len);
	return r >= 0 && (size_t)r == raw_len ? 0 : -EBADMSG;
}

static size_t zstd_bound(size_t n)
{
	return ZSTD_compressBound(n);
}

static size_t zstd_compress(const uint8_t *in, size_t n, uint8_t *out, size_t cap, int level)
{
	struct zstd_ctx *z = zstd_ctx();
	if (!z)
		return 0;
	size_t r = ZSTD_compressCCtx(z->c, out, cap, in, n, level ? level : ZSTD_LEVEL);
	return ZSTD_isError(r) ? 0 : r;
}

/* One frame, exactly n bytes, that says it holds raw_len bytes and does. */
static int zstd_decompress(const uint8_t *in, size_t n, uint8_t *out, size_t raw_len)
{
	if (ZSTD_getFrameContentSize(in, n) != raw_len || ZSTD_findFrameCompressedSize(in, n) != n)
		return -EBADMSG;
	struct zstd_ctx *z = zstd_ctx();
	if (!z)
		return -ENOMEM;
	size_t r = ZSTD_decompressDCtx(z->d, out, raw_len, in, n);
	return !ZSTD_isError(r) && r == raw_len ? 0 : -EBADMSG;
}

/* The codec table: adding one is an entry here (a new id) and its tests. */
static const struct codec {
	const char *name; /* as the policy's compress = says it */
	size_t (*bound)(size_t raw_len);
	size_t (*compress)(const uint8_t *in, size_t n, uint8_t *out, size_t cap, int level);
	int (*decompress)(const uint8_t *in, size_t n, uint8_t *out, size_t raw_len);
	/* Slower than a disk writes (bench/RESULTS.md, "Codecs"): never where a writer
	 * waits. The capture path encodes with lz4 instead, the flusher
	 * recodes before shipping (stg_chunk_codec_capture, stg_chunk_recode). */
	bool background;
} codecs[NCODECS] = {
	[CODEC_RAW] = {"off", raw_bound, NULL, NULL, false},
	[CODEC_LZ4] = {"lz4", lz4_bound, lz4_compress, lz4_decompress, false},
	[CODEC_ZSTD] = {"zstd", zstd_bound, zstd_compress, zstd_decompress, true},
};

/* Byte shuffle: byte b of every whole element together, then the tail that
 * is not a whole element as it is. Exposes float exponents to a codec. */
#ifdef __SSE2__
/* 16 elements at a time, in es registers: interleaving the bytes of
 * register k with those of k + es/2, log2(es) times over, turns es planes
 * into 16 elements; the inverse (even and odd bytes apart) turns them back.
 * About twice the speed of the loops below (bench/codecs). */
static inline __attribute__((always_inline)) void interleave(__m128i *v, unsigned es)
{
	__m128i w[8];
	unsigned h = es / 2;
	for (unsigned k = 0; k < h; k++) {
		w[2 * k] = _mm_unpacklo_epi8(v[k], v[k + h]);
		w[2 * k + 1] = _mm_unpackhi_epi8(v[k], v[k + h]);
	}
	memcpy(v, w, es * sizeof(*v));
}

static inline __attribute__((always_inline)) void deinterleave(__m128i *v, unsigned es)
{
	__m128i w[8], low = _mm_set1_epi16(0xff);
	unsigned h = es / 2;
	for (unsigned k = 0; k < h; k++) {
		w[k] = _mm_packus_epi16(_mm_and_si128(v[2 * k], low),
					_mm_and_si128(v[2 * k + 1], low));
		w[k + h] = _mm_packus_epi16(_mm_srli_epi16(v[2 * k], 8),
					    _mm_srli_epi16(v[2 * k + 1], 8));
	}
	memcpy(v, w, es * sizeof(*v));
}
#endif

static inline __attribute__((always_inline)) void shuffle_es(const uint8_t *in, size_t m,
							     unsigned es, uint8_t *out)
{
	size_t i = 0;
#ifdef __SSE2__
	for (; i + 16 <= m; i += 16) {
		__m128i v[8];
		for (unsigned k = 0; k < es; k++)
			v[k] = _mm_loadu_si128((const __m128i *)(in + i * es + 16 * k));
		for (unsigned l = 1; l < es; l *= 2)
			deinterleave(v, es);
		for (unsigned b = 0; b < es; b++)
			_mm_storeu_si128((__m128i *)(out + b * m + i), v[b]);
	}
#endif
	/* In blocks that stay in the cache, one output plane at a time. */
	for (size_t i0 = i; i0 < m; i0 += 1024) {
		size_t end = i0 + 1024 < m ? i0 + 1024 : m;
		for (unsigned b = 0; b < es; b++)
			for (size_t j = i0; j < end; j++)
				out[b * m + j] = in[j * es + b];
	}
}

static inline __attribute__((always_inline)) void unshuffle_es(const uint8_t *in, size_t m,
							       unsigned es, uint8_t *out)
{
	size_t i = 0;
#ifdef __SSE2__
	for (; i + 16 <= m; i += 16) {
		__m128i v[8];
		for (unsigned b = 0; b < es; b++)
			v[b] = _mm_loadu_si128((const __m128i *)(in + b * m + i));
		for (unsigned l = 1; l < es; l *= 2)
			interleave(v, es);
		for (unsigned k = 0; k < es; k++)
			_mm_storeu_si128((__m128i *)(out + i * es + 16 * k), v[k]);
	}
#endif
	for (size_t i0 = i; i0 < m; i0 += 1024) {
		size_t end = i0 + 1024 < m ? i0 + 1024 : m;
		for (unsigned b = 0; b < es; b++)
			for (size_t j = i0; j < end; j++)
				out[j * es + b] = in[b * m + j];
	}
}

static void shuffle_encode(const uint8_t *in, size_t n, unsigned es, uint8_t *out)
{
	size_t m = n / es;
	/* A constant element size lets the compiler unroll the inner loop. */
	if (es == 2)
		shuffle_es(in, m, 2, out);
	else if (es == 4)
		shuffle_es(in, m, 4, out);
	else
		shuffle_es(in, m, 8, out);
	memcpy(out + m * es, in + m * es, n - m * es);
}

static void shuffle_decode(const uint8_t *in, size_t n, unsigned es, uint8_t *out)
{
	size_t m = n / es;
	if (es == 2)
		unshuffle_es(in, m, 2, out);
	else if (es == 4)
		unshuffle_es(in, m, 4, out);
	else
		unshuffle_es(in, m, 8, out);
	memcpy(out + m * es, in + m * es, n - m * es);
}

/* Transposes an 8x8 bit matrix, one byte a row (Hacker's Delight 7-3): its
 * own inverse. */
static uint64_t transpose8(uint64_t x)
{
	uint64_t t;
	t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
	x = x ^ t ^ (t << 7);
	t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
	x = x ^ t ^ (t << 14);
	t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
	return x ^ t ^ (t << 28);
}

/* Bit shuffle: bit k of byte b of every element together, in groups of 8
 * elements; the elements past the last whole group are byte-shuffled, and
 * the tail that is not a whole element stays as it is. Plane b of m bytes
 * starts at b * m, as in the byte shuffle. */
static void bitshuffle_encode(const uint8_t *in, size_t n, unsigned es, uint8_t *out)
{
	size_t m = n / es, groups = m / 8;
	for (size_t g = 0; g < groups; g++) {
		const uint8_t *e = in + g * 8 * es;
		for (unsigned b = 0; b < es; b++) {
			uint64_t x = 0;
			for (unsigned j = 0; j < 8; j++)
				x |= (uint64_t)e[j * es + b] << (8 * j);
			x = transpose8(x);
			uint8_t *plane = out + b * m;
			for (unsigned k = 0; k < 8; k++)
				plane[k * groups + g] = (uint8_t)(x >> (8 * k));
		}
	}
	for (size_t i = groups * 8; i < m; i++)
		for (unsigned b = 0; b < es; b++)
			out[b * m + i] = in[i * es + b];
	memcpy(out + m * es, in + m * es, n - m * es);
}

static void bitshuffle_decode(const uint8_t *in, size_t n, unsigned es, uint8_t *out)
{
	size_t m = n / es, groups = m / 8;
	for (size_t g = 0; g < groups; g++) {
		uint8_t *e = out + g * 8 * es;
		for (unsigned b = 0; b < es; b++) {
			const uint8_t *plane = in + b * m;
			uint64_t x = 0;
			for (unsigned k = 0; k < 8; k++)
				x |= (uint64_t)plane[k * groups + g] << (8 * k);
			x = transpose8(x);
			for (unsigned j = 0; j < 8; j++)
				e[j * es + b] = (uint8_t)(x >> (8 * j));
		}
	}
	for (size_t i = groups * 8; i < m; i++)
		for (unsigned b = 0; b < es; b++)
			out[i * es + b] = in[b * m + i];
	memcpy(out + m * es, in + m * es, n - m * es);
}

/* The filter table: transforms of the raw bytes before the codec, undone
 * after it, for an element size of 2, 4 or 8 bytes. */
static const struct filter {
	const char *name; /* as the policy's filter = says it, before the size */
	void (*encode)(const uint8_t *in, size_t n, unsigned es, uint8_t *out);
	void (*decode)(const uint8_t *in, size_t n, unsigned es, uint8_t *out);
} filters[NFILTERS] = {
	[FILTER_NONE] = {"none", NULL, NULL},
	[FILTER_SHUFFLE] = {"shuffle", shuffle_encode, shuffle_decode},
	[FILTER_BITSHUFFLE] = {"bitshuffle", bitshuffle_encode, bitshuffle_decode},
};

static bool element_ok(unsigned es)
{
	return es == 2 || es == 4 || es == 8;
}

int stg_chunk_codec_parse(struct stg_chunk_codec *c, const char *key, const char *value,
			  char *err, size_t errlen)
{
	if (strcmp(key, "compress") == 0) {
		for (unsigned i = 0; i < NCODECS; i++)
			if (strcmp(value, codecs[i].name) == 0) {
				c->compress = (uint8_t)i;
				return 0;
			}
		if (strcmp(value, "auto") == 0) {
			c->compress = COMPRESS_AUTO;
			return 0;
		}
		snprintf(err, errlen, "compress '%s' must be lz4, zstd, auto or off", value);
		return -EINVAL;
	}
	for (unsigned i = 0; i < NFILTERS; i++) {
		size_t l = strlen(filters[i].name);
		if (strncmp(value, filters[i].name, l) != 0)
			continue;
		if (i == FILTER_NONE && value[l] == '\0') {
			c->filter = FILTER_NONE;
			c->element = 0;
			return 0;
		}
		unsigned es = value[l] && !value[l + 1] ? (unsigned)(value[l] - '0') : 0;
		if (i != FILTER_NONE && element_ok(es)) {
			c->filter = (uint8_t)i;
			c->element = (uint8_t)es;
			return 0;
		}
	}
	snprintf(err, errlen,
		 "filter '%s' must be none, or shuffle or bitshuffle followed by the bytes of "
		 "one value: 2 (bf16, fp16), 4 (fp32) or 8 (fp64), e.g. shuffle4",
		 value);
	return -EINVAL;
}

bool stg_chunk_codec_background(const struct stg_chunk_codec *c)
{
	return c->compress == COMPRESS_AUTO ||
	       (c->compress < NCODECS && codecs[c->compress].background);
}

struct stg_chunk_codec stg_chunk_codec_capture(const struct stg_chunk_codec *c)
{
	struct stg_chunk_codec k = *c;
	if (c->compress < NCODECS && codecs[c->compress].background) {
		k.compress = CODEC_LZ4;
		k.level = 0;
	}
	return k;
}

size_t stg_chunk_bound(size_t raw_len)
{
	size_t max = raw_len;
	for (unsigned i = 0; i < NCODECS; i++)
		if (codecs[i].bound(raw_len) > max)
			max = codecs[i].bound(raw_len);
	return STG_CHUNK_HEADER_SIZE + max;
}

static bool worth_it(size_t in, size_t out)
{
	return out > 0 && out < in - in / 32;
}

/* Format 2's checksum covers the whole header but the checksum itself. */
static uint32_t header_sum(const uint8_t *h, unsigned format)
{
	if (format == FORMAT_V1)
		return (uint32_t)stg_hash64(h, 32);
	uint8_t copy[STG_CHUNK_HEADER_SIZE];
	memcpy(copy, h, sizeof(copy));
	memset(copy + 32, 0, 4);
	return (uint32_t)stg_hash64(copy, sizeof(copy));
}

/* Raw and plain lz4 stay format 1, which older readers read. */
static unsigned format_of(unsigned codec, unsigned filter)
{
	return codec <= CODEC_LZ4 && filter == FILTER_NONE ? FORMAT_V1 : FORMAT_V2;
}

static void header_encode(uint8_t *out, unsigned codec, unsigned filter, unsigned es,
			  uint32_t raw_len, uint32_t stored_len, const struct stg_hash *hash,
			  bool delta)
{
	unsigned format = delta ? FORMAT_V3 : format_of(codec, filter);
	memcpy(out, STG_CHUNK_MAGIC, 4);
	stg_put_le16(out + 4, (uint16_t)format);
	out[6] = (uint8_t)codec;
	out[7] = (uint8_t)filter;
	stg_put_le32(out + 8, raw_len);
	stg_put_le32(out + 12, stored_len);
	memcpy(out + 16, hash->b, 16);
	stg_put_le32(out + 36, filter == FILTER_NONE ? 0 : es);
	stg_put_le32(out + 32, header_sum(out, format));
}

void stg_chunk_header_encode_raw(uint8_t *out, uint32_t raw_len, const struct stg_hash *hash)
{
	header_encode(out, CODEC_RAW, FILTER_NONE, 0, raw_len, raw_len, hash, false);
}

/* A codec and filter to try. */
struct choice {
	unsigned codec, filter, es;
	int level;
};

/* Encodes n bytes of data with one codec and filter into out (header +
 * payload). base: NULL, or the hash of the chunk data is the XOR of this
 * chunk with (a delta object). Returns the object's length, 0 when it does
 * not pay. */
static size_t encode_with(const uint8_t *data, size_t n, const struct stg_hash *hash,
			  const struct choice *ch, const struct stg_hash *base, uint8_t *out)
{
	const uint8_t *in = data;
	uint8_t *filtered = NULL;
	if (ch->filter != FILTER_NONE) {
		filtered = malloc(n);
		if (!filtered)
			return 0;
		filters[ch->filter].encode(data, n, ch->es, filtered);
		in = filtered;
	}
	const struct codec *co = &codecs[ch->codec];
	size_t at = STG_CHUNK_HEADER_SIZE + (base ? BASE_BYTES : 0);
	size_t len = co->compress(in, n, out + at, co->bound(n), ch->level);
	free(filtered);
	if (!worth_it(n, len))
		return 0;
	if (base) {
		memcpy(out + STG_CHUNK_HEADER_SIZE, base->b, BASE_BYTES);
		len += BASE_BYTES;
	}
	header_encode(out, ch->codec, ch->filter, ch->es, (uint32_t)n, (uint32_t)len, hash,
		      base != NULL);
	return STG_CHUNK_HEADER_SIZE + len;
}

/* compress = auto, where the writer waits: an encoding is kept only when it
 * saves an eighth of the sample. lz4 after a shuffle runs at about 1 GB/s a
 * core on fp32 weights, below the disk, for 7%: the chunk is stored raw, and
 * the flusher encodes it in the background (bench/RESULTS.md, "Codecs"). */
#define AUTO_CAPTURE_SAVING 8

/* compress = auto: the smallest of lz4 with and without a shuffle on the
 * sample (the policy's filter, or a byte shuffle of each element size) that
 * saves a 1/saving of it. Returns false when nothing does. */
static bool choose_auto(const uint8_t *data, size_t probe, const struct stg_hash *hash,
			const struct stg_chunk_codec *c, size_t saving, uint8_t *out,
			struct choice *ret)
{
	struct choice cand[4] = {{CODEC_LZ4, FILTER_NONE, 0, 0}};
	unsigned ncand = 1;
	if (c->filter != FILTER_NONE)
		cand[ncand++] = (struct choice){CODEC_LZ4, c->filter, c->element, 0};
	else
		for (unsigned es = 2; es <= 8; es *= 2)
			cand[ncand++] = (struct choice){CODEC_LZ4, FILTER_SHUFFLE, es, 0};
	size_t best = 0;
	for (unsigned i = 0; i < ncand; i++) {
		size_t n = encode_with(data, probe, hash, &cand[i], NULL, out);
		if (n && n <= STG_CHUNK_HEADER_SIZE + probe - probe / saving && (!best || n < best)) {
			best = n;
			*ret = cand[i];
		}
	}
	return best != 0;
}

/* Encodes as c says, in the background (the flusher) or where a writer
 * waits. auto there: lz4 (with the filter the sample chose) when it saves an
 * eighth of the sample, else nothing; in the background: zstd, after the
 * filter lz4 chose on the sample. (zstd's own gain on a 64 KiB sample is its
 * entropy coder's, which no shuffle changes: it cannot choose the filter.)
 * Returns the object's length, 0 when nothing pays. */
static size_t try_compress(const void *data, size_t len, const struct stg_hash *hash,
			   const struct stg_chunk_codec *c, bool background, uint8_t *out)
{
	if (len < 64 || c->compress == CODEC_RAW)
		return 0;
	size_t probe = len < PROBE_BYTES ? len : PROBE_BYTES;
	struct choice ch = {c->compress, c->filter, c->element, c->level};
	if (c->compress == COMPRESS_AUTO) {
		/* (In the background any saving, as worth_it() already asks.) */
		bool found = choose_auto(data, probe, hash, c,
					 background ? 32 : AUTO_CAPTURE_SAVING, out, &ch);
		if (!background && !found)
			return 0;
		if (background)
			ch = found ? (struct choice){CODEC_ZSTD, ch.filter, ch.es, 0}
				   : (struct choice){CODEC_ZSTD, FILTER_NONE, 0, 0};
		if (background && !found && probe != len &&
		    !encode_with(data, probe, hash, &ch, NULL, out))
			return 0;
	} else if (probe != len && !encode_with(data, probe, hash, &ch, NULL, out)) {
		return 0;
	}
	return encode_with(data, len, hash, &ch, NULL, out);
}

size_t stg_chunk_try_compress(const void *data, size_t len, const struct stg_hash *hash,
			      const struct stg_chunk_codec *c, uint8_t *out)
{
	return try_compress(data, len, hash, c, false, out);
}

size_t stg_chunk_encode(const void *data, size_t len, const struct stg_hash *hash,
			const struct stg_chunk_codec *c, uint8_t *out)
{
	size_t n = stg_chunk_try_compress(data, len, hash, c, out);
	if (n)
		return n;
	stg_chunk_header_encode_raw(out, (uint32_t)len, hash);
	memcpy(out + STG_CHUNK_HEADER_SIZE, data, len);
	return STG_CHUNK_HEADER_SIZE + len;
}

/* Fields of a header that its format can hold and that make sense. */
static bool encoding_ok(const struct stg_chunk_header *h, uint32_t word36)
{
	if (h->codec >= NCODECS || h->filter >= NFILTERS)
		return false;
	if (h->format == FORMAT_V1)
		return h->codec <= CODEC_LZ4 && h->filter == FILTER_NONE && word36 == 0;
	/* Format 2 holds only what format 1 cannot: a filter needs a codec. A
	 * delta (format 3) is always encoded by a codec. */
	if (h->codec == CODEC_RAW ||
	    (h->format == FORMAT_V2 && format_of(h->codec, h->filter) != FORMAT_V2))
		return false;
	return h->filter == FILTER_NONE ? word36 == 0 : element_ok(word36);
}

/* The codec's bytes of a payload: after the base hash in a delta. */
static size_t codec_offset(const struct stg_chunk_header *h)
{
	return h->format == FORMAT_V3 ? BASE_BYTES : 0;
}

int stg_chunk_header_decode(const uint8_t *buf, size_t len, const struct stg_hash *want,
			    uint32_t want_raw_len, struct stg_chunk_header *ret)
{
	if (len < STG_CHUNK_HEADER_SIZE || memcmp(buf, STG_CHUNK_MAGIC, 4) != 0)
		return -EBADMSG;
	uint16_t format = stg_get_le16(buf + 4);
	if (format != FORMAT_V1 && format != FORMAT_V2 && format != FORMAT_V3)
		return -EBADMSG;
	if (stg_get_le32(buf + 32) != header_sum(buf, format))
		return -EBADMSG;
	uint32_t word36 = stg_get_le32(buf + 36);
	struct stg_chunk_header h = {
		.format = format,
		/* Format 1's encoding is a 16-bit word: raw 0, lz4 1. */
		.codec = format == FORMAT_V1 && buf[7] ? NCODECS : buf[6],
		.filter = format == FORMAT_V1 ? FILTER_NONE : buf[7],
		.element = (uint8_t)(word36 & 0xff),
		.raw_len = stg_get_le32(buf + 8),
		.stored_len = stg_get_le32(buf + 12),
	};
	memcpy(h.hash.b, buf + 16, 16);
	if (!encoding_ok(&h, word36))
		return -EBADMSG;
	if (h.raw_len == 0 || h.raw_len > STG_CHUNK_MAX || h.raw_len != want_raw_len)
		return -EBADMSG;
	if (want && !stg_hash_eq(&h.hash, want))
		return -EBADMSG;
	size_t skip = codec_offset(&h);
	if (h.codec == CODEC_RAW ? h.stored_len != h.raw_len
				 : h.stored_len <= skip ||
					   h.stored_len - skip > codecs[h.codec].bound(h.raw_len))
		return -EBADMSG;
	*ret = h;
	return 0;
}

bool stg_chunk_header_is_delta(const struct stg_chunk_header *h)
{
	return h->format == FORMAT_V3;
}

bool stg_chunk_base(const uint8_t *obj, size_t len, struct stg_hash *ret_base)
{
	struct stg_chunk_header h;
	if (len < STG_CHUNK_HEADER_SIZE + BASE_BYTES ||
	    stg_chunk_header_decode(obj, len, NULL, stg_get_le32(obj + 8), &h) < 0 ||
	    h.format != FORMAT_V3)
		return false;
	memcpy(ret_base->b, obj + STG_CHUNK_HEADER_SIZE, BASE_BYTES);
	return true;
}

bool stg_chunk_header_is_raw(const struct stg_chunk_header *h)
{
	return h->codec == CODEC_RAW;
}

bool stg_chunk_stored_len_ok(uint32_t raw_len, uint32_t stored_len, bool encoded)
{
	if (!encoded)
		return stored_len == raw_len;
	return stored_len > 0 && stored_len <= stg_chunk_bound(raw_len) - STG_CHUNK_HEADER_SIZE;
}

size_t stg_chunk_decode_memory(const uint8_t *obj, size_t len)
{
	struct stg_chunk_header h;
	if (len < STG_CHUNK_HEADER_SIZE ||
	    stg_chunk_header_decode(obj, len, NULL, stg_get_le32(obj + 8), &h) < 0 ||
	    h.codec == CODEC_RAW)
		return 0;
	/* A filtered payload is decoded aside, then unfiltered into place. A
	 * delta is checked against its base's chain: the base and the chunk
	 * decoded, a copy between links, a link's object, the chunk encoded
	 * on its own when the chain is full. */
	if (h.format == FORMAT_V3)
		return 6 * (size_t)h.raw_len;
	return (h.filter == FILTER_NONE ? 1 : 2) * (size_t)h.raw_len;
}

int stg_chunk_verify_raw(const struct stg_chunk_header *h, const uint8_t *data)
{
	if (h->codec != CODEC_RAW)
		return -EBADMSG;
	struct stg_hash got;
	stg_hash_compute(data, h->raw_len, &got);
	return stg_hash_eq(&got, &h->hash) ? 0 : -EBADMSG;
}

/* Decodes an encoded payload into out (h->raw_len bytes), unverified: a
 * delta's is the XOR with its base. */
static int unpack_payload(const struct stg_chunk_header *h, const uint8_t *payload, uint8_t *out)
{
	uint8_t *filtered = NULL;
	if (h->filter != FILTER_NONE && !(filtered = malloc(h->raw_len)))
		return -ENOMEM;
	size_t skip = codec_offset(h);
	int r = codecs[h->codec].decompress(payload + skip, h->stored_len - skip,
					    filtered ? filtered : out, h->raw_len);
	if (r == 0 && filtered)
		filters[h->filter].decode(filtered, h->raw_len, h->element, out);
	free(filtered);
	return r;
}

static int verify(const struct stg_chunk_header *h, const uint8_t *data)
{
	struct stg_hash got;
	stg_hash_compute(data, h->raw_len, &got);
	return stg_hash_eq(&got, &h->hash) ? 0 : -EBADMSG;
}

/* Decodes an encoded payload into out (h->raw_len bytes) and verifies it. */
static int decode_payload(const struct stg_chunk_header *h, const uint8_t *payload, uint8_t *out)
{
	int r = unpack_payload(h, payload, out);
	return r < 0 ? r : verify(h, out);
}

static void xor_into(uint8_t *out, const uint8_t *base, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] ^= base[i];
}

int stg_chunk_decode(const uint8_t *buf, size_t len, const struct stg_hash *want,
		     uint32_t want_raw_len, uint8_t *out)
{
	const uint8_t *data;
	int r = stg_chunk_decode_view(buf, len, want, want_raw_len, out, &data);
	if (r == 0 && data != out)
		memcpy(out, data, want_raw_len);
	return r;
}

int stg_chunk_decode_view(const uint8_t *buf, size_t len, const struct stg_hash *want,
			  uint32_t want_raw_len, uint8_t *out, const uint8_t **ret_data)
{
	struct stg_chunk_header h;
	int r = stg_chunk_header_decode(buf, len, want, want_raw_len, &h);
	if (r < 0)
		return r;
	if (len != STG_CHUNK_HEADER_SIZE + (size_t)h.stored_len)
		return -EBADMSG;
	const uint8_t *payload = buf + STG_CHUNK_HEADER_SIZE;
	if (h.format == FORMAT_V3)
		return -ENOLINK;
	if (h.codec != CODEC_RAW) {
		r = decode_payload(&h, payload, out);
		if (r == 0)
			*ret_data = out;
		return r;
	}
	/* Raw: verified where it lies, no copy. */
	r = stg_chunk_verify_raw(&h, payload);
	if (r == 0)
		*ret_data = payload;
	return r;
}

int stg_chunk_decode_delta(const uint8_t *buf, size_t len, const struct stg_hash *want,
			   uint32_t want_raw_len, const uint8_t *base, uint8_t *out)
{
	struct stg_chunk_header h;
	int r = stg_chunk_header_decode(buf, len, want, want_raw_len, &h);
	if (r < 0)
		return r;
	if (h.format != FORMAT_V3 || len != STG_CHUNK_HEADER_SIZE + (size_t)h.stored_len)
		return -EBADMSG;
	r = unpack_payload(&h, buf + STG_CHUNK_HEADER_SIZE, out);
	if (r < 0)
		return r;
	xor_into(out, base, h.raw_len);
	return verify(&h, out);
}

size_t stg_chunk_encode_delta(const void *data, size_t len, const struct stg_hash *hash,
			      const void *base, const struct stg_hash *base_hash,
			      const struct stg_chunk_codec *c, uint8_t *out)
{
	if (len < 64)
		return 0;
	uint8_t *x = malloc(len);
	if (!x)
		return 0;
	memcpy(x, data, len);
	xor_into(x, base, len);
	/* A delta is always compressed: lz4 where the policy says off or auto. */
	unsigned codec = c->compress < NCODECS && c->compress != CODEC_RAW ? c->compress : CODEC_LZ4;
	struct choice ch = {codec, c->filter, c->element, c->level};
	size_t n = encode_with(x, len, hash, &ch, base_hash, out);
	free(x);
	return n;
}

ssize_t stg_chunk_recode(const uint8_t *obj, size_t len, uint32_t raw_len,
			 const struct stg_chunk_codec *c, uint8_t *raw, uint8_t *out)
{
	struct stg_chunk_header h;
	int r = stg_chunk_header_decode(obj, len, NULL, raw_len, &h);
	if (r < 0)
		return r;
	/* As asked already (auto: by zstd, the background's codec), or a
	 * delta (no base here). */
	if ((h.codec == c->compress && h.filter == c->filter) ||
	    (c->compress == COMPRESS_AUTO && h.codec == CODEC_ZSTD) || h.format == FORMAT_V3)
		return 0;
	const uint8_t *data = raw;
	r = stg_chunk_decode_view(obj, len, &h.hash, raw_len, raw, &data);
	if (r < 0)
		return r;
	size_t n = try_compress(data, raw_len, &h.hash, c, true, out);
	return n && n < len ? (ssize_t)n : 0;
}

int stg_chunk_check(const uint8_t *obj, size_t len, bool full, struct stg_hash *ret_hash)
{
	struct stg_chunk_header h;
	if (len < STG_CHUNK_HEADER_SIZE ||
	    stg_chunk_header_decode(obj, len, NULL, stg_get_le32(obj + 8), &h) < 0 ||
	    len != STG_CHUNK_HEADER_SIZE + (size_t)h.stored_len)
		return -EBADMSG;
	if (full && h.codec == CODEC_RAW) {
		if (stg_chunk_verify_raw(&h, obj + STG_CHUNK_HEADER_SIZE) < 0)
			return -EBADMSG;
	} else if (full) {
		/* A delta's content needs its base: only its encoding is checked. */
		uint8_t *out = malloc(h.raw_len);
		if (!out)
			return -ENOMEM;
		int r = h.format == FORMAT_V3 ? unpack_payload(&h, obj + STG_CHUNK_HEADER_SIZE, out)
					      : decode_payload(&h, obj + STG_CHUNK_HEADER_SIZE, out);
		free(out);
		if (r < 0)
			return r == -ENOMEM ? r : -EBADMSG;
	}
	*ret_hash = h.hash;
	return 0;
}
