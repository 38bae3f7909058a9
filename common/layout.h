/* SPDX-License-Identifier: MIT */
/* Where stagehand's own files are: in the build tree, or installed
 * (meson.build lays them out), found from the file asking. */
#pragma once

#include <stddef.h>

enum stg_layout_file {
	STG_LAYOUT_TOOL,    /* stagehand ($STAGEHAND_TOOL) */
	STG_LAYOUT_FLUSHER, /* stagehand-flusher ($STAGEHAND_FLUSHER) */
	STG_LAYOUT_SHIM,    /* libstagehand.so ($STAGEHAND_LIB) */
	STG_LAYOUT_SERVER,  /* stagehand-server ($STAGEHAND_SERVER) */
};

/* Finds what: the file its environment variable names, else what sits where
 * the build tree or the installed layout puts it, seen from self (the path
 * of the file asking, which is a `from`). Sets out (PATH_MAX) to its real
 * path. Returns 0, -ENOENT, or -errno of the named file (not executable, or
 * for the shim, not readable). */
int stg_layout_find(enum stg_layout_file what, enum stg_layout_file from, const char *self,
		    char *out, size_t len);
