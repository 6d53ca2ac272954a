/* See watch.h. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc.h"
#include "grpc/health/v1/health.pb-c.h"
#include "ks_code.h"
#include "watch.h"

#define NAME_MAX_LEN 256

typedef struct watcher {
        struct watcher *prev, *next;
        gw_watches *w;
        gw_req *req;
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
        uint8_t buf[GW_GRPC_PREFIX_BYTES + 16];
        r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)st;
        size_t len = grpc__health__v1__health_check_response__get_packed_size(&r);
        if (len > sizeof(buf) - GW_GRPC_PREFIX_BYTES || gw_grpc_prefix(buf, false, len) != 0) {
                return;
        }
        grpc__health__v1__health_check_response__pack(&r, buf + GW_GRPC_PREFIX_BYTES);
        gw_req_stream_write(x->req, buf, GW_GRPC_PREFIX_BYTES + len);
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

int gw_watch(gw_watches *w, gw_req *req, const uint8_t *msg, size_t len)
{
        if (w->draining) {
                return KS_UNAVAILABLE;
        }
        if (w->n >= GW_WATCHES_MAX) {
                return KS_RESOURCE_EXHAUSTED;
        }
        Grpc__Health__V1__HealthCheckRequest *q =
            grpc__health__v1__health_check_request__unpack(NULL, len, msg);
        if (q == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        watcher *x = calloc(1, sizeof(*x));
        if (x == NULL) {
                grpc__health__v1__health_check_request__free_unpacked(q, NULL);
                return KS_RESOURCE_EXHAUSTED;
        }
        snprintf(x->service, sizeof(x->service), "%s", q->service != NULL ? q->service : "");
        grpc__health__v1__health_check_request__free_unpacked(q, NULL);
        x->w = w;
        x->req = req;
        x->next = w->head;
        if (w->head != NULL) {
                w->head->prev = x;
        }
        w->head = x;
        w->n++;
        gw_req_on_cancel(req, gone, x);
        gw_req_stream_open(req, 200, "application/grpc");
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
                char status[12], text[GW_GRPC_MESSAGE_MAX + 1];
                static const char why[] = "the gateway is stopping";
                if (x->last != GW_SERVICE_UNKNOWN) {
                        send_status(x, GW_NOT_SERVING);
                }
                snprintf(status, sizeof(status), "%d", gw_grpc_status_of_code(KS_UNAVAILABLE));
                gw_grpc_message_encode(why, sizeof(why) - 1, text, sizeof(text));
                gw_req_on_cancel(x->req, NULL, NULL);
                gw_req_add_trailer(x->req, "grpc-status", status);
                gw_req_add_trailer(x->req, "grpc-message", text);
                gw_req_stream_close(x->req);
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
