/*
 * redis.c: the asynchronous Redis client (hiredis on the loop) that runs
 * ratelimit.lua, many decisions in flight on one connection.
 */
#ifndef GW_REDIS_H
#define GW_REDIS_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

#include "bucket.h"
#include "ks_redis_url.h"

#define GW_REDIS_PREFIX_MAX 64

typedef struct gw_redis gw_redis;

typedef struct gw_redis_options {
        ks_redis_url url;   /* KEELSON_REDIS_URL (ks_redis_url.h) */
        const char *prefix; /* of every bucket key, at most GW_REDIS_PREFIX_MAX bytes */
        int timeout_ms;     /* a decision not answered by then: Redis is treated as gone */
        int retry_max_ms;   /* longest wait between connection attempts */
        int pending_max;    /* decisions in flight; more are refused */
        bool server_time;   /* the script reads Redis TIME (else it gets our clock) */
} gw_redis_options;

/* rc KS_OK with the decision, or KS_UNAVAILABLE (d NULL): decide locally. */
typedef void (*gw_redis_done_fn)(void *arg, int rc, const gw_decision *d);

/* Starts connecting (in the background: Redis may come later). */
int gw_redis_new(gw_redis **out, struct event_base *base, const gw_redis_options *o);
/* Every decision in flight ends (KS_UNAVAILABLE) before this returns. Accepts NULL. */
void gw_redis_free(gw_redis *r);
/* True while connected with the script loaded. */
bool gw_redis_up(const gw_redis *r);
/*
 * Sends one decision on key (the prefix is added) for cost tokens (1 to
 * the capacity: all of them or none). KS_OK: done runs once,
 * later, on the loop. Otherwise (KS_UNAVAILABLE: no connection;
 * KS_RESOURCE_EXHAUSTED: too many in flight) done never runs.
 */
int gw_redis_take(gw_redis *r, const char *key, size_t key_len, const gw_limit *lim, int64_t cost,
                  gw_redis_done_fn done, void *arg);

#endif
