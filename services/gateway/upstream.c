/*
 * Upstream: the gateway's calls to the services, on its own libevent loop.
 *
 * The gateway speaks nng's req protocol itself (ks_sp.h): one dialer per
 * service and broker, to the service's front, each keeping one pipe. A
 * call takes a slot, its request id (high bit set, then the slot's
 * generation and index) goes in front of the packed envelope, and the
 * message goes to a connected broker, round robin. The reply comes back on
 * the loop with that id in front: the slot is found, the call completed
 * there and then. No thread is involved, so a call costs the loop one
 * write and one read (ks_rpc_client, on nng's threads, cost the gateway
 * about 14 thread switches a call).
 *
 * What nng's req sockets did and callers rely on is kept:
 *   - a call sent on a broker connection that is lost is sent again on
 *     another at once (or when one connects, before its deadline): nng's
 *     req0 resends on a pipe's close, writes included, and every keelson
 *     write is safe to receive twice;
 *   - an idempotent call (resend_ms > 0) unanswered for resend_ms is sent
 *     again, under a new request id (a late reply to the earlier one is
 *     dropped), until its deadline;
 *   - no broker connected at the start: UNAVAILABLE at once; the deadline
 *     passed: DEADLINE_EXCEEDED; every slot taken: RESOURCE_EXHAUSTED.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ks_log.h"
#include "ks_sp.h"
#include "ks_topology.h"
#include "routes.h"
#include "upstream.h"

#define ID_BIT         0x80000000u
#define SLOT_BITS      16
#define SLOT_MASK      ((1u << SLOT_BITS) - 1)
#define GEN_MASK       0x7fffu
#define RECV_MAX_BYTES ((size_t)KS_RPC_PAYLOAD_MAX + 65536)
#define SEND_MAX_BYTES ((size_t)16 << 20)
#define NO_SLOT        UINT32_MAX

typedef struct slot slot;

typedef struct upstream_service {
        gw_upstream *u;
        int id;
        bool wanted;
        ks_sp_dialer *dialers[KS_BROKERS_MAX];
        int n_dialers;
        int next; /* round robin over the dialers */
} upstream_service;

struct slot {
        gw_upstream *u;
        gw_call *call; /* NULL: free */
        uint32_t id;   /* on the wire; 0 when free */
        uint16_t gen;
        int service;
        ks_sp_pipe *pipe; /* sent on; NULL: waiting for a broker */
        uint8_t *msg;     /* the packed envelope, kept for sending again */
        size_t len;
        ks_deadline deadline;
        int resend_ms;
        struct event *timer;
        uint32_t next_free;
};

struct gw_upstream {
        struct event_base *base;
        ks_sp *sp;
        upstream_service services[KS_SVC_COUNT];
        slot *slots;
        uint32_t n_slots;
        uint32_t free_head;
        int64_t default_timeout_ms;
        gw_complete_fn complete;
        void *complete_arg;
};

/* ---- calls ------------------------------------------------------------------------- */

static uint32_t index_of(const gw_upstream *u, const slot *s)
{
        return (uint32_t)(s - u->slots);
}

/* Ends a call: the slot is free again, then complete runs with the result. */
static void finish(slot *s, ks_rpc_result *res)
{
        gw_upstream *u = s->u;
        gw_call *call = s->call;
        evtimer_del(s->timer);
        free(s->msg);
        s->msg = NULL;
        s->call = NULL;
        s->id = 0;
        s->pipe = NULL;
        s->next_free = u->free_head;
        u->free_head = index_of(u, s);
        call->result = *res;
        u->complete(call, u->complete_arg);
}

static void finish_error(slot *s, int code, const char *message)
{
        ks_rpc_result res;
        memset(&res, 0, sizeof(res));
        res.code = code;
        snprintf(res.message, sizeof(res.message), "%s", message);
        finish(s, &res);
}

/* The next connected broker of a service, round robin; NULL when none. */
static ks_sp_pipe *choose(upstream_service *v)
{
        for (int i = 0; i < v->n_dialers; i++) {
                int k = (v->next + i) % v->n_dialers;
                ks_sp_pipe *p = ks_sp_dialer_pipe(v->dialers[k]);
                if (p != NULL && ks_sp_pending(p) <= SEND_MAX_BYTES) {
                        v->next = (k + 1) % v->n_dialers;
                        return p;
                }
        }
        return NULL;
}

