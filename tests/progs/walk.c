/* SPDX-License-Identifier: MIT */
/* Walks a directory tree with libc's walkers (walkers.bats): glob, scandir,
 * ftw/nftw, readdir_r, telldir/seekdir. Paths print with the ROOT argument
 * shown as "D", so runs on two trees compare.
 *
 *   walk glob|glob64 ROOT FLAGS PATTERN...   (later patterns: GLOB_APPEND)
 *   walk scandir|scandir64 ROOT DIR
 *   walk scandirat|scandirat64 ROOT PARENT NAME
 *   walk ftw|ftw64 ROOT START
 *   walk nftw|nftw64 ROOT START FLAGS        (FLAGS: phys,depth,chdir,mount,
 *                                             actionretval,stop or "-")
 *   walk readdir_r|readdir64_r ROOT DIR
 *   walk seekdir ROOT DIR */
#include <stdbool.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static const char *root;
static int wflags;
static int calls_after_stop = -1;
static bool stop_mode; /* report nothing, return FTW_STOP at "stop" */

static const char *show(const char *path)
{
	static char buf[4096];
	size_t n = strlen(root);
	if (strncmp(path, root, n) == 0)
		snprintf(buf, sizeof(buf), "D%s", path + n);
	else
		snprintf(buf, sizeof(buf), "%s", path);
	return buf;
}

static bool has(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return true;
	return false;
}

static int glob_flags(const char *list)
{
	return (has(list, "mark") ? GLOB_MARK : 0) | (has(list, "onlydir") ? GLOB_ONLYDIR : 0) |
	       (has(list, "brace") ? GLOB_BRACE : 0) | (has(list, "nocheck") ? GLOB_NOCHECK : 0) |
	       (has(list, "tilde") ? GLOB_TILDE : 0) | (has(list, "err") ? GLOB_ERR : 0);
}

static int do_glob(bool is64, int argc, char **argv)
{
	int flags = glob_flags(argv[3]);
	glob_t g;
	glob64_t g64;
	for (int i = 4; i < argc; i++) {
		int f = flags | (i > 4 ? GLOB_APPEND : 0);
		int r = is64 ? glob64(argv[i], f, NULL, &g64) : glob(argv[i], f, NULL, &g);
		printf("glob %s: %s\n", show(argv[i]),
		       r == 0 ? "ok" : r == GLOB_NOMATCH ? "NOMATCH" : r == GLOB_ABORTED ? "ABORTED" : "error");
	}
	size_t n = is64 ? g64.gl_pathc : g.gl_pathc;
	char **v = is64 ? g64.gl_pathv : g.gl_pathv;
	int gflags = is64 ? g64.gl_flags : g.gl_flags;
	if (gflags & GLOB_ALTDIRFUNC)
		printf("gl_flags has GLOB_ALTDIRFUNC the caller did not pass\n");
	for (size_t i = 0; i < n; i++)
		printf("%s\n", show(v[i]));
	if (is64)
		globfree64(&g64);
	else
		globfree(&g);
	return 0;
}

static int visible(const struct dirent *e)
{
	return strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
}

static int visible64(const struct dirent64 *e)
{
	return strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
}

static int do_scandir(const char *mode, char **argv)
{
	struct dirent **v;
	struct dirent64 **v64;
	int n;
	errno = 0;
	if (strcmp(mode, "scandir") == 0)
		n = scandir(argv[3], &v, visible, alphasort);
	else if (strcmp(mode, "scandir64") == 0)
		n = scandir64(argv[3], &v64, visible64, alphasort64);
	else {
		int dfd = open(argv[3], O_RDONLY | O_DIRECTORY);
		if (dfd < 0) {
			perror(argv[3]);
			return 1;
		}
		if (strcmp(mode, "scandirat") == 0)
			n = scandirat(dfd, argv[4], &v, visible, alphasort);
		else
			n = scandirat64(dfd, argv[4], &v64, visible64, alphasort64);
		close(dfd);
	}
	if (n < 0) {
		printf("%s: error %s\n", mode, strerrorname_np(errno));
		return 0;
	}
	bool is64 = strstr(mode, "64") != NULL;
	printf("%s: %d entries, errno %d\n", mode, n, errno);
	for (int i = 0; i < n; i++) {
		struct dirent *e = is64 ? (struct dirent *)v64[i] : v[i];
		printf("%s type=%d\n", e->d_name, e->d_type);
		free(e);
	}
	free(is64 ? (void *)v64 : (void *)v);
	return 0;
}

static const char *flag_name(int flag)
{
	static const char *names[] = {"F", "D", "DNR", "NS", "SL", "DP", "SLN"};
	return flag >= 0 && flag <= FTW_SLN ? names[flag] : "?";
}

static void report(const char *path, const struct stat *st, int flag, const struct FTW *f)
{
	printf("%s %s", flag_name(flag), show(path));
	if (f)
		printf(" level=%d base=%s", f->level, path + f->base);
	if (flag == FTW_F)
		printf(" size=%lld mode=%o", (long long)st->st_size, st->st_mode & 07777);
	if (flag == FTW_SL || flag == FTW_SLN)
		printf(" lstat-size=%lld", (long long)st->st_size);
	if (f && (wflags & FTW_CHDIR)) {
		/* The walk stands in the entry's directory. */
		struct stat here;
		printf(" %s", lstat(path + f->base, &here) == 0 ? "here" : "lost");
	}
	printf("\n");
}

static int on_old(const char *path, const struct stat *st, int flag)
{
	report(path, st, flag, NULL);
	return 0;
}

static int on_old64(const char *path, const struct stat64 *st, int flag)
{
	return on_old(path, (const struct stat *)st, flag);
}

