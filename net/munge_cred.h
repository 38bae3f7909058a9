/* SPDX-License-Identifier: MIT */
/* MUNGE credentials for the handshake (docs/PROTOCOL.md, "MUNGE"): each side's
 * munged vouches for its uid, the other side's checks it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* No uid restriction: any uid may decode the credential. */
#define STG_MUNGE_ANY_UID UINT32_MAX

/* A credential of this process's uid carrying payload, from the munged at
 * socket ("" or NULL: libmunge's default), into out (NUL-terminated). Only
 * processes of uid for_uid may decode it (STG_MUNGE_ANY_UID: any).
 * Returns 0, -EAGAIN (munged unreachable), -E2BIG (does not fit out) or
 * -EACCES; why says what went wrong. */
int stg_munge_encode(const char *socket, const void *payload, size_t len, uint32_t for_uid,
		     char *out, size_t outlen, char *why, size_t whylen);

/* Checks cred (NUL-terminated) with the munged at socket: on success *ret_uid
 * is the uid it vouches for and payload (exactly len bytes, else -EBADMSG)
 * what it carries. Returns 0, -EAGAIN (munged unreachable) or -EACCES
 * (invalid, expired, replayed, restricted to another uid...); why says which. */
int stg_munge_decode(const char *socket, const char *cred, uint32_t *ret_uid, void *payload,
		     size_t len, char *why, size_t whylen);
