/* SPDX-License-Identifier: MIT */
/* The manifest format: golden bytes, round trip, and every byte validated. */
#include <stddef.h>

#include "harness.h"
#include "manifest.h"
#include "policy.h"
#include "util.h"

/* A fixed manifest: three chunks of 64 KiB + 100 bytes, one of each kind. */
static void sample(struct stg_manifest *m)
{
	CHECK_EQ(stg_manifest_init(m, 2 * 65536 + 100, 65536), 0);
	m->version = 7;
	m->mode = 0640;
	m->mtime_ns = 1795200000123456789LL;
	m->commit_ns = 1795200001000000000LL;
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 16; k++)
			m->entries[i].hash.b[k] = (uint8_t)(i * 16 + k);
	m->entries[0] = (struct stg_manifest_entry){.hash = m->entries[0].hash, .raw_len = 65536,
						    .stored_len = 65536, .flags = STG_ENTRY_NEW,
						    .pack = 0x0123456789abcdefull, .offset = 4096};
	m->entries[1] = (struct stg_manifest_entry){.hash = m->entries[1].hash, .raw_len = 65536,
						    .flags = STG_ENTRY_ZERO};
	m->entries[2] = (struct stg_manifest_entry){.hash = m->entries[2].hash, .raw_len = 100,
						    .stored_len = 60, .flags = STG_ENTRY_ENCODED,
						    .pack = 0xfedcba9876543210ull, .offset = 1u << 20};
	CHECK_EQ(stg_manifest_place(m), 0);
}

/* Gives m a part: node 0x0a0b0c0d0e0f1011's ranks 2, 3 (and 5) of 8 wrote
 * three (or four, the last one up to the end of the file) extents. */
static void sample_part(struct stg_manifest *m, uint32_t nranks, uint32_t nextents)
{
	static const uint32_t ranks[] = {2, 3, 5};
	static const struct stg_extent extents[] = {
		{0, 4096}, {65536, 1000}, {70000, 10}, {131072, 100}};
	CHECK_EQ(stg_part_new(&m->part, nranks, nextents), 0);
	struct stg_part *p = m->part;
	strcpy(p->job, "slurm-4242.0@cluster");
	p->node = 0x0a0b0c0d0e0f1011ull;
	p->open = 5;
	p->nranks_job = 8;
	memcpy(p->ranks, ranks, nranks * sizeof(*ranks));
	memcpy(p->extents, extents, nextents * sizeof(*extents));
	m->flags |= STG_MANIFEST_PART;
}

/* How many of buf's first n bytes, flipped by mask one at a time, still
 * decode (buf is restored). */
static int accepted_flips(uint8_t *buf, size_t len, size_t n, uint8_t mask)
{
	int accepted = 0;
	for (size_t i = 0; i < n; i++) {
		struct stg_manifest d;
		buf[i] ^= mask;
		if (stg_manifest_decode(buf, len, &d) == 0) {
			accepted++;
			stg_manifest_done(&d);
		}
		buf[i] ^= mask;
	}
	return accepted;
}

/* Decodes a copy of good with n bytes at "at" replaced and its checksum
 * fixed, so that the field itself is what gets checked. */
static int decode_mutated(const uint8_t *good, size_t len, size_t at, const void *bytes,
			  size_t n)
{
	uint8_t *b = malloc(len);
	memcpy(b, good, len);
	memcpy(b + at, bytes, n);
	stg_put_le64(b + len - 8, stg_hash64(b, len - 8));
	struct stg_manifest d;
	int r = stg_manifest_decode(b, len, &d);
	if (r == 0)
		stg_manifest_done(&d);
	free(b);
	return r;
}

static int decode_mutated32(const uint8_t *good, size_t len, size_t at, uint32_t v)
{
	uint8_t b[4];
	stg_put_le32(b, v);
	return decode_mutated(good, len, at, b, 4);
}

static int decode_mutated64(const uint8_t *good, size_t len, size_t at, uint64_t v)
{
	uint8_t b[8];
	stg_put_le64(b, v);
	return decode_mutated(good, len, at, b, 8);
}

