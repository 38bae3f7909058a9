/* SPDX-License-Identifier: MIT */
/* Pending commits (pending.h): the record, making one durable, and packing
 * it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "builder.h"
#include "catalog.h"
#include "hash.h"
#include "log.h"
#include "pending.h"
#include "util.h"

#define MAGIC 0x646e6570u /* "pend" */
#define HEAD 60

int stg_pending_encode(const struct stg_pending *p, uint8_t out[STG_PENDING_MAX])
{
	size_t n = strnlen(p->path, sizeof(p->path));
	if (n == 0 || n >= sizeof(p->path))
		return -ENAMETOOLONG;
	stg_put_le32(out, MAGIC);
	stg_put_le32(out + 4, STG_PENDING_FORMAT);
	stg_put_le64(out + 8, p->size);
	stg_put_le32(out + 16, p->mode);
	stg_put_le32(out + 20, p->open ? STG_PENDING_OPEN : 0);
	stg_put_le64(out + 24, (uint64_t)p->mtime_ns);
	stg_put_le64(out + 32, p->replaces);
	stg_put_le64(out + 40, (uint64_t)p->since_ns);
	stg_put_le64(out + 48, p->base);
	stg_put_le32(out + 56, (uint32_t)n);
	memcpy(out + HEAD, p->path, n);
	stg_put_le64(out + HEAD + n, stg_hash64(out, HEAD + n));
	return (int)(HEAD + n + 8);
}

int stg_pending_decode(const uint8_t *buf, size_t len, struct stg_pending *ret)
{
	if (len < HEAD + 8 || stg_get_le32(buf) != MAGIC || stg_get_le32(buf + 4) != STG_PENDING_FORMAT)
		return -EBADMSG;
	uint32_t n = stg_get_le32(buf + 56);
	if (n == 0 || n >= sizeof(ret->path) || len != HEAD + (size_t)n + 8 ||
	    stg_get_le64(buf + HEAD + n) != stg_hash64(buf, HEAD + n))
		return -EBADMSG;
	memset(ret, 0, sizeof(*ret));
	uint32_t flags = stg_get_le32(buf + 20);
	if (flags & ~STG_PENDING_OPEN)
		return -EBADMSG;
	ret->open = flags & STG_PENDING_OPEN;
	ret->size = stg_get_le64(buf + 8);
	ret->mode = stg_get_le32(buf + 16);
	ret->mtime_ns = (int64_t)stg_get_le64(buf + 24);
	ret->replaces = stg_get_le64(buf + 32);
	ret->since_ns = (int64_t)stg_get_le64(buf + 40);
	ret->base = stg_get_le64(buf + 48);
	memcpy(ret->path, buf + HEAD, n);
	if (ret->mode > 07777 || ret->since_ns < 0 || ret->size > (uint64_t)INT64_MAX ||
	    !stg_path_valid(ret->path, n))
		return -EBADMSG;
	return 0;
}

static void name_of(const char *path, const char *suffix, char out[64])
{
	char id[STG_HASH_HEX_LEN + 1];
	stg_catalog_file_id(path, id);
	snprintf(out, 64, "%s.%s", id, suffix);
}

/* The path's newest version (0: none), what a record is written against. */
static uint64_t newest(struct stg_cache *c, const char *path)
{
	struct stg_file_state state;
	return stg_catalog_state(c, path, &state) == 0 && state.exists ? state.latest : 0;
}

int stg_pending_write(struct stg_cache *c, int shadowfd, const struct stg_pending *p)
{
	/* The packing must not fail for room, which only the close can report
	 * (ENOSPC): the content stored raw must fit under the capacity, and on
	 * the disk beside the shadow. Else the close packs it. */
	struct statvfs vfs;
	if ((c->capacity && stg_cache_usage(c) + p->size > c->capacity) ||
	    fstatvfs(c->tmp_fd, &vfs) < 0 || (uint64_t)vfs.f_bavail * vfs.f_frsize < 2 * p->size)
		return -ENOSPC;
	struct stg_pending rec = *p;
	rec.base = newest(c, p->path);
	uint8_t buf[STG_PENDING_MAX];
	int len = stg_pending_encode(&rec, buf);
	if (len < 0)
		return len;
	char content[64], fresh[64], record[64], link[64];
	name_of(p->path, "content", content);
	name_of(p->path, "content.new", fresh);
	name_of(p->path, "commit", record);
	/* The data first: the record promises it. */
	struct stat mine, named;
	if (fdatasync(shadowfd) < 0 || fstat(shadowfd, &mine) < 0)
		return -errno;
	/* Linked already by an earlier sync of the writing; else linked anew,
	 * replacing at once what a crash may have left. */
	if (fstatat(c->tmp_fd, content, &named, AT_SYMLINK_NOFOLLOW) < 0 ||
	    named.st_dev != mine.st_dev || named.st_ino != mine.st_ino) {
		unlinkat(c->tmp_fd, fresh, 0);
		snprintf(link, sizeof(link), "/proc/self/fd/%d", shadowfd);
		if (linkat(AT_FDCWD, link, c->tmp_fd, fresh, AT_SYMLINK_FOLLOW) < 0)
			return -errno;
		if (renameat(c->tmp_fd, fresh, c->tmp_fd, content) < 0) {
			int r = -errno;
			unlinkat(c->tmp_fd, fresh, 0);
			return r;
		}
	}
	int r = stg_write_file_atomic(c->tmp_fd, record, buf, (size_t)len, STG_WRITE_SYNCED);
	/* Both names durable: the record's rename and the content's link. (A
	 * content left without its record is collected.) */
	if (r == 0 && fsync(c->tmp_fd) < 0)
		r = -errno;
	return r;
}

