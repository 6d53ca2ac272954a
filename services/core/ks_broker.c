/* ks_broker: see ks_broker.h. */
#include "ks_broker.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "ks_code.h"
#include "ks_log.h"
#include "ks_metrics.h"
#include "ks_rpc.h"
#include "ks_topology.h"

#define RECV_MAX_BYTES ((size_t)KS_RPC_PAYLOAD_MAX + 65536)
#define N_DEVICES (KS_SVC_COUNT + 1) /* one per service, one for events */

typedef struct device {
        const char *name;
        nng_socket a, b;
        pthread_t thread;
        bool running;
        ks_gauge *pipes;
} device;

struct ks_broker {
        device devices[N_DEVICES];
};

static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
        (void)p;
        device *d = arg;
        ks_gauge_add(d->pipes, ev == NNG_PIPE_EV_ADD_POST ? 1 : -1);
}

static int listen_on(nng_socket s, const char *base, int service, ks_broker_side side,
                     device *d)
{
        char url[KS_URL_MAX];
        if (ks_broker_url(url, sizeof(url), base, service, side) != 0) {
                ks_log_error(NULL, "bad broker url", "{s:s}", "url", base);
                return -1;
        }
        nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, RECV_MAX_BYTES);
        nng_pipe_notify(s, NNG_PIPE_EV_ADD_POST, pipe_event, d);
        nng_pipe_notify(s, NNG_PIPE_EV_REM_POST, pipe_event, d);
        int rv = nng_listen(s, url, NULL, 0);
        if (rv != 0) {
                ks_log_error(NULL, "cannot listen", "{s:s,s:s}", "url", url, "error",
                             nng_strerror(rv));
                return -1;
        }
        return 0;
}

static void *device_main(void *arg)
{
        device *d = arg;
        int rv = nng_device(d->a, d->b);
        if (rv != NNG_ECLOSED) {
                ks_log_error(NULL, "device stopped", "{s:s,s:s}", "device", d->name, "error",
                             nng_strerror(rv));
        }
        return NULL;
}

static void device_gauge(device *d)
{
        char labels[128];
        snprintf(labels, sizeof(labels), "device=\"%s\"", d->name);
        d->pipes = ks_gauge_get(ks_metrics_default(), "keelson_broker_pipes",
                                "Connected peers (clients, replicas, publishers, subscribers).",
                                labels);
}

static int open_service(device *d, const char *base, int service)
{
        d->name = ks_service_name((ks_service_id)service);
        device_gauge(d);
        if (nng_rep0_open_raw(&d->a) != 0 || nng_req0_open_raw(&d->b) != 0) {
                return -1;
        }
        if (listen_on(d->a, base, service, KS_SIDE_FRONT, d) != 0 ||
            listen_on(d->b, base, service, KS_SIDE_BACK, d) != 0) {
                return -1;
        }
        return 0;
}

static int open_events(device *d, const char *base)
{
        d->name = "events";
        device_gauge(d);
        if (nng_sub0_open_raw(&d->a) != 0 || nng_pub0_open_raw(&d->b) != 0) {
                return -1;
        }
        if (listen_on(d->a, base, 0, KS_SIDE_EVENTS_IN, d) != 0 ||
            listen_on(d->b, base, 0, KS_SIDE_EVENTS_OUT, d) != 0) {
                return -1;
        }
        return 0;
}

void ks_broker_stop(ks_broker *b)
{
        if (b == NULL) {
                return;
        }
        /* Closing a socket makes its nng_device return, so the threads can be joined. */
        for (int i = 0; i < N_DEVICES; i++) {
                if (nng_socket_id(b->devices[i].a) > 0) {
                        nng_close(b->devices[i].a);
                }
                if (nng_socket_id(b->devices[i].b) > 0) {
                        nng_close(b->devices[i].b);
                }
        }
        for (int i = 0; i < N_DEVICES; i++) {
                if (b->devices[i].running) {
                        pthread_join(b->devices[i].thread, NULL);
                }
        }
        free(b);
}

int ks_broker_start(ks_broker **out, const char *base)
{
        *out = NULL;
        ks_broker *b = calloc(1, sizeof(*b));
        if (b == NULL) {
                return KS_INTERNAL;
        }
        for (int i = 0; i < N_DEVICES; i++) {
                b->devices[i].a = (nng_socket)NNG_SOCKET_INITIALIZER;
                b->devices[i].b = (nng_socket)NNG_SOCKET_INITIALIZER;
        }
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                if (open_service(&b->devices[i], base, i) != 0) {
                        ks_broker_stop(b);
                        return KS_UNAVAILABLE;
                }
        }
        if (open_events(&b->devices[KS_SVC_COUNT], base) != 0) {
                ks_broker_stop(b);
                return KS_UNAVAILABLE;
        }
        for (int i = 0; i < N_DEVICES; i++) {
                if (pthread_create(&b->devices[i].thread, NULL, device_main, &b->devices[i]) !=
                    0) {
                        ks_broker_stop(b);
                        return KS_INTERNAL;
                }
                b->devices[i].running = true;
        }
        *out = b;
        return KS_OK;
}
