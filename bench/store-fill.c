/* SPDX-License-Identifier: MIT */
/* store-fill DIR COUNT SIZE: adds chunks to the server store in DIR (the
 * server stopped) until it holds COUNT distinct chunks of SIZE bytes each,
 * stored raw, through the store's own API, as sessions would; prints the
 * count. bench/scale.sh times a server's start over the result. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk.h"
#include "store.h"

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: store-fill DIR COUNT SIZE\n");
		return 2;
	}
	uint64_t count = strtoull(argv[2], NULL, 10);
	size_t size = strtoull(argv[3], NULL, 10);
	if (size < 16 || size > (1u << 20)) {
		fprintf(stderr, "store-fill: SIZE from 16 to 1048576\n");
		return 2;
	}
	struct stg_store *s;
	int r = stg_store_open(argv[1], NULL, &s);
	if (r < 0) {
		fprintf(stderr, "store-fill: cannot open '%s': %s\n", argv[1], strerror(-r));
		return 1;
	}
	struct stg_store_stats st;
	stg_store_stats(s, &st);
	uint8_t *raw = calloc(1, size), *obj = malloc(stg_chunk_bound(size));
	const struct stg_chunk_codec raw_codec = {0};
	/* Chunk i is its number in the first 8 bytes: distinct, and the same
	 * chunks again when the store is filled further. */
	for (uint64_t i = st.chunks; r >= 0 && i < count; i++) {
		memcpy(raw, &i, sizeof(i));
		struct stg_hash h;
		stg_hash_compute(raw, size, &h);
		size_t len = stg_chunk_encode(raw, size, &h, &raw_codec, obj);
		r = stg_store_put(s, obj, len, &h);
	}
	if (r >= 0)
		r = stg_store_sync(s);
	stg_store_stats(s, &st);
	stg_store_free(s);
	free(raw);
	free(obj);
	if (r < 0) {
		fprintf(stderr, "store-fill: %s\n", strerror(-r));
		return 1;
	}
	printf("%" PRIu64 "\n", st.chunks);
	return 0;
}