/* Encodes m, pinned by a golden file; returns the malloc'ed bytes. */
static uint8_t *encode_pinned(const struct stg_manifest *m, const char *golden, size_t *len)
{
	*len = stg_manifest_encoded_size(m);
	uint8_t *buf = malloc(*len);
	CHECK_EQ(stg_manifest_encode(m, buf), *len);
	CHECK(harness_golden(golden, buf, *len));
	return buf;
}

/* Every single-byte corruption and every truncation is refused. */
static void check_refused(uint8_t *buf, size_t len)
{
	struct stg_manifest d;
	for (int bit = 0; bit < 8; bit += 3)
		CHECK_EQ(accepted_flips(buf, len, len, (uint8_t)(1 << bit)), 0);
	for (size_t n = 0; n < len; n++)
		CHECK(stg_manifest_decode(buf, n, &d) == -EBADMSG);
}

/* A golden file decodes and encodes back to the same bytes. */
static void check_reencode(const char *name)
{
	size_t len;
	uint8_t *want = harness_fixture(name, &len);
	struct stg_manifest d;
	CHECK_EQ(stg_manifest_decode(want, len, &d), 0);
	CHECK_EQ(stg_manifest_encoded_size(&d), len);
	uint8_t *got = malloc(len);
	CHECK_EQ(stg_manifest_encode(&d, got), len);
	CHECK(memcmp(got, want, len) == 0);
	stg_manifest_done(&d);
	free(got);
	free(want);
}

/* A part section: round trip, golden bytes, and each field's rules. */
/* A node's sync superseding another rank's: ranks and extents merged. */
static void test_part_merge(void)
{
	struct stg_part *a, *b, *m;
	CHECK_EQ(stg_part_new(&a, 2, 2), 0);
	CHECK_EQ(stg_part_new(&b, 2, 3), 0);
	snprintf(a->job, sizeof(a->job), "job-1");
	a->node = 7;
	a->open = 2;
	a->nranks_job = 8;
	memcpy(b, a, offsetof(struct stg_part, ranks));
	b->nranks = 2;
	b->nextents = 3;
	a->ranks[0] = 1, a->ranks[1] = 5;
	b->ranks[0] = 3, b->ranks[1] = 5;
	a->extents[0] = (struct stg_extent){0, 100};
	a->extents[1] = (struct stg_extent){300, 100};
	b->extents[0] = (struct stg_extent){50, 100};   /* overlaps a's first */
	b->extents[1] = (struct stg_extent){150, 10};   /* touches the merged one */
	b->extents[2] = (struct stg_extent){390, 200};  /* cut at the size, 500 */
	CHECK_EQ(stg_part_merge(a, b, 500, &m), 0);
	CHECK(strcmp(m->job, "job-1") == 0 && m->node == 7 && m->open == 2 && m->nranks_job == 8);
	CHECK_EQ(m->nranks, 3);
	CHECK(m->ranks[0] == 1 && m->ranks[1] == 3 && m->ranks[2] == 5);
	CHECK_EQ(m->nextents, 2);
	CHECK(m->extents[0].off == 0 && m->extents[0].len == 160);
	CHECK(m->extents[1].off == 300 && m->extents[1].len == 200);
	CHECK(stg_part_valid(m, 500));
	CHECK(stg_part_equal(m, m) && !stg_part_equal(m, a) && !stg_part_equal(a, NULL));
	stg_part_free(a);
	stg_part_free(b);
	stg_part_free(m);
}

