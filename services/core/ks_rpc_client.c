/*
 * ks_rpc_client: the calling side of ks_rpc (see ks_rpc.h), for threads.
 *
 * A ks_req (ks_req.h: nng's req protocol through ks_sp, resends and
 * deadlines) on a loop of the client's own (ks_loop). A calling thread
 * packs its envelope, reserves one of max_inflight places, queues the call
 * and wakes the loop, which starts it; the reply completes it on the loop,
 * which runs done. The blocking call is the asynchronous one plus a
 * condition variable, so both share every transport path. A call costs
 * the caller's thread and the loop one hand-off each way (nng's contexts
 * and task queues cost about 16 thread switches a call).
 */
#include "ks_rpc.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_fifo.h"
#include "ks_log.h"
#include "ks_loop.h"
#include "ks_req.h"
#include "ks_topology.h"

#define CLIENT_INFLIGHT_MAX KS_REQ_INFLIGHT_MAX

/* A call from a thread: queued for the loop, then in flight there. */
typedef struct pending {
        ks_req_call call;  /* first: the completion finds the pending from it */
        ks_fifo_link link; /* on the queue for the loop */
        uint8_t *msg;
        size_t len;
        int64_t deadline_unix_ms;
        int resend_ms;
        ks_rpc_done_fn done;
        void *arg;
} pending;

struct ks_rpc_client {
        ks_rpc_client_options opts;
        ks_loop *loop;
        ks_req *req;
        int target;
        struct event *wake;
        atomic_int connected;
        atomic_int places; /* of max_inflight, not taken */
        pthread_mutex_t mu;
        ks_fifo queued; /* for the loop, under mu */
};

void ks_rpc_result_clear(ks_rpc_result *r)
{
        free(r->payload);
        r->payload = NULL;
        r->payload_len = 0;
}

/* On the loop: a call ended (replied, failed, or the client is freed). */
static void on_complete(ks_req_call *call, void *arg)
{
        ks_rpc_client *c = arg;
        pending *p = (pending *)call;
        p->done(p->arg, &call->result);
        ks_rpc_result_clear(&call->result);
        free(p);
        atomic_fetch_add(&c->places, 1);
}

static void fail(ks_rpc_client *c, pending *p, int code, const char *message)
{
        memset(&p->call.result, 0, sizeof(p->call.result));
        p->call.result.code = code;
        snprintf(p->call.result.message, sizeof(p->call.result.message), "%s", message);
        on_complete(&p->call, c);
}

/* What the threads queued for the loop, taken off the queue. */
static ks_fifo take_queued(ks_rpc_client *c)
{
        pthread_mutex_lock(&c->mu);
        ks_fifo q = ks_fifo_take(&c->queued);
        pthread_mutex_unlock(&c->mu);
        return q;
}

static pending *pending_pop(ks_fifo *q)
{
        ks_fifo_link *l = ks_fifo_pop(q);
        return l != NULL ? KS_FIFO_ITEM(l, pending, link) : NULL;
}

