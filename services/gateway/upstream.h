/*
 * upstream.c: one rpc client per service that has routes, and the hop from
 * nng's threads back onto the libevent thread.
 */
#ifndef GW_UPSTREAM_H
#define GW_UPSTREAM_H

#include <event2/event.h>

#include "ks_rpc.h"
#include "routes.h"

struct gw_config;

/*
 * One upstream call in flight. Embedded in the caller's request state; the
 * upstream writes result on an nng thread, then hands the call back on the
 * libevent thread through the completion function. Between a successful
 * gw_upstream_call and that hand-back the caller must not free the call.
 */
typedef struct gw_upstream gw_upstream;

typedef struct gw_call {
        struct gw_call *next; /* completion queue link */
        gw_upstream *owner;
        ks_rpc_result result;
} gw_call;

typedef void (*gw_complete_fn)(gw_call *call, void *arg);

/*
 * Makes one rpc client per service that has routes, plus auth (for
 * ResolveContext), dialling the front of that service on every broker.
 * complete(call, arg) runs on base's thread for every call started.
 */
int gw_upstream_new(gw_upstream **out, struct event_base *base, const struct gw_config *cfg,
                    const gw_routes *routes, gw_complete_fn complete, void *arg);
/*
 * Stops every client (calls in flight end with UNAVAILABLE), hands every
 * call still queued to complete, then frees. Accepts NULL.
 */
void gw_upstream_free(gw_upstream *u);
/* Starts a call; returns KS_OK (complete will run once), else a code. */
int gw_upstream_call(gw_upstream *u, int service, const ks_rpc_call_args *args, gw_call *call);
/* Connected broker pipes of a service's client (0 when it has none). */
int gw_upstream_connected(const gw_upstream *u, int service);

#endif