static void test_part(void)
{
	struct stg_manifest m, d;
	sample(&m);
	sample_part(&m, 2, 3);
	size_t len = stg_manifest_encoded_size(&m);
	CHECK_EQ(len, 64 + 3 * 48 + 96 + 8 + 3 * 16 + 8);
	uint8_t *buf = malloc(len);
	CHECK_EQ(stg_manifest_encode(&m, buf), len);
	CHECK_EQ(stg_manifest_decode(buf, len, &d), 0);
	CHECK_EQ(d.flags, STG_MANIFEST_PART);
	CHECK(d.part != NULL);
	CHECK_STR(d.part->job, "slurm-4242.0@cluster");
	CHECK_EQ(d.part->node, 0x0a0b0c0d0e0f1011ull);
	CHECK_EQ(d.part->open, 5);
	CHECK_EQ(d.part->nranks_job, 8);
	CHECK_EQ(d.part->nranks, 2);
	CHECK_EQ(d.part->ranks[0], 2);
	CHECK_EQ(d.part->ranks[1], 3);
	CHECK_EQ(d.part->nextents, 3);
	CHECK(memcmp(d.part->extents, m.part->extents, 3 * sizeof(struct stg_extent)) == 0);
	CHECK(memcmp(d.entries, m.entries, 3 * sizeof(*d.entries)) == 0);
	stg_manifest_done(&d);
	CHECK(d.part == NULL && d.flags == 0);
	stg_manifest_done(&m);
	free(buf);

	/* Pinned with three ranks, so that the rank padding is too, and
	 * counts that all differ. */
	sample(&m);
	sample_part(&m, 3, 4);
	CHECK(stg_part_valid(m.part, m.size));
	len = stg_manifest_encoded_size(&m);
	CHECK_EQ(len, 64 + 3 * 48 + 96 + 16 + 4 * 16 + 8);
	buf = malloc(len);
	CHECK_EQ(stg_manifest_encode(&m, buf), len);
	CHECK(harness_golden("manifest-v3-part.bin", buf, len));
	CHECK_EQ(stg_manifest_peek_flags(buf, len), STG_MANIFEST_PART);
	CHECK_EQ(stg_get_le16(buf + 4), 3);
	/* PART came with format 3: format 2 cannot say it, nor format 3 OPEN
	 * alone. */
	buf[4] = 2;
	CHECK_EQ(stg_manifest_peek_flags(buf, len), -EBADMSG);
	CHECK_EQ(stg_manifest_decode(buf, len, &d), -EBADMSG);
	buf[4] = 3;
	buf[6] = STG_MANIFEST_OPEN;
	CHECK_EQ(stg_manifest_peek_flags(buf, len), -EBADMSG);
	buf[6] = STG_MANIFEST_PART;
	char job[STG_PART_JOB_MAX];
	uint32_t open = 0;
	uint64_t node = 0;
	CHECK_EQ(stg_manifest_peek_part(buf, len, job, &open, &node), 1);
	CHECK_STR(job, "slurm-4242.0@cluster");
	CHECK_EQ(open, 5);
	CHECK_EQ(node, 0x0a0b0c0d0e0f1011ull);

	/* The flag comes from the part alone; with OPEN too it is still one
	 * section. */
	uint8_t *other = malloc(len);
	m.flags = 0;
	CHECK_EQ(stg_manifest_encode(&m, other), len);
	CHECK(memcmp(other, buf, len) == 0);
	m.flags = STG_MANIFEST_OPEN;
	stg_manifest_encode(&m, other);
	CHECK_EQ(stg_manifest_peek_flags(other, len), STG_MANIFEST_OPEN | STG_MANIFEST_PART);
	CHECK_EQ(stg_manifest_decode(other, len, &d), 0);
	CHECK_EQ(d.flags, STG_MANIFEST_OPEN | STG_MANIFEST_PART);
	stg_manifest_done(&d);
	free(other);

	/* Every single-bit corruption and every truncation is refused. */
	CHECK_EQ(accepted_flips(buf, len, len, 0x04), 0);
	for (size_t n = 0; n < len; n++)
		CHECK(stg_manifest_decode(buf, n, &d) == -EBADMSG);

	/* Each field, checksummed correctly but wrong. */
	const size_t s = 64 + 3 * 48, job_at = s + 32, rank_at = s + 96, ext_at = s + 112;
	CHECK_EQ(decode_mutated(buf, len, 0, buf, 1), 0); /* the mutation itself is sound */
	CHECK_EQ(decode_mutated(buf, len, s, "SHPX", 4), -EBADMSG);
	CHECK_EQ(decode_mutated(buf, len, s + 20, "\1", 1), -EBADMSG);      /* reserved */
	CHECK_EQ(decode_mutated(buf, len, job_at + 5, " ", 1), -EBADMSG);   /* a space */
	CHECK_EQ(decode_mutated(buf, len, job_at + 5, "\x7f", 1), -EBADMSG);
	CHECK_EQ(decode_mutated(buf, len, job_at + 5, "\xe9", 1), -EBADMSG);
	CHECK_EQ(decode_mutated(buf, len, job_at + 40, "x", 1), -EBADMSG);  /* after the NUL */
	static const uint8_t zeros[64];
	CHECK_EQ(decode_mutated(buf, len, job_at, zeros, 64), -EBADMSG);    /* empty */
	char longjob[64];
	memset(longjob, 'j', 64);
	CHECK_EQ(decode_mutated(buf, len, job_at, longjob, 64), -EBADMSG);  /* no NUL */
	CHECK_EQ(decode_mutated(buf, len, job_at, longjob, 63), 0);         /* 63 bytes */
	CHECK_EQ(decode_mutated64(buf, len, s + 24, 0), -EBADMSG);          /* node */
	CHECK_EQ(decode_mutated32(buf, len, s + 12, 0), -EBADMSG);          /* open */
	CHECK_EQ(decode_mutated32(buf, len, s + 16, 0), -EBADMSG);          /* ranks in the job */
	CHECK_EQ(decode_mutated32(buf, len, s + 16, STG_PART_RANKS_MAX + 1), -EBADMSG);
	CHECK_EQ(decode_mutated32(buf, len, s + 16, STG_PART_RANKS_MAX), 0);
	CHECK_EQ(decode_mutated32(buf, len, s + 16, 6), 0);
	CHECK_EQ(decode_mutated32(buf, len, s + 16, 5), -EBADMSG);          /* rank 5 >= 5 */
	CHECK_EQ(decode_mutated32(buf, len, s + 16, 2), -EBADMSG);          /* 3 ranks of 2 */
	CHECK_EQ(decode_mutated32(buf, len, rank_at + 4, 1), -EBADMSG);     /* 2, 1, 5 */
	CHECK_EQ(decode_mutated32(buf, len, rank_at + 4, 2), -EBADMSG);     /* 2, 2, 5 */
	CHECK_EQ(decode_mutated32(buf, len, rank_at + 12, 1), -EBADMSG);    /* padding */
	CHECK_EQ(decode_mutated32(buf, len, s + 4, 0), -EBADMSG);           /* no ranks */
	CHECK_EQ(decode_mutated32(buf, len, s + 4, 4), -EBADMSG);           /* 2, 3, 5, 0 */
	CHECK_EQ(decode_mutated32(buf, len, s + 8, 3), -EBADMSG);           /* fewer extents */
	CHECK_EQ(decode_mutated32(buf, len, s + 8, UINT32_MAX), -EBADMSG);
	CHECK_EQ(decode_mutated64(buf, len, ext_at + 16, 4096), -EBADMSG);  /* touching */
	CHECK_EQ(decode_mutated64(buf, len, ext_at + 16, 4097), 0);         /* 1 byte apart */
	CHECK_EQ(decode_mutated64(buf, len, ext_at + 16, 100), -EBADMSG);   /* overlapping */
	CHECK_EQ(decode_mutated64(buf, len, ext_at + 24, 0), -EBADMSG);     /* empty */
	CHECK_EQ(decode_mutated64(buf, len, ext_at + 56, 101), -EBADMSG);   /* past the size */
	CHECK_EQ(decode_mutated64(buf, len, ext_at + 48, UINT64_MAX - 50), -EBADMSG);
	/* A section without the flag (OPEN keeps format 2 valid), and the
	 * flag without a section. */
	uint8_t fl[2];
	stg_put_le16(fl, STG_MANIFEST_OPEN);
	CHECK_EQ(decode_mutated(buf, len, 6, fl, 2), -EBADMSG);
	stg_manifest_done(&m);
	sample(&m);
	m.flags = STG_MANIFEST_OPEN;
	size_t olen = stg_manifest_encode(&m, buf);
	CHECK_EQ(stg_manifest_peek_part(buf, olen, job, &open, &node), 0);
	for (int k = 0; k < 2; k++) {
		stg_put_le16(fl, k ? STG_MANIFEST_PART : STG_MANIFEST_OPEN | STG_MANIFEST_PART);
		CHECK_EQ(decode_mutated(buf, olen, 6, fl, 2), -EBADMSG);
	}
	buf[olen - 1] ^= 1;
	CHECK_EQ(stg_manifest_peek_part(buf, olen, job, &open, &node), -EBADMSG);
	stg_manifest_done(&m);
	free(buf);

	/* A node whose ranks wrote nothing still has a part. */
	struct stg_part *p;
	CHECK_EQ(stg_part_new(&p, 1, 0), 0);
	strcpy(p->job, "j");
	p->node = p->open = p->nranks_job = 1;
	CHECK(stg_part_valid(p, 0));
	p->ranks[0] = 1;
	CHECK(!stg_part_valid(p, 0));
	stg_part_free(p);
	stg_part_free(NULL);

	check_reencode("manifest-v1.bin");
	check_reencode("manifest-v2-open.bin");
	check_reencode("manifest-v3-part.bin");
}

