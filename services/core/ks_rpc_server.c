/*
 * ks_rpc_server: the service side of ks_rpc (see ks_rpc.h for the model).
 *
 * Each of max_inflight slots owns one nng context and one aio and moves
 * through RECV -> (queued) -> worker -> SEND -> RECV. The aio callback never
 * blocks: it decodes the envelope, rejects what can be rejected at once and
 * queues the rest. Workers are plain threads, so handlers may block on
 * PostgreSQL without starving nng's own task threads.
 *
 * Redialling. nng's dialer dials again when its connection closes, but the
 * nng of Debian 12 (1.5.2) sometimes never does after a broker closed it
 * (as a broker does to a replica it ejects, ks_broker.h): the replica then
 * stays out of every rotation while it runs, its dialer still counting the
 * closed pipe as its own. So the server counts each dialer's pipes itself,
 * from the pipe events, and a ticker looks at the counts every
 * REDIAL_CHECK_MS: after REDIAL_AFTER_CHECKS looks with none, the dialer
 * is replaced with a new one. nng's own reconnect
 * interval is at most 1 s (open_socket), so a dialer that still works has
 * tried twice by then.
 */
#include "ks_rpc.h"
#include "ks_perms.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ks_log.h"
#include "ks_topology.h"
#include "ks_metrics.h"
#include "ks_ticker.h"
#include "ks_topology.h"

#define RPC_WORKERS_MAX     1024
#define RPC_INFLIGHT_MAX    65536
#define RPC_RECV_MAX_BYTES  ((size_t)KS_RPC_PAYLOAD_MAX + 65536)
#define REDIAL_CHECK_MS     1000
#define REDIAL_AFTER_CHECKS 3
#define LIVE_PIPES_MAX      (4 * KS_BROKERS_MAX) /* one per broker, and some closing */
/*
 * Stopping drains first: the calls queued or running finish and their
 * replies go out, for at most DRAIN_MS (under KS_SHUTDOWN_DEADLINE_MS, 15 s,
 * which also covers the service's own stop hook), looking every
 * DRAIN_POLL_MS.
 */
#define DRAIN_MS      10000
#define DRAIN_POLL_MS 2
#define DRAIN_MESSAGE "replica stopping, retry"

typedef enum slot_state { SLOT_RECV, SLOT_SEND } slot_state;

typedef struct slot {
        ks_rpc_server *srv;
        nng_ctx ctx;
        nng_aio *aio;
        slot_state state;
        Keelson__Rpc__V1__Request *req; /* owned while queued / in a worker */
        const ks_method *method;
        int64_t received_mono_ms; /* for the call's duration */
        ks_deadline deadline;     /* the caller's, moved onto the monotonic clock on receipt */
        struct slot *next;        /* work queue link */
} slot;

/* A connected pipe and the dialer (index) it came from. */
typedef struct live_pipe {
        int pipe;
        int dialer;
} live_pipe;

typedef struct method_metrics {
        _Atomic(ks_counter *) by_code[KS_CODE_COUNT];
        ks_histogram *duration;
} method_metrics;

struct ks_rpc_server {
        ks_rpc_server_options opts;
        nng_socket sock;
        /* Redialling: one dialer per dial URL, its pipes counted from the pipe
         * events (nng's own count is what goes wrong); under pipes_mu. */
        pthread_mutex_t pipes_mu;
        nng_dialer dialers[KS_BROKERS_MAX];
        int pipes_of[KS_BROKERS_MAX];
        live_pipe live[LIVE_PIPES_MAX];
        int n_live;
        /* the ticker's own */
        int idle_checks[KS_BROKERS_MAX];    /* looks in a row without a pipe */
        bool redial_logged[KS_BROKERS_MAX]; /* once per outage */
        ks_ticker *redial;
        atomic_int connected;
        atomic_int heavy;            /* KS_M_HEAVY calls queued or running */
        atomic_bool draining;        /* stop began: new arrivals are answered unavailable */
        atomic_bool stopping;        /* drained: workers leave */
        atomic_bool closing;         /* the socket closes: receives are not re-armed */
        atomic_int sending;          /* replies handed to nng and not yet completed */
        atomic_int refused_draining; /* answered unavailable while draining */
        atomic_int dropped_closing;  /* arrived as the socket closed: never answered */
        slot *slots;
        int n_slots;
        pthread_t *threads;
        int n_threads;
        /* the bounded work queue */
        pthread_mutex_t mu;
        pthread_cond_t cv;
        slot *head, *tail;
        int queued;
        int running;        /* calls a worker took and has not answered yet */
        method_metrics *mm; /* one per method */
        ks_counter *rejected_full;
        ks_counter *rejected_deadline;
        ks_gauge *queue_depth;
};

