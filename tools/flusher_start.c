/* SPDX-License-Identifier: MIT */
/* Finding and starting the node's flusher from the tools. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tool.h"

bool tool_flusher_running(struct stg_cache *c, long *ret_pid)
{
	int fd = openat(c->dirfd, "flusher.lock", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool held = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	if (held && ret_pid) {
		char buf[32] = {0};
		*ret_pid = pread(fd, buf, sizeof(buf) - 1, 0) > 0 ? strtol(buf, NULL, 10) : 0;
	}
	close(fd);
	return held;
}

int tool_start_flusher(const struct stg_policy *p, struct stg_cache *c)
{
	if (tool_flusher_running(c, NULL))
		return 0;
	char exe[PATH_MAX + 64];
	int r = tool_find(STG_LAYOUT_FLUSHER, exe, sizeof(exe));
	if (r < 0) {
		tool_error("cannot find stagehand-flusher (set STAGEHAND_FLUSHER)");
		return r;
	}
	char log[PATH_MAX];
	const char *lf = getenv("STAGEHAND_LOG_FILE");
	snprintf(log, sizeof(log), "%s", lf && *lf ? lf : c->dir);
	if (!(lf && *lf))
		strncat(log, "/flusher.log", sizeof(log) - strlen(log) - 1);
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* Detached twice, so that it outlives us and nobody waits for it. */
		setsid();
		if (fork() != 0)
			_exit(0);
		int in = open("/dev/null", O_RDWR);
		int err = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
		if (in >= 0) {
			dup2(in, 0);
			dup2(in, 1);
		}
		if (err >= 0)
			dup2(err, 2);
		closefrom(3);
		execl(exe, "stagehand-flusher", "--policy", p->file, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return 0;
}
