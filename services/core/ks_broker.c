/*
 * ks_broker: see ks_broker.h.
 *
 * One libevent loop on a thread of its own serves every socket of the
 * broker through ks_sp (nng's wire protocol), so a message costs the read
 * that brings it and the write that sends it on: no nng task queue, no
 * hand-off between threads (nng's device cost about 16 thread switches per
 * request; docs/performance.md).
 *
 * Requests and replies, as nng's raw req/rep device does them. A request
 * from a client's req socket is [request id][body], the request id's high
 * bit set. The broker sends [client pipe id][request id][body] to one
 * replica (the connected one holding the fewest unanswered calls, round
 * robin among equals; none connected: a bounded queue until one is); the
 * replica's rep socket takes the two words as the backtrace and sends them
 * back before its reply, and the broker, popping the pipe id, sends
 * [request id][reply] to that client, if it is still connected.
 *
 * Events: what a publisher sends goes to every subscriber as it is (nng's
 * sub sockets filter by topic themselves); a subscriber whose output is
 * over its bound misses it, as with nng's pub.
 *
 * The watch (ks_broker.h, "Hung replicas") is a timer on the same loop: it
 * gives each back's pipes, with the calls sent to each and answered, to
 * its ks_outlier and closes the pipes it names.
 */
#include "ks_broker.h"
#include "ks_broker_ctl.h"

#include <event2/event.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ks_clock.h"
#include "ks_code.h"
#include "ks_log.h"
#include "ks_loop.h"
#include "ks_metrics.h"
#include "ks_outlier.h"
#include "ks_rpc.h"
#include "ks_sp.h"
#include "ks_topology.h"

#define RECV_MAX_BYTES ((size_t)KS_RPC_PAYLOAD_MAX + 65536)
#define SEND_MAX_BYTES ((size_t)16 << 20) /* a peer's unread output; over it, messages drop */
#define QUEUE_MAX      1024               /* requests waiting for a first replica */
#define WORD           4

/* A request waiting for a replica: the client's pipe, and the message as it came. */
typedef struct queued {
        struct queued *next;
        uint32_t client;
        size_t len;
        uint8_t msg[];
} queued;

/* What the broker keeps of a replica's pipe. */
typedef struct replica {
        uint64_t sent, answered;
        bool draining; /* it asked for no new call (ks_broker_ctl.h) */
} replica;

/* A device's connected peers, and how many ever connected: the two moving apart is reconnection. */
typedef struct peers {
        ks_gauge *pipes;
        ks_counter *connections;
} peers;

static void peers_init(peers *p, ks_metrics *reg, const char *labels)
{
        p->pipes =
            ks_gauge_get(reg, "keelson_broker_pipes",
                         "Connected peers (clients, replicas, publishers, subscribers).", labels);
        p->connections = ks_counter_get(reg, "keelson_broker_connections_total",
                                        "Peers that connected (handshake done): rising while "
                                        "keelson_broker_pipes stays level, peers reconnect.",
                                        labels);
}

static void peers_added(peers *p)
{
        ks_gauge_add(p->pipes, 1);
        ks_counter_inc(p->connections);
}

static void peers_removed(peers *p)
{
        ks_gauge_add(p->pipes, -1);
}

typedef struct service {
        struct ks_broker *b;
        const char *name;
        ks_sp_listener *front, *back;
        ks_sp_pipe *last; /* the replica chosen last (round robin among equals) */
        queued *head, *tail;
        size_t n_queued;
        ks_counter *requests, *replies, *dropped, *drains;
        peers peers;
        /* the watch */
        ks_outlier *outlier;
        ks_counter *ejections, *readmissions, *held;
        ks_gauge *ejected;
} service;

typedef struct events_device {
        ks_sp_listener *in, *out;
        ks_counter *forwarded, *dropped;
        peers peers;
} events_device;

struct ks_broker {
        ks_broker_options opts;
        ks_loop *loop; /* one thread: every pipe, timer and callback */
        ks_sp *sp;
        char bases[KS_SP_ADDRS_MAX][KS_URL_MAX]; /* KEELSON_BROKER_URL: tcp://, ipc://, or both */
        int n_bases;
        service services[KS_SVC_COUNT];
        events_device events;
        struct event *watch;
        ks_outlier_pipe look[KS_OUTLIER_PIPES_MAX];
        ks_outlier_event acts[KS_OUTLIER_EVENTS_MAX];
        /* ks_broker_drain: the loop tells the clients, the caller's thread waits */
        struct event *drain_start, *drain_look;
        atomic_bool draining;     /* clients are told "drain", new ones as they come */
        atomic_bool told;         /* every client connected at the start was told */
        atomic_int awaiting;      /* clients told that have not answered "drained" */
        atomic_llong outstanding; /* calls queued or at replicas, and replies unsent */
        atomic_uint looks;        /* times drain_look measured */
};