static void slot_recv(slot *s);

int ks_call_reply(ks_call *call, const ProtobufCMessage *response)
{
        if (response->descriptor != call->method->output) {
                return KS_INTERNAL;
        }
        size_t len = protobuf_c_message_get_packed_size(response);
        uint8_t *buf = malloc(len > 0 ? len : 1);
        if (buf == NULL) {
                return KS_INTERNAL;
        }
        protobuf_c_message_pack(response, buf);
        free(call->out_payload);
        call->out_payload = buf;
        call->out_len = len;
        return KS_OK;
}

int ks_call_oom(ks_call *call)
{
        ks_log_error(call->request_id, "out of memory", "{s:s}", "method", call->method->name);
        return ks_call_fail(call, KS_RESOURCE_EXHAUSTED, "out of memory, retry later");
}

int ks_call_fail(ks_call *call, int code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(call->message, sizeof(call->message), fmt, ap);
        va_end(ap);
        return code;
}

static void count_call(ks_rpc_server *srv, const ks_method *m, int code, double seconds)
{
        if (m == NULL || code < 0 || code >= KS_CODE_COUNT) {
                return;
        }
        method_metrics *mm = &srv->mm[m - srv->opts.methods];
        ks_counter *c = atomic_load(&mm->by_code[code]);
        if (c == NULL) {
                char esc[256], labels[512];
                snprintf(labels, sizeof(labels), "service=\"%s\",method=\"%s\",code=\"%s\"",
                         srv->opts.service_name, ks_metrics_escape(m->name, esc, sizeof(esc)),
                         ks_code_name(code));
                c = ks_counter_get(ks_metrics_default(), "keelson_rpc_requests_total",
                                   "RPCs handled by this replica, by method and status code.",
                                   labels);
                atomic_store(&mm->by_code[code], c);
        }
        ks_counter_inc(c);
        ks_histogram_observe(mm->duration, seconds);
}

/* Replies from a slot: packs a Reply and hands it to nng; the slot moves to SEND. */
static void slot_reply(slot *s, int code, const char *message, const uint8_t *payload, size_t len,
                       bool replayed)
{
        Keelson__Rpc__V1__Reply rep = KEELSON__RPC__V1__REPLY__INIT;
        rep.code = (uint32_t)code;
        rep.replayed = replayed;
        rep.message = (char *)(message != NULL ? message : "");
        rep.request_id = (char *)(s->req != NULL ? s->req->request_id : "");
        rep.payload.data = (uint8_t *)payload;
        rep.payload.len = code == KS_OK ? len : 0;

        nng_msg *msg = NULL;
        size_t size = keelson__rpc__v1__reply__get_packed_size(&rep);
        if (nng_msg_alloc(&msg, size) == 0) {
                keelson__rpc__v1__reply__pack(&rep, nng_msg_body(msg));
        } else {
                ks_log_error(rep.request_id, "rpc reply allocation failed", NULL);
        }
        if (s->req != NULL) {
                keelson__rpc__v1__request__free_unpacked(s->req, NULL);
                s->req = NULL;
        }
        if (msg == NULL) {
                slot_recv(s); /* the client times out, as with a lost replica */
                return;
        }
        s->state = SLOT_SEND;
        atomic_fetch_add(&s->srv->sending, 1);
        nng_aio_set_msg(s->aio, msg);
        nng_ctx_send(s->ctx, s->aio);
}

