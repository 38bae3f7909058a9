/* SPDX-License-Identifier: MIT */
/* An open captured file: a shadow file in the cache that the application
 * reads and writes through a real descriptor, committed as a version at close. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "builder.h"
#include "catalog.h"
#include "internal.h"
#include "log.h"
#include "materialize.h"
#include "pending.h"
#include "real.h"
#include "util.h"
#include "version.h"

#define XATTR_PATH "user.stagehand.path"
/* A shadow's mtime is parked here after each commit: any later write moves it. */
#define SENTINEL_SEC 1

/* Flags that shape how a descriptor behaves, as opposed to how open() finds
 * or creates the file. */
#define KEEP_FLAGS (O_ACCMODE | O_APPEND | O_DIRECT | O_SYNC | O_DSYNC | O_NONBLOCK | O_NOATIME)

static int64_t ts_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

static bool is_sentinel(const struct stat *st)
{
	return st->st_mtim.tv_sec == SENTINEL_SEC && st->st_mtim.tv_nsec == 0;
}

static int park_mtime(int fd)
{
	struct timespec t[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = SENTINEL_SEC}};
	return futimens(fd, t) < 0 ? -errno : 0;
}

static int create_shadow(const char *path)
{
	/* The cache is refused where there is no O_TMPFILE (stg_cache_open). */
	int fd = real_openat(shim.cache->tmp_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* Lets a program exec'd with this descriptor find out what it is. */
	if (real_fsetxattr(fd, XATTR_PATH, path, strlen(path), 0) < 0)
		stg_debug("no xattr on the shadow of '%s': exec'd children cannot commit it",
			  path);
	return fd;
}

static int copy_real_file(const char *path, int to)
{
	int from = real_open(path, O_RDONLY | O_CLOEXEC);
	if (from < 0)
		return -errno;
	int r = 0;
	for (;;) {
		ssize_t n = copy_file_range(from, NULL, to, NULL, 1 << 30, 0);
		if (n == 0)
			break;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
	}
	real_close(from);
	return r;
}

/* Do the parts in the cache of the job's version that part belongs to hold
 * every rank of the job? Only then is this node's view of the file the
 * whole file. */
static bool parts_complete(int filedirfd, const struct stg_part *part)
{
	uint64_t *v = NULL;
	size_t n = 0;
	if (stg_catalog_versions(filedirfd, &v, &n) < 0)
		return false;
	uint8_t *have = calloc(part->nranks_job, 1);
	uint32_t count = 0;
	for (size_t i = 0; have && i < n; i++) {
		struct stg_manifest m;
		if (stg_catalog_read(filedirfd, v[i], &m) < 0)
			continue;
		const struct stg_part *q = m.part;
		if (q && q->open == part->open && q->nranks_job == part->nranks_job &&
		    strcmp(q->job, part->job) == 0)
			for (uint32_t k = 0; k < q->nranks; k++)
				if (!have[q->ranks[k]]) {
					have[q->ranks[k]] = 1;
					count++;
				}
		stg_manifest_done(&m);
	}
	free(have);
	free(v);
	return count == part->nranks_job;
}

/* Rebuilds path's newest version into fd. A reader is refused one that is
 * this node's part of a job's version written on several nodes: the other
 * nodes' bytes are not here (-EIO, said in the log). */
static int materialize_latest(const char *path, int fd, bool reading)
{
	struct stg_catalog_file f;
	int r = stg_catalog_lock(shim.cache, path, false, &f);
	if (r < 0)
		return r;
	struct stg_manifest m;
	uint64_t latest;
	r = stg_catalog_read_newest(f.dirfd, &m, &latest);
	if (r == 0 && reading && m.part && !parts_complete(f.dirfd, m.part)) {
		shim_log(STG_LOG_ERROR,
			 "cannot read '%s': it is shared = job, and this node holds only "
			 "its part of version %llu (job %s); stagehand restore merges "
			 "the nodes' parts",
			 path, (unsigned long long)stg_version_seq(latest), m.part->job);
		stg_manifest_done(&m);
		stg_catalog_unlock(&f);
		return -EIO;
	}
	if (r == 0) {
		struct stg_materialize_error e;
		r = stg_materialize(shim.cache, &m, fd, NULL, NULL, &e);
		stg_manifest_done(&m);
	}
	if (r < 0 && latest)
		shim_log(STG_LOG_ERROR, "cannot read version %llu of '%s': %s",
			 (unsigned long long)stg_version_seq(latest), path,
			 r == -EBADMSG ? "its data in the cache is corrupt" : strerror(-r));
	stg_catalog_unlock(&f);
	return r;
}

struct session *session_find_path(const char *path)
{
	int fd;
	struct session *s;
	FDTABLE_EACH(fd, s)
		if (!s->readonly && !s->unlinked && strcmp(s->path, path) == 0)
			return s;
	return NULL;
}

int session_any_fd(const struct session *want)
{
	int fd;
	struct session *s;
	FDTABLE_EACH(fd, s)
		if (s == want)
			return fd;
	return -1;
}

/* Gives the application a descriptor with exactly the flags it asked for, at
 * the number the shadow got (the lowest free one, as open() promises). */
static int reopen_for_app(int shadow, int flags)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", shadow);
	int appfd = real_open(link, (flags & KEEP_FLAGS) | O_CLOEXEC);
	if (appfd < 0) {
		/* No /proc: keep the read-write descriptor, adjust what fcntl can. */
		real_fcntl(shadow, F_SETFL, flags & (O_APPEND | O_DIRECT | O_NONBLOCK | O_NOATIME));
		if (!(flags & O_CLOEXEC))
			real_fcntl(shadow, F_SETFD, 0);
		return shadow;
	}
	if (real_dup3(appfd, shadow, flags & O_CLOEXEC) < 0) {
		int r = -errno;
		real_close(appfd);
		return r;
	}
	real_close(appfd);
	return shadow;
}