/* On the loop: starts what the threads queued. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_rpc_client *c = arg;
        ks_fifo q = take_queued(c);
        for (pending *p; (p = pending_pop(&q)) != NULL;) {
                uint8_t *msg = p->msg;
                p->msg = NULL;
                int code = ks_req_start_packed(c->req, c->target, msg, p->len, p->deadline_unix_ms,
                                               p->resend_ms, &p->call);
                if (code != KS_OK) {
                        fail(c, p, code,
                             code == KS_DEADLINE_EXCEEDED ? "deadline exceeded"
                             : code == KS_UNAVAILABLE     ? "no broker connected"
                                                          : "call could not be started");
                }
        }
}

static void on_connected(void *arg, int target, int connected)
{
        (void)target;
        atomic_store(&((ks_rpc_client *)arg)->connected, connected);
}

int ks_rpc_client_new(ks_rpc_client **out, const ks_rpc_client_options *opts)
{
        *out = NULL;
        if (opts->n_dial_urls < 1 || opts->n_dial_urls > KS_BROKERS_MAX || opts->max_inflight < 1 ||
            opts->max_inflight > CLIENT_INFLIGHT_MAX || opts->default_timeout_ms < 1) {
                return KS_INVALID_ARGUMENT;
        }
        ks_rpc_client *c = calloc(1, sizeof(*c));
        if (c == NULL) {
                return KS_INTERNAL;
        }
        c->opts = *opts;
        atomic_store(&c->places, opts->max_inflight);
        pthread_mutex_init(&c->mu, NULL);
        int rv = ks_loop_new(&c->loop);
        if (rv == KS_OK) {
                rv = ks_req_new(&c->req, ks_loop_base(c->loop), opts->max_inflight,
                                opts->default_timeout_ms, on_complete, c);
        }
        if (rv == KS_OK) {
                ks_req_watch(c->req, on_connected, c);
                c->wake = event_new(ks_loop_base(c->loop), -1, 0, on_wake, c);
                rv = c->wake != NULL ? KS_OK : KS_INTERNAL;
        }
        if (rv == KS_OK) {
                rv = ks_req_target(c->req, opts->dial_urls, opts->n_dial_urls, &c->target);
        }
        if (rv == KS_OK) {
                rv = ks_loop_start(c->loop);
        }
        if (rv != KS_OK) {
                ks_rpc_client_free(c);
                return rv;
        }
        *out = c;
        return KS_OK;
}

int ks_rpc_client_of(ks_rpc_client **out, const char *const *broker_bases, int n, int service,
                     int max_inflight, int default_timeout_ms)
{
        char urls[KS_BROKERS_MAX][KS_URL_MAX];
        const char *dial[KS_BROKERS_MAX];

        *out = NULL;
        if (n < 1 || n > KS_BROKERS_MAX || service < 0 || service >= KS_SVC_COUNT) {
                return KS_INVALID_ARGUMENT;
        }
        for (int i = 0; i < n; i++) {
                if (ks_broker_url(urls[i], KS_URL_MAX, broker_bases[i], service, KS_SIDE_FRONT) !=
                    0) {
                        return KS_INVALID_ARGUMENT;
                }
                dial[i] = urls[i];
        }
        ks_rpc_client_options opts = {.dial_urls = dial,
                                      .n_dial_urls = n,
                                      .max_inflight = max_inflight,
                                      .default_timeout_ms = default_timeout_ms};
        return ks_rpc_client_new(out, &opts);
}

void ks_rpc_client_free(ks_rpc_client *c)
{
        if (c == NULL) {
                return;
        }
        ks_loop_stop(c->loop);
        /* Nothing runs on the loop now: what is queued or in flight ends unavailable here. */
        ks_fifo q = take_queued(c);
        for (pending *p; (p = pending_pop(&q)) != NULL;) {
                free(p->msg);
                fail(c, p, KS_UNAVAILABLE, "the client is closing");
        }
        ks_req_free(c->req, "the client is closing");
        if (c->wake != NULL) {
                event_free(c->wake);
        }
        ks_loop_free(c->loop);
        pthread_mutex_destroy(&c->mu);
        free(c);
}

int ks_rpc_client_connected(const ks_rpc_client *c)
{
        return atomic_load(&c->connected);
}

void ks_rpc_reply_read(const uint8_t *p, size_t len, ks_rpc_result *res)
{
        memset(res, 0, sizeof(*res));
        Keelson__Rpc__V1__Reply *rep = keelson__rpc__v1__reply__unpack(NULL, len, p);
        if (rep == NULL || rep->code >= KS_CODE_COUNT) {
                if (rep != NULL) {
                        keelson__rpc__v1__reply__free_unpacked(rep, NULL);
                }
                res->code = KS_INTERNAL;
                snprintf(res->message, sizeof(res->message), "malformed reply from service");
                return;
        }
        res->code = (int)rep->code;
        res->replayed = rep->replayed;
        snprintf(res->message, sizeof(res->message), "%s", rep->message);
        if (rep->payload.len > 0) {
                if ((res->payload = malloc(rep->payload.len)) == NULL) {
                        res->code = KS_INTERNAL;
                        res->replayed = false;
                        snprintf(res->message, sizeof(res->message), "out of memory");
                } else {
                        memcpy(res->payload, rep->payload.data, rep->payload.len);
                        res->payload_len = rep->payload.len;
                }
        }
        keelson__rpc__v1__reply__free_unpacked(rep, NULL);
}

