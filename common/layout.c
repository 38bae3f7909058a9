/* SPDX-License-Identifier: MIT */
/* Where stagehand's own files are. The shim finds the tool, the tool and the
 * shim find the flusher, `stagehand run` finds the shim: by their place
 * relative to the file asking, so that a tree installed under DESTDIR, or
 * moved, works as well as the build tree. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "layout.h"

static const struct {
	const char *env;
	const char *built;     /* from the build tree's root */
	const char *installed; /* from the prefix */
	const char *name;
} files[] = {
	[STG_LAYOUT_TOOL] = {"STAGEHAND_TOOL", "tools", STAGEHAND_BINDIR, "stagehand"},
	[STG_LAYOUT_FLUSHER] = {"STAGEHAND_FLUSHER", "flusher", STAGEHAND_HELPERDIR,
				"stagehand-flusher"},
	[STG_LAYOUT_SHIM] = {"STAGEHAND_LIB", "preload", STAGEHAND_SHIMDIR, "libstagehand.so"},
	[STG_LAYOUT_SERVER] = {"STAGEHAND_SERVER", "server", STAGEHAND_SBINDIR,
			       "stagehand-server"},
};

static int usable(enum stg_layout_file what, const char *path)
{
	return access(path, what == STG_LAYOUT_SHIM ? R_OK : X_OK) == 0 ? 0 : -errno;
}

/* How many components rel has. */
static int depth(const char *rel)
{
	int n = 0;
	for (const char *c = rel; *c;) {
		while (*c == '/')
			c++;
		if (!*c)
			break;
		n++;
		while (*c && *c != '/')
			c++;
	}
	return n;
}

int stg_layout_find(enum stg_layout_file what, enum stg_layout_file from, const char *self,
		    char *out, size_t len)
{
	const char *env = getenv(files[what].env);
	if (env && *env) {
		int r = usable(what, env);
		if (r == 0)
			snprintf(out, len, "%s", env);
		return r;
	}
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", self);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return -ENOENT;
	*slash = '\0';
	/* The build tree: one level below its root. The prefix: as many
	 * levels below as the asking file's installed directory has. */
	char built_root[PATH_MAX + 8], prefix[PATH_MAX + 64];
	snprintf(built_root, sizeof(built_root), "%s/..", dir);
	snprintf(prefix, sizeof(prefix), "%s", dir);
	for (int i = depth(files[from].installed); i > 0; i--)
		strncat(prefix, "/..", sizeof(prefix) - strlen(prefix) - 1);
	const char *cands[][2] = {{built_root, files[what].built},
				  {prefix, files[what].installed}};
	for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
		char p[PATH_MAX * 2 + 64], real[PATH_MAX];
		snprintf(p, sizeof(p), "%s/%s/%s", cands[i][0], cands[i][1], files[what].name);
		if (realpath(p, real) && usable(what, real) == 0) {
			snprintf(out, len, "%s", real);
			return 0;
		}
	}
	return -ENOENT;
}
