/*
 * ks_broker: see ks_broker.h.
 *
 * The forwarding is our own rather than nng_device: nng 1.5's device keeps a
 * hold on both sockets until one of its pending operations fails, so closing
 * the "wrong" socket first hangs shutdown. Here each direction is one aio
 * looping recv -> send, which we can cancel with nng_aio_stop before closing
 * anything, and which counts what it forwards.
 *
 * The watch (ks_broker.h, "Hung replicas") runs on a ticker thread of its
 * own: it reads nng's statistics snapshot (each pipe's socket and message
 * counts), feeds each back's pipes to its ks_outlier and closes the pipes it
 * names. Only that thread touches the outliers.
 */
#include "ks_broker.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <arpa/inet.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_clock.h"
#include "ks_code.h"
#include "ks_log.h"
#include "ks_metrics.h"
#include "ks_outlier.h"
#include "ks_rpc.h"
#include "ks_ticker.h"
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

/* The watch of one service's back. */
typedef struct watch {
        ks_outlier *outlier;
        ks_outlier_pipe pipes[KS_OUTLIER_PIPES_MAX]; /* the look being gathered */
        size_t n_pipes;
        ks_counter *ejections, *readmissions, *held;
        ks_gauge *ejected;
} watch;

struct ks_broker {
        device devices[N_DEVICES];
        ks_broker_options opts;
        watch watches[KS_SVC_COUNT]; /* one per service device, same index */
        ks_outlier_event events[KS_OUTLIER_EVENTS_MAX];
        ks_ticker *ticker;
        bool stats_failed; /* logged once */
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

/* ---- the watch of the backs ---------------------------------------------- */

static uint64_t stat_u64(nng_stat *node, const char *name)
{
        nng_stat *s = nng_stat_find(node, name);
        return s != NULL ? nng_stat_value(s) : 0;
}

/* "127.0.0.1" into host, and "127.0.0.1:41234" into peer (either may be NULL). */
static void pipe_peer(uint32_t id, char *host, size_t host_len, char *peer, size_t peer_len)
{
        nng_pipe p = {.id = id};
        nng_sockaddr sa;
        char ip[INET6_ADDRSTRLEN] = "unknown";
        unsigned port = 0;

        if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) == 0) {
                if (sa.s_family == NNG_AF_INET) {
                        inet_ntop(AF_INET, &sa.s_in.sa_addr, ip, sizeof(ip));
                        port = ntohs(sa.s_in.sa_port);
                } else if (sa.s_family == NNG_AF_INET6) {
                        inet_ntop(AF_INET6, sa.s_in6.sa_addr, ip, sizeof(ip));
                        port = ntohs(sa.s_in6.sa_port);
                }
        }
        if (host != NULL) {
                snprintf(host, host_len, "%s", ip);
        }
        if (peer != NULL) {
                snprintf(peer, peer_len, "%s:%u", ip, port);
        }
}

/* One pipe of the snapshot: kept when it is a pipe of a service's back. */
static void gather_pipe(ks_broker *b, nng_stat *node)
{
        uint64_t sock = stat_u64(node, "socket");

        for (int i = 0; i < KS_SVC_COUNT; i++) {
                watch *w = &b->watches[i];
                if ((uint64_t)nng_socket_id(b->devices[i].b) != sock) {
                        continue;
                }
                if (w->n_pipes == KS_OUTLIER_PIPES_MAX) {
                        return; /* beyond the bound: left alone (ks_outlier.h) */
                }
                ks_outlier_pipe *p = &w->pipes[w->n_pipes++];
                p->id = (uint32_t)stat_u64(node, "id");
                p->sent = stat_u64(node, "tx_msgs");
                p->answered = stat_u64(node, "rx_msgs");
                pipe_peer(p->id, p->host, sizeof(p->host), NULL, 0);
                return;
        }
}

static void gather(ks_broker *b, nng_stat *node, int depth)
{
        for (nng_stat *c = nng_stat_child(node); c != NULL; c = nng_stat_next(c)) {
                if (strcmp(nng_stat_name(c), "pipe") == 0) {
                        gather_pipe(b, c);
                } else if (depth < 4) {
                        gather(b, c, depth + 1);
                }
        }
}

static void act(ks_broker *b, int svc, const ks_outlier_event *e)
{
        watch *w = &b->watches[svc];
        const char *name = b->devices[svc].name;
        char peer[INET6_ADDRSTRLEN + 8];

        pipe_peer(e->pipe, NULL, 0, peer, sizeof(peer));
        if (e->kind == KS_OUTLIER_EJECT) {
                nng_pipe p = {.id = e->pipe};
                nng_pipe_close(p); /* gone already: nothing to do */
                ks_counter_inc(w->ejections);
                ks_log_warn(NULL, "replica ejected: it holds calls and answers none",
                            "{s:s,s:I,s:s,s:I,s:I}", "device", name, "pipe", (json_int_t)e->pipe,
                            "peer", peer, "outstanding", (json_int_t)e->outstanding, "silent_ms",
                            (json_int_t)e->elapsed_ms);
        } else if (e->kind == KS_OUTLIER_HELD) {
                ks_counter_inc(w->held);
                ks_log_warn(NULL,
                            "replica holds calls and answers none, kept: no other replica answers",
                            "{s:s,s:I,s:s,s:I,s:I}", "device", name, "pipe", (json_int_t)e->pipe,
                            "peer", peer, "outstanding", (json_int_t)e->outstanding, "silent_ms",
                            (json_int_t)e->elapsed_ms);
        } else {
                ks_counter_inc(w->readmissions);
                ks_log_info(NULL, "replica readmitted: it dialled back after an ejection",
                            "{s:s,s:I,s:s,s:I}", "device", name, "pipe", (json_int_t)e->pipe,
                            "peer", peer, "ejected_ms", (json_int_t)e->elapsed_ms);
        }
}

