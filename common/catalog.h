/* SPDX-License-Identifier: MIT */
/* The catalog: per captured path, its versions (manifests) and whether it is
 * visible. Lives in the cache under files/<file id>/. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "manifest.h"
#include "tombstone.h"

/* A path's directory in the catalog, locked (flock) while it is open. */
struct stg_catalog_file {
	struct stg_cache *cache;
	int dirfd;
	char id[STG_HASH_HEX_LEN + 1];
	/* This lock wrote the entry's `path` file: the entry's name in files/
	 * is not durable until a synced publish makes it so. */
	bool created;
};

/* The file id of a path: XXH3-128 of its absolute, normalized text, in hex. */
void stg_catalog_file_id(const char *path, char out[STG_HASH_HEX_LEN + 1]);

/* A stable inode number for a captured path, the same in every process. */
uint64_t stg_catalog_ino(const char *path);

/* Opens and exclusively locks the catalog entry of path. With create, makes it
 * when missing. Returns 0, -ENOENT (absent and !create) or -errno. */
int stg_catalog_lock(struct stg_cache *c, const char *path, bool create,
		     struct stg_catalog_file *ret);

void stg_catalog_unlock(struct stg_catalog_file *f);

/* Versions present, ascending, in a malloc'ed array. Returns 0 or -errno. */
int stg_catalog_versions(int filedirfd, uint64_t **ret_versions, size_t *ret_n);

/* Reads a manifest and checks it names the version asked for. Returns 0,
 * -ENOENT, -EBADMSG (corrupt) or -errno. */
int stg_catalog_read(int filedirfd, uint64_t version, struct stg_manifest *ret);

/* Reads the newest version (under the path's lock, or a version pruned
 * meanwhile reads as -ENOENT); its id goes to *ret_id (when not NULL; 0
 * when there is none), even when it does not read. Returns 0, -ENOENT when
 * there is none, or as stg_catalog_read. */
int stg_catalog_read_newest(int filedirfd, struct stg_manifest *ret, uint64_t *ret_id);

/* The same, also keeping the manifest's bytes as stored (malloc'ed). */
int stg_catalog_read_encoded(int filedirfd, uint64_t version, struct stg_manifest *ret,
			     uint8_t **ret_bytes, size_t *ret_len);

/* "v<20 digits>.mf": the name of a version's manifest file. */
void stg_catalog_manifest_name(uint64_t version, char out[40]);

/* Publishes m as version m->version, atomically; with sync, durably (the
 * caller has made its chunks durable first). Clears a deletion mark. When the
 * cache ships to servers, queues the version for the flusher (a republished
 * version, as chmod after close makes, is shipped again). Returns 0, -EFBIG
 * (the manifest would be larger than a reader takes: 64 MiB, about 1.4
 * million chunks) or -errno. */
int stg_catalog_publish(struct stg_catalog_file *f, const char *path,
			const struct stg_manifest *m, bool sync);

/* Changes the mode and/or modification time (NULL: unchanged) of the newest
 * version in place, as chmod or utimensat after close() mean. Returns 0,
 * -ENOENT (no version) or -errno. */
int stg_catalog_amend(struct stg_cache *c, const char *path, const uint32_t *mode,
		      const int64_t *mtime_ns, bool sync);

/* The newest version id known for a locked entry: its newest version's, or
 * the newest the servers were seen to hold (stg_catalog_note_seen), which
 * ever is greater; 0 for none. What a new id is minted after. */
uint64_t stg_catalog_newest_known(int filedirfd);

/* Records that the servers hold version id of path (restore saw it), so
 * that what this node writes next is newer. Returns 0 or -errno. */
int stg_catalog_note_seen(struct stg_cache *c, const char *path, uint64_t id);

/* The header flags (enum stg_manifest_flags) of a version. Returns them,
 * -ENOENT or -EBADMSG. */
int stg_catalog_flags(int filedirfd, uint64_t version);

/* Retention, on a locked entry (the node cache's or a server's): removes the
 * open versions older than the newest closed one (they were superseded, or
 * their writer died) or than a version that took their number, then the
 * closed versions beyond the newest keep (0: keeps all). The parts of one
 * job version count as one version, closed when one part is. With
 * complete_only (a server, which receives every node's parts; a cache holds
 * its own only), only complete job versions count against keep: an
 * incomplete one goes once keep complete ones are newer. Each version goes
 * through remove, which returns as stg_catalog_remove_version does (NULL:
 * that function; a server's also takes back the references of the version's
 * manifest). Returns how many were removed, or -errno. */
typedef int (*stg_catalog_remove_fn)(void *arg, int filedirfd, uint64_t version);
int stg_catalog_prune(int filedirfd, uint32_t keep, bool complete_only,
		      stg_catalog_remove_fn remove, void *arg);

/* Removes one version's manifest (and its replication mark). Returns 0 or -errno. */
int stg_catalog_remove_version(int filedirfd, uint64_t version);

