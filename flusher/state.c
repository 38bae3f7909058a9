/* SPDX-License-Identifier: MIT */
/* flusher.state in the cache: what the flusher is doing, for `stagehand
 * status` and `stagehand flush`. A small text file replaced atomically. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "util.h"

void state_write(struct flusher *fl, size_t queued, const char *activity)
{
	char buf[16384];
	size_t at = 0;
	uint64_t chunks_sent = 0, chunks_present = 0, bytes_sent = 0;
	for (size_t i = 0; i < fl->nservers; i++) {
		chunks_sent += fl->servers[i].stats.chunks_sent;
		chunks_present += fl->servers[i].stats.chunks_present;
		bytes_sent += fl->servers[i].stats.bytes_sent;
	}
#define ADD(...)                                                                      \
	do {                                                                          \
		if (at < sizeof(buf))                                                 \
			at += (size_t)snprintf(buf + at, sizeof(buf) - at, __VA_ARGS__); \
	} while (0)
	ADD("pid %d\n", (int)getpid());
	ADD("updated_ns %lld\n", (long long)stg_now_ns());
	ADD("activity %s\n", activity);
	ADD("queued %zu\n", queued);
	ADD("versions_shipped %llu\n", (unsigned long long)fl->versions_shipped);
	ADD("chunks_sent %llu\n", (unsigned long long)chunks_sent);
	ADD("chunks_present %llu\n", (unsigned long long)chunks_present);
	ADD("bytes_sent %llu\n", (unsigned long long)bytes_sent);
	int64_t now = stg_now_ns();
	for (size_t i = 0; i < fl->nservers; i++) {
		const struct server *s = &fl->servers[i];
		const char *st = !server_available(s, now) ? "down"
				 : s->connected		   ? "connected"
							   : "idle";
		const char *via = s->connected ? stg_conn_transport(&s->conn) : "-";
		ADD("server %s %s %s %s%s%s%s\n", s->name, st, via,
		    s->last_error[0] ? s->last_error : "-",
		    s->connected && s->why_not_rdma[0] ? " (not rdma: " : "",
		    s->connected ? s->why_not_rdma : "",
		    s->connected && s->why_not_rdma[0] ? ")" : "");
	}
#undef ADD
	if (at > sizeof(buf))
		at = sizeof(buf);
	stg_write_file_atomic(fl->cache->dirfd, "flusher.state", buf, at, false);
}