/* A client's pipe user while it is told "drain" and has not answered. */
static char told_mark;

static uint32_t word_at(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void word_put(uint8_t *p, uint32_t w)
{
        p[0] = (uint8_t)(w >> 24);
        p[1] = (uint8_t)(w >> 16);
        p[2] = (uint8_t)(w >> 8);
        p[3] = (uint8_t)w;
}

/* ---- requests ----------------------------------------------------------------------- */

/*
 * The replica to send the next request to: the fewest calls held, round
 * robin among equals, none that is draining.
 */
static ks_sp_pipe *choose(service *s)
{
        ks_sp_pipe *first = ks_sp_listener_first(s->back);
        if (first == NULL) {
                return NULL;
        }
        ks_sp_pipe *start = s->last != NULL ? ks_sp_pipe_next(s->last) : NULL;
        start = start != NULL ? start : first;
        ks_sp_pipe *best = NULL, *p = start;
        uint64_t best_held = UINT64_MAX;
        do {
                const replica *r = ks_sp_pipe_user(p);
                uint64_t held = r->sent - r->answered;
                if (held < best_held && !r->draining && ks_sp_pending(p) <= SEND_MAX_BYTES) {
                        best = p;
                        best_held = held;
                        if (held == 0) {
                                break;
                        }
                }
                p = ks_sp_pipe_next(p) != NULL ? ks_sp_pipe_next(p) : first;
        } while (p != start);
        return best;
}

/* Sends msg of client on to a replica; false when none can take it now. */
static bool forward_request(service *s, uint32_t client, const uint8_t *msg, size_t len)
{
        ks_sp_pipe *p = choose(s);
        if (p == NULL) {
                return false;
        }
        uint8_t head[WORD];
        word_put(head, client);
        if (ks_sp_send(p, head, sizeof(head), msg, len) != 0) {
                return false;
        }
        replica *r = ks_sp_pipe_user(p);
        r->sent++;
        s->last = p;
        ks_counter_inc(s->requests);
        return true;
}

static void queue_push(service *s, uint32_t client, const uint8_t *msg, size_t len)
{
        if (s->n_queued >= QUEUE_MAX) {
                ks_counter_inc(s->dropped); /* the client resends after its timeout */
                return;
        }
        queued *q = malloc(sizeof(*q) + len);
        if (q == NULL) {
                ks_counter_inc(s->dropped);
                return;
        }
        q->next = NULL;
        q->client = client;
        q->len = len;
        memcpy(q->msg, msg, len);
        if (s->tail != NULL) {
                s->tail->next = q;
        } else {
                s->head = q;
        }
        s->tail = q;
        s->n_queued++;
}

/* What waited for a replica, now that one can take it. */
static void queue_flush(service *s)
{
        while (s->head != NULL) {
                queued *q = s->head;
                if (ks_sp_pipe_find(s->b->sp, q->client) != NULL &&
                    !forward_request(s, q->client, q->msg, q->len)) {
                        return;
                }
                s->head = q->next;
                if (s->head == NULL) {
                        s->tail = NULL;
                }
                s->n_queued--;
                free(q);
        }
}

static void queue_free(service *s)
{
        while (s->head != NULL) {
                queued *q = s->head;
                s->head = q->next;
                free(q);
        }
        s->tail = NULL;
        s->n_queued = 0;
}

/* A request from a client: its backtrace must end in a request id (high bit set). */
static void on_request(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg)
{
        service *s = arg;
        if (ks_broker_ctl_is(msg, len)) {
                if (ks_broker_ctl_equal(msg, len, KS_BROKER_CTL_DRAINED,
                                        KS_BROKER_CTL_DRAINED_LEN) &&
                    ks_sp_pipe_user(p) == &told_mark) {
                        ks_sp_pipe_set_user(p, NULL);
                        atomic_fetch_sub(&s->b->awaiting, 1);
                } else {
                        ks_counter_inc(s->dropped);
                }
                return;
        }
        if (ks_sp_backtrace(msg, len) == 0) {
                ks_counter_inc(s->dropped); /* nng's rep drops it the same way */
                return;
        }
        uint32_t client = ks_sp_pipe_id(p);
        if (s->head != NULL || !forward_request(s, client, msg, len)) {
                queue_push(s, client, msg, len);
        }
}

/* A control message from a replica (ks_broker_ctl.h). */
static void on_control(service *s, ks_sp_pipe *p, replica *r, const uint8_t *msg, size_t len)
{
        if (!ks_broker_ctl_equal(msg, len, KS_BROKER_CTL_DRAIN, KS_BROKER_CTL_DRAIN_LEN)) {
                ks_counter_inc(s->dropped);
                return;
        }
        if (!r->draining) {
                r->draining = true;
                ks_counter_inc(s->drains);
                ks_log_info(NULL, "replica draining: no new calls to it", "{s:s,s:s,s:I}", "device",
                            s->name, "peer", ks_sp_pipe_peer(p), "outstanding",
                            (json_int_t)(r->sent - r->answered));
        }
        if (ks_sp_send(p, NULL, 0, (const uint8_t *)KS_BROKER_CTL_DRAINED,
                       KS_BROKER_CTL_DRAINED_LEN) != 0) {
                ks_counter_inc(s->dropped); /* it stops after its wait, as without the notice */
        }
}

/* A reply from a replica: [client pipe id][request id][reply]; or a control message. */
static void on_reply(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg)
{
        service *s = arg;
        replica *r = ks_sp_pipe_user(p);
        if (ks_broker_ctl_is(msg, len)) {
                on_control(s, p, r, msg, len);
                return;
        }
        r->answered++;
        if (len < 2 * WORD) {
                ks_counter_inc(s->dropped);
                return;
        }
        ks_sp_pipe *client = ks_sp_pipe_find(s->b->sp, word_at(msg));
        if (client == NULL || ks_sp_send(client, NULL, 0, msg + WORD, len - WORD) != 0) {
                ks_counter_inc(s->dropped); /* the client left, or does not read */
                return;
        }
        ks_counter_inc(s->replies);
}

/* While the broker drains: a client is told to send nothing more here. */
static void tell_client(ks_broker *b, ks_sp_pipe *p)
{
        if (ks_sp_pipe_user(p) == &told_mark ||
            ks_sp_send(p, NULL, 0, (const uint8_t *)KS_BROKER_CTL_DRAIN, KS_BROKER_CTL_DRAIN_LEN) !=
                0) {
                return;
        }
        ks_sp_pipe_set_user(p, &told_mark);
        atomic_fetch_add(&b->awaiting, 1);
}

static void on_client_added(ks_sp_pipe *p, void *arg)
{
        service *s = arg;
        peers_added(&s->peers);
        if (atomic_load(&s->b->draining)) {
                tell_client(s->b, p);
        }
}

static void on_client_removed(ks_sp_pipe *p, void *arg)
{
        service *s = arg;
        peers_removed(&s->peers);
        if (ks_sp_pipe_user(p) == &told_mark) {
                atomic_fetch_sub(&s->b->awaiting, 1);
        }
}

static void on_replica_added(ks_sp_pipe *p, void *arg)
{
        service *s = arg;
        replica *r = calloc(1, sizeof(*r));
        if (r == NULL) {
                ks_sp_close(p);
                return;
        }
        ks_sp_pipe_set_user(p, r);
        peers_added(&s->peers);
        queue_flush(s);
}

static void on_replica_removed(ks_sp_pipe *p, void *arg)
{
        service *s = arg;
        if (s->last == p) {
                s->last = NULL;
        }
        free(ks_sp_pipe_user(p));
        ks_sp_pipe_set_user(p, NULL);
        peers_removed(&s->peers);
}

/* ---- events ------------------------------------------------------------------------- */

static void on_event(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg)
{
        (void)p;
        events_device *e = arg;
        for (ks_sp_pipe *sub = ks_sp_listener_first(e->out); sub != NULL;
             sub = ks_sp_pipe_next(sub)) {
                if (ks_sp_send(sub, NULL, 0, msg, len) == 0) {
                        ks_counter_inc(e->forwarded);
                } else {
                        ks_counter_inc(e->dropped);
                }
        }
}

static void on_events_pipe_added(ks_sp_pipe *p, void *arg)
{
        (void)p;
        peers_added(&((events_device *)arg)->peers);
}

static void on_events_pipe_removed(ks_sp_pipe *p, void *arg)
{
        (void)p;
        peers_removed(&((events_device *)arg)->peers);
}

/* Subscribers send nothing; what one sends is dropped. */
static void on_subscriber_message(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg)
{
        (void)p;
        (void)msg;
        (void)len;
        (void)arg;
}

/* ---- the watch of the backs ---------------------------------------------------------- */

static void act(service *s, ks_sp_pipe *p, const ks_outlier_event *e)
{
        const char *peer = p != NULL ? ks_sp_pipe_peer(p) : e->host;
        if (e->kind == KS_OUTLIER_EJECT) {
                ks_counter_inc(s->ejections);
                ks_log_warn(NULL, "replica ejected: it holds calls and answers none",
                            "{s:s,s:I,s:s,s:I,s:I}", "device", s->name, "pipe", (json_int_t)e->pipe,
                            "peer", peer, "outstanding", (json_int_t)e->outstanding, "silent_ms",
                            (json_int_t)e->elapsed_ms);
                if (p != NULL) {
                        ks_sp_close(p); /* its calls are lost: their clients resend */
                }
        } else if (e->kind == KS_OUTLIER_HELD) {
                ks_counter_inc(s->held);
                ks_log_warn(NULL,
                            "replica holds calls and answers none, kept: no other replica answers",
                            "{s:s,s:I,s:s,s:I,s:I}", "device", s->name, "pipe", (json_int_t)e->pipe,
                            "peer", peer, "outstanding", (json_int_t)e->outstanding, "silent_ms",
                            (json_int_t)e->elapsed_ms);
        } else {
                ks_counter_inc(s->readmissions);
                ks_log_info(NULL, "replica readmitted: it dialled back after an ejection",
                            "{s:s,s:I,s:s,s:I}", "device", s->name, "pipe", (json_int_t)e->pipe,
                            "peer", peer, "ejected_ms", (json_int_t)e->elapsed_ms);
        }
}

static void watch_step(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_broker *b = arg;
        int64_t now = ks_mono_ms();
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                service *s = &b->services[i];
                size_t n = 0;
                for (ks_sp_pipe *p = ks_sp_listener_first(s->back);
                     p != NULL && n < KS_OUTLIER_PIPES_MAX; p = ks_sp_pipe_next(p)) {
                        const replica *r = ks_sp_pipe_user(p);
                        ks_outlier_pipe *o = &b->look[n++];
                        o->id = ks_sp_pipe_id(p);
                        o->sent = r->sent;
                        o->answered = r->answered;
                        snprintf(o->host, sizeof(o->host), "%s", ks_sp_pipe_host(p));
                }
                size_t k = ks_outlier_step(s->outlier, b->look, n, now, b->acts);
                for (size_t j = 0; j < k; j++) {
                        act(s, ks_sp_pipe_find(b->sp, b->acts[j].pipe), &b->acts[j]);
                }
                ks_gauge_set(s->ejected, ks_outlier_pending(s->outlier));
        }
}

