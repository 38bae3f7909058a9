/* SPDX-License-Identifier: MIT */
/* The policy file: parsing, validation with file:line, matching. */
#include "harness.h"

#include <limits.h>
#include <sys/stat.h>

#include "policy.h"

static char *dir;

static const char *write_policy(const char *name, const char *text)
{
	static char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
	return path;
}

/* Loads text and expects failure with a message containing want. */
static void expect_error(const char *text, const char *want)
{
	struct stg_policy *p = NULL;
	char err[1024];
	const char *path = write_policy("bad.conf", text);
	int r = stg_policy_load(path, &p, err, sizeof(err));
	CHECK(r < 0);
	CHECK(p == NULL);
	if (!strstr(err, want)) {
		fprintf(stderr, "message '%s' lacks '%s'\n", err, want);
		harness_failures++;
	}
}

static void test_full(void)
{
	const char *path = write_policy("full.conf",
		"; a comment\n"
		"# another\n"
		"[cache]\n"
		"dir = /local/ssd/stagehand   ; inline comment\n"
		"capacity = 50G\n"
		"\n"
		"[cluster]\n"
		"servers = bb01:7400, bb02:7400\n"
		"replicas = 2\n"
		"transport = tcp\n"
		"secret_file = /etc/stagehand/secret\n"
		"\n"
		"[path /scratch/ckpt/*]\n"
		"chunk_size = 4M\n"
		"chunking = cdc\n"
		"dedup = off\n"
		"compress = off\n"
		"durability = async\n"
		"keep = 7\n"
		"keep_deleted = 2h\n"
		"[path /scratch/other/**]\n"
		"keep_deleted = 0\n"
		"compress = zstd\n"
		"filter = bitshuffle8\n"
		"delta = xor\n"
		"[path /scratch/safe/*]\n"
		"durability = replicated\n"
		"drain = /pfs/out\n"
		"[path /scratch/big/*]\n"
		"chunk_size = 8M\n"
		"[path /scratch/fixed/*]\n"
		"chunking = fixed\n");
	struct stg_policy *p;
	char err[1024];
	int r = stg_policy_load(path, &p, err, sizeof(err));
	CHECK_EQ(r, 0);
	if (r < 0) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK_STR(p->cache_dir, "/local/ssd/stagehand");
	CHECK_EQ(p->capacity, 50ull << 30);
	CHECK(p->has_cluster);
	CHECK_STR(p->servers, "bb01:7400, bb02:7400");
	CHECK_EQ(p->nservers, 2);
	if (p->nservers == 2) {
		CHECK_STR(p->server_list[0], "bb01:7400");
		CHECK_STR(p->server_list[1], "bb02:7400");
	}
	CHECK_EQ(p->rules[2].durability, STG_DURABILITY_REPLICATED);
	CHECK_STR(p->rules[2].drain, "/pfs/out");
	CHECK(p->rules[0].drain == NULL);
	CHECK_EQ(p->replicas, 2);
	CHECK_EQ(p->transport, STG_TRANSPORT_TCP);
	CHECK_EQ(p->nrules, 5);
	CHECK_STR(p->rules[0].glob, "/scratch/ckpt/*");
	CHECK_EQ(p->rules[0].chunk_size, 4u << 20);
	CHECK_EQ(p->rules[0].chunking, STG_CHUNKING_CDC);
	CHECK(!p->rules[0].dedup);
	CHECK(!p->rules[0].delta);
	CHECK(p->rules[1].delta);
	struct stg_chunk_codec want = stg_chunk_codec_default;
	char cerr[256];
	CHECK_EQ(stg_chunk_codec_parse(&want, "compress", "off", cerr, sizeof(cerr)), 0);
	CHECK(memcmp(&p->rules[0].codec, &want, sizeof(want)) == 0);
	want = stg_chunk_codec_default;
	CHECK_EQ(stg_chunk_codec_parse(&want, "compress", "zstd", cerr, sizeof(cerr)), 0);
	CHECK_EQ(stg_chunk_codec_parse(&want, "filter", "bitshuffle8", cerr, sizeof(cerr)), 0);
	CHECK(memcmp(&p->rules[1].codec, &want, sizeof(want)) == 0);
	/* The default is lz4 without a filter. */
	CHECK(memcmp(&p->rules[2].codec, &stg_chunk_codec_default, sizeof(want)) == 0);
	CHECK_EQ(p->rules[0].durability, STG_DURABILITY_ASYNC);
	CHECK_EQ(p->rules[0].keep, 7);
	CHECK_EQ(p->rules[0].keep_deleted_s, 7200);
	CHECK_EQ(p->rules[1].keep_deleted_s, 0);
	CHECK_EQ(p->rules[2].keep_deleted_s, STG_KEEP_DELETED_DEFAULT);
	/* Without chunk keys: content-defined chunks of 1M on average... */
	CHECK_EQ(p->rules[2].chunking, STG_CHUNKING_CDC);
	CHECK_EQ(p->rules[2].chunk_size, STG_CHUNK_DEFAULT);
	/* ...but fixed chunks where only they serve: a delta, a chunk_size
	 * above the largest cdc average, and when asked. */
	CHECK_STR(p->rules[1].glob, "/scratch/other/**");
	CHECK_EQ(p->rules[1].chunk_size, STG_CHUNK_DEFAULT);
	CHECK_EQ(p->rules[1].chunking, STG_CHUNKING_FIXED);
	CHECK_EQ(p->rules[3].chunk_size, 8u << 20);
	CHECK_EQ(p->rules[3].chunking, STG_CHUNKING_FIXED);
	CHECK_EQ(p->rules[4].chunk_size, STG_CHUNK_DEFAULT);
	CHECK_EQ(STG_CHUNK_DEFAULT, 1u << 20);
	CHECK_EQ(p->rules[4].chunking, STG_CHUNKING_FIXED);
	CHECK(p->rules[1].dedup);
	CHECK_EQ(p->rules[1].durability, STG_DURABILITY_LOCAL);
	CHECK_EQ(p->rules[1].keep, STG_KEEP_DEFAULT);

	/* A star stays within a directory, a trailing slash-star-star takes the
	 * subtree, and the first match wins. */
	CHECK(stg_policy_match(p, "/scratch/ckpt/rank0.dat") == &p->rules[0]);
	CHECK(stg_policy_match(p, "/scratch/ckpt/sub/rank0.dat") == NULL);
	CHECK(stg_policy_match(p, "/scratch/other/a") == &p->rules[1]);
	CHECK(stg_policy_match(p, "/scratch/other/a/b/c") == &p->rules[1]);
	CHECK(stg_policy_match(p, "/scratch/other") == NULL);
	CHECK(stg_policy_match(p, "/scratch/otherwise/a") == NULL);
	CHECK(stg_policy_match(p, "relative/path") == NULL);
	CHECK(stg_policy_may_contain(p, "/scratch/ckpt"));
	CHECK(stg_policy_may_contain(p, "/scratch/other/deep/er"));
	CHECK(!stg_policy_may_contain(p, "/scratch"));
	stg_policy_free(p);
}

