/* SPDX-License-Identifier: MIT */
/* Where data lives in the cluster: rendezvous (highest random weight)
 * hashing ranks the servers for each chunk id or path, so every node and
 * every restore agrees without coordination, and losing a server moves only
 * the data it held. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define STG_CLUSTER_MAX_SERVERS 64

/* Splits a "host:port, host:port" list (commas and/or blanks) into a
 * malloc'ed array of malloc'ed strings. Rejects an empty list, an entry that
 * is not host:port with a port from 1 to 65535, duplicates and more than
 * STG_CLUSTER_MAX_SERVERS. On failure returns -EINVAL and a message in err. */
int stg_cluster_parse(const char *list, char ***ret_servers, size_t *ret_n, char *err,
		      size_t errlen);

void stg_cluster_free(char **servers, size_t n);

/* Orders the n servers for key, best first, into order[n] (indexes). */
void stg_placement_rank(char *const *servers, size_t n, const void *key, size_t keylen,
			uint32_t *order);

/* The key that places chunk index of a path whose rule has delta = xor: its
 * place in the path rather than its content, so that the chunk at one offset
 * of every version lands on the servers holding its base (the chunk there in
 * the version before). */
#define STG_PLACEMENT_SLOT_KEY_LEN 16
void stg_placement_slot_key(const char *path, uint64_t index,
			    uint8_t key[STG_PLACEMENT_SLOT_KEY_LEN]);