static int check_parent(const char *path)
{
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%s", path);
	char *slash = strrchr(parent, '/');
	if (slash == parent)
		slash[1] = '\0';
	else if (slash)
		*slash = '\0';
	struct stat st;
	if (real_stat(parent, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Every process holding a captured file open holds a shared flock on a lock
 * file of its shadow (tmp/<dev>-<inode>.hold; not on the shadow itself, whose
 * locks are the application's). Whoever is last to let go commits: a shell
 * and the commands it redirected into one file make one version. */
static void holder_name(const struct session *s, char out[64])
{
	stg_cache_hold_name(s->dev, s->ino, out);
}

/* Opens the hold file (not locked yet) and maps its page (share.c). */
static void open_holder(struct session *s)
{
	char name[64];
	holder_name(s, name);
	int h = real_openat(shim.cache->tmp_fd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (h < 0)
		return; /* then every holder commits: more versions, nothing lost */
	s->holder_fd = h;
	shim_move_high(&s->holder_fd);
	/* A fork child keeps the parent's mapping. */
	if (!s->share)
		s->share = share_map(s->holder_fd);
}

static void drop_holder(struct session *s)
{
	shim_release_fd(s->holder_fd);
	real_close(s->holder_fd);
	s->holder_fd = -1;
}

/* Is the hold file we have still the one under its name? The collector
 * removes hold files nobody has locked, between our open and our flock. */
static bool holder_current(struct session *s)
{
	char name[64];
	holder_name(s, name);
	struct stat mine, named;
	return real_fstat(s->holder_fd, &mine) == 0 &&
	       fstatat(shim.cache->tmp_fd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
	       mine.st_ino == named.st_ino && mine.st_dev == named.st_dev;
}

static void take_holder(struct session *s, int fd)
{
	(void)fd;
	if (s->readonly)
		return;
	for (int tries = 0; tries < 8; tries++) {
		if (s->holder_fd < 0)
			open_holder(s);
		if (s->holder_fd < 0)
			return;
		if (flock(s->holder_fd, LOCK_SH) < 0) {
			drop_holder(s);
			return;
		}
		if (holder_current(s))
			return;
		drop_holder(s);
		share_unmap(s->share);
		s->share = NULL;
	}
}

/* Are we the last process holding it? Drops our own hold either way; the
 * last one removes the lock file. */
static bool last_holder(struct session *s)
{
	if (s->holder_fd < 0)
		return true;
	if (flock(s->holder_fd, LOCK_EX | LOCK_NB) < 0)
		return false;
	char name[64];
	holder_name(s, name);
	unlinkat(shim.cache->tmp_fd, name, 0);
	return true;
}

void session_free(struct session *s)
{
	fast_discard(s);
	prestage_finish(s);
	part_free(s->part);
	share_unmap(s->share);
	if (s->holder_fd >= 0) {
		shim_release_fd(s->holder_fd);
		real_close(s->holder_fd);
	}
	free(s);
}

void session_locks_after_fork(void)
{
	/* Another thread may have held one at the fork: start them afresh. */
	int fd;
	struct session *s;
	FDTABLE_EACH(fd, s) {
		pthread_mutex_init(&s->fast_lock, NULL);
		part_locks_after_fork(s->part);
		prestage_forget_after_fork(s);
	}
}

/* Before fork: each open captured file gets a hold of its own for the child,
 * taken now, so that no moment exists when the parent could let go thinking
 * itself the last holder while the child holds the file (flock locks belong
 * to the open file description the child would share until it takes its
 * own). The parent then drops its copy; the child's keeps the lock. */
void session_before_fork(void)
{
	int fd;
	struct session *s;
	FDTABLE_EACH(fd, s) {
		prestage_before_fork(s);
		if (s->holder_fd < 0 || s->fork_hold >= 0)
			continue;
		char name[64];
		holder_name(s, name);
		int h = real_openat(shim.cache->tmp_fd, name, O_RDWR | O_CLOEXEC);
		if (h >= 0 && flock(h, LOCK_SH) < 0) {
			real_close(h);
			h = -1;
		}
		s->fork_hold = h;
		if (h >= 0)
			shim_move_high(&s->fork_hold);
	}
}

void session_after_fork_parent(void)
{
	int fd;
	struct session *s;
	FDTABLE_EACH(fd, s) {
		prestage_after_fork_parent(s);
		if (s->fork_hold < 0)
			continue;
		shim_release_fd(s->fork_hold);
		real_close(s->fork_hold);
		s->fork_hold = -1;
	}
}

void session_after_fork(void)
{
	/* The child shares the parent's holder descriptors: it takes the one
	 * made for it before the fork (or a new one). */
	int fd;
	struct session *s;
	FDTABLE_EACH(fd, s) {
		if (s->holder_fd < 0 || s->forked)
			continue;
		int old = s->holder_fd;
		shim_release_fd(old);
		if (s->fork_hold >= 0) {
			shim_release_fd(s->fork_hold);
			s->holder_fd = s->fork_hold;
			s->fork_hold = -1;
			shim_reserve_fd(s->holder_fd, &s->holder_fd);
		} else {
			/* The parent's hold is on the description we share: let
			 * go of it first, or a parent converting it to exclusive
			 * would wait for us forever. */
			real_close(old);
			old = -1;
			s->holder_fd = -1;
			take_holder(s, fd);
		}
		if (old >= 0)
			real_close(old);
		s->forked = true;
	}
	FDTABLE_EACH(fd, s)
		s->forked = false;
}

/* A second open of a file this process is writing shares its shadow. */
static int share_open(struct session *s, int flags)
{
	int acc = flags & O_ACCMODE;
	if ((flags & O_CREAT) && (flags & O_EXCL))
		return -EEXIST;
	if (flags & O_DIRECTORY)
		return -ENOTDIR;
	int other = session_any_fd(s);
	if (other < 0)
		return -ENOENT;
	if (s->fast)
		fast_materialize(s, other);
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", other);
	int fd = real_open(link, (flags & KEEP_FLAGS) | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (!(flags & O_CLOEXEC))
		real_fcntl(fd, F_SETFD, 0);
	int r = 0;
	if ((flags & O_TRUNC) && acc != O_RDONLY && real_ftruncate(fd, 0) < 0)
		r = -errno;
	if (r == 0)
		r = fdtable_set(fd, s);
	if (r < 0) {
		real_close(fd);
		return r;
	}
	s->refs++;
	return fd;
}

static struct session *new_session(const char *path, const struct stg_path_rule *rule)
{
	struct session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	snprintf(s->path, sizeof(s->path), "%s", path);
	s->rule = rule;
	s->owner = getpid();
	s->keep_fd = -1;
	s->holder_fd = -1;
	s->fork_hold = -1;
	s->refs = 1;
	pthread_mutex_init(&s->fast_lock, NULL);
	pthread_mutex_init(&s->stage_lock, NULL);
	s->stage_fd = -1;
	s->commit_lock = -1;
	return s;
}

/* Joins live, the shadow another process of the node is writing path
 * through (found under the open lock, which the caller has released).
 * Returns the application's descriptor, -EAGAIN when that writing ended
 * meanwhile (open again), or -errno. */
static int join_live(const char *path, const struct stg_path_rule *rule, int flags, mode_t mode,
		     const struct stg_file_state *state, int live)
{
	int acc = flags & O_ACCMODE;
	bool writing = acc != O_RDONLY || (flags & O_TRUNC);
	int r = (flags & O_CREAT) && (flags & O_EXCL) ? -EEXIST
	      : flags & O_DIRECTORY		      ? -ENOTDIR
						      : 0;
	struct session *s = r == 0 ? new_session(path, rule) : NULL;
	if (!s) {
		real_close(live);
		return r < 0 ? r : -ENOMEM;
	}
	s->readonly = !writing;
	s->mode = state->exists ? state->mode : mode & ~shim.umask & 07777;
	s->base_mtime_ns = stg_now_ns();
	struct stat st;
	r = writing && rule->shared_job ? part_open(s, flags) : 0;
	if (r == 0 && real_fstat(live, &st) < 0)
		r = -errno;
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	if (r == 0)
		open_holder(s);
	uint32_t shared_mode;
	if (s->share && share_mode(s->share, &shared_mode))
		s->mode = shared_mode; /* its creator's, or a later chmod's */
	/* What a fast path elsewhere staged goes into the shadow first: the
	 * shadow is then the whole content, for reading and writing alike. */
	if (r == 0 && s->share) {
		/* Without shim.lock (session_open's, taken once): this process's
		 * other threads go on, among them one that may be the owner
		 * asked to hand over another file to another process. */
		pthread_mutex_unlock(&shim.lock);
		r = share_take_over(s->share, path);
		pthread_mutex_lock(&shim.lock);
	}
	int lk = r == 0 ? share_lock(path) : -1;
	if (r == 0 && lk < 0)
		r = lk;
	if (r == 0) {
		/* Still the live one? Its last writer may have committed it. */
		int again = share_open_live(path, O_RDONLY);
		struct stat now;
		if (again < 0 || real_fstat(again, &now) < 0 || now.st_ino != st.st_ino ||
		    now.st_dev != st.st_dev)
			r = -EAGAIN;
		if (again >= 0)
			real_close(again);
	}
	if (r == 0 && writing) {
		take_holder(s, live);
		if (s->share)
			share_set_joined(s->share);
		ranks_join(path, rule);
	}
	if (r == 0 && (flags & O_TRUNC) && acc != O_RDONLY) {
		struct stat before;
		if (real_fstat(live, &before) < 0 || real_ftruncate(live, 0) < 0)
			r = -errno;
		else
			part_resized(s, (uint64_t)before.st_size, 0);
	}
	share_unlock(lk);
	if (r == 0 && s->readonly && s->holder_fd >= 0) {
		/* A reader holds nothing: its mapped page was all it needed. */
		shim_release_fd(s->holder_fd);
		real_close(s->holder_fd);
		s->holder_fd = -1;
	}
	if (r == 0)
		r = reopen_for_app(live, flags);
	if (r >= 0 && (r = fdtable_set(live, s)) == 0) {
		part_opened(s);
		return live;
	}
	real_close(live);
	session_free(s);
	return r;
}

/* Opens path with no live shadow anywhere on the node (the caller holds the
 * open lock lk, and the catalog said state): a shadow of its own, named for
 * the processes that open it next when writing. */
static int open_new(const char *path, const struct stg_path_rule *rule, int flags, mode_t mode,
		    bool allow_fast, const struct stg_file_state *state)
{
	int acc = flags & O_ACCMODE;
	bool writing = acc != O_RDONLY || (flags & O_TRUNC);
	int r;
	bool visible = state->exists && !state->deleted;
	struct stat real_st;
	bool real_exists = false;
	if (!visible && real_stat(path, &real_st) == 0) {
		if (S_ISDIR(real_st.st_mode))
			return SESSION_PASS; /* a directory: not ours */
		real_exists = S_ISREG(real_st.st_mode);
	}
	if (!visible && !real_exists && !writing)
		return SESSION_PASS; /* nothing captured: the real open decides */
	if (!visible && !real_exists && !(flags & O_CREAT))
		return -ENOENT;
	if ((visible || real_exists) && (flags & O_CREAT) && (flags & O_EXCL))
		return -EEXIST;
	if (flags & O_DIRECTORY)
		return visible || real_exists ? -ENOTDIR : -ENOENT;
	if (!visible && !real_exists) {
		r = check_parent(path);
		if (r < 0)
			return r;
	}
	if (!visible && real_exists && !writing)
		return SESSION_PASS; /* a plain file the shim never captured */

	struct session *s = new_session(path, rule);
	if (!s)
		return -ENOMEM;
	s->readonly = !writing;
	if (writing && rule->shared_job && (r = part_open(s, flags)) < 0)
		goto out_free;
	bool truncate = (flags & O_TRUNC) && acc != O_RDONLY;
	if (writing && (r = ranks_begin(path, rule, (visible || real_exists) && !truncate &&
							  !(flags & O_APPEND))) < 0)
		goto out_free;
	int fd = create_shadow(path);
	if (fd < 0) {
		r = fd;
		goto out_free;
	}
	/* A new or truncated file keeps the shadow's fresh mtime: it is a change
	 * to commit even if nothing is written. Existing content is parked. */
	bool changed = truncate || (!visible && !real_exists);
	s->created = !visible && !real_exists;
	if (changed) {
		s->mode = visible ? state->mode : real_exists ? (real_st.st_mode & 07777)
							     : (mode & ~shim.umask & 07777);
		s->base_mtime_ns = stg_now_ns();
	} else if (visible) {
		r = materialize_latest(path, fd, !writing);
		if (r < 0) {
			r = r == -ENOSPC ? r : -EIO;
			goto out_close;
		}
		s->mode = state->mode;
		s->base_mtime_ns = state->mtime_ns;
	} else {
		r = copy_real_file(path, fd);
		if (r < 0)
			goto out_close;
		s->mode = real_st.st_mode & 07777;
		s->base_mtime_ns = ts_ns(&real_st.st_mtim);
	}
	if (!changed)
		park_mtime(fd);
	struct stat st;
	if (fstat(fd, &st) == 0) {
		s->dev = st.st_dev;
		s->ino = st.st_ino;
	}
	r = reopen_for_app(fd, flags);
	if (r < 0)
		goto out_close;
	take_holder(s, fd);
	if (writing && s->share) {
		share_begin(s->share, s->mode);
		part_begin(s->holder_fd);
	}
	/* A truncation is a write: the bytes before it are not this node's. */
	if (truncate && visible)
		part_resized(s, state->size, 0);
	/* Other processes opening it from now on join this shadow. */
	if (writing && share_name(fd, path) < 0)
		stg_debug("'%s' cannot be shared with other processes: %s", path,
			  strerror(errno));
	/* A new or truncated file written by write() calls (not stdio: its
	 * writes bypass the hooks) can take the fast path. */
	if (changed && allow_fast && acc != O_RDONLY && !s->part && fast_enabled() &&
	    fast_start(s) < 0)
		stg_debug("no fast path for '%s'", path);
	r = fdtable_set(fd, s);
	if (r < 0)
		goto out_close;
	part_opened(s);
	return fd;
out_close:
	real_close(fd);
out_free:
	session_free(s);
	return r;
}

/* Opens path's newest version for reading, when nothing writes it live
 * (decided under the open lock, which the caller let go, as it did
 * shim.lock): the copy is made without either, so that reading a large file
 * back holds up neither this process's other threads nor the path's
 * writers. It is of the version newest when the copy begins; a reader's
 * shadow is its own. Returns the descriptor (shim.lock held again) or
 * -errno. */
static int open_committed(const char *path, const struct stg_path_rule *rule, int flags,
			  const struct stg_file_state *state)
{
	int r = (flags & O_CREAT) && (flags & O_EXCL) ? -EEXIST
	      : flags & O_DIRECTORY		      ? -ENOTDIR
						      : 0;
	int fd = r < 0 ? -1 : create_shadow(path);
	if (r == 0 && fd < 0)
		r = fd;
	if (r == 0) {
		r = materialize_latest(path, fd, true);
		if (r < 0)
			r = r == -ENOSPC || r == -ENOENT ? r : -EIO;
	}
	struct stat st;
	if (r == 0) {
		park_mtime(fd);
		if (real_fstat(fd, &st) < 0)
			r = -errno;
	}
	pthread_mutex_lock(&shim.lock);
	struct session *s = r == 0 ? new_session(path, rule) : NULL;
	if (r == 0 && !s)
		r = -ENOMEM;
	if (r == 0) {
		s->readonly = true;
		s->mode = state->mode;
		s->base_mtime_ns = state->mtime_ns;
		s->dev = st.st_dev;
		s->ino = st.st_ino;
		r = reopen_for_app(fd, flags);
	}
	if (r >= 0 && (r = fdtable_set(fd, s)) == 0)
		return fd;
	if (fd >= 0)
		real_close(fd);
	if (s)
		session_free(s);
	return r;
}

/* The newest version's manifest does not read (a disk that dropped its
 * writes): a new whole version does not need it and replaces it; anything
 * that would read it fails, and says how to go on. */
static int open_past_damage(const char *path, int flags, const struct stg_file_state *state,
			    int r)
{
	unsigned long long seq = stg_version_seq(state->damaged);
	const char *why = r == -EBADMSG ? "its manifest is corrupt" : strerror(-r);
	/* (a probe, which fails with ENOTDIR; or no version reads, and the
	 * path is as stat shows it: absent) */
	if ((flags & O_DIRECTORY) || !state->exists)
		return 0;
	if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY) {
		shim_log(STG_LOG_WARN, "version %llu of '%s' is damaged in the cache (%s); "
			 "the new version replaces it", seq, path, why);
		return 0;
	}
	shim_log(STG_LOG_ERROR, "version %llu of '%s' is damaged in the cache (%s): it cannot "
		 "be read or written on; an open with O_TRUNC writes a new version, and "
		 "`stagehand restore --version` gets an older one", seq, path, why);
	return r;
}

static int open_locked(const char *path, const struct stg_path_rule *rule, int flags, mode_t mode,
		       bool allow_fast)
{
	struct session *s = session_find_path(path);
	if (s)
		return share_open(s, flags);
	bool reading = (flags & O_ACCMODE) == O_RDONLY && !(flags & O_TRUNC);
	/* A writing that ends while we join it: open again, from its version. */
	for (int tries = 0; tries < 16; tries++) {
		int lk = share_lock(path);
		if (lk < 0)
			return lk;
		/* Under the lock: a last writer letting go commits under it too,
		 * so a new shadow starts from what it committed. A pending commit
		 * whose helper died is packed first. */
		if (background_settle_locked(path, rule) < 0) {
			share_unlock(lk);
			return -EIO;
		}
		struct stg_file_state state;
		int r = stg_catalog_state(shim.cache, path, &state);
		if (state.damaged)
			r = open_past_damage(path, flags, &state, r);
		int live = r < 0 ? r : share_open_live(path, reading ? O_RDONLY : O_RDWR);
		if (r == 0 && live < 0 && reading && state.exists && !state.deleted) {
			share_unlock(lk);
			pthread_mutex_unlock(&shim.lock);
			return open_committed(path, rule, flags, &state);
		}
		if (r < 0 || live < 0) {
			if (r == 0)
				r = open_new(path, rule, flags, mode, allow_fast, &state);
			share_unlock(lk);
			return r == -EBADMSG ? -EIO : r;
		}
		share_unlock(lk);
		r = join_live(path, rule, flags, mode, &state, live);
		if (r != -EAGAIN)
			return r;
	}
	return -EBUSY;
}

int session_open(const char *path, const struct stg_path_rule *rule, int flags, mode_t mode,
		 bool allow_fast)
{
	/* Before shim.lock: waiting for a helper packing the path must not hold
	 * up this process's other threads. */
	if (background_wait(path) < 0)
		return -EIO;
	/* One open at a time: two threads opening the same new file must end up
	 * sharing one shadow, not racing to make two. */
	pthread_mutex_lock(&shim.lock);
	int r = open_locked(path, rule, flags, mode, allow_fast);
	pthread_mutex_unlock(&shim.lock);
	return r;
}

/* The open version an fsync of this writing published (docs/FORMAT.md, "Open
 * versions"; 0: none): in the shared page, so that every process of the
 * writing knows it, whichever synced. */
static uint64_t open_version(struct session *s)
{
	return s->share ? share_open_version(s->share) : s->open_version;
}

static void set_open_version(struct session *s, uint64_t v)
{
	s->open_version = v;
	if (s->share)
		share_set_open_version(s->share, v);
}

/* The mode the version gets: the writing's, whichever process set it. */
static uint32_t version_mode(struct session *s)
{
	uint32_t mode;
	return s->share && share_mode(s->share, &mode) ? mode : s->mode;
}

/* chmod or utime since the last commit, nothing written: the newest version
 * takes them. -ENOENT when there is no version yet. */
static int amend_meta(struct session *s)
{
	uint32_t mode = version_mode(s);
	int r = stg_catalog_amend(shim.cache, s->path, &mode, s->mtime_set ? &s->mtime_ns : NULL,
				  s->rule->durability != STG_DURABILITY_ASYNC);
	if (r == 0) {
		s->meta_dirty = false;
		s->mtime_set = false;
		replicate_after_commit(s->path, s->rule, 0);
	}
	return r;
}

/* durability = local: from this size on, a file written through its shadow
 * is made durable the way the plain file would be. Its syncs and its last
 * close sync the shadow and record it as a pending commit, and the close
 * hands the packing to a helper (common/pending.h): the application goes on
 * while the disk takes its data, as after a plain fsync, instead of waiting
 * for it to be read, hashed and written again. Smaller files are packed at
 * once, in less time than the helper's start. */
#define PACK_LATER_MIN_BYTES (32ull << 20)

bool session_pack_later(const struct session *s, uint64_t size)
{
	return s->rule->durability == STG_DURABILITY_LOCAL && s->share && !s->part && !s->fast &&
	       size >= PACK_LATER_MIN_BYTES;
}

static bool pack_later(const struct session *s, const struct stat *st)
{
	return session_pack_later(s, (uint64_t)st->st_size);
}

/* A sync (open: the writing goes on) or the last close (the commit_lock
 * passes to the helper) of pack_later(). -EAGAIN when the content could
 * not be made a pending commit: the caller commits it at once. */
static int commit_pending(struct session *s, int fd, bool last, int64_t mtime, uint64_t replaces,
			  bool *ret_committed, int64_t *ret_version)
{
	struct stg_pending p = {.open = !last, .mode = version_mode(s), .mtime_ns = mtime,
				.replaces = replaces, .since_ns = share_begin_ns(s->share)};
	snprintf(p.path, sizeof(p.path), "%s", s->path);
	struct stat st;
	if (real_fstat(fd, &st) < 0)
		return -EAGAIN;
	p.size = (uint64_t)st.st_size;
	/* A sync's of this writing is replaced (the last holder, letting go,
	 * no longer holds it). Another's, unpacked (its packing failed), is a
	 * version before ours. */
	if (!stg_pending_content_is(shim.cache, s->path, fd) &&
	    background_settle_locked(s->path, s->rule) < 0)
		return -EIO;
	int r = stg_pending_write(shim.cache, fd, &p);
	if (r < 0) {
		stg_debug("'%s' is packed at once: %s", s->path, strerror(-r));
		return -EAGAIN;
	}
	*ret_committed = true;
	if (!last)
		return 0;
	s->meta_dirty = false;
	s->mtime_set = false;
	park_mtime(fd);
	if (background_pack(s, s->commit_lock) == 0)
		return 0;
	/* No helper: the content is durable, pack it now. */
	int64_t v = stg_pending_settle(shim.cache, s->path, s->rule);
	if (v < 0) {
		shim_log(STG_LOG_ERROR, "could not stage '%s': %s", s->path, strerror((int)-v));
		return v == -ENOSPC || v == -EDQUOT || v == -EFBIG ? (int)v : -EIO;
	}
	*ret_version = v;
	return replicate_after_commit(s->path, s->rule, v);
}

/* Commits the shadow's content if it changed; *ret_committed tells whether
 * it did (or handed it to a background commit), *ret_version what it
 * published. replaces: the writing's open version. A file this writing
 * created and leaves empty is published open too: it exists, but it is no
 * checkpoint (MPI-IO creates a shared file on one rank, closes it, then
 * opens it on all), so the next version supersedes it. */
static int commit_through(struct session *s, int fd, bool last, uint64_t replaces,
			  bool *ret_committed, int64_t *ret_version)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	/* The shadow's mtime is shared by every process holding it: whoever
	 * commits first parks it, so a file is committed once, not once per
	 * process that had it open (a shell and the command it redirected). */
	/* (A part commits even unchanged: its ranks must be counted.) */
	if (is_sentinel(&st) && !s->part) {
		if (!s->meta_dirty)
			return 0;
		int r = amend_meta(s);
		if (r != -ENOENT)
			return r;
	}
	/* A large file with durability = local: durable as a pending commit. */
	if (pack_later(s, &st) && s->commit_lock >= 0) {
		int64_t mtime = s->mtime_set ? s->mtime_ns
			      : is_sentinel(&st) ? s->base_mtime_ns : ts_ns(&st.st_mtim);
		int r = commit_pending(s, fd, last, mtime, replaces, ret_committed, ret_version);
		if (r != -EAGAIN)
			return r;
	}
	/* Park the mtime before reading: a write racing with this commit moves it
	 * again, so the next close stages it. The size is taken after parking,
	 * so that nothing written before the park is left out. */
	park_mtime(fd);
	int64_t mtime = s->mtime_set ? s->mtime_ns
		      : is_sentinel(&st) ? s->base_mtime_ns : ts_ns(&st.st_mtim);
	if (fstat(fd, &st) < 0)
		return -errno;
	/* async: a detached process commits, close() returns now. */
	/* (an empty new file is committed here: nothing to wait for, and it
	 * is published open, which the helper would not know) */
	if (last && s->rule->durability == STG_DURABILITY_ASYNC &&
	    !(s->created && st.st_size == 0) && !s->part &&
	    background_commit(s, fd, version_mode(s), mtime, replaces) == 0) {
		s->meta_dirty = false;
		s->mtime_set = false;
		*ret_committed = true;
		return 0;
	}
	struct stg_part *part = NULL;
	int r = part_build(s, last, (uint64_t)st.st_size, &part);
	if (r < 0)
		return -EIO;
	/* No rank of this node took part (MPI-IO's create pass of a file that
	 * exists): its content is the version it had, nothing to commit. A
	 * new file is committed, empty and open, so that others find it. */
	if (s->part && !part && !s->created)
		return 0;
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	int rfd = real_open(link, O_RDONLY | O_CLOEXEC);
	int64_t v = stg_commit_fd(shim.cache, s->path, s->rule, rfd >= 0 ? rfd : fd,
				  (uint64_t)st.st_size, version_mode(s), mtime,
				  !last || (s->created && st.st_size == 0), replaces, part,
				  s->share ? share_begin_ns(s->share) : 0);
	if (rfd >= 0)
		real_close(rfd);
	stg_part_free(part);
	if (v < 0) {
		/* Unpark: the content still has to be committed. */
		struct timespec now[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_nsec = UTIME_NOW}};
		futimens(fd, now);
		shim_log(STG_LOG_ERROR, "could not stage '%s': %s", s->path, strerror((int)-v));
		return v == -ENOSPC || v == -EDQUOT || v == -EFBIG ? (int)v : -EIO;
	}
	/* A sync's pending commit is superseded. */
	if (s->share)
		stg_pending_drop(shim.cache, s->path);
	s->base_mtime_ns = mtime;
	s->meta_dirty = false;
	s->mtime_set = false;
	*ret_committed = true;
	*ret_version = v;
	shim_log(STG_LOG_DEBUG, "staged '%s' version %lld (%lld bytes)", s->path,
		 (long long)stg_version_seq((uint64_t)v),
		 (long long)st.st_size);
	return replicate_after_commit(s->path, s->rule, v);
}

/* The content of the writing, through the fast path or the shadow. */
static int commit_content(struct session *s, int fd, bool last, uint64_t replaces,
			  bool *ret_committed, int64_t *ret_version)
{
	/* Another process joined: it has the shadow, and so do we. */
	if (s->fast && share_handover_requested(s->share) && fast_materialize(s, fd) < 0)
		return -EIO;
	if (!s->fast)
		return commit_through(s, fd, last, replaces, ret_committed, ret_version);
	/* In the fast path the shadow stays empty. If it is not, something
	 * wrote around the hooks (POSIX AIO's threads, io_uring, raw system
	 * calls): with nothing staged, the shadow simply is the content; with
	 * both, they cannot be merged, and nothing wrong is published. */
	/* The size tells: any write grows an empty file (st_blocks would not,
	 * an xattr block counts there). */
	struct stat st;
	if (real_fstat(fd, &st) == 0 && st.st_size > 0) {
		uint64_t size = 0;
		if (!fast_size(s, &size) || size == 0) {
			fast_discard(s);
			return commit_through(s, fd, last, replaces, ret_committed, ret_version);
		}
		s->broken = true;
		shim_log(STG_LOG_ERROR, "'%s' was written both through write() and around it "
			 "(asynchronous or raw I/O): it is not staged", s->path);
		return -EIO;
	}
	int r = fast_commit(s, last, replaces, ret_version);
	*ret_committed = *ret_version > 0;
	if (r == 0 && s->meta_dirty)
		r = amend_meta(s);
	return r;
}

static int commit_locked(struct session *s, int fd, bool last);
static bool follow_writing(struct session *s);

int session_commit(struct session *s, int fd, bool last)
{
	if (s->readonly || s->unlinked)
		return 0;
	/* What this process staged ahead, the commit (ours or the last
	 * holder's) finds in the index. */
	prestage_finish(s);
	/* A pending commit syncs the shadow under the open lock. A sync does
	 * the bulk of that here, without it, so that the processes writing
	 * the file wait for the disk at once, as their plain fsyncs would; a
	 * close starts the disk on what was written, for the last one's. */
	struct stat st;
	if (!s->fast && real_fstat(fd, &st) == 0 && pack_later(s, &st)) {
		if (last)
			sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
		else
			fdatasync(fd);
	}
	/* Under the open lock: the processes writing the file sync and close
	 * one at a time, so each finds the open version the last sync made.
	 * The lock of the name the writing has now: another process may have
	 * renamed it, and its shadow's name went along (share_moved). A few
	 * tries: a writing renamed again at every turn is committed under the
	 * last lock taken, and commit_locked() sees that it moved on. */
	int lk = share_lock(s->path);
	for (int i = 0; lk >= 0 && i < 8; i++) {
		char was[PATH_MAX];
		snprintf(was, sizeof(was), "%s", s->path);
		if (!follow_writing(s) || strcmp(was, s->path) == 0)
			break;
		share_unlock(lk);
		lk = share_lock(s->path);
	}
	int r = 0;
	/* A pending commit is written under it; the close's helper takes it
	 * over. */
	s->commit_lock = lk;
	if (!last) {
		r = commit_locked(s, fd, false);
	} else if (!last_holder(s)) {
		/* Who lets go last commits, decided under the lock (a process
		 * joining meanwhile either is a holder already, or opens after
		 * the commit and the shadow's name are gone). Another process
		 * goes on: what our fast path staged goes to the shadow first. */
		if (s->fast)
			r = fast_materialize(s, fd);
		if (r == 0)
			r = part_leave(s);
	} else {
		r = commit_locked(s, fd, true);
		share_unname(fd, s->path);
	}
	s->commit_lock = -1;
	share_unlock(lk);
	return r;
}

/* What other processes of the writing did to it meanwhile: a rename gives it
 * another path, an unlink leaves nothing to commit (false). */
static bool follow_writing(struct session *s)
{
	if (!s->share)
		return true;
	if (share_gone(s->share))
		return false;
	if (share_broken(s->share))
		s->broken = true;
	char np[PATH_MAX];
	if (share_path(s->share, np, sizeof(np)) && strcmp(np, s->path) != 0) {
		const struct stg_path_rule *rule = shim_match(np);
		if (!rule)
			return false; /* renamed out of the captured area */
		snprintf(s->path, sizeof(s->path), "%s", np);
		s->rule = rule;
		if (s->fast)
			fast_renamed(s);
	}
	return true;
}

static int commit_locked(struct session *s, int fd, bool last)
{
	char locked[PATH_MAX];
	snprintf(locked, sizeof(locked), "%s", s->path);
	bool going = follow_writing(s);
	/* Renamed meanwhile: the lock held is the old path's, under which no
	 * pending commit of the new one may be written. */
	if (strcmp(locked, s->path) != 0)
		s->commit_lock = -1;
	if (!going || s->broken) {
		/* Nothing of the writing is committed, a sync's record neither. */
		if (s->commit_lock >= 0)
			stg_pending_drop(shim.cache, s->path);
		if (!going)
			return 0;
		shim_log(STG_LOG_ERROR, "'%s' is not staged: its content was lost track of", s->path);
		return -EIO;
	}
	/* fsync publishes an open version; the writing's next commit replaces
	 * it, and a close with nothing new closes it: one version per
	 * checkpoint, however often it was synced. */
	uint64_t open = open_version(s);
	bool committed = false;
	int64_t v = 0;
	int r = commit_content(s, fd, last, open, &committed, &v);
	if (r < 0)
		return r;
	if (committed) {
		if (v > 0 || last)
			set_open_version(s, last ? 0 : (uint64_t)v);
		return 0;
	}
	if (!last || !open)
		return 0;
	int64_t c = stg_commit_close(shim.cache, s->path, s->rule, open);
	set_open_version(s, 0);
	if (c == -ENOENT)
		return 0; /* gone meanwhile (renamed over): nothing left to close */
	if (c < 0) {
		shim_log(STG_LOG_ERROR, "could not close version %llu of '%s': %s",
			 (unsigned long long)stg_version_seq(open), s->path, strerror((int)-c));
		return c == -ENOSPC || c == -EDQUOT ? (int)c : -EIO;
	}
	return replicate_after_commit(s->path, s->rule, c);
}

void session_discard_fd(int fd)
{
	pthread_mutex_lock(&shim.lock);
	struct session *s = fdtable_get(fd);
	fdtable_set(fd, NULL);
	if (s && --s->refs == 0)
		session_free(s);
	pthread_mutex_unlock(&shim.lock);
}

int session_release_fd(int fd)
{
	pthread_mutex_lock(&shim.lock);
	struct session *s = fdtable_get(fd);
	if (!s) {
		pthread_mutex_unlock(&shim.lock);
		return 0;
	}
	fdtable_set(fd, NULL);
	if (s->refs <= 0) {
		/* Settled at exit already (session_exit): nothing more to do. */
		pthread_mutex_unlock(&shim.lock);
		return 0;
	}
	int r = 0;
	if (--s->refs > 0) {
		pthread_mutex_unlock(&shim.lock);
		return 0;
	}
	if (s->nmaps > 0 && !s->readonly) {
		/* Writes through a mapping may still come: commit at munmap(). */
		s->keep_fd = real_fcntl(fd, F_DUPFD_CLOEXEC, SHIM_HIGH_FD);
		if (s->keep_fd < 0)
			s->keep_fd = real_fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (s->keep_fd >= 0) {
			shim_reserve_fd(s->keep_fd, &s->keep_fd);
			pthread_mutex_unlock(&shim.lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&shim.lock);
	r = session_commit(s, fd, true);
	if (s->nmaps > 0)
		mapping_forget(s); /* no descriptor to keep: commit now */
	session_free(s);
	return r;
}

void session_fix_stat(struct session *s, struct stat *st)
{
	/* One identity for a captured file, through a descriptor or by name, in
	 * every process: cp and tar compare them. */
	struct stat cache_st;
	if (real_fstat(shim.cache->dirfd, &cache_st) == 0)
		st->st_dev = cache_st.st_dev;
	st->st_ino = (ino_t)stg_catalog_ino(s->path);
	st->st_mode = S_IFREG | s->mode;
	st->st_nlink = 1;
	uint64_t size;
	if (fast_size(s, &size)) {
		st->st_size = (off_t)size;
		st->st_blocks = (blkcnt_t)((size + 511) / 512);
		return; /* the shadow's mtime is not the file's here: now is */
	}
	if (is_sentinel(st)) {
		st->st_mtim.tv_sec = s->base_mtime_ns / 1000000000;
		st->st_mtim.tv_nsec = s->base_mtime_ns % 1000000000;
		st->st_ctim = st->st_mtim;
	}
}

void session_renamed(const char *oldpath, const char *newpath)
{
	size_t ol = strlen(oldpath);
	int fd;
	struct session *s;
	pthread_mutex_lock(&shim.lock);
	FDTABLE_EACH(fd, s) {
		if (strncmp(s->path, oldpath, ol) != 0 || (s->path[ol] && s->path[ol] != '/'))
			continue;
		char np[PATH_MAX];
		int n = snprintf(np, sizeof(np), "%s%s", newpath, s->path + ol);
		if (n > 0 && (size_t)n < sizeof(np)) {
			memcpy(s->path, np, (size_t)n + 1);
			const struct stg_path_rule *rule = shim_match(np);
			if (rule)
				s->rule = rule;
			if (s->fast)
				fast_renamed(s);
		}
	}
	pthread_mutex_unlock(&shim.lock);
}

void session_reminted(const char *path, const struct stg_catalog_moved *moved)
{
	int fd;
	struct session *s;
	if (moved->from == moved->to)
		return;
	pthread_mutex_lock(&shim.lock);
	FDTABLE_EACH(fd, s)
		if (strcmp(s->path, path) == 0 && open_version(s) == moved->from)
			set_open_version(s, moved->to);
	pthread_mutex_unlock(&shim.lock);
}

void session_unlinked(const char *path)
{
	int fd;
	struct session *s;
	pthread_mutex_lock(&shim.lock);
	FDTABLE_EACH(fd, s)
		if (strcmp(s->path, path) == 0)
			s->unlinked = true;
	pthread_mutex_unlock(&shim.lock);
}

static void adopt_fd(int fd)
{
	char link[64], target[PATH_MAX];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n <= 0)
		return;
	target[n] = '\0';
	if (strncmp(target, shim.tmp_prefix, strlen(shim.tmp_prefix)) != 0)
		return;
	char path[PATH_MAX];
	ssize_t pl = real_fgetxattr(fd, XATTR_PATH, path, sizeof(path) - 1);
	if (pl <= 0 || path[0] != '/')
		return;
	path[pl] = '\0';
	const struct stg_path_rule *rule = shim_match(path);
	struct stat st;
	if (!rule || fstat(fd, &st) < 0)
		return;
	struct session *same = NULL, *x;
	int ofd;
	FDTABLE_EACH(ofd, x)
		if (x->dev == st.st_dev && x->ino == st.st_ino)
			same = x;
	if (same) {
		if (fdtable_set(fd, same) == 0)
			same->refs++;
		return;
	}
	struct session *s = new_session(path, rule);
	if (!s)
		return;
	s->adopted = true;
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	struct stg_file_state state;
	if (stg_catalog_state(shim.cache, path, &state) == 0 && state.exists) {
		s->mode = state.mode;
		s->base_mtime_ns = state.mtime_ns;
	} else {
		s->mode = 0666 & ~shim.umask;
		s->base_mtime_ns = stg_now_ns();
	}
	if (fdtable_set(fd, s) < 0) {
		session_free(s);
		return;
	}
	take_holder(s, fd);
}

void session_adopt_inherited(void)
{
	if (!shim_cache())
		return;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	int self = dirfd(d);
	struct dirent *de;
	pthread_mutex_lock(&shim.lock);
	while ((de = readdir(d))) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);
		if (*end || end == de->d_name || fd == self)
			continue;
		adopt_fd((int)fd);
	}
	pthread_mutex_unlock(&shim.lock);
	closedir(d);
}

void session_exit(bool flush_stdio)
{
	bool any_adopted = false;
	int fd;
	struct session *s;
	pid_t self = getpid();
	pthread_mutex_lock(&shim.lock);
	FDTABLE_EACH(fd, s)
		any_adopted |= s->adopted || s->owner != self || fd <= STDERR_FILENO;
	pthread_mutex_unlock(&shim.lock);
	/* stdio flushes after the destructors run; an inherited stdout needs its
	 * buffered bytes in the shadow before the commit. */
	if (any_adopted && flush_stdio)
		fflush(NULL);
	pthread_mutex_lock(&shim.lock);
	FDTABLE_EACH(fd, s) {
		if (s->readonly || s->unlinked || s->refs <= 0)
			continue;
		/* Exit closes what the program inherited (through exec or fork) and
		 * its standard streams (a redirection): those commit like a close,
		 * if no other process still holds them. A file the program opened
		 * itself and never closed does not: it may be half-written. */
		if (s->adopted || s->owner != self || fd <= STDERR_FILENO) {
			session_commit(s, fd, true);
		} else {
			shim_log(STG_LOG_WARN,
				 "'%s' was never closed: what was written since its last close "
				 "or fsync is not staged",
				 s->path);
		}
		s->refs = 0; /* once per session, whatever other fds share it */
	}
	pthread_mutex_unlock(&shim.lock);
	mapping_exit();
}