static void slot_recv(slot *s)
{
        if (atomic_load(&s->srv->closing)) {
                return;
        }
        s->state = SLOT_RECV;
        s->method = NULL;
        nng_ctx_recv(s->ctx, s->aio);
}

typedef enum queue_result { QUEUED, QUEUE_FULL, QUEUE_DRAINING } queue_result;

static queue_result enqueue(ks_rpc_server *srv, slot *s);

static bool is_bounded_heavy(const ks_rpc_server *srv, const ks_method *m)
{
        return (m->flags & KS_M_HEAVY) != 0 && srv->opts.heavy_max > 0;
}

/* Takes a place for a heavy call; false when heavy_max are already in. */
static bool heavy_take(ks_rpc_server *srv, const ks_method *m)
{
        if (!is_bounded_heavy(srv, m)) {
                return true;
        }
        if (atomic_fetch_add(&srv->heavy, 1) < srv->opts.heavy_max) {
                return true;
        }
        atomic_fetch_sub(&srv->heavy, 1);
        return false;
}

static void heavy_give(ks_rpc_server *srv, const ks_method *m)
{
        if (is_bounded_heavy(srv, m)) {
                atomic_fetch_sub(&srv->heavy, 1);
        }
}

/* Refuses at once what needs no worker to refuse: a full queue, too many heavy calls. */
static void admit(ks_rpc_server *srv, slot *s)
{
        const char *msg = srv->opts.heavy_message != NULL ? srv->opts.heavy_message
                                                          : "too many expensive calls, retry later";
        queue_result q;

        if (!heavy_take(srv, s->method)) {
                ks_counter_inc(srv->rejected_full);
                if (srv->opts.heavy_rejected != NULL) {
                        ks_counter_inc(srv->opts.heavy_rejected);
                }
                count_call(srv, s->method, KS_RESOURCE_EXHAUSTED, 0);
                slot_reply(s, KS_RESOURCE_EXHAUSTED, msg, NULL, 0, false);
        } else if ((q = enqueue(srv, s)) == QUEUE_FULL) {
                heavy_give(srv, s->method);
                ks_counter_inc(srv->rejected_full);
                count_call(srv, s->method, KS_RESOURCE_EXHAUSTED, 0);
                slot_reply(s, KS_RESOURCE_EXHAUSTED, "service overloaded, retry later", NULL, 0,
                           false);
        } else if (q == QUEUE_DRAINING) {
                heavy_give(srv, s->method);
                atomic_fetch_add(&srv->refused_draining, 1);
                count_call(srv, s->method, KS_UNAVAILABLE, 0);
                slot_reply(s, KS_UNAVAILABLE, DRAIN_MESSAGE, NULL, 0, false);
        }
}

/*
 * Queues a decoded request, unless the queue is full or the server drains
 * (checked under mu, which drain() sets it under: nothing joins the queue
 * after drain() has seen it empty).
 */
