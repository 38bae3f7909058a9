/* SPDX-License-Identifier: MIT */
/* stagehand restore: rebuilds files from staged versions, verified, atomically. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "beneath.h"
#include "catalog.h"
#include "gc.h"
#include "jobversion.h"
#include "materialize.h"
#include "pack.h"
#include "pipeline.h"
#include "remote.h"
#include "tool.h"
#include "version.h"
#include "util.h"
#include "thread.h"

#define PROGRESS_MIN_BYTES (64ull << 20)

static void usage(FILE *f)
{
	fprintf(f,
		"usage: stagehand restore [--policy F] [--version N] [--to DIR]\n"
		"                         [--allow-foreign-cache] [--keep-special-bits] PATH...\n"
		"\n"
		"Rebuilds each PATH (a file, or a directory: every staged file below it)\n"
		"from its newest staged version, or version N, verifying every chunk\n"
		"against its hash. Each file is written to a temporary name and renamed\n"
		"into place, so a failed restore leaves nothing half-written.\n"
		"\n"
		"  --version N  restore version N instead of the newest\n"
		"  --to DIR     write below DIR (DIR/<absolute path>) instead of in place;\n"
		"               nothing is ever written outside DIR, and no symbolic link\n"
		"               below DIR is followed\n"
		"  --allow-foreign-cache\n"
		"               use a cache that belongs to another user than you or root,\n"
		"               or that others may write (refused by default: they decide\n"
		"               what is written)\n"
		"  --keep-special-bits\n"
		"               restore the setuid, setgid and sticky bits too (dropped by\n"
		"               default)\n"
		"\n"
		"A file the application deleted is restored when named (for its\n"
		"keep_deleted), not as part of a directory.\n"
		"\n"
		"In place, a symbolic link in a file's directories is followed when it\n"
		"belongs to you or to root (/scratch -> /lustre/...); any other, and one\n"
		"at the file's own name, is in the way and the file is not restored. A\n"
		"chunk that is corrupt or missing in the cache is fetched from the\n"
		"servers ([cluster]), with a warning. Names are printed with C escapes\n"
		"for backslashes and control characters (\\\\, \\n, \\t, \\r, else\n"
		"\\ooo), as ls -b does.\n"
		"exit status: 0 when every file was restored, 1 when any was not, or a\n"
		"cache entry was refused.\n");
}

struct target {
	char *path;
};

struct find {
	const char *prefix;
	char **paths;
	size_t n, cap;
	bool bad; /* a cache entry was refused */
};

static int find_paths(void *arg, const char *path, int filedirfd)
{
	struct find *f = arg;
	size_t n = strlen(f->prefix);
	bool match = strcmp(f->prefix, "/") == 0 ||
		     (strncmp(path, f->prefix, n) == 0 && (path[n] == '\0' || path[n] == '/'));
	if (!match)
		return 0;
	/* A file the application deleted comes back only when named. */
	if (filedirfd >= 0 && strcmp(path, f->prefix) != 0 && stg_catalog_is_deleted(filedirfd))
		return 0;
	if (STG_GROW(f->paths, f->cap, f->n + 1) < 0)
		return -ENOMEM;
	if (!(f->paths[f->n] = strdup(path)))
		return -ENOMEM;
	f->n++;
	return 0;
}