/* The entry's tombstone (tombstone.h): 0, or -ENOENT when it has none.
 * *ret_legacy: the empty "deleted" file of caches before tombstones, or one
 * that cannot be read (logged), read as covering every version held, kept
 * STG_KEEP_DELETED_DEFAULT from the file's time; publishing removes it. */
int stg_catalog_tombstone(int filedirfd, struct stg_tombstone *ret, bool *ret_legacy);

/* Is the path deleted: has it a tombstone that covers its newest version
 * (or has it no version)? Its versions stay restorable until the tombstone
 * expires. */
bool stg_catalog_is_deleted(int filedirfd);

/* Removes the versions that expired tombstones cover (the cache's
 * collection runs it first, so that their chunks go in the same pass), and
 * the entries left empty whose tombstone the servers have. *ret_removed
 * (may be NULL): the versions removed. Returns 0 or -errno. */
int stg_catalog_expire(struct stg_cache *c, int64_t now_ns, size_t *ret_removed);

/* Records a deletion of the locked entry (merged with one recorded
 * already), durably with sync, and queues it for the servers when the
 * cache ships. Returns 0 or -errno. */
int stg_catalog_delete(struct stg_catalog_file *f, const struct stg_tombstone *t, bool sync);

/* The path that an entry describes, read from its "path" file. Returns 0,
 * -EBADMSG when it is not an absolute, normalized path (stg_path_valid) or
 * does not fit outlen, or -errno. */
int stg_catalog_read_path(int filedirfd, char *out, size_t outlen);

/* What a path looks like now. */
struct stg_file_state {
	bool exists;       /* has at least one version */
	bool deleted;      /* unlinked by the application */
	uint64_t latest;   /* newest version number */
	uint64_t size;     /* of the newest version */
	uint32_t mode;
	int64_t mtime_ns;
	uint64_t ino;      /* a stable number for st_ino */
	uint64_t damaged;  /* the newest version, when its manifest does not read */
};

/* Reads the state of path without locking. Returns 0 (state->exists may be
 * false) or -errno. A newest manifest that is corrupt (-EBADMSG) or cannot
 * be read (-EIO) sets state->damaged to its id, and the rest of the state
 * to that of the newest version that reads (exists false if none does). */
int stg_catalog_state(struct stg_cache *c, const char *path, struct stg_file_state *ret);

/* Calls fn for every path in the catalog (deleted ones too); stops when fn
 * returns non-zero and returns that. Returns 0 or -errno. */
int stg_catalog_foreach(struct stg_cache *c,
			int (*fn)(void *arg, const char *path, int filedirfd), void *arg);

/* stg_catalog_foreach that also calls bad (when not NULL) for every entry
 * whose recorded path cannot be read or is rejected (err: -EBADMSG or
 * -errno), naming the entry by its id, so that a tool can say which. */
int stg_catalog_scan(struct stg_cache *c, int (*fn)(void *arg, const char *path, int filedirfd),
		     void (*bad)(void *arg, const char *id, int err), void *arg);

/* The id old's newest version had (from) and has under the new name (to). */
struct stg_catalog_moved {
	uint64_t from, to;
};

/* Moves old's versions to new (all of them, their ids kept, when new has
 * none; else old's newest becomes new's next version, under a new id),
 * removes old, and prunes new to keep (stg_catalog_prune). *ret_moved (may
 * be NULL) says where old's newest went: a writer holding it open goes on
 * with that id. Returns 0, -ENOENT, or -errno. */
int stg_catalog_rename(struct stg_cache *c, const char *oldpath, const char *newpath, bool sync,
		       uint32_t keep, struct stg_catalog_moved *ret_moved);

/* link(): new gets old's newest version as its next version, closed; old
 * stays. Returns 0, -ENOENT, -EOPNOTSUPP (the newest version is one node's
 * part of a shared = job version), or -errno. */
int stg_catalog_link(struct stg_cache *c, const char *oldpath, const char *newpath, bool sync,
		     uint32_t keep);

/* Gives version old of path the next free id with its sequence number
 * (old + k * 2^STG_VERSION_SEQ_BITS), below the path's next version so that
 * the node's versions keep their order: what the flusher does when a server
 * holds another node's version under old (docs/FORMAT.md, "Version ids").
 * Under the path's lock, the manifest is republished under the new id
 * (durably), old's manifest and replication mark removed, and its queue
 * entry moved; one cut short by a crash (both ids hold the version) is
 * finished. Returns 0 with *ret_new set, -ENOENT (old is gone), -ERANGE (no
 * id is free below the next version) or -errno. */
int stg_catalog_remint(struct stg_cache *c, const char *path, uint64_t old, uint64_t *ret_new);

/* The id that version id of an entry, open or closed as open says, has
 * now: id while it is present (or gone for good), else the oldest newer
 * version as open with its sequence number, the id stg_catalog_remint gave
 * it. What a writer that holds an open version's id (to supersede or close
 * it) goes on with, and what durability = replicated waits for. Unlocked,
 * it may miss a re-minting under way. */
uint64_t stg_catalog_reminted(int filedirfd, uint64_t id, bool open);