/* Arms the slot's timer: the deadline, or the next resend if sooner. */
static void arm(slot *s)
{
        int64_t left = ks_deadline_remaining_ms(s->deadline);
        if (left < 1) {
                left = 1;
        }
        if (s->resend_ms > 0 && s->resend_ms < left) {
                left = s->resend_ms;
        }
        struct timeval tv = {(time_t)(left / 1000), (suseconds_t)(left % 1000) * 1000};
        evtimer_add(s->timer, &tv);
}

/* Sends (again) under a fresh request id: a reply to an earlier one finds nothing. */
static void send_now(slot *s)
{
        gw_upstream *u = s->u;
        s->gen = (uint16_t)((s->gen + 1) & GEN_MASK);
        s->id = ID_BIT | (uint32_t)s->gen << SLOT_BITS | index_of(u, s);
        s->pipe = choose(&u->services[s->service]);
        if (s->pipe != NULL) {
                uint8_t head[4] = {(uint8_t)(s->id >> 24), (uint8_t)(s->id >> 16),
                                   (uint8_t)(s->id >> 8), (uint8_t)s->id};
                if (ks_sp_send(s->pipe, head, sizeof(head), s->msg, s->len) != 0) {
                        s->pipe = NULL; /* waits for the timer, or a broker */
                }
        }
        arm(s);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        slot *s = arg;
        if (ks_deadline_remaining_ms(s->deadline) <= 0) {
                finish_error(s, KS_DEADLINE_EXCEEDED, "deadline exceeded");
                return;
        }
        if (s->resend_ms > 0 || s->pipe == NULL) {
                send_now(s);
                return;
        }
        arm(s); /* woken early: wait on */
}

int gw_upstream_call(gw_upstream *u, int service, const ks_rpc_call_args *args, gw_call *call)
{
        if (service < 0 || service >= KS_SVC_COUNT || !u->services[service].wanted) {
                return KS_UNIMPLEMENTED;
        }
        if (args->payload_len > KS_RPC_PAYLOAD_MAX) {
                return KS_RESOURCE_EXHAUSTED;
        }
        int64_t now = ks_now_ms();
        int64_t deadline =
            args->deadline_unix_ms != 0 ? args->deadline_unix_ms : now + u->default_timeout_ms;
        if (deadline <= now) {
                return KS_DEADLINE_EXCEEDED;
        }
        if (gw_upstream_connected(u, service) == 0) {
                return KS_UNAVAILABLE;
        }
        if (u->free_head == NO_SLOT) {
                return KS_RESOURCE_EXHAUSTED;
        }
        Keelson__Rpc__V1__Request req;
        ks_rpc_request_of(args, deadline, &req);
        size_t len = keelson__rpc__v1__request__get_packed_size(&req);
        uint8_t *msg = malloc(len > 0 ? len : 1);
        if (msg == NULL) {
                return KS_INTERNAL;
        }
        keelson__rpc__v1__request__pack(&req, msg);
        slot *s = &u->slots[u->free_head];
        u->free_head = s->next_free;
        memset(&call->result, 0, sizeof(call->result));
        s->call = call;
        s->service = service;
        s->msg = msg;
        s->len = len;
        s->deadline = ks_deadline_after_ms(deadline - now);
        s->resend_ms = args->resend_ms > 0 ? args->resend_ms : 0;
        send_now(s);
        return KS_OK;
}

/* ---- the brokers ----------------------------------------------------------------------- */

/* A reply: [request id][envelope]; one no call waits for (ended, or sent again) is dropped. */
static void on_reply(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg)
{
        (void)p;
        upstream_service *v = arg;
        gw_upstream *u = v->u;
        if (len < 4) {
                return;
        }
        uint32_t id =
            (uint32_t)msg[0] << 24 | (uint32_t)msg[1] << 16 | (uint32_t)msg[2] << 8 | msg[3];
        uint32_t i = id & SLOT_MASK;
        if ((id & ID_BIT) == 0 || i >= u->n_slots || u->slots[i].id != id ||
            u->slots[i].call == NULL) {
                return;
        }
        ks_rpc_result res;
        ks_rpc_reply_read(msg + 4, len - 4, &res);
        finish(&u->slots[i], &res);
}

/* A broker came: the calls of this service that wait for one go now. */
static void on_broker_added(ks_sp_pipe *p, void *arg)
{
        (void)p;
        upstream_service *v = arg;
        gw_upstream *u = v->u;
        for (uint32_t i = 0; i < u->n_slots; i++) {
                slot *s = &u->slots[i];
                if (s->call != NULL && s->service == v->id && s->pipe == NULL) {
                        send_now(s);
                }
        }
}