static ks_ticker_next watch_step(void *arg)
{
        ks_broker *b = arg;
        nng_stat *st = NULL;
        int rv = nng_stats_get(&st);

        if (rv != 0) {
                if (!b->stats_failed) {
                        ks_log_error(NULL, "cannot read nng statistics: no replica is ejected",
                                     "{s:s}", "error", nng_strerror(rv));
                        b->stats_failed = true;
                }
                return KS_TICKER_REST;
        }
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                b->watches[i].n_pipes = 0;
        }
        gather(b, st, 0);
        nng_stats_free(st);
        int64_t now = ks_mono_ms();
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                watch *w = &b->watches[i];
                size_t n = ks_outlier_step(w->outlier, w->pipes, w->n_pipes, now, b->events);
                for (size_t j = 0; j < n; j++) {
                        act(b, i, &b->events[j]);
                }
                ks_gauge_set(w->ejected, ks_outlier_pending(w->outlier));
        }
        return KS_TICKER_REST;
}

static int watch_init(watch *w, const char *service, int64_t after_ms)
{
        ks_metrics *reg = ks_metrics_default();
        char labels[128];

        snprintf(labels, sizeof(labels), "device=\"%s\"", service);
        w->ejections = ks_counter_get(reg, "keelson_broker_ejections_total",
                                      "Replicas taken out of the rotation: they held calls and "
                                      "answered none for KEELSON_BROKER_EJECT_AFTER_MS.",
                                      labels);
        w->readmissions = ks_counter_get(
            reg, "keelson_broker_readmissions_total",
            "Connections to a back taken as an ejected replica dialling back.", labels);
        w->held = ks_counter_get(reg, "keelson_broker_ejections_held_total",
                                 "Replicas that held calls and answered none, kept in the "
                                 "rotation because no other replica of the service answered.",
                                 labels);
        w->ejected = ks_gauge_get(reg, "keelson_broker_ejected_replicas",
                                  "Ejected replicas that have not dialled back.", labels);
        return ks_outlier_new(&w->outlier, after_ms);
}

static int watch_start(ks_broker *b)
{
        int rc;

        for (int i = 0; i < KS_SVC_COUNT; i++) {
                if ((rc = watch_init(&b->watches[i], b->devices[i].name, b->opts.eject_after_ms)) !=
                    KS_OK) {
                        return rc;
                }
        }
        ks_ticker_options t = {.name = "broker-eject",
                               .interval_ms = b->opts.eject_check_ms,
                               .step = watch_step,
                               .arg = b};
        return ks_ticker_start(&b->ticker, &t);
}

static bool options_ok(const ks_broker_options *o)
{
        if (o->eject_check_ms < KS_BROKER_EJECT_CHECK_MS_MIN ||
            o->eject_check_ms > KS_BROKER_EJECT_CHECK_MS_MAX) {
                return false;
        }
        return o->eject_after_ms == 0 || (o->eject_after_ms >= o->eject_check_ms &&
                                          o->eject_after_ms <= KS_OUTLIER_AFTER_MAX_MS);
}

void ks_broker_stop(ks_broker *b)
{
        if (b == NULL) {
                return;
        }
        ks_ticker_stop(b->ticker); /* first: it closes pipes of the sockets closed below */
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
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                ks_outlier_free(b->watches[i].outlier);
        }
        free(b);
}

int ks_broker_start(ks_broker **out, const char *base)
{
        const ks_broker_options o = {.eject_after_ms = KS_BROKER_EJECT_AFTER_MS_DEFAULT,
                                     .eject_check_ms = KS_BROKER_EJECT_CHECK_MS_DEFAULT};
        return ks_broker_start_with(out, base, &o);
}

int ks_broker_start_with(ks_broker **out, const char *base, const ks_broker_options *o)
{
        *out = NULL;
        if (!options_ok(o)) {
                return KS_INVALID_ARGUMENT;
        }
        ks_broker *b = calloc(1, sizeof(*b));
        if (b == NULL) {
                return KS_INTERNAL;
        }
        b->opts = *o;
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
        if (o->eject_after_ms > 0 && (rv = watch_start(b)) != KS_OK) {
                ks_broker_stop(b);
                return rv;
        }
        for (int i = 0; i < N_DEVICES; i++) {
                for (int j = 0; j < b->devices[i].n_paths; j++) {
                        path_recv(&b->devices[i].paths[j]);
                }
        }
        *out = b;
        return KS_OK;
}
