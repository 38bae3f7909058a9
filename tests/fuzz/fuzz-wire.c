/* SPDX-License-Identifier: MIT */
/* Fuzz target for the wire decoder: any bytes go through the frame header,
 * body, LIST_REPLY walk, manifest and chunk decoders, and the MAC of frames
 * that carry one; whatever decodes must encode back to the same bytes. Built as a libFuzzer target with clang
 * (-fsanitize=fuzzer), and otherwise with its own driver: mutations of the
 * golden frames for a bounded time (what CI runs, under ASan and UBSan). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunk.h"
#include "manifest.h"
#include "wire.h"

static void check_frame(const uint8_t *data, size_t size)
{
	struct stg_wire_header h;
	if (size < STG_WIRE_HEADER_SIZE || stg_wire_header_decode(data, STG_WIRE_MAX_BODY, &h) < 0)
		return;
	size_t len = stg_wire_frame_size(&h);
	if (size < len)
		return;
	const uint8_t *body = data + STG_WIRE_HEADER_SIZE;
	struct stg_msg m;
	if (stg_wire_decode(&h, body, &m) < 0)
		return;
	struct stg_manifest mf;
	switch (m.type) {
	case STG_MSG_LIST_REPLY:
	case STG_MSG_LIST_REPLY_FLAGS: {
		uint32_t off = 0, n = 0;
		struct stg_list_entry e;
		while (stg_wire_list_next(&m.list_reply, &off, &e))
			n++;
		if (n != m.list_reply.count)
			abort();
		break;
	}
	case STG_MSG_PUT_MANIFEST:
		if (stg_manifest_decode(m.put_manifest.manifest, m.put_manifest.manifest_len, &mf) == 0)
			stg_manifest_done(&mf);
		break;
	case STG_MSG_MANIFEST:
		if (stg_manifest_decode(m.manifest.manifest, m.manifest.len, &mf) == 0)
			stg_manifest_done(&mf);
		break;
	case STG_MSG_PUT_CHUNK:
	case STG_MSG_CHUNK: {
		struct stg_chunk_header ch;
		if (m.chunk.len < STG_CHUNK_HEADER_SIZE)
			abort();
		/* The header names its own hash and length: decode against them. */
		struct stg_hash want;
		memcpy(want.b, m.chunk.obj + 16, 16);
		uint32_t raw = (uint32_t)m.chunk.obj[8] | (uint32_t)m.chunk.obj[9] << 8 |
			       (uint32_t)m.chunk.obj[10] << 16 | (uint32_t)m.chunk.obj[11] << 24;
		if (stg_chunk_header_decode(m.chunk.obj, m.chunk.len, &want, raw, &ch) == 0 &&
		    ch.raw_len <= (1u << 20)) {
			uint8_t *out = malloc(ch.raw_len ? ch.raw_len : 1);
			if (out) {
				stg_chunk_decode(m.chunk.obj, m.chunk.len, &want, raw, out);
				free(out);
			}
		}
		break;
	}
	default:
		break;
	}
	/* A decoded message is exactly what its encoding says, and a MAC is
	 * the same whether computed for sending or for checking. */
	static const uint8_t key[STG_SHA256_LEN] = {1, 2, 3};
	uint8_t *again = malloc(len);
	if (!again)
		return;
	size_t n = stg_wire_encode(&m, again, len);
	if (h.flags & STG_WIRE_FLAG_MAC) {
		n = stg_wire_seal(again, n, len, key, 5);
		uint8_t mac[STG_WIRE_MAC_SIZE];
		stg_wire_frame_mac(key, 5, data, body, mac);
		if (n != len || memcmp(mac, again + len - sizeof(mac), sizeof(mac)) != 0)
			abort();
		n -= STG_WIRE_MAC_SIZE;
	}
	if (n != len - (h.flags & STG_WIRE_FLAG_MAC ? STG_WIRE_MAC_SIZE : 0) ||
	    memcmp(again, data, n) != 0)
		abort();
	free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A stream of frames, as a connection would carry them. */
	while (size >= STG_WIRE_HEADER_SIZE) {
		check_frame(data, size);
		struct stg_wire_header h;
		if (stg_wire_header_decode(data, STG_WIRE_MAX_BODY, &h) < 0 ||
		    size < stg_wire_frame_size(&h))
			break;
		data += stg_wire_frame_size(&h);
		size -= stg_wire_frame_size(&h);
	}
	return 0;
}