static void bad_entry(void *arg, const char *id, int err)
{
	struct find *f = arg;
	tool_bad_entry("restore", id, err);
	f->bad = true;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

struct progress {
	const char *path;
	int last;
	bool on;
};

static void show_progress(void *arg, uint64_t done, uint64_t total)
{
	struct progress *p = arg;
	if (!p->on || total == 0)
		return;
	int pct = (int)(done * 100 / total);
	if (pct == p->last)
		return;
	p->last = pct;
	char a[32], b[32];
	fprintf(stderr, "\rrestoring %s: %3d%% (%s of %s)", p->path, pct,
		tool_human(done, a, sizeof(a)), tool_human(total, b, sizeof(b)));
	if (done == total)
		fputc('\n', stderr);
	fflush(stderr);
}

/* Where a version comes from: the node cache or the staging servers. */
struct source {
	struct stg_cache *cache;
	struct remote *remote;
	uint64_t servers; /* with remote: the servers that listed the version */
	struct remote *replicas; /* with cache: the servers, for a bad chunk (or NULL) */
};

/* What the command line asked of every file. */
struct opts {
	const char *to; /* NULL: in place */
	uint64_t version; /* 0: the newest */
	bool keep_special;
};

/* The other parts of a job's version, laid over the first (jobversion.h). */
struct overlay {
	const struct source *srcs;
	const struct stg_manifest *parts;
	size_t n;
};

/* A chunk the cache has no good copy of, fetched from the servers. */
struct refetch {
	struct remote_session sess;
	const char *path;
	uint64_t version;
	const struct stg_manifest *m;
};

static int refetch_chunk(void *arg, uint32_t i, const struct stg_materialize_error *why,
			 uint8_t *buf)
{
	struct refetch *rf = arg;
	int r = remote_fetch_chunk(&rf->sess, rf->path, rf->m, i, buf);
	if (r < 0)
		return r;
	char rel[48], name[TOOL_ESCAPED_SIZE(PATH_MAX)];
	stg_pack_relpath(why->entry.pack, rel);
	fprintf(stderr, "stagehand: restore: warning: '%s' version %" PRIu64 ": chunk %" PRIu32
		" %s in the cache (%s at offset %" PRIu64 "); fetched it from the servers\n",
		tool_escape(rf->path, name, sizeof(name)), rf->version, i,
		why->error == -EIO ? "could not be read" : "is corrupt", rel, why->entry.offset);
	return 0;
}

/* Rebuilds m's content into fd from src. 0, or 1 after saying why (unless
 * quiet). */
static int fill(const struct source *src, const char *path, uint64_t version,
		const struct stg_manifest *m, int fd, const char *dest, bool quiet)
{
	struct progress pr = {.path = path, .last = -1,
			      .on = isatty(STDERR_FILENO) && m->size >= PROGRESS_MIN_BYTES};
	struct stg_materialize_error me = {0};
	uint64_t bad_chunk = 0;
	struct refetch rf = {.path = path, .version = version, .m = m};
	if (src->replicas)
		remote_session_init(&rf.sess, src->replicas);
	int r = src->cache ? tool_materialize(src->cache, m, fd, show_progress, &pr,
					      src->replicas ? refetch_chunk : NULL, &rf, &me)
			   : remote_materialize(src->remote, path, m, fd, show_progress, &pr,
						&bad_chunk);
	if (src->replicas)
		remote_session_done(&rf.sess);
	if (pr.on && r < 0)
		fputc('\n', stderr);
	if (r < 0 && quiet)
		return 1;
	if (r < 0 && src->cache) {
		char rel[48];
		stg_pack_relpath(me.entry.pack, rel);
		/* (a chunk the cache failed on, else the file written) */
		if (me.error && r == me.error)
			tool_error("restore: '%s' version %" PRIu64 ": chunk %" PRIu64
				   " is %s (%s at offset %" PRIu64 ")%s; nothing was written",
				   path, version, me.chunk,
				   r == -EBADMSG ? "corrupt" : r == -ENOENT ? "missing" : "unreadable",
				   rel, me.entry.offset,
				   src->replicas ? ", and no server has a good copy" : "");
		else
			tool_error("restore: writing '%s': %s", dest, strerror(-r));
		return 1;
	}
	if (r < 0) {
		if (r == -EBADMSG || r == -ENOENT)
			tool_error("restore: '%s' version %" PRIu64 ": no server has a good copy of "
				   "chunk %" PRIu64 "; nothing was written",
				   path, version, bad_chunk);
		else
			tool_error("restore: '%s' version %" PRIu64 ": %s; nothing was written", path,
				   version, strerror(-r));
		return 1;
	}
	return 0;
}

/* Lays each further part's ranges over fd: each part is rebuilt into an
 * unnamed file beside it, and what its node wrote copied over. 0, or 1. */
static int lay_over(const struct overlay *over, const char *path, uint64_t version, int dirfd,
		    int fd, const char *dest)
{
	enum { BUF = 1 << 20 };
	uint8_t *buf = malloc(BUF);
	if (!buf) {
		tool_error("restore: out of memory");
		return 1;
	}
	int failed = 0;
	for (size_t i = 0; i < over->n && !failed; i++) {
		const struct stg_manifest *m = &over->parts[i];
		int t = beneath_open(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (t < 0) {
			tool_error("restore: cannot write next to '%s': %s", dest, strerror(-t));
			failed = 1;
			break;
		}
		failed = fill(&over->srcs[i], path, version, m, t, dest, false);
		for (uint32_t e = 0; e < m->part->nextents && !failed; e++) {
			const struct stg_extent *x = &m->part->extents[e];
			for (uint64_t at = x->off; at < x->off + x->len && !failed;) {
				size_t len = x->off + x->len - at < BUF ? (size_t)(x->off + x->len - at) : BUF;
				int r = stg_pread_all(t, buf, len, (off_t)at);
				if (r == 0)
					r = stg_pwrite_all(fd, buf, len, (off_t)at);
				if (r < 0) {
					tool_error("restore: merging the parts of '%s': %s", dest,
						   strerror(-r));
					failed = 1;
				}
				at += len;
			}
		}
		close(t);
	}
	free(buf);
	return failed;
}

/* Where a version is written: a temporary file beside its destination,
 * renamed over it once whole. */
struct dest {
	int dirfd, fd;
	const char *name; /* the last name of the path */
	char tmp[NAME_MAX + 64];
	char dest[PATH_MAX * 2]; /* for messages */
};

/* Opens the directory of path below o->to (made when missing) and a new
 * temporary file in it, with O_DIRECT when direct and the file system takes
 * it. 0, or 1 after saying why unless quiet. */
static int dest_open(const char *path, const struct opts *o, bool direct, bool quiet,
		     struct dest *d)
{
	const char *to = o->to;
	int rootfd = open(to ? to : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0) {
		if (!quiet)
			tool_error("restore: cannot open '%s': %s", to ? to : "/", strerror(errno));
		return 1;
	}
	/* path is normalized (stg_path_valid): its last name is a name. */
	d->name = strrchr(path, '/') + 1;
	if (!*d->name) {
		if (!quiet)
			tool_error("restore: '/' is no file");
		close(rootfd);
		return 1;
	}
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%.*s", (int)(d->name - path - 1), path + 1);
	struct beneath_link link;
	d->dirfd = beneath_open_dir(rootfd, parent, !to, &link);
	close(rootfd);
	snprintf(d->dest, sizeof(d->dest), "%s%s", to ? to : "", path);
	if (d->dirfd == -ELOOP && !quiet) {
		char whose[48] = "";
		if (link.owner != 0 && link.owner != geteuid())
			snprintf(whose, sizeof(whose), " belongs to uid %u", (unsigned)link.owner);
		tool_error("restore: cannot create the directory of '%s': a symbolic link is in the "
			   "way ('%s%s'%s)",
			   d->dest, to ? to : "", link.path, whose);
	} else if (d->dirfd < 0 && !quiet) {
		tool_error("restore: cannot create the directory of '%s': %s", d->dest,
			   strerror(-d->dirfd));
	}
	struct stat st;
	if (d->dirfd >= 0 && fstatat(d->dirfd, d->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISLNK(st.st_mode)) {
		/* Renamed over, the link would go; written through, it could
		 * lead anywhere. Neither is what was staged. */
		if (!quiet)
			tool_error("restore: '%s': a symbolic link is in the way", d->dest);
		close(d->dirfd);
		d->dirfd = -ELOOP;
	}
	if (d->dirfd < 0)
		return 1;
	snprintf(d->tmp, sizeof(d->tmp), ".%.200s.stagehand-restore.%d", d->name, (int)getpid());
	int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
	d->fd = beneath_open(d->dirfd, d->tmp, flags | (direct ? O_DIRECT : 0), 0600);
	if (d->fd == -EINVAL)
		d->fd = beneath_open(d->dirfd, d->tmp, flags, 0600);
	if (d->fd < 0) {
		if (!quiet)
			tool_error("restore: cannot write next to '%s': %s", d->dest,
				   strerror(-d->fd));
		close(d->dirfd);
		return 1;
	}
	return 0;
}

static void dest_drop(struct dest *d)
{
	close(d->fd);
	unlinkat(d->dirfd, d->tmp, 0);
	close(d->dirfd);
}

/* Lays over's parts over d's content (when over), gives it m's metadata and
 * renames it into place, saying so. 0, or 1 after saying why. Consumes d
 * and m. */
static int dest_finish(struct dest *d, const struct source *src, const char *path,
		       uint64_t version, struct stg_manifest *m, const struct overlay *over,
		       const struct opts *o)
{
	uint64_t size = m->size;
	if (over) {
		if (lay_over(over, path, version, d->dirfd, d->fd, d->dest))
			goto out_drop;
		/* The longest part's length; the newest part's metadata. */
		for (size_t i = 0; i < over->n; i++) {
			size = over->parts[i].size > size ? over->parts[i].size : size;
			m->mode = over->parts[i].mode;
			m->mtime_ns = over->parts[i].mtime_ns;
		}
		if (ftruncate(d->fd, (off_t)size) < 0) {
			tool_error("restore: finishing '%s': %s", d->dest, strerror(errno));
			goto out_drop;
		}
	}
	struct timespec times[2] = {
		{.tv_sec = m->mtime_ns / 1000000000, .tv_nsec = m->mtime_ns % 1000000000},
		{.tv_sec = m->mtime_ns / 1000000000, .tv_nsec = m->mtime_ns % 1000000000},
	};
	/* setuid, setgid and sticky only when asked: a cache's owner would
	 * otherwise choose a setuid file of root's. */
	mode_t mode = m->mode & (o->keep_special ? 07777 : 0777);
	if (fchmod(d->fd, mode) < 0 || futimens(d->fd, times) < 0 || fsync(d->fd) < 0) {
		tool_error("restore: finishing '%s': %s", d->dest, strerror(errno));
		goto out_drop;
	}
	if (renameat(d->dirfd, d->tmp, d->dirfd, d->name) < 0) {
		tool_error("restore: cannot move '%s' into place: %s", d->dest, strerror(errno));
		goto out_drop;
	}
	fsync(d->dirfd);
	close(d->fd);
	close(d->dirfd);
	char epath[TOOL_ESCAPED_SIZE(PATH_MAX)], edest[TOOL_ESCAPED_SIZE(sizeof(d->dest))];
	printf("restored %s version %" PRIu64 " (%" PRIu64 " bytes) to %s%s\n",
	       tool_escape(path, epath, sizeof(epath)), version, size,
	       tool_escape(d->dest, edest, sizeof(edest)),
	       over ? ", merged from its nodes' parts" : src->cache ? "" : " from the servers");
	stg_manifest_done(m);
	return 0;
out_drop:
	dest_drop(d);
	stg_manifest_done(m);
	return 1;
}

/* Writes m's content to path (below to), atomically; consumes m. With over,
 * m is the first part of a job's version and the others are laid over it. */
static int write_version(const struct source *src, const char *path, uint64_t version,
			 struct stg_manifest *m, const struct overlay *over, const struct opts *o)
{
	struct dest d;
	/* Written with O_DIRECT where possible: the data goes straight to the
	 * disk instead of through the page cache, and the final fsync is short. */
	/* (Not for fetched chunks, which are not aligned, nor for merges.) */
	if (dest_open(path, o, src->cache && !over, false, &d)) {
		stg_manifest_done(m);
		return 1;
	}
	if (fill(src, path, version, m, d.fd, d.dest, false)) {
		dest_drop(&d);
		stg_manifest_done(m);
		return 1;
	}
	return dest_finish(&d, src, path, version, m, over, o);
}

/* A restore from the cache begun while the servers are asked whether they
 * hold a newer version (a round trip, libcrypto loaded for it: about as long
 * as writing 20 MiB): the newest version this node holds of the one path
 * asked, written beside its destination. Kept if it is the newest there is,
 * else dropped. Only for versions up to EARLY_MAX bytes: beyond, the wait is
 * nothing to the restore, and a cache behind the servers would have a large
 * version written for nothing. */
#define EARLY_MAX (256ull << 20)

struct early {
	bool ready;      /* d is filled with version id */
	const char *path;
	uint64_t id;
	int pin;         /* the cache's collector waits meanwhile */
	struct stg_manifest m;
	struct dest d;
};

static void early_start(struct stg_cache *cache, const char *path, const struct opts *o,
			struct early *e)
{
	*e = (struct early){.path = path, .pin = stg_gc_pin(cache)};
	struct stg_catalog_file f;
	if (stg_catalog_lock(cache, path, false, &f) < 0)
		return;
	int r = stg_catalog_read_newest(f.dirfd, &e->m, NULL);
	stg_catalog_unlock(&f);
	if (r < 0)
		return;
	e->id = e->m.version;
	/* A job's part is merged with the others; a bad chunk is fetched from
	 * the servers: both wait for what the servers say. So do messages. */
	const struct source src = {.cache = cache};
	if (e->m.part || e->m.size > EARLY_MAX || dest_open(path, o, true, true, &e->d)) {
		stg_manifest_done(&e->m);
		return;
	}
	if (fill(&src, path, 0, &e->m, e->d.fd, e->d.dest, true)) {
		dest_drop(&e->d);
		stg_manifest_done(&e->m);
		return;
	}
	e->ready = true;
}

/* Drops what early_start wrote (its temporary name is the one a restore of
 * its path takes). */
static void early_drop(struct early *e)
{
	if (e->ready) {
		dest_drop(&e->d);
		stg_manifest_done(&e->m);
		e->ready = false;
	}
}

/* Whether early holds version id of path, written; if not, it is dropped
 * before path is written otherwise. */
static bool early_take(struct early *e, const char *path, uint64_t id)
{
	if (!e || !e->ready || strcmp(e->path, path) != 0)
		return false;
	if (e->id == id)
		return true;
	early_drop(e);
	return false;
}

static void early_done(struct early *e)
{
	early_drop(e);
	if (e->pin >= 0)
		stg_gc_unpin(e->pin);
	e->pin = -1;
}

/* The servers' versions, listed by a thread of its own while early_start
 * writes. */
struct listing {
	struct remote *rm;
	const char *prefix;
	struct remote_version *rv;
	size_t nrv, reached;
	int r;
};

static void *list_servers(void *p)
{
	struct listing *l = p;
	l->r = remote_list(l->rm, l->prefix, true, &l->rv, &l->nrv, &l->reached);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The ids of path's versions in the cache (*ret_nlocal of them first) and on
 * the servers, sorted, without duplicates. Returns the count or -errno. */
static ssize_t version_ids(struct stg_cache *cache, const struct remote_version *rv, size_t nrv,
			   const char *path, uint64_t **ret)
{
	uint64_t *local = NULL;
	size_t nlocal = 0;
	struct stg_catalog_file f;
	if (cache && stg_catalog_lock(cache, path, false, &f) == 0) {
		int r = stg_catalog_versions(f.dirfd, &local, &nlocal);
		stg_catalog_unlock(&f);
		if (r < 0)
			return r;
	}
	uint64_t *ids = realloc(local, (nlocal + nrv + 1) * sizeof(*ids));
	if (!ids) {
		free(local);
		return -ENOMEM;
	}
	size_t n = nlocal;
	for (size_t i = 0; i < nrv; i++)
		if (strcmp(rv[i].path, path) == 0)
			ids[n++] = rv[i].e.version;
	qsort(ids, n, sizeof(*ids), cmp_u64);
	size_t u = 0;
	for (size_t i = 0; i < n; i++)
		if (u == 0 || ids[i] != ids[u - 1])
			ids[u++] = ids[i];
	*ret = ids;
	return (ssize_t)u;
}

/* Is version id of path in the cache? */
static bool in_cache(struct stg_cache *cache, const char *path, uint64_t id)
{
	struct stg_catalog_file f;
	if (!cache || stg_catalog_lock(cache, path, false, &f) < 0)
		return false;
	char name[40];
	stg_catalog_manifest_name(id, name);
	bool found = faccessat(f.dirfd, name, F_OK, 0) == 0;
	stg_catalog_unlock(&f);
	return found;
}

/* The manifest of version id of path, from the cache when it has it, else
 * from the servers that listed it, and where it came from. 0 or -errno. */
static int load_version(struct stg_cache *cache, struct remote *rm,
			const struct remote_version *rv, size_t nrv, const char *path, uint64_t id,
			struct stg_manifest *m, struct source *src)
{
	struct stg_catalog_file f;
	int r = -ENOENT;
	if (in_cache(cache, path, id) && stg_catalog_lock(cache, path, false, &f) == 0) {
		r = stg_catalog_read(f.dirfd, id, m);
		stg_catalog_unlock(&f);
		if (r == 0) {
			*src = (struct source){.cache = cache, .replicas = rm};
			return 0;
		}
	}
	if (!rm)
		return r; /* (a corrupt one in the cache: the servers may have it) */
	uint64_t servers = 0;
	for (size_t i = 0; i < nrv; i++)
		if (rv[i].e.version == id && strcmp(rv[i].path, path) == 0)
			servers = rv[i].servers;
	*src = (struct source){.remote = rm, .servers = servers};
	return remote_get_manifest(rm, path, id, servers, m);
}

/* Restores version number (0: the newest complete one) of a path that has
 * parts of job versions among ids (n of them): every manifest is read, the
 * parts grouped (jobversion.h) and a job version's parts merged. */
static int restore_job_version(struct stg_cache *cache, struct remote *rm,
			       const struct remote_version *rv, size_t nrv, const char *path,
			       const uint64_t *ids_in, size_t n_in, uint64_t number,
			       const struct opts *o)
{
	/* Room for an id to stand for a part on each server (remote_get_parts). */
	size_t cap = n_in * (rm ? rm->policy->nservers : 1) + 1, n = 0;
	struct stg_manifest *ms = calloc(cap, sizeof(*ms));
	struct source *srcs = calloc(cap, sizeof(*srcs));
	uint64_t *ids = calloc(cap, sizeof(*ids)), *vids = calloc(cap, sizeof(*vids));
	uint64_t *numbers = calloc(cap, sizeof(*numbers));
	int *err = calloc(cap, sizeof(*err));
	struct remote_session sess; /* for the parts' manifests */
	if (rm)
		remote_session_init(&sess, rm);
	struct job_version *v = NULL;
	ssize_t nv = 0;
	size_t loaded = 0;
	int failed = 1;
	if (!ms || !srcs || !ids || !vids || !numbers || !err) {
		tool_error("restore: out of memory");
		goto out;
	}
	/* One that cannot be read counts as a whole version: it keeps its
	 * number, and fails only when it is the one restored. */
	for (size_t i = 0; i < n_in; i++) {
		ids[n] = ids_in[i];
		err[n] = load_version(cache, rm, rv, nrv, path, ids[n], &ms[n], &srcs[n]);
		if (err[n] < 0)
			ms[n] = (struct stg_manifest){0};
		n++;
		loaded = n;
		/* A part from the servers: each server's, if they differ. */
		if (err[n - 1] < 0 || !ms[n - 1].part || !srcs[n - 1].remote ||
		    __builtin_popcountll(srcs[n - 1].servers) < 2)
			continue;
		struct stg_manifest *parts;
		ssize_t np = remote_get_parts(&sess, path, ids[n - 1], srcs[n - 1].servers, &parts);
		for (ssize_t k = 0; np == 1 && k < np; k++)
			stg_manifest_done(&parts[k]);
		if (np == 1)
			free(parts);
		if (np < 2)
			continue; /* the one read already */
		stg_manifest_done(&ms[n - 1]);
		for (ssize_t k = 0; k < np; k++) {
			ids[n - 1 + k] = ids[n - 1];
			srcs[n - 1 + k] = srcs[n - 1];
			err[n - 1 + k] = 0;
			ms[n - 1 + k] = parts[k];
		}
		free(parts);
		n += (size_t)np - 1;
		loaded = n;
	}
	nv = job_versions(ms, ids, n, &v);
	if (nv < 0) {
		tool_error("restore: out of memory");
		goto out;
	}
	for (ssize_t i = 0; i < nv; i++)
		vids[i] = v[i].id;
	stg_version_numbers(vids, (size_t)nv, numbers);
	ssize_t pick = -1;
	if (number) {
		for (ssize_t i = 0; i < nv; i++)
			if (numbers[i] == number)
				pick = i;
		if (pick < 0) {
			tool_error("restore: '%s' has no version %" PRIu64 " (it has %" PRIu64
				   " to %" PRIu64 ")", path, number, numbers[0], numbers[nv - 1]);
			goto out;
		}
		if (!v[pick].complete) {
			tool_error("restore: '%s' version %" PRIu64 " is incomplete (job %s): %s",
				   path, number, ms[v[pick].parts[0]].part->job, v[pick].why);
			goto out;
		}
	} else {
		for (ssize_t i = nv; i-- > 0 && pick < 0;)
			if (v[i].complete)
				pick = i;
		if (pick != nv - 1)
			tool_error("restore: '%s' version %" PRIu64 " is incomplete (%s)%s",
				   path, numbers[nv - 1], v[nv - 1].why,
				   pick < 0 ? ", and no version is complete" : "");
		if (pick < 0)
			goto out;
		if (pick != nv - 1)
			fprintf(stderr, "restore: '%s': restoring version %" PRIu64
				", the newest complete one\n", path, numbers[pick]);
		number = numbers[pick];
	}
	const struct job_version *jv = &v[pick];
	size_t first = jv->parts[0];
	if (err[first] < 0) {
		tool_error("restore: '%s' version %" PRIu64 ": %s", path, number,
			   err[first] == -EBADMSG ? "the manifest is corrupt"
			   : err[first] == -ENOENT ? "it left the cache meanwhile"
						: strerror(-err[first]));
		goto out;
	}
	struct stg_manifest base = ms[first];
	ms[first] = (struct stg_manifest){0}; /* write_version consumes it */
	if (!jv->is_job || jv->nparts == 1) {
		failed = write_version(&srcs[first], path, number, &base, NULL, o);
		goto out;
	}
	struct stg_manifest *parts = calloc(jv->nparts, sizeof(*parts));
	struct source *psrcs = calloc(jv->nparts, sizeof(*psrcs));
	if (parts && psrcs) {
		for (size_t i = 1; i < jv->nparts; i++) {
			parts[i - 1] = ms[jv->parts[i]];
			psrcs[i - 1] = srcs[jv->parts[i]];
		}
		struct overlay over = {.srcs = psrcs, .parts = parts, .n = jv->nparts - 1};
		failed = write_version(&srcs[first], path, number, &base, &over, o);
	} else {
		tool_error("restore: out of memory");
		stg_manifest_done(&base);
	}
	free(parts);
	free(psrcs);
out:
	for (size_t i = 0; i < loaded; i++)
		stg_manifest_done(&ms[i]);
	job_versions_free(v, nv > 0 ? (size_t)nv : 0);
	free(ms);
	free(srcs);
	if (rm)
		remote_session_done(&sess);
	free(ids);
	free(vids);
	free(numbers);
	free(err);
	return failed;
}

/* Restores version number (0: the newest) of path: from the cache when it
 * has that version, else from the servers that listed it. */
static int restore_path(struct stg_cache *cache, struct remote *rm,
			const struct remote_version *rv, size_t nrv, const char *path,
			const struct opts *o, struct early *early)
{
	uint64_t *ids;
	ssize_t n = version_ids(cache, rv, nrv, path, &ids);
	if (n < 0) {
		tool_error("restore: cannot read the versions of '%s': %s", path, strerror((int)-n));
		return 1;
	}
	if (n == 0) {
		free(ids);
		tool_error("restore: '%s' is not staged", path);
		return 1;
	}
	/* What this node writes of the path next must be newer than what the
	 * servers hold (a replacement node restores before it goes on). */
	if (cache)
		stg_catalog_note_seen(cache, path, ids[n - 1]);
	/* A path shared by a job's nodes, or a version asked by number (which
	 * counts job versions once): every manifest is needed. Else the newest
	 * one's tells. */
	struct stg_manifest newest;
	struct source src;
	int pin = cache ? stg_gc_pin(cache) : -1;
	uint64_t number = o->version;
	int r = load_version(cache, rm, rv, nrv, path, ids[n - 1], &newest, &src);
	bool take = early_take(early, path, ids[n - 1]);
	if (take && (r < 0 || newest.part || number || !src.cache)) {
		early_drop(early);
		take = false;
	}
	int failed;
	if (r == -EBADMSG && !number) {
		uint64_t *numbers = malloc((size_t)n * sizeof(*numbers));
		if (numbers)
			stg_version_numbers(ids, (size_t)n, numbers);
		tool_error("restore: '%s' version %" PRIu64 ": the manifest is corrupt", path,
			   numbers ? numbers[n - 1] : 0);
		free(numbers);
		failed = 1;
	} else if (r == 0 && !newest.part && !number) {
		uint64_t *numbers = malloc((size_t)n * sizeof(*numbers));
		if (numbers) {
			stg_version_numbers(ids, (size_t)n, numbers);
			if (take) {
				/* Written already: the newest there is. */
				stg_manifest_done(&newest);
				early->ready = false;
				failed = dest_finish(&early->d, &src, path, numbers[n - 1],
						     &early->m, NULL, o);
			} else {
				failed = write_version(&src, path, numbers[n - 1], &newest, NULL, o);
			}
		} else {
			tool_error("restore: out of memory");
			stg_manifest_done(&newest);
			failed = 1;
		}
		free(numbers);
	} else {
		if (r == 0)
			stg_manifest_done(&newest);
		failed = restore_job_version(cache, rm, rv, nrv, path, ids, (size_t)n, number, o);
	}
	if (pin >= 0)
		stg_gc_unpin(pin);
	free(ids);
	return failed;
}

int cmd_restore(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"version", required_argument, NULL, 'v'},
		{"to", required_argument, NULL, 't'},
		{"allow-foreign-cache", no_argument, NULL, 'F'},
		{"keep-special-bits", no_argument, NULL, 'K'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *policy = NULL, *to = NULL;
	uint64_t version = 0;
	bool allow_foreign = false, keep_special = false;
	int c;
	while ((c = getopt_long(argc, argv, "p:v:t:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': policy = optarg; break;
		case 't': to = optarg; break;
		case 'F': allow_foreign = true; break;
		case 'K': keep_special = true; break;
		case 'v': {
			char *end;
			errno = 0;
			unsigned long long n = strtoull(optarg, &end, 10);
			if (errno || *end || n == 0 || optarg[0] == '-') {
				tool_error("restore: --version takes a version number (1, 2, ...), "
					   "not '%s'",
					   optarg);
				return EXIT_USAGE;
			}
			version = n;
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		tool_error("restore: name at least one PATH");
		usage(stderr);
		return EXIT_USAGE;
	}
	char todir[PATH_MAX];
	if (to) {
		if (tool_abspath(to, todir, sizeof(todir)) < 0)
			return 1;
		if (stg_mkdir_p(todir, 0755) < 0) {
			tool_error("restore: cannot create '%s': %s", todir, strerror(errno));
			return 1;
		}
		to = strcmp(todir, "/") == 0 ? NULL : todir;
	}
	struct stg_policy *p;
	struct stg_cache *cache;
	tool_foreign_cache = allow_foreign ? TOOL_FOREIGN_USE : TOOL_FOREIGN_REFUSE_FLAG;
	if (tool_open(policy, &p, &cache))
		return 1;
	int failed = tool_settle(p, cache);
	const struct opts o = {.to = to, .version = version, .keep_special = keep_special};
	struct remote rm;
	bool have_remote = p->has_cluster && remote_init(&rm, p) == 0;
	failed |= p->has_cluster && !have_remote;
	for (int i = optind; i < argc; i++) {
		char abs[PATH_MAX];
		if (tool_abspath(argv[i], abs, sizeof(abs)) < 0) {
			failed = 1;
			continue;
		}
		/* The servers are asked first, by a thread of its own: their
		 * answer (a handshake, libcrypto loaded for it from a cold disk)
		 * takes longer than the cache's, and is waited for last. */
		struct listing l = {.rm = &rm, .prefix = strcmp(abs, "/") == 0 ? NULL : abs};
		pthread_t th;
		bool listing = have_remote && stg_thread_start(&th, NULL, list_servers, &l) == 0;
		struct find fd = {.prefix = abs};
		int r = cache ? stg_catalog_scan(cache, find_paths, bad_entry, &fd) : 0;
		if (r < 0) {
			tool_error("restore: cannot read the cache: %s", strerror(-r));
			failed = 1;
		}
		failed |= fd.bad;
		struct remote_version *rv = NULL;
		size_t nrv = 0, reached = 0;
		struct early early = {.pin = -1};
		if (have_remote) {
			if (listing && cache && fd.n == 1 && !o.version)
				early_start(cache, fd.paths[0], &o, &early);
			if (listing)
				pthread_join(th, NULL);
			else
				list_servers(&l);
			r = l.r;
			rv = l.rv;
			nrv = l.nrv;
			reached = l.reached;
			if (r < 0)
				tool_error("restore: cannot list the servers: %s", strerror(-r));
			/* A prefix match is textual: keep whole components only.
			 * A path whose newest version was deleted comes back
			 * only when named, as from the cache. */
			for (size_t k = 0; k < nrv; k++) {
				if (k + 1 < nrv && strcmp(rv[k + 1].path, rv[k].path) == 0)
					continue;
				if ((rv[k].e.flags & STG_LIST_ENTRY_DELETED) &&
				    strcmp(rv[k].path, abs) != 0)
					continue;
				if (find_paths(&fd, rv[k].path, -1) < 0)
					failed = 1;
			}
		}
		if (fd.n == 0) {
			tool_error("restore: nothing staged at or below '%s'%s", abs,
				   have_remote ? (reached ? " here or on the servers"
							  : " here, and no server answered")
					       : "");
			failed = 1;
		}
		qsort(fd.paths, fd.n, sizeof(*fd.paths), cmp_str);
		for (size_t k = 0; k < fd.n; k++) {
			if (k > 0 && strcmp(fd.paths[k], fd.paths[k - 1]) == 0)
				continue;
			failed |= restore_path(cache, have_remote ? &rm : NULL, rv, nrv, fd.paths[k],
					       &o, &early);
		}
		early_done(&early);
		for (size_t k = 0; k < fd.n; k++)
			free(fd.paths[k]);
		free(fd.paths);
		remote_list_free(rv, nrv);
	}
	stg_cache_free(cache);
	stg_policy_free(p);
	return failed;
}
