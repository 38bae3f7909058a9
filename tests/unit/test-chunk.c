/* SPDX-License-Identifier: MIT */
/* Chunk objects: golden bytes, every codec and filter, verification of every
 * header field and payload byte. */
#include "chunk.h"
#include "harness.h"
#include "policy.h"
#include "util.h"

static const char *compressions[] = {"off", "lz4", "zstd", "auto"};
static const char *filters[] = {"none", "shuffle2", "shuffle4", "shuffle8",
				"bitshuffle2", "bitshuffle4", "bitshuffle8"};

static struct stg_chunk_codec codec(const char *compress, const char *filter)
{
	struct stg_chunk_codec c = stg_chunk_codec_default;
	char err[256];
	CHECK_EQ(stg_chunk_codec_parse(&c, "compress", compress, err, sizeof(err)), 0);
	CHECK_EQ(stg_chunk_codec_parse(&c, "filter", filter, err, sizeof(err)), 0);
	return c;
}

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 11;
}

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(lcg(&seed) >> 40);
}

/* A smooth float64 field with noise in the low bits: every filter pays. */
static void fill_field(uint8_t *p, size_t n, uint64_t seed)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		double v = 1000.0 + (double)i * 1e-3 + (double)(lcg(&seed) % 1000) * 1e-9;
		memcpy(p + i, &v, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)i;
}

/* fp32 weights ~ N(0, 0.02) (a sum of 4 uniforms): a shuffle before lz4
 * saves about 7%, which auto does not spend a writer's time on. */
static void fill_weights(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i + 4 <= n; i += 4) {
		double u = 0;
		for (int k = 0; k < 4; k++)
			u += (double)(lcg(&seed) & 0xffffff) / (double)0x1000000 - 0.5;
		float v = (float)(u * 0.0346); /* variance 4/12: sigma 0.02 */
		memcpy(p + i, &v, 4);
	}
}

/* Encodes data as c says, checks the header it got (want_raw -1: either) and
 * the round trip, then
 * that any flipped byte, a short or long object, or the wrong expected hash
 * or length are refused. Returns the object (malloc'ed), its length in *len. */
static uint8_t *roundtrip(const uint8_t *data, size_t n, const struct stg_chunk_codec *c,
			  int want_format, int want_raw, size_t *ret_len)
{
	struct stg_hash h;
	stg_hash_compute(data, n, &h);
	uint8_t *obj = malloc(stg_chunk_bound(n) + 1);
	size_t len = stg_chunk_encode(data, n, &h, c, obj);
	struct stg_chunk_header hdr;
	CHECK_EQ(stg_chunk_header_decode(obj, len, &h, (uint32_t)n, &hdr), 0);
	if (want_format)
		CHECK_EQ(hdr.format, want_format);
	if (want_raw >= 0)
		CHECK_EQ(stg_chunk_header_is_raw(&hdr), want_raw);
	CHECK_EQ(len, STG_CHUNK_HEADER_SIZE + hdr.stored_len);
	CHECK(stg_chunk_stored_len_ok((uint32_t)n, hdr.stored_len, !stg_chunk_header_is_raw(&hdr)));
	uint8_t *out = malloc(n);
	CHECK_EQ(stg_chunk_decode(obj, len, &h, (uint32_t)n, out), 0);
	CHECK(memcmp(out, data, n) == 0);
	struct stg_hash named;
	CHECK_EQ(stg_chunk_check(obj, len, true, &named), 0);
	CHECK(stg_hash_eq(&named, &h));

	/* No flipped byte yields other bytes: the header's are refused by its
	 * checksum and fields, the payload's by the codec or the content hash.
	 * (A flip the decoder ignores, such as an unused bit of a zstd frame
	 * header or an lz4 offset to equal bytes, decodes to the same content.) */
	int accepted = 0;
	size_t step = len > (16u << 20) ? len / 2 : len > 4096 ? len / 7 : 1;
	for (size_t i = 0; i < len; i += i < STG_CHUNK_HEADER_SIZE ? 1 : step) {
		obj[i] ^= 0x10;
		memset(out, 0, n);
		int r = stg_chunk_decode(obj, len, &h, (uint32_t)n, out);
		if ((r == 0 && memcmp(out, data, n) != 0) || (r == 0 && i < STG_CHUNK_HEADER_SIZE) ||
		    (stg_chunk_check(obj, len, true, &named) == 0 && !stg_hash_eq(&named, &h)))
			accepted++;
		obj[i] ^= 0x10;
	}
	CHECK_EQ(accepted, 0);
	CHECK(stg_chunk_decode(obj, len - 1, &h, (uint32_t)n, out) < 0);
	obj[len] = 0;
	CHECK(stg_chunk_decode(obj, len + 1, &h, (uint32_t)n, out) < 0);
	CHECK(stg_chunk_check(obj, len - 1, false, &named) < 0);
	struct stg_hash other = h;
	other.b[0] ^= 1;
	CHECK(stg_chunk_decode(obj, len, &other, (uint32_t)n, out) == -EBADMSG);
	CHECK(stg_chunk_decode(obj, len, &h, (uint32_t)n + 1, out) == -EBADMSG);
	free(out);
	*ret_len = len;
	return obj;
}

