/* SPDX-License-Identifier: MIT */
/* System calls made without libc, as Rust's rustix and liburing make them:
 * `rawsys MODE DIR` writes DIR/model through inline syscall instructions.
 * The modes add what a program may do around them: block every signal,
 * install its own SIGSYS handler, make them from a signal handler, a thread,
 * a forked child. Exits 0 when every call gave what a file system gives. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static long raw6(long nr, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#define raw(nr, a, b, c, d) raw6(nr, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

static const char *dir;

static void check(int ok, const char *what, long r)
{
	if (!ok) {
		fprintf(stderr, "rawsys: %s: got %ld (%s)\n", what, r, r < 0 ? strerror((int)-r) : "");
		exit(1);
	}
}

/* What tempfile + persist do: a temporary name, written, renamed onto the
 * final name; stat and read back; a second rename with NOREPLACE refused. */
static void *write_model(void *tag)
{
	char tmp[4096], final[4096], buf[64], back[64];
	snprintf(tmp, sizeof(tmp), "%s/.tmp%s", dir, (const char *)tag);
	snprintf(final, sizeof(final), "%s/model%s", dir, (const char *)tag);
	long fd = raw(SYS_openat, AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	check(fd >= 0, "openat O_CREAT", fd);
	int n = snprintf(buf, sizeof(buf), "weights %s\n", (const char *)tag);
	for (int i = 0; i < 1000; i++) {
		long w = raw(SYS_write, fd, buf, n, 0);
		check(w == n, "write", w);
	}
	long r = raw(SYS_close, fd, 0, 0, 0);
	check(r == 0, "close", r);
	r = raw(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, final);
	check(r == 0, "renameat", r);
	struct stat st;
	r = raw(SYS_newfstatat, AT_FDCWD, final, &st, 0);
	check(r == 0 && st.st_size == 1000 * n, "newfstatat", r);
	r = raw(SYS_newfstatat, AT_FDCWD, tmp, &st, 0);
	check(r == -ENOENT, "newfstatat of the old name", r);
	fd = raw(SYS_openat, AT_FDCWD, final, O_RDONLY, 0);
	check(fd >= 0, "openat O_RDONLY", fd);
	r = raw(SYS_read, fd, back, n, 0);
	check(r == n && memcmp(back, buf, (size_t)n) == 0, "read", r);
	raw(SYS_close, fd, 0, 0, 0);
	return NULL;
}

/* Calls on a captured file's descriptor after writes through libc (which
 * the shim may hold in memory): newfstatat and statx of the descriptor
 * itself (AT_EMPTY_PATH) see them, and pwritev2 lands over them. */
static void fd_calls(void)
{
	char p[4096], buf[4096];
	snprintf(p, sizeof(p), "%s/model", dir);
	int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
	check(fd >= 0, "open", fd);
	memset(buf, 'a', sizeof(buf));
	for (int i = 0; i < 64; i++)
		check(write(fd, buf, sizeof(buf)) == sizeof(buf), "write", i);
	struct stat st;
	long r = raw6(SYS_newfstatat, fd, (long)"", (long)&st, AT_EMPTY_PATH, 0, 0);
	check(r == 0 && st.st_size == 64 * 4096, "newfstatat AT_EMPTY_PATH", r ? r : st.st_size);
	struct statx stx;
	r = raw6(SYS_statx, fd, (long)"", AT_EMPTY_PATH, STATX_SIZE, (long)&stx, 0);
	check(r == 0 && stx.stx_size == 64 * 4096, "statx AT_EMPTY_PATH", r ? r : (long)stx.stx_size);
	memset(buf, 'b', sizeof(buf));
	struct iovec iov = {buf, sizeof(buf)};
	for (int i = 0; i < 4; i++) {
		r = raw6(SYS_pwritev2, fd, (long)&iov, 1, (long)i * 8192, 0, 0);
		check(r == 4096, "pwritev2", r);
	}
	close(fd);
}

static void on_usr1(int sig)
{
	(void)sig;
	write_model("-handler");
}

static void on_sys(int sig)
{
	(void)sig;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: rawsys plain|blocked|own-sigsys|handler|thread|fork|fdcalls|"
				"altstack|exit DIR\n");
		return 2;
	}
	const char *mode = argv[1];
	dir = argv[2];
	if (strcmp(mode, "plain") == 0) {
		write_model("");
	} else if (strcmp(mode, "blocked") == 0) {
		/* every signal blocked, through libc and without it */
		sigset_t all;
		sigfillset(&all);
		sigprocmask(SIG_BLOCK, &all, NULL);
		uint64_t kall = ~0ull;
		long r = raw(SYS_rt_sigprocmask, SIG_SETMASK, &kall, NULL, 8);
		check(r == 0, "rt_sigprocmask", r);
		write_model("");
	} else if (strcmp(mode, "own-sigsys") == 0) {
		/* the program's SIGSYS handler is what it reads back */
		struct sigaction sa = {.sa_handler = on_sys}, got;
		sigaction(SIGSYS, &sa, NULL);
		sigaction(SIGSYS, NULL, &got);
		check(got.sa_handler == on_sys, "sigaction(SIGSYS) read back", 0);
		signal(SIGSYS, SIG_IGN);
		check(signal(SIGSYS, on_sys) == SIG_IGN, "signal(SIGSYS) read back", 0);
		write_model("");
	} else if (strcmp(mode, "handler") == 0) {
		/* made from a handler whose mask blocks every signal */
		struct sigaction sa = {.sa_handler = on_usr1};
		sigfillset(&sa.sa_mask);
		sigaction(SIGUSR1, &sa, NULL);
		raise(SIGUSR1);
		write_model("");
	} else if (strcmp(mode, "thread") == 0) {
		pthread_t t[4];
		static const char *tags[4] = {"-t0", "-t1", "-t2", "-t3"};
		for (int i = 0; i < 4; i++)
			pthread_create(&t[i], NULL, write_model, (void *)tags[i]);
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
		write_model("");
	} else if (strcmp(mode, "fdcalls") == 0) {
		fd_calls();
	} else if (strcmp(mode, "altstack") == 0) {
		/* a new alternate stack set without libc is the one kept */
		static char a[65536], b[65536];
		stack_t sa = {.ss_sp = a, .ss_size = sizeof(a)}, sb = {.ss_sp = b, .ss_size = sizeof(b)}, cur;
		sigaltstack(&sa, NULL);
		long r = raw(SYS_sigaltstack, &sb, NULL, 0, 0);
		check(r == 0, "sigaltstack", r);
		sigaltstack(NULL, &cur);
		check(cur.ss_sp == b, "sigaltstack read back", 0);
		write_model("");
	} else if (strcmp(mode, "exit") == 0) {
		/* standard output is the captured file: written, then the
		 * process ends with a raw exit_group */
		static const char msg[] = "written to standard output, then exit_group\n";
		long r = raw(SYS_write, 1, msg, sizeof(msg) - 1, 0);
		check(r == (long)sizeof(msg) - 1, "write", r);
		raw(SYS_exit_group, 0, 0, 0, 0);
	} else if (strcmp(mode, "fork") == 0) {
		pid_t pid = fork();
		if (pid == 0) {
			write_model("-child");
			_exit(0);
		}
		int st = 0;
		check(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child", st);
		write_model("");
	} else {
		fprintf(stderr, "rawsys: unknown mode '%s'\n", mode);
		return 2;
	}
	return 0;
}