/* A content-defined manifest (64 KiB average: chunks of 16 KiB .. 256 KiB):
 * chunks of 70000, 16384 (zeros) and 100 bytes. */
static void sample_cdc(struct stg_manifest *m)
{
	struct stg_chunker c;
	stg_chunker_init(&c, STG_CHUNKING_CDC, 65536);
	CHECK_EQ(c.min, 16384);
	CHECK_EQ(c.max, 262144);
	CHECK_EQ(stg_manifest_init_chunked(m, 70000 + 16384 + 100, &c, 3), 0);
	m->version = 9;
	m->mode = 0600;
	m->mtime_ns = 1795200000123456789LL;
	m->commit_ns = 1795200001000000000LL;
	static const uint32_t lens[] = {70000, 16384, 100};
	for (int i = 0; i < 3; i++) {
		for (int k = 0; k < 16; k++)
			m->entries[i].hash.b[k] = (uint8_t)(0x80 + i * 16 + k);
		m->entries[i].raw_len = lens[i];
	}
	m->entries[0].stored_len = 70000;
	m->entries[0].flags = STG_ENTRY_NEW;
	m->entries[0].pack = 0x1111222233334444ull;
	m->entries[0].offset = 8192;
	m->entries[1].flags = STG_ENTRY_ZERO;
	m->entries[2].stored_len = 60;
	m->entries[2].flags = STG_ENTRY_ENCODED;
	m->entries[2].pack = 0x1111222233334444ull;
	m->entries[2].offset = 81920;
	CHECK_EQ(stg_manifest_place(m), 0);
}

