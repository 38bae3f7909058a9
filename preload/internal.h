/* SPDX-License-Identifier: MIT */
/* Declarations shared by the shim's files; nothing here is exported. */
#pragma once

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "cache.h"
#include "catalog.h"
#include "manifest.h"
#include "policy.h"

/* ---- shim.c: global state, the re-entry guard, logging ---- */

struct shim {
	bool ready;    /* policy loaded and valid */
	bool disabled; /* passthrough for good: bad policy, unusable cache */
	struct stg_policy *policy;
	struct stg_cache *cache; /* opened at the first captured path */
	bool cache_failed;
	char tmp_prefix[PATH_MAX]; /* "<cache>/tmp/" for recognising shadows */
	pid_t pid;
	mode_t umask;
	pthread_mutex_t lock; /* sessions, the fd table, dir streams */
};

extern struct shim shim;

/* True while this thread runs shim code: its own I/O goes straight to libc. */
extern __thread int shim_busy __attribute__((tls_model("initial-exec")));

/* Syscall User Dispatch (dispatch.c): the byte the kernel reads at every
 * system call made outside libc; turning it on for this thread; start-up. */
extern __thread char dispatch_selector __attribute__((tls_model("initial-exec")));
static inline void dispatch_guard(void)
{
	dispatch_selector = 1; /* SYSCALL_DISPATCH_FILTER_BLOCK */
}
void dispatch_thread_on(void);
void dispatch_init(void);

/* true with *ret set (libc's convention: -1 and errno) when system call nr
 * with arguments a is one the shim handles and names a captured path or
 * descriptor: made through the shim's wrapper (syscall.c). */
bool syscall_route(long nr, const long *a, long *ret);

/* Closes the files opened for posix_spawn open actions (spawn_actions.c). */
void spawn_actions_release_all(void);

/* Runs the lazy parts of start-up; false means pass everything through. */
bool shim_active(void);

/* The cache, opened on first use; NULL (with a warning, once) if unusable. */
struct stg_cache *shim_cache(void);

void shim_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The shim's own long-lived descriptors live at or above this number, out of
 * the way of the application's, and are protected from its close() calls. */
#define SHIM_HIGH_FD 800

/* Registers fd as the shim's own: *where holds it, and is updated if the
 * application dup2()s over the number. */
void shim_reserve_fd(int fd, int *where);
void shim_release_fd(int fd);
/* Is fd one of the shim's own? */
bool shim_fd_reserved(int fd);
/* Moves the shim's own descriptor away from fd (dup2 is about to reuse it). */
void shim_fd_evict(int fd);
/* How many descriptors the shim holds. */
size_t shim_reserved_count(void);
/* The reserved descriptors within [first, last], sorted; returns the count. */
size_t shim_reserved_in(unsigned first, unsigned last, int *out, size_t max);
/* shim_move_high for the library's hook. */
void shim_keep_fd(int *fd);
/* In a fork child: the registry's lock starts afresh. */
void shim_fdguard_after_fork(void);
/* Moves *fd up among the shim's own numbers and reserves it. */
int shim_move_high(int *fd);

/* ---- path.c: resolving and matching the application's paths ---- */

/* Makes path absolute (relative to dirfd) and normalized into out. */
int shim_abspath(int dirfd, const char *path, char *out, size_t outlen);

/* The rule for an absolute path, or NULL when it is not captured. */
const struct stg_path_rule *shim_match(const char *abspath);

/* Resolves (dirfd, path) and matches it: returns the rule and fills abspath,
 * or NULL for paths that are not captured (including when the shim is off). */
const struct stg_path_rule *shim_resolve(int dirfd, const char *path, char *abspath,
					 size_t len);

/* Does path end the way only a directory's name can ("d/", "d/.")? Its
 * normalized form has lost that: a captured file so named is ENOTDIR. */
bool shim_dir_suffix(const char *path);

/* ---- session.c: an open captured file backed by a shadow file ---- */