static queue_result enqueue(ks_rpc_server *srv, slot *s)
{
        pthread_mutex_lock(&srv->mu);
        if (atomic_load(&srv->draining)) {
                pthread_mutex_unlock(&srv->mu);
                return QUEUE_DRAINING;
        }
        if (srv->queued >= srv->opts.queue_max) {
                pthread_mutex_unlock(&srv->mu);
                return QUEUE_FULL;
        }
        s->next = NULL;
        if (srv->tail != NULL) {
                srv->tail->next = s;
        } else {
                srv->head = s;
        }
        srv->tail = s;
        srv->queued++;
        ks_gauge_set(srv->queue_depth, srv->queued);
        pthread_cond_signal(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
        return QUEUED;
}

static void on_request(slot *s, nng_msg *msg)
{
        ks_rpc_server *srv = s->srv;
        int64_t received_unix_ms = ks_now_ms();
        s->received_mono_ms = ks_mono_ms();
        s->req = keelson__rpc__v1__request__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
        nng_msg_free(msg);
        if (s->req == NULL) {
                slot_reply(s, KS_INVALID_ARGUMENT, "malformed request envelope", NULL, 0, false);
                return;
        }
        s->method = ks_method_find(srv->opts.methods, srv->opts.n_methods, s->req->method);
        if (s->method == NULL) {
                count_call(srv, NULL, KS_UNIMPLEMENTED, 0);
                slot_reply(s, KS_UNIMPLEMENTED, "unknown method", NULL, 0, false);
                return;
        }
        if (atomic_load(&srv->draining)) {
                /* Nothing was done: the caller may send it again, to another replica. */
                atomic_fetch_add(&srv->refused_draining, 1);
                count_call(srv, s->method, KS_UNAVAILABLE, 0);
                slot_reply(s, KS_UNAVAILABLE, DRAIN_MESSAGE, NULL, 0, false);
                return;
        }
        if (s->req->deadline_unix_ms != 0 && s->req->deadline_unix_ms <= received_unix_ms) {
                ks_counter_inc(srv->rejected_deadline);
                count_call(srv, s->method, KS_DEADLINE_EXCEEDED, 0);
                slot_reply(s, KS_DEADLINE_EXCEEDED, "deadline exceeded before handling", NULL, 0,
                           false);
                return;
        }
        s->deadline = ks_deadline_from_unix_ms(s->req->deadline_unix_ms);
        admit(srv, s);
}

static void slot_cb(void *arg)
{
        slot *s = arg;
        int rv = nng_aio_result(s->aio);
        if (s->state == SLOT_SEND) {
                if (rv != 0) {
                        nng_msg_free(nng_aio_get_msg(s->aio));
                }
                atomic_fetch_sub(&s->srv->sending, 1);
                slot_recv(s);
                return;
        }
        /* Until the socket closes, what arrives is answered (unavailable once draining). */
        if (rv == NNG_ECLOSED || atomic_load(&s->srv->closing)) {
                if (rv == 0) {
                        nng_msg_free(nng_aio_get_msg(s->aio));
                        atomic_fetch_add(&s->srv->dropped_closing, 1);
                }
                return;
        }
        if (rv != 0) {
                slot_recv(s);
                return;
        }
        on_request(s, nng_aio_get_msg(s->aio));
}

/* Runs the handler of one queued request on a worker thread, then replies. */
static void run_call(ks_rpc_server *srv, slot *s, void *worker_state)
{
        const ks_method *m = s->method;
        ks_call call;
        memset(&call, 0, sizeof(call));
        static const ks_caller anonymous = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
        call.method = m;
        call.request_id = s->req->request_id;
        call.caller = s->req->caller != NULL ? s->req->caller : &anonymous;
        call.deadline_unix_ms = s->req->deadline_unix_ms;
        call.worker_state = worker_state;
        call.service = srv->opts.service;
        call.idempotency_key = s->req->idempotency_key != NULL ? s->req->idempotency_key : "";

        int code;
        ProtobufCMessage *in = NULL;
        if (ks_deadline_expired(s->deadline)) {
                code = ks_call_fail(&call, KS_DEADLINE_EXCEEDED, "deadline exceeded in queue");
        } else if ((code = ks_method_admits(m, call.caller, call.message, sizeof(call.message))) !=
                       KS_OK ||
                   (srv->opts.role_permission &&
                    (code = ks_role_admits(call.caller->authenticated ? call.caller->role : NULL,
                                           m->permission, call.message, sizeof(call.message))) !=
                        KS_OK)) {
                /* refused before the handler: code and message are set */
        } else if ((in = protobuf_c_message_unpack(m->input, NULL, s->req->payload.len,
                                                   s->req->payload.data)) == NULL) {
                code = ks_call_fail(&call, KS_INVALID_ARGUMENT, "malformed request payload");
        } else {
                call.in = in;
                code = m->handler(&call);
        }
        if (code < 0 || code >= KS_CODE_COUNT) {
                ks_log_error(call.request_id, "handler returned an invalid code", "{s:s,s:i}",
                             "method", m->name, "code", code);
                code = KS_INTERNAL;
        }
        if (code == KS_INTERNAL && call.message[0] == '\0') {
                snprintf(call.message, sizeof(call.message), "internal error");
        }
        heavy_give(srv, m);
        double seconds = (double)(ks_mono_ms() - s->received_mono_ms) / 1000.0;
        count_call(srv, m, code, seconds);
        slot_reply(s, code, code == KS_OK ? "" : call.message, call.out_payload, call.out_len,
                   call.replayed);
        if (in != NULL) {
                protobuf_c_message_free_unpacked(in, NULL);
        }
        free(call.out_payload);
}

typedef struct worker_arg {
        ks_rpc_server *srv;
        int index;
} worker_arg;

static void *worker_main(void *arg)
{
        worker_arg wa = *(worker_arg *)arg;
        free(arg);
        ks_rpc_server *srv = wa.srv;
        void *state = NULL;
        if (srv->opts.worker_init != NULL &&
            srv->opts.worker_init(srv->opts.service, wa.index, &state) != 0) {
                ks_log_error(NULL, "rpc worker initialisation failed", "{s:i}", "worker", wa.index);
                return NULL;
        }
        for (;;) {
                pthread_mutex_lock(&srv->mu);
                while (srv->head == NULL && !atomic_load(&srv->stopping)) {
                        pthread_cond_wait(&srv->cv, &srv->mu);
                }
                if (atomic_load(&srv->stopping)) {
                        pthread_mutex_unlock(&srv->mu);
                        break;
                }
                slot *s = srv->head;
                srv->head = s->next;
                if (srv->head == NULL) {
                        srv->tail = NULL;
                }
                srv->queued--;
                srv->running++;
                ks_gauge_set(srv->queue_depth, srv->queued);
                pthread_mutex_unlock(&srv->mu);
                run_call(srv, s, state);
                pthread_mutex_lock(&srv->mu);
                srv->running--;
                pthread_mutex_unlock(&srv->mu);
        }
        if (srv->opts.worker_fini != NULL) {
                srv->opts.worker_fini(srv->opts.service, state);
        }
        return NULL;
}

/* Counts a pipe in or out of its dialer's count (pipes_mu held). */
static void count_pipe(ks_rpc_server *srv, nng_pipe p, nng_pipe_ev ev)
{
        int id = nng_pipe_id(p);

        if (ev == NNG_PIPE_EV_ADD_POST) {
                int d = nng_dialer_id(nng_pipe_dialer(p));
                for (int i = 0; i < srv->opts.n_dial_urls; i++) {
                        if (nng_dialer_id(srv->dialers[i]) == d && srv->n_live < LIVE_PIPES_MAX) {
                                srv->live[srv->n_live++] = (live_pipe){.pipe = id, .dialer = i};
                                srv->pipes_of[i]++;
                                return;
                        }
                }
                return;
        }
        for (int j = 0; j < srv->n_live; j++) {
                if (srv->live[j].pipe == id) {
                        srv->pipes_of[srv->live[j].dialer]--;
                        srv->live[j] = srv->live[--srv->n_live];
                        return;
                }
        }
}

static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
        ks_rpc_server *srv = arg;
        if (ev == NNG_PIPE_EV_ADD_POST) {
                atomic_fetch_add(&srv->connected, 1);
        } else if (ev == NNG_PIPE_EV_REM_POST) {
                atomic_fetch_sub(&srv->connected, 1);
        }
        pthread_mutex_lock(&srv->pipes_mu);
        count_pipe(srv, p, ev);
        pthread_mutex_unlock(&srv->pipes_mu);
}

