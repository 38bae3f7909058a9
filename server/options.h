/* SPDX-License-Identifier: MIT */
/* The server's command line (options.c), private to server/. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "conn.h"
#include "internal.h"
#include "store.h"

/* The default of --max-connections: as many as descriptors allow, up to
 * this (an idle connection costs a few KiB, and no thread). */
#define DEFAULT_MAX_CONNECTIONS 65536

struct server_options {
	const char *listen_addr, *store_dir, *secret_file, *port_file;
	struct stg_store_options store;
	unsigned gc_interval, timeout_s, handshake_s, idle_s;
	unsigned metrics_interval;
	const char *metrics_file, *munge_socket;
	bool auth_secret, auth_munge;
	struct admit_limits limits;
	uint64_t frame_memory, scrub_rate;
	bool allow_foreign, accept_v1;
	enum stg_transport_kind transport;
};

/* Reads the command line into *o, the defaults where it is silent. Returns
 * -1 when the server is to run, or the status to exit with: 0 after --help,
 * --version or --user-key, 2 for a bad command line (said why), 1 when
 * --user-key cannot derive the key. */
int server_options_parse(int argc, char **argv, struct server_options *o);
