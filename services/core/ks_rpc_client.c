/*
 * ks_rpc_client: the calling side of ks_rpc (see ks_rpc.h).
 *
 * A call borrows a slot (an nng context and its aio) from a free list that
 * grows up to max_inflight, runs SEND -> RECV on nng's threads, and gives the
 * slot back when done. The blocking call is the asynchronous one plus a
 * condition variable, so both share every transport path.
 *
 * Resending is ours, not nng's: a call with resend_ms keeps a copy of its
 * request, waits for the reply at most resend_ms at a time, and sends the
 * copy again on the same context (which drops the earlier request id) until
 * its deadline. nng 1.5's own resend tick could leave the socket unable to
 * close (a pipe reaper waiting forever), so the socket's resend is disabled.
 */
#include "ks_rpc.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"
#include "ks_topology.h"

#define CLIENT_INFLIGHT_MAX   65536
#define CLIENT_RECV_MAX_BYTES ((size_t)KS_RPC_PAYLOAD_MAX + 65536)

typedef enum call_state { CALL_SEND, CALL_RECV } call_state;

typedef struct call_slot {
        ks_rpc_client *client;
        nng_ctx ctx;
        nng_aio *aio;
        call_state state;
        ks_deadline deadline; /* the call's, on the monotonic clock */
        int resend_ms;        /* 0: never */
        nng_msg *resend;      /* a copy of the request while resend_ms > 0 */
        ks_rpc_done_fn done;
        void *arg;
        struct call_slot *next_free;
        struct call_slot *next_all;
} call_slot;

struct ks_rpc_client {
        ks_rpc_client_options opts;
        nng_socket sock;
        atomic_int connected;
        pthread_mutex_t mu;
        call_slot *free_list;
        call_slot *all; /* every slot ever made, for teardown */
        int n_slots;
};

void ks_rpc_result_clear(ks_rpc_result *r)
{
        free(r->payload);
        r->payload = NULL;
        r->payload_len = 0;
}

static void call_cb(void *arg);

static void client_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
        (void)p;
        ks_rpc_client *c = arg;
        if (ev == NNG_PIPE_EV_ADD_POST) {
                atomic_fetch_add(&c->connected, 1);
        } else if (ev == NNG_PIPE_EV_REM_POST) {
                atomic_fetch_sub(&c->connected, 1);
        }
}

int ks_rpc_client_new(ks_rpc_client **out, const ks_rpc_client_options *opts)
{
        *out = NULL;
        if (opts->n_dial_urls < 1 || opts->max_inflight < 1 ||
            opts->max_inflight > CLIENT_INFLIGHT_MAX || opts->default_timeout_ms < 1) {
                return KS_INVALID_ARGUMENT;
        }
        ks_rpc_client *c = calloc(1, sizeof(*c));
        if (c == NULL) {
                return KS_INTERNAL;
        }
        c->opts = *opts;
        pthread_mutex_init(&c->mu, NULL);
        int rv;
        if ((rv = nng_req0_open(&c->sock)) != 0) {
                pthread_mutex_destroy(&c->mu);
                free(c);
                return KS_INTERNAL;
        }
        /* nng never resends by itself: only idempotent calls are resent, by us (above). */
        nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
        nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, CLIENT_RECV_MAX_BYTES);
        ks_broker_dialer(c->sock, client_pipe_event, c);
        for (int i = 0; i < opts->n_dial_urls; i++) {
                if ((rv = nng_dial(c->sock, opts->dial_urls[i], NULL, NNG_FLAG_NONBLOCK)) != 0) {
                        ks_log_error(NULL, "cannot dial broker", "{s:s,s:s}", "url",
                                     opts->dial_urls[i], "error", nng_strerror(rv));
                        ks_rpc_client_free(c);
                        return KS_INVALID_ARGUMENT;
                }
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
        if (!ks_broker_close(c->sock, KS_BROKER_CLOSE_MS)) {
                /* nng may still use the slots and call back with c: left to the exit */
                ks_log_warn(NULL, "rpc client's socket did not close in time", "{s:i}", "waited_ms",
                            KS_BROKER_CLOSE_MS);
                return;
        }
        for (call_slot *s = c->all; s != NULL; s = s->next_all) {
                nng_aio_stop(s->aio);
        }
        call_slot *s = c->all;
        while (s != NULL) {
                call_slot *next = s->next_all;
                nng_aio_free(s->aio);
                nng_msg_free(s->resend);
                free(s);
                s = next;
        }
        pthread_mutex_destroy(&c->mu);
        free(c);
}

int ks_rpc_client_connected(const ks_rpc_client *c)
{
        return atomic_load(&c->connected);
}

static call_slot *slot_take(ks_rpc_client *c)
{
        pthread_mutex_lock(&c->mu);
        call_slot *s = c->free_list;
        if (s != NULL) {
                c->free_list = s->next_free;
                pthread_mutex_unlock(&c->mu);
                return s;
        }
        if (c->n_slots >= c->opts.max_inflight) {
                pthread_mutex_unlock(&c->mu);
                return NULL;
        }
        s = calloc(1, sizeof(*s));
        if (s == NULL || nng_ctx_open(&s->ctx, c->sock) != 0 ||
            nng_aio_alloc(&s->aio, call_cb, s) != 0) {
                free(s);
                pthread_mutex_unlock(&c->mu);
                return NULL;
        }
        s->client = c;
        s->next_all = c->all;
        c->all = s;
        c->n_slots++;
        pthread_mutex_unlock(&c->mu);
        return s;
}