/* The rules of lengths and bounds, each broken in turn (the sizes follow
 * the lengths, so that only the rule at hand is broken). */
enum { NBREAKS = 12 };

static void break_rule(struct stg_manifest *m, int rule)
{
	struct stg_manifest_entry *e = m->entries;
	switch (rule) {
	case 0: e[1].raw_len--, m->size--; break;                   /* below min, not last */
	case 1: /* above max */
		e[0].raw_len = e[0].stored_len = 262145, m->size += 262145 - 70000;
		break;
	case 2: e[2].raw_len = 262145, m->size += 262145 - 100; break; /* last above max */
	case 3: m->size--; break;                                    /* lengths sum more */
	case 4: m->size++; break;                                    /* lengths sum less */
	case 5: e[2].raw_len = 0, m->size -= 100; break;             /* an empty chunk */
	case 6: m->chunk_min = 0; break;
	case 7: m->chunk_min = 65537; break;                         /* above the average */
	case 8: m->chunk_max = 65535; break;                         /* below the average */
	case 9: m->chunk_max = STG_CHUNK_MAX + 1; break;
	case 10: m->chunk_size = 65536 + 4096; break;                /* not a power of two */
	case 11: m->nchunks = 0; break;                              /* bytes, no chunks */
	}
}

/* Re-encodes the content-defined sample with a rule broken; returns what
 * decoding says. */
