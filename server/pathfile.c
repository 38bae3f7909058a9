/* SPDX-License-Identifier: MIT */
/* The path index file: header, records, checksum (pathfile.h). */
#include "pathfile.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "util.h"

/* A record: expiry (8), path length (4), the path. */
#define RECORD_FIXED 12
#define CHECKSUM_SIZE 8

int stg_pathfile_encode(uint32_t uid, int64_t dir_mtime_ns, const struct stg_pathfile_entry *v,
			size_t n, uint8_t **ret, size_t *ret_len)
{
	size_t len = STG_PATHFILE_HEADER_SIZE + CHECKSUM_SIZE;
	for (size_t i = 0; i < n; i++) {
		size_t plen = strlen(v[i].path);
		if (!stg_path_valid(v[i].path, plen) || plen >= PATH_MAX || v[i].expiry_ns < 0 ||
		    (i > 0 && strcmp(v[i - 1].path, v[i].path) >= 0))
			return -EINVAL;
		len += RECORD_FIXED + plen;
	}
	uint8_t *b = malloc(len), *p = b + STG_PATHFILE_HEADER_SIZE;
	if (!b)
		return -ENOMEM;
	memcpy(b, STG_PATHFILE_MAGIC, 4);
	stg_put_le32(b + 4, STG_PATHFILE_FORMAT);
	stg_put_le32(b + 8, uid);
	stg_put_le32(b + 12, 0); /* flags */
	stg_put_le64(b + 16, n);
	stg_put_le64(b + 24, (uint64_t)dir_mtime_ns);
	for (size_t i = 0; i < n; i++) {
		size_t plen = strlen(v[i].path);
		stg_put_le64(p, (uint64_t)v[i].expiry_ns);
		stg_put_le32(p + 8, (uint32_t)plen);
		memcpy(p + RECORD_FIXED, v[i].path, plen);
		p += RECORD_FIXED + plen;
	}
	stg_put_le64(p, stg_hash64(b, (size_t)(p - b)));
	*ret = b;
	*ret_len = len;
	return 0;
}

int stg_pathfile_decode(const uint8_t *buf, size_t len, uint32_t uid, int64_t *ret_dir_mtime_ns,
			struct stg_pathfile_entry **ret, size_t *ret_n)
{
	if (len < STG_PATHFILE_HEADER_SIZE + CHECKSUM_SIZE || memcmp(buf, STG_PATHFILE_MAGIC, 4))
		return -EBADMSG;
	uint32_t format = stg_get_le32(buf + 4);
	if (format > STG_PATHFILE_FORMAT)
		return -EPROTONOSUPPORT;
	size_t body = len - CHECKSUM_SIZE;
	if (format == 0 || stg_get_le32(buf + 8) != uid || stg_get_le32(buf + 12) != 0 ||
	    stg_get_le64(buf + body) != stg_hash64(buf, body))
		return -EBADMSG;
	uint64_t n = stg_get_le64(buf + 16);
	int64_t mtime = (int64_t)stg_get_le64(buf + 24);
	if (n > (body - STG_PATHFILE_HEADER_SIZE) / RECORD_FIXED || mtime < 0)
		return -EBADMSG;
	/* The entries, then the paths with their NULs: less than the file. */
	struct stg_pathfile_entry *v = malloc(n * sizeof(*v) + len);
	if (!v)
		return -ENOMEM;
	char *s = (char *)(v + n);
	size_t at = STG_PATHFILE_HEADER_SIZE;
	for (uint64_t i = 0; i < n; i++) {
		if (body - at < RECORD_FIXED)
			goto bad;
		int64_t expiry = (int64_t)stg_get_le64(buf + at);
		uint32_t plen = stg_get_le32(buf + at + 8);
		at += RECORD_FIXED;
		if (expiry < 0 || plen >= PATH_MAX || body - at < plen ||
		    !stg_path_valid((const char *)buf + at, plen))
			goto bad;
		memcpy(s, buf + at, plen);
		s[plen] = '\0';
		if (i > 0 && strcmp(v[i - 1].path, s) >= 0)
			goto bad;
		v[i] = (struct stg_pathfile_entry){s, expiry};
		s += plen + 1;
		at += plen;
	}
	if (at != body)
		goto bad;
	*ret_dir_mtime_ns = mtime;
	*ret = v;
	*ret_n = (size_t)n;
	return 0;
bad:
	free(v);
	return -EBADMSG;
}
