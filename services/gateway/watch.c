/* See watch.h. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "ks_code.h"
#include "rpcstream.h"
#include "watch.h"

#define NAME_MAX_LEN 256

typedef struct watcher {
        struct watcher *prev, *next;
        gw_watches *w;
        gw_req *req;
        gw_wire wire;
        char service[NAME_MAX_LEN];
        gw_serving last;
} watcher;

struct gw_watches {
        gw_health_probe probe;
        struct event *tick;
        watcher *head;
        size_t n;
        bool draining;
};

static void unlink_free(watcher *x)
{
        gw_watches *w = x->w;
        if (x->prev != NULL) {
                x->prev->next = x->next;
        } else {
                w->head = x->next;
        }
        if (x->next != NULL) {
                x->next->prev = x->prev;
        }
        w->n--;
        free(x);
}

static void gone(void *arg)
{
        unlink_free(arg);
}

static gw_serving status_of(const gw_watches *w, const char *service)
{
        gw_serving st = GW_SERVICE_UNKNOWN;
        if (gw_health_status(&w->probe, service, &st) != KS_OK) {
                st = GW_SERVICE_UNKNOWN;
        }
        return st;
}

/* One HealthCheckResponse on the watcher's stream. */
static void send_status(watcher *x, gw_serving st)
{
        Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)st;
        (void)gw_rpcstream_send(x->req, x->wire, &r.base); /* out of memory: the next change */
        x->last = st;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        gw_watches *w = arg;
        for (watcher *x = w->head; x != NULL; x = x->next) {
                gw_serving st = status_of(w, x->service);
                if (st != x->last) {
                        send_status(x, st);
                }
        }
}

int gw_watch(gw_watches *w, gw_req *req, gw_wire wire, const char *service)
{
        if (w->draining) {
                return KS_UNAVAILABLE;
        }
        if (w->n >= GW_WATCHES_MAX) {
                return KS_RESOURCE_EXHAUSTED;
        }
        watcher *x = calloc(1, sizeof(*x));
        if (x == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        snprintf(x->service, sizeof(x->service), "%s", service != NULL ? service : "");
        x->w = w;
        x->req = req;
        x->wire = wire;
        x->next = w->head;
        if (w->head != NULL) {
                w->head->prev = x;
        }
        w->head = x;
        w->n++;
        gw_req_on_cancel(req, gone, x);
        gw_rpcstream_open(req, wire);
        send_status(x, status_of(w, x->service));
        return KS_OK;
}

void gw_watches_drain(gw_watches *w)
{
        if (w == NULL) {
                return;
        }
        w->draining = true;
        while (w->head != NULL) {
                watcher *x = w->head;
                if (x->last != GW_SERVICE_UNKNOWN) {
                        send_status(x, GW_NOT_SERVING);
                }
                gw_rpcstream_end(x->req, x->wire, KS_UNAVAILABLE, "the gateway is stopping");
                unlink_free(x);
        }
}

int gw_watches_new(gw_watches **out, struct event_base *base, const gw_health_probe *probe)
{
        *out = NULL;
        gw_watches *w = calloc(1, sizeof(*w));
        if (w == NULL) {
                return -1;
        }
        w->probe = *probe;
        struct timeval tv = {GW_WATCH_TICK_MS / 1000, (GW_WATCH_TICK_MS % 1000) * 1000};
        if ((w->tick = event_new(base, -1, EV_PERSIST, on_tick, w)) == NULL ||
            event_add(w->tick, &tv) != 0) {
                gw_watches_free(w);
                return -1;
        }
        *out = w;
        return 0;
}

void gw_watches_free(gw_watches *w)
{
        if (w == NULL) {
                return;
        }
        while (w->head != NULL) {
                unlink_free(w->head); /* their requests are the front's, gone or going */
        }
        if (w->tick != NULL) {
                event_free(w->tick);
        }
        free(w);
}
