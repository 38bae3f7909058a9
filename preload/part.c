/* SPDX-License-Identifier: MIT */
/* shared = job: this node's part of a version that every rank of a parallel
 * job writes, wherever it runs (docs/CAPTURE.md, "Shared files across
 * nodes"). Each process notes the ranges it writes; when it lets go, it
 * appends them to the writing's hold file, after the shared page; the node's
 * last process gathers them into the version's part section. Nodes never
 * talk: the job's identity and each rank's count of opens of the path name
 * the version on every node alike. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "log.h"
#include "manifest.h"
#include "real.h"
#include "util.h"

struct part {
	pthread_mutex_t lock; /* the application's threads write at once */
	uint32_t open;        /* this process's count of opens of the path */
	uint32_t *count;      /* that count (entries live as long as the process) */
	bool created;         /* opened with O_CREAT */
	bool wrote;           /* wrote or resized anything */
	struct stg_extent *ext;
	size_t n, cap, sorted; /* ext[0, sorted) is normalized */
};

/* ---- how often this process opened each path ----
 * The list grows under shim.lock; a count changes atomically (a close drops
 * an uncounted open without that lock). */

struct open_count {
	struct open_count *next;
	uint32_t n;
	char path[];
};
static struct open_count *counts;

static uint32_t *count_of(const char *path)
{
	for (struct open_count *c = counts; c; c = c->next)
		if (strcmp(c->path, path) == 0)
			return &c->n;
	struct open_count *c = calloc(1, sizeof(*c) + strlen(path) + 1);
	if (!c)
		return NULL;
	strcpy(c->path, path);
	c->next = counts;
	counts = c;
	return &c->n;
}

int part_open(struct session *s, int flags)
{
	const struct shim_job *job = job_identity();
	if (!job) {
		shim_log(STG_LOG_ERROR,
			 "'%s' is shared = job, but this process has no job identity "
			 "(SLURM_JOB_ID and SLURM_PROCID, PMI_RANK and PMI_SIZE, Open MPI's, "
			 "or STAGEHAND_JOB, STAGEHAND_RANK and STAGEHAND_RANKS)", s->path);
		return -EINVAL;
	}
	uint32_t *n = count_of(s->path);
	struct part *p = calloc(1, sizeof(*p));
	if (!n || !p) {
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->lock, NULL);
	p->count = n;
	p->created = flags & O_CREAT;
	s->part = p;
	return 0;
}

void part_opened(struct session *s)
{
	if (s->part)
		s->part->open = __atomic_add_fetch(s->part->count, 1, __ATOMIC_SEQ_CST);
}

void part_free(struct part *p)
{
	if (!p)
		return;
	pthread_mutex_destroy(&p->lock);
	free(p->ext);
	free(p);
}

void part_locks_after_fork(struct part *p)
{
	if (p)
		pthread_mutex_init(&p->lock, NULL);
}

/* ---- the ranges written ---- */

