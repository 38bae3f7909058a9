/* SPDX-License-Identifier: MIT */
/* Where restore writes: directories opened and created below a root, one
 * component at a time, never climbing out of it. Recorded paths are
 * checked when read (no ".."); this is the second wall, against a tree
 * that changes under the restore: every open is openat2(RESOLVE_BENEATH)
 * of one name, and symbolic links are followed only in place and only
 * when they are the user's (a link another user planted in the path would
 * steer a restore run by root wherever that user likes). */
#include "beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#endif

/* The kernel's limit on links followed in one lookup. */
#define MAX_LINKS 40

int beneath_open(int dirfd, const char *name, int flags, mode_t mode)
{
#if defined(SYS_openat2) && defined(RESOLVE_BENEATH)
	struct open_how how = {
		.flags = (uint64_t)(flags | O_NOFOLLOW),
		.mode = flags & (O_CREAT | O_TMPFILE) ? mode : 0,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
	if (fd >= 0)
		return (int)fd;
	if (errno != ENOSYS && errno != EPERM) /* (EPERM: a seccomp filter) */
		return -errno;
#endif
	/* One name that is not "..", opened without following a link, is
	 * beneath dirfd by construction. */
	if (strchr(name, '/') || strcmp(name, "..") == 0)
		return -EXDEV;
	int fd2 = openat(dirfd, name, flags | O_NOFOLLOW, mode);
	return fd2 < 0 ? -errno : fd2;
}

struct walk {
	int rootfd;
	bool follow;
	int links;
	char shown[PATH_MAX]; /* where the walk is, from the root: for messages */
	struct beneath_link *link;
};

static void shown_push(struct walk *w, const char *comp)
{
	size_t n = strlen(w->shown);
	snprintf(w->shown + n, sizeof(w->shown) - n, "/%s", comp);
}

static void shown_pop(struct walk *w)
{
	char *slash = strrchr(w->shown, '/');
	if (slash)
		*slash = '\0';
}

/* Replaces *fd with its subdirectory name. Returns 0 or -errno. */
static int step(int *fd, int nfd)
{
	if (nfd < 0)
		return nfd;
	close(*fd);
	*fd = nfd;
	return 0;
}

/* Walks path (modified) from *fd, which it replaces; creates missing
 * directories with create. Returns 0 or -errno. */
static int walk(struct walk *w, int *fd, char *path, bool create)
{
	for (char *comp = path, *next; comp; comp = next) {
		next = strchr(comp, '/');
		if (next)
			*next++ = '\0';
		if (!*comp || strcmp(comp, ".") == 0)
			continue;
		if (strcmp(comp, "..") == 0) {
			/* Only in the target of a link followed in place, where
			 * the root is "/" and ".." of "/" is "/". */
			shown_pop(w);
			int r = step(fd, openat(*fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
			if (r < 0)
				return -errno;
			continue;
		}
		if (create && mkdirat(*fd, comp, 0755) < 0 && errno != EEXIST)
			return -errno;
		shown_push(w, comp);
		int nfd = beneath_open(*fd, comp, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
		/* The link itself, held: its owner and its target are read from
		 * one inode, which no rename of the name can swap in between. */
		int lfd = nfd >= 0 || (nfd != -ELOOP && nfd != -ENOTDIR)
				  ? -1
				  : openat(*fd, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (lfd < 0 || fstat(lfd, &st) < 0 || !S_ISLNK(st.st_mode)) {
			if (lfd >= 0)
				close(lfd);
			int r = step(fd, nfd);
			if (r < 0)
				return r;
			continue;
		}
		bool ours = st.st_uid == 0 || st.st_uid == geteuid();
		if (!w->follow || !ours || ++w->links > MAX_LINKS) {
			close(lfd);
			snprintf(w->link->path, sizeof(w->link->path), "%s", w->shown);
			w->link->owner = st.st_uid;
			return -ELOOP;
		}
		char target[PATH_MAX];
		ssize_t n = readlinkat(lfd, "", target, sizeof(target) - 1);
		int err = errno;
		close(lfd);
		if (n < 0)
			return -err;
		target[n] = '\0';
		shown_pop(w);
		if (target[0] == '/') {
			w->shown[0] = '\0';
			int r = step(fd, openat(w->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
			if (r < 0)
				return -errno;
		}
		/* What the link names must exist, as for mkdir -p. */
		int r = walk(w, fd, target, false);
		if (r < 0)
			return r;
	}
	return 0;
}

int beneath_open_dir(int rootfd, const char *rel, bool follow, struct beneath_link *ret_link)
{
	struct walk w = {.rootfd = rootfd, .follow = follow, .link = ret_link};
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", rel) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	int fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = walk(&w, &fd, buf, true);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}
