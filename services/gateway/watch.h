/*
 * watch.c: grpc.health.v1.Health/Watch, a server stream per watcher: the
 * status of the name asked for at once (SERVICE_UNKNOWN for a name not
 * known, as the protocol wants, rather than an error), then again each
 * time it changes (looked at every GW_WATCH_TICK_MS), until the client
 * cancels or the gateway stops (NOT_SERVING, then UNAVAILABLE).
 */
#ifndef GW_WATCH_H
#define GW_WATCH_H

#include <event2/event.h>
#include <stddef.h>
#include <stdint.h>

#include "front.h"
#include "health.h"
#include "wire.h"

#define GW_WATCH_TICK_MS 1000
#define GW_WATCHES_MAX   1000 /* open on one gateway; more are refused */

typedef struct gw_watches gw_watches;

int gw_watches_new(gw_watches **out, struct event_base *base, const gw_health_probe *probe);
/* Frees; watches still open are left to the front (free it first). Accepts NULL. */
void gw_watches_free(gw_watches *w);
/* Tells every watcher NOT_SERVING and ends its stream UNAVAILABLE. */
void gw_watches_drain(gw_watches *w);
/*
 * Takes req, whose HealthCheckRequest asked for service ("" the gateway
 * itself), its reply written on wire (rpcstream.h): KS_OK (req is the
 * watches' now), or KS_RESOURCE_EXHAUSTED (too many), KS_UNAVAILABLE
 * (stopping), nothing done.
 */
int gw_watch(gw_watches *w, gw_req *req, gw_wire wire, const char *service);

#endif
