/*
 * Requests in flight and the drain. A request counts from the moment it
 * waits on an upstream call or a Redis decision until that ends; the drain
 * after SIGTERM/SIGINT ends the loop once the count is back to zero, after
 * FLUSH_MS so that the last replies are written out first.
 *
 * Its own module so that server.c (which starts the drain) and handler.c
 * (which counts) both use it and never each other's internals.
 */
#include <stdlib.h>

#include "inflight.h"
#include "ks_metrics.h"

#define FLUSH_MS 200 /* after the last reply of a drain: time to write it out */

struct gw_inflight {
        struct event_base *base;
        int64_t n;
        bool draining; /* a signal came: no new connections, /readyz says 503 */
        bool closing;  /* tearing down: completions free their request, nothing more */
        ks_gauge *gauge;
};

int gw_inflight_new(gw_inflight **out, struct event_base *base)
{
        *out = NULL;
        gw_inflight *f = calloc(1, sizeof(*f));
        if (f == NULL) {
                return -1;
        }
        f->base = base;
        f->gauge =
            ks_gauge_get(ks_metrics_default(), "keelson_gateway_inflight_requests",
                         "Requests waiting on an upstream call or a rate-limit decision", NULL);
        *out = f;
        return 0;
}

void gw_inflight_free(gw_inflight *f)
{
        free(f);
}

void gw_inflight_begin(gw_inflight *f)
{
        f->n++;
        ks_gauge_set(f->gauge, f->n);
}

void gw_inflight_end(gw_inflight *f)
{
        f->n--;
        ks_gauge_set(f->gauge, f->n);
}

int64_t gw_inflight_count(const gw_inflight *f)
{
        return f->n;
}

static void stop_after_flush(gw_inflight *f)
{
        struct timeval tv = {0, FLUSH_MS * 1000};
        event_base_loopexit(f->base, &tv);
}

bool gw_inflight_drain(gw_inflight *f)
{
        f->draining = true;
        if (f->n == 0) {
                stop_after_flush(f);
                return false;
        }
        return true;
}

bool gw_inflight_draining(const gw_inflight *f)
{
        return f->draining;
}

void gw_inflight_check(gw_inflight *f)
{
        if (f->draining && !f->closing && f->n == 0) {
                stop_after_flush(f);
        }
}

void gw_inflight_close(gw_inflight *f)
{
        f->closing = true;
}

bool gw_inflight_closing(const gw_inflight *f)
{
        return f->closing;
}