/* The golden object decodes to data; an encoder whose output is stable
 * across library versions (raw, lz4) must also reproduce it byte for byte. */
static void golden(const char *name, const uint8_t *data, size_t n, const char *compress,
		   const char *filter, int want_format, bool stable)
{
	struct stg_chunk_codec c = codec(compress, filter);
	size_t len;
	uint8_t *obj = roundtrip(data, n, &c, want_format, strcmp(compress, "off") == 0, &len);
	if (stable || getenv("STAGEHAND_REGEN_GOLDEN"))
		CHECK(harness_golden(name, obj, len));
	free(obj);
	size_t flen;
	uint8_t *fix = harness_fixture(name, &flen);
	struct stg_hash h;
	stg_hash_compute(data, n, &h);
	uint8_t *out = malloc(n);
	CHECK_EQ(stg_chunk_decode(fix, flen, &h, (uint32_t)n, out), 0);
	CHECK(memcmp(out, data, n) == 0);
	free(out);
	free(fix);
}

/* Rewrites a header field and its checksum as docs/FORMAT.md says, so that
 * only the field's own validation can refuse it. */
static void resum(uint8_t *obj)
{
	unsigned format = stg_get_le16(obj + 4);
	uint8_t copy[STG_CHUNK_HEADER_SIZE];
	memcpy(copy, obj, sizeof(copy));
	memset(copy + 32, 0, 4);
	stg_put_le32(obj + 32, (uint32_t)stg_hash64(copy, format == 1 ? 32 : 40));
}

static void expect_refused(const uint8_t *obj, size_t len, size_t off, size_t width,
			   uint32_t value, uint32_t raw_len)
{
	uint8_t *bad = malloc(len);
	memcpy(bad, obj, len);
	if (width == 1)
		bad[off] = (uint8_t)value;
	else if (width == 2)
		stg_put_le16(bad + off, (uint16_t)value);
	else
		stg_put_le32(bad + off, value);
	resum(bad);
	struct stg_chunk_header h;
	struct stg_hash named;
	if (stg_chunk_header_decode(bad, len, NULL, raw_len, &h) == 0 ||
	    stg_chunk_check(bad, len, false, &named) == 0) {
		fprintf(stderr, "header byte %zu = %u accepted\n", off, value);
		CHECK(0);
	}
	free(bad);
}