#ifndef STAGEHAND_LIBFUZZER
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void mutate(uint8_t *buf, size_t *len, size_t cap, const uint8_t *seed, size_t seedlen)
{
	int rounds = 1 + (int)(next() % 4);
	for (int i = 0; i < rounds && *len > 0; i++) {
		size_t at = next() % *len;
		switch (next() % 7) {
		case 0: buf[at] ^= (uint8_t)(1u << (next() % 8)); break;
		case 1: buf[at] = (uint8_t)next(); break;
		case 2: *len = at; break; /* truncate */
		case 3: /* a length or count field: small, large or off by one */
			if (at + 4 <= *len) {
				uint32_t v = (uint32_t)(next() % 3 == 0 ? next() : next() % 64);
				memcpy(buf + at, &v, 4);
			}
			break;
		case 4: /* splice a piece of the seed */
			if (seedlen) {
				size_t from = next() % seedlen, n = 1 + next() % 64;
				if (from + n > seedlen)
					n = seedlen - from;
				if (at + n > cap)
					n = cap - at;
				memcpy(buf + at, seed + from, n);
				if (at + n > *len)
					*len = at + n;
			}
			break;
		case 5: buf[at] = (uint8_t)(next() % 2 ? 0 : 0xff); break;
		default: /* insert a byte */
			if (*len < cap) {
				memmove(buf + at + 1, buf + at, *len - at);
				buf[at] = (uint8_t)next();
				(*len)++;
			}
		}
	}
}

int main(int argc, char **argv)
{
	double seconds = 10;
	static uint8_t seed[1 << 16];
	size_t seedlen = 0;
	int nseeds = 0;
	/* The seed files' frames, one after the other. */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
			seconds = atof(argv[++i]);
			continue;
		}
		FILE *f = fopen(argv[i], "rb");
		if (!f) {
			perror(argv[i]);
			return 1;
		}
		seedlen += fread(seed + seedlen, 1, sizeof(seed) - seedlen, f);
		fclose(f);
		nseeds++;
	}
	if (nseeds == 0) {
		fprintf(stderr, "usage: fuzz-wire [--seconds S] SEED_FILE...\n");
		return 2;
	}
	/* The seed as a whole, then each frame alone. */
	LLVMFuzzerTestOneInput(seed, seedlen);
	size_t starts[64], nstarts = 0, off = 0;
	while (off + STG_WIRE_HEADER_SIZE <= seedlen && nstarts < 64) {
		struct stg_wire_header h;
		if (stg_wire_header_decode(seed + off, STG_WIRE_MAX_BODY, &h) < 0)
			break;
		starts[nstarts++] = off;
		off += stg_wire_frame_size(&h);
	}
	if (nstarts == 0) {
		fprintf(stderr, "fuzz-wire: the seed files hold no frame\n");
		return 1;
	}
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	static uint8_t buf[1 << 16];
	unsigned long runs = 0;
	for (;;) {
		size_t k = next() % nstarts;
		size_t end = k + 1 < nstarts ? starts[k + 1] : off;
		size_t len = end - starts[k];
		/* Sometimes a few frames in a row. */
		if (next() % 4 == 0)
			len = off - starts[k];
		memcpy(buf, seed + starts[k], len);
		mutate(buf, &len, sizeof(buf), seed, seedlen);
		LLVMFuzzerTestOneInput(buf, len);
		runs++;
		if (runs % 1024 == 0) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 >=
			    seconds)
				break;
		}
	}
	printf("fuzz-wire: %lu inputs in %.0f s, no failure\n", runs, seconds);
	return 0;
}
#endif