static int decode_broken(int rule)
{
	struct stg_manifest m, d;
	sample_cdc(&m);
	break_rule(&m, rule);
	size_t len = stg_manifest_encoded_size(&m);
	uint8_t *buf = malloc(len);
	stg_manifest_encode(&m, buf);
	int r = stg_manifest_decode(buf, len, &d);
	if (r == 0)
		stg_manifest_done(&d);
	stg_manifest_done(&m);
	free(buf);
	return r;
}

static void test_cdc(void)
{
	struct stg_manifest m, d;
	sample_cdc(&m);
	size_t len;
	uint8_t *buf = encode_pinned(&m, "manifest-v4-cdc.bin", &len);
	/* The entries stay 48 bytes: the offsets are implicit. */
	CHECK_EQ(len, 64 + 3 * 48 + 8);
	CHECK_EQ(stg_get_le16(buf + 4), 4);
	CHECK_EQ(stg_manifest_peek_flags(buf, len), 0);
	CHECK_EQ(stg_manifest_decode(buf, len, &d), 0);
	CHECK_EQ(d.chunking, STG_CHUNKING_CDC);
	CHECK_EQ(d.chunk_size, 65536);
	CHECK_EQ(d.chunk_min, 16384);
	CHECK_EQ(d.chunk_max, 262144);
	CHECK_EQ(d.entries[1].at, 70000);
	CHECK_EQ(d.entries[2].at, 70000 + 16384);
	CHECK(memcmp(d.entries, m.entries, 3 * sizeof(*d.entries)) == 0);
	stg_manifest_done(&d);
	check_reencode("manifest-v4-cdc.bin");
	check_refused(buf, len);
	/* Checksummed, but wrong: the kind (fixed has formats 1-3, no other
	 * kind exists), bytes 52..63 in an older format. */
	CHECK_EQ(decode_mutated32(buf, len, 52, STG_CHUNKING_FIXED), -EBADMSG);
	CHECK_EQ(decode_mutated32(buf, len, 52, 2), -EBADMSG);
	uint8_t v3[2] = {3, 0};
	CHECK_EQ(decode_mutated(buf, len, 4, v3, 2), -EBADMSG);
	/* Every length and bound rule. */
	for (int rule = 0; rule < NBREAKS; rule++)
		CHECK_EQ(decode_broken(rule), -EBADMSG);
	/* A short chunk at the end is fine, and so are open and part versions. */
	m.flags = STG_MANIFEST_OPEN;
	sample_part(&m, 2, 3);
	m.part->extents[2] = (struct stg_extent){70000, 10};
	len = stg_manifest_encoded_size(&m);
	buf = realloc(buf, len);
	CHECK_EQ(stg_manifest_encode(&m, buf), len);
	CHECK_EQ(stg_get_le16(buf + 4), 4);
	CHECK_EQ(stg_manifest_decode(buf, len, &d), 0);
	CHECK_EQ(d.flags, STG_MANIFEST_OPEN | STG_MANIFEST_PART);
	CHECK(stg_part_equal(d.part, m.part));
	stg_manifest_done(&d);
	stg_manifest_done(&m);

	/* An empty content-defined file has no chunks. */
	struct stg_chunker c;
	stg_chunker_init(&c, STG_CHUNKING_CDC, 1 << 20);
	CHECK_EQ(stg_manifest_init_chunked(&m, 0, &c, 0), 0);
	m.version = 1;
	len = stg_manifest_encode(&m, buf);
	CHECK_EQ(len, 72);
	CHECK_EQ(stg_manifest_decode(buf, len, &d), 0);
	CHECK_EQ(d.nchunks, 0);
	CHECK_EQ(d.chunking, STG_CHUNKING_CDC);
	stg_manifest_done(&d);
	stg_manifest_done(&m);
	free(buf);
}