/* Creates dialer i for its URL and starts it (non-blocking: a broker not up yet is dialled
 * again). The old one, if any, is closed after. */
static int dial(ks_rpc_server *srv, int i)
{
        const char *url = srv->opts.dial_urls[i];
        nng_dialer d, old;
        int rv;

        if ((rv = nng_dialer_create(&d, srv->sock, url)) != 0) {
                ks_log_error(NULL, "cannot dial broker", "{s:s,s:s}", "url", url, "error",
                             nng_strerror(rv));
                return rv;
        }
        /* known before it can connect, so that its first pipe is counted */
        pthread_mutex_lock(&srv->pipes_mu);
        old = srv->dialers[i];
        srv->dialers[i] = d;
        srv->pipes_of[i] = 0;
        pthread_mutex_unlock(&srv->pipes_mu);
        if ((rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK)) != 0) {
                ks_log_error(NULL, "cannot dial broker", "{s:s,s:s}", "url", url, "error",
                             nng_strerror(rv));
        }
        if (nng_dialer_id(old) > 0) {
                nng_dialer_close(old);
        }
        return rv;
}

static int check_options(const ks_rpc_server_options *o)
{
        if (o->n_dial_urls < 1 || o->n_dial_urls > KS_BROKERS_MAX || o->n_methods < 1 ||
            o->workers < 1 || o->heavy_max < 0 || o->workers > RPC_WORKERS_MAX ||
            o->queue_max < 1 || o->max_inflight <= o->workers + o->queue_max ||
            o->max_inflight > RPC_INFLIGHT_MAX) {
                ks_log_error(NULL, "rpc server options out of range", "{s:i,s:i,s:i,s:i}",
                             "workers", o->workers, "queue_max", o->queue_max, "max_inflight",
                             o->max_inflight, "dial_urls", o->n_dial_urls);
                return -1;
        }
        return 0;
}

