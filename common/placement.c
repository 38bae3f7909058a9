/* SPDX-License-Identifier: MIT */
/* Rendezvous hashing over the configured servers. */
#include "placement.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "util.h"

static int valid_server(const char *s)
{
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s)
		return 0;
	if (s[0] == '[' && colon[-1] != ']')
		return 0;
	char *end;
	unsigned long port = strtoul(colon + 1, &end, 10);
	return colon[1] != '\0' && *end == '\0' && port >= 1 && port <= 65535;
}

void stg_cluster_free(char **servers, size_t n)
{
	if (!servers)
		return;
	for (size_t i = 0; i < n; i++)
		free(servers[i]);
	free(servers);
}

int stg_cluster_parse(const char *list, char ***ret_servers, size_t *ret_n, char *err,
		      size_t errlen)
{
	char **out = calloc(STG_CLUSTER_MAX_SERVERS, sizeof(*out));
	if (!out)
		return -ENOMEM;
	size_t n = 0;
	const char *p = list;
	for (;;) {
		while (*p == ',' || isspace((unsigned char)*p))
			p++;
		if (!*p)
			break;
		const char *start = p;
		while (*p && *p != ',' && !isspace((unsigned char)*p))
			p++;
		size_t len = (size_t)(p - start);
		if (n == STG_CLUSTER_MAX_SERVERS) {
			snprintf(err, errlen, "more than %d servers", STG_CLUSTER_MAX_SERVERS);
			goto fail;
		}
		out[n] = strndup(start, len);
		if (!out[n]) {
			stg_cluster_free(out, n);
			return -ENOMEM;
		}
		n++;
		if (!valid_server(out[n - 1])) {
			snprintf(err, errlen, "server '%s' is not HOST:PORT", out[n - 1]);
			goto fail;
		}
		for (size_t i = 0; i + 1 < n; i++)
			if (strcmp(out[i], out[n - 1]) == 0) {
				snprintf(err, errlen, "server '%s' is listed twice", out[i]);
				goto fail;
			}
	}
	if (n == 0) {
		snprintf(err, errlen, "no servers listed");
		goto fail;
	}
	*ret_servers = out;
	*ret_n = n;
	return 0;
fail:
	stg_cluster_free(out, n);
	return -EINVAL;
}

void stg_placement_rank(char *const *servers, size_t n, const void *key, size_t keylen,
			uint32_t *order)
{
	uint64_t score[STG_CLUSTER_MAX_SERVERS];
	for (size_t i = 0; i < n && i < STG_CLUSTER_MAX_SERVERS; i++) {
		/* The server's name seeds a hash of the key: each server draws an
		 * independent random weight for every key. */
		uint64_t seed = XXH3_64bits(servers[i], strlen(servers[i]));
		score[i] = XXH3_64bits_withSeed(key, keylen, seed);
		order[i] = (uint32_t)i;
	}
	/* Insertion sort: n is small. */
	for (size_t i = 1; i < n; i++) {
		uint32_t x = order[i];
		size_t j = i;
		while (j > 0 && score[order[j - 1]] < score[x]) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = x;
	}
}

void stg_placement_slot_key(const char *path, uint64_t index,
			    uint8_t key[STG_PLACEMENT_SLOT_KEY_LEN])
{
	stg_put_le64(key, XXH3_64bits(path, strlen(path)));
	stg_put_le64(key + 8, index);
}
