/* SPDX-License-Identifier: MIT */
/* What the files of net/ share and nobody else needs. */
#pragma once

#include "conn.h"

/* Fails the current call with r, saying why in c->error. Returns r. */
int stg_conn_refuse(struct stg_conn *c, int r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
