/* SPDX-License-Identifier: MIT */
/* Small helpers: little-endian codecs, full reads and writes, paths. */
#pragma once

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

static inline void stg_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void stg_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void stg_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t stg_get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t stg_get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
static inline uint64_t stg_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* Are the n bytes at p all zero? (Reserved fields, padding.) */
static inline bool stg_all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Full-length I/O that retries on EINTR and short transfers. Return 0 or -errno;
 * a read that meets end of file early returns -ENODATA. */
int stg_write_all(int fd, const void *buf, size_t len);
int stg_pwrite_all(int fd, const void *buf, size_t len, off_t off);
int stg_pread_all(int fd, void *buf, size_t len, off_t off);

/* Lexically normalizes an absolute path: no "//", "/./" or "/../", no trailing
 * slash. Returns 0, -EINVAL (not absolute) or -ENAMETOOLONG. */
int stg_path_normalize(const char *in, char *out, size_t outlen);

/* Is s (len bytes) what stg_path_normalize makes: absolute, no empty, "."
 * or ".." component, no trailing slash, no NUL byte? Every path read from
 * a cache, a store or the wire is checked with this. */
bool stg_path_valid(const char *s, size_t len);

/* Joins dir and name into out with one slash; -ENAMETOOLONG if it does not fit. */
int stg_path_join(char *out, size_t outlen, const char *dir, const char *name);

/* Creates dir and its missing parents with the given mode. Returns 0 or -errno. */
int stg_mkdir_p(const char *dir, mode_t mode);

/* flock(fd, op), retried when a signal interrupts it. Returns 0 or -errno
 * (-EWOULDBLOCK with LOCK_NB when another holds it). */
int stg_flock(int fd, int op);

/* fsync()s the directory at path (relative to dirfd). Returns 0 or -errno. */
int stg_fsync_dir(int dirfd, const char *path);

/* How far stg_write_file_atomic takes the data before its rename. */
enum stg_write_mode {
	/* Nothing waited for: after a power cut the new name may be there,
	 * empty (for files that are rewritten whole when wrong). */
	STG_WRITE_CACHED,
	/* The data written to the disk and waited for, without a flush: on a
	 * journaling file system (ext4, XFS) the rename reaches the disk after
	 * it, so a power cut leaves the old content or the new, whole, and such
	 * files in the order they were written (tests/crash/). */
	STG_WRITE_ORDERED,
	/* fsync'ed: durable once the caller fsyncs the directory. */
	STG_WRITE_SYNCED,
};

/* Writes data to dirfd/name atomically: a temporary file of an unpredictable
 * name (name.tmp.<random>), written as mode says, renamed. Returns 0 or
 * -errno. */
int stg_write_file_atomic(int dirfd, const char *name, const void *data, size_t len,
			  enum stg_write_mode mode);

/* Reads dirfd/name whole into a malloc'ed buffer, refusing files over max bytes
 * (-EFBIG). Returns 0 or -errno. */
int stg_read_file(int dirfd, const char *name, size_t max, uint8_t **ret_data, size_t *ret_len);

/* Reads the regular file open on fd whole, as stg_read_file (-EBADMSG for
 * another kind of file). */
int stg_read_fd(int fd, size_t max, uint8_t **ret_data, size_t *ret_len);

/* A directory's FORMAT file: "<kind> <version>\n" (the cache's, a server
 * store's). Reads the version: 0, -ENOENT, -EPROTO when the file says
 * something else, or -errno. */
int stg_format_read(int dirfd, const char *kind, unsigned *ret_version);

/* Writes it, durably (the directory fsync'ed too). Returns 0 or -errno. */
int stg_format_write(int dirfd, const char *kind, unsigned version);

/* Opens dirfd/name (name "." for dirfd itself) for readdir, on a descriptor
 * of its own. Returns the stream, or NULL with errno set. */
DIR *stg_opendir_at(int dirfd, const char *name);

/* Parses "<16 lowercase hex digits><suffix>" (pack and segment file names)
 * into a non-zero id. Returns 0 or -EINVAL. */
int stg_parse_hex_name(const char *name, const char *suffix, uint64_t *ret);

/* Descriptors the library keeps open across calls (a pack being written, the
 * collection pin) are announced here, so that the shim can keep them out of
 * the application's reach: keep moves *fd and remembers where it is, drop
 * forgets fd before it is closed. Both are optional. */
extern void (*stg_fd_keep_hook)(int *fd);
extern void (*stg_fd_drop_hook)(int fd);

static inline void stg_fd_keep(int *fd)
{
	if (stg_fd_keep_hook && *fd >= 0)
		stg_fd_keep_hook(fd);
}

static inline void stg_fd_drop(int fd)
{
	if (stg_fd_drop_hook && fd >= 0)
		stg_fd_drop_hook(fd);
}

/* Makes room for need elements of elem bytes in the array *p, whose capacity
 * is *cap elements. When need is more, the array is reallocated to twice its
 * capacity, or to need if that is more, and to 16 elements at the least.
 * Returns 0 or -ENOMEM (also when need * elem would overflow); on failure *p
 * and *cap are unchanged and errno is ENOMEM, as after a failed realloc. On
 * success errno is left as realloc leaves it. */
int stg_grow(void **p, size_t *cap, size_t need, size_t elem);

/* stg_grow for an array variable and its size_t capacity:
 * if (STG_GROW(v, cap, n + 1) < 0) ... */
#define STG_GROW(arr, cap, need) stg_grow((void **)&(arr), &(cap), (need), sizeof(*(arr)))

/* Nanoseconds of CLOCK_REALTIME. */
int64_t stg_now_ns(void);

/* Milliseconds of a clock that never jumps: for deadlines. */
int64_t stg_monotonic_ms(void);