/* ---- draining ---------------------------------------------------------------------------- */

/* On the loop: every client of every service is told "drain". */
static void on_drain_start(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_broker *b = arg;
        atomic_store(&b->draining, true);
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                for (ks_sp_pipe *p = ks_sp_listener_first(b->services[i].front); p != NULL;
                     p = ks_sp_pipe_next(p)) {
                        tell_client(b, p);
                }
        }
        atomic_store(&b->told, true);
}

/* On the loop, while draining: what the broker still holds, in calls and reply bytes. */
static void on_drain_look(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_broker *b = arg;
        long long held = 0;
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                service *s = &b->services[i];
                held += (long long)s->n_queued;
                for (ks_sp_pipe *p = ks_sp_listener_first(s->back); p != NULL;
                     p = ks_sp_pipe_next(p)) {
                        const replica *r = ks_sp_pipe_user(p);
                        held += (long long)(r->sent - r->answered);
                }
                for (ks_sp_pipe *p = ks_sp_listener_first(s->front); p != NULL;
                     p = ks_sp_pipe_next(p)) {
                        held += ks_sp_pending(p) > 0;
                }
        }
        atomic_store(&b->outstanding, held);
        atomic_fetch_add(&b->looks, 1);
}

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

bool ks_broker_drain(ks_broker *b, int64_t max_ms)
{
        const int poll_ms = 2;
        struct timeval every = {0, poll_ms * 1000};
        int64_t t0 = ks_mono_ms(), until_ms = t0 + max_ms;

        event_active(b->drain_start, EV_TIMEOUT, 0);
        event_add(b->drain_look, &every);
        while ((!atomic_load(&b->told) || atomic_load(&b->awaiting) > 0) &&
               ks_mono_ms() < t0 + KS_BROKER_CTL_WAIT_MS) {
                sleep_ms(poll_ms);
        }
        int unconfirmed = atomic_load(&b->awaiting);
        /* Measured twice after the last client's answer: nothing is held, nothing unsent. */
        unsigned since = atomic_load(&b->looks);
        while (!(atomic_load(&b->looks) > since + 1 && atomic_load(&b->outstanding) == 0) &&
               ks_mono_ms() < until_ms) {
                sleep_ms(poll_ms);
        }
        bool drained = atomic_load(&b->outstanding) == 0;
        ks_log_info(NULL, "broker drained", "{s:b,s:I,s:i,s:I}", "complete", drained, "drain_ms",
                    (json_int_t)(ks_mono_ms() - t0), "clients_unconfirmed", unconfirmed, "held",
                    (json_int_t)atomic_load(&b->outstanding));
        return drained;
}