static void test_cache_excluded(void)
{
	const char *path = write_policy("c.conf", "[cache]\ndir = /data/cache\n[path /data/**]\n");
	struct stg_policy *p;
	CHECK_EQ(stg_policy_load(path, &p, NULL, 0), 0);
	CHECK(stg_policy_match(p, "/data/x") != NULL);
	CHECK(stg_policy_match(p, "/data/cache/files/x") == NULL);
	CHECK(stg_policy_match(p, "/data/cachex") != NULL);
	stg_policy_free(p);
}

/* Paths on parallel file systems are long: a glob is as long as a path can
 * be, whatever inih's limits on section names and lines. */
static void test_long_glob(void)
{
	/* Past 44 characters, inih used to cut the glob short. */
	const char *mid = "/lustre/orion/proj-shared/abc123/username/run-1/*";
	expect_error("[cache]\ndir = /c\n[path /lustre/orion/proj-shared/abc123/username/run-1/*]\n"
		     "kep = 2\n",
		     "bad.conf:4: unknown key 'kep' in [path /lustre/orion/proj-shared/abc123/"
		     "username/run-1/*]");
	struct stg_policy *p = NULL;
	const char *path = write_policy("mid.conf", "[cache]\ndir = /c\n"
				       "[path /lustre/orion/proj-shared/abc123/username/run-1/*]\n"
				       "keep = 2\n");
	CHECK_EQ(stg_policy_load(path, &p, NULL, 0), 0);
	if (p) {
		CHECK_STR(p->rules[0].glob, mid);
		CHECK_EQ(p->rules[0].keep, 2);
		stg_policy_free(p);
	}

	char glob[3000] = "/lustre/orion/proj-shared/abc123/username";
	while (strlen(glob) < 2900)
		strcat(glob, "/run-2026-11-05T04:00:00.000-rank-decomposition-64x64x32");
	char text[10000], file[4096];
	snprintf(text, sizeof(text),
		 "\xef\xbb\xbf[cache]\ndir = /c\n\n  [path %s/*]   ; a comment\nkeep = 5\n"
		 "; %s\n"
		 "[path /d/[ab]*]\n[path /e/*]\nkeep = 2\n"
		 "[cluster]\nservers = a:1\nsecret_file = /s\n"
		 "[path /f/*]\nkeep:3\ndrain =   %s/out  ; a comment\n",
		 glob, glob, glob);
	path = write_policy("long.conf", text);
	p = NULL;
	char err[1024];
	CHECK_EQ(stg_policy_load(path, &p, err, sizeof(err)), 0);
	if (!p) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK_EQ(p->nrules, 4);
	snprintf(text, sizeof(text), "%s/*", glob);
	CHECK_STR(p->rules[0].glob, text);
	CHECK_EQ(p->rules[0].keep, 5);
	CHECK_EQ(p->rules[0].line, 4);
	snprintf(file, sizeof(file), "%s/ckpt.h5", glob);
	CHECK(stg_policy_match(p, file) == &p->rules[0]);
	CHECK(stg_policy_may_contain(p, glob));
	CHECK_STR(p->rules[1].glob, "/d/[ab]*");
	CHECK(stg_policy_match(p, "/d/b") == &p->rules[1]);
	CHECK_EQ(p->rules[2].keep, 2);
	/* A value as long as a path, on a line longer than inih takes. */
	snprintf(file, sizeof(file), "%s/out", glob);
	CHECK_STR(p->rules[3].drain, file);
	CHECK_EQ(p->rules[3].keep, 3);
	stg_policy_free(p);
}