static int open_socket(ks_rpc_server *srv)
{
        int rv;
        if ((rv = nng_rep0_open(&srv->sock)) != 0) {
                return rv;
        }
        nng_socket_set_size(srv->sock, NNG_OPT_RECVMAXSZ, RPC_RECV_MAX_BYTES);
        ks_broker_dialer(srv->sock, pipe_event, srv);
        for (int i = 0; i < srv->opts.n_dial_urls; i++) {
                if ((rv = dial(srv, i)) != 0) {
                        return rv;
                }
        }
        return 0;
}

static ks_ticker_next redial_step(void *arg)
{
        ks_rpc_server *srv = arg;
        int pipes[KS_BROKERS_MAX];

        if (atomic_load(&srv->stopping)) {
                return KS_TICKER_REST;
        }
        pthread_mutex_lock(&srv->pipes_mu);
        memcpy(pipes, srv->pipes_of, sizeof(pipes));
        pthread_mutex_unlock(&srv->pipes_mu);
        for (int i = 0; i < srv->opts.n_dial_urls; i++) {
                if (pipes[i] > 0) {
                        srv->idle_checks[i] = 0;
                        srv->redial_logged[i] = false;
                        continue;
                }
                if (++srv->idle_checks[i] < REDIAL_AFTER_CHECKS) {
                        continue;
                }
                srv->idle_checks[i] = 0;
                if (!srv->redial_logged[i]) {
                        ks_log_warn(NULL, "no connection to a broker for a while: dialling it anew",
                                    "{s:s,s:i}", "url", srv->opts.dial_urls[i], "after_ms",
                                    REDIAL_CHECK_MS * REDIAL_AFTER_CHECKS);
                        srv->redial_logged[i] = true;
                }
                (void)dial(srv, i); /* logged; the next look tries again */
        }
        return KS_TICKER_REST;
}

static int open_slots(ks_rpc_server *srv)
{
        int rv;
        srv->slots = calloc((size_t)srv->opts.max_inflight, sizeof(slot));
        if (srv->slots == NULL) {
                return NNG_ENOMEM;
        }
        for (int i = 0; i < srv->opts.max_inflight; i++) {
                slot *s = &srv->slots[i];
                s->srv = srv;
                if ((rv = nng_ctx_open(&s->ctx, srv->sock)) != 0 ||
                    (rv = nng_aio_alloc(&s->aio, slot_cb, s)) != 0) {
                        return rv;
                }
                srv->n_slots = i + 1;
        }
        return 0;
}