/* ---- life ------------------------------------------------------------------------------ */

/* One side's socket at every base (a tcp:// one, an ipc:// one, or both): one listener. */
static int listen_side(ks_broker *b, int service_id, ks_broker_side side, uint16_t self,
                       uint16_t peer, const ks_sp_callbacks *cb, void *arg, ks_sp_listener **out)
{
        for (int i = 0; i < b->n_bases; i++) {
                char url[KS_URL_MAX];
                if (ks_broker_url(url, sizeof(url), b->bases[i], service_id, side) != 0) {
                        ks_log_error(NULL, "bad broker url", "{s:s}", "url", b->bases[i]);
                        return -1;
                }
                int rc = i == 0 ? ks_sp_listen(b->sp, url, self, peer, cb, arg, out)
                                : ks_sp_listen_also(*out, url);
                if (rc != KS_OK) {
                        ks_log_error(NULL, "cannot listen", "{s:s,s:s}", "url", url, "error",
                                     ks_code_name(rc));
                        return -1;
                }
        }
        return 0;
}

/* base: one tcp:// base, one ipc:// base, or one of each; else -1. */
static int bases_of(ks_broker *b, const char *base)
{
        b->n_bases = ks_broker_list(base, b->bases, KS_SP_ADDRS_MAX);
        if (b->n_bases < 1 ||
            (b->n_bases == 2 && ks_broker_url_ipc(b->bases[0]) == ks_broker_url_ipc(b->bases[1]))) {
                ks_log_error(NULL, "bad broker url", "{s:s}", "url", base);
                return -1;
        }
        return 0;
}

