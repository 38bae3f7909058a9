/* SPDX-License-Identifier: MIT */
/* libmunge, with errors as -errno and text. */
#include <errno.h>
#include <munge.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "munge_cred.h"

static munge_ctx_t context(const char *socket, char *why, size_t whylen)
{
	munge_ctx_t ctx = munge_ctx_create();
	if (!ctx) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if (socket && *socket && munge_ctx_set(ctx, MUNGE_OPT_SOCKET, socket) != EMUNGE_SUCCESS) {
		snprintf(why, whylen, "bad MUNGE socket '%s'", socket);
		munge_ctx_destroy(ctx);
		return NULL;
	}
	return ctx;
}

/* munged not reached (down, restarting): worth trying again. */
static int errno_of(munge_err_t e)
{
	return e == EMUNGE_SOCKET ? -EAGAIN : e == EMUNGE_NO_MEMORY ? -ENOMEM : -EACCES;
}

int stg_munge_encode(const char *socket, const void *payload, size_t len, uint32_t for_uid,
		     char *out, size_t outlen, char *why, size_t whylen)
{
	munge_ctx_t ctx = context(socket, why, whylen);
	if (!ctx)
		return -ENOMEM;
	if (for_uid != STG_MUNGE_ANY_UID &&
	    munge_ctx_set(ctx, MUNGE_OPT_UID_RESTRICTION, (uid_t)for_uid) != EMUNGE_SUCCESS) {
		snprintf(why, whylen, "cannot restrict a MUNGE credential to uid %u", for_uid);
		munge_ctx_destroy(ctx);
		return -EACCES;
	}
	char *cred = NULL;
	munge_err_t e = munge_encode(&cred, ctx, payload, (int)len);
	int r = 0;
	if (e != EMUNGE_SUCCESS) {
		const char *detail = munge_ctx_strerror(ctx);
		snprintf(why, whylen, "cannot get a MUNGE credential: %s",
			 detail ? detail : munge_strerror(e));
		r = errno_of(e);
	} else if ((size_t)snprintf(out, outlen, "%s", cred) >= outlen) {
		snprintf(why, whylen, "the MUNGE credential is too long (%zu bytes)", strlen(cred));
		r = -E2BIG;
	}
	free(cred);
	munge_ctx_destroy(ctx);
	return r;
}

int stg_munge_decode(const char *socket, const char *cred, uint32_t *ret_uid, void *payload,
		     size_t len, char *why, size_t whylen)
{
	munge_ctx_t ctx = context(socket, why, whylen);
	if (!ctx)
		return -ENOMEM;
	void *data = NULL;
	int dlen = 0;
	uid_t uid;
	gid_t gid;
	munge_err_t e = munge_decode(cred, ctx, &data, &dlen, &uid, &gid);
	int r = 0;
	if (e != EMUNGE_SUCCESS) {
		const char *detail = munge_ctx_strerror(ctx);
		snprintf(why, whylen, "%s: %s",
			 e == EMUNGE_SOCKET ? "cannot reach munged" : "MUNGE credential refused",
			 detail ? detail : munge_strerror(e));
		r = errno_of(e);
	} else if ((size_t)dlen != len) {
		snprintf(why, whylen, "MUNGE credential refused: it carries %d bytes, not %zu",
			 dlen, len);
		r = -EBADMSG;
	} else {
		memcpy(payload, data, len);
		*ret_uid = (uint32_t)uid;
	}
	if (data) {
		explicit_bzero(data, (size_t)(dlen > 0 ? dlen : 0));
		free(data);
	}
	munge_ctx_destroy(ctx);
	return r;
}
