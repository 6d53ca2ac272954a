/*
 * events.c: auth.context_revoked events, received on a thread of their own
 * and applied to the context cache on the loop.
 */
#ifndef GW_EVENTS_H
#define GW_EVENTS_H

#include <event2/event.h>

#include "cache.h"

typedef struct gw_events gw_events;

/*
 * Subscribes to auth.context_revoked on every broker (a thread of its own)
 * and applies each event to cache on base's thread. cache may be NULL (the
 * events are then only counted).
 */
int gw_events_new(gw_events **out, struct event_base *base, const char *broker_url,
                  gw_cache *cache);
/* Stops the thread, drops what is queued, frees. Accepts NULL. */
void gw_events_free(gw_events *e);

#endif