static int on_new(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	const char *name = path + f->base;
	if (calls_after_stop >= 0) {
		calls_after_stop++;
		return 0;
	}
	if (!(wflags & FTW_ACTIONRETVAL)) {
		report(path, st, flag, f);
		return 0;
	}
	if (stop_mode && strcmp(name, "stop") == 0) {
		printf("stop at %s\n", show(path));
		calls_after_stop = 0;
		return FTW_STOP;
	}
	/* Whichever entry of "sib" comes first ends that directory. */
	if (f->base >= 5 && strncmp(path + f->base - 5, "/sib/", 5) == 0) {
		printf("first entry of %.*s: skip siblings\n", (int)(strlen(show(path)) - strlen(name) - 1),
		       show(path));
		return FTW_SKIP_SIBLINGS;
	}
	if (!stop_mode)
		report(path, st, flag, f);
	if (flag == FTW_D && strcmp(name, "skipme") == 0)
		return FTW_SKIP_SUBTREE;
	return FTW_CONTINUE;
}

static int on_new64(const char *path, const struct stat64 *st, int flag, struct FTW *f)
{
	return on_new(path, (const struct stat *)st, flag, f);
}

static int do_ftw(const char *mode, int argc, char **argv)
{
	int r;
	if (argc > 4 && strcmp(argv[4], "-") != 0) {
		const char *l = argv[4];
		wflags = (has(l, "phys") ? FTW_PHYS : 0) | (has(l, "depth") ? FTW_DEPTH : 0) |
			 (has(l, "chdir") ? FTW_CHDIR : 0) | (has(l, "mount") ? FTW_MOUNT : 0) |
			 (has(l, "actionretval") ? FTW_ACTIONRETVAL : 0);
		stop_mode = has(l, "stop");
	}
	char before[4096], after[4096];
	if (!getcwd(before, sizeof(before)))
		return 1;
	if (strcmp(mode, "ftw") == 0)
		r = ftw(argv[3], on_old, 4);
	else if (strcmp(mode, "ftw64") == 0)
		r = ftw64(argv[3], on_old64, 4);
	else if (strcmp(mode, "nftw") == 0)
		r = nftw(argv[3], on_new, 2, wflags);
	else
		r = nftw64(argv[3], on_new64, 20, wflags);
	int err = errno;
	printf("%s returned %d", mode, r);
	if (r < 0)
		printf(" (%s)", strerrorname_np(err));
	if (calls_after_stop >= 0)
		printf(", %d calls after FTW_STOP", calls_after_stop);
	printf("\n");
	if (!getcwd(after, sizeof(after)) || strcmp(before, after) != 0)
		printf("cwd changed to %s\n", show(after));
	return 0;
}

static int do_readdir_r(bool is64, char **argv)
{
	DIR *d = opendir(argv[3]);
	if (!d) {
		printf("opendir: %s\n", strerrorname_np(errno));
		return 0;
	}
	struct dirent e, *p;
	struct dirent64 e64, *p64;
	int r;
	while (is64 ? (r = readdir64_r(d, &e64, &p64)) == 0 && p64 : (r = readdir_r(d, &e, &p)) == 0 && p)
		printf("%s\n", is64 ? e64.d_name : e.d_name);
	printf("readdir_r: %d\n", r);
	closedir(d);
	return 0;
}

/* Every telldir position gives back its entry; seeking back to the start and
 * to the end works. */
static int do_seekdir(char **argv)
{
	DIR *d = opendir(argv[3]);
	if (!d)
		return 1;
	long pos[256];
	char names[256][256];
	int n = 0;
	struct dirent *e;
	long start = telldir(d);
	for (; n < 256; n++) {
		pos[n] = telldir(d);
		if (!(e = readdir(d)))
			break;
		snprintf(names[n], sizeof(names[n]), "%s", e->d_name);
	}
	long end = pos[n];
	int bad = 0;
	for (int i = n - 1; i >= 0; i--) {
		seekdir(d, pos[i]);
		e = readdir(d);
		if (!e || strcmp(e->d_name, names[i]) != 0) {
			printf("seekdir to entry %d (%s) gave %s\n", i, names[i], e ? e->d_name : "the end");
			bad++;
		}
	}
	seekdir(d, end);
	if ((e = readdir(d)))
		printf("seekdir to the end gave %s\n", e->d_name);
	seekdir(d, start);
	int again = 0;
	while (readdir(d))
		again++;
	printf("%d entries, %d from the start again, %d positions wrong\n", n, again, bad);
	closedir(d);
	return 0;
}

/* The application's open descriptors (the shim keeps its own at 800 and up):
 * a walk must leave none behind. */
static void count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.' && atoi(e->d_name) < 800 && atoi(e->d_name) != dirfd(d);
	if (d)
		closedir(d);
	printf("open descriptors: %d\n", n);
}

static int run(int argc, char **argv)
{
	const char *mode = argv[1];
	root = argv[2];
	if (strncmp(mode, "glob", 4) == 0)
		return do_glob(strcmp(mode, "glob64") == 0, argc, argv);
	if (strncmp(mode, "scandir", 7) == 0)
		return do_scandir(mode, argv);
	if (strstr(mode, "ftw"))
		return do_ftw(mode, argc, argv);
	if (strncmp(mode, "readdir", 7) == 0)
		return do_readdir_r(strcmp(mode, "readdir64_r") == 0, argv);
	if (strcmp(mode, "seekdir") == 0)
		return do_seekdir(argv);
	fprintf(stderr, "walk: unknown mode %s\n", mode);
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: walk MODE ROOT ARGS...\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int r = run(argc, argv);
	count_fds();
	return r;
}
