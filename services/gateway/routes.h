/*
 * routes.c: the route table, built from the catalog (catalog.h) and the
 * protobuf-c service descriptors: one route per method a client may call,
 * with its path, owning service, flags, types, rate limit and metrics.
 */
#ifndef GW_ROUTES_H
#define GW_ROUTES_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

#include "bucket.h"
#include "ks_code.h"
#include "ks_method.h"
#include "ks_metrics.h"

#define GW_PATH_MAX 160 /* route paths, "/<package>.<Service>/<Method>" */

typedef struct gw_route {
        char path[GW_PATH_MAX]; /* "/keelson.auth.v1.AuthService/Login", or "unmatched" */
        const char *method;     /* path + 1: the envelope's method name */
        int service;            /* ks_service_id; -1 for "unmatched" */
        unsigned flags;         /* KS_M_PUBLIC, ... */
        /* The bearer the service demands. The gateway only asks for a token
         * on a method that is not public; the service checks its kind. */
        ks_bearer bearer;
        ks_revokes revokes; /* what a success makes stale in the cache */
        /* Rate limit, set by gw_ratelimit_new: scope, parameters, key shape. */
        bool limited;
        int scope;       /* gw_scope */
        bool key_method; /* the method is part of the key (auth scope, overrides) */
        gw_limit limit;  /* shared by every replica, through Redis */
        gw_limit local;  /* this replica's share, while Redis is unavailable */
        int64_t lease;   /* tokens taken from Redis at once (ratelimit.c); 0: one per request */
        const ProtobufCMessageDescriptor *input;
        const ProtobufCMessageDescriptor *output;
        /* Metrics, owned by the default registry; counters are made on first use. */
        ks_histogram *latency;
        ks_counter *requests[KS_CODE_COUNT];
} gw_route;

typedef struct gw_routes gw_routes;

int gw_routes_new(gw_routes **out);
void gw_routes_free(gw_routes *r);
/* The route of an exact, case-sensitive path; NULL when none. */
gw_route *gw_routes_find(gw_routes *r, const char *path);
/* The webhook intake's route (the KS_M_INTAKE row, intake.h); NULL when the catalog has none. */
gw_route *gw_routes_intake(gw_routes *r);
/* The pseudo-route every unknown path is counted under. */
gw_route *gw_routes_unmatched(gw_routes *r);
/* The method that turns a bearer token into a caller (KS_M_RESOLVER); never routed. */
const gw_route *gw_routes_resolver(const gw_routes *r);
/* Iteration, for wiring one upstream client per service that has routes. */
size_t gw_routes_count(const gw_routes *r);
const gw_route *gw_routes_at(const gw_routes *r, size_t i);
gw_route *gw_routes_at_mut(gw_routes *r, size_t i);
/* Counts one finished request of the route with its code and duration. */
void gw_route_observe(gw_route *route, int code, double seconds);
/*
 * Whether an unanswered call of the route is sent again (after
 * KEELSON_GATEWAY_RESEND_MS): a KS_M_IDEMPOTENT method, which is safe to
 * receive twice; token resolution is one.
 */
bool gw_route_resendable(const gw_route *route);

/* True when method ("keelson.auth.v1.AuthService/Login") is a routed method. */
bool gw_method_routed(const char *method);

#endif