/* auth = munge needs no secret file; its socket and the metrics file are
 * kept as given. */
static void test_munge_and_metrics(void)
{
	struct stg_policy *p = NULL;
	char err[1024];
	const char *path = write_policy("munge.conf",
		"[cache]\ndir = /c\nmetrics_file = /var/lib/node-exporter/stagehand.prom\n"
		"[cluster]\nservers = a:1\nreplicas = 1\nauth = munge\n"
		"munge_socket = /run/munge/munge.socket.2\nmunge_server_user = stg-srv_1.a\n");
	CHECK_EQ(stg_policy_load(path, &p, err, sizeof(err)), 0);
	CHECK(p && p->munge && !p->secret_file);
	CHECK(p && strcmp(p->munge_server_user, "stg-srv_1.a") == 0);
	CHECK(p && strcmp(p->munge_socket, "/run/munge/munge.socket.2") == 0);
	CHECK(p && strcmp(p->metrics_file, "/var/lib/node-exporter/stagehand.prom") == 0);
	stg_policy_free(p);
	path = write_policy("secret.conf",
		"[cache]\ndir = /c\n[cluster]\nservers = a:1\nreplicas = 1\nauth = secret\n"
		"secret_file = /s\n");
	CHECK_EQ(stg_policy_load(path, &p, err, sizeof(err)), 0);
	CHECK(p && !p->munge && !p->metrics_file && strcmp(p->secret_file, "/s") == 0);
	stg_policy_free(p);
}

