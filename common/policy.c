/* SPDX-License-Identifier: MIT */
/* The policy file: which paths are captured and how. */
#include "policy.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "placement.h"
#include "util.h"

#define POLICY_MAX_BYTES (1u << 20)

/* inih keeps at most 49 characters of a section name and 199 of a line, far
 * less than a path on a parallel file system: the reader keeps each
 * [path GLOB] header's glob itself and hands inih this name instead. */
#define PATH_SECTION "path *"

struct parse_state {
	struct stg_policy *p;
	const char *text; /* remaining input */
	int line;         /* line the reader handed out last */
	char *err;
	size_t errlen;
	int failed;
	size_t rule; /* the [path GLOB] section being read */
	int cache_line, cluster_line; /* where [cache] and [cluster] begin */
	char *value; /* the value of a line too long for inih, see long_line() */
};

static void fail(struct parse_state *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void fail(struct parse_state *st, const char *fmt, ...)
{
	if (st->failed)
		return; /* the first error is the one worth reading */
	st->failed = st->line ? st->line : 1;
	if (!st->err || !st->errlen)
		return;
	int n = snprintf(st->err, st->errlen, "%s:%d: ", st->p->file, st->line);
	if (n < 0 || (size_t)n >= st->errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(st->err + n, st->errlen - (size_t)n, fmt, ap);
	va_end(ap);
}

static int path_header(struct parse_state *st, const char *l, size_t n);

/* Drops the white space at both ends of s[0..*n). */
static void trim(const char **s, size_t *n)
{
	while (*n && isspace((unsigned char)**s))
		(*s)++, (*n)--;
	while (*n && isspace((unsigned char)(*s)[*n - 1]))
		(*n)--;
}

/* The length of s[0..n) before an inline comment: a ';' after white space,
 * as inih sees one. */
static size_t before_comment(const char *s, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (s[i] == ';' && isspace((unsigned char)s[i - 1]))
			return i;
	return n;
}

/* A line of n characters too long for inih's buffer str: a comment is handed
 * out empty, "key = value" as "key = -" with the value kept in st->value for
 * the handler. Returns false for anything else. */
static bool long_line(struct parse_state *st, const char *l, size_t n, char *str, int num)
{
	bool indented = *l == ' ' || *l == '\t';
	trim(&l, &n);
	if (n && (*l == ';' || *l == '#')) {
		snprintf(str, (size_t)num, "\n");
		return true;
	}
	if (indented)
		return false; /* inih would continue the previous value with it */
	size_t k = 0;
	while (k < n && l[k] != '=' && l[k] != ':')
		k++;
	if (k == n || k + 6 > (size_t)num)
		return false;
	const char *v = l + k + 1;
	size_t vl = n - k - 1;
	trim(&v, &vl);
	vl = before_comment(v, vl);
	trim(&v, &vl);
	free(st->value);
	st->value = strndup(v, vl);
	if (!st->value)
		return false;
	snprintf(str, (size_t)num, "%.*s= -\n", (int)k, l);
	return true;
}

/* inih reads through this, one whole line at a time, so that handlers know
 * the line number, [path GLOB] headers keep their glob, and a line too long
 * for inih is read whole or is an error, never pieces misread. */
/* A [cache] or [cluster] header at line l (n bytes): each may appear once,
 * since a second would silently override what the first said. Returns -1
 * (failed) or 0. */
static int single_section(struct parse_state *st, const char *l, size_t n)
{
	while (n && isspace((unsigned char)l[n - 1]))
		n--;
	while (n && isspace((unsigned char)*l))
		l++, n--;
	int *seen = NULL;
	const char *name = NULL;
	if (n == 7 && memcmp(l, "[cache]", 7) == 0)
		seen = &st->cache_line, name = "cache";
	else if (n == 9 && memcmp(l, "[cluster]", 9) == 0)
		seen = &st->cluster_line, name = "cluster";
	if (!seen)
		return 0;
	if (*seen) {
		fail(st, "a second [%s] section; the first is at line %d", name, *seen);
		return -1;
	}
	*seen = st->line;
	return 0;
}

static char *reader(char *str, int num, void *stream)
{
	struct parse_state *st = stream;
	if (!*st->text || st->failed)
		return NULL;
	const char *l = st->text, *nl = strchr(l, '\n');
	size_t n = nl ? (size_t)(nl - l) : strlen(l);
	st->text = nl ? nl + 1 : l + n;
	st->line++;
	if (single_section(st, l, n) < 0)
		return NULL;
	int h = path_header(st, l, n);
	if (h < 0)
		return NULL;
	if (h > 0) {
		snprintf(str, (size_t)num, "[" PATH_SECTION "]\n");
		return str;
	}
	size_t chars = n && l[n - 1] == '\r' ? n - 1 : n;
	if (chars + 3 > (size_t)num) { /* room for "\r\n" and the NUL */
		if (long_line(st, l, chars, str, num))
			return str;
		fail(st, "line too long: %zu characters (at most %d but for a comment, a "
			 "[path ...] header or key = value)",
		     chars, num - 3);
		return NULL;
	}
	memcpy(str, l, n);
	str[n] = '\n';
	str[n + 1] = '\0';
	return str;
}

int stg_parse_size(const char *s, uint64_t *ret_bytes)
{
	char *end;
	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	unsigned shift = 0;
	switch (toupper((unsigned char)*end)) {
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	case 'T': shift = 40; end++; break;
	default: break;
	}
	if (shift && (*end == 'i' || *end == 'I'))
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*ret_bytes = (uint64_t)v << shift;
	return 0;
}

static int parse_uint(const char *s, uint32_t min, uint32_t max, uint32_t *ret)
{
	char *end;
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*ret = (uint32_t)v;
	return 0;
}

/* A duration: digits, then s (or nothing), m, h or d; at most 3650 days.
 * Returns 0 or -EINVAL. */
static int parse_duration(const char *s, uint32_t *ret)
{
	char *end;
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	unsigned long long unit = !*end || strcmp(end, "s") == 0 ? 1
				  : strcmp(end, "m") == 0 ? 60
				  : strcmp(end, "h") == 0 ? 3600
				  : strcmp(end, "d") == 0 ? 86400 : 0;
	if (errno || !unit || v > 3650ull * 86400 / unit)
		return -EINVAL;
	*ret = (uint32_t)(v * unit);
	return 0;
}

/* A key with two values: *ret is whether value is yes. Returns 1, or 0
 * after saying which values it takes. */
static int parse_either(struct parse_state *st, const char *name, const char *value,
			const char *yes, const char *no, bool *ret)
{
	if (strcmp(value, yes) != 0 && strcmp(value, no) != 0) {
		fail(st, "%s '%s' must be %s or %s", name, value, yes, no);
		return 0;
	}
	*ret = strcmp(value, yes) == 0;
	return 1;
}

static char *xstrdup_or_fail(struct parse_state *st, const char *s)
{
	char *d = strdup(s);
	if (!d)
		fail(st, "out of memory");
	return d;
}

static int handle_cache(struct parse_state *st, const char *name, const char *value)
{
	struct stg_policy *p = st->p;
	if (strcmp(name, "dir") == 0) {
		if (value[0] != '/') {
			fail(st, "[cache] dir must be an absolute path, not '%s'", value);
			return 0;
		}
		char norm[PATH_MAX];
		if (stg_path_normalize(value, norm, sizeof(norm)) < 0) {
			fail(st, "[cache] dir '%s' is not a usable path", value);
			return 0;
		}
		free(p->cache_dir);
		p->cache_dir = xstrdup_or_fail(st, norm);
		return 1;
	}
	if (strcmp(name, "capacity") == 0) {
		if (stg_parse_size(value, &p->capacity) < 0) {
			fail(st, "[cache] capacity '%s' is not a size (e.g. 50G)", value);
			return 0;
		}
		return 1;
	}
	if (strcmp(name, "metrics_file") == 0) {
		char norm[PATH_MAX];
		if (value[0] != '/' || stg_path_normalize(value, norm, sizeof(norm)) < 0 ||
		    strcmp(norm, "/") == 0) {
			fail(st, "[cache] metrics_file must be an absolute path to a file, not '%s'",
			     value);
			return 0;
		}
		free(p->metrics_file);
		p->metrics_file = xstrdup_or_fail(st, norm);
		return 1;
	}
	fail(st, "unknown key '%s' in [cache] (known: dir, capacity, metrics_file)", name);
	return 0;
}

static int handle_cluster(struct parse_state *st, const char *name, const char *value)
{
	struct stg_policy *p = st->p;
	if (strcmp(name, "servers") == 0) {
		free(p->servers);
		p->servers = xstrdup_or_fail(st, value);
		return 1;
	}
	if (strcmp(name, "replicas") == 0) {
		if (parse_uint(value, 1, 16, &p->replicas) < 0) {
			fail(st, "[cluster] replicas '%s' must be a number from 1 to 16", value);
			return 0;
		}
		return 1;
	}
	if (strcmp(name, "transport") == 0) {
		if (strcmp(value, "auto") == 0)
			p->transport = STG_TRANSPORT_AUTO;
		else if (strcmp(value, "rdma") == 0)
			p->transport = STG_TRANSPORT_RDMA;
		else if (strcmp(value, "tcp") == 0)
			p->transport = STG_TRANSPORT_TCP;
		else {
			fail(st, "[cluster] transport '%s' must be auto, rdma or tcp", value);
			return 0;
		}
		return 1;
	}
	if (strcmp(name, "secret_file") == 0) {
		free(p->secret_file);
		p->secret_file = xstrdup_or_fail(st, value);
		return 1;
	}
	if (strcmp(name, "auth") == 0) {
		if (strcmp(value, "secret") != 0 && strcmp(value, "munge") != 0) {
			fail(st, "[cluster] auth '%s' must be secret or munge", value);
			return 0;
		}
		p->munge = strcmp(value, "munge") == 0;
		return 1;
	}
	if (strcmp(name, "munge_socket") == 0) {
		if (value[0] != '/') {
			fail(st, "[cluster] munge_socket must be an absolute path, not '%s'", value);
			return 0;
		}
		free(p->munge_socket);
		p->munge_socket = xstrdup_or_fail(st, value);
		return 1;
	}
	if (strcmp(name, "munge_server_user") == 0) {
		size_t n = strlen(value);
		/* A user name as useradd takes it, or a uid. */
		bool ok = n > 0 && n < STG_MUNGE_USER_MAX && value[0] != '-';
		for (size_t i = 0; ok && i < n; i++)
			ok = isalnum((unsigned char)value[i]) || strchr("._-", value[i]);
		if (!ok) {
			fail(st, "[cluster] munge_server_user '%s' must be a user name or a uid",
			     value);
			return 0;
		}
		free(p->munge_server_user);
		p->munge_server_user = xstrdup_or_fail(st, value);
		return 1;
	}
	if (strcmp(name, "timeout") == 0) {
		if (parse_uint(value, 1, 3600, &p->timeout_s) < 0) {
			fail(st, "[cluster] timeout '%s' must be a number of seconds from 1 to 3600",
			     value);
			return 0;
		}
		return 1;
	}
	fail(st,
	     "unknown key '%s' in [cluster] (known: servers, replicas, transport, auth, "
	     "secret_file, munge_socket, munge_server_user, timeout)",
	     name);
	return 0;
}

/* Adds the rule of a [path GLOB] header, even one without keys (inih never
 * calls the handler for those), and makes it the current one. */
static struct stg_path_rule *rule_new(struct parse_state *st, const char *glob)
{
	struct stg_policy *p = st->p;
	for (size_t i = 0; i < p->nrules; i++)
		if (strcmp(p->rules[i].glob, glob) == 0) {
			fail(st, "[path %s] appears twice", glob);
			return NULL;
		}
	if (glob[0] != '/') {
		fail(st, "[path %s]: the pattern must be an absolute path", glob);
		return NULL;
	}
	if (STG_GROW(p->rules, p->caprules, p->nrules + 1) < 0) {
		fail(st, "out of memory");
		return NULL;
	}
	struct stg_path_rule *r = &p->rules[p->nrules];
	*r = (struct stg_path_rule){
		.glob = strdup(glob),
		.chunk_size = STG_CHUNK_DEFAULT,
		.dedup = true,
		.codec = stg_chunk_codec_default,
		.durability = STG_DURABILITY_LOCAL,
		.keep = STG_KEEP_DEFAULT,
		.keep_deleted_s = STG_KEEP_DELETED_DEFAULT,
		.line = st->line,
	};
	if (!r->glob) {
		fail(st, "out of memory");
		return NULL;
	}
	st->rule = p->nrules++;
	return r;
}

/* A "[path GLOB]" line (a glob may hold brackets: it ends at the last ']'):
 * adds its rule and returns 1; returns 0 for any other line, -1 after failing
 * on a malformed header. */
static int path_header(struct parse_state *st, const char *l, size_t n)
{
	trim(&l, &n);
	if (n < 5 || strncmp(l, "[path", 5) != 0 ||
	    (n > 5 && l[5] != ']' && !isspace((unsigned char)l[5])))
		return 0;
	n = before_comment(l, n);
	trim(&l, &n);
	const char *close = memrchr(l, ']', n);
	if (!close) {
		fail(st, "[path ...] has no closing ']'");
		return -1;
	}
	if (close != l + n - 1) {
		fail(st, "text after ']' in [path ...]: a header stands alone on its line");
		return -1;
	}
	const char *g = l + 5;
	size_t gl = n - 6;
	trim(&g, &gl);
	if (!gl) {
		fail(st, "[path] needs a pattern, e.g. [path /scratch/ckpt/*]");
		return -1;
	}
	if (gl >= PATH_MAX) {
		fail(st, "[path %.40s...] is %zu characters, longer than the %d characters a path "
			 "can have",
		     g, gl, PATH_MAX - 1);
		return -1;
	}
	char glob[PATH_MAX];
	memcpy(glob, g, gl);
	glob[gl] = '\0';
	return rule_new(st, glob) ? 1 : -1;
}

static int handle_path(struct parse_state *st, const char *name, const char *value)
{
	struct stg_path_rule *r = &st->p->rules[st->rule];
	if (strcmp(name, "chunk_size") == 0) {
		uint64_t v;
		if (stg_parse_size(value, &v) < 0 || v < STG_CHUNK_MIN || v > STG_CHUNK_SIZE_MAX ||
		    (v & (v - 1))) {
			fail(st, "chunk_size '%s' must be a power of two from 64K to 16M (a writer "
			     "holds a few chunks in memory)", value);
			return 0;
		}
		r->chunk_size = (uint32_t)v;
	} else if (strcmp(name, "chunking") == 0) {
		r->chunking_given = true;
		if (strcmp(value, "fixed") == 0)
			r->chunking = STG_CHUNKING_FIXED;
		else if (strcmp(value, "cdc") == 0)
			r->chunking = STG_CHUNKING_CDC;
		else {
			fail(st, "chunking '%s' must be fixed or cdc", value);
			return 0;
		}
	} else if (strcmp(name, "dedup") == 0) {
		return parse_either(st, name, value, "previous", "off", &r->dedup);
	} else if (strcmp(name, "delta") == 0) {
		return parse_either(st, name, value, "xor", "off", &r->delta);
	} else if (strcmp(name, "compress") == 0 || strcmp(name, "filter") == 0) {
		char err[256];
		if (stg_chunk_codec_parse(&r->codec, name, value, err, sizeof(err)) < 0) {
			fail(st, "%s", err);
			return 0;
		}
	} else if (strcmp(name, "durability") == 0) {
		if (strcmp(value, "async") == 0)
			r->durability = STG_DURABILITY_ASYNC;
		else if (strcmp(value, "local") == 0)
			r->durability = STG_DURABILITY_LOCAL;
		else if (strcmp(value, "replicated") == 0)
			r->durability = STG_DURABILITY_REPLICATED;
		else {
			fail(st, "durability '%s' must be async, local or replicated", value);
			return 0;
		}
	} else if (strcmp(name, "keep") == 0) {
		if (parse_uint(value, 1, 1000000, &r->keep) < 0) {
			fail(st, "keep '%s' must be a number of versions, at least 1", value);
			return 0;
		}
	} else if (strcmp(name, "keep_deleted") == 0) {
		if (parse_duration(value, &r->keep_deleted_s) < 0) {
			fail(st, "keep_deleted '%s' must be a duration: a number of seconds, or of "
			     "minutes, hours or days with m, h or d (0: until the next collection; "
			     "at most 3650d)", value);
			return 0;
		}
	} else if (strcmp(name, "shared") == 0) {
		int ok = parse_either(st, name, value, "job", "node", &r->shared_job);
		r->shared_node = ok && !r->shared_job;
		return ok;
	} else if (strcmp(name, "drain") == 0) {
		if (strcmp(value, "in-place") != 0 && value[0] != '/') {
			fail(st, "drain '%s' must be an absolute directory or in-place", value);
			return 0;
		}
		free(r->drain);
		r->drain = xstrdup_or_fail(st, value);
		if (!r->drain)
			return 0;
	} else {
		fail(st,
		     "unknown key '%s' in [path %s] (known: chunk_size, chunking, dedup, "
		     "delta, compress, filter, durability, keep, keep_deleted, shared, drain)",
		     name, r->glob);
		return 0;
	}
	return 1;
}

static int handle(struct parse_state *st, const char *section, const char *name,
		  const char *value)
{
	if (!value || !*value) {
		fail(st, "'%s' has no value", name);
		return 0;
	}
	if (strcmp(section, "cache") == 0)
		return handle_cache(st, name, value);
	if (strcmp(section, "cluster") == 0) {
		st->p->has_cluster = true;
		return handle_cluster(st, name, value);
	}
	if (strcmp(section, PATH_SECTION) == 0)
		return handle_path(st, name, value);
	if (!*section)
		fail(st, "'%s' appears before any [section]", name);
	else
		fail(st, "unknown section [%s] (known: [cache], [cluster], [path GLOB])", section);
	return 0;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
	struct parse_state *st = user;
	char *long_value = st->value; /* the line the reader just handed out */
	st->value = NULL;
	int r = st->failed ? 1 : handle(st, section, name, long_value ? long_value : value);
	free(long_value);
	return r;
}

/* Reads a regular file of at most POLICY_MAX_BYTES. Returns 0, -EFBIG,
 * -EINVAL (not a regular file: a FIFO, a device, a directory) or -errno. */
static int read_whole(const char *path, char **ret, size_t *ret_len)
{
	/* Non-blocking: opening a FIFO would wait for a writer. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	if (st.st_size > POLICY_MAX_BYTES) {
		close(fd);
		return -EFBIG;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int r = -errno;
			free(buf);
			close(fd);
			return r;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == (size_t)st.st_size)
			break;
	}
	close(fd);
	buf[len] = '\0';
	*ret = buf;
	*ret_len = len;
	return 0;
}

static int check_cluster(struct stg_policy *p, const char *path, char *err, size_t errlen);

/* The chunking of a rule that names none: content-defined, which finds data
 * again after it shifts and stored the least (bench/RESULTS.md, "The defaults"),
 * unless the rule asks what only fixed chunks do (a delta pairs chunks at
 * the same offset; content-defined averages stop at 4M). */
static void chunking_default(struct stg_policy *p)
{
	for (size_t i = 0; i < p->nrules; i++) {
		struct stg_path_rule *r = &p->rules[i];
		if (!r->chunking_given)
			r->chunking = r->delta || r->chunk_size > STG_CDC_AVERAGE_MAX
					      ? STG_CHUNKING_FIXED
					      : STG_CHUNKING_CDC;
	}
}

int stg_policy_load(const char *path, struct stg_policy **ret_policy, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	struct stg_policy *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	/* Absolute, so that a helper started from another directory finds it. */
	p->file = realpath(path, NULL);
	if (!p->file)
		p->file = strdup(path);
	p->replicas = 0; /* unset: 2, or 1 with a single server */
	p->timeout_s = 10;
	if (!p->file) {
		free(p);
		return -ENOMEM;
	}
	char *text = NULL;
	size_t len = 0;
	int r = read_whole(path, &text, &len);
	if (r < 0) {
		if (err)
			snprintf(err, errlen, "%s: cannot read the policy file: %s", path,
				 r == -EFBIG    ? "larger than 1 MiB"
				 : r == -EINVAL ? "not a regular file"
						: strerror(-r));
		stg_policy_free(p);
		return r;
	}
	if (memchr(text, '\0', len)) {
		if (err)
			snprintf(err, errlen, "%s: not a text file", path);
		free(text);
		stg_policy_free(p);
		return -EINVAL;
	}
	struct parse_state st = {.p = p, .text = text, .err = err, .errlen = errlen};
	if (strncmp(text, "\xef\xbb\xbf", 3) == 0)
		st.text += 3; /* a UTF-8 byte order mark, which inih would skip */
	int ir = ini_parse_stream(reader, &st, handler, &st);
	free(st.value);
	if (ir > 0 && !st.failed) {
		st.line = ir;
		fail(&st, "syntax error (expected [section] or key = value)");
	} else if (ir < 0 && !st.failed) {
		fail(&st, "cannot parse the policy file");
	}
	if (!st.failed && !p->cache_dir) {
		st.line = 0;
		if (err)
			snprintf(err, errlen, "%s: [cache] dir is required", path);
		st.failed = 1;
	}
	if (!st.failed) {
		chunking_default(p);
		st.failed = check_cluster(p, path, err, errlen);
	}
	free(text);
	if (st.failed) {
		stg_policy_free(p);
		return -EINVAL;
	}
	*ret_policy = p;
	return 0;
}

/* What only the whole file can tell: a usable [cluster], rules that need
 * one, and keys that exclude each other. Returns 1 (failed, message in err)
 * or 0. */
static int check_cluster(struct stg_policy *p, const char *path, char *err, size_t errlen)
{
	char msg[512];
	for (size_t i = 0; i < p->nrules; i++)
		if (p->rules[i].chunking == STG_CHUNKING_CDC &&
		    p->rules[i].chunk_size > STG_CDC_AVERAGE_MAX) {
			if (err)
				snprintf(err, errlen,
					 "%s:%d: chunk_size %uM is too large for chunking = cdc: "
					 "at most %uM on average (its chunks reach 4 x chunk_size, "
					 "and a writer holds a few of the largest in memory)",
					 path, p->rules[i].line, p->rules[i].chunk_size >> 20,
					 STG_CDC_AVERAGE_MAX >> 20);
			return 1;
		}
	for (size_t i = 0; i < p->nrules; i++)
		if (p->rules[i].delta && p->rules[i].chunking == STG_CHUNKING_CDC) {
			/* A delta pairs the chunk at one offset of two versions:
			 * content-defined cuts seldom fall at the same offsets. */
			if (err)
				snprintf(err, errlen,
					 "%s:%d: delta = xor needs chunking = fixed (it pairs the "
					 "chunks at the same offset of successive versions)",
					 path, p->rules[i].line);
			return 1;
		}
	for (size_t i = 0; i < p->nrules; i++)
		if (p->rules[i].drain && p->rules[i].shared_job) {
			/* Each node holds its part only: draining it would put one
			 * node's view where the whole file belongs. */
			if (err)
				snprintf(err, errlen,
					 "%s:%d: drain cannot go with shared = job (each node "
					 "holds only its part; stagehand restore merges them)",
					 path, p->rules[i].line);
			return 1;
		}
	if (p->has_cluster) {
		if (!p->servers) {
			if (err)
				snprintf(err, errlen, "%s: [cluster] servers is required", path);
			return 1;
		}
		if (stg_cluster_parse(p->servers, &p->server_list, &p->nservers, msg,
				      sizeof(msg)) < 0) {
			if (err)
				snprintf(err, errlen, "%s: [cluster] servers: %s", path, msg);
			return 1;
		}
		if (p->replicas == 0)
			p->replicas = p->nservers < 2 ? 1 : 2;
		if (p->replicas > p->nservers) {
			if (err)
				snprintf(err, errlen,
					 "%s: [cluster] replicas = %u, but only %zu server%s listed",
					 path, p->replicas, p->nservers, p->nservers == 1 ? " is" : "s are");
			return 1;
		}
		if (!p->secret_file && !p->munge) {
			if (err)
				snprintf(err, errlen,
					 "%s: [cluster] secret_file is required (the servers only "
					 "talk to clients that know the cluster's secret), unless "
					 "auth = munge",
					 path);
			return 1;
		}
		return 0;
	}
	for (size_t i = 0; i < p->nrules; i++) {
		const char *what = p->rules[i].durability == STG_DURABILITY_REPLICATED
					   ? "durability = replicated"
				   : p->rules[i].drain ? "drain"
						       : NULL;
		if (what) {
			if (err)
				snprintf(err, errlen,
					 "%s:%d: %s needs staging servers: add a [cluster] "
					 "section",
					 path, p->rules[i].line, what);
			return 1;
		}
	}
	return 0;
}

void stg_policy_free(struct stg_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nrules; i++) {
		free(p->rules[i].glob);
		free(p->rules[i].drain);
	}
	free(p->rules);
	stg_cluster_free(p->server_list, p->nservers);
	free(p->file);
	free(p->cache_dir);
	free(p->metrics_file);
	free(p->servers);
	free(p->secret_file);
	free(p->munge_socket);
	free(p->munge_server_user);
	free(p);
}

static bool path_has_prefix_dir(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static bool rule_matches(const char *glob, const char *path)
{
	size_t gl = strlen(glob);
	if (gl >= 3 && strcmp(glob + gl - 3, "/**") == 0) {
		/* Subtree: some proper ancestor directory of path matches the prefix. */
		char buf[PATH_MAX], pat[PATH_MAX];
		size_t pl = strlen(path);
		if (pl >= sizeof(buf) || gl >= sizeof(pat))
			return false;
		memcpy(pat, glob, gl - 3);
		pat[gl - 3] = '\0';
		if (pat[0] == '\0')
			return true; /* the whole tree */
		memcpy(buf, path, pl + 1);
		for (size_t i = pl; i > 0; i--) {
			if (buf[i] != '/')
				continue;
			buf[i] = '\0';
			if (fnmatch(pat, buf, FNM_PATHNAME) == 0)
				return true;
		}
		return false;
	}
	return fnmatch(glob, path, FNM_PATHNAME) == 0;
}

const struct stg_path_rule *stg_policy_match(const struct stg_policy *p, const char *abspath)
{
	if (!p || abspath[0] != '/')
		return NULL;
	if (p->cache_dir && path_has_prefix_dir(abspath, p->cache_dir))
		return NULL;
	for (size_t i = 0; i < p->nrules; i++)
		if (rule_matches(p->rules[i].glob, abspath))
			return &p->rules[i];
	return NULL;
}

bool stg_policy_may_contain(const struct stg_policy *p, const char *dir)
{
	if (!p || dir[0] != '/')
		return false;
	if (p->cache_dir && path_has_prefix_dir(dir, p->cache_dir))
		return false;
	for (size_t i = 0; i < p->nrules; i++) {
		const char *g = p->rules[i].glob;
		size_t gl = strlen(g);
		char pat[PATH_MAX];
		if (gl >= sizeof(pat))
			continue;
		if (gl >= 3 && strcmp(g + gl - 3, "/**") == 0) {
			memcpy(pat, g, gl - 3);
			pat[gl - 3] = '\0';
			char probe[PATH_MAX + 2];
			snprintf(probe, sizeof(probe), "%s/x", strcmp(dir, "/") ? dir : "");
			if (!pat[0] || rule_matches(g, probe))
				return true;
			continue;
		}
		memcpy(pat, g, gl + 1);
		char *slash = strrchr(pat, '/');
		if (slash == pat)
			slash[1] = '\0';
		else if (slash)
			*slash = '\0';
		if (fnmatch(pat, dir, FNM_PATHNAME) == 0)
			return true;
	}
	return false;
}

char *stg_policy_locate(void)
{
	const char *env = getenv("STAGEHAND_POLICY");
	if (env && *env)
		return strdup(env);
	if (access("stagehand.conf", F_OK) == 0) {
		char cwd[PATH_MAX];
		if (getcwd(cwd, sizeof(cwd))) {
			char *r;
			if (asprintf(&r, "%s/stagehand.conf", strcmp(cwd, "/") ? cwd : "") >= 0)
				return r;
		}
		return NULL;
	}
	if (access("/etc/stagehand/policy.conf", F_OK) == 0)
		return strdup("/etc/stagehand/policy.conf");
	return NULL;
}

const char *stg_durability_name(enum stg_durability d)
{
	switch (d) {
	case STG_DURABILITY_ASYNC: return "async";
	case STG_DURABILITY_LOCAL: return "local";
	case STG_DURABILITY_REPLICATED: return "replicated";
	}
	return "?";
}
