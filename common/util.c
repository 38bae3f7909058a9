/* SPDX-License-Identifier: MIT */
/* Small helpers: full reads and writes, paths, atomic small files. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void (*stg_fd_keep_hook)(int *fd);
void (*stg_fd_drop_hook)(int fd);

int stg_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int stg_pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = pwrite(fd, p, len, off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		off += n;
		len -= (size_t)n;
	}
	return 0;
}

int stg_pread_all(int fd, void *buf, size_t len, off_t off)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = pread(fd, p, len, off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENODATA;
		p += n;
		off += n;
		len -= (size_t)n;
	}
	return 0;
}

int stg_path_normalize(const char *in, char *out, size_t outlen)
{
	if (!in || in[0] != '/')
		return -EINVAL;
	if (outlen < 2)
		return -ENAMETOOLONG;
	size_t o = 0;
	const char *p = in;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = p;
		while (*e && *e != '/')
			e++;
		size_t n = (size_t)(e - p);
		if (n == 1 && p[0] == '.') {
			/* nothing */
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--; /* drop the slash too */
		} else {
			if (o + 1 + n + 1 > outlen)
				return -ENAMETOOLONG;
			out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p = e;
	}
	if (o == 0)
		out[o++] = '/';
	out[o] = '\0';
	return 0;
}

bool stg_path_valid(const char *s, size_t len)
{
	if (len == 0 || s[0] != '/')
		return false;
	if (len == 1)
		return true;
	if (s[len - 1] == '/')
		return false;
	size_t start = 1;
	for (size_t i = 1; i <= len; i++) {
		if (i < len && s[i] == '\0')
			return false;
		if (i < len && s[i] != '/')
			continue;
		size_t n = i - start;
		if (n == 0 || (n == 1 && s[start] == '.') ||
		    (n == 2 && s[start] == '.' && s[start + 1] == '.'))
			return false;
		start = i + 1;
	}
	return true;
}

int stg_path_join(char *out, size_t outlen, const char *dir, const char *name)
{
	size_t dl = strlen(dir);
	while (dl > 1 && dir[dl - 1] == '/')
		dl--;
	while (*name == '/')
		name++;
	int n = snprintf(out, outlen, "%.*s%s%s", (int)dl, dir,
			 (dl == 1 && dir[0] == '/') ? "" : "/", name);
	if (n < 0 || (size_t)n >= outlen)
		return -ENAMETOOLONG;
	return 0;
}

int stg_mkdir_p(const char *dir, mode_t mode)
{
	char buf[PATH_MAX];
	size_t len = strlen(dir);
	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, dir, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char c = buf[i];
		buf[i] = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		buf[i] = c;
	}
	struct stat st;
	if (stat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	return 0;
}

int stg_flock(int fd, int op)
{
	while (flock(fd, op) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

int stg_fsync_dir(int dirfd, const char *path)
{
	int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return r;
}

int stg_write_file_atomic(int dirfd, const char *name, const void *data, size_t len,
			  enum stg_write_mode mode)
{
	/* The temporary name is unpredictable, so that nobody who may write to
	 * the directory can block us by planting it. (Cleanups find leftovers
	 * by the ".tmp." that follows the name.) */
	char tmp[PATH_MAX];
	int fd = -1;
	for (int tries = 0; fd < 0 && tries < 16; tries++) {
		uint64_t rnd;
		if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
			rnd = (uint64_t)stg_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)tries;
		int n = snprintf(tmp, sizeof(tmp), "%s.tmp.%016llx", name, (unsigned long long)rnd);
		if (n < 0 || (size_t)n >= sizeof(tmp))
			return -ENAMETOOLONG;
		fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd < 0 && errno != EEXIST)
			return -errno;
	}
	if (fd < 0)
		return -EEXIST;
	int r = stg_write_all(fd, data, len);
	if (r == 0 && mode == STG_WRITE_SYNCED && fsync(fd) < 0)
		r = -errno;
	/* Written back and waited for: the blocks allocated and the size set
	 * in the journal before the rename is (no disk flush: the journal's
	 * next commit makes both durable together). */
	if (r == 0 && mode == STG_WRITE_ORDERED &&
	    sync_file_range(fd, 0, 0,
			    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
				    SYNC_FILE_RANGE_WAIT_AFTER) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(dirfd, tmp, 0);
	return r;
}

#define FORMAT_FILE "FORMAT"

int stg_format_read(int dirfd, const char *kind, unsigned *ret_version)
{
	uint8_t *data;
	size_t len;
	int r = stg_read_file(dirfd, FORMAT_FILE, 64, &data, &len);
	if (r == -EFBIG || r == -EBADMSG)
		return -EPROTO;
	if (r < 0)
		return r;
	size_t k = strlen(kind);
	unsigned v = 0;
	size_t i = k + 1;
	bool ok = len > k + 2 && memcmp(data, kind, k) == 0 && data[k] == ' ' &&
		  data[len - 1] == '\n' && data[i] >= '1' && data[i] <= '9';
	for (; ok && i < len - 1; i++) {
		ok = data[i] >= '0' && data[i] <= '9' && v < 100000;
		v = v * 10 + (unsigned)(data[i] - '0');
	}
	free(data);
	if (!ok)
		return -EPROTO;
	*ret_version = v;
	return 0;
}

int stg_format_write(int dirfd, const char *kind, unsigned version)
{
	char text[64];
	int n = snprintf(text, sizeof(text), "%s %u\n", kind, version);
	int r = stg_write_file_atomic(dirfd, FORMAT_FILE, text, (size_t)n, STG_WRITE_SYNCED);
	if (r == 0 && fsync(dirfd) < 0)
		r = -errno;
	return r;
}

int stg_read_fd(int fd, size_t max, uint8_t **ret_data, size_t *ret_len)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EBADMSG;
	if ((uint64_t)st.st_size > max)
		return -EFBIG;
	uint8_t *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	int r = stg_pread_all(fd, buf, (size_t)st.st_size, 0);
	if (r < 0) {
		free(buf);
		return r;
	}
	*ret_data = buf;
	*ret_len = (size_t)st.st_size;
	return 0;
}

int stg_read_file(int dirfd, const char *name, size_t max, uint8_t **ret_data, size_t *ret_len)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = stg_read_fd(fd, max, ret_data, ret_len);
	close(fd);
	return r;
}

int stg_grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t most = SIZE_MAX / elem;
	if (need > most) {
		errno = ENOMEM; /* what realloc would say: callers in the shim read it */
		return -ENOMEM;
	}
	/* Doubling keeps a run of appends linear in time. */
	size_t n = *cap > most / 2 ? most : *cap * 2;
	if (n < need)
		n = need;
	if (n < 16 && most >= 16)
		n = 16;
	void *np = realloc(*p, n * elem);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = n;
	return 0;
}

int64_t stg_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t stg_monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

DIR *stg_opendir_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	DIR *d = fdopendir(fd);
	if (!d) {
		int saved = errno;
		close(fd);
		errno = saved;
	}
	return d;
}

int stg_parse_hex_name(const char *name, const char *suffix, uint64_t *ret)
{
	if (strlen(name) != 16 + strlen(suffix) || strcmp(name + 16, suffix) != 0)
		return -EINVAL;
	uint64_t v = 0;
	for (int i = 0; i < 16; i++) {
		char c = name[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (d < 0)
			return -EINVAL;
		v = v << 4 | (uint64_t)d;
	}
	if (v == 0)
		return -EINVAL;
	*ret = v;
	return 0;
}