static void test_errors(void)
{
	expect_error("[cache]\ndir = /c\nbogus = 1\n", "bad.conf:3: unknown key 'bogus' in [cache]");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nchunk_size = 3M\n",
		     "bad.conf:4: chunk_size '3M' must be a power of two");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nchunk_size = 32K\n", "bad.conf:4:");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nchunk_size = 128M\n", "bad.conf:4:");
	/* 32M and 64M were taken before: a writer's memory bound now stops at 16M. */
	expect_error("[cache]\ndir = /c\n[path /a/*]\nchunk_size = 32M\n",
		     "bad.conf:4: chunk_size '32M' must be a power of two from 64K to 16M");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nchunking = rabin\n",
		     "bad.conf:4: chunking 'rabin' must be fixed or cdc");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nchunk_size = 8M\nchunking = cdc\n",
		     "bad.conf:3: chunk_size 8M is too large for chunking = cdc: at most 4M");
	expect_error("[cache]\ndir = /c\n[path /a/*]\ndelta = yes\n",
		     "bad.conf:4: delta 'yes' must be xor or off");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nchunking = cdc\ndelta = xor\n",
		     "bad.conf:3: delta = xor needs chunking = fixed");
	expect_error("[cache]\ndir = /c\n[path /a/*]\ndurability = maybe\n",
		     "bad.conf:4: durability 'maybe'");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nkeep = 0\n", "bad.conf:4: keep '0'");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nkeep_deleted = 1w\n",
		     "bad.conf:4: keep_deleted '1w' must be a duration");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nkeep_deleted = 3651d\n",
		     "bad.conf:4: keep_deleted '3651d'");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nkeep_deleted = -1\n",
		     "bad.conf:4: keep_deleted '-1'");
	expect_error("[cache]\ndir = /c\n[path /a/*]\ncompress = gzip\n",
		     "bad.conf:4: compress 'gzip' must be lz4, zstd, auto or off");
	expect_error("[cache]\ndir = /c\n[path /a/*]\ncompress = on\n", "bad.conf:4: compress 'on'");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nfilter = shuffle\n",
		     "bad.conf:4: filter 'shuffle' must be none, or shuffle or bitshuffle followed by "
		     "the bytes of one value: 2 (bf16, fp16), 4 (fp32) or 8 (fp64)");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nfilter = shuffle3\n", "bad.conf:4: filter 'shuffle3'");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nfilter = bitshuffle16\n",
		     "bad.conf:4: filter 'bitshuffle16'");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nfilter = none4\n", "bad.conf:4: filter 'none4'");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nkeep = -1\n", "bad.conf:4:");
	expect_error("[cache]\ndir = /c\n[paths /a/*]\nkeep = 1\n", "bad.conf:4: unknown section [paths /a/*]");
	expect_error("[cache]\ndir = /c\n[path a/*]\n", "bad.conf:3: [path a/*]: the pattern must be an absolute path");
	expect_error("[cache]\ndir = /c\n[path /a/*]\n[path /a/*]\n", "bad.conf:4: [path /a/*] appears twice");
	expect_error("[path /a/*]\nkeep = 2\n", "[cache] dir is required");
	expect_error("[cache]\ndir = relative\n", "bad.conf:2: [cache] dir must be an absolute path");
	expect_error("[cache]\ndir = /c\ncapacity = lots\n", "bad.conf:3: [cache] capacity 'lots'");
	expect_error("[cache]\ndir = /c\nthis line is not ini\n", "bad.conf:3:");
	expect_error("x = 1\n[cache]\ndir = /c\n", "bad.conf:1: 'x' appears before any [section]");
	expect_error("[cache]\ndir = /c\n[cluster]\ntransport = carrier-pigeon\n", "bad.conf:4:");
	expect_error("[cache]\ndir = /c\n[path /a/*]\ndurability = replicated\n", "bad.conf:3: durability = replicated needs staging servers");
	expect_error("[cache]\ndir = /c\n[path /a/*]\ndrain = /d\nshared = job\n",
		     "bad.conf:3: drain cannot go with shared = job");
	expect_error("[cache]\ndir = /c\n[path /a/*]\nshared = all\n",
		     "bad.conf:4: shared 'all' must be job or node");
	expect_error("[cache]\ndir = /c\n[path /a/*]\ndrain = in-place\n", "bad.conf:3: drain needs");
	expect_error("[cache]\ndir = /c\n[path /a/*]\ndrain = relative\n", "bad.conf:4: drain 'relative'");
	expect_error("[cache]\ndir = /c\n[cluster]\nsecret_file = /s\n", "[cluster] servers is required");
	expect_error("[cache]\ndir = /c\n[cluster]\nservers = a:1, b\nsecret_file = /s\n", "server 'b' is not HOST:PORT");
	expect_error("[cache]\ndir = /c\n[cluster]\nservers = a:1 a:1\nsecret_file = /s\n", "listed twice");
	expect_error("[cache]\ndir = /c\n[cluster]\nservers = a:1\nreplicas = 2\nsecret_file = /s\n", "replicas = 2, but only 1 server is listed");
	expect_error("[cache]\ndir = /c\n[cluster]\nservers = a:1\nreplicas = 1\n", "secret_file is required");
	expect_error("[cache]\ndir = /c\n[cluster]\nservers = a:1\nauth = kerberos\n",
		     "auth 'kerberos' must be secret or munge");
	expect_error("[cache]\ndir = /c\n[cluster]\nservers = a:1\nauth = munge\n"
		     "munge_server_user = -x\n",
		     "munge_server_user '-x' must be a user name or a uid");
	expect_error("[cache]\ndir = /c\n[cluster]\nservers = a:1\nauth = munge\n"
		     "munge_server_user = a/b\n",
		     "munge_server_user 'a/b' must be a user name or a uid");
	expect_error("[cache]\ndir = /c\n[cluster]\nservers = a:1\nauth = munge\nmunge_socket = m.sock\n",
		     "munge_socket must be an absolute path");
	expect_error("[cache]\ndir = /c\nmetrics_file = m.prom\n", "metrics_file must be an absolute path");

	/* Beyond inih's buffer, a line that is neither a comment nor a header
	 * nor key = value is an error naming its line and the limit, never
	 * read in pieces. */
	char longline[600] = "[cache]\ndir = /c\n[path /a/*]\n/";
	memset(longline + strlen(longline), 'a', 300);
	strcat(longline, "\nkeep = 2\n");
	expect_error(longline, "bad.conf:4: line too long: 301 characters (at most 197");
	char indented[600] = "[cache]\ndir = /c\n[path /a/*]\nkeep = 2\n  ";
	memset(indented + strlen(indented), 'a', 300);
	strcat(indented, "\n");
	expect_error(indented, "bad.conf:5: line too long: 302 characters (at most 197");
	char toolong[PATH_MAX + 64] = "[cache]\ndir = /c\n[path /";
	memset(toolong + strlen(toolong), 'a', PATH_MAX);
	strcat(toolong, "]\n");
	expect_error(toolong, "bad.conf:3: [path /aaa");
	expect_error(toolong, "longer than the 4095 characters a path can have");
	expect_error("[cache]\ndir = /c\n[path /a/*] keep = 2\n",
		     "bad.conf:3: text after ']' in [path ...]");
	expect_error("[cache]\ndir = /c\n[path /a/*\nkeep = 2\n", "bad.conf:3: [path ...] has no closing ']'");
	expect_error("[cache]\ndir = /c\n[path]\nkeep = 2\n", "bad.conf:3: [path] needs a pattern");

	struct stg_policy *p = NULL;
	char err[1024];
	CHECK(stg_policy_load("/nonexistent/policy.conf", &p, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "/nonexistent/policy.conf") != NULL);
}

