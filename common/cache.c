/* SPDX-License-Identifier: MIT */
/* The node-local cache directory and its content-addressed chunk objects. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define FORMAT_FILE "FORMAT"
#define FORMAT_TEXT "stagehand-cache 1\n"

static int open_subdir(int dirfd, const char *name)
{
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int check_format(int dirfd)
{
	uint8_t *data;
	size_t len;
	int r = stg_read_file(dirfd, FORMAT_FILE, 4096, &data, &len);
	if (r == -ENOENT)
		return stg_write_file_atomic(dirfd, FORMAT_FILE, FORMAT_TEXT, strlen(FORMAT_TEXT),
					     true);
	if (r < 0)
		return r;
	bool ok = len == strlen(FORMAT_TEXT) && memcmp(data, FORMAT_TEXT, len) == 0;
	free(data);
	return ok ? 0 : -EPROTO;
}

static uint64_t count_usage(struct stg_cache *c)
{
	uint64_t total = 0;
	int fd = openat(c->chunks_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		int sfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		DIR *s = sfd >= 0 ? fdopendir(sfd) : NULL;
		if (!s) {
			if (sfd >= 0)
				close(sfd);
			continue;
		}
		struct dirent *e;
		struct stat st;
		while ((e = readdir(s)))
			if (e->d_name[0] != '.' && fstatat(dirfd(s), e->d_name, &st, 0) == 0)
				total += (uint64_t)st.st_size;
		closedir(s);
	}
	closedir(d);
	return total;
}

int stg_cache_open(const char *dir, struct stg_cache **ret_cache)
{
	int r = stg_mkdir_p(dir, 0700);
	if (r < 0)
		return r;
	struct stg_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->chunks_fd = c->files_fd = c->tmp_fd = c->usage_fd = -1;
	c->dir = strdup(dir);
	c->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!c->dir || c->dirfd < 0) {
		r = c->dir ? -errno : -ENOMEM;
		goto out_free;
	}
	/* Writable? The shim must know now, not at the first close(). */
	if (faccessat(c->dirfd, ".", W_OK | X_OK, AT_EACCESS) < 0) {
		r = -errno;
		goto out_free;
	}
	r = check_format(c->dirfd);
	if (r < 0)
		goto out_free;
	if ((r = c->chunks_fd = open_subdir(c->dirfd, "chunks")) < 0 ||
	    (r = c->files_fd = open_subdir(c->dirfd, "files")) < 0 ||
	    (r = c->tmp_fd = open_subdir(c->dirfd, "tmp")) < 0)
		goto out_free;
	c->usage_fd = openat(c->dirfd, "usage", O_RDWR | O_CLOEXEC);
	if (c->usage_fd < 0 && errno == ENOENT) {
		/* A cache from before accounting, or a fresh one: count once. */
		c->usage_fd = openat(c->dirfd, "usage", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (c->usage_fd >= 0)
			stg_cache_set_usage(c, count_usage(c));
	}
	if (c->usage_fd < 0) {
		r = -errno;
		goto out_free;
	}
	*ret_cache = c;
	return 0;
out_free:
	stg_cache_free(c);
	return r;
}

void stg_cache_free(struct stg_cache *c)
{
	if (!c)
		return;
	int fds[] = {c->dirfd, c->chunks_fd, c->files_fd, c->tmp_fd, c->usage_fd};
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(c->dir);
	free(c);
}

void stg_cache_chunk_relpath(const struct stg_hash *h, char out[64])
{
	char hex[STG_HASH_HEX_LEN + 1];
	stg_hash_hex(h, hex);
	snprintf(out, 64, "chunks/%.2s/%s", hex, hex);
}

static void object_name(const struct stg_hash *h, char out[64])
{
	char hex[STG_HASH_HEX_LEN + 1];
	stg_hash_hex(h, hex);
	snprintf(out, 64, "%.2s/%s", hex, hex);
}