int main(void)
{
	struct stg_manifest m, d;
	sample(&m);
	size_t len;
	uint8_t *buf = encode_pinned(&m, "manifest-v1.bin", &len);
	CHECK_EQ(len, 64 + 3 * 48 + 8);

	CHECK_EQ(stg_manifest_decode(buf, len, &d), 0);
	CHECK_EQ(d.version, 7);
	CHECK_EQ(d.size, 2 * 65536 + 100);
	CHECK_EQ(d.chunk_size, 65536);
	CHECK_EQ(d.mode, 0640);
	CHECK_EQ(d.mtime_ns, 1795200000123456789LL);
	CHECK_EQ(d.nchunks, 3);
	CHECK(memcmp(d.entries, m.entries, 3 * sizeof(*d.entries)) == 0);
	CHECK_EQ(stg_manifest_stored_bytes(&d), 65536 + 4096);
	CHECK_EQ(stg_manifest_new_chunks(&d), 1);
	stg_manifest_done(&d);
	check_refused(buf, len);

	/* Format 2: an open version (fsync'ed, its writer going on) carries a
	 * flag, pinned by its own golden file; format 1 stays as it was. */
	m.flags = STG_MANIFEST_OPEN;
	CHECK_EQ(stg_manifest_encode(&m, buf), len);
	CHECK(harness_golden("manifest-v2-open.bin", buf, len));
	CHECK_EQ(stg_manifest_peek_flags(buf, len), STG_MANIFEST_OPEN);
	CHECK_EQ(stg_manifest_decode(buf, len, &d), 0);
	CHECK_EQ(d.flags, STG_MANIFEST_OPEN);
	stg_manifest_done(&d);
	CHECK_EQ(accepted_flips(buf, len, 64, 0x10), 0);
	/* Format 1 with a flag, format 2 without one or with an unknown one. */
	for (int k = 0; k < 3; k++) {
		static const uint16_t cases[3][2] = {{1, 1}, {2, 0}, {2, 4}};
		stg_put_le16(buf + 4, cases[k][0]);
		stg_put_le16(buf + 6, cases[k][1]);
		stg_put_le64(buf + len - 8, stg_hash64(buf, len - 8));
		CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	}
	/* A later format: told apart from damage by its intact trailer. */
	stg_put_le16(buf + 4, STG_MANIFEST_FORMAT + 1);
	CHECK_EQ(stg_manifest_peek_flags(buf, len), -EPROTONOSUPPORT);
	stg_put_le64(buf + len - 8, stg_hash64(buf, len - 8));
	CHECK_EQ(stg_manifest_decode(buf, len, &d), -EPROTONOSUPPORT);
	buf[len - 1] ^= 1;
	CHECK_EQ(stg_manifest_decode(buf, len, &d), -EBADMSG);
	m.flags = 0;
	stg_manifest_encode(&m, buf);

	/* Fields that are checksummed correctly but inconsistent are refused too. */
	struct stg_manifest bad;
	sample(&bad);
	bad.entries[1].flags = STG_ENTRY_ZERO | STG_ENTRY_NEW;
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.entries[0].stored_len = 10; /* raw but shorter than its data */
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.entries[2].raw_len = 99;
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.chunk_size = 3000;
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.version = 0;
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.mode = 0100644; /* only permission bits */
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);

	stg_manifest_done(&bad);
	sample(&bad);
	bad.entries[0].offset = 100; /* records are 4 KiB-aligned */
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.entries[2].pack = 0; /* a stored chunk names its pack */
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);
	stg_manifest_done(&bad);
	sample(&bad);
	bad.entries[1].pack = 5; /* a zero chunk has no location */
	stg_manifest_encode(&bad, buf);
	CHECK(stg_manifest_decode(buf, len, &d) == -EBADMSG);

	stg_manifest_done(&bad);

	/* An empty file has no chunks. */
	struct stg_manifest e;
	CHECK_EQ(stg_manifest_init(&e, 0, 1 << 20), 0);
	e.version = 1;
	uint8_t ebuf[128];
	size_t elen = stg_manifest_encode(&e, ebuf);
	CHECK_EQ(elen, 72);
	CHECK_EQ(stg_manifest_decode(ebuf, elen, &d), 0);
	CHECK_EQ(d.nchunks, 0);
	stg_manifest_done(&d);
	stg_manifest_done(&e);
	stg_manifest_done(&m);
	free(buf);

	test_part();
	test_part_merge();
	test_cdc();
	return harness_done();
}
