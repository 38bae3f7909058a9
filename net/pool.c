/* SPDX-License-Identifier: MIT */
/* A connection's pool: the memory chunk objects travel through on a
 * transport with one-sided operations (registered for the peer's reads
 * and writes), and on TCP a buffer the same code fills. */
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "conn.h"
#include "transport.h"

/* Pools are sized in whole MiB. */
#define POOL_ALIGN (1u << 20)

int stg_conn_pool(struct stg_conn *c, size_t size, enum stg_pool_use use)
{
	if (size <= c->pool_size && use == c->pool_use)
		return 0;
	c->pool_use = use;
	if (size <= c->pool_size)
		return c->t->one_sided ? c->t->pool_register(c) : 0;
	size = (size + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	uint8_t *old = c->pool;
	size_t old_size = c->pool_size;
	c->pool = p;
	c->pool_size = size;
	int r = c->t->one_sided ? c->t->pool_register(c) : 0;
	/* The old region is unregistered by now; a failure leaves no pool. */
	if (old)
		munmap(old, old_size);
	if (r < 0) {
		munmap(c->pool, c->pool_size);
		c->pool = NULL;
		c->pool_size = 0;
	}
	return r;
}

void stg_conn_pool_idle(struct stg_conn *c)
{
	if (c->t->one_sided || !c->pool)
		return;
	munmap(c->pool, c->pool_size);
	c->pool = NULL;
	c->pool_size = 0;
}