/* Every header field is validated on its own, checksum aside. */
static void header_fields(void)
{
	uint8_t data[4096];
	fill_field(data, sizeof(data), 3);
	struct stg_chunk_codec c = codec("zstd", "shuffle8");
	size_t len;
	uint8_t *obj = roundtrip(data, sizeof(data), &c, 2, false, &len);
	uint32_t n = sizeof(data);
	expect_refused(obj, len, 0, 1, 'X', n);	      /* magic */
	expect_refused(obj, len, 4, 2, 0, n);	      /* format */
	expect_refused(obj, len, 4, 2, 4, n);
	expect_refused(obj, len, 6, 1, 3, n);	      /* unknown codec */
	expect_refused(obj, len, 6, 1, 255, n);
	expect_refused(obj, len, 6, 1, 0, n);	      /* a filter on raw bytes */
	expect_refused(obj, len, 7, 1, 3, n);	      /* unknown filter */
	expect_refused(obj, len, 36, 4, 0, n);	      /* element size */
	expect_refused(obj, len, 36, 4, 3, n);
	expect_refused(obj, len, 36, 4, 16, n);
	expect_refused(obj, len, 36, 4, 0x104, n);
	expect_refused(obj, len, 8, 4, 0, 0);	      /* raw length */
	expect_refused(obj, len, 8, 4, STG_CHUNK_MAX + 1, STG_CHUNK_MAX + 1);
	expect_refused(obj, len, 12, 4, 0, n);	      /* stored length */
	expect_refused(obj, len, 12, 4, (uint32_t)stg_chunk_bound(n), n);
	/* Format 2 never holds what format 1 can say: plain lz4. */
	uint8_t *v1 = malloc(len);
	memcpy(v1, obj, len);
	v1[6] = 1;
	v1[7] = 0;
	stg_put_le32(v1 + 36, 0);
	expect_refused(v1, len, 7, 1, 0, n);
	/* Format 1 knows no filter, no element size, no zstd. */
	stg_put_le16(v1 + 4, 1);
	expect_refused(v1, len, 7, 1, 1, n);
	expect_refused(v1, len, 36, 4, 4, n);
	expect_refused(v1, len, 6, 1, 2, n);
	free(v1);
	free(obj);

	/* A zstd payload holding other than raw_len bytes, or two frames. */
	struct stg_chunk_codec z = codec("zstd", "none");
	obj = roundtrip(data, sizeof(data), &z, 2, false, &len);
	uint8_t *two = malloc(2 * len);
	memcpy(two, obj, len);
	memcpy(two + len, obj + STG_CHUNK_HEADER_SIZE, len - STG_CHUNK_HEADER_SIZE);
	stg_put_le32(two + 12, (uint32_t)(2 * len - 2 * STG_CHUNK_HEADER_SIZE));
	resum(two);
	uint8_t *out = malloc(2 * sizeof(data));
	struct stg_hash h;
	stg_hash_compute(data, sizeof(data), &h);
	CHECK_EQ(stg_chunk_decode(two, 2 * len - STG_CHUNK_HEADER_SIZE, &h, n, out), -EBADMSG);
	free(two);
	free(out);
	free(obj);
}

/* next: base with the low bytes of every float64 changed, as values that
 * moved a little between two checkpoints. */
static void moved(const uint8_t *base, uint8_t *next, size_t n)
{
	memcpy(next, base, n);
	for (size_t i = 0; i + 8 <= n; i += 8) {
		next[i] ^= (uint8_t)(i * 7 + 1);
		next[i + 1] ^= (uint8_t)(i >> 3);
	}
}

/* Delta objects (format 3): the XOR with a base of the same length, encoded
 * as the codec says; decoded only with that base, and verified. */
