/* SPDX-License-Identifier: MIT */
/* Writes that glibc makes with calls of its own, or that name a descriptor
 * instead of a path (escapes.bats): run on a plain directory and on a
 * captured one, they must give the same files.
 *
 *	escapes mkstemp DIR		mkstemp + write + rename onto DIR/final, and
 *					one more file kept: prints its name
 *	escapes mkostemps DIR		mkostemps with a suffix; prints the name
 *	escapes tmpfile DIR		O_TMPFILE in DIR linked as DIR/anon (a
 *					named file when O_TMPFILE is refused)
 *	escapes linktmp SRCDIR DST proc|empty
 *					O_TMPFILE in SRCDIR linked as DST through
 *					/proc/self/fd/N or AT_EMPTY_PATH
 *	escapes linkopen DIR		DIR/a written and, still open, linked as
 *					DIR/b through /proc/self/fd/N
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int die(const char *what)
{
	fprintf(stderr, "escapes: %s: %s\n", what, strerror(errno));
	return 1;
}

static int put(int fd, const char *s)
{
	return write(fd, s, strlen(s)) == (ssize_t)strlen(s) ? 0 : -1;
}

static int do_mkstemp(const char *dir)
{
	char tmpl[4096], bad[4096], final[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/.tmpXXXXXX", dir);
	snprintf(bad, sizeof(bad), "%s/badXXXXX", dir);
	snprintf(final, sizeof(final), "%s/final", dir);
	errno = 0;
	if (mkstemp(bad) != -1 || errno != EINVAL)
		return die("mkstemp of a template without six X's did not fail with EINVAL");
	int fd = mkstemp(tmpl);
	if (fd < 0)
		return die("mkstemp");
	if (strstr(tmpl, "XXXXXX"))
		return die("mkstemp left the X's");
	if (put(fd, "written to a mkstemp file\n") < 0 || close(fd) < 0)
		return die("write");
	if (rename(tmpl, final) < 0)
		return die("rename");
	snprintf(tmpl, sizeof(tmpl), "%s/keptXXXXXX", dir);
	fd = mkstemp(tmpl);
	if (fd < 0 || put(fd, "kept\n") < 0 || close(fd) < 0)
		return die("mkstemp");
	printf("%s\n", tmpl);
	return 0;
}

static int do_mkostemps(const char *dir)
{
	char tmpl[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/tmpXXXXXX.dat", dir);
	int fd = mkostemps(tmpl, 4, O_CLOEXEC | O_APPEND);
	if (fd < 0)
		return die("mkostemps");
	if (strcmp(tmpl + strlen(tmpl) - 4, ".dat") != 0 || (fcntl(fd, F_GETFD) & FD_CLOEXEC) == 0)
		return die("mkostemps: lost the suffix or O_CLOEXEC");
	if (put(fd, "kept\n") < 0 || close(fd) < 0)
		return die("write");
	printf("%s\n", tmpl);
	return 0;
}

static int link_proc(int fd, const char *dst)
{
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, AT_FDCWD, dst, AT_SYMLINK_FOLLOW);
}

static int do_tmpfile(const char *dir)
{
	char name[4096];
	snprintf(name, sizeof(name), "%s/anon", dir);
	int fd = open(dir, O_TMPFILE | O_RDWR, 0644);
	bool fallback = fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR);
	if (fallback)
		fd = open(name, O_RDWR | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		return die("open");
	if (put(fd, "anonymous, then named\n") < 0)
		return die("write");
	if (!fallback && link_proc(fd, name) < 0)
		return die("linkat");
	return close(fd) < 0 ? die("close") : 0;
}

static int do_linktmp(const char *srcdir, const char *dst, const char *how)
{
	int fd = open(srcdir, O_TMPFILE | O_RDWR, 0640);
	if (fd < 0)
		return die("open O_TMPFILE");
	if (put(fd, "linked from a descriptor\n") < 0)
		return die("write");
	int r = strcmp(how, "empty") == 0 ? linkat(fd, "", AT_FDCWD, dst, AT_EMPTY_PATH)
					  : link_proc(fd, dst);
	if (r < 0)
		return die("linkat");
	return close(fd) < 0 ? die("close") : 0;
}

static int do_linkopen(const char *dir)
{
	char a[4096], b[4096];
	snprintf(a, sizeof(a), "%s/a", dir);
	snprintf(b, sizeof(b), "%s/b", dir);
	int fd = open(a, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return die("open");
	if (put(fd, "linked while open\n") < 0)
		return die("write");
	if (link_proc(fd, b) < 0)
		return die("linkat");
	return close(fd) < 0 ? die("close") : 0;
}

/* A C program that spawns a child writing through an open action, waits,
 * and exits without destroying the actions object. */
static int do_spawnkeep(const char *dir)
{
	char out[4096];
	snprintf(out, sizeof(out), "%s/spawned", dir);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	if (posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644) != 0)
		return die("addopen");
	char *argv[] = {"sh", "-c", "echo from the child", NULL};
	extern char **environ;
	pid_t pid;
	int st;
	if (posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ) != 0 ||
	    waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return die("spawn");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "mkstemp") == 0)
		return do_mkstemp(argv[2]);
	if (argc == 3 && strcmp(argv[1], "mkostemps") == 0)
		return do_mkostemps(argv[2]);
	if (argc == 3 && strcmp(argv[1], "tmpfile") == 0)
		return do_tmpfile(argv[2]);
	if (argc == 5 && strcmp(argv[1], "linktmp") == 0)
		return do_linktmp(argv[2], argv[3], argv[4]);
	if (argc == 3 && strcmp(argv[1], "linkopen") == 0)
		return do_linkopen(argv[2]);
	if (argc == 3 && strcmp(argv[1], "spawnkeep") == 0)
		return do_spawnkeep(argv[2]);
	fprintf(stderr, "usage: escapes mkstemp|mkostemps|tmpfile|linkopen DIR | "
			"linktmp SRCDIR DST proc|empty | spawnkeep DIR\n");
	return 2;
}
