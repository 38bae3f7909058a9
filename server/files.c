/* SPDX-License-Identifier: MIT */
/* The server's manifests: files/<uid>/<file id>/{path, v<N>.mf, v<N>.held,
 * deleted}, and the index of their paths that listings search. */
#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"
#include "hash.h"
#include "heldmap.h"
#include "pathfile.h"
#include "pathindex.h"
#include "tombstone.h"
#include "log.h"
#include "util.h"

#define FILES_DIR "files"
#define PATH_FILE "path"
#define DELETED_FILE "deleted"

/* A deletion waiting for its retention to run out. */
struct pending {
	int64_t expiry_ns;
	uint32_t uid;
	char *path;
};

struct stg_files {
	int fd; /* files/ */
	struct stg_pathindex *paths; /* every entry's path, per user */
	atomic_uint_fast64_t listed; /* entries read by listings */
	struct stg_files_hooks hooks;
	/* The deletions recorded, soonest expiry first (a binary heap): a
	 * merge that extends one pushes it again, and the stale copy finds
	 * it unexpired when it comes up. */
	pthread_mutex_t lock;
	struct pending *heap;
	size_t nheap, capheap;
	/* At open: path files read (entries without an index file). */
	uint64_t paths_read;
	bool files_consumed;
	/* The path index may lack an entry (one that could not be read, or
	 * added for want of memory): references are not counted from it, and
	 * no path index file is written from it. */
	atomic_bool incomplete;
};

static bool parse_uid(const char *name, uint32_t *ret);
static int index_paths(struct stg_files *f);

