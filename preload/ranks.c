/* SPDX-License-Identifier: MIT */
/* Ranks of a parallel job taking turns on one file (docs/CAPTURE.md, "Ranks
 * taking turns"). With shared = node, a version is what the node's processes
 * wrote between the first open of a writing and its last close. Ranks that
 * open one file one after another, each to write its stripes (ranks that
 * never barrier, a multiprocessing pool), would each commit a version
 * holding only the stripes written so far, and keep would count those.
 * tmp/<file id>.ranks names the ranks of the job that took part in the
 * path's last writing; a rank of that job outside them that opens the file
 * to go on with it is refused, with a pointer to shared = job. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hash.h"
#include "internal.h"
#include "log.h"
#include "real.h"
#include "util.h"

/* The record (native byte order, this node only; docs/FORMAT.md, tmp/). A
 * torn or foreign one is ignored and written afresh. */
#define RANKS_MAGIC 0x736b6e72u /* "rnks" */
#define RANKS_FORMAT 1u
#define RANKS_LISTED 64u         /* ranks a record names */
#define RANKS_MANY 0xffffffffu   /* more took part: as good as all */
struct record {
	uint32_t magic, format;
	uint64_t job;  /* XXH3-64 of the job's id */
	uint32_t size; /* ranks in the job */
	uint32_t n;    /* ranks listed, or RANKS_MANY */
	uint32_t rank[RANKS_LISTED];
};
#define HEAD_BYTES offsetof(struct record, rank)

static size_t record_len(const struct record *r)
{
	return HEAD_BYTES + (r->n == RANKS_MANY ? 0 : r->n * sizeof(uint32_t));
}

static int open_record(const char *path, int flags)
{
	char id[STG_HASH_HEX_LEN + 1], name[64];
	stg_catalog_file_id(path, id);
	snprintf(name, sizeof(name), "%s.ranks", id);
	return real_openat(shim.cache->tmp_fd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | flags, 0600);
}

static bool read_record(int fd, struct record *r)
{
	ssize_t got = real_pread(fd, r, sizeof(*r), 0);
	if (got < (ssize_t)HEAD_BYTES || r->magic != RANKS_MAGIC || r->format != RANKS_FORMAT ||
	    r->size < 2 || r->size > STG_PART_RANKS_MAX ||
	    (r->n != RANKS_MANY && r->n > RANKS_LISTED) || (size_t)got != record_len(r))
		return false;
	for (uint32_t i = 0; r->n != RANKS_MANY && i < r->n; i++)
		if (r->rank[i] >= r->size)
			return false;
	return true;
}

static void write_record(int fd, const struct record *r)
{
	/* Advisory: a record lost to a crash only lets the next opener through. */
	if (real_ftruncate(fd, 0) < 0 || stg_pwrite_all(fd, r, record_len(r), 0) < 0)
		stg_debug("could not note the ranks writing a file: %s", strerror(errno));
}

static bool listed(const struct record *r, uint32_t rank)
{
	for (uint32_t i = 0; r->n != RANKS_MANY && i < r->n; i++)
		if (r->rank[i] == rank)
			return true;
	return false;
}

/* This process's job when its ranks' turns on path are watched, else NULL. */
static const struct shim_job *watched(const struct stg_path_rule *rule, uint64_t *tag)
{
	const struct shim_job *job = job_identity();
	/* shared = job merges the turns; shared = node written out says that
	 * each turn is a version on purpose. */
	if (rule->shared_job || rule->shared_node || !job || job->size < 2)
		return NULL;
	*tag = stg_hash64(job->id, strlen(job->id));
	return job;
}

static void refuse(const char *path, const struct shim_job *job, const struct record *r)
{
	char ranks[160];
	size_t at = 0;
	for (uint32_t i = 0; i < r->n && at < sizeof(ranks) - 16; i++)
		at += (size_t)snprintf(ranks + at, sizeof(ranks) - at, "%s%u", i ? ", " : "",
				       r->rank[i]);
	if (r->n > 0 && at >= sizeof(ranks) - 16)
		snprintf(ranks + at, sizeof(ranks) - at, ", ...");
	shim_log(STG_LOG_ERROR,
		 "'%s': rank %u of job %s opens it to go on writing it, but its last writing "
		 "was rank%s %s's alone, of %u ranks: ranks that take turns on one file would "
		 "each commit a version holding part of the file. Give its [path] rule shared = "
		 "job (a version is then every rank's writes), or shared = node if every turn "
		 "is a version of its own",
		 path, job->rank, job->id, r->n > 1 ? "s" : "", ranks, job->size);
}

int ranks_begin(const char *path, const struct stg_path_rule *rule, bool continues)
{
	uint64_t tag;
	const struct shim_job *job = watched(rule, &tag);
	if (!job)
		return 0;
	int fd = open_record(path, O_CREAT);
	if (fd < 0) {
		stg_debug("'%s': cannot note the ranks writing it: %s", path, strerror(errno));
		return 0;
	}
	struct record r;
	if (continues && read_record(fd, &r) && r.job == tag && r.size == job->size &&
	    r.n != RANKS_MANY && r.n < r.size && !listed(&r, job->rank)) {
		refuse(path, job, &r);
		real_close(fd);
		return -EBUSY;
	}
	r = (struct record){.magic = RANKS_MAGIC, .format = RANKS_FORMAT, .job = tag,
			    .size = job->size, .n = 1, .rank = {job->rank}};
	write_record(fd, &r);
	real_close(fd);
	return 0;
}

void ranks_join(const char *path, const struct stg_path_rule *rule)
{
	uint64_t tag;
	const struct shim_job *job = watched(rule, &tag);
	if (!job)
		return;
	int fd = open_record(path, 0);
	if (fd < 0)
		return;
	struct record r;
	/* A writing begun by another job, or by no job, is not this one's. */
	if (read_record(fd, &r) && r.job == tag && r.size == job->size && r.n != RANKS_MANY &&
	    !listed(&r, job->rank)) {
		if (r.n == RANKS_LISTED)
			r.n = RANKS_MANY;
		else
			r.rank[r.n++] = job->rank;
		write_record(fd, &r);
	}
	real_close(fd);
}