static int cmp_extent(const void *a, const void *b)
{
	const struct stg_extent *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Sorts ext[0, n) and merges what overlaps or touches; returns the count. */
static size_t normalize(struct stg_extent *ext, size_t n)
{
	if (n == 0)
		return 0;
	qsort(ext, n, sizeof(*ext), cmp_extent);
	size_t out = 0;
	for (size_t i = 1; i < n; i++) {
		struct stg_extent *last = &ext[out];
		if (ext[i].off <= last->off + last->len) {
			uint64_t end = ext[i].off + ext[i].len;
			if (end > last->off + last->len)
				last->len = end - last->off;
		} else {
			ext[++out] = ext[i];
		}
	}
	return out + 1;
}

static int add_locked(struct part *p, uint64_t off, uint64_t len)
{
	if (p->n == p->cap) {
		/* Strided writers leave many ranges: merge before growing. */
		p->n = p->sorted = normalize(p->ext, p->n);
		if ((p->cap == 0 || p->n * 2 > p->cap) && STG_GROW(p->ext, p->cap, p->cap + 1) < 0)
			return -ENOMEM;
	}
	p->ext[p->n++] = (struct stg_extent){off, len};
	return 0;
}

void part_wrote(struct session *s, uint64_t off, uint64_t len)
{
	struct part *p = s->part;
	if (!p || len == 0)
		return;
	pthread_mutex_lock(&p->lock);
	p->wrote = true;
	if (add_locked(p, off, len) < 0) {
		/* Without the record the merge would take another node's bytes. */
		s->broken = true;
		shim_log(STG_LOG_ERROR, "'%s': out of memory noting what was written", s->path);
	}
	pthread_mutex_unlock(&p->lock);
}

void part_resized(struct session *s, uint64_t old_size, uint64_t new_size)
{
	struct part *p = s->part;
	if (!p)
		return;
	if (new_size > old_size) {
		part_wrote(s, old_size, new_size - old_size);
		return;
	}
	pthread_mutex_lock(&p->lock);
	p->wrote = true;
	size_t out = 0;
	for (size_t i = 0; i < p->n; i++) {
		struct stg_extent e = p->ext[i];
		if (e.off >= new_size)
			continue;
		if (e.off + e.len > new_size)
			e.len = new_size - e.off;
		p->ext[out++] = e;
	}
	p->n = out;
	p->sorted = 0;
	pthread_mutex_unlock(&p->lock);
}

/* Does this process take part? An open with O_CREAT that wrote nothing does
 * not, nor does it count: MPI-IO's create pass (one rank creates the file and
 * closes it before every rank opens it) must not shift that rank's count. */
static bool takes_part(struct part *p)
{
	if (!p->created || p->wrote)
		return true;
	/* Only if no later open counted after it. */
	uint32_t open = p->open;
	__atomic_compare_exchange_n(p->count, &open, open - 1, false, __ATOMIC_SEQ_CST,
				    __ATOMIC_SEQ_CST);
	p->created = false; /* uncounted once */
	p->open = 0;
	return false;
}

/* ---- the node's part: records in the hold file, after the page ---- */

/* A process's record: this header, then n extents (native order: the node's
 * own processes read it). */
struct record {
	uint32_t magic, rank, open;
	uint32_t n;
};
#define RECORD_MAGIC 0x74726170u /* "part" */
#define RECORDS_START 4096

void part_begin(int holdfd)
{
	/* A hold file of a dead writing whose inode came back: start afresh. */
	struct stat st;
	if (holdfd >= 0 && real_fstat(holdfd, &st) == 0 && st.st_size > RECORDS_START)
		real_ftruncate(holdfd, RECORDS_START);
}

int part_leave(struct session *s)
{
	struct part *p = s->part;
	if (!p || !takes_part(p))
		return 0;
	if (s->holder_fd < 0)
		return 0; /* nobody else holds it: the commit is ours */
	pthread_mutex_lock(&p->lock);
	p->n = p->sorted = normalize(p->ext, p->n);
	size_t bytes = sizeof(struct record) + p->n * sizeof(struct stg_extent);
	uint8_t *buf = malloc(bytes);
	int r = buf ? 0 : -ENOMEM;
	struct stat st;
	if (r == 0 && real_fstat(s->holder_fd, &st) < 0)
		r = -errno;
	if (r == 0) {
		struct record rec = {RECORD_MAGIC, job_identity()->rank, p->open, (uint32_t)p->n};
		memcpy(buf, &rec, sizeof(rec));
		memcpy(buf + sizeof(rec), p->ext, p->n * sizeof(struct stg_extent));
		off_t at = st.st_size > RECORDS_START ? st.st_size : RECORDS_START;
		r = stg_pwrite_all(s->holder_fd, buf, bytes, at);
	}
	pthread_mutex_unlock(&p->lock);
	free(buf);
	if (r < 0) {
		/* The version would miss this rank: it must not commit. */
		if (s->share)
			share_set_broken(s->share);
		shim_log(STG_LOG_ERROR, "'%s': could not hand over what rank %u wrote: %s", s->path,
			 job_identity()->rank, strerror(-r));
	}
	return r;
}

struct gather {
	uint32_t *ranks;
	size_t nranks, cap_ranks;
	struct stg_extent *ext;
	size_t n, cap;
	uint32_t open;
	bool mismatch;
};

static int gather_one(struct gather *g, uint32_t rank, uint32_t open,
		      const struct stg_extent *ext, size_t n)
{
	if (g->open && open != g->open)
		g->mismatch = true;
	if (!g->open)
		g->open = open;
	if (STG_GROW(g->ranks, g->cap_ranks, g->nranks + 1) < 0)
		return -ENOMEM;
	g->ranks[g->nranks++] = rank;
	if (STG_GROW(g->ext, g->cap, g->n + n) < 0)
		return -ENOMEM;
	memcpy(g->ext + g->n, ext, n * sizeof(*ext));
	g->n += n;
	return 0;
}

static int gather_records(struct gather *g, int holdfd)
{
	struct stat st;
	if (holdfd < 0 || real_fstat(holdfd, &st) < 0 || st.st_size <= RECORDS_START)
		return 0;
	size_t len = (size_t)st.st_size - RECORDS_START;
	uint8_t *buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	int r = stg_pread_all(holdfd, buf, len, RECORDS_START);
	for (size_t at = 0; r == 0 && at < len;) {
		struct record rec;
		if (len - at < sizeof(rec)) {
			r = -EBADMSG;
			break;
		}
		memcpy(&rec, buf + at, sizeof(rec));
		at += sizeof(rec);
		if (rec.magic != RECORD_MAGIC || rec.n > (len - at) / sizeof(struct stg_extent)) {
			r = -EBADMSG;
			break;
		}
		struct stg_extent *ext = malloc((rec.n ? rec.n : 1) * sizeof(*ext));
		if (!ext) {
			r = -ENOMEM;
			break;
		}
		memcpy(ext, buf + at, rec.n * sizeof(*ext));
		at += rec.n * sizeof(*ext);
		r = gather_one(g, rec.rank, rec.open, ext, rec.n);
		free(ext);
	}
	free(buf);
	return r;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

int part_build(struct session *s, bool last, uint64_t size, struct stg_part **ret)
{
	*ret = NULL;
	struct part *p = s->part;
	if (!p)
		return 0;
	struct gather g = {0};
	int r = gather_records(&g, s->holder_fd);
	/* At the close our own part is counted as for anyone leaving; at a sync
	 * the writing goes on, and so does ours. */
	bool ours = last ? takes_part(p) : (!p->created || p->wrote);
	if (r == 0 && ours) {
		pthread_mutex_lock(&p->lock);
		r = gather_one(&g, job_identity()->rank, p->open, p->ext, p->n);
		pthread_mutex_unlock(&p->lock);
	}
	if (r == 0 && g.mismatch)
		shim_log(STG_LOG_WARN,
			 "'%s': this node's ranks disagree on how often they opened it; "
			 "its part goes with open %u", s->path, g.open);
	struct stg_part *part = NULL;
	if (r == 0 && g.nranks > 0) {
		qsort(g.ranks, g.nranks, sizeof(*g.ranks), cmp_u32);
		size_t nr = 1;
		for (size_t i = 1; i < g.nranks; i++)
			if (g.ranks[i] != g.ranks[nr - 1])
				g.ranks[nr++] = g.ranks[i];
		size_t ne = normalize(g.ext, g.n);
		/* Ranges past the end were cut by a truncation elsewhere. */
		size_t kept = 0;
		for (size_t i = 0; i < ne; i++) {
			struct stg_extent e = g.ext[i];
			if (e.off >= size)
				break;
			if (e.off + e.len > size)
				e.len = size - e.off;
			g.ext[kept++] = e;
		}
		r = stg_part_new(&part, (uint32_t)nr, (uint32_t)kept);
		if (r == 0) {
			snprintf(part->job, sizeof(part->job), "%s", job_identity()->id);
			part->node = stg_cache_node_id(shim.cache);
			part->open = g.open;
			part->nranks_job = job_identity()->size;
			memcpy(part->ranks, g.ranks, nr * sizeof(*g.ranks));
			memcpy(part->extents, g.ext, kept * sizeof(*g.ext));
			if (!part->node)
				r = -EIO;
		}
	}
	free(g.ranks);
	free(g.ext);
	if (r < 0) {
		stg_part_free(part);
		shim_log(STG_LOG_ERROR, "'%s': could not gather this node's part: %s", s->path,
			 strerror(-r));
		return r;
	}
	*ret = part;
	return 0;
}
