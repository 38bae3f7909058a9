/* SPDX-License-Identifier: MIT */
/* Rebuilds a version's bytes from its manifest, verifying every chunk. */
#include "materialize.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "chunk.h"
#include "pack.h"
#include "util.h"

int stg_materialize(struct stg_cache *c, const struct stg_manifest *m, int fd,
		    stg_progress_fn progress, void *arg, struct stg_materialize_error *err)
{
	/* Aligned, so that an O_DIRECT destination takes it as it is. */
	uint8_t *raw = NULL;
	if (posix_memalign((void **)&raw, STG_PACK_ALIGN, m->chunk_max))
		raw = NULL;
	uint8_t *scratch = malloc(stg_chunk_bound(m->chunk_max));
	int flags = fcntl(fd, F_GETFL);
	bool direct = flags >= 0 && (flags & O_DIRECT);
	int r = 0;
	struct stg_pack_reader rd;
	stg_pack_reader_init(&rd, c);
	if (!raw || !scratch) {
		r = -ENOMEM;
		goto out_free;
	}
	if (ftruncate(fd, 0) < 0) {
		r = -errno;
		goto out_free;
	}
	uint64_t off = 0;
	for (uint32_t i = 0; i < m->nchunks; i++) {
		const struct stg_manifest_entry *e = &m->entries[i];
		if (!(e->flags & STG_ENTRY_ZERO)) {
			r = stg_pack_reader_read(&rd, e, raw, scratch);
			if (r < 0) {
				if (err) {
					err->chunk = i;
					err->entry = *e;
					err->error = r;
				}
				goto out_free;
			}
			if (direct && e->raw_len % STG_PACK_ALIGN) {
				/* A chunk of unaligned length (the last one, any
				 * content-defined one) cannot go direct, nor any after it. */
				fcntl(fd, F_SETFL, flags & ~O_DIRECT);
				direct = false;
			}
			r = stg_pwrite_all(fd, raw, e->raw_len, (off_t)off);
			if (r < 0)
				goto out_free;
		}
		off += e->raw_len;
		if (progress)
			progress(arg, off, m->size);
	}
	if (ftruncate(fd, (off_t)m->size) < 0)
		r = -errno;
out_free:
	stg_pack_reader_done(&rd);
	free(raw);
	free(scratch);
	return r;
}
