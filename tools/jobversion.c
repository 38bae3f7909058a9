/* SPDX-License-Identifier: MIT */
/* Grouping the parts of a job's version (see jobversion.h). */
#include "jobversion.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static bool same_version(const struct stg_part *a, const struct stg_part *b)
{
	return a->open == b->open && strcmp(a->job, b->job) == 0;
}

/* Why a job version is incomplete, in words: which of the job's ranks no
 * part has ("ranks 2-3, 7 of 8 missing"), or what its parts disagree on. */
static void find_why(const struct stg_manifest *ms, const size_t *parts, size_t n,
			 struct job_version *v)
{
	uint32_t size = ms[parts[0]].part->nranks_job;
	/* The node that wrote each rank (0: none yet): a rank of two nodes is
	 * a job id used twice (two runs, one name), never one version. */
	uint64_t *have = calloc(size, sizeof(*have)), twice = 0;
	uint32_t twice_rank = 0;
	if (!have) {
		v->complete = false;
		snprintf(v->why, sizeof(v->why), "(out of memory counting ranks)");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		const struct stg_part *p = ms[parts[i]].part;
		for (uint32_t k = 0; k < p->nranks; k++) {
			uint32_t r = p->ranks[k];
			if (r >= size)
				continue;
			if (have[r] && have[r] != p->node && !twice) {
				twice = p->node;
				twice_rank = r;
			}
			have[r] = p->node;
		}
		if (p->nranks_job != size)
			v->why[0] = '!'; /* parts disagree on the job's size */
	}
	size_t len = 0, nmissing = 0;
	char *out = v->why;
	bool disagree = out[0] == '!';
	out[0] = 0;
	for (uint32_t r = 0; r < size; r++) {
		if (have[r])
			continue;
		uint32_t end = r;
		while (end + 1 < size && !have[end + 1])
			end++;
		nmissing += end - r + 1;
		if (len < sizeof(v->why) - 40) {
			int w = end > r ? snprintf(out + len, sizeof(v->why) - len, "%s%u-%u",
						   len ? ", " : "", r, end)
					: snprintf(out + len, sizeof(v->why) - len, "%s%u",
						   len ? ", " : "", r);
			len += (size_t)w;
		} else if (!strstr(out, "...")) {
			len += (size_t)snprintf(out + len, sizeof(v->why) - len, ", ...");
		}
		r = end;
	}
	free(have);
	v->complete = nmissing == 0 && !disagree && !twice;
	if (disagree)
		snprintf(v->why, sizeof(v->why), "its parts disagree on the job's size");
	else if (twice)
		snprintf(v->why, sizeof(v->why),
			 "rank %u was written on two nodes (the job's name used by two runs?)",
			 twice_rank);
	else if (nmissing) {
		char tmp[sizeof(v->why) + 32];
		snprintf(tmp, sizeof(tmp), "rank%s %s of %u missing", nmissing > 1 ? "s" : "", out, size);
		snprintf(v->why, sizeof(v->why), "%.*s", (int)sizeof(v->why) - 1, tmp);
	}
}

ssize_t job_versions(const struct stg_manifest *ms, const uint64_t *ids, size_t n,
		     struct job_version **ret)
{
	struct job_version *v = calloc(n ? n : 1, sizeof(*v));
	bool *taken = calloc(n ? n : 1, sizeof(*taken));
	size_t nv = 0;
	if (!v || !taken)
		goto oom;
	/* From the newest down: a job version is placed at its newest part. */
	for (size_t i = n; i-- > 0;) {
		if (taken[i])
			continue;
		struct job_version *jv = &v[nv];
		jv->parts = calloc(n, sizeof(*jv->parts));
		if (!jv->parts)
			goto oom;
		nv++;
		jv->id = ids[i];
		taken[i] = true;
		jv->parts[jv->nparts++] = i;
		jv->open = ms[i].flags & STG_MANIFEST_OPEN;
		const struct stg_part *p = ms[i].part;
		if (!p) {
			jv->complete = true;
			continue;
		}
		jv->is_job = true;
		/* The same version's parts of every node (a node may have several:
		 * ranks that did not hold the file at the same time, or a sync
		 * and then the close). */
		for (size_t j = i; j-- > 0;) {
			const struct stg_part *q = ms[j].part;
			if (taken[j] || !q || !same_version(p, q))
				continue;
			taken[j] = true;
			jv->parts[jv->nparts++] = j;
			jv->open |= (ms[j].flags & STG_MANIFEST_OPEN) != 0;
		}
		/* By id ascending: where parts overlap, the later one wins. */
		for (size_t a = 0, b = jv->nparts - 1; a < b; a++, b--) {
			size_t t = jv->parts[a];
			jv->parts[a] = jv->parts[b];
			jv->parts[b] = t;
		}
		find_why(ms, jv->parts, jv->nparts, jv);
	}
	free(taken);
	/* Ascending by id, as the numbers go. */
	for (size_t a = 0, b = nv ? nv - 1 : 0; a < b; a++, b--) {
		struct job_version t = v[a];
		v[a] = v[b];
		v[b] = t;
	}
	*ret = v;
	return (ssize_t)nv;
oom:
	free(taken);
	job_versions_free(v, nv);
	return -ENOMEM;
}

void job_versions_free(struct job_version *v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i].parts);
	free(v);
}