static int open_service(ks_broker *b, int id)
{
        static const ks_sp_callbacks front = {on_client_added, on_request, on_client_removed};
        static const ks_sp_callbacks back = {on_replica_added, on_reply, on_replica_removed};
        ks_metrics *reg = ks_metrics_default();
        service *s = &b->services[id];
        char labels[128];
        s->b = b;
        s->name = ks_service_name((ks_service_id)id);
        snprintf(labels, sizeof(labels), "device=\"%s\",direction=\"request\"", s->name);
        s->requests = ks_counter_get(reg, "keelson_broker_forwarded_total",
                                     "Messages forwarded, by device and direction.", labels);
        snprintf(labels, sizeof(labels), "device=\"%s\",direction=\"reply\"", s->name);
        s->replies = ks_counter_get(reg, "keelson_broker_forwarded_total",
                                    "Messages forwarded, by device and direction.", labels);
        snprintf(labels, sizeof(labels), "device=\"%s\"", s->name);
        s->dropped = ks_counter_get(reg, "keelson_broker_dropped_total",
                                    "Messages not forwarded: malformed, a peer gone or not "
                                    "reading, no replica connected with the queue full.",
                                    labels);
        s->drains =
            ks_counter_get(reg, "keelson_broker_drains_total",
                           "Replicas that announced their stop: no new call went to them.", labels);
        peers_init(&s->peers, reg, labels);
        s->ejections = ks_counter_get(reg, "keelson_broker_ejections_total",
                                      "Replicas taken out of the rotation: they held calls and "
                                      "answered none for KEELSON_BROKER_EJECT_AFTER_MS.",
                                      labels);
        s->readmissions = ks_counter_get(
            reg, "keelson_broker_readmissions_total",
            "Connections to a back taken as an ejected replica dialling back.", labels);
        s->held = ks_counter_get(reg, "keelson_broker_ejections_held_total",
                                 "Replicas that held calls and answered none, kept in the "
                                 "rotation because no other replica of the service answered.",
                                 labels);
        s->ejected = ks_gauge_get(reg, "keelson_broker_ejected_replicas",
                                  "Ejected replicas that have not dialled back.", labels);
        if (b->opts.eject_after_ms > 0 &&
            ks_outlier_new(&s->outlier, b->opts.eject_after_ms) != KS_OK) {
                return -1;
        }
        if (listen_side(b, id, KS_SIDE_FRONT, KS_SP_REP0, KS_SP_REQ0, &front, s, &s->front) != 0 ||
            listen_side(b, id, KS_SIDE_BACK, KS_SP_REQ0, KS_SP_REP0, &back, s, &s->back) != 0) {
                return -1;
        }
        return 0;
}