int stg_files_open(int storedirfd, struct stg_files **ret)
{
	if (mkdirat(storedirfd, FILES_DIR, 0700) == 0) {
		if (fsync(storedirfd) < 0)
			return -errno;
	} else if (errno != EEXIST) {
		return -errno;
	}
	struct stg_files *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	pthread_mutex_init(&f->lock, NULL);
	f->fd = openat(storedirfd, FILES_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = f->fd < 0 ? -errno : stg_pathindex_new(&f->paths);
	if (r == 0)
		r = index_paths(f);
	if (r < 0) {
		stg_files_free(f);
		return r;
	}
	*ret = f;
	return 0;
}

void stg_files_free(struct stg_files *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	stg_pathindex_free(f->paths);
	for (size_t i = 0; i < f->nheap; i++)
		free(f->heap[i].path);
	free(f->heap);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

void stg_files_set_hooks(struct stg_files *f, const struct stg_files_hooks *h)
{
	f->hooks = *h;
}

static bool pending_before(const struct pending *a, const struct pending *b)
{
	return a->expiry_ns < b->expiry_ns;
}

/* Records that uid's path has a deletion expiring at expiry_ns. Returns 0
 * or -ENOMEM. */
static int pending_push(struct stg_files *f, uint32_t uid, const char *path, int64_t expiry_ns)
{
	char *copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	pthread_mutex_lock(&f->lock);
	if (STG_GROW(f->heap, f->capheap, f->nheap + 1) < 0) {
		pthread_mutex_unlock(&f->lock);
		free(copy);
		return -ENOMEM;
	}
	size_t i = f->nheap++;
	struct pending p = {expiry_ns, uid, copy};
	while (i > 0 && pending_before(&p, &f->heap[(i - 1) / 2])) {
		f->heap[i] = f->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	f->heap[i] = p;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

/* Takes the soonest deletion if it expired by now_ns. */
static bool pending_pop(struct stg_files *f, int64_t now_ns, struct pending *ret)
{
	pthread_mutex_lock(&f->lock);
	bool due = f->nheap > 0 && f->heap[0].expiry_ns <= now_ns;
	if (due) {
		*ret = f->heap[0];
		struct pending last = f->heap[--f->nheap];
		size_t i = 0;
		for (;;) {
			size_t c = 2 * i + 1;
			if (c >= f->nheap)
				break;
			if (c + 1 < f->nheap && pending_before(&f->heap[c + 1], &f->heap[c]))
				c++;
			if (!pending_before(&f->heap[c], &last))
				break;
			f->heap[i] = f->heap[c];
			i = c;
		}
		if (f->nheap > 0)
			f->heap[i] = last;
	}
	pthread_mutex_unlock(&f->lock);
	return due;
}

static int check_path(const char *path)
{
	size_t len = strlen(path);
	return path[0] == '/' && len < PATH_MAX ? 0 : -EINVAL;
}

/* Opens dirfd/name as a directory; with create, makes it first (and makes
 * its name durable in dirfd). */
static int open_dir(int dirfd, const char *name, bool create)
{
	if (create) {
		if (mkdirat(dirfd, name, 0700) == 0) {
			if (fsync(dirfd) < 0)
				return -errno;
		} else if (errno != EEXIST) {
			return -errno;
		}
	}
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int lock_dir(int fd, int op)
{
	while (flock(fd, op) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

/* Does the entry's path file name path? Two paths with one file id are
 * kept apart, however unlikely. */
static int same_path(int filedirfd, const char *path)
{
	char stored[PATH_MAX];
	int r = stg_catalog_read_path(filedirfd, stored, sizeof(stored));
	/* Empty: a path file that never reached the disk whole, as if absent. */
	if (r == -ENODATA)
		return -ENOENT;
	if (r < 0)
		return r;
	return strcmp(stored, path) == 0;
}

/* Opens uid's entry of path (creating it with create), flock'ed with op.
 * Returns the descriptor, -ENOENT, -ENOTUNIQ (another path has its file id:
 * not -EEXIST, which a put returns only for a version held under its id) or
 * -errno. */
static int open_file(struct stg_files *f, uint32_t uid, const char *path, bool create, int op)
{
	char uidname[16], id[STG_HASH_HEX_LEN + 1];
	snprintf(uidname, sizeof(uidname), "%" PRIu32, uid);
	stg_catalog_file_id(path, id);
	int fd, r;
	struct stat st;
	do {
		int ufd = open_dir(f->fd, uidname, create);
		if (ufd < 0)
			return ufd;
		fd = open_dir(ufd, id, create);
		close(ufd);
		if (fd < 0)
			return fd;
		r = lock_dir(fd, op);
		if (r < 0)
			goto out_close;
		/* The collector may have removed the directory while we waited
		 * for its lock (its deleted versions expired): open it anew. */
		if (fstat(fd, &st) < 0) {
			r = -errno;
			goto out_close;
		}
		if (st.st_nlink == 0)
			close(fd);
	} while (st.st_nlink == 0);
	r = same_path(fd, path);
	if (r == -ENOENT && create) {
		r = stg_write_file_atomic(fd, PATH_FILE, path, strlen(path), STG_WRITE_SYNCED);
		if (r == 0 && fsync(fd) < 0)
			r = -errno;
		if (r == 0)
			r = 1;
	}
	if (r == 0)
		r = create ? -ENOTUNIQ : -ENOENT;
	/* (again for an entry there already: adding is idempotent) */
	if (r > 0 && create) {
		r = stg_pathindex_add(f->paths, uid, path);
		if (r < 0)
			f->incomplete = true;
	}
	if (r < 0)
		goto out_close;
	return fd;

out_close:
	close(fd);
	return r;
}

/* Reads and validates one version; *ret_mf holds its bytes. */
static int read_version(int filedirfd, uint64_t version, uint8_t **ret_mf, size_t *ret_len)
{
	struct stg_manifest m;
	int r = stg_catalog_read_encoded(filedirfd, version, &m, ret_mf, ret_len);
	if (r == 0)
		stg_manifest_done(&m);
	return r;
}

/* May mf be filed as version, which the entry may hold already? A version is
 * put again after a lost reply, or with its mode or mtime amended after
 * close, but never replaced by other content: ids are minted unique by their
 * writers (docs/FORMAT.md, "Version ids"), so other content under a held id
 * is a collision, or a client overwriting history. 0, -EEXIST, or -errno
 * (the held one cannot be read now). */
static int may_put(int filedirfd, uint64_t version, const uint8_t *mf, size_t len)
{
	struct stg_manifest held, in;
	int r = stg_catalog_read(filedirfd, version, &held);
	if (r == -ENOENT || r == -EBADMSG)
		return 0; /* absent, or corrupt: the put repairs it */
	if (r < 0)
		return r; /* no reason to replace what may be another node's */
	r = stg_manifest_decode(mf, len, &in);
	if (r < 0) {
		stg_manifest_done(&held);
		return r;
	}
	/* Two nodes' parts of one job version may have the same chunks (ranks
	 * writing the same bytes): the part tells them apart. */
	bool same = held.size == in.size && held.chunk_size == in.chunk_size &&
		    held.chunking == in.chunking && held.chunk_max == in.chunk_max &&
		    held.nchunks == in.nchunks && stg_part_equal(held.part, in.part);
	for (uint32_t i = 0; same && i < in.nchunks; i++)
		same = stg_hash_eq(&held.entries[i].hash, &in.entries[i].hash) &&
		       held.entries[i].raw_len == in.entries[i].raw_len;
	stg_manifest_done(&held);
	stg_manifest_done(&in);
	return same ? 0 : -EEXIST;
}

static void held_name(uint64_t version, char out[40])
{
	snprintf(out, 40, "v%020" PRIu64 ".held", version);
}

/* Removes the held maps whose manifest is gone (retired, or never written
 * after a crash between the two). */
static void drop_orphan_held(int filedirfd)
{
	DIR *d = stg_opendir_at(filedirfd, ".");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		uint64_t v;
		char name[40], mf[40];
		if (sscanf(de->d_name, "v%20" SCNu64 ".held", &v) != 1)
			continue;
		held_name(v, name);
		stg_catalog_manifest_name(v, mf);
		if (strcmp(name, de->d_name) == 0 && faccessat(filedirfd, mf, F_OK, 0) < 0 &&
		    errno == ENOENT)
			unlinkat(filedirfd, name, 0);
	}
	closedir(d);
}

/* Writes the held map of version (before its manifest, so that a filed
 * manifest never lacks it). */
static int put_held(int filedirfd, uint64_t version, const uint8_t *mf, size_t len,
		    const uint8_t *held)
{
	struct stg_manifest m;
	int r = stg_manifest_decode(mf, len, &m);
	if (r < 0)
		return r;
	uint32_t nchunks = m.nchunks;
	stg_manifest_done(&m);
	size_t n = stg_heldmap_size(nchunks);
	uint8_t *buf = malloc(n);
	if (!buf)
		return -ENOMEM;
	stg_heldmap_encode(version, nchunks, held, buf);
	char name[40];
	held_name(version, name);
	r = stg_write_file_atomic(filedirfd, name, buf, n, STG_WRITE_SYNCED);
	free(buf);
	return r;
}

static int read_held(int filedirfd, const char *path, const struct stg_manifest *m,
		     uint8_t **ret_buf, const uint8_t **ret_bits);

/* A version as the retired hook is told of it: its manifest and held map,
 * read before it goes. */
struct retiring {
	bool read;
	struct stg_manifest m;
	uint8_t *buf;
	const uint8_t *bits;
};

static void retiring_read(struct stg_files *f, int filedirfd, const char *path,
			  uint64_t version, struct retiring *ret)
{
	*ret = (struct retiring){0};
	if (!f->hooks.retired)
		return;
	int r = stg_catalog_read(filedirfd, version, &ret->m);
	/* Taken back only as counted: a held map that cannot be read now
	 * (other than a manifest's of before held maps, all of whose chunks
	 * count) could take back what was never given. What such a version
	 * holds stays counted until the next start. */
	if (r == 0) {
		r = read_held(filedirfd, path, &ret->m, &ret->buf, &ret->bits);
		if (r == -ENOENT)
			r = 0;
		if (r < 0) {
			free(ret->buf);
			stg_manifest_done(&ret->m);
		}
	}
	if (r < 0) {
		stg_log_errno(STG_LOG_WARN, r, "files: '%s' version %" PRIu64 " cannot be read "
			      "back: its chunks stay counted until the server restarts", path,
			      version);
		return;
	}
	ret->read = true;
}

static void retiring_done(struct stg_files *f, uint32_t uid, struct retiring *v, bool gone)
{
	if (!v->read)
		return;
	if (gone)
		f->hooks.retired(f->hooks.arg, uid, &v->m, v->bits);
	free(v->buf);
	stg_manifest_done(&v->m);
}

/* Removes version of an entry, its manifest then its held map, and tells
 * the retired hook. Returns 0, -ENOENT or -errno. */
static int remove_version(struct stg_files *f, uint32_t uid, int filedirfd, const char *path,
			  uint64_t version)
{
	struct retiring old;
	retiring_read(f, filedirfd, path, version, &old);
	int r = stg_catalog_remove_version(filedirfd, version);
	if (r == 0) {
		char name[40];
		held_name(version, name);
		unlinkat(filedirfd, name, 0);
	}
	retiring_done(f, uid, &old, r == 0);
	return r;
}

static void filed(struct stg_files *f, uint32_t uid, const uint8_t *mf, size_t len,
		  const uint8_t *held)
{
	struct stg_manifest m;
	int r = stg_manifest_decode(mf, len, &m);
	/* Validated by the caller: only memory can fail here. */
	f->hooks.filed(f->hooks.arg, uid, r < 0 ? NULL : &m, held);
	if (r == 0)
		stg_manifest_done(&m);
}

struct pruning {
	struct stg_files *f;
	uint32_t uid;
	const char *path;
};

static int prune_one(void *arg, int filedirfd, uint64_t version)
{
	struct pruning *p = arg;
	return remove_version(p->f, p->uid, filedirfd, p->path, version);
}

int stg_files_put(struct stg_files *f, uint32_t uid, const char *path, const uint8_t *mf,
		  size_t len, uint64_t version, uint32_t keep, const uint8_t *held)
{
	if (check_path(path) < 0 || version == 0)
		return -EINVAL;
	/* The manifest must name the version it is filed under (the version
	 * field of the SHMF header, docs/FORMAT.md). */
	if (len < STG_MANIFEST_HEADER_SIZE || stg_get_le64(mf + 8) != version)
		return -EINVAL;
	/* The entry's flock serializes puts of one path, this process's threads
	 * included (each opens its own descriptor). */
	int fd = open_file(f, uid, path, true, LOCK_EX);
	if (fd < 0)
		return fd;
	int r = may_put(fd, version, mf, len);
	if (r < 0) {
		close(fd);
		return r;
	}
	char name[40];
	stg_catalog_manifest_name(version, name);
	/* The same chunks filed again under its id: its held map may differ,
	 * so the one filed before is counted out once this one is in. */
	struct retiring old = {0};
	if (faccessat(fd, name, F_OK, 0) == 0)
		retiring_read(f, fd, path, version, &old);
	r = put_held(fd, version, mf, len, held);
	bool held_written = r == 0;
	if (r == 0)
		r = stg_write_file_atomic(fd, name, mf, len, STG_WRITE_SYNCED);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	/* What counts is what is on disk now, even after a failure: the new
	 * held map, if it was written, with a manifest under this id. */
	bool counted = held_written && faccessat(fd, name, F_OK, 0) == 0;
	if (counted && f->hooks.filed)
		filed(f, uid, mf, len, held);
	retiring_done(f, uid, &old, counted);
	struct pruning p = {f, uid, path};
	int removed = r == 0 ? stg_catalog_prune(fd, keep, true, prune_one, &p) : 0;
	if (removed < 0)
		r = removed;
	if (removed > 0)
		drop_orphan_held(fd);
	if (removed > 0 && fsync(fd) < 0 && r == 0)
		r = -errno;
	close(fd);
	return r < 0 ? r : removed;
}

/* The entry's tombstone into *ret: 0, or -ENOENT when it has none. One that
 * cannot be read is logged and taken as none: a deletion forgotten keeps
 * versions, never loses them. */
static int read_tombstone(int filedirfd, const char *path, struct stg_tombstone *ret)
{
	uint8_t *buf;
	size_t len;
	int r = stg_read_file(filedirfd, DELETED_FILE, STG_TOMBSTONE_SIZE, &buf, &len);
	if (r == -ENOENT)
		return r;
	if (r == 0) {
		r = stg_tombstone_decode(buf, len, ret);
		free(buf);
	}
	if (r < 0)
		stg_log_errno(STG_LOG_WARN, r, "files: the deletion of '%s' is unreadable: its "
			      "versions stay", path);
	return r < 0 ? -ENOENT : 0;
}

int stg_files_delete(struct stg_files *f, uint32_t uid, const char *path,
		     const struct stg_tombstone *t)
{
	if (check_path(path) < 0 || t->upto == 0)
		return -EINVAL;
	int fd = open_file(f, uid, path, false, LOCK_EX);
	if (fd == -ENOENT)
		return 0; /* nothing of it here */
	if (fd < 0)
		return fd;
	struct stg_tombstone held, now = *t;
	if (read_tombstone(fd, path, &held) == 0)
		now = stg_tombstone_merge(&held, t);
	uint8_t buf[STG_TOMBSTONE_SIZE];
	stg_tombstone_encode(&now, buf);
	int r = stg_write_file_atomic(fd, DELETED_FILE, buf, sizeof(buf), STG_WRITE_SYNCED);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	/* Without it in the heap, the next start finds it again. */
	if (r == 0 && pending_push(f, uid, path, stg_tombstone_expiry(&now)) < 0)
		f->incomplete = true;
	close(fd);
	return r;
}

int stg_files_withdraw(struct stg_files *f, uint32_t uid, const char *path, uint64_t version,
		       uint64_t manifest_hash)
{
	if (check_path(path) < 0 || version == 0)
		return -EINVAL;
	int fd = open_file(f, uid, path, false, LOCK_EX);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	uint8_t *mf;
	size_t len;
	int r = read_version(fd, version, &mf, &len);
	if (r == -ENOENT || r == -EBADMSG) {
		close(fd);
		return 0;
	}
	if (r == 0) {
		bool ours = stg_hash64(mf, len) == manifest_hash;
		free(mf);
		r = 0;
		if (ours && remove_version(f, uid, fd, path, version) == 0)
			r = fsync(fd) < 0 ? -errno : 1;
	}
	close(fd);
	return r;
}

/* Removes what an expired tombstone covers: those versions and their held
 * maps, then the tombstone (once they are all gone); *ret_gone counts the
 * versions. Returns 1 when the entry is left empty (then its path file goes
 * too, and the caller removes the directory), 0, or -errno (to try again). */
static int expire(struct stg_files *f, int filedirfd, const char *path, uint32_t uid,
		  int64_t now_ns, uint64_t *ret_gone)
{
	int r = lock_dir(filedirfd, LOCK_EX);
	if (r < 0)
		return r;
	struct stg_tombstone t;
	uint64_t *v = NULL;
	size_t n = 0, gone = 0, covered = 0;
	if (read_tombstone(filedirfd, path, &t) < 0 || !stg_tombstone_expired(&t, now_ns))
		goto out; /* none, or a merge extended it: its own turn comes */
	r = stg_catalog_versions(filedirfd, &v, &n);
	for (size_t i = 0; r == 0 && i < n && v[i] <= t.upto; i++, covered++) {
		int e = remove_version(f, uid, filedirfd, path, v[i]);
		if (e < 0 && e != -ENOENT)
			r = e;
		gone += e == 0;
	}
	*ret_gone += gone;
	if (r == 0) {
		unlinkat(filedirfd, DELETED_FILE, 0);
		if (covered == n) {
			unlinkat(filedirfd, PATH_FILE, 0);
			r = 1;
		}
	}
	fsync(filedirfd);
	free(v);
	if (gone)
		stg_log(STG_LOG_INFO, "files: '%s' (uid %" PRIu32 "): %zu %s versions collected", path,
			uid, gone, t.flags & STG_TOMBSTONE_RENAMED ? "renamed-away" : "deleted");
out:
	lock_dir(filedirfd, LOCK_UN);
	return r;
}

/* Expires one deletion that came due; an entry left empty goes. Returns 0
 * or -errno (to try again). */
static int expire_entry(struct stg_files *f, uint32_t uid, const char *path, int64_t now_ns,
			uint64_t *ret_gone)
{
	char uidname[16], id[STG_HASH_HEX_LEN + 1];
	snprintf(uidname, sizeof(uidname), "%" PRIu32, uid);
	stg_catalog_file_id(path, id);
	int ufd = openat(f->fd, uidname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ufd < 0)
		return errno == ENOENT ? 0 : -errno;
	int ffd = openat(ufd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = ffd < 0 ? (errno == ENOENT ? 0 : -errno) : same_path(ffd, path);
	if (r == 1)
		r = expire(f, ffd, path, uid, now_ns, ret_gone);
	if (r == 1 && unlinkat(ufd, id, AT_REMOVEDIR) == 0) {
		stg_pathindex_remove(f->paths, uid, path);
		/* A put may have made the entry anew and added its path in
		 * between. */
		if (faccessat(ufd, id, F_OK, 0) == 0 && stg_pathindex_add(f->paths, uid, path) < 0) {
			stg_log(STG_LOG_ERROR, "files: out of memory: '%s' is left out of listings "
				"until a restart", path);
			f->incomplete = true;
		}
	}
	if (ffd >= 0)
		close(ffd);
	close(ufd);
	return r == -ENOENT || r > 0 ? 0 : r;
}

uint64_t stg_files_expire(struct stg_files *f, int64_t now_ns)
{
	uint64_t gone = 0;
	struct pending p, *again = NULL;
	size_t nagain = 0, capagain = 0;
	while (pending_pop(f, now_ns, &p)) {
		int r = expire_entry(f, p.uid, p.path, now_ns, &gone);
		bool kept = r < 0 && STG_GROW(again, capagain, nagain + 1) == 0;
		if (r < 0)
			stg_log_errno(STG_LOG_WARN, r, "files: the deletion of '%s' (uid %" PRIu32 ") "
				      "cannot be applied now%s", p.path, p.uid,
				      kept ? ": tried again at the next collection" : "");
		if (kept) {
			again[nagain++] = p;
			continue;
		}
		if (r < 0)
			f->incomplete = true; /* the next start finds it again */
		free(p.path);
	}
	/* Pushed back once the due ones are out, so that each is tried once. */
	for (size_t i = 0; i < nagain; i++) {
		if (pending_push(f, again[i].uid, again[i].path, again[i].expiry_ns) < 0)
			f->incomplete = true;
		free(again[i].path);
	}
	free(again);
	return gone;
}

int stg_files_get(struct stg_files *f, uint32_t uid, const char *path, uint64_t version,
		  uint8_t **ret_mf, size_t *ret_len)
{
	if (check_path(path) < 0)
		return -EINVAL;
	/* Shared: a put cannot remove the newest version between our finding
	 * and reading it. */
	int fd = open_file(f, uid, path, false, LOCK_SH);
	if (fd < 0)
		return fd;
	int r = 0;
	if (version == 0) {
		uint64_t *v;
		size_t n;
		r = stg_catalog_versions(fd, &v, &n);
		if (r == 0) {
			if (n == 0)
				r = -ENOENT;
			else
				version = v[n - 1];
			free(v);
		}
	}
	if (r == 0)
		r = read_version(fd, version, ret_mf, ret_len);
	close(fd);
	return r;
}

typedef int (*manifest_fn)(void *arg, const char *path, const struct stg_manifest *m,
			   bool deleted);

/* A walk of manifests: for a listing (fn; deleted versions too with
 * deleted_too), or for the counting of references (owned_fn, with the uid
 * and held map). */
struct walk {
	manifest_fn fn;
	bool deleted_too;
	stg_files_owned_fn owned_fn;
	void *arg;
	uint32_t uid;
	struct stg_files *files;
};

/* The held map of version m of an entry into *ret_buf (to free), with
 * *ret_bits in it; NULL bits when the manifest was filed without one (by a
 * server of before held maps) or its map is unreadable: all its chunks count
 * as held then, as they did, so that no restore is lost to it. */
static int read_held(int filedirfd, const char *path, const struct stg_manifest *m,
		     uint8_t **ret_buf, const uint8_t **ret_bits)
{
	char name[40];
	held_name(m->version, name);
	size_t len;
	*ret_buf = NULL;
	*ret_bits = NULL;
	int r = stg_read_file(filedirfd, name, stg_heldmap_size(m->nchunks), ret_buf, &len);
	if (r == 0)
		r = stg_heldmap_decode(*ret_buf, len, m->version, m->nchunks, ret_bits);
	if (r < 0 && r != -ENOENT)
		stg_log_errno(STG_LOG_WARN, r, "files: the held map of '%s' version %" PRIu64
			      " is unreadable: all its chunks count as held", path, m->version);
	return r;
}

static int walk_one(const struct walk *w, int filedirfd, const char *path,
		    const struct stg_manifest *m, bool deleted)
{
	if (w->fn)
		return w->fn(w->arg, path, m, deleted);
	uint8_t *buf;
	const uint8_t *bits;
	read_held(filedirfd, path, m, &buf, &bits);
	int r = w->owned_fn(w->arg, w->uid, m, bits);
	free(buf);
	return r;
}

/* Calls the walk's function for each readable version of one entry, without
 * any lock held (it may put to the same path); a version removed meanwhile
 * is skipped. */
static int list_entry(int filedirfd, const char *path, const struct walk *w)
{
	uint64_t *v;
	size_t n;
	int r = stg_catalog_versions(filedirfd, &v, &n);
	if (r < 0)
		return r;
	struct stg_tombstone t;
	bool tomb = read_tombstone(filedirfd, path, &t) == 0;
	for (size_t i = 0; r == 0 && i < n; i++) {
		bool deleted = tomb && v[i] <= t.upto;
		/* A listing leaves out names renamed away, and deleted
		 * versions unless asked; the counting at a start takes them all. */
		if (deleted && w->fn && (!w->deleted_too || (t.flags & STG_TOMBSTONE_RENAMED)))
			continue;
		struct stg_manifest m;
		int e = stg_catalog_read(filedirfd, v[i], &m);
		if (e == -EPROTONOSUPPORT) {
			/* A newer server's: whoever counts references must know them all. */
			stg_log_errno(STG_LOG_ERROR, e, "files: '%s' version %" PRIu64 " has a "
				      "manifest format newer than this server reads", path, v[i]);
			r = e;
			break;
		}
		/* The counting at the start may skip only what will never
		 * read back either (gone, or damaged): a version read later
		 * would take back what it never gave. */
		if (e < 0 && w->owned_fn && e != -ENOENT && e != -EBADMSG) {
			r = e;
			break;
		}
		if (e < 0) {
			stg_log_errno(STG_LOG_DEBUG, e, "files: '%s' version %" PRIu64 " skipped",
				      path, v[i]);
			continue;
		}
		r = walk_one(w, filedirfd, path, &m, deleted);
		stg_manifest_done(&m);
	}
	free(v);
	return r;
}

/* Entry name of a user's directory, opened, with its path, if it is one:
 * its path file hashes to its name. Returns the descriptor, -ENOENT (not
 * an entry) or -errno. */
static int open_entry(int uidfd, const char *name, char path[PATH_MAX])
{
	if (strlen(name) != STG_HASH_HEX_LEN)
		return -ENOENT;
	int ffd = openat(uidfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ffd < 0)
		return errno == ENOENT || errno == ENOTDIR ? -ENOENT : -errno;
	int r = stg_catalog_read_path(ffd, path, PATH_MAX);
	if (r == 0) {
		char id[STG_HASH_HEX_LEN + 1];
		stg_catalog_file_id(path, id);
		if (strcmp(id, name) == 0)
			return ffd;
	}
	close(ffd);
	/* No path (a put cut short before its first version), or not its
	 * own: never an entry with versions of this path. */
	return r == 0 || r == -ENOENT || r == -ENODATA || r == -EBADMSG ? -ENOENT : r;
}

/* The walk of every entry of a user (the counting at the start), its
 * paths from the index. */
static int walk_uid(int uidfd, const struct walk *w)
{
	char **paths;
	size_t n;
	int r = stg_pathindex_find(w->files->paths, w->uid, "", &paths, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; r == 0 && i < n; i++) {
		char id[STG_HASH_HEX_LEN + 1];
		stg_catalog_file_id(paths[i], id);
		int ffd = openat(uidfd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (ffd < 0) {
			r = errno == ENOENT ? 0 : -errno;
			continue;
		}
		r = list_entry(ffd, paths[i], w);
		close(ffd);
	}
	free(paths);
	return r;
}

int stg_files_list(struct stg_files *f, uint32_t uid, const char *prefix, bool deleted_too,
		   manifest_fn fn, void *arg)
{
	char uidname[16];
	snprintf(uidname, sizeof(uidname), "%" PRIu32, uid);
	int ufd = openat(f->fd, uidname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ufd < 0)
		return errno == ENOENT ? 0 : -errno;
	struct walk w = {.fn = fn, .deleted_too = deleted_too, .arg = arg, .uid = uid, .files = f};
	char **paths;
	size_t n;
	int r = stg_pathindex_find(f->paths, uid, prefix ? prefix : "", &paths, &n);
	if (r < 0) {
		close(ufd);
		return r;
	}
	/* The entries' own locks are not taken: a listing reads what each
	 * holds, as a walk of the directory did; one removed meanwhile is
	 * skipped. */
	for (size_t i = 0; r == 0 && i < n; i++) {
		char id[STG_HASH_HEX_LEN + 1];
		stg_catalog_file_id(paths[i], id);
		int ffd = openat(ufd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (ffd < 0)
			continue;
		atomic_fetch_add_explicit(&f->listed, 1, memory_order_relaxed);
		if (same_path(ffd, paths[i]) == 1)
			r = list_entry(ffd, paths[i], &w);
		close(ffd);
	}
	free(paths);
	close(ufd);
	return r;
}

/* Calls fn with each user's directory under files/ (opened), until fn
 * returns non-zero. One that cannot be opened is skipped, and marks the
 * path index incomplete: the counting at the start and the path index
 * files need every user. */
static int foreach_uid(struct stg_files *f, int (*fn)(void *arg, uint32_t uid, int ufd),
		       void *arg)
{
	DIR *d = stg_opendir_at(f->fd, ".");
	if (!d)
		return -errno;
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(d))) {
		uint32_t uid;
		if (!parse_uid(de->d_name, &uid))
			continue;
		int ufd = openat(f->fd, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (ufd < 0) {
			stg_log_errno(STG_LOG_ERROR, -errno, "files: cannot open the entries of uid "
				      "%" PRIu32, uid);
			f->incomplete = true;
			continue;
		}
		r = fn(arg, uid, ufd);
		close(ufd);
	}
	closedir(d);
	return r;
}

/* "<uid>.paths" into out[24]. */
static void pathfile_name(uint32_t uid, char *out)
{
	snprintf(out, 24, "%" PRIu32 ".paths", uid);
}

static int64_t mtime_ns(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -1;
	return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

/* Takes uid's paths (and pending deletions) from the index file its last
 * clean stop wrote, if there is one that checks out and the user's
 * directory has not changed since. The file is removed, read or not: the
 * server changes the entries from now on. Returns 1 (taken), 0 (to walk)
 * or -ENOMEM. */
static int index_from_file(struct stg_files *f, uint32_t uid, int ufd)
{
	char name[24];
	pathfile_name(uid, name);
	uint8_t *buf;
	size_t len;
	int r = stg_read_file(f->fd, name, SIZE_MAX, &buf, &len);
	if (r == -ENOENT)
		return 0;
	unlinkat(f->fd, name, 0);
	f->files_consumed = true;
	struct stg_pathfile_entry *v = NULL;
	size_t n = 0;
	int64_t mtime = 0;
	if (r == 0) {
		r = stg_pathfile_decode(buf, len, uid, &mtime, &v, &n);
		free(buf);
	}
	if (r == -ENOMEM)
		return r;
	if (r < 0) {
		stg_log_errno(STG_LOG_WARN, r, "files: the path index of uid %" PRIu32 " cannot be "
			      "read: its entries are read instead", uid);
		return 0;
	}
	if (mtime != mtime_ns(ufd)) {
		stg_log(STG_LOG_INFO, "files: the entries of uid %" PRIu32 " changed since the "
			"server stopped: they are read instead of its path index", uid);
		free(v);
		return 0;
	}
	for (size_t i = 0; r == 0 && i < n; i++) {
		r = stg_pathindex_add(f->paths, uid, v[i].path);
		if (r == 0 && v[i].expiry_ns)
			r = pending_push(f, uid, v[i].path, v[i].expiry_ns);
	}
	free(v);
	return r < 0 ? r : 1;
}

static int index_uid(void *arg, uint32_t uid, int ufd)
{
	struct stg_files *f = arg;
	int r = index_from_file(f, uid, ufd);
	if (r != 0)
		return r < 0 ? r : 0;
	DIR *d = stg_opendir_at(ufd, ".");
	if (!d) {
		stg_log_errno(STG_LOG_ERROR, -errno, "files: cannot list the entries of uid "
			      "%" PRIu32, uid);
		f->incomplete = true;
		return 0;
	}
	struct dirent *de;
	while (r == 0 && (de = readdir(d))) {
		char path[PATH_MAX];
		int ffd = open_entry(ufd, de->d_name, path);
		if (ffd < 0) {
			if (ffd != -ENOENT) {
				stg_log_errno(STG_LOG_ERROR, ffd, "files: cannot read the entry "
					      "'%s' of uid %" PRIu32, de->d_name, uid);
				f->incomplete = true;
			}
			continue;
		}
		f->paths_read++;
		r = stg_pathindex_add(f->paths, uid, path);
		struct stg_tombstone t;
		if (r == 0 && read_tombstone(ffd, path, &t) == 0)
			r = pending_push(f, uid, path, stg_tombstone_expiry(&t));
		close(ffd);
	}
	closedir(d);
	return r;
}

/* Fills the path index from every entry of every user: once, when the
 * server opens its store. */
static int index_paths(struct stg_files *f)
{
	int r = foreach_uid(f, index_uid, f);
	/* The files are gone before anything changes: a crash from now on
	 * leaves none to be taken for what it no longer describes. */
	if (r == 0 && f->files_consumed && fsync(f->fd) < 0)
		r = -errno;
	return r;
}

/* Parses a uid directory name: decimal, no leading zeros, 32 bits. */
static bool parse_uid(const char *name, uint32_t *ret)
{
	uint64_t v = 0;
	size_t len = strlen(name);
	if (len == 0 || len > 10 || (name[0] == '0' && len > 1))
		return false;
	for (size_t i = 0; i < len; i++) {
		if (name[i] < '0' || name[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(name[i] - '0');
	}
	if (v > UINT32_MAX)
		return false;
	*ret = (uint32_t)v;
	return true;
}

struct owned_walk {
	struct stg_files *f;
	stg_files_owned_fn fn;
	void *arg;
};

static int walk_one_uid(void *arg, uint32_t uid, int ufd)
{
	struct owned_walk *o = arg;
	struct walk w = {.owned_fn = o->fn, .arg = o->arg, .uid = uid, .files = o->f};
	return walk_uid(ufd, &w);
}

int stg_files_foreach(struct stg_files *f, stg_files_owned_fn fn, void *arg)
{
	struct owned_walk o = {.f = f, .fn = fn, .arg = arg};
	stg_files_expire(f, stg_now_ns());
	int r = foreach_uid(f, walk_one_uid, &o);
	return r == 0 && f->incomplete ? -EIO : r;
}

struct pending_path {
	const char *path;
	int64_t expiry_ns;
};

static int cmp_pending_path(const void *a, const void *b)
{
	return strcmp(((const struct pending_path *)a)->path,
		      ((const struct pending_path *)b)->path);
}

/* Writes uid's index file: its paths, each with the latest expiry pushed
 * for it (a merge pushes again; the latest is the tombstone's). */
static int save_uid(void *arg, uint32_t uid, int ufd)
{
	struct stg_files *f = arg;
	char **paths;
	size_t n, np = 0;
	int r = stg_pathindex_find(f->paths, uid, "", &paths, &n);
	if (r < 0)
		return r;
	struct stg_pathfile_entry *v = calloc(n ? n : 1, sizeof(*v));
	pthread_mutex_lock(&f->lock);
	struct pending_path *p = malloc((f->nheap ? f->nheap : 1) * sizeof(*p));
	for (size_t i = 0; p && i < f->nheap; i++)
		if (f->heap[i].uid == uid)
			p[np++] = (struct pending_path){f->heap[i].path, f->heap[i].expiry_ns};
	if (v && p) {
		qsort(p, np, sizeof(*p), cmp_pending_path);
		for (size_t i = 0, j = 0; i < n; i++) {
			v[i].path = paths[i];
			while (j < np && strcmp(p[j].path, paths[i]) < 0)
				j++;
			for (; j < np && strcmp(p[j].path, paths[i]) == 0; j++)
				if (p[j].expiry_ns > v[i].expiry_ns)
					v[i].expiry_ns = p[j].expiry_ns;
		}
	}
	pthread_mutex_unlock(&f->lock);
	uint8_t *buf = NULL;
	size_t len;
	r = v && p ? stg_pathfile_encode(uid, mtime_ns(ufd), v, n, &buf, &len) : -ENOMEM;
	if (r == 0) {
		char name[24];
		pathfile_name(uid, name);
		r = stg_write_file_atomic(f->fd, name, buf, len, STG_WRITE_SYNCED);
	}
	free(buf);
	free(p);
	free(v);
	free(paths);
	return r;
}

int stg_files_save(struct stg_files *f)
{
	if (f->incomplete)
		return -EIO; /* the next start reads every entry */
	int r = foreach_uid(f, save_uid, f);
	if (r == 0 && fsync(f->fd) < 0)
		r = -errno;
	return r;
}

void stg_files_stats(struct stg_files *f, struct stg_files_stats *ret)
{
	ret->paths = stg_pathindex_count(f->paths);
	ret->paths_read_at_open = f->paths_read;
	ret->entries_listed = atomic_load_explicit(&f->listed, memory_order_relaxed);
}
