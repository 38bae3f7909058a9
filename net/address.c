/* SPDX-License-Identifier: MIT */
/* Addresses: "host:port" (or "[v6]:port") split in two, and resolved
 * numerically first, so that a numeric address never waits for DNS. */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "conn.h"

int stg_conn_split(const char *hostport, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *colon;
	const char *h = hostport;
	size_t hl;
	if (hostport[0] == '[') {
		const char *end = strchr(hostport, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		h = hostport + 1;
		hl = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = strrchr(hostport, ':');
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - hostport);
	}
	const char *p = colon + 1;
	if (hl == 0 || hl >= hostlen || *p == '\0' || strlen(p) >= portlen)
		return -EINVAL;
	char *end;
	unsigned long n = strtoul(p, &end, 10);
	if (*end != '\0' || n > 65535)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	strcpy(port, p);
	return 0;
}

int stg_conn_resolve(const char *host, const char *port, int flags, struct addrinfo **res)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = (flags & AI_PASSIVE) | AI_NUMERICHOST | AI_NUMERICSERV};
	if (getaddrinfo(host, port, &hints, res) == 0)
		return 0;
	hints.ai_flags = flags;
	return getaddrinfo(host, port, &hints, res);
}
