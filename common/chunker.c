/* SPDX-License-Identifier: MIT */
/* Where chunks end: fixed multiples, or a gear hash over the last 64 bytes
 * (CDC), so that a cut follows the content when bytes are inserted before it. */
#include "chunker.h"

#include <pthread.h>

#include "policy.h"

static uint64_t gear[256];
static pthread_once_t gear_once = PTHREAD_ONCE_INIT;

/* Fixed pseudo-random values (splitmix64): the cuts must never change. */
static void gear_fill(void)
{
	uint64_t x = 0x5374616765686e64ull;
	for (int i = 0; i < 256; i++) {
		uint64_t z = (x += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		gear[i] = z ^ (z >> 31);
	}
}

void stg_chunker_init(struct stg_chunker *c, enum stg_chunking kind, uint32_t chunk_size)
{
	*c = (struct stg_chunker){.kind = kind, .min = chunk_size, .avg = chunk_size,
				  .max = chunk_size};
	if (kind == STG_CHUNKING_CDC) {
		uint64_t max = (uint64_t)chunk_size * 4;
		c->min = chunk_size / 4;
		c->max = max > STG_CHUNK_MAX ? STG_CHUNK_MAX : (uint32_t)max;
		pthread_once(&gear_once, gear_fill);
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

bool stg_chunker_next(struct stg_chunker *c, const uint8_t *data, size_t len, size_t *used)
{
	size_t room = c->max - c->in_chunk;
	size_t n = len < room ? len : room;
	if (c->kind == STG_CHUNKING_FIXED) {
		if (n == room)
			return cut(c, n, used);
		c->in_chunk += (uint32_t)n;
		*used = n;
		return false;
	}
	/* The hash forgets a byte 64 bytes later, so a cut depends on the last
	 * 64 bytes only. A cut below the hash threshold comes on average
	 * avg - min bytes after the minimum: chunks average about avg. */
	uint64_t h = c->state;
	uint64_t threshold = UINT64_MAX / (c->avg - c->min);
	for (size_t i = 0; i < n; i++) {
		h = (h << 1) + gear[data[i]];
		if (c->in_chunk + i + 1 >= c->min && h < threshold)
			return cut(c, i + 1, used);
	}
	if (n == room)
		return cut(c, n, used);
	c->in_chunk += (uint32_t)n;
	c->state = h;
	*used = n;
	return false;
}
