/* SPDX-License-Identifier: MIT */
/* Each user's paths, sorted: a skip list per user (Pugh, 1990), under one
 * mutex. A node is one allocation, its path inline. */
#include "pathindex.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Each level holds a quarter of the one below: 16 levels reach 4^16 paths
 * per user before searches slow down. */
#define MAX_LEVEL 16

struct node {
	struct node **next; /* level pointers, inline after the path */
	char path[];
};

struct user {
	uint32_t uid;
	int level;        /* levels in use, 1.. */
	struct node *head[MAX_LEVEL];
};

struct stg_pathindex {
	pthread_mutex_t lock;
	struct user *users; /* sorted by uid */
	size_t nusers, capusers;
	size_t count;
	uint64_t rng; /* xorshift64 state, for node levels */
};

int stg_pathindex_new(struct stg_pathindex **ret)
{
	struct stg_pathindex *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	pthread_mutex_init(&x->lock, NULL);
	x->rng = 0x9e3779b97f4a7c15ull;
	*ret = x;
	return 0;
}

void stg_pathindex_free(struct stg_pathindex *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->nusers; i++)
		for (struct node *n = x->users[i].head[0], *next; n; n = next) {
			next = n->next[0];
			free(n);
		}
	free(x->users);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

/* The user of uid (created with create), or NULL. Under the lock. */
static struct user *user_of(struct stg_pathindex *x, uint32_t uid, bool create)
{
	size_t lo = 0, hi = x->nusers;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (x->users[mid].uid < uid)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < x->nusers && x->users[lo].uid == uid)
		return &x->users[lo];
	if (!create)
		return NULL;
	/* Users are few (one per account that checkpoints): a sorted array. */
	if (STG_GROW(x->users, x->capusers, x->nusers + 1) < 0)
		return NULL;
	struct user *u = x->users;
	memmove(&u[lo + 1], &u[lo], (x->nusers - lo) * sizeof(*u));
	memset(&u[lo], 0, sizeof(*u));
	u[lo].uid = uid;
	u[lo].level = 1;
	x->nusers++;
	return &u[lo];
}

/* Fills update[l] with the last node before path at each level (NULL: the
 * head) and returns the first node at or after path. Under the lock. */
static struct node *seek(struct user *u, const char *path, struct node **update)
{
	struct node *prev = NULL;
	for (int l = u->level - 1; l >= 0; l--) {
		struct node *n = prev ? prev->next[l] : u->head[l];
		while (n && strcmp(n->path, path) < 0) {
			prev = n;
			n = n->next[l];
		}
		if (update)
			update[l] = prev;
	}
	return prev ? prev->next[0] : u->head[0];
}

/* 1, then one more level with odds 1/4 each. */
static int random_level(struct stg_pathindex *x)
{
	x->rng ^= x->rng << 13;
	x->rng ^= x->rng >> 7;
	x->rng ^= x->rng << 17;
	uint64_t r = x->rng;
	int l = 1;
	while (l < MAX_LEVEL && (r & 3) == 0) {
		l++;
		r >>= 2;
	}
	return l;
}

int stg_pathindex_add(struct stg_pathindex *x, uint32_t uid, const char *path)
{
	int r = 0;
	pthread_mutex_lock(&x->lock);
	struct user *u = user_of(x, uid, true);
	struct node *update[MAX_LEVEL];
	struct node *at = u ? seek(u, path, update) : NULL;
	if (!u) {
		r = -ENOMEM;
	} else if (!at || strcmp(at->path, path) != 0) {
		int level = random_level(x);
		size_t len = strlen(path) + 1;
		/* The path first, then the pointers, aligned after it. */
		size_t off = (sizeof(struct node) + len + sizeof(void *) - 1) & ~(sizeof(void *) - 1);
		struct node *n = malloc(off + (size_t)level * sizeof(struct node *));
		if (!n) {
			r = -ENOMEM;
		} else {
			memcpy(n->path, path, len);
			n->next = (struct node **)((char *)n + off);
			for (int l = u->level; l < level; l++)
				update[l] = NULL;
			if (level > u->level)
				u->level = level;
			for (int l = 0; l < level; l++) {
				struct node **link = update[l] ? &update[l]->next[l] : &u->head[l];
				n->next[l] = *link;
				*link = n;
			}
			x->count++;
		}
	}
	pthread_mutex_unlock(&x->lock);
	return r;
}

void stg_pathindex_remove(struct stg_pathindex *x, uint32_t uid, const char *path)
{
	pthread_mutex_lock(&x->lock);
	struct user *u = user_of(x, uid, false);
	struct node *update[MAX_LEVEL];
	struct node *n = u ? seek(u, path, update) : NULL;
	if (n && strcmp(n->path, path) == 0) {
		for (int l = 0; l < u->level; l++) {
			struct node **link = update[l] ? &update[l]->next[l] : &u->head[l];
			if (*link != n)
				break; /* n has no higher levels */
			*link = n->next[l];
		}
		while (u->level > 1 && !u->head[u->level - 1])
			u->level--;
		free(n);
		x->count--;
	}
	pthread_mutex_unlock(&x->lock);
}

int stg_pathindex_find(struct stg_pathindex *x, uint32_t uid, const char *prefix, char ***ret,
		       size_t *ret_n)
{
	size_t plen = strlen(prefix);
	pthread_mutex_lock(&x->lock);
	struct user *u = user_of(x, uid, false);
	struct node *first = u ? seek(u, prefix, NULL) : NULL;
	/* Two passes over the matches, both under the lock: their size, then
	 * the copy. */
	size_t n = 0, bytes = 0;
	for (struct node *p = first; p && strncmp(p->path, prefix, plen) == 0; p = p->next[0]) {
		n++;
		bytes += strlen(p->path) + 1;
	}
	char **out = malloc(n * sizeof(char *) + bytes + 1);
	if (out) {
		char *s = (char *)(out + n);
		size_t i = 0;
		for (struct node *p = first; i < n; p = p->next[0], i++) {
			size_t len = strlen(p->path) + 1;
			memcpy(s, p->path, len);
			out[i] = s;
			s += len;
		}
	}
	pthread_mutex_unlock(&x->lock);
	if (!out)
		return -ENOMEM;
	*ret = out;
	*ret_n = n;
	return 0;
}

size_t stg_pathindex_count(struct stg_pathindex *x)
{
	pthread_mutex_lock(&x->lock);
	size_t n = x->count;
	pthread_mutex_unlock(&x->lock);
	return n;
}
