/* SPDX-License-Identifier: MIT */
/* The server's manifests: per user (uid) and path, the versions it holds, as
 * files under files/<uid>/<file id>/ in the store directory. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include "tombstone.h"

struct stg_files;

/* Opens the manifest tree under the store's directory (dirfd), creating it. */
int stg_files_open(int storedirfd, struct stg_files **ret);
void stg_files_free(struct stg_files *f);

/* Stores an encoded manifest (already validated) of path for uid as version
 * m->version, atomically and durably (replacing one of the same id only if
 * its chunks are the same: -EEXIST otherwise, and only then), with held, the
 * bitmap of its chunks this server holds (heldmap.h), then applies retention
 * (stg_catalog_prune: keep closed versions, 0 keeps all). Returns how many
 * versions were removed, or -errno. */
int stg_files_put(struct stg_files *f, uint32_t uid, const char *path, const uint8_t *mf,
		  size_t len, uint64_t version, uint32_t keep, const uint8_t *held);

/* Reads version (0: the newest) of uid's path into a malloc'ed buffer,
 * validated. Returns 0, -ENOENT, -EBADMSG or -errno. */
int stg_files_get(struct stg_files *f, uint32_t uid, const char *path, uint64_t version,
		  uint8_t **ret_mf, size_t *ret_len);

/* Calls fn for each version of uid's paths starting with prefix (all when
 * prefix is empty), paths sorted, versions ascending, visiting only those
 * paths (pathindex.h); m is
 * decoded and valid for the call. Versions a deletion covers are left out
 * unless deleted_too (then fn is told so); those of a name renamed away
 * always are. A non-zero return from fn stops and is returned. Unreadable
 * manifests are skipped and logged at debug level. */
int stg_files_list(struct stg_files *f, uint32_t uid, const char *prefix, bool deleted_too,
		   int (*fn)(void *arg, const char *path, const struct stg_manifest *m,
			     bool deleted),
		   void *arg);

/* Removes version of uid's path if its manifest is, byte for byte, the one
 * whose XXH3-64 is manifest_hash (a node taking back a version it shipped
 * under an id that another node's version holds on other servers): never
 * another node's. Returns 1 (removed), 0 (not held as such) or -errno. */
int stg_files_withdraw(struct stg_files *f, uint32_t uid, const char *path, uint64_t version,
		       uint64_t manifest_hash);

/* Records that uid's path was deleted or renamed away (docs/STORE.md,
 * "Deletions"): its versions up to t->upto stay restorable for
 * t->retain_s from t->at_ns, then the collector removes them. Merged with a
 * deletion recorded already (stg_tombstone_merge). A path not held here is
 * no error. Returns 0 or -errno. */
int stg_files_delete(struct stg_files *f, uint32_t uid, const char *path,
		     const struct stg_tombstone *t);

/* A manifest of uid, with the bitmap of the chunks its put said this server
 * holds (NULL: all of them, for a manifest filed before held maps). */
typedef int (*stg_files_owned_fn)(void *arg, uint32_t uid, const struct stg_manifest *m,
				  const uint8_t *held);

/* Calls fn for every manifest of every user (at a start, the references to
 * chunks are counted from them), after removing the versions whose
 * deletion's retention ran out. */
int stg_files_foreach(struct stg_files *f, stg_files_owned_fn fn, void *arg);

/* What the server counts as versions come and go (docs/STORE.md, "Garbage
 * collection"), with each version's manifest and held map (NULL: all its
 * chunks):
 * filed: once a put wrote it (its held map and manifest are on disk, even
 * if the put failed after), before retention removes older ones (m NULL:
 * it could not be decoded for want of memory, and is not counted);
 * retired: once it is gone (retention, a withdrawal, an expired deletion,
 * or the same chunks filed again under its id), as it was.
 * Set before the store serves. */
struct stg_files_hooks {
	void (*filed)(void *arg, uint32_t uid, const struct stg_manifest *m, const uint8_t *held);
	void (*retired)(void *arg, uint32_t uid, const struct stg_manifest *m,
			const uint8_t *held);
	void *arg;
};
void stg_files_set_hooks(struct stg_files *f, const struct stg_files_hooks *h);

/* Removes the versions whose deletion's retention ran out by now_ns: the
 * work follows the deletions that came due, kept soonest first since the
 * start. Returns how many versions went. Called by the collector. */
uint64_t stg_files_expire(struct stg_files *f, int64_t now_ns);

/* Writes each user's path index file (docs/STORE.md, "Path index files"),
 * for the next start to read instead of every entry's path file: when the
 * server stops, with nothing changing the entries any more. The start that
 * reads them removes them. Returns 0 or -errno. */
int stg_files_save(struct stg_files *f);

struct stg_files_stats {
	uint64_t paths;              /* entries of all users */
	uint64_t entries_listed;     /* entries read by listings since the start */
	uint64_t paths_read_at_open; /* path files read at the start */
};
void stg_files_stats(struct stg_files *f, struct stg_files_stats *ret);
