/* SPDX-License-Identifier: MIT */
/* Leveled logging with a replaceable sink. */
#pragma once

#include <stdarg.h>

enum stg_log_level {
	STG_LOG_ERROR = 0,
	STG_LOG_WARN = 1,
	STG_LOG_INFO = 2,
	STG_LOG_DEBUG = 3,
};

typedef void (*stg_log_sink_fn)(enum stg_log_level level, const char *msg);

/* Messages above this level are dropped. */
extern enum stg_log_level stg_log_max_level;

/* Replaces the sink (NULL restores the default: stderr with the program name). */
void stg_log_set_sink(stg_log_sink_fn sink);

/* For daemons: lines carry a timestamp, name and pid, and go to
 * $STAGEHAND_LOG_FILE (appended) when it is set, else to stderr. Returns 0 or
 * -errno when the file cannot be opened. */
int stg_log_open_daemon(const char *name);

/* Parses "error".."debug"; returns the level or -EINVAL. */
int stg_log_level_parse(const char *s);

/* Sets the level from $STAGEHAND_LOG if it is set and valid. */
void stg_log_init_from_env(void);

void stg_log(enum stg_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

void stg_logv(enum stg_log_level level, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/* Logs fmt followed by ": strerror(-r)" and returns r (a -errno). */
int stg_log_errno(enum stg_log_level level, int r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Each call site (format string) logs at most 20 messages per 10 s; past
 * that its messages are counted and the count logged ("N similar messages
 * suppressed") before its next one or at exit. This reports the counts not
 * yet logged, for a program leaving through _exit. */
void stg_log_report_suppressed(void);

#define stg_debug(...) stg_log(STG_LOG_DEBUG, __VA_ARGS__)