int stg_cache_chunk_stat(struct stg_cache *c, const struct stg_hash *h, uint32_t raw_len,
			 struct stg_chunk_header *ret_header)
{
	char name[64];
	object_name(h, name);
	int fd = openat(c->chunks_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	uint8_t hdr[STG_CHUNK_HEADER_SIZE];
	struct stat st;
	struct stg_chunk_header ch;
	int r = stg_pread_all(fd, hdr, sizeof(hdr), 0);
	if (r == 0 && fstat(fd, &st) < 0)
		r = -errno;
	close(fd);
	if (r == -ENODATA)
		return 0;
	if (r < 0)
		return r;
	if (stg_chunk_header_decode(hdr, sizeof(hdr), h, raw_len, &ch) < 0 ||
	    (uint64_t)st.st_size != STG_CHUNK_HEADER_SIZE + (uint64_t)ch.stored_len)
		return 0; /* damaged: the caller stores a good copy over it */
	if (ret_header)
		*ret_header = ch;
	return 1;
}

int stg_cache_chunk_put(struct stg_cache *c, const struct stg_hash *h, const uint8_t *head,
			size_t headlen, const uint8_t *body, size_t bodylen)
{
	static unsigned counter;
	char name[64], tmp[96];
	object_name(h, name);
	snprintf(tmp, sizeof(tmp), "%.2s/.tmp.%d.%u", name, (int)getpid(),
		 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
	int fd = openat(c->chunks_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 && errno == ENOENT) {
		char sub[3] = {name[0], name[1], '\0'};
		if (mkdirat(c->chunks_fd, sub, 0700) < 0 && errno != EEXIST)
			return -errno;
		fd = openat(c->chunks_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		return -errno;
	int r = stg_cache_reserve(c, headlen + bodylen);
	if (r == 0)
		r = stg_write_all(fd, head, headlen);
	if (r == 0 && body)
		r = stg_write_all(fd, body, bodylen);
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && renameat(c->chunks_fd, tmp, c->chunks_fd, name) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(c->chunks_fd, tmp, 0);
	return r;
}

struct hashing_put {
	int fd;
};

static int write_piece(void *arg, const void *piece, size_t n, size_t off)
{
	struct hashing_put *hp = arg;
	return stg_pwrite_all(hp->fd, piece, n, (off_t)(STG_CHUNK_HEADER_SIZE + off));
}

int stg_cache_chunk_put_hashing(struct stg_cache *c, const void *data, size_t len,
				struct stg_hash *ret_hash, bool *ret_stored)
{
	int r = stg_cache_reserve(c, STG_CHUNK_HEADER_SIZE + len);
	if (r < 0)
		return r;
	struct hashing_put hp;
	hp.fd = openat(c->chunks_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (hp.fd < 0) {
		/* No O_TMPFILE: hash first, then the ordinary way. */
		stg_cache_reserve_undo(c, STG_CHUNK_HEADER_SIZE + len);
		stg_hash_compute(data, len, ret_hash);
		r = stg_cache_chunk_stat(c, ret_hash, (uint32_t)len, NULL);
		if (r != 0) {
			*ret_stored = false;
			return r < 0 ? r : 0;
		}
		uint8_t hdr[STG_CHUNK_HEADER_SIZE];
		stg_chunk_header_encode(hdr, STG_CHUNK_RAW, (uint32_t)len, (uint32_t)len, ret_hash);
		*ret_stored = true;
		return stg_cache_chunk_put(c, ret_hash, hdr, sizeof(hdr), data, len);
	}
	struct stg_hash h;
	r = stg_hash_stream(data, len, &h, write_piece, &hp);
	uint8_t hdr[STG_CHUNK_HEADER_SIZE];
	if (r == 0) {
		stg_chunk_header_encode(hdr, STG_CHUNK_RAW, (uint32_t)len, (uint32_t)len, &h);
		r = stg_pwrite_all(hp.fd, hdr, sizeof(hdr), 0);
	}
	bool stored = false;
	if (r == 0) {
		char name[64], link[64];
		object_name(&h, name);
		snprintf(link, sizeof(link), "/proc/self/fd/%d", hp.fd);
		if (linkat(AT_FDCWD, link, c->chunks_fd, name, AT_SYMLINK_FOLLOW) == 0) {
			stored = true;
		} else if (errno == ENOENT) {
			char sub[3] = {name[0], name[1], '\0'};
			if (mkdirat(c->chunks_fd, sub, 0700) < 0 && errno != EEXIST)
				r = -errno;
			else if (linkat(AT_FDCWD, link, c->chunks_fd, name, AT_SYMLINK_FOLLOW) == 0)
				stored = true;
			else if (errno != EEXIST)
				r = -errno;
		} else if (errno != EEXIST) {
			r = -errno;
		}
		/* EEXIST: someone stored the same bytes first; the unnamed copy goes. */
		if (r == 0 && !stored && stg_cache_chunk_stat(c, &h, (uint32_t)len, NULL) != 1) {
			/* What is there under that name is damaged: replace it. */
			char tmp[96];
			snprintf(tmp, sizeof(tmp), "%.2s/.tmp.%d.link", name, (int)getpid());
			unlinkat(c->chunks_fd, tmp, 0);
			if (linkat(AT_FDCWD, link, c->chunks_fd, tmp, AT_SYMLINK_FOLLOW) == 0 &&
			    renameat(c->chunks_fd, tmp, c->chunks_fd, name) == 0)
				stored = true;
			else
				r = -errno;
		}
	}
	close(hp.fd);
	if (!stored)
		stg_cache_reserve_undo(c, STG_CHUNK_HEADER_SIZE + len);
	if (r == 0) {
		*ret_hash = h;
		*ret_stored = stored;
	}
	return r;
}

static int lock_usage(struct stg_cache *c, uint64_t *ret)
{
	while (flock(c->usage_fd, LOCK_EX) < 0)
		if (errno != EINTR)
			return -errno;
	uint8_t b[8] = {0};
	ssize_t n = pread(c->usage_fd, b, sizeof(b), 0);
	*ret = n == (ssize_t)sizeof(b) ? stg_get_le64(b) : 0;
	return 0;
}

static int store_usage(struct stg_cache *c, uint64_t v)
{
	uint8_t b[8];
	stg_put_le64(b, v);
	int r = pwrite(c->usage_fd, b, sizeof(b), 0) == (ssize_t)sizeof(b) ? 0 : -EIO;
	flock(c->usage_fd, LOCK_UN);
	return r;
}

int stg_cache_reserve(struct stg_cache *c, uint64_t bytes)
{
	uint64_t used;
	int r = lock_usage(c, &used);
	if (r < 0)
		return r;
	if (c->capacity && used + bytes > c->capacity) {
		flock(c->usage_fd, LOCK_UN);
		return -ENOSPC;
	}
	return store_usage(c, used + bytes);
}

void stg_cache_reserve_undo(struct stg_cache *c, uint64_t bytes)
{
	uint64_t used;
	if (lock_usage(c, &used) == 0)
		store_usage(c, used > bytes ? used - bytes : 0);
}

uint64_t stg_cache_usage(struct stg_cache *c)
{
	uint8_t b[8] = {0};
	return pread(c->usage_fd, b, sizeof(b), 0) == (ssize_t)sizeof(b) ? stg_get_le64(b) : 0;
}

int stg_cache_set_usage(struct stg_cache *c, uint64_t bytes)
{
	uint64_t old;
	int r = lock_usage(c, &old);
	return r < 0 ? r : store_usage(c, bytes);
}

int stg_cache_chunk_read(struct stg_cache *c, const struct stg_hash *h, uint32_t raw_len,
			 uint8_t *out, uint8_t *scratch)
{
	char name[64];
	object_name(h, name);
	int fd = openat(c->chunks_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int r = 0;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out_close;
	}
	if ((uint64_t)st.st_size > stg_chunk_bound(raw_len) ||
	    st.st_size < STG_CHUNK_HEADER_SIZE) {
		r = -EBADMSG;
		goto out_close;
	}
	r = stg_pread_all(fd, scratch, (size_t)st.st_size, 0);
	if (r == -ENODATA)
		r = -EBADMSG;
	if (r == 0)
		r = stg_chunk_decode(scratch, (size_t)st.st_size, h, raw_len, out);
out_close:
	close(fd);
	return r;
}

int stg_cache_sync(struct stg_cache *c)
{
	return syncfs(c->dirfd) < 0 ? -errno : 0;
}