bool stg_pending_exists(struct stg_cache *c, const char *path)
{
	char record[64], content[64];
	name_of(path, "commit", record);
	name_of(path, "content", content);
	struct stat st;
	return fstatat(c->tmp_fd, record, &st, AT_SYMLINK_NOFOLLOW) == 0 ||
	       fstatat(c->tmp_fd, content, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

bool stg_pending_content_is(struct stg_cache *c, const char *path, int shadowfd)
{
	char content[64];
	name_of(path, "content", content);
	struct stat mine, named;
	return fstat(shadowfd, &mine) == 0 &&
	       fstatat(c->tmp_fd, content, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
	       mine.st_dev == named.st_dev && mine.st_ino == named.st_ino;
}

/* Whether st, the pending commit's file tmp/name of path, is a regular file
 * of this process's user; else says it is ignored. */
static bool ours(const char *path, const char *name, const struct stat *st)
{
	if (S_ISREG(st->st_mode) && st->st_uid == geteuid())
		return true;
	stg_log(STG_LOG_WARN, "the pending commit of '%s': tmp/%s is %s: ignored", path, name,
		S_ISREG(st->st_mode) ? "another user's" : "not a regular file");
	return false;
}

int64_t stg_pending_settle(struct stg_cache *c, const char *path, const struct stg_path_rule *rule)
{
	char content[64], record[64];
	name_of(path, "content", content);
	name_of(path, "commit", record);
	/* Only a record of ours is settled: one that another user could put
	 * here (a cache they may write) would publish their bytes as ours.
	 * Checked and read through one descriptor, so that the name cannot
	 * be swapped between the two. */
	int rfd = openat(c->tmp_fd, record, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat rst = {.st_mode = S_IFLNK};
	if (rfd < 0 && errno == ENOENT) {
		/* A packing killed after it removed the record left the content:
		 * the version is published. (A close links the content before it
		 * writes the record, under the lock the caller holds.) */
		unlinkat(c->tmp_fd, content, 0);
		return 0;
	}
	if (rfd < 0 && errno != ELOOP)
		return -errno;
	if (rfd < 0 || fstat(rfd, &rst) < 0 || !ours(path, record, &rst)) {
		if (rfd >= 0)
			close(rfd);
		return 0;
	}
	uint8_t *buf;
	size_t len;
	int r = stg_read_fd(rfd, STG_PENDING_MAX, &buf, &len);
	close(rfd);
	if (r == -EFBIG)
		r = -EBADMSG;
	if (r < 0)
		return r;
	struct stg_pending p;
	r = stg_pending_decode(buf, len, &p);
	free(buf);
	if (r == 0 && strcmp(p.path, path) != 0)
		r = -EBADMSG;
	if (r < 0) {
		stg_log(STG_LOG_ERROR, "the pending commit of '%s' (tmp/%s) is damaged; left in place", path,
			  record);
		return r;
	}
	int fd = openat(c->tmp_fd, content, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (!p.open && (uint64_t)st.st_size != p.size)) {
		r = fd < 0 && errno != ENOENT ? -errno : -EBADMSG;
		if (fd >= 0)
			close(fd);
		stg_log(STG_LOG_ERROR,
			"the pending commit of '%s': its content tmp/%s is %s; left in place", path,
			content, r == -EBADMSG ? "missing or of the wrong size" : strerror(-r));
		return r;
	}
	if (!ours(path, content, &st)) {
		close(fd);
		return 0;
	}
	/* A sync's, its writing going on: that writing commits it. */
	if (p.open && stg_cache_shadow_held(c, st.st_dev, st.st_ino)) {
		close(fd);
		return 0;
	}
	/* An open one holds what its writers wrote (at least what they synced). */
	uint64_t size = (uint64_t)st.st_size;
	/* Whether a version newer than the record's base was published: its
	 * base may have been re-minted since (the flusher gives a version a new
	 * id when another node's took its first on the servers), and is the
	 * same version under its new id. A sync's record was written against
	 * an open version, a close's against a closed one, but for a close
	 * that followed a sync: then the close that superseded the open base
	 * (its own, if a packing died before it removed the record) passes
	 * for the base re-minted, and the version is published again rather
	 * than lost. Decided under the entry's lock, so that a re-minting is
	 * seen whole. */
	struct stg_file_state state = {0};
	uint64_t base = p.base;
	struct stg_catalog_file f;
	if (stg_catalog_lock(c, path, false, &f) == 0) {
		base = stg_catalog_reminted(f.dirfd, p.base, p.open);
		if (stg_catalog_state(c, path, &state) < 0)
			state.exists = false;
		stg_catalog_unlock(&f);
	}
	bool moved = state.exists && state.latest != base;
	int64_t v = 0;
	/* A sync's, superseded by a version published since: stale. A close's
	 * published already, by a packing that died before it removed the
	 * record. Else published now. */
	if (moved && (p.open || (!state.deleted && state.mtime_ns == p.mtime_ns && state.size == size)))
		v = 0;
	else
		v = stg_commit_fd(c, path, rule, fd, size, p.mode, p.mtime_ns, p.open, p.replaces,
				  NULL, p.since_ns);
	close(fd);
	if (v < 0)
		return v;
	unlinkat(c->tmp_fd, record, 0);
	unlinkat(c->tmp_fd, content, 0);
	return v;
}

void stg_pending_drop(struct stg_cache *c, const char *path)
{
	char content[64], record[64];
	name_of(path, "content", content);
	name_of(path, "commit", record);
	uint8_t *buf;
	size_t len;
	if (stg_read_file(c->tmp_fd, record, STG_PENDING_MAX, &buf, &len) < 0)
		return;
	struct stg_pending p;
	int r = stg_pending_decode(buf, len, &p);
	free(buf);
	/* A close's is a version: only packing removes it. */
	if (r < 0 || !p.open)
		return;
	unlinkat(c->tmp_fd, record, 0);
	unlinkat(c->tmp_fd, content, 0);
}

int stg_pending_foreach(struct stg_cache *c, int (*fn)(void *arg, const char *path, int err),
			void *arg)
{
	DIR *d = stg_opendir_at(c->tmp_fd, ".");
	if (!d)
		return -errno;
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (n != STG_HASH_HEX_LEN + 7 || strcmp(de->d_name + STG_HASH_HEX_LEN, ".commit") != 0)
			continue;
		uint8_t *buf;
		size_t len;
		struct stg_pending p;
		int bad = stg_read_file(c->tmp_fd, de->d_name, STG_PENDING_MAX, &buf, &len);
		if (bad == -ENOENT)
			continue; /* packed meanwhile */
		if (bad == 0) {
			bad = stg_pending_decode(buf, len, &p);
			free(buf);
		}
		char id[STG_HASH_HEX_LEN + 1];
		if (bad == 0) {
			stg_catalog_file_id(p.path, id);
			if (memcmp(id, de->d_name, STG_HASH_HEX_LEN) != 0)
				bad = -EBADMSG;
		}
		r = bad == 0 ? fn(arg, p.path, 0) : fn(arg, de->d_name, bad == -EFBIG ? -EBADMSG : bad);
	}
	closedir(d);
	return r;
}

int stg_pending_lock(struct stg_cache *c, const char *path)
{
	char name[64];
	name_of(path, "open", name);
	/* Read-only: a user who may only read the cache waits all the same. */
	int fd = openat(c->tmp_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	int r = stg_flock(fd, LOCK_EX);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

bool stg_pending_holds_lock(struct stg_cache *c, const char *path, int fd)
{
	char name[64];
	name_of(path, "open", name);
	struct stat mine, named;
	/* A lock taken through another description would refuse this one. */
	return fstat(fd, &mine) == 0 && fstatat(c->tmp_fd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
	       mine.st_dev == named.st_dev && mine.st_ino == named.st_ino &&
	       stg_flock(fd, LOCK_EX | LOCK_NB) == 0;
}
