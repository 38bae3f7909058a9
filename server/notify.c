/* SPDX-License-Identifier: MIT */
/* Readiness for a service manager: systemd's notify protocol (a datagram to
 * $NOTIFY_SOCKET), spoken here, without libsystemd. */
#include "internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int server_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (!path || !*path)
		return 0; /* not started by a service manager that asks */
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t len = strlen(path);
	/* A path, or '@' and the name of an abstract socket. */
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
			   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
	int r = n < 0 ? -errno : 0;
	close(fd);
	return r;
}
