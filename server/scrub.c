/* SPDX-License-Identifier: MIT */
/* The server's scrub thread: verifies the stored records in the background
 * at --scrub-rate bytes a second (stg_store_scrub_step), so that damage a
 * restart no longer finds (it reads hints, not records) is found before a
 * restore needs the chunk; a damaged record is forgotten, and the clients
 * that hold the chunk send it again. */
#include <errno.h>
#include <time.h>

#include "internal.h"
#include "log.h"
#include "util.h"

/* A step reads this long's worth of the rate, and the thread sleeps the
 * rest: the disk sees an even trickle, not bursts. */
#define STEP_MS 100
/* With nothing sealed to verify, or at the end of a pass. */
#define IDLE_MS 1000

/* Waits until deadline_ns (CLOCK_REALTIME) or the server stops; called and
 * returns with gc_mutex held. */
static void wait_until(struct server *srv, int64_t deadline_ns)
{
	struct timespec until = {deadline_ns / 1000000000, deadline_ns % 1000000000};
	while (!srv->stopping &&
	       pthread_cond_timedwait(&srv->scrub_cond, &srv->gc_mutex, &until) != ETIMEDOUT)
		;
}

static int64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void *server_scrubber(void *arg)
{
	struct server *srv = arg;
	struct stg_store_scrub *c;
	if (stg_store_scrub_new(&c) < 0) {
		stg_log(STG_LOG_ERROR, "scrub: out of memory; not verifying the store");
		return NULL;
	}
	uint64_t budget = srv->scrub_rate / (1000 / STEP_MS);
	if (budget < (64u << 10))
		budget = 64u << 10;
	uint64_t passes = 0;
	pthread_mutex_lock(&srv->gc_mutex);
	while (!srv->stopping) {
		pthread_mutex_unlock(&srv->gc_mutex);
		int64_t t0 = realtime_ns();
		int64_t n = stg_store_scrub_step(srv->store, c, budget);
		if (n < 0)
			stg_log_errno(STG_LOG_WARN, (int)n, "scrub: cannot read the store");
		struct stg_store_stats st;
		stg_store_stats(srv->store, &st);
		if (st.scrub_passes > passes) {
			passes = st.scrub_passes;
			stg_log(STG_LOG_INFO, "scrub: pass %llu over the sealed segments done: %llu "
				"records (%llu bytes) verified since the start, %llu damaged",
				(unsigned long long)passes, (unsigned long long)st.scrub_records,
				(unsigned long long)st.scrub_bytes,
				(unsigned long long)st.scrub_damaged);
		}
		int64_t pause_ns = n > 0 ? (int64_t)((double)n / (double)srv->scrub_rate * 1e9)
					 : (int64_t)IDLE_MS * 1000000;
		pthread_mutex_lock(&srv->gc_mutex);
		wait_until(srv, t0 + pause_ns);
	}
	pthread_mutex_unlock(&srv->gc_mutex);
	stg_store_scrub_free(c);
	return NULL;
}
