/* SPDX-License-Identifier: MIT */
/* stagehand: run a job with the shim, list and restore staged versions. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "tool.h"
#include "util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: stagehand [--version] [--help] COMMAND [ARGS]\n"
		"\n"
		"Stages application checkpoints on the node's SSD, deduplicated and\n"
		"compressed, ships them to staging servers, and restores any version of\n"
		"them byte for byte, from the node or from the servers.\n"
		"\n"
		"commands:\n"
		"  run [--policy F] -- CMD [ARGS]   run CMD with its checkpoint writes captured\n"
		"  ls [--policy F] [PATH|PREFIX]    list the staged versions of files\n"
		"  restore [--policy F] [--version N] [--to DIR] PATH...\n"
		"                                   rebuild files from their staged versions\n"
		"  status [--policy F] [--json]     show the node cache, the queue and the servers\n"
		"  flush [--policy F] [--wait] [--timeout SECS]\n"
		"                                   ship what is staged; with --wait, until done\n"
		"\n"
		"'stagehand COMMAND --help' describes a command. The policy file is\n"
		"--policy F, else $STAGEHAND_POLICY, else ./stagehand.conf, else\n"
		"/etc/stagehand/policy.conf.\n");
}

void tool_error(const char *fmt, ...)
{
	va_list ap;
	/* The line whole: restore's threads may report at once. */
	flockfile(stderr);
	fputs("stagehand: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	funlockfile(stderr);
}

const char *tool_escape(const char *s, char *buf, size_t len)
{
	size_t o = 0;
	/* (5: the longest escape and the NUL) */
	for (; *s && o + 5 <= len; s++) {
		unsigned char c = (unsigned char)*s;
		char e = c == '\\' ? '\\' : c == '\n' ? 'n' : c == '\t' ? 't' : c == '\r' ? 'r' : 0;
		if (e)
			o += (size_t)snprintf(buf + o, len - o, "\\%c", e);
		else if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(buf + o, len - o, "\\%03o", c);
		else
			buf[o++] = (char)c;
	}
	buf[o] = '\0';
	return buf;
}

void tool_bad_entry(const char *cmd, const char *id, int err)
{
	if (err == -EBADMSG)
		tool_error("%s: cache entry 'files/%s' refused: its recorded path is not an "
			   "absolute, normalized path (it has a '..', a '.', an empty name or a NUL, "
			   "or is too long)",
			   cmd, id);
	else
		tool_error("%s: cache entry 'files/%s': cannot read its path: %s", cmd, id,
			   strerror(-err));
}

int tool_find(enum stg_layout_file what, char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0)
		return -errno;
	self[n] = '\0';
	return stg_layout_find(what, STG_LAYOUT_TOOL, self, out, len);
}

enum tool_foreign tool_foreign_cache;

int tool_open(const char *policy_file, struct stg_policy **ret_policy, struct stg_cache **ret_cache)
{
	char *file = policy_file ? strdup(policy_file) : stg_policy_locate();
	if (!file) {
		tool_error("no policy file: pass --policy F or set STAGEHAND_POLICY "
			   "(./stagehand.conf and /etc/stagehand/policy.conf do not exist)");
		return 1;
	}
	char err[1024];
	int r = stg_policy_load(file, ret_policy, err, sizeof(err));
	free(file);
	if (r < 0) {
		tool_error("%s", err);
		return 1;
	}
	if (!ret_cache)
		return 0;
	struct stat st;
	if (stat((*ret_policy)->cache_dir, &st) < 0 && errno == ENOENT) {
		*ret_cache = NULL; /* nothing staged yet */
		return 0;
	}
	r = stg_cache_open((*ret_policy)->cache_dir, ret_cache);
	if (r == 0) {
		(*ret_cache)->capacity = (*ret_policy)->capacity;
		(*ret_cache)->ship = (*ret_policy)->has_cluster;
	}
	if (r < 0) {
		tool_error("cannot open the cache '%s': %s", (*ret_policy)->cache_dir,
			   stg_cache_strerror(r));
		stg_policy_free(*ret_policy);
		return 1;
	}
	char why[PATH_MAX + 256];
	if (tool_foreign_cache != TOOL_FOREIGN_USE &&
	    stg_cache_owned(*ret_cache, why, sizeof(why)) < 0) {
		tool_error("the cache is refused: %s%s", why,
			   tool_foreign_cache == TOOL_FOREIGN_REFUSE_FLAG
				   ? "; --allow-foreign-cache uses it anyway" : "");
		stg_cache_free(*ret_cache);
		stg_policy_free(*ret_policy);
		return 1;
	}
	return 0;
}

int tool_abspath(const char *in, char *out, size_t outlen)
{
	char buf[PATH_MAX * 2];
	if (in[0] == '/') {
		snprintf(buf, sizeof(buf), "%s", in);
	} else {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd))) {
			tool_error("cannot get the current directory: %s", strerror(errno));
			return -1;
		}
		if (stg_path_join(buf, sizeof(buf), cwd, in) < 0) {
			tool_error("path too long: '%s'", in);
			return -1;
		}
	}
	if (stg_path_normalize(buf, out, outlen) < 0) {
		tool_error("path too long: '%s'", in);
		return -1;
	}
	return 0;
}

const char *tool_human(uint64_t b, char *buf, size_t len)
{
	static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)b;
	int u = 0;
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)b);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

int main(int argc, char **argv)
{
	stg_log_init_from_env();
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(cmd, "--version") == 0) {
		printf("stagehand %s\n", STAGEHAND_VERSION);
		return 0;
	}
	if (strcmp(cmd, "run") == 0)
		return cmd_run(argc - 1, argv + 1);
	if (strcmp(cmd, "ls") == 0)
		return cmd_ls(argc - 1, argv + 1);
	if (strcmp(cmd, "restore") == 0)
		return cmd_restore(argc - 1, argv + 1);
	if (strcmp(cmd, "status") == 0)
		return cmd_status(argc - 1, argv + 1);
	if (strcmp(cmd, "flush") == 0)
		return cmd_flush(argc - 1, argv + 1);
	if (strcmp(cmd, "__commit") == 0)
		return cmd_commit(argc - 1, argv + 1);
	tool_error("unknown command '%s' (try 'stagehand --help')", cmd);
	return EXIT_USAGE;
}