struct session {
	char path[PATH_MAX];
	const struct stg_path_rule *rule;
	uint32_t mode;        /* permission bits the file will have */
	int refs;             /* descriptors of this process referring to it */
	int nmaps;            /* writable shared mappings still mapped */
	int keep_fd;          /* our own descriptor while mappings outlive the fds */
	int holder_fd;        /* our flock'ed descriptor: see take_holder() */
	int fork_hold;        /* the hold taken for a child while forking */
	bool forked;          /* scratch flag of session_after_fork() */
	pid_t owner;          /* only the owner commits */
	bool readonly;        /* opened for reading: never commits */
	bool adopted;         /* inherited through exec: commits at exit too */
	bool unlinked;        /* the application removed the path meanwhile */
	dev_t dev;            /* the shadow's inode */
	ino_t ino;
	int64_t base_mtime_ns;
	bool meta_dirty;      /* chmod/utime since the last commit */
	bool mtime_set;       /* the application set the mtime: mtime_ns */
	int64_t mtime_ns;
	struct fast *fast;    /* the sequential fast path, while it lasts */
	pthread_mutex_t fast_lock; /* guards fast, and it ending */
	bool broken;          /* content lost track of: the next commit fails */
	bool created;         /* the open created the file (it had no version) */
	uint64_t open_version; /* without a shared page: this process's */
	struct share_page *share; /* the hold file's page (share.c), or NULL */
	struct part *part;    /* shared = job: this process's part (part.c), or NULL */
	int commit_lock;      /* the open lock (of path), while a sync or close commits under it */
	/* Chunks staged ahead of the commit (prestage.c), under stage_lock: */
	pthread_mutex_t stage_lock;
	struct stg_builder *stage; /* NULL until a chunk is written whole */
	const struct stg_path_rule *stage_rule; /* the rule stage was made for */
	int stage_fd;              /* the shadow, for reading them back */
	uint64_t stage_bytes;      /* staged since last kept */
	bool stage_fork_locked;    /* stage_lock taken for a fork */
	bool stage_off;            /* given up: the commit stages everything */
};

/* Opens path (captured under rule) as the application asked; returns the new
 * descriptor, -errno, or SESSION_PASS when the real open() should handle it. */
#define SESSION_PASS INT_MIN
int session_open(const char *abspath, const struct stg_path_rule *rule, int flags, mode_t mode,
		 bool allow_fast);

/* Commits the session's current content through fd if it changed; last when
 * the file is being closed. Returns 0 or -errno. */
int session_commit(struct session *s, int fd, bool last);

/* The application is dropping fd (close, dup2 over it, close_range). Commits
 * when it was the last reference. Returns 0 or -errno (the commit's error). */
int session_release_fd(int fd);

/* Forgets fd without committing (a failed fdopen, a descriptor closed behind
 * the shim's back). */
void session_discard_fd(int fd);

/* The descriptor of a session with the lowest number, or -1 (caller holds
 * shim.lock). */
int session_any_fd(const struct session *s);

/* A stat of an open session's shadow, made to look like the captured file. */
void session_fix_stat(struct session *s, struct stat *st);

/* Releases a session of this process (its descriptors are gone). */
void session_free(struct session *s);

/* In a fork child: re-initializes the sessions' locks. */
void session_locks_after_fork(void);
/* Around fork (shim.lock held): holds taken for the child before, dropped
 * by the parent after; the child makes them its own. */
void session_before_fork(void);
void session_after_fork_parent(void);
void session_after_fork(void);

/* Scans inherited descriptors for shadows (exec keeps them, not our tables). */
void session_adopt_inherited(void);

/* At exit: commits adopted sessions, warns about ones never closed.
 * flush_stdio: exit() (stdio's buffers belong in the files), not _exit(). */
void session_exit(bool flush_stdio);

/* Renames every session in this process whose path is old (or below it). */
void session_renamed(const char *oldpath, const char *newpath);
void session_unlinked(const char *path);
/* path was renamed onto a name with versions: this process's writings of it
 * that hold its newest version open go on with the id it has there. */
void session_reminted(const char *path, const struct stg_catalog_moved *moved);

/* A session of this process for path, or NULL (caller holds shim.lock). */
struct session *session_find_path(const char *path);

/* ---- job.c: the parallel job this process is a rank of ---- */

struct shim_job {
	char id[STG_PART_JOB_MAX]; /* 1..63 bytes 0x21..0x7e */
	uint32_t rank, size;       /* rank < size <= STG_PART_RANKS_MAX */
};
/* This process's job, read from the environment once (under shim.lock), or
 * NULL when its launcher's variables do not name one. */
