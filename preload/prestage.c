/* SPDX-License-Identifier: MIT */
/* Chunks of a file written through its shadow (several processes writing one
 * file, or one process writing out of order) staged while the file is still
 * being written, so that the commit does not write them all after the last
 * write: a write that covers a whole fixed chunk (the ranks of an N-1
 * checkpoint writing stripes of a chunk or more, MPI-IO's collective
 * buffering) reads it back from the shadow and stores it in the cache,
 * indexed but in no version. The commit reads and hashes every chunk as
 * before, and finds these in the index instead of writing them again.
 * Nothing here decides what a version holds: a chunk written again after it
 * was staged, or written around the shim, hashes differently at the commit,
 * which stores it then; what no version takes is collected as garbage.
 * Chunks filled by many small writes are left to the commit: staging them
 * costs the writers a read and a hash each, which measured slower than the
 * disk wait it saves (docs/CAPTURE.md, "Chunks staged ahead"), and so are
 * files large enough to be pending commits (session_pack_later) and files
 * one process writes alone (nothing to overlap with: one writing out of
 * order, as HDF5 does, would read and hash each chunk twice). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "builder.h"
#include "hook.h"
#include "log.h"
#include "real.h"
#include "util.h"

/* How much a process stages between making it durable and indexed: another
 * process's fsync may commit the file meanwhile, and finds what is indexed. */
#define KEEP_EVERY (16u << 20)

bool prestage_wanted(const struct session *s)
{
	/* Staging ahead overlaps one writer's chunks with the others' writes;
	 * a writer alone would only read and hash each chunk twice. */
	return s->share && !s->fast && !s->readonly && !s->stage_off &&
	       s->rule->chunking == STG_CHUNKING_FIXED && share_joined(s->share);
}

/* The session's builder and read descriptor, made at its first whole chunk
 * (again after a rename gave the file another rule). Under stage_lock. */
static int start(struct session *s, int fd, const struct stg_path_rule *rule)
{
	if (s->stage)
		return 0;
	/* The application's descriptor may be write-only. */
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	int rfd = real_open(link, O_RDONLY | O_CLOEXEC);
	if (rfd < 0)
		return -errno;
	int r = stg_builder_new(shim.cache, s->path, rule, &s->stage);
	if (r < 0) {
		real_close(rfd);
		s->stage = NULL;
		return r;
	}
	s->stage_fd = rfd;
	shim_move_high(&s->stage_fd);
	s->stage_rule = rule;
	s->stage_bytes = 0;
	return 0;
}

/* Lets the builder go, keeping what it staged (durable and indexed) or, after
 * an error, not: a sync that failed once may not fail again, and what it
 * should have written must not be found. Under stage_lock. */
static void finish(struct session *s, bool keep)
{
	if (!s->stage)
		return;
	int r = keep ? stg_builder_keep(s->stage) : 0;
	if (r < 0)
		shim_log(STG_LOG_DEBUG, "'%s': chunks staged ahead are not kept (%s): the commit "
			 "stages them", s->path, strerror(-r));
	stg_builder_free(s->stage);
	s->stage = NULL;
	shim_release_fd(s->stage_fd);
	real_close(s->stage_fd);
	s->stage_fd = -1;
}

void prestage_wrote(struct session *s, int fd, uint64_t at, uint64_t n)
{
	int saved;
	if (!shim_enter(&saved))
		return; /* a write from inside the shim, or a signal handler's */
	pthread_mutex_lock(&s->stage_lock);
	/* A rename may have given the file another rule (another chunk size):
	 * the builder's buffers are the old one's. */
	const struct stg_path_rule *rule = s->rule;
	if (s->stage && s->stage_rule != rule)
		finish(s, true);
	uint64_t cs = rule->chunk_size;
	uint64_t k = (at + cs - 1) / cs, end = (at + n) / cs;
	/* A file that will be a pending commit is packed in the background:
	 * staging it here would have the disk write it twice over, in the
	 * writers' time. */
	if (session_pack_later(s, at + n))
		end = k;
	int r = k < end && rule->chunking == STG_CHUNKING_FIXED && !s->stage_off
			? start(s, fd, rule)
			: 0;
	for (; k < end && s->stage && r == 0; k++) {
		r = stg_pread_all(s->stage_fd, stg_builder_buffer(s->stage), cs, (off_t)(k * cs));
		if (r == -ENODATA) {
			r = 0; /* truncated meanwhile: the commit sees what is left */
			break;
		}
		if (r == 0)
			r = stg_builder_stage(s->stage, k, cs);
		if (r == 0 && (s->stage_bytes += cs) >= KEEP_EVERY) {
			s->stage_bytes = 0;
			r = stg_builder_keep(s->stage);
		}
	}
	if (r < 0 && !s->stage_off) {
		/* Only the commit's work is left to it: not an error of the write. */
		shim_log(STG_LOG_DEBUG, "'%s': no chunks staged ahead from now (%s)", s->path,
			 strerror(-r));
		finish(s, false);
		s->stage_off = true;
	}
	pthread_mutex_unlock(&s->stage_lock);
	shim_leave(0, saved);
}

void prestage_finish(struct session *s)
{
	pthread_mutex_lock(&s->stage_lock);
	finish(s, true);
	pthread_mutex_unlock(&s->stage_lock);
}

void prestage_before_fork(struct session *s)
{
	/* No thread of ours is then inside the builder the child lets go of. */
	if (!s->stage_fork_locked) {
		pthread_mutex_lock(&s->stage_lock);
		s->stage_fork_locked = true;
	}
}

void prestage_after_fork_parent(struct session *s)
{
	if (s->stage_fork_locked) {
		s->stage_fork_locked = false;
		pthread_mutex_unlock(&s->stage_lock);
	}
}

void prestage_forget_after_fork(struct session *s)
{
	pthread_mutex_init(&s->stage_lock, NULL);
	s->stage_fork_locked = false;
	/* The parent's builder writes through the parent's asynchronous I/O
	 * context: the child lets go of its copies of the descriptors and its
	 * memory only. */
	if (s->stage) {
		stg_builder_forget(s->stage);
		s->stage = NULL;
		shim_release_fd(s->stage_fd);
		real_close(s->stage_fd);
		s->stage_fd = -1;
	}
}
