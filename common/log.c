/* SPDX-License-Identifier: MIT */
/* Leveled logging with a replaceable sink. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

enum stg_log_level stg_log_max_level = STG_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* One write per message so lines from concurrent processes do not interleave. */
static void write_line(int fd, const char *prefix, enum stg_log_level level, const char *msg)
{
	char line[2048];
	int n = snprintf(line, sizeof(line), "%s%s%s\n", prefix,
			 level == STG_LOG_ERROR ? "error: " : level == STG_LOG_WARN ? "warning: " : "",
			 msg);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	ssize_t w = write(fd, line, (size_t)n);
	(void)w;
}

static void default_sink(enum stg_log_level level, const char *msg)
{
	write_line(STDERR_FILENO, "stagehand: ", level, msg);
}

static stg_log_sink_fn sink = default_sink;

static const char *daemon_name;
static int daemon_fd = STDERR_FILENO;

/* Daemons run for hours: each line says when and which process. */
static void daemon_sink(enum stg_log_level level, const char *msg)
{
	char stamp[32];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	char prefix[128];
	snprintf(prefix, sizeof(prefix), "%s.%03ld %s[%d]: ", stamp, ts.tv_nsec / 1000000,
		 daemon_name, (int)getpid());
	write_line(daemon_fd, prefix, level, msg);
}

int stg_log_open_daemon(const char *name)
{
	daemon_name = name;
	const char *file = getenv("STAGEHAND_LOG_FILE");
	if (file && *file) {
		int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		daemon_fd = fd;
	}
	sink = daemon_sink;
	return 0;
}

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