const struct shim_job *job_identity(void);

/* ---- ranks.c: ranks of a job taking turns on one shared = node file ---- */

/* A writing of path begins in this process (open lock held): when it goes
 * on with content that ranks of this process's job wrote without it, and
 * not all of them (the ranks take turns, each committing a partial version),
 * -EBUSY, logged, pointing to shared = job. Else it notes this rank as the
 * writing's first and returns 0. continues: the writing starts from the
 * path's newest version (no O_TRUNC, no O_APPEND). */
int ranks_begin(const char *path, const struct stg_path_rule *rule, bool continues);
/* This process joins a writing of path as a writer (open lock held). */
void ranks_join(const char *path, const struct stg_path_rule *rule);

/* ---- part.c: shared = job, this node's part of a job's version ---- */

struct part;
struct stg_part;
/* Starts this process's part of the writing of s->path it opened with flags:
 * -EINVAL (logged) when the process has no job identity. */
int part_open(struct session *s, int flags);
/* The open of s succeeded: it counts (only then, so that a failed or
 * retried open does not shift the count). */
void part_opened(struct session *s);
void part_free(struct part *p);
/* In a fork child: its lock starts afresh. */
void part_locks_after_fork(struct part *p);
/* The first holder of a writing: its hold file starts without records. */
void part_begin(int holdfd);
/* The application wrote [off, off + len), or resized the file. */
void part_wrote(struct session *s, uint64_t off, uint64_t len);
void part_resized(struct session *s, uint64_t old_size, uint64_t new_size);
/* This process lets go and another commits: what it wrote goes to the hold
 * file (under the open lock). */
int part_leave(struct session *s);
/* The node's part for a commit of size bytes (at the close when last), or
 * NULL when no process of the node takes part. Returns 0 or -errno. */
int part_build(struct session *s, bool last, uint64_t size, struct stg_part **ret);

/* ---- prestage.c: chunks of a shadow staged while it is written ---- */

/* Is a write through this session's shadow looked at for chunks to stage? */
bool prestage_wanted(const struct session *s);
/* The application wrote [at, at + n) of the shadow through fd: the chunks
 * this write covered whole are staged now. */
void prestage_wrote(struct session *s, int fd, uint64_t at, uint64_t n);
/* Before a commit, and when this process lets go: what it staged becomes
 * durable and indexed, for the commit to find. (An exec drops what was
 * staged and not kept yet: the descriptors close, the commit stores those
 * chunks again.) */
void prestage_finish(struct session *s);
/* Around fork: the staging stands still (under shim.lock, which orders it
 * before stage_lock); the child (its locks start afresh) lets go of the
 * parent's staging without touching it. */
void prestage_before_fork(struct session *s);
void prestage_after_fork_parent(struct session *s);
void prestage_forget_after_fork(struct session *s);

/* ---- share.c: one captured file, several processes of the node ---- */

struct share_page;

/* Takes the path's open lock (tmp/<file id>.open): opening, and deciding
 * who commits at close, are one at a time. Returns the lock's fd or -errno. */
int share_lock(const char *path);
void share_unlock(int lockfd);
/* Opens the shadow other processes are writing path through (held by one
 * at least), with the access mode of flags; -ENOENT if there is none (a
 * stale one is removed). */
int share_open_live(const char *path, int flags);
/* Publishes the shadow under path's name, for processes opening it next. */
int share_name(int shadowfd, const char *path);
/* Removes path's name if it is this shadow (its last holder lets go). */
void share_unname(int shadowfd, const char *path);
/* The page at the start of a hold file, mapped shared (NULL on failure). */
struct share_page *share_map(int holdfd);
void share_unmap(struct share_page *p);
/* The first holder of a new shadow starts its page (under the open lock). */
void share_begin(struct share_page *p, uint32_t mode);
/* When it did, as file times count (ns since the epoch). */
int64_t share_begin_ns(struct share_page *p);
/* What the writing's processes agree on: the file's mode (false: not set),
 * the open version of its last sync, content lost by one of them (never
 * commit it), unlinked or replaced meanwhile (nothing to commit), and the
 * path a rename gave it (false: its own). */
