/* SPDX-License-Identifier: MIT */
/* The exec and spawn family: a new program, or a new process running one.
 * What the fast path staged goes to the shadows first, which the new program
 * adopts (session_adopt_inherited). */
#include <errno.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "hook.h"

static void before_exec(void)
{
	int saved;
	if (shim.ready && shim_enter(&saved)) {
		fast_materialize_all();
		shim_leave(0, saved);
	}
}

SHIM_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	before_exec();
	return REAL(execve)(path, argv, envp);
}

SHIM_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
			 int flags)
{
	before_exec();
	return REAL(execveat)(dirfd, path, argv, envp, flags);
}

SHIM_EXPORT int execv(const char *path, char *const argv[])
{
	before_exec();
	return REAL(execv)(path, argv);
}

SHIM_EXPORT int execvp(const char *file, char *const argv[])
{
	before_exec();
	return REAL(execvp)(file, argv);
}

SHIM_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	before_exec();
	return REAL(execvpe)(file, argv, envp);
}

SHIM_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	before_exec();
	return REAL(fexecve)(fd, argv, envp);
}

/* The execl family, rebuilt on the hooked execv, execvp and execve: collects
 * the NULL-terminated list into argv (MAX_EXECL_ARGS + 1 slots). Returns
 * false when it is too long. */
#define MAX_EXECL_ARGS 4096
static bool collect_args(const char *first, va_list *ap, char **argv)
{
	argv[0] = (char *)first;
	for (int n = 1; argv[n - 1]; n++) {
		if (n > MAX_EXECL_ARGS)
			return false;
		argv[n] = va_arg(*ap, char *);
	}
	return true;
}

SHIM_EXPORT int execl(const char *path, const char *arg, ...)
{
	char *argv[MAX_EXECL_ARGS + 1];
	va_list ap;
	va_start(ap, arg);
	bool ok = collect_args(arg, &ap, argv);
	va_end(ap);
	return ok ? execv(path, argv) : (errno = E2BIG, -1);
}

SHIM_EXPORT int execlp(const char *file, const char *arg, ...)
{
	char *argv[MAX_EXECL_ARGS + 1];
	va_list ap;
	va_start(ap, arg);
	bool ok = collect_args(arg, &ap, argv);
	va_end(ap);
	return ok ? execvp(file, argv) : (errno = E2BIG, -1);
}

SHIM_EXPORT int execle(const char *path, const char *arg, ...)
{
	char *argv[MAX_EXECL_ARGS + 1];
	va_list ap;
	va_start(ap, arg);
	bool ok = collect_args(arg, &ap, argv);
	char *const *envp = ok ? va_arg(ap, char *const *) : NULL;
	va_end(ap);
	return ok ? execve(path, argv, envp) : (errno = E2BIG, -1);
}

SHIM_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			    const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	before_exec();
	return REAL(posix_spawn)(pid, path, fa, attr, argv, envp);
}

SHIM_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			     const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	before_exec();
	return REAL(posix_spawnp)(pid, file, fa, attr, argv, envp);
}

SHIM_EXPORT int system(const char *cmd)
{
	before_exec();
	return REAL(system)(cmd);
}

SHIM_EXPORT FILE *popen(const char *cmd, const char *type)
{
	before_exec();
	return REAL(popen)(cmd, type);
}
