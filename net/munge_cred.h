/* SPDX-License-Identifier: MIT */
/* MUNGE credentials for the handshake (docs/PROTOCOL.md, "MUNGE"): the
 * client's munged vouches for its uid, the server's checks it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* A credential of this process's uid carrying payload, from the munged at
 * socket ("" or NULL: libmunge's default), into out (NUL-terminated).
 * Returns 0, -EAGAIN (munged unreachable), -E2BIG (does not fit out) or
 * -EACCES; why says what went wrong. */
int stg_munge_encode(const char *socket, const void *payload, size_t len, char *out,
		     size_t outlen, char *why, size_t whylen);

/* Checks cred (NUL-terminated) with the munged at socket: on success *ret_uid
 * is the uid it vouches for and payload (exactly len bytes, else -EBADMSG)
 * what it carries. A credential without encryption is refused (its payload
 * would be readable on the wire). Returns 0, -EAGAIN (munged unreachable)
 * or -EACCES (invalid, expired, replayed...); why says which. */
int stg_munge_decode(const char *socket, const char *cred, uint32_t *ret_uid, void *payload,
		     size_t len, char *why, size_t whylen);
