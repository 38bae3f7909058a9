/* SPDX-License-Identifier: MIT */
/* A user's path index on disk (docs/STORE.md, "Path index files"): written
 * by a server that stops cleanly, files/<uid>.paths, and read back by its
 * next start instead of every entry's path file; the paths sorted, each
 * with the expiry of its pending deletion. Format 1, little-endian; every
 * field is checked when read. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define STG_PATHFILE_MAGIC "SHPX"
#define STG_PATHFILE_FORMAT 1
#define STG_PATHFILE_HEADER_SIZE 32

struct stg_pathfile_entry {
	const char *path;
	int64_t expiry_ns; /* of its pending deletion; 0: none */
};

/* The index of uid, whose directory's mtime was dir_mtime_ns, from v[0..n)
 * (paths sorted, strictly ascending) into a malloc'ed buffer. Returns 0,
 * -EINVAL (unsorted, or an invalid path) or -ENOMEM. */
int stg_pathfile_encode(uint32_t uid, int64_t dir_mtime_ns, const struct stg_pathfile_entry *v,
			size_t n, uint8_t **ret, size_t *ret_len);

/* Validates and decodes the index of uid: *ret is one malloc'ed block of
 * *ret_n entries followed by their paths (one free()). Returns 0,
 * -EPROTONOSUPPORT (a newer format), -EBADMSG or -ENOMEM. */
int stg_pathfile_decode(const uint8_t *buf, size_t len, uint32_t uid, int64_t *ret_dir_mtime_ns,
			struct stg_pathfile_entry **ret, size_t *ret_n);
