/*
 * upstream.c: the gateway's calls to the services, made and answered on its
 * libevent loop (ks_req: nng's req protocol spoken by ks_sp, no thread
 * between).
 */
#ifndef GW_UPSTREAM_H
#define GW_UPSTREAM_H

#include <event2/event.h>

#include "ks_req.h"
#include "ks_rpc.h"
#include "routes.h"

struct gw_config;

/*
 * One upstream call in flight. Embedded in the caller's request state; the
 * upstream writes result and hands the call back through the completion
 * function, on the loop, never from within gw_upstream_call. Between a
 * successful gw_upstream_call and that hand-back the caller must not free
 * the call.
 */
typedef struct gw_upstream gw_upstream;

typedef ks_req_call gw_call;

typedef void (*gw_complete_fn)(gw_call *call, void *arg);

/*
 * Dials the front of every service that has routes, plus auth (for
 * ResolveContext), on every broker. complete(call, arg) runs on base's
 * thread for every call started.
 */
int gw_upstream_new(gw_upstream **out, struct event_base *base, const struct gw_config *cfg,
                    const gw_routes *routes, gw_complete_fn complete, void *arg);
/*
 * Ends every call in flight with UNAVAILABLE (through complete), closes
 * every broker connection, then frees. Accepts NULL.
 */
void gw_upstream_free(gw_upstream *u);
/* Starts a call; returns KS_OK (complete will run once), else a code. */
int gw_upstream_call(gw_upstream *u, int service, const ks_rpc_call_args *args, gw_call *call);
/* Connected broker pipes of a service's client (0 when it has none). */
int gw_upstream_connected(const gw_upstream *u, int service);

#endif