bool share_mode(struct share_page *p, uint32_t *mode);
void share_set_mode(struct share_page *p, uint32_t mode);
uint64_t share_open_version(struct share_page *p);
void share_set_open_version(struct share_page *p, uint64_t v);
/* Another process joined the writing to write it (prestage.c stages only
 * then: alone, a writer would read and hash each chunk twice). */
void share_set_joined(struct share_page *p);
bool share_joined(struct share_page *p);
void share_set_broken(struct share_page *p);
bool share_broken(struct share_page *p);
bool share_gone(struct share_page *p);
bool share_path(struct share_page *p, char *out, size_t len);
/* path was unlinked (renamed_to NULL) or renamed: the processes writing it
 * learn so through its page, and nobody joins that writing any more. With
 * moved (renamed onto a name with versions), a writing holding the open
 * version moved->from goes on with moved->to. */
void share_forget(const char *path, const char *renamed_to, const struct stg_catalog_moved *moved);
/* path from was renamed to: what was written under to is an unlinked file,
 * and from's writing goes on as to's, its shadow named so (share_forget),
 * decided under both names' locks. */
void share_moved(const char *from, const char *to, const struct stg_catalog_moved *moved);
/* Another process of the node is writing path: true, with the size, mtime
 * and mode (0: not known) of what it has written so far. */
bool share_stat_live(const char *path, uint64_t *ret_size, struct timespec *ret_mtime,
		     uint32_t *ret_mode);
/* In a fork child: lets go of the open locks other threads held. */
void share_after_fork_child(void);
/* The fast path's owner: begins; enters a write (false: hand over instead)
 * and leaves it with the size staged; asks whether to hand over; ends. */
void share_fast_start(struct share_page *p);
bool share_fast_enter(struct share_page *p);
void share_fast_leave(struct share_page *p, uint64_t staged);
bool share_handover_requested(struct share_page *p);
void share_fast_end(struct share_page *p);
/* A process joining: has the fast path's owner, if any, put what it staged
 * into the shadow. Returns 0, or -EBUSY when it did not within
 * $STAGEHAND_SHARE_TIMEOUT seconds (default 30; said in the log). */
int share_take_over(struct share_page *p, const char *path);

/* ---- fast.c: staging sequential writes as they arrive ---- */

#define FAST_OFF INT64_MIN /* "not for the fast path": do the real call */

bool fast_enabled(void);
int fast_start(struct session *s);
void fast_discard(struct session *s);
/* While the fast path lasts: true, and the size written so far. */
bool fast_size(struct session *s, uint64_t *ret);
/* The session's path changed: the version goes under the new one. */
void fast_renamed(struct session *s);
/* Returns bytes written, -errno, or FAST_OFF (off < 0: at the offset). */
ssize_t fast_write(struct session *s, const struct iovec *iov, int cnt, int64_t off);
int64_t fast_lseek(struct session *s, int64_t off, int whence);
/* Commits what was staged if anything changed: *ret_version is the version
 * published (0: none). replaces: the writing's open version. */
int fast_commit(struct session *s, bool last, uint64_t replaces, int64_t *ret_version);
/* Moves the staged content into the shadow and ends the fast path. */
int fast_materialize(struct session *s, int fd);
/* For fork and exec: every fast session of the process (takes shim.lock). */
void fast_materialize_all(void);

/* Ends the fast path of fd's session, if it has one (before any call the
 * fast path does not handle). */
void fast_leave(int fd);

/* ---- mapping.c: writable shared mappings of captured files ---- */

/* Records a writable shared mapping of fd's session; munmap commits. */
void mapping_add(int fd, void *addr, size_t len);
/* Forgets every mapping record of s (it is going away). */
void mapping_forget(struct session *s);
/* Forgets mappings inside [addr, addr+len), committing sessions left with
 * neither descriptors nor mappings; with sync_only, commits without forgetting. */
int mapping_remove(void *addr, size_t len, bool sync_only);


/* At exit: commits files whose last descriptor was closed while a shared
 * writable mapping stayed (exit unmaps it). */
void mapping_exit(void);

/* Is s, at size bytes, made durable as a pending commit by its syncs and
 * its last close (common/pending.h), instead of packed inside them? */