static void init_metrics(ks_rpc_server *srv)
{
        ks_metrics *reg = ks_metrics_default();
        char labels[256], esc[256];
        snprintf(labels, sizeof(labels), "service=\"%s\"", srv->opts.service_name);
        srv->rejected_full = ks_counter_get(
            reg, "keelson_rpc_rejected_overload_total",
            "Requests answered resource_exhausted because the work queue was full.", labels);
        srv->rejected_deadline =
            ks_counter_get(reg, "keelson_rpc_rejected_deadline_total",
                           "Requests whose deadline had passed when they arrived.", labels);
        srv->queue_depth =
            ks_gauge_get(reg, "keelson_rpc_queue_depth", "Requests waiting for a worker.", labels);
        for (size_t i = 0; i < srv->opts.n_methods; i++) {
                snprintf(labels, sizeof(labels), "service=\"%s\",method=\"%s\"",
                         srv->opts.service_name,
                         ks_metrics_escape(srv->opts.methods[i].name, esc, sizeof(esc)));
                srv->mm[i].duration =
                    ks_histogram_get(reg, "keelson_rpc_duration_seconds",
                                     "Time from receipt to reply of RPCs handled by this replica.",
                                     labels, KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
        }
}

static int start_workers(ks_rpc_server *srv)
{
        srv->threads = calloc((size_t)srv->opts.workers, sizeof(pthread_t));
        if (srv->threads == NULL) {
                return -1;
        }
        for (int i = 0; i < srv->opts.workers; i++) {
                worker_arg *wa = malloc(sizeof(*wa));
                if (wa == NULL) {
                        return -1;
                }
                wa->srv = srv;
                wa->index = i;
                if (pthread_create(&srv->threads[i], NULL, worker_main, wa) != 0) {
                        free(wa);
                        return -1;
                }
                srv->n_threads = i + 1;
        }
        return 0;
}

int ks_rpc_server_start(ks_rpc_server **out, const ks_rpc_server_options *opts)
{
        *out = NULL;
        if (check_options(opts) != 0) {
                return KS_INVALID_ARGUMENT;
        }
        ks_rpc_server *srv = calloc(1, sizeof(*srv));
        if (srv == NULL) {
                return KS_INTERNAL;
        }
        srv->opts = *opts;
        srv->sock = (nng_socket)NNG_SOCKET_INITIALIZER;
        pthread_mutex_init(&srv->mu, NULL);
        pthread_mutex_init(&srv->pipes_mu, NULL);
        pthread_cond_init(&srv->cv, NULL);
        srv->mm = calloc(opts->n_methods, sizeof(method_metrics));
        if (srv->mm == NULL) {
                ks_rpc_server_stop(srv);
                return KS_INTERNAL;
        }
        init_metrics(srv);
        int rv = open_socket(srv);
        if (rv == 0) {
                rv = open_slots(srv);
        }
        if (rv != 0 || start_workers(srv) != 0) {
                ks_log_error(NULL, "rpc server start failed", "{s:s}", "error",
                             rv != 0 ? nng_strerror(rv) : "threads");
                ks_rpc_server_stop(srv);
                return KS_INTERNAL;
        }
        for (int i = 0; i < srv->n_slots; i++) {
                slot_recv(&srv->slots[i]);
        }
        ks_ticker_options t = {
            .name = "rpc-redial", .interval_ms = REDIAL_CHECK_MS, .step = redial_step, .arg = srv};
        if (ks_ticker_start(&srv->redial, &t) != KS_OK) {
                ks_log_error(NULL, "rpc server start failed", "{s:s}", "error", "threads");
                ks_rpc_server_stop(srv);
                return KS_INTERNAL;
        }
        *out = srv;
        return KS_OK;
}

int ks_rpc_server_connected(const ks_rpc_server *s)
{
        return atomic_load(&s->connected);
}

/* True when no call is queued or running and every reply has been handed to the connection. */
static bool drained(ks_rpc_server *srv)
{
        bool idle;

        pthread_mutex_lock(&srv->mu);
        idle = srv->head == NULL && srv->running == 0;
        pthread_mutex_unlock(&srv->mu);
        return idle && atomic_load(&srv->sending) == 0;
}

/*
 * The first half of a stop: what this replica holds is finished and
 * answered (the workers keep taking queued calls), while what arrives now is
 * answered unavailable at once, nothing done, so that its caller sends it
 * again (to another replica) instead of waiting out its deadline. nng cannot
 * stop a broker sending to a connected replica, so the connection stays up
 * until the replies are out; what arrives in the instant between the last
 * look and the close is lost as with a replica that dies (the gateway
 * resends an idempotent call; a client retries its writes after a 504).
 */
static void drain(ks_rpc_server *srv)
{
        int64_t until_ms = ks_mono_ms() + DRAIN_MS;
        struct timespec pause = {0, DRAIN_POLL_MS * 1000000L};

        pthread_mutex_lock(&srv->mu);
        atomic_store(&srv->draining, true);
        pthread_mutex_unlock(&srv->mu);
        while (!drained(srv)) {
                if (ks_mono_ms() >= until_ms) {
                        ks_log_warn(NULL, "rpc drain time is up: stopping with calls held", "{s:i}",
                                    "drain_ms", DRAIN_MS);
                        return;
                }
                nanosleep(&pause, NULL);
        }
}

void ks_rpc_server_stop(ks_rpc_server *srv)
{
        if (srv == NULL) {
                return;
        }
        bool served = srv->n_threads > 0 && nng_socket_id(srv->sock) > 0;
        int64_t drain_from_ms = ks_mono_ms(), drain_ms = 0;

        ks_ticker_stop(srv->redial); /* before the socket it dials on closes */
        if (served) {
                drain(srv);
                drain_ms = ks_mono_ms() - drain_from_ms;
        }
        /* Workers finish the call they are in, then leave; a call still queued
         * (the drain ran out of time) is dropped: its client times out. */
        pthread_mutex_lock(&srv->mu);
        atomic_store(&srv->draining, true); /* what still arrives: unavailable (no worker) */
        atomic_store(&srv->stopping, true);
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
        for (int i = 0; i < srv->n_threads; i++) {
                pthread_join(srv->threads[i], NULL);
        }
        atomic_store(&srv->closing, true);
        if (nng_socket_id(srv->sock) > 0 && !ks_broker_close(srv->sock, KS_BROKER_CLOSE_MS)) {
                /* nng may still run the slots' callbacks and pipe events with srv: all of it is
                 * left to the process exit, which follows a stop */
                ks_log_warn(NULL, "rpc server's socket did not close in time", "{s:i, s:i}",
                            "waited_ms", KS_BROKER_CLOSE_MS, "drain_ms", (int)drain_ms);
                return;
        }
        for (int i = 0; i < srv->n_slots; i++) {
                nng_aio_stop(srv->slots[i].aio);
        }
        if (served) {
                ks_log_info(NULL, "rpc server stopped", "{s:i, s:i, s:i}", "drain_ms",
                            (int)drain_ms, "refused_while_draining",
                            atomic_load(&srv->refused_draining), "dropped_at_close",
                            atomic_load(&srv->dropped_closing));
        }
        for (int i = 0; i < srv->n_slots; i++) {
                slot *s = &srv->slots[i];
                if (s->req != NULL) {
                        keelson__rpc__v1__request__free_unpacked(s->req, NULL);
                }
                nng_aio_free(s->aio);
        }
        free(srv->slots);
        free(srv->threads);
        free(srv->mm);
        pthread_cond_destroy(&srv->cv);
        pthread_mutex_destroy(&srv->pipes_mu);
        pthread_mutex_destroy(&srv->mu);
        free(srv);
}
