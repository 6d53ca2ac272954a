/*
 * ratelimit.c: which bucket a request takes a token from (scopes, overrides
 * and keys, set in config.h), and who decides: Redis (redis.h) or, while it
 * is unavailable, the in-process buckets (bucket.h). It also parses the
 * rate-limit settings into gw_config.rate.
 */
#ifndef GW_RATELIMIT_H
#define GW_RATELIMIT_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

#include "bucket.h"
#include "front.h"
#include "routes.h"

struct gw_config;

typedef struct gw_ratelimit gw_ratelimit;

/* A decision in progress: lives in the request that waits for it. */
typedef struct gw_limit_wait {
        gw_ratelimit *rl;
        const gw_route *route;
        char key[GW_LIMIT_KEY_MAX + 1];
        size_t key_len;
        gw_decision decision;
        void (*done)(struct gw_limit_wait *w); /* GW_LIMIT_LATER: runs once, on the loop */
} gw_limit_wait;

enum { GW_LIMIT_OFF, GW_LIMIT_NOW, GW_LIMIT_LATER };

/*
 * Parses and checks the rate-limit strings of cfg (scopes, overrides,
 * trusted proxies, KEELSON_REDIS_URL) into *out. Returns 0, or -1 with a
 * message naming the variable in err.
 */
int gw_rate_config_parse(const struct gw_config *cfg, gw_rate_config *out, char *err,
                         size_t err_len);
/* Sets every route's limit from cfg->rate and starts the Redis client. */
int gw_ratelimit_new(gw_ratelimit **out, struct event_base *base, const struct gw_config *cfg,
                     gw_routes *routes);
/* Ends every decision in flight (they complete locally), frees. Accepts NULL. */
void gw_ratelimit_free(gw_ratelimit *rl);
/*
 * Takes one token for a request on route from subject (the client address
 * for the auth scope, the tenant for the api scope). GW_LIMIT_OFF: the route
 * is not limited. GW_LIMIT_NOW: w->decision is set. GW_LIMIT_LATER: w->done
 * runs later with w->decision set (from Redis, or locally if Redis failed).
 */
int gw_ratelimit_take(gw_ratelimit *rl, const gw_route *route, const char *subject,
                      gw_limit_wait *w);
/*
 * The same for the resolve scope: one token of client_ip's bucket for a
 * bearer token the cache does not know, taken before ResolveContext.
 * w->route->scope is then GW_SCOPE_RESOLVE.
 */
int gw_ratelimit_take_resolve(gw_ratelimit *rl, const char *client_ip, gw_limit_wait *w);
/* RateLimit-Limit, -Remaining, -Reset, and Retry-After when refused. */
void gw_ratelimit_headers(const gw_decision *d, gw_req *req);

#endif