bool session_pack_later(const struct session *s, uint64_t size);

/* ---- background.c: commits finished by a helper ---- */

/* Hands the shadow (fd) to a detached committer, which supersedes the open
 * version replaces (0: none). Returns 0, or -errno when the caller must
 * commit itself. */
int background_commit(struct session *s, int fd, uint32_t mode, int64_t mtime_ns,
		      uint64_t replaces);
/* Hands the packing of s's pending commit (written under the open lock
 * lockfd) to a detached helper, which holds that lock until it is done.
 * Returns 0, or -errno when the caller must settle it itself. */
int background_pack(struct session *s, int lockfd);
/* Settles path's pending commit, if another process's close left one: waits
 * for its helper, or packs it when the helper died. Returns 0 or -EIO. */
int background_settle(const char *path);
/* background_settle for a caller holding path's open lock, with its rule. */
int background_settle_locked(const char *path, const struct stg_path_rule *rule);
/* The same for every pending commit below the directory dir (a rename, a
 * listing). Returns 0 or -EIO. */
int background_settle_below(const char *dir);
/* Waits for this process's background commits of path (or below it), and
 * settles path's pending commit. Returns 0, or -EIO when that could not be
 * packed: the caller fails rather than act on an older version. */
int background_wait(const char *path);
/* In a fork child: the list's lock starts afresh. */
void background_after_fork_child(void);

/* Starts stagehand-flusher for the cache, detached like the commit helper.
 * Returns 0 or -errno. */
int background_start_flusher(void);

/* After a version of path was committed (version 0: amended in place): makes
 * sure a flusher will ship it and, with durability = replicated, waits until
 * the servers hold it. Returns 0, or -EIO when it was not replicated in time. */
int replicate_after_commit(const char *path, const struct stg_path_rule *rule, int64_t version);

/* ---- fdtable.c: which descriptors are captured files ---- */

int fdtable_init(void);
struct session *fdtable_get(int fd);

/* The same lookup, inline, for the hooks every write() and read() of the
 * application passes through: a bounds check and a load. */
extern struct session **shim_fdtable;
extern int shim_fdtable_len;
static inline struct session *fdtable_peek(int fd)
{
	unsigned len = (unsigned)__atomic_load_n(&shim_fdtable_len, __ATOMIC_ACQUIRE);
	return (unsigned)fd < len ? __atomic_load_n(&shim_fdtable[fd], __ATOMIC_ACQUIRE) : NULL;
}
/* Sets (or clears, with NULL) the entry; -EMFILE when fd is out of range. */
int fdtable_set(int fd, struct session *s);
/* The first captured fd >= fd with its session, or -1 (caller holds shim.lock):
 * for (fd = fdtable_next(0, &s); fd >= 0; fd = fdtable_next(fd + 1, &s)) */
int fdtable_next(int fd, struct session **ret);
#define FDTABLE_EACH(fd, s) for (fd = fdtable_next(0, &s); fd >= 0; fd = fdtable_next(fd + 1, &s))

/* ---- dir.c: directories ---- */

/* rmdir of (dirfd, path) as the view sees it: -ENOTDIR for a captured file,
 * -ENOTEMPTY for a real directory still holding captured files, else
 * SHIM_PASS (a long, as hook.h's handlers). */
long dir_rmdir_check(int dirfd, const char *path);

/* ---- view.c: what captured paths look like from the application ---- */

/* 1 and the synthesized stat when abspath is a visible captured file, 0 when
 * the catalog does not know it, -errno (ENOENT when it was deleted). */
int view_stat(const char *abspath, struct stat *st);
/* The same, first for a file this process has open (its shadow): 1 with *st
 * filled, 0 when the real file system should answer, -errno. */
int view_lookup(const char *abspath, struct stat *st);
/* Is a directory above abspath a captured file? */
bool view_under_file(const char *abspath);
/* Is (dirfd, path) a captured file? 1 (abspath filled), 0 when the real file
 * system should answer (also when the application deleted it), -errno:
 * -ENOTDIR when it is named as a directory ("f/") or a directory above it
 * is a captured file. */
int view_at(int dirfd, const char *path, char *abspath, size_t len);