static void deltas(void)
{
	size_t n = (1u << 20) + 5;
	uint8_t *base = malloc(n), *next = malloc(n), *out = malloc(n);
	fill_field(base, n, 11);
	moved(base, next, n);
	struct stg_hash hb, hn, named;
	stg_hash_compute(base, n, &hb);
	stg_hash_compute(next, n, &hn);
	uint8_t *obj = malloc(stg_chunk_bound(n) + STG_CHUNK_BASE_SIZE + 1);
	uint8_t *plain = malloc(stg_chunk_bound(n));
	for (size_t ci = 0; ci < sizeof(compressions) / sizeof(*compressions); ci++)
		for (size_t fi = 0; fi < 4; fi++) {
			struct stg_chunk_codec c = codec(compressions[ci], filters[fi]);
			size_t len = stg_chunk_encode_delta(next, n, &hn, base, &hb, &c, obj);
			CHECK(len > 0);
			struct stg_chunk_header h;
			CHECK_EQ(stg_chunk_header_decode(obj, len, &hn, (uint32_t)n, &h), 0);
			CHECK_EQ(h.format, 3);
			CHECK(stg_chunk_header_is_delta(&h));
			CHECK(!stg_chunk_header_is_raw(&h)); /* off and auto: lz4 */
			CHECK(stg_chunk_base(obj, len, &named));
			CHECK(stg_hash_eq(&named, &hb));
			CHECK_EQ(stg_chunk_decode(obj, len, &hn, (uint32_t)n, out), -ENOLINK);
			CHECK_EQ(stg_chunk_decode_delta(obj, len, &hn, (uint32_t)n, base, out), 0);
			CHECK(memcmp(out, next, n) == 0);
			CHECK_EQ(stg_chunk_check(obj, len, true, &named), 0);
			CHECK(stg_hash_eq(&named, &hn));
			/* Smaller than the chunk encoded on its own. */
			size_t plen = stg_chunk_encode(next, n, &hn, &c, plain);
			CHECK(len < plen);
			CHECK(!stg_chunk_base(plain, plen, &named));
			CHECK(stg_chunk_decode_delta(plain, plen, &hn, (uint32_t)n, base, out) < 0);
			/* Another base: refused by the content hash. */
			CHECK_EQ(stg_chunk_decode_delta(obj, len, &hn, (uint32_t)n, next, out), -EBADMSG);
		}

	/* No flipped byte yields other bytes; a short or long object, the
	 * wrong hash or length are refused. */
	struct stg_chunk_codec c = codec("zstd", "shuffle8");
	size_t len = stg_chunk_encode_delta(next, n, &hn, base, &hb, &c, obj);
	int accepted = 0;
	for (size_t i = 0; i < len; i += i < STG_CHUNK_HEADER_SIZE + STG_CHUNK_BASE_SIZE ? 1 : len / 7) {
		obj[i] ^= 0x10;
		/* (The base's hash is not checked here: a reader fetches the
		 * base by it, and another base's bytes fail the content hash.) */
		int r = stg_chunk_decode_delta(obj, len, &hn, (uint32_t)n, base, out);
		if (r == 0 && (memcmp(out, next, n) != 0 || i < STG_CHUNK_HEADER_SIZE))
			accepted++;
		obj[i] ^= 0x10;
	}
	CHECK_EQ(accepted, 0);
	CHECK(stg_chunk_decode_delta(obj, len - 1, &hn, (uint32_t)n, base, out) < 0);
	obj[len] = 0;
	CHECK(stg_chunk_decode_delta(obj, len + 1, &hn, (uint32_t)n, base, out) < 0);
	CHECK(stg_chunk_decode_delta(obj, len, &hb, (uint32_t)n, base, out) == -EBADMSG);
	CHECK(stg_chunk_decode_delta(obj, len, &hn, (uint32_t)n + 1, base, out) == -EBADMSG);
	/* A delta whose stored length leaves no room for its base's hash. */
	uint8_t *bad = malloc(len);
	memcpy(bad, obj, len);
	stg_put_le32(bad + 12, STG_CHUNK_BASE_SIZE);
	resum(bad);
	struct stg_chunk_header h;
	CHECK_EQ(stg_chunk_header_decode(bad, STG_CHUNK_HEADER_SIZE + STG_CHUNK_BASE_SIZE, &hn,
					 (uint32_t)n, &h), -EBADMSG);
	free(bad);
	/* A delta is always encoded: raw is refused in format 3, even with
	 * lengths that would fit a raw chunk. */
	bad = malloc(STG_CHUNK_HEADER_SIZE + n);
	memcpy(bad, obj, STG_CHUNK_HEADER_SIZE);
	memcpy(bad + STG_CHUNK_HEADER_SIZE, next, n);
	bad[6] = 0;
	bad[7] = 0;
	stg_put_le32(bad + 12, (uint32_t)n);
	stg_put_le32(bad + 36, 0);
	resum(bad);
	CHECK_EQ(stg_chunk_header_decode(bad, STG_CHUNK_HEADER_SIZE + n, &hn, (uint32_t)n, &h),
		 -EBADMSG);
	stg_put_le16(bad + 4, 2); /* the same as format 2 is fine */
	resum(bad);
	CHECK_EQ(stg_chunk_header_decode(bad, STG_CHUNK_HEADER_SIZE + n, &hn, (uint32_t)n, &h),
		 -EBADMSG); /* (format 2 never holds raw either) */
	stg_put_le16(bad + 4, 1);
	resum(bad);
	CHECK_EQ(stg_chunk_header_decode(bad, STG_CHUNK_HEADER_SIZE + n, &hn, (uint32_t)n, &h), 0);
	free(bad);
	/* Chunks under 64 bytes are never worth a delta. */
	CHECK_EQ(stg_chunk_encode_delta(next, 63, &hn, base, &hb, &c, obj), 0);
	free(obj);
	free(plain);

	/* The golden delta (lz4, stable) decodes with its base. */
	uint8_t gbase[4096], gnext[4096], gout[4096];
	fill_field(gbase, sizeof(gbase), 1);
	moved(gbase, gnext, sizeof(gnext));
	stg_hash_compute(gbase, sizeof(gbase), &hb);
	stg_hash_compute(gnext, sizeof(gnext), &hn);
	uint8_t gobj[8192];
	struct stg_chunk_codec l = codec("lz4", "shuffle8");
	len = stg_chunk_encode_delta(gnext, sizeof(gnext), &hn, gbase, &hb, &l, gobj);
	CHECK(len > 0 && harness_golden("chunk-delta-shuffle8-lz4-v3.bin", gobj, len));
	size_t flen;
	uint8_t *fix = harness_fixture("chunk-delta-shuffle8-lz4-v3.bin", &flen);
	CHECK_EQ(stg_chunk_decode_delta(fix, flen, &hn, sizeof(gnext), gbase, gout), 0);
	CHECK(memcmp(gout, gnext, sizeof(gnext)) == 0);
	free(fix);
	free(base);
	free(next);
	free(out);
}

