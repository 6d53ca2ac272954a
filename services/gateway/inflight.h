/*
 * inflight.c: the requests waiting on an upstream call or a rate-limit
 * decision (the keelson_gateway_inflight_requests gauge), and the drain
 * that waits for them after a signal. server.c starts the drain and the
 * teardown; handler.c counts its requests in and out. Loop thread only.
 */
#ifndef GW_INFLIGHT_H
#define GW_INFLIGHT_H

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct gw_inflight gw_inflight;

int gw_inflight_new(gw_inflight **out, struct event_base *base);
void gw_inflight_free(gw_inflight *f); /* accepts NULL */

/* A request starts or stops waiting. */
void gw_inflight_begin(gw_inflight *f);
void gw_inflight_end(gw_inflight *f);
int64_t gw_inflight_count(const gw_inflight *f);

/*
 * A signal came: no new work is wanted (gw_inflight_draining turns true).
 * Returns true when requests still wait (the caller bounds the wait); when
 * none does, the loop stops after a short flush of the replies written.
 */
bool gw_inflight_drain(gw_inflight *f);
bool gw_inflight_draining(const gw_inflight *f);
/* While draining: stops the loop (after the flush) once nothing waits. */
void gw_inflight_check(gw_inflight *f);

/* Tearing down: a request that stops waiting is freed, nothing more. */
void gw_inflight_close(gw_inflight *f);
bool gw_inflight_closing(const gw_inflight *f);

#endif
