/*
 * handler.c: one RPC from intake to reply: the Connect checks, the caller
 * (context cache or ResolveContext), the rate limit, the call, the reply.
 *
 * The handler reaches what the server made only through its environment,
 * and calls nothing of server.c: the server calls the handler, never the
 * other way round.
 */
#ifndef GW_HANDLER_H
#define GW_HANDLER_H

#include "front.h"
#include "health.h"
#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "decodepool.h"
#include "inflight.h"
#include "ratelimit.h"
#include "routes.h"
#include "upstream.h"

struct gw_config;

/*
 * What requests need of the server: made and owned by server.c, which keeps
 * it alive as long as the handler. up is set once the upstream is made (it
 * needs the handler as its completion argument), before any request.
 */
typedef struct gw_handler_env {
        const struct gw_config *cfg;
        gw_routes *routes;
        gw_upstream *up;
        gw_ratelimit *rl;
        gw_cache *cache; /* NULL when KEELSON_GATEWAY_CACHE_ENTRIES is 0 */
        gw_inflight *inflight;
        gw_decodepool *decoder;           /* set once made (it hands jobs back to the handler) */
        gw_health_probe health;           /* grpc.health.v1.Health/Check asks it */
        struct gw_reflection *reflection; /* NULL: reflection is off */
        struct gw_hub *hub;               /* EventService/Subscribe's streams */
        struct gw_watches *watches;       /* grpc.health.v1.Health/Watch's streams */
} gw_handler_env;

typedef struct gw_handler gw_handler;

/* For gw_front_set_streaming: the requests taken as streams (gRPC reflection). */
bool gw_handler_wants_stream(const gw_req *r, void *arg);

/* The handler keeps env (not a copy). Returns 0 or -1. */
int gw_handler_new(gw_handler **out, const gw_handler_env *env);
void gw_handler_free(gw_handler *h); /* accepts NULL */

/*
 * Serves a request that is not one of the gateway's own pages: path is its
 * URI's path (NULL or unknown: 404 unimplemented). start_ns is its arrival
 * (CLOCK_MONOTONIC), request_id the one gw_connect_request_id chose.
 */
void gw_handler_serve(gw_handler *h, gw_req *req, const char *path, const char *request_id,
                      int64_t start_ns);

/* The decode pool's completion function (gw_decoded_fn), arg the handler: on the loop. */
void gw_handler_decoded(gw_decode_job *job, void *arg);

/* The upstream's completion function (gw_complete_fn), arg the handler: on the loop. */
void gw_handler_complete(gw_call *call, void *arg);

#endif