int main(void)
{
	uint8_t text[1000];
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = "checkpoint "[i % 11];
	golden("chunk-lz4-v1.bin", text, sizeof(text), "lz4", "none", 1, true);
	golden("chunk-raw-v1.bin", text, 100, "off", "none", 1, true);
	uint8_t field[4096];
	fill_field(field, sizeof(field), 1);
	golden("chunk-zstd-v2.bin", text, sizeof(text), "zstd", "none", 2, false);
	golden("chunk-shuffle8-lz4-v2.bin", field, sizeof(field), "lz4", "shuffle8", 2, true);
	golden("chunk-shuffle8-zstd-v2.bin", field, sizeof(field), "zstd", "shuffle8", 2, false);
	golden("chunk-bitshuffle8-lz4-v2.bin", field, sizeof(field), "lz4", "bitshuffle8", 2, true);
	golden("chunk-bitshuffle8-zstd-v2.bin", field, sizeof(field), "zstd", "bitshuffle8", 2,
	       false);

	/* Every codec and filter: odd lengths (not a multiple of any element
	 * size, fewer than 8 elements), 1 byte (never worth encoding). */
	size_t big = (1u << 20) + 5;
	uint8_t *buf = malloc(big);
	fill_field(buf, big, 7);
	const size_t lens[] = {1, 13, 63, 64, 1003, big};
	for (size_t ci = 0; ci < sizeof(compressions) / sizeof(*compressions); ci++)
		for (size_t fi = 0; fi < sizeof(filters) / sizeof(*filters); fi++)
			for (size_t li = 0; li < sizeof(lens) / sizeof(*lens); li++) {
				struct stg_chunk_codec c = codec(compressions[ci], filters[fi]);
				bool raw = lens[li] < 64 || strcmp(compressions[ci], "off") == 0;
				/* A filter of the right size exposes the float64 field's
				 * exponents in a large chunk (auto decides on a sample). */
				bool encoded = lens[li] == big && strstr(filters[fi], "8") &&
					       strcmp(compressions[ci], "auto") != 0 && !raw;
				size_t len;
				free(roundtrip(buf, lens[li], &c, raw ? 1 : 0,
					       raw ? 1 : encoded ? 0 : -1, &len));
			}
	/* Incompressible data is stored raw, whatever the setting. */
	fill_random(buf, big, 42);
	for (size_t ci = 0; ci < sizeof(compressions) / sizeof(*compressions); ci++) {
		struct stg_chunk_codec c = codec(compressions[ci], "shuffle4");
		size_t len;
		free(roundtrip(buf, big, &c, 1, true, &len));
	}
	free(buf);

	/* The largest chunk, with every codec and a filter. */
	size_t max = STG_CHUNK_MAX;
	buf = malloc(max);
	fill_field(buf, max, 9);
	const char *maxcases[][2] = {{"lz4", "shuffle8"}, {"zstd", "bitshuffle8"}, {"auto", "none"}};
	for (size_t i = 0; i < 3; i++) {
		struct stg_chunk_codec c = codec(maxcases[i][0], maxcases[i][1]);
		size_t len;
		free(roundtrip(buf, max, &c, 0, i < 2 ? 0 : -1, &len));
	}
	free(buf);

	header_fields();
	deltas();

	/* Policy values: the old lz4 and off keep working. */
	struct stg_chunk_codec c = codec("lz4", "none");
	CHECK(memcmp(&c, &stg_chunk_codec_default, sizeof(c)) == 0);
	char err[256];
	CHECK_EQ(stg_chunk_codec_parse(&c, "compress", "yes", err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "compress 'yes' must be lz4, zstd, auto or off") != NULL);
	CHECK_EQ(stg_chunk_codec_parse(&c, "filter", "shuffle", err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "e.g. shuffle4") != NULL);
	CHECK_EQ(stg_chunk_codec_parse(&c, "filter", "", err, sizeof(err)), -EINVAL);

	/* Hashes: canonical hex, stable value (XXH3-128 of "stagehand"). */
	struct stg_hash h, back;
	stg_hash_compute("stagehand", 9, &h);
	char hex[33];
	stg_hash_hex(&h, hex);
	CHECK_EQ(strlen(hex), 32);
	CHECK_EQ(stg_hash_from_hex(hex, &back), 0);
	CHECK(stg_hash_eq(&h, &back));
	CHECK(stg_hash_from_hex("zz", &back) < 0);
	CHECK(harness_golden("hash-stagehand.txt", (const uint8_t *)hex, 32));

	/* Zeros hashed without a buffer of them: the same as with one, again
	 * when remembered, whichever lengths came between. */
	const size_t zlens[] = {0, 1, 65535, 65536, 65537, (1u << 20) + 3, 16u << 20, 1, 16u << 20};
	uint8_t *zeros = calloc(1, 16u << 20);
	for (size_t i = 0; i < sizeof(zlens) / sizeof(*zlens); i++) {
		struct stg_hash want, got;
		stg_hash_compute(zeros, zlens[i], &want);
		CHECK_EQ(stg_hash_zeros(zlens[i], &got), 0);
		CHECK(stg_hash_eq(&want, &got));
	}
	free(zeros);

	/* zstd runs in the background: captured as lz4 with the same filter,
	 * recoded on the way out when that is smaller. */
	struct stg_chunk_codec z = codec("zstd", "shuffle8"), cap = stg_chunk_codec_capture(&z);
	CHECK(stg_chunk_codec_background(&z));
	CHECK(!stg_chunk_codec_background(&cap));
	struct stg_chunk_codec l = codec("lz4", "shuffle8");
	CHECK(memcmp(&cap, &l, sizeof(cap)) == 0);
	struct stg_chunk_codec a = codec("auto", "none");
	cap = stg_chunk_codec_capture(&a);
	CHECK(memcmp(&cap, &a, sizeof(a)) == 0);
	CHECK(stg_chunk_codec_background(&a));
	size_t rn = 1u << 20;
	uint8_t *rdata = malloc(rn), *robj = malloc(stg_chunk_bound(rn)), *rraw = malloc(rn),
		*rout = malloc(stg_chunk_bound(rn)), *rback = malloc(rn);
	fill_field(rdata, rn, 3);
	struct stg_hash rh;
	stg_hash_compute(rdata, rn, &rh);
	size_t olen = stg_chunk_encode(rdata, rn, &rh, &l, robj);
	ssize_t nlen = stg_chunk_recode(robj, olen, (uint32_t)rn, &z, rraw, rout);
	CHECK(nlen > 0 && (size_t)nlen < olen);
	CHECK_EQ(stg_chunk_decode(rout, (size_t)nlen, &rh, (uint32_t)rn, rback), 0);
	CHECK(memcmp(rback, rdata, rn) == 0);
	/* Already zstd: left alone. Random bytes: nothing pays, left alone. */
	CHECK_EQ(stg_chunk_recode(rout, (size_t)nlen, (uint32_t)rn, &z, rraw, robj), 0);
	for (size_t i = 0; i + 8 <= rn; i += 8) {
		uint64_t v = harness_random();
		memcpy(rdata + i, &v, 8);
	}
	stg_hash_compute(rdata, rn, &rh);
	olen = stg_chunk_encode(rdata, rn, &rh, &l, robj);
	CHECK_EQ(stg_chunk_recode(robj, olen, (uint32_t)rn, &z, rraw, rout), 0);
	/* auto: fp32 weights, which a shuffle + lz4 shrinks by 7%, are captured
	 * raw (lz4 would be slower than the disk for that), and the flusher's
	 * recode stores them with zstd after a shuffle; a zstd record is left
	 * alone. Text, which lz4 halves, is captured as lz4. */
	fill_weights(rdata, rn, 9);
	stg_hash_compute(rdata, rn, &rh);
	struct stg_chunk_codec l4 = codec("lz4", "shuffle4");
	CHECK(stg_chunk_try_compress(rdata, rn, &rh, &l4, rout) > 0);
	CHECK(stg_chunk_try_compress(rdata, rn, &rh, &l4, rout) < rn - rn / 32);
	CHECK(stg_chunk_try_compress(rdata, rn, &rh, &l4, rout) > rn - rn / 8);
	CHECK_EQ(stg_chunk_try_compress(rdata, rn, &rh, &a, rout), 0);
	olen = stg_chunk_encode(rdata, rn, &rh, &a, robj);
	struct stg_chunk_header ah;
	CHECK_EQ(stg_chunk_header_decode(robj, olen, &rh, (uint32_t)rn, &ah), 0);
	CHECK(stg_chunk_header_is_raw(&ah));
	nlen = stg_chunk_recode(robj, olen, (uint32_t)rn, &a, rraw, rout);
	CHECK(nlen > 0 && (size_t)nlen < rn - rn / 8);
	CHECK_EQ(stg_chunk_header_decode(rout, (size_t)nlen, &rh, (uint32_t)rn, &ah), 0);
	CHECK_EQ(ah.filter, 1); /* a byte shuffle, found without being named */
	CHECK_EQ(ah.element, 4);
	CHECK_EQ(stg_chunk_decode(rout, (size_t)nlen, &rh, (uint32_t)rn, rback), 0);
	CHECK(memcmp(rback, rdata, rn) == 0);
	/* A zstd record is left alone, even one a shuffle would shrink: the
	 * flusher recoded it already, or the policy said zstd. */
	struct stg_chunk_codec zn = codec("zstd", "none");
	olen = stg_chunk_encode(rdata, rn, &rh, &zn, robj);
	CHECK(olen > (size_t)nlen);
	CHECK_EQ(stg_chunk_recode(robj, olen, (uint32_t)rn, &a, rraw, rout), 0);
	/* Nothing an lz4 sample finds (random bytes of 6 bits: hardly a repeat
	 * of 4), which zstd's entropy coder stores in 6/8: zstd alone, after
	 * its own sample. */
	uint64_t sk = 11;
	for (size_t i = 0; i < rn; i++)
		rdata[i] = (uint8_t)(lcg(&sk) & 63);
	stg_hash_compute(rdata, rn, &rh);
	CHECK_EQ(stg_chunk_try_compress(rdata, rn, &rh, &l4, rout), 0);
	olen = stg_chunk_encode(rdata, rn, &rh, &a, robj);
	nlen = stg_chunk_recode(robj, olen, (uint32_t)rn, &a, rraw, rout);
	CHECK(nlen > 0 && (size_t)nlen < rn - rn / 5);
	CHECK_EQ(stg_chunk_header_decode(rout, (size_t)nlen, &rh, (uint32_t)rn, &ah), 0);
	CHECK_EQ(ah.codec, 2);
	CHECK_EQ(ah.filter, 0);
	CHECK_EQ(stg_chunk_decode(rout, (size_t)nlen, &rh, (uint32_t)rn, rback), 0);
	CHECK(memcmp(rback, rdata, rn) == 0);
	for (size_t i = 0; i < rn; i++)
		rdata[i] = (uint8_t)"checkpoint step 42 of the run\n"[i % 30];
	stg_hash_compute(rdata, rn, &rh);
	olen = stg_chunk_encode(rdata, rn, &rh, &a, robj);
	CHECK(olen < rn / 2);
	CHECK_EQ(stg_chunk_header_decode(robj, olen, &rh, (uint32_t)rn, &ah), 0);
	CHECK(!stg_chunk_header_is_raw(&ah));
	/* A damaged record is refused, not recoded. */
	robj[STG_CHUNK_HEADER_SIZE + 100] ^= 1;
	CHECK_EQ(stg_chunk_recode(robj, olen, (uint32_t)rn, &z, rraw, rout), -EBADMSG);
	free(rdata);
	free(robj);
	free(rraw);
	free(rout);
	free(rback);
	return harness_done();
}
