/* SPDX-License-Identifier: MIT */
/* The catalog: per captured path, its versions (manifests) and visibility. */
#include "catalog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "policy.h"
#include "queue.h"
#include "tombstone.h"
#include "util.h"
#include "version.h"

#define PATH_FILE "path"
#define SEEN_FILE "seen"
/* Empty, while the path is deleted now: what a stagehand of before
 * tombstones reads as "every version deleted", so it stays only while that
 * is true. (40 bytes: a tombstone, as the release that brought them wrote
 * it there; read as one.) */
#define DELETED_FILE "deleted"
/* Which versions were deleted or renamed away, and when (tombstone.h). */
#define TOMBSTONE_FILE "tombstone"
#define MANIFEST_MAX (64u << 20)

void stg_catalog_file_id(const char *path, char out[STG_HASH_HEX_LEN + 1])
{
	struct stg_hash h;
	stg_hash_compute(path, strlen(path), &h);
	stg_hash_hex(&h, out);
}

void stg_catalog_manifest_name(uint64_t version, char out[40])
{
	snprintf(out, 40, "v%020" PRIu64 ".mf", version);
}

static bool parse_manifest_name(const char *name, uint64_t *ret)
{
	if (name[0] != 'v' || strlen(name) != 24 || strcmp(name + 21, ".mf") != 0)
		return false;
	uint64_t v = 0;
	for (int i = 1; i < 21; i++) {
		if (name[i] < '0' || name[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(name[i] - '0');
	}
	*ret = v;
	return v > 0;
}

int stg_catalog_lock(struct stg_cache *c, const char *path, bool create,
		     struct stg_catalog_file *ret)
{
	char id[STG_HASH_HEX_LEN + 1];
	stg_catalog_file_id(path, id);
	int fd = openat(c->files_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && create) {
		if (mkdirat(c->files_fd, id, 0700) < 0 && errno != EEXIST)
			return -errno;
		fd = openat(c->files_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (fd < 0)
		return -errno;
	int r = stg_flock(fd, LOCK_EX);
	if (r < 0) {
		close(fd);
		return r;
	}
	bool created = false;
	char held[PATH_MAX];
	int pr = create ? stg_catalog_read_path(fd, held, sizeof(held)) : 0;
	/* Missing, or left empty by a power cut before it reached the disk:
	 * written now (the entry's name is the hash of this path). */
	if (pr == -ENOENT || pr == -ENODATA) {
		int r = stg_write_file_atomic(fd, PATH_FILE, path, strlen(path), STG_WRITE_ORDERED);
		if (r < 0) {
			close(fd);
			return r;
		}
		created = true;
	}
	ret->created = created;
	ret->cache = c;
	ret->dirfd = fd;
	memcpy(ret->id, id, sizeof(id));
	return 0;
}

void stg_catalog_unlock(struct stg_catalog_file *f)
{
	if (f->dirfd >= 0)
		close(f->dirfd); /* releases the flock */
	f->dirfd = -1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int stg_catalog_versions(int filedirfd, uint64_t **ret_versions, size_t *ret_n)
{
	DIR *d = stg_opendir_at(filedirfd, ".");
	if (!d)
		return -errno;
	uint64_t *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		uint64_t ver;
		if (!parse_manifest_name(de->d_name, &ver))
			continue;
		if (STG_GROW(v, cap, n + 1) < 0) {
			free(v);
			closedir(d);
			return -ENOMEM;
		}
		v[n++] = ver;
	}
	closedir(d);
	qsort(v, n, sizeof(*v), cmp_u64);
	*ret_versions = v;
	*ret_n = n;
	return 0;
}

int stg_catalog_read_encoded(int filedirfd, uint64_t version, struct stg_manifest *ret,
			     uint8_t **ret_bytes, size_t *ret_len)
{
	char name[40];
	stg_catalog_manifest_name(version, name);
	uint8_t *data;
	size_t len;
	int r = stg_read_file(filedirfd, name, MANIFEST_MAX, &data, &len);
	if (r == -EFBIG)
		return -EBADMSG;
	if (r < 0)
		return r;
	r = stg_manifest_decode(data, len, ret);
	if (r == 0 && ret->version != version) {
		stg_manifest_done(ret);
		r = -EBADMSG;
	}
	if (r == 0 && ret_bytes) {
		*ret_bytes = data;
		*ret_len = len;
	} else {
		free(data);
	}
	return r;
}

int stg_catalog_read(int filedirfd, uint64_t version, struct stg_manifest *ret)
{
	return stg_catalog_read_encoded(filedirfd, version, ret, NULL, NULL);
}

int stg_catalog_read_newest(int filedirfd, struct stg_manifest *ret, uint64_t *ret_id)
{
	uint64_t *v = NULL, id = 0;
	size_t n = 0;
	int r = stg_catalog_versions(filedirfd, &v, &n);
	if (r == 0 && n)
		id = v[n - 1];
	if (r == 0)
		r = id ? stg_catalog_read(filedirfd, id, ret) : -ENOENT;
	free(v);
	if (ret_id)
		*ret_id = id;
	return r;
}

static int write_tombstone(int filedirfd, const struct stg_tombstone *t, bool sync)
{
	uint8_t buf[STG_TOMBSTONE_SIZE];
	stg_tombstone_encode(t, buf);
	return stg_write_file_atomic(filedirfd, TOMBSTONE_FILE, buf, sizeof(buf),
				     sync ? STG_WRITE_SYNCED : STG_WRITE_ORDERED);
}

/* The entry's name in files/: its `path` file was written ordered and the
 * publish syncs the entry's own directory. */
static int sync_entry(struct stg_catalog_file *f)
{
	if (f->cache && fsync(f->cache->files_fd) < 0)
		return -errno;
	f->created = false;
	return 0;
}

int stg_catalog_publish(struct stg_catalog_file *f, const char *path,
			const struct stg_manifest *m, bool sync)
{
	(void)path;
	size_t len = stg_manifest_encoded_size(m);
	/* Larger than a reader takes, it would read as corrupt, and the
	 * collector would then free its chunks: refused before it exists. */
	if (len > MANIFEST_MAX)
		return -EFBIG;
	/* An older stagehand must not find a manifest it would collect. */
	int r = m->chunking == STG_CHUNKING_CDC && f->cache ? stg_cache_require_format(f->cache, 2)
							     : 0;
	if (r < 0)
		return r;
	uint8_t *buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	stg_manifest_encode(m, buf);
	/* A durable manifest in an entry whose path is not would be refused
	 * whole after a power cut: the entry's name goes to disk first, once. */
	if (sync && f->created) {
		r = sync_entry(f);
		if (r < 0) {
			free(buf);
			return r;
		}
	}
	char name[40];
	stg_catalog_manifest_name(m->version, name);
	/* Not synced (async): still ordered, so that a power cut never leaves
	 * an older version's manifest empty under a newer one's. */
	r = stg_write_file_atomic(f->dirfd, name, buf, len,
				  sync ? STG_WRITE_SYNCED : STG_WRITE_ORDERED);
	free(buf);
	if (r < 0)
		return r;
	/* A version after a deletion is newer than its tombstone (ids are
	 * minted past it), so that the path is visible again, while the
	 * tombstone still covers the versions before, for the servers: it
	 * stays (in its own file), `deleted` goes. An empty one (before
	 * tombstones) covered what was held: it goes. */
	struct stg_tombstone t;
	bool legacy;
	if (stg_catalog_tombstone(f->dirfd, &t, &legacy) == 0) {
		if (!legacy && faccessat(f->dirfd, TOMBSTONE_FILE, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
			r = write_tombstone(f->dirfd, &t, sync);
		if (r == 0 && unlinkat(f->dirfd, DELETED_FILE, 0) < 0 && errno != ENOENT)
			r = -errno;
	}
	if (r == 0 && sync && fsync(f->dirfd) < 0)
		r = -errno;
	/* After the manifest: a crash in between is found by the flusher's
	 * startup scan, while the other order could ship a version that is not
	 * there. */
	if (r == 0 && f->cache && f->cache->ship) {
		stg_queue_unmark(f->dirfd, m->version);
		r = stg_queue_add(f->cache, f->id, m->version);
	}
	return r;
}

int stg_catalog_amend(struct stg_cache *c, const char *path, const uint32_t *mode,
		      const int64_t *mtime_ns, bool sync)
{
	struct stg_catalog_file f;
	int r = stg_catalog_lock(c, path, false, &f);
	if (r < 0)
		return r;
	struct stg_manifest m;
	r = stg_catalog_is_deleted(f.dirfd) ? -ENOENT : stg_catalog_read_newest(f.dirfd, &m, NULL);
	if (r == 0) {
		if (mode)
			m.mode = *mode & 07777;
		if (mtime_ns)
			m.mtime_ns = *mtime_ns;
		r = stg_catalog_publish(&f, path, &m, sync);
		stg_manifest_done(&m);
	}
	stg_catalog_unlock(&f);
	return r;
}

int stg_catalog_remove_version(int filedirfd, uint64_t version)
{
	char name[40];
	stg_catalog_manifest_name(version, name);
	if (unlinkat(filedirfd, name, 0) < 0)
		return -errno;
	stg_queue_unmark(filedirfd, version);
	return 0;
}

static uint64_t newest_version(int filedirfd);
static void forget_entry(struct stg_cache *c, int filedirfd, const char *id);

static uint64_t read_seen(int filedirfd)
{
	char buf[32];
	int fd = openat(filedirfd, SEEN_FILE, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *end;
	unsigned long long v = strtoull(buf, &end, 10);
	return *end == '\0' ? v : 0; /* unreadable: only a hint, ignored */
}

uint64_t stg_catalog_newest_known(int filedirfd)
{
	uint64_t newest = read_seen(filedirfd), held = newest_version(filedirfd);
	struct stg_tombstone t;
	bool legacy;
	if (held > newest)
		newest = held;
	if (stg_catalog_tombstone(filedirfd, &t, &legacy) == 0 && t.upto > newest)
		newest = t.upto;
	return newest;
}

int stg_catalog_note_seen(struct stg_cache *c, const char *path, uint64_t id)
{
	struct stg_catalog_file f;
	int r = stg_catalog_lock(c, path, true, &f);
	if (r < 0)
		return r;
	if (id > read_seen(f.dirfd)) {
		char buf[32];
		int n = snprintf(buf, sizeof(buf), "%" PRIu64, id);
		r = stg_write_file_atomic(f.dirfd, SEEN_FILE, buf, (size_t)n, STG_WRITE_ORDERED);
	}
	stg_catalog_unlock(&f);
	return r;
}

int stg_catalog_flags(int filedirfd, uint64_t version)
{
	char name[40];
	stg_catalog_manifest_name(version, name);
	int fd = openat(filedirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	uint8_t h[STG_MANIFEST_HEADER_SIZE];
	ssize_t n = pread(fd, h, sizeof(h), 0);
	close(fd);
	if (n < 0)
		return -errno;
	return stg_manifest_peek_flags(h, (size_t)n);
}

/* What retention knows of one version. */
struct kept {
	bool open;
	struct stg_part *part; /* a job version's part, NULL for a whole version */
	size_t head;           /* the newest version of its job version (itself if whole) */
	bool unit_closed;      /* (at its head) a version of the unit is closed */
	bool unit_complete;    /* (at its head) whole, or its parts name every rank */
	uint32_t ordinal;      /* (at its head) 1 for the newest closed unit, ... */
};

/* Reads what retention needs of version id: its flags, and the part of a
 * job version's part. An unreadable version counts as closed and whole:
 * retention never decides on what it cannot read. */
static int kept_read(int filedirfd, uint64_t id, struct kept *k)
{
	int flags = stg_catalog_flags(filedirfd, id);
	k->open = flags > 0 && (flags & STG_MANIFEST_OPEN);
	if (flags <= 0 || !(flags & STG_MANIFEST_PART))
		return 0;
	struct stg_manifest m;
	int r = stg_catalog_read(filedirfd, id, &m);
	if (r == -ENOMEM)
		return r;
	if (r == 0) {
		k->part = m.part;
		m.part = NULL;
		stg_manifest_done(&m);
	} else {
		k->open = false;
	}
	return 0;
}

/* Are a and b parts of one job version (the nodes' parts, or one node's
 * several: a sync and the close)? */
static bool same_unit(const struct kept *a, const struct kept *b)
{
	return a->part && b->part && a->part->open == b->part->open &&
	       strcmp(a->part->job, b->part->job) == 0;
}

/* Do the parts of the unit headed by h (k[0, n)) name every rank of the
 * job? */
static bool unit_complete(const struct kept *k, size_t n, size_t h)
{
	uint32_t size = k[h].part->nranks_job, count = 0;
	uint8_t *have = calloc(size, 1);
	if (!have)
		return false;
	for (size_t i = 0; i <= h && i < n; i++) {
		const struct stg_part *p = k[i].part;
		if (k[i].head != h || p->nranks_job != size)
			continue;
		for (uint32_t r = 0; r < p->nranks; r++)
			if (!have[p->ranks[r]]) {
				have[p->ranks[r]] = 1;
				count++;
			}
	}
	free(have);
	return count == size;
}

int stg_catalog_prune(int filedirfd, uint32_t keep, bool complete_only,
		      stg_catalog_remove_fn remove, void *arg)
{
	if (keep == 0)
		return 0;
	uint64_t *v;
	size_t n;
	int r = stg_catalog_versions(filedirfd, &v, &n);
	if (r < 0)
		return r;
	struct kept *k = calloc(n + 1, sizeof(*k));
	if (!k) {
		free(v);
		return -ENOMEM;
	}
	/* The parts of a job version are one version: grouped at their newest
	 * part (the head), closed when one of them is, counted once. */
	for (size_t i = n; r == 0 && i-- > 0;) {
		r = kept_read(filedirfd, v[i], &k[i]);
		k[i].head = i;
		for (size_t j = i + 1; j < n; j++)
			if (same_unit(&k[i], &k[j])) {
				k[i].head = k[j].head;
				break;
			}
		k[k[i].head].unit_closed |= !k[i].open;
	}
	/* Numbered from the newest: with complete_only, an incomplete job
	 * version (a node's part yet to come, or lost) takes the number of
	 * the complete ones newer than it, so that it never pushes a complete
	 * one out, and goes once keep complete ones are newer. */
	uint32_t closed = 0;
	for (size_t i = n; i-- > 0;) {
		if (k[i].head != i || !k[i].unit_closed)
			continue;
		bool counts = !complete_only || !k[i].part || unit_complete(k, n, i);
		k[i].ordinal = counts ? ++closed : closed + 1;
	}
	int removed = 0;
	for (size_t i = n; r == 0 && i-- > 0;) {
		bool go;
		if (k[i].open) {
			/* An open version goes once a closed version (another job
			 * version, for a part) is newer, or once its writing's next
			 * sync or close took its number (the same node's, for a
			 * part): a server receives both, where the cache replaced
			 * it. */
			go = false;
			for (size_t j = i + 1; j < n && !go; j++) {
				bool unit = same_unit(&k[i], &k[j]);
				go = (!unit && k[j].head == j && k[j].unit_closed) ||
				     (stg_version_seq(v[j]) == stg_version_seq(v[i]) &&
				      (unit ? k[i].part->node == k[j].part->node
					    : !k[i].part && !k[j].part));
			}
		} else {
			go = k[k[i].head].ordinal > keep;
		}
		if (!go)
			continue;
		r = remove ? remove(arg, filedirfd, v[i]) : stg_catalog_remove_version(filedirfd, v[i]);
		if (r == -ENOENT)
			r = 0;
		else if (r == 0)
			removed++;
	}
	for (size_t i = 0; i < n; i++)
		stg_part_free(k[i].part);
	free(k);
	free(v);
	return r < 0 ? r : removed;
}

static uint64_t newest_version(int filedirfd)
{
	uint64_t *v = NULL, newest = 0;
	size_t n = 0;
	if (stg_catalog_versions(filedirfd, &v, &n) == 0 && n)
		newest = v[n - 1];
	free(v);
	return newest;
}

int stg_catalog_tombstone(int filedirfd, struct stg_tombstone *ret, bool *ret_legacy)
{
	int fd = openat(filedirfd, TOMBSTONE_FILE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT)
		fd = openat(filedirfd, DELETED_FILE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	struct stat st;
	uint8_t *buf = NULL;
	size_t len = 0;
	int r = fstat(fd, &st) < 0 ? -errno : st.st_size == 0 ? 0
					: stg_read_fd(fd, STG_TOMBSTONE_SIZE, &buf, &len);
	close(fd);
	if (r < 0)
		return r;
	*ret_legacy = len == 0;
	if (len) {
		r = stg_tombstone_decode(buf, len, ret);
		free(buf);
		if (r == 0)
			return 0;
		stg_log_errno(STG_LOG_WARN, r, "catalog: a tombstone is unreadable: its path "
			      "counts as deleted until a version is published");
		*ret_legacy = true;
	}
	/* Empty (a cache of before tombstones), or unreadable: every version
	 * held is deleted, from the file's time, kept the default time. */
	uint64_t newest = newest_version(filedirfd);
	*ret = (struct stg_tombstone){
		.upto = newest ? newest : 1,
		.at_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
		.retain_s = STG_KEEP_DELETED_DEFAULT,
	};
	return 0;
}

bool stg_catalog_is_deleted(int filedirfd)
{
	struct stg_tombstone t;
	bool legacy;
	return stg_catalog_tombstone(filedirfd, &t, &legacy) == 0 &&
	       newest_version(filedirfd) <= t.upto;
}

int stg_catalog_delete(struct stg_catalog_file *f, const struct stg_tombstone *t, bool sync)
{
	struct stg_tombstone held, now = *t;
	bool legacy;
	if (stg_catalog_tombstone(f->dirfd, &held, &legacy) == 0)
		now = stg_tombstone_merge(&held, t);
	/* The tombstone first: a crash before `deleted` is made leaves the
	 * deletion to this stagehand, which reads the tombstone. */
	int r = write_tombstone(f->dirfd, &now, sync);
	if (r == 0 && newest_version(f->dirfd) <= now.upto)
		r = stg_write_file_atomic(f->dirfd, DELETED_FILE, "", 0,
					  sync ? STG_WRITE_SYNCED : STG_WRITE_ORDERED);
	if (r == 0 && sync && fsync(f->dirfd) < 0)
		r = -errno;
	/* Queued after, as a version is: shipped once the versions are. */
	if (r == 0 && f->cache && f->cache->ship) {
		stg_queue_unmark(f->dirfd, 0);
		r = stg_queue_add(f->cache, f->id, 0);
	}
	return r;
}

int stg_catalog_read_path(int filedirfd, char *out, size_t outlen)
{
	uint8_t *data;
	size_t len;
	int r = stg_read_file(filedirfd, PATH_FILE, PATH_MAX, &data, &len);
	if (r < 0)
		return r;
	/* Empty: written but never synced when the power went (its first
	 * durable version syncs it), not damage. */
	if (len == 0) {
		free(data);
		return -ENODATA;
	}
	/* A restore writes where this says: nothing but a normalized,
	 * absolute path (no ".." to climb out of --to, no NUL) is one. */
	if (len >= outlen || !stg_path_valid((const char *)data, len)) {
		free(data);
		return -EBADMSG;
	}
	memcpy(out, data, len);
	out[len] = '\0';
	free(data);
	return 0;
}

static uint64_t ino_of_id(const char *id)
{
	struct stg_hash h;
	if (stg_hash_from_hex(id, &h) < 0)
		return 1;
	return (stg_get_le64(h.b) & 0x7fffffffffffffffull) | 1;
}

uint64_t stg_catalog_ino(const char *path)
{
	char id[STG_HASH_HEX_LEN + 1];
	stg_catalog_file_id(path, id);
	return ino_of_id(id);
}

static void fill_state(struct stg_file_state *st, int fd, const char *id,
		       const struct stg_manifest *m)
{
	st->exists = true;
	st->deleted = stg_catalog_is_deleted(fd);
	st->latest = m->version;
	st->size = m->size;
	st->mode = m->mode;
	st->mtime_ns = m->mtime_ns;
	st->ino = ino_of_id(id);
}

static int state_of(int fd, const char *id, struct stg_file_state *st)
{
	uint64_t *v;
	size_t n;
	int r = stg_catalog_versions(fd, &v, &n);
	if (r < 0)
		return r;
	if (n == 0) {
		free(v);
		return 0;
	}
	struct stg_manifest m;
	r = stg_catalog_read(fd, v[n - 1], &m);
	if (r == -EBADMSG || r == -EIO) {
		/* A disk that lost the newest version's writes: the state is that
		 * of the newest one that reads, for a caller that can do without
		 * the damaged one (a whole new version), and r says the damage. */
		st->damaged = v[n - 1];
		for (size_t i = n - 1; i-- > 0;)
			if (stg_catalog_read(fd, v[i], &m) == 0) {
				fill_state(st, fd, id, &m);
				stg_manifest_done(&m);
				break;
			}
	} else if (r == 0) {
		fill_state(st, fd, id, &m);
		stg_manifest_done(&m);
	}
	free(v);
	return r;
}

int stg_catalog_state(struct stg_cache *c, const char *path, struct stg_file_state *ret)
{
	char id[STG_HASH_HEX_LEN + 1];
	stg_catalog_file_id(path, id);
	*ret = (struct stg_file_state){0};
	int fd = openat(c->files_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	int r = state_of(fd, id, ret);
	close(fd);
	return r;
}

int stg_catalog_scan(struct stg_cache *c, int (*fn)(void *arg, const char *path, int filedirfd),
		     void (*bad)(void *arg, const char *id, int err), void *arg)
{
	DIR *d = stg_opendir_at(c->files_fd, ".");
	if (!d)
		return -errno;
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(d))) {
		if (strlen(de->d_name) != STG_HASH_HEX_LEN)
			continue;
		int ffd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (ffd < 0)
			continue;
		char path[PATH_MAX];
		char id[STG_HASH_HEX_LEN + 1];
		int pr = stg_catalog_read_path(ffd, path, sizeof(path));
		if (pr == 0) {
			stg_catalog_file_id(path, id);
			/* An entry whose path does not hash to its name is a leftover. */
			if (strcmp(id, de->d_name) == 0)
				r = fn(arg, path, ffd);
		} else if (pr != -ENOENT && pr != -ENODATA && bad) {
			/* (without a path file: one being created, or a leftover;
			 * with an empty one: one whose creation a power cut undid) */
			bad(arg, de->d_name, pr);
		}
		close(ffd);
	}
	closedir(d);
	return r;
}

int stg_catalog_foreach(struct stg_cache *c,
			int (*fn)(void *arg, const char *path, int filedirfd), void *arg)
{
	return stg_catalog_scan(c, fn, NULL, arg);
}

struct expire_state {
	struct stg_cache *c;
	int64_t now_ns;
	size_t removed;
};

/* One entry: what its expired tombstone covers goes; then the tombstone,
 * once the servers have it (or there are none), and the entry when nothing
 * is left in it. */
static int expire_one(void *arg, const char *path, int filedirfd)
{
	struct expire_state *st = arg;
	struct stg_tombstone t;
	bool legacy;
	if (stg_catalog_tombstone(filedirfd, &t, &legacy) < 0 ||
	    !stg_tombstone_expired(&t, st->now_ns))
		return 0;
	/* Tried, never waited for: the collection may run in a process that
	 * holds this entry's lock already, or whose holder waits for the
	 * collection's lock. A busy entry waits for the next collection. */
	struct stg_catalog_file f = {.cache = st->c};
	f.dirfd = openat(filedirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f.dirfd < 0)
		return 0;
	if (stg_flock(f.dirfd, LOCK_EX | LOCK_NB) < 0) {
		close(f.dirfd);
		return 0;
	}
	stg_catalog_file_id(path, f.id);
	uint64_t *v = NULL;
	size_t n = 0;
	if (stg_catalog_tombstone(f.dirfd, &t, &legacy) == 0 &&
	    stg_tombstone_expired(&t, st->now_ns) && stg_catalog_versions(f.dirfd, &v, &n) == 0) {
		size_t gone = 0;
		while (gone < n && v[gone] <= t.upto &&
		       stg_catalog_remove_version(f.dirfd, v[gone]) == 0)
			gone++;
		st->removed += gone;
		bool shipped = !st->c->ship || stg_queue_read_mark(f.dirfd, 0, NULL, 0) == 0;
		if (shipped && gone == n) {
			stg_queue_unmark(f.dirfd, 0);
			forget_entry(st->c, f.dirfd, f.id);
		} else if (shipped) {
			unlinkat(f.dirfd, DELETED_FILE, 0);
			unlinkat(f.dirfd, TOMBSTONE_FILE, 0);
			stg_queue_unmark(f.dirfd, 0);
		}
	}
	free(v);
	stg_catalog_unlock(&f);
	return 0;
}

int stg_catalog_expire(struct stg_cache *c, int64_t now_ns, size_t *ret_removed)
{
	struct expire_state st = {.c = c, .now_ns = now_ns};
	int r = stg_catalog_foreach(c, expire_one, &st);
	if (ret_removed)
		*ret_removed = st.removed;
	return r;
}

/* Publishes from's version under topath as newversion. A link's copy is a
 * closed version of its own (the writer goes on under the old name only),
 * and one node's part of a shared = job version cannot stand alone. */
static int copy_version(struct stg_catalog_file *from, uint64_t version,
			struct stg_catalog_file *to, const char *topath, uint64_t newversion,
			bool sync, bool link)
{
	struct stg_manifest m;
	int r = stg_catalog_read(from->dirfd, version, &m);
	if (r < 0)
		return r;
	if (link && (m.flags & STG_MANIFEST_PART)) {
		stg_manifest_done(&m);
		return -EOPNOTSUPP;
	}
	if (link)
		m.flags &= ~(uint32_t)STG_MANIFEST_OPEN;
	/* The version moves, and what it stored with it: the old name's go. */
	m.version = newversion;
	r = stg_catalog_publish(to, topath, &m, sync);
	stg_manifest_done(&m);
	return r;
}

static int transfer(struct stg_cache *c, const char *oldpath, const char *newpath, bool sync,
		    uint32_t keep, bool keep_old, struct stg_catalog_moved *ret_moved);

int stg_catalog_rename(struct stg_cache *c, const char *oldpath, const char *newpath, bool sync,
		       uint32_t keep, struct stg_catalog_moved *ret_moved)
{
	return transfer(c, oldpath, newpath, sync, keep, false, ret_moved);
}

int stg_catalog_link(struct stg_cache *c, const char *oldpath, const char *newpath, bool sync,
		     uint32_t keep)
{
	return transfer(c, oldpath, newpath, sync, keep, true, NULL);
}

/* Removes an entry left with no version (and nothing to ship). */
static void forget_entry(struct stg_cache *c, int filedirfd, const char *id)
{
	unlinkat(filedirfd, DELETED_FILE, 0);
	unlinkat(filedirfd, TOMBSTONE_FILE, 0);
	unlinkat(filedirfd, SEEN_FILE, 0);
	unlinkat(filedirfd, PATH_FILE, 0);
	unlinkat(c->files_fd, id, AT_REMOVEDIR);
}

/* rename (old goes) or link (old stays, new gets old's newest version as
 * its next one). */
static int transfer(struct stg_cache *c, const char *oldpath, const char *newpath, bool sync,
		    uint32_t keep, bool keep_old, struct stg_catalog_moved *ret_moved)
{
	if (strcmp(oldpath, newpath) == 0)
		return 0;
	struct stg_catalog_file a, b;
	char ida[STG_HASH_HEX_LEN + 1], idb[STG_HASH_HEX_LEN + 1];
	stg_catalog_file_id(oldpath, ida);
	stg_catalog_file_id(newpath, idb);
	/* Lock in id order so two opposite renames cannot deadlock. */
	bool a_first = strcmp(ida, idb) < 0;
	int r = a_first ? stg_catalog_lock(c, oldpath, false, &a)
			: stg_catalog_lock(c, newpath, true, &b);
	if (r < 0)
		return r;
	r = a_first ? stg_catalog_lock(c, newpath, true, &b) : stg_catalog_lock(c, oldpath, false, &a);
	if (r < 0) {
		if (a_first)
			stg_catalog_unlock(&a);
		else
			stg_catalog_unlock(&b);
		return r;
	}
	uint64_t *va = NULL, *vb = NULL;
	size_t na = 0, nb = 0;
	r = stg_catalog_versions(a.dirfd, &va, &na);
	if (r == 0)
		r = stg_catalog_versions(b.dirfd, &vb, &nb);
	if (r == 0 && (na == 0 || stg_catalog_is_deleted(a.dirfd)))
		r = -ENOENT;
	struct stg_catalog_moved moved = {0};
	if (r == 0) {
		moved.from = moved.to = va[na - 1];
		if (nb == 0 && !keep_old) {
			for (size_t i = 0; i < na && r == 0; i++)
				r = copy_version(&a, va[i], &b, newpath, va[i], sync, false);
		} else {
			moved.to = stg_version_mint(stg_catalog_newest_known(b.dirfd), 0,
						    stg_now_ns());
			r = copy_version(&a, va[na - 1], &b, newpath, moved.to, sync, keep_old);
		}
	}
	if (r == 0 && ret_moved)
		*ret_moved = moved;
	/* The new name is complete before the old one goes: a crash in between
	 * leaves both, never neither. With servers, the old name keeps a
	 * tombstone, queued after the new name's versions, so that the
	 * servers drop it once they hold those (docs/CAPTURE.md, "Renames and
	 * deletions"); it hides the old versions should a crash leave them. */
	if (r == 0 && !keep_old && c->ship) {
		struct stg_tombstone t = {.upto = va[na - 1], .at_ns = stg_now_ns(),
					  .flags = STG_TOMBSTONE_RENAMED};
		r = stg_catalog_delete(&a, &t, sync);
	}
	for (size_t i = 0; r == 0 && !keep_old && i < na; i++)
		r = stg_catalog_remove_version(a.dirfd, va[i]);
	/* The new name keeps what its rule keeps, as after any commit (what
	 * this frees goes at the next collection). */
	if (r == 0) {
		int pr = stg_catalog_prune(b.dirfd, keep, false, NULL, NULL);
		if (pr < 0)
			stg_debug("pruning '%s': %s", newpath, strerror(-pr));
	}
	if (r == 0 && !keep_old && !c->ship)
		forget_entry(c, a.dirfd, ida);
	free(va);
	free(vb);
	stg_catalog_unlock(&a);
	stg_catalog_unlock(&b);
	return r;
}

/* Is version id of a locked entry another part of the job's version that
 * part belongs to, from the same node (its ranks that held the file one
 * after another)? */
static bool same_node_part(int filedirfd, uint64_t id, const struct stg_part *part)
{
	struct stg_manifest m;
	if (!part || stg_catalog_read(filedirfd, id, &m) < 0)
		return false;
	bool same = m.part && m.part->node == part->node && m.part->open == part->open &&
		    strcmp(m.part->job, part->job) == 0;
	stg_manifest_done(&m);
	return same;
}

/* Is version id of a locked entry stored as exactly these bytes? */
static bool stored_as(int filedirfd, uint64_t id, const uint8_t *buf, size_t len)
{
	struct stg_manifest m;
	uint8_t *bytes;
	size_t n;
	if (stg_catalog_read_encoded(filedirfd, id, &m, &bytes, &n) < 0)
		return false;
	bool same = n == len && memcmp(bytes, buf, len) == 0;
	stg_manifest_done(&m);
	free(bytes);
	return same;
}

/* Chooses the new id of m (version old of a locked entry) and encodes m
 * under it into *ret_buf: the first old + k * 2^STG_VERSION_SEQ_BITS that is
 * free, or that holds exactly that already (a re-minting cut short by a
 * crash: *ret_written). The node's versions keep their order, so it must
 * come before the next one, except that the parts of one job's version
 * from this node may trade places. Returns 0, -ERANGE or -errno. */
static int choose_id(int filedirfd, uint64_t old, struct stg_manifest *m, uint8_t **ret_buf,
		     size_t *ret_len, bool *ret_written)
{
	const uint64_t step = UINT64_C(1) << STG_VERSION_SEQ_BITS;
	uint64_t *v;
	size_t nv, i = 0;
	int r = stg_catalog_versions(filedirfd, &v, &nv);
	if (r < 0)
		return r;
	while (i < nv && v[i] <= old)
		i++;
	*ret_buf = NULL;
	*ret_written = false;
	for (uint64_t id = old + step;; id += step) {
		/* What this id passes over must be parts it may pass. */
		for (; i < nv && v[i] < id; i++)
			if (!same_node_part(filedirfd, v[i], m->part))
				r = -ERANGE;
		if (r < 0 || id < old) {
			r = -ERANGE;
			break;
		}
		m->version = id; /* the manifest names its id */
		size_t len = stg_manifest_encoded_size(m);
		uint8_t *buf = realloc(*ret_buf, len);
		if (!buf) {
			r = -ENOMEM;
			break;
		}
		*ret_buf = buf;
		*ret_len = len;
		stg_manifest_encode(m, buf);
		if (i == nv || v[i] != id)
			break; /* free */
		if (stored_as(filedirfd, id, buf, len)) {
			*ret_written = true;
			break;
		}
	}
	free(v);
	if (r < 0) {
		free(*ret_buf);
		*ret_buf = NULL;
	}
	return r;
}

int stg_catalog_remint(struct stg_cache *c, const char *path, uint64_t old, uint64_t *ret_new)
{
	struct stg_catalog_file f;
	int r = stg_catalog_lock(c, path, false, &f);
	if (r < 0)
		return r;
	struct stg_manifest m;
	r = stg_catalog_read(f.dirfd, old, &m);
	if (r < 0)
		goto out_unlock;
	uint8_t *buf;
	size_t len;
	bool written;
	r = choose_id(f.dirfd, old, &m, &buf, &len, &written);
	if (r == -ERANGE)
		stg_debug("'%s': no id is free between %" PRIu64 " and the next version", path,
			  old);
	if (r < 0)
		goto out_manifest;
	uint64_t id = m.version;
	char name[40];
	stg_catalog_manifest_name(id, name);
	if (!written)
		r = stg_write_file_atomic(f.dirfd, name, buf, len, STG_WRITE_SYNCED);
	if (r == 0 && fsync(f.dirfd) < 0)
		r = -errno;
	/* The new id is durable before the old one goes (a crash in between
	 * leaves both, and the next try finishes), and queued after (a crash
	 * before leaves it to the flusher's startup scan; the old entry is
	 * dropped as gone). */
	if (r == 0)
		r = stg_catalog_remove_version(f.dirfd, old);
	if (r == 0 && fsync(f.dirfd) < 0)
		r = -errno;
	if (r == 0)
		r = stg_queue_add(c, f.id, id);
	if (r == 0) {
		stg_queue_remove(c, f.id, old);
		*ret_new = id;
	}
	free(buf);
out_manifest:
	stg_manifest_done(&m);
out_unlock:
	stg_catalog_unlock(&f);
	return r;
}

uint64_t stg_catalog_reminted(int filedirfd, uint64_t id, bool open)
{
	uint64_t *v = NULL, now = id;
	size_t n = 0;
	if (id == 0 || stg_catalog_flags(filedirfd, id) != -ENOENT ||
	    stg_catalog_versions(filedirfd, &v, &n) < 0)
		return id;
	/* Re-minting keeps the sequence number and moves the id up. */
	for (size_t i = 0; i < n && now == id; i++) {
		if (v[i] <= id || stg_version_seq(v[i]) != stg_version_seq(id))
			continue;
		/* A closed version with an open one's number superseded it: not
		 * the open one re-minted. */
		int flags = stg_catalog_flags(filedirfd, v[i]);
		if (flags >= 0 && !(flags & STG_MANIFEST_OPEN) == !open)
			now = v[i];
	}
	free(v);
	return now;
}
