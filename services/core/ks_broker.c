/*
 * ks_broker: see ks_broker.h.
 *
 * The forwarding is our own rather than nng_device: nng 1.5's device keeps a
 * hold on both sockets until one of its pending operations fails, so closing
 * the "wrong" socket first hangs shutdown. Here each direction is one aio
 * looping recv -> send, which we can cancel with nng_aio_stop before closing
 * anything, and which counts what it forwards.
 */
#include "ks_broker.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "ks_code.h"
#include "ks_log.h"
#include "ks_metrics.h"
#include "ks_rpc.h"
#include "ks_topology.h"

#define RECV_MAX_BYTES ((size_t)KS_RPC_PAYLOAD_MAX + 65536)
#define N_DEVICES      (KS_SVC_COUNT + 1) /* one per service, one for events */

typedef struct path {
        nng_socket src, dst;
        nng_aio *aio;
        bool sending;
        ks_counter *forwarded;
} path;

typedef struct device {
        const char *name;
        nng_socket a, b; /* a: front / events in; b: back / events out */
        path paths[2];   /* a -> b, and b -> a for request/reply */
        int n_paths;
        ks_gauge *pipes;
} device;

struct ks_broker {
        device devices[N_DEVICES];
};

static void path_recv(path *p)
{
        p->sending = false;
        nng_recv_aio(p->src, p->aio);
}

static void path_cb(void *arg)
{
        path *p = arg;
        int rv = nng_aio_result(p->aio);
        if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
                if (p->sending) {
                        nng_msg_free(nng_aio_get_msg(p->aio));
                        nng_aio_set_msg(p->aio, NULL);
                }
                return; /* stopping */
        }
        if (p->sending) {
                if (rv != 0) {
                        nng_msg_free(nng_aio_get_msg(p->aio));
                        nng_aio_set_msg(p->aio, NULL);
                } else {
                        ks_counter_inc(p->forwarded);
                }
                path_recv(p);
                return;
        }
        if (rv != 0) {
                path_recv(p);
                return;
        }
        p->sending = true;
        nng_aio_set_msg(p->aio, nng_aio_get_msg(p->aio));
        nng_send_aio(p->dst, p->aio);
}

static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
        (void)p;
        device *d = arg;
        ks_gauge_add(d->pipes, ev == NNG_PIPE_EV_ADD_POST ? 1 : -1);
}

static int listen_on(nng_socket s, const char *base, int service, ks_broker_side side, device *d)
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

static int open_path(device *d, int i, nng_socket src, nng_socket dst, const char *direction)
{
        path *p = &d->paths[i];
        p->src = src;
        p->dst = dst;
        char labels[128];
        snprintf(labels, sizeof(labels), "device=\"%s\",direction=\"%s\"", d->name, direction);
        p->forwarded = ks_counter_get(ks_metrics_default(), "keelson_broker_forwarded_total",
                                      "Messages forwarded, by device and direction.", labels);
        if (nng_aio_alloc(&p->aio, path_cb, p) != 0) {
                return -1;
        }
        d->n_paths = i + 1;
        return 0;
}

static void device_init(device *d, const char *name)
{
        d->name = name;
        d->a = (nng_socket)NNG_SOCKET_INITIALIZER;
        d->b = (nng_socket)NNG_SOCKET_INITIALIZER;
        char labels[128];
        snprintf(labels, sizeof(labels), "device=\"%s\"", name);
        d->pipes =
            ks_gauge_get(ks_metrics_default(), "keelson_broker_pipes",
                         "Connected peers (clients, replicas, publishers, subscribers).", labels);
}

static int open_service(device *d, const char *base, int service)
{
        device_init(d, ks_service_name((ks_service_id)service));
        if (nng_rep0_open_raw(&d->a) != 0 || nng_req0_open_raw(&d->b) != 0) {
                return -1;
        }
        if (listen_on(d->a, base, service, KS_SIDE_FRONT, d) != 0 ||
            listen_on(d->b, base, service, KS_SIDE_BACK, d) != 0) {
                return -1;
        }
        if (open_path(d, 0, d->a, d->b, "request") != 0 ||
            open_path(d, 1, d->b, d->a, "reply") != 0) {
                return -1;
        }
        return 0;
}

static int open_events(device *d, const char *base)
{
        device_init(d, "events");
        if (nng_sub0_open_raw(&d->a) != 0 || nng_pub0_open_raw(&d->b) != 0) {
                return -1;
        }
        if (listen_on(d->a, base, 0, KS_SIDE_EVENTS_IN, d) != 0 ||
            listen_on(d->b, base, 0, KS_SIDE_EVENTS_OUT, d) != 0) {
                return -1;
        }
        /* nng's default of 16 queued messages per peer drops most of a burst */
        nng_socket_set_int(d->a, NNG_OPT_RECVBUF, 8192);
        nng_socket_set_int(d->b, NNG_OPT_SENDBUF, 8192);
        return open_path(d, 0, d->a, d->b, "event");
}

void ks_broker_stop(ks_broker *b)
{
        if (b == NULL) {
                return;
        }
        for (int i = 0; i < N_DEVICES; i++) {
                for (int j = 0; j < b->devices[i].n_paths; j++) {
                        nng_aio_stop(b->devices[i].paths[j].aio);
                }
        }
        for (int i = 0; i < N_DEVICES; i++) {
                device *d = &b->devices[i];
                if (nng_socket_id(d->a) > 0) {
                        nng_close(d->a);
                }
                if (nng_socket_id(d->b) > 0) {
                        nng_close(d->b);
                }
                for (int j = 0; j < d->n_paths; j++) {
                        nng_aio_free(d->paths[j].aio);
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
        int rv = 0;
        for (int i = 0; i < KS_SVC_COUNT && rv == 0; i++) {
                rv = open_service(&b->devices[i], base, i);
        }
        if (rv == 0) {
                rv = open_events(&b->devices[KS_SVC_COUNT], base);
        }
        if (rv != 0) {
                ks_broker_stop(b);
                return KS_UNAVAILABLE;
        }
        for (int i = 0; i < N_DEVICES; i++) {
                for (int j = 0; j < b->devices[i].n_paths; j++) {
                        path_recv(&b->devices[i].paths[j]);
                }
        }
        *out = b;
        return KS_OK;
}
