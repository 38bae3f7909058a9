/* SPDX-License-Identifier: MIT */
/* Leveled logging with a replaceable sink. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
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

/* The rate limit. Each call site, known by its format string, may log
 * LOG_BURST messages per LOG_WINDOW_NS. Past that its messages are counted,
 * not even formatted, and the count is logged before the site's next message
 * or at exit. So a flood (a server refusing a hostile client thousands of
 * times a second, a warning on every write) neither fills the disk nor stalls
 * the program, while the first messages of every site, the single events,
 * always appear. Debug output, asked for explicitly, is not limited. */
#define LOG_BURST 20
#define LOG_WINDOW_NS (10 * 1000000000ll)
#define LOG_SITES 256 /* sites past this many are not limited */

struct site {
	_Atomic(const char *) fmt;
	atomic_llong window; /* when its current window began; 0: never */
	atomic_ullong passed; /* messages logged in that window */
	atomic_ullong dropped; /* suppressed since the last report */
	atomic_int level;      /* of the last one suppressed */
};

static struct site sites[LOG_SITES];

/* Monotonic, or the fixed STAGEHAND_TEST_CLOCK_NS of a test (as for the ids
 * versions are minted with): then no window ever ends. */
static int64_t log_clock(void)
{
	const char *e = getenv("STAGEHAND_TEST_CLOCK_NS");
	if (e && *e)
		return strtoll(e, NULL, 10);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct site *site_of(const char *fmt)
{
	size_t h = (size_t)(((uintptr_t)fmt >> 3) * 0x9e3779b97f4a7c15ull >> 32);
	for (size_t i = 0; i < LOG_SITES; i++) {
		struct site *s = &sites[(h + i) % LOG_SITES];
		const char *f = atomic_load(&s->fmt);
		if (!f && atomic_compare_exchange_strong(&s->fmt, &f, fmt))
			return s;
		if (f == fmt)
			return s;
	}
	return NULL;
}

static void say_dropped(enum stg_log_level level, const char *fmt, unsigned long long n)
{
	char msg[192];
	snprintf(msg, sizeof(msg), "%llu similar messages suppressed (\"%.120s\")", n, fmt);
	sink(level, msg);
}

void stg_log_report_suppressed(void)
{
	for (size_t i = 0; i < LOG_SITES; i++) {
		const char *fmt = atomic_load(&sites[i].fmt);
		unsigned long long n = fmt ? atomic_exchange(&sites[i].dropped, 0) : 0;
		if (n)
			say_dropped((enum stg_log_level)atomic_load(&sites[i].level), fmt, n);
	}
}

/* A child reports only what it suppressed itself. */
static void after_fork_child(void)
{
	for (size_t i = 0; i < LOG_SITES; i++)
		atomic_store(&sites[i].dropped, 0);
}

/* May a message from fmt be logged now? Reports first what its site
 * suppressed before it. */
static bool admit(enum stg_log_level level, const char *fmt)
{
	static atomic_bool at_exit_set;
	struct site *s = level == STG_LOG_DEBUG ? NULL : site_of(fmt);
	if (!s)
		return true;
	long long now = log_clock(), start = atomic_load(&s->window);
	if ((!start || now - start >= LOG_WINDOW_NS) &&
	    atomic_compare_exchange_strong(&s->window, &start, now))
		atomic_store(&s->passed, 0);
	if (atomic_fetch_add(&s->passed, 1) >= LOG_BURST) {
		atomic_store(&s->level, (int)level);
		atomic_fetch_add(&s->dropped, 1);
		if (!atomic_exchange(&at_exit_set, true)) {
			atexit(stg_log_report_suppressed);
			pthread_atfork(NULL, NULL, after_fork_child);
		}
		return false;
	}
	unsigned long long n = atomic_exchange(&s->dropped, 0);
	if (n)
		say_dropped(level, fmt, n);
	return true;
}

static void vlog(enum stg_log_level level, int r, const char *fmt, va_list ap)
{
	char msg[1536];
	int saved = errno;
	if (!admit(level, fmt)) {
		errno = saved;
		return;
	}
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

void stg_logv(enum stg_log_level level, const char *fmt, va_list ap)
{
	if (level <= stg_log_max_level)
		vlog(level, 0, fmt, ap);
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