/* A broker went: what was sent on it is sent again on another (nng's req0 does so). */
static void on_broker_removed(ks_sp_pipe *p, void *arg)
{
        upstream_service *v = arg;
        gw_upstream *u = v->u;
        for (uint32_t i = 0; i < u->n_slots; i++) {
                slot *s = &u->slots[i];
                if (s->call != NULL && s->pipe == p) {
                        s->pipe = NULL;
                        if (gw_upstream_connected(u, v->id) > 0) {
                                send_now(s);
                        }
                }
        }
}

int gw_upstream_connected(const gw_upstream *u, int service)
{
        if (service < 0 || service >= KS_SVC_COUNT) {
                return 0;
        }
        const upstream_service *v = &u->services[service];
        int n = 0;
        for (int i = 0; i < v->n_dialers; i++) {
                n += ks_sp_dialer_pipe(v->dialers[i]) != NULL;
        }
        return n;
}

static int dial_service(gw_upstream *u, upstream_service *v, const gw_config *cfg)
{
        static const ks_sp_callbacks cb = {on_broker_added, on_reply, on_broker_removed};
        char brokers[KS_BROKERS_MAX][KS_URL_MAX];
        int n = ks_broker_list(cfg->broker_url, brokers, KS_BROKERS_MAX);
        if (n < 1) {
                ks_log_error(NULL, "KEELSON_BROKER_URL: expected tcp://host:port[,...]", NULL);
                return -1;
        }
        for (int i = 0; i < n; i++) {
                char url[KS_URL_MAX];
                if (ks_broker_url(url, sizeof(url), brokers[i], v->id, KS_SIDE_FRONT) != 0 ||
                    ks_sp_dial(u->sp, url, KS_SP_REQ0, KS_SP_REP0, &cb, v,
                               &v->dialers[v->n_dialers]) != KS_OK) {
                        ks_log_error(NULL, "cannot dial broker", "{s:s,s:s}", "broker", brokers[i],
                                     "service", ks_service_name((ks_service_id)v->id));
                        return -1;
                }
                v->n_dialers++;
        }
        return 0;
}

/* ---- life ------------------------------------------------------------------------------ */

int gw_upstream_new(gw_upstream **out, struct event_base *base, const gw_config *cfg,
                    const gw_routes *routes, gw_complete_fn complete, void *arg)
{
        *out = NULL;
        gw_upstream *u = calloc(1, sizeof(*u));
        if (u == NULL) {
                return -1;
        }
        u->base = base;
        u->complete = complete;
        u->complete_arg = arg;
        u->default_timeout_ms = cfg->timeout_ms;
        u->n_slots = (uint32_t)cfg->max_inflight;
        u->free_head = NO_SLOT;
        if ((u->slots = calloc(u->n_slots, sizeof(*u->slots))) == NULL ||
            ks_sp_new(&u->sp, base, RECV_MAX_BYTES, SEND_MAX_BYTES) != KS_OK) {
                gw_upstream_free(u);
                return -1;
        }
        for (uint32_t i = u->n_slots; i-- > 0;) {
                slot *s = &u->slots[i];
                s->u = u;
                if ((s->timer = evtimer_new(base, on_timer, s)) == NULL) {
                        gw_upstream_free(u);
                        return -1;
                }
                s->next_free = u->free_head;
                u->free_head = i;
        }
        for (int s = 0; s < KS_SVC_COUNT; s++) {
                u->services[s].u = u;
                u->services[s].id = s;
        }
        u->services[gw_routes_resolver(routes)->service].wanted =
            true; /* the caller's resolution */
        for (size_t i = 0; i < gw_routes_count(routes); i++) {
                u->services[gw_routes_at(routes, i)->service].wanted = true;
        }
        for (int s = 0; s < KS_SVC_COUNT; s++) {
                if (u->services[s].wanted && dial_service(u, &u->services[s], cfg) != 0) {
                        gw_upstream_free(u);
                        return -1;
                }
        }
        *out = u;
        return 0;
}

void gw_upstream_free(gw_upstream *u)
{
        if (u == NULL) {
                return;
        }
        for (uint32_t i = 0; u->slots != NULL && i < u->n_slots; i++) {
                if (u->slots[i].call != NULL) {
                        finish_error(&u->slots[i], KS_UNAVAILABLE, "the gateway is stopping");
                }
        }
        ks_sp_free(u->sp); /* every broker connection, no callback */
        for (uint32_t i = 0; u->slots != NULL && i < u->n_slots; i++) {
                if (u->slots[i].timer != NULL) {
                        event_free(u->slots[i].timer);
                }
        }
        free(u->slots);
        free(u);
}
