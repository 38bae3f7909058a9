/* SPDX-License-Identifier: MIT */
/* Leveled logging with a replaceable sink. */
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

enum stg_log_level stg_log_max_level = STG_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static void default_sink(enum stg_log_level level, const char *msg)
{
	/* One write per message so lines from concurrent processes do not interleave. */
	char line[2048];
	int n = snprintf(line, sizeof(line), "stagehand: %s%s\n",
			 level == STG_LOG_ERROR ? "error: " : level == STG_LOG_WARN ? "warning: " : "",
			 msg);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}

static stg_log_sink_fn sink = default_sink;

void stg_log_set_sink(stg_log_sink_fn s)
{
	sink = s ? s : default_sink;
}

int stg_log_level_parse(const char *s)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
		if (strcasecmp(s, level_names[i]) == 0)
			return (int)i;
	if (strcasecmp(s, "warning") == 0)
		return STG_LOG_WARN;
	return -EINVAL;
}

void stg_log_init_from_env(void)
{
	const char *s = getenv("STAGEHAND_LOG");
	if (!s || !*s)
		return;
	int l = stg_log_level_parse(s);
	if (l >= 0)
		stg_log_max_level = (enum stg_log_level)l;
}

static void vlog(enum stg_log_level level, int r, const char *fmt, va_list ap)
{
	char msg[1536];
	int saved = errno;
	int n = vsnprintf(msg, sizeof(msg), fmt, ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(msg))
		n = sizeof(msg) - 1;
	if (r < 0)
		snprintf(msg + n, sizeof(msg) - (size_t)n, ": %s", strerror(-r));
	sink(level, msg);
	errno = saved;
}

void stg_log(enum stg_log_level level, const char *fmt, ...)
{
	if (level > stg_log_max_level)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(level, 0, fmt, ap);
	va_end(ap);
}

int stg_log_errno(enum stg_log_level level, int r, const char *fmt, ...)
{
	if (level > stg_log_max_level)
		return r;
	va_list ap;
	va_start(ap, fmt);
	vlog(level, r, fmt, ap);
	va_end(ap);
	return r;
}
