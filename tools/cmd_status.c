/* SPDX-License-Identifier: MIT */
/* stagehand status: the node cache, what it holds, what is in flight. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "catalog.h"
#include "tool.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: stagehand status [--policy F]\n"
		   "\n"
		   "Shows the node cache: files and versions staged, space used by chunk\n"
		   "objects against the capacity, writes in progress, and the servers.\n");
}

struct totals {
	uint64_t files, deleted, versions, logical;
};

static int count_file(void *arg, const char *path, int filedirfd)
{
	(void)path;
	struct totals *t = arg;
	uint64_t *v;
	size_t n;
	if (stg_catalog_versions(filedirfd, &v, &n) < 0)
		return 0;
	if (n) {
		t->files++;
		t->deleted += stg_catalog_is_deleted(filedirfd);
		t->versions += n;
		struct stg_manifest m;
		if (stg_catalog_read(filedirfd, v[n - 1], &m) == 0) {
			t->logical += m.size;
			stg_manifest_done(&m);
		}
	}
	free(v);
	return 0;
}

int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *policy = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': policy = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		tool_error("status: unexpected argument '%s'", argv[optind]);
		return EXIT_USAGE;
	}
	struct stg_policy *p;
	struct stg_cache *cache;
	if (tool_open(policy, &p, &cache))
		return 1;
	char a[32], b[32], d[32];
	printf("policy:   %s (%zu path rule%s)\n", p->file, p->nrules, p->nrules == 1 ? "" : "s");
	printf("cache:    %s\n", p->cache_dir);
	if (!cache) {
		printf("          empty: nothing staged yet\n");
	} else {
		struct totals t = {0};
		stg_catalog_foreach(cache, count_file, &t);
		uint64_t npacks, bytes;
		stg_cache_count_packs(cache, &npacks, &bytes);
		printf("files:    %" PRIu64 " (%" PRIu64 " deleted by the application), %" PRIu64
		       " versions\n",
		       t.files, t.deleted, t.versions);
		printf("stored:   %s in %" PRIu64 " packs for %s of newest versions\n",
		       tool_human(bytes, a, sizeof(a)), npacks, tool_human(t.logical, b, sizeof(b)));
		struct statvfs vfs;
		if (p->capacity)
			printf("capacity: %s, %.1f%% used (%s accounted)\n",
			       tool_human(p->capacity, d, sizeof(d)),
			       100.0 * (double)stg_cache_usage(cache) / (double)p->capacity,
			       tool_human(stg_cache_usage(cache), b, sizeof(b)));
		if (fstatvfs(cache->dirfd, &vfs) == 0)
			printf("disk:     %s free\n",
			       tool_human((uint64_t)vfs.f_bavail * vfs.f_frsize, d, sizeof(d)));
	}
	if (p->has_cluster)
		printf("servers:  %s (replicas = %u): shipping is not available in this "
		       "version; everything stays in the node cache\n",
		       p->servers ? p->servers : "(none)", p->replicas);
	else
		printf("servers:  none configured ([cluster]): staging is node-local\n");
	stg_cache_free(cache);
	stg_policy_free(p);
	return 0;
}