static void slot_give(call_slot *s)
{
        ks_rpc_client *c = s->client;
        s->done = NULL;
        s->arg = NULL;
        nng_msg_free(s->resend);
        s->resend = NULL;
        pthread_mutex_lock(&c->mu);
        s->next_free = c->free_list;
        c->free_list = s;
        pthread_mutex_unlock(&c->mu);
}

/* Ends a call: runs done with the result, then recycles the slot. */
static void finish(call_slot *s, ks_rpc_result *res)
{
        ks_rpc_done_fn done = s->done;
        void *arg = s->arg;
        slot_give(s);
        done(arg, res);
        ks_rpc_result_clear(res);
}

static void finish_error(call_slot *s, int code, const char *message)
{
        ks_rpc_result res;
        memset(&res, 0, sizeof(res));
        res.code = code;
        snprintf(res.message, sizeof(res.message), "%s", message);
        finish(s, &res);
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

static void finish_reply(call_slot *s, nng_msg *msg)
{
        ks_rpc_result res;
        ks_rpc_reply_read(nng_msg_body(msg), nng_msg_len(msg), &res);
        nng_msg_free(msg);
        finish(s, &res);
}

/* Waits for the reply until the deadline, or for one resend period. */
static void recv_reply(call_slot *s)
{
        int64_t left = ks_deadline_remaining_ms(s->deadline);
        if (left < 1) {
                left = 1;
        }
        if (s->resend != NULL && s->resend_ms < left) {
                left = s->resend_ms;
        }
        s->state = CALL_RECV;
        nng_aio_set_timeout(s->aio, (nng_duration)left);
        nng_ctx_recv(s->ctx, s->aio);
}

static void call_cb(void *arg)
{
        call_slot *s = arg;
        int rv = nng_aio_result(s->aio);
        if (s->state == CALL_SEND) {
                if (rv != 0) {
                        nng_msg_free(nng_aio_get_msg(s->aio));
                        if (rv == NNG_ETIMEDOUT && atomic_load(&s->client->connected) == 0) {
                                finish_error(s, KS_UNAVAILABLE, "no broker connected");
                        } else if (rv == NNG_ETIMEDOUT) {
                                finish_error(s, KS_DEADLINE_EXCEEDED, "deadline exceeded");
                        } else {
                                finish_error(s, KS_UNAVAILABLE, nng_strerror(rv));
                        }
                        return;
                }
                recv_reply(s);
                return;
        }
        int64_t left = ks_deadline_remaining_ms(s->deadline);
        if (rv == NNG_ETIMEDOUT && s->resend != NULL && left > 0) {
                nng_msg *again = NULL;
                if (nng_msg_dup(&again, s->resend) != 0) {
                        finish_error(s, KS_INTERNAL, "out of memory");
                        return;
                }
                s->state = CALL_SEND;
                nng_aio_set_msg(s->aio, again);
                nng_aio_set_timeout(s->aio, (nng_duration)left);
                nng_ctx_send(s->ctx, s->aio);
                return;
        }
        if (rv == NNG_ETIMEDOUT) {
                finish_error(s, KS_DEADLINE_EXCEEDED, "deadline exceeded");
        } else if (rv != 0) {
                finish_error(s, KS_UNAVAILABLE, nng_strerror(rv));
        } else {
                finish_reply(s, nng_aio_get_msg(s->aio));
        }
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

static int pack_request(const ks_rpc_call_args *a, int64_t deadline_ms, nng_msg **out)
{
        Keelson__Rpc__V1__Request req;
        ks_rpc_request_of(a, deadline_ms, &req);
        size_t size = keelson__rpc__v1__request__get_packed_size(&req);
        if (nng_msg_alloc(out, size) != 0) {
                return KS_INTERNAL;
        }
        keelson__rpc__v1__request__pack(&req, nng_msg_body(*out));
        return KS_OK;
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
        nng_msg *msg = NULL;
        int code = pack_request(args, deadline, &msg);
        if (code != KS_OK) {
                return code;
        }
        call_slot *s = slot_take(c);
        if (s == NULL) {
                nng_msg_free(msg);
                return KS_RESOURCE_EXHAUSTED;
        }
        s->done = done;
        s->arg = arg;
        s->deadline = ks_deadline_after_ms(deadline - now);
        s->state = CALL_SEND;
        s->resend_ms = args->resend_ms > 0 ? args->resend_ms : 0;
        if (s->resend_ms > 0 && nng_msg_dup(&s->resend, msg) != 0) {
                nng_msg_free(msg);
                slot_give(s);
                return KS_INTERNAL;
        }
        nng_aio_set_msg(s->aio, msg);
        nng_aio_set_timeout(s->aio, (nng_duration)(deadline - now));
        nng_ctx_send(s->ctx, s->aio);
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