static void test_sizes(void)
{
	uint64_t v;
	CHECK_EQ(stg_parse_size("123", &v), 0);
	CHECK_EQ(v, 123);
	CHECK_EQ(stg_parse_size("64K", &v), 0);
	CHECK_EQ(v, 65536);
	CHECK_EQ(stg_parse_size("1MiB", &v), 0);
	CHECK_EQ(v, 1 << 20);
	CHECK_EQ(stg_parse_size("2g", &v), 0);
	CHECK_EQ(v, 2ull << 30);
	CHECK_EQ(stg_parse_size("3TB", &v), 0);
	CHECK_EQ(v, 3ull << 40);
	CHECK(stg_parse_size("", &v) < 0);
	CHECK(stg_parse_size("K", &v) < 0);
	CHECK(stg_parse_size("1X", &v) < 0);
	CHECK(stg_parse_size("-1", &v) < 0);
	CHECK(stg_parse_size("99999999999999999999", &v) < 0);
	CHECK(stg_parse_size("20000000T", &v) < 0);
}

/* A section that would silently override another of its name, and a file
 * that is not a regular one (a FIFO would block the reader for ever), are
 * refused, saying so. */
static void test_once_and_regular(void)
{
	expect_error("[cache]\ndir = /c\n[path /a/*]\nkeep = 2\n[cache]\ndir = /d\n",
		     "bad.conf:5: a second [cache] section; the first is at line 1");
	expect_error("[cache]\ndir = /c\n[cluster]\nservers = a:1\nsecret_file = /s\n"
		     "  [cluster]  \nreplicas = 1\n",
		     "bad.conf:6: a second [cluster] section; the first is at line 3");
	char path[4096];
	snprintf(path, sizeof(path), "%s/fifo.conf", dir);
	CHECK_EQ(mkfifo(path, 0600), 0);
	struct stg_policy *p = NULL;
	char err[1024];
	CHECK_EQ(stg_policy_load(path, &p, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "cannot read the policy file: not a regular file") != NULL);
	CHECK_EQ(stg_policy_load(dir, &p, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "not a regular file") != NULL);
	CHECK(p == NULL);
}

int main(void)
{
	dir = harness_tmpdir();
	test_once_and_regular();
	test_full();
	test_cache_excluded();
	test_errors();
	test_munge_and_metrics();
	test_long_glob();
	test_sizes();
	return harness_done();
}