void ks_rpc_request_of(const ks_rpc_call_args *a, int64_t deadline_unix_ms,
                       Keelson__Rpc__V1__Request *req)
{
        keelson__rpc__v1__request__init(req);
        req->method = (char *)a->method;
        req->request_id = (char *)(a->request_id != NULL ? a->request_id : "");
        req->deadline_unix_ms = deadline_unix_ms;
        req->caller = (ks_caller *)a->caller;
        req->idempotency_key = (char *)(a->idempotency_key != NULL ? a->idempotency_key : "");
        req->payload.data = (uint8_t *)a->payload;
        req->payload.len = a->payload_len;
}

int ks_rpc_call_async(ks_rpc_client *c, const ks_rpc_call_args *args, ks_rpc_done_fn done,
                      void *arg)
{
        if (args->payload_len > KS_RPC_PAYLOAD_MAX) {
                return KS_RESOURCE_EXHAUSTED;
        }
        int64_t now = ks_now_ms();
        int64_t deadline =
            args->deadline_unix_ms != 0 ? args->deadline_unix_ms : now + c->opts.default_timeout_ms;
        if (deadline <= now) {
                return KS_DEADLINE_EXCEEDED;
        }
        /* No broker at all: say so now rather than at the deadline. */
        if (atomic_load(&c->connected) == 0) {
                return KS_UNAVAILABLE;
        }
        if (atomic_fetch_sub(&c->places, 1) <= 0) {
                atomic_fetch_add(&c->places, 1);
                return KS_RESOURCE_EXHAUSTED;
        }
        pending *p = calloc(1, sizeof(*p));
        Keelson__Rpc__V1__Request req;
        ks_rpc_request_of(args, deadline, &req);
        size_t len = keelson__rpc__v1__request__get_packed_size(&req);
        if (p == NULL || (p->msg = malloc(len > 0 ? len : 1)) == NULL) {
                free(p);
                atomic_fetch_add(&c->places, 1);
                return KS_INTERNAL;
        }
        keelson__rpc__v1__request__pack(&req, p->msg);
        p->len = len;
        p->deadline_unix_ms = deadline;
        p->resend_ms = args->resend_ms > 0 ? args->resend_ms : 0;
        p->done = done;
        p->arg = arg;
        pthread_mutex_lock(&c->mu);
        bool first = c->queued.n == 0;
        ks_fifo_push(&c->queued, &p->link);
        pthread_mutex_unlock(&c->mu);
        if (first) {
                event_active(c->wake, EV_TIMEOUT, 0);
        }
        return KS_OK;
}

typedef struct waiter {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool done;
        ks_rpc_result *res;
} waiter;

static void wake(void *arg, ks_rpc_result *res)
{
        waiter *w = arg;
        pthread_mutex_lock(&w->mu);
        *w->res = *res;
        res->payload = NULL; /* the waiter owns it now */
        w->done = true;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
}

int ks_rpc_call(ks_rpc_client *c, const ks_rpc_call_args *args, ks_rpc_result *res)
{
        memset(res, 0, sizeof(*res));
        waiter w = {.done = false, .res = res};
        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.cv, NULL);
        int code = ks_rpc_call_async(c, args, wake, &w);
        if (code == KS_OK) {
                pthread_mutex_lock(&w.mu);
                while (!w.done) {
                        pthread_cond_wait(&w.cv, &w.mu);
                }
                pthread_mutex_unlock(&w.mu);
        } else {
                res->code = code;
                snprintf(res->message, sizeof(res->message), "%s",
                         code == KS_RESOURCE_EXHAUSTED
                             ? "too many calls in flight or payload too large"
                         : code == KS_DEADLINE_EXCEEDED ? "deadline exceeded"
                         : code == KS_UNAVAILABLE       ? "no broker connected"
                                                        : "call could not be started");
        }
        pthread_cond_destroy(&w.cv);
        pthread_mutex_destroy(&w.mu);
        return res->code;
}
