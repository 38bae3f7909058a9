/* SPDX-License-Identifier: MIT */
/* Sends a staging server one DELETE_PATH (the servers' side of deletions,
 * cluster.bats):
 *
 *   delete-path HOST:PORT SECRET_FILE UID PATH RETAIN_S [renamed]
 *
 * as UID, for PATH's versions up to its newest on that server, deleted now
 * and kept RETAIN_S seconds. Exits 0 when the server took it, 1 when it
 * refused, 2 on any other failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "conn.h"
#include "manifest.h"
#include "tombstone.h"
#include "util.h"
#include "wire.h"

int main(int argc, char **argv)
{
	if (argc != 6 && !(argc == 7 && strcmp(argv[6], "renamed") == 0)) {
		fprintf(stderr, "usage: delete-path HOST:PORT SECRET_FILE UID PATH RETAIN_S "
			"[renamed]\n");
		return 2;
	}
	struct stg_secret secret;
	char why[512];
	if (stg_secret_load(argv[2], &secret, why, sizeof(why)) < 0) {
		fprintf(stderr, "delete-path: %s\n", why);
		return 2;
	}
	struct stg_conn c;
	int r = stg_conn_login(argv[1], STG_TRANSPORT_TCP, 30000, &secret,
			       (uint32_t)strtoul(argv[3], NULL, 10), &c, why, sizeof(why));
	if (r < 0) {
		fprintf(stderr, "delete-path: %s\n", why);
		return 2;
	}
	const char *path = argv[4];
	struct stg_msg req = {.type = STG_MSG_GET_MANIFEST}, rep;
	req.get_manifest.path = path;
	req.get_manifest.path_len = (uint32_t)strlen(path);
	struct stg_manifest m;
	r = stg_conn_call(&c, &req, STG_MSG_MANIFEST, &rep);
	if (r == 0)
		r = stg_manifest_decode(rep.manifest.manifest, rep.manifest.len, &m);
	if (r < 0) {
		fprintf(stderr, "delete-path: the newest version of '%s': %s\n", path,
			c.error[0] ? c.error : strerror(-r));
		return 2;
	}
	struct stg_msg d = {.type = STG_MSG_DELETE_PATH};
	d.delete_path = (struct stg_msg_delete_path){
		.upto = m.version, .at_ns = stg_now_ns(),
		.retain_s = (uint32_t)strtoul(argv[5], NULL, 10),
		.flags = argc == 7 ? STG_TOMBSTONE_RENAMED : 0,
		.path = path, .path_len = (uint32_t)strlen(path)};
	stg_manifest_done(&m);
	r = stg_conn_call(&c, &d, STG_MSG_OK, &rep);
	stg_conn_close(&c);
	if (r < 0) {
		fprintf(stderr, "delete-path: refused: %s\n", c.error);
		return 1;
	}
	printf("deleted '%s' up to version id %llu\n", path,
	       (unsigned long long)d.delete_path.upto);
	return 0;
}