static int open_events(ks_broker *b)
{
        static const ks_sp_callbacks in = {on_events_pipe_added, on_event, on_events_pipe_removed};
        static const ks_sp_callbacks out = {on_events_pipe_added, on_subscriber_message,
                                            on_events_pipe_removed};
        ks_metrics *reg = ks_metrics_default();
        events_device *e = &b->events;
        e->forwarded = ks_counter_get(reg, "keelson_broker_forwarded_total",
                                      "Messages forwarded, by device and direction.",
                                      "device=\"events\",direction=\"event\"");
        e->dropped = ks_counter_get(reg, "keelson_broker_dropped_total",
                                    "Messages not forwarded: malformed, a peer gone or not "
                                    "reading, no replica connected with the queue full.",
                                    "device=\"events\"");
        peers_init(&e->peers, reg, "device=\"events\"");
        if (listen_side(b, 0, KS_SIDE_EVENTS_IN, KS_SP_SUB0, KS_SP_PUB0, &in, e, &e->in) != 0 ||
            listen_side(b, 0, KS_SIDE_EVENTS_OUT, KS_SP_PUB0, KS_SP_SUB0, &out, e, &e->out) != 0) {
                return -1;
        }
        return 0;
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
        ks_loop_stop(b->loop);
        if (b->watch != NULL) {
                event_free(b->watch);
        }
        if (b->drain_start != NULL) {
                event_free(b->drain_start);
        }
        if (b->drain_look != NULL) {
                event_free(b->drain_look);
        }
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                if (b->services[i].back == NULL) {
                        continue;
                }
                for (ks_sp_pipe *p = ks_sp_listener_first(b->services[i].back); p != NULL;
                     p = ks_sp_pipe_next(p)) {
                        free(ks_sp_pipe_user(p));
                }
        }
        ks_sp_free(b->sp); /* every pipe and listener, no callback */
        for (int i = 0; i < KS_SVC_COUNT; i++) {
                queue_free(&b->services[i]);
                ks_outlier_free(b->services[i].outlier);
        }
        ks_loop_free(b->loop);
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
        if (ks_loop_new(&b->loop) != KS_OK ||
            ks_sp_new(&b->sp, ks_loop_base(b->loop), RECV_MAX_BYTES, SEND_MAX_BYTES) != KS_OK ||
            (b->drain_start = event_new(ks_loop_base(b->loop), -1, 0, on_drain_start, b)) == NULL ||
            (b->drain_look = event_new(ks_loop_base(b->loop), -1, EV_PERSIST, on_drain_look, b)) ==
                NULL) {
                ks_broker_stop(b);
                return KS_INTERNAL;
        }
        int rv = bases_of(b, base);
        for (int i = 0; i < KS_SVC_COUNT && rv == 0; i++) {
                rv = open_service(b, i);
        }
        if (rv == 0) {
                rv = open_events(b);
        }
        if (rv != 0) {
                ks_broker_stop(b);
                return KS_UNAVAILABLE;
        }
        if (o->eject_after_ms > 0) {
                struct timeval tv = {(time_t)(o->eject_check_ms / 1000),
                                     (suseconds_t)(o->eject_check_ms % 1000) * 1000};
                if ((b->watch = event_new(ks_loop_base(b->loop), -1, EV_PERSIST, watch_step, b)) ==
                        NULL ||
                    event_add(b->watch, &tv) != 0) {
                        ks_broker_stop(b);
                        return KS_INTERNAL;
                }
        }
        if (ks_loop_start(b->loop) != KS_OK) {
                ks_broker_stop(b);
                return KS_INTERNAL;
        }
        *out = b;
        return KS_OK;
}
