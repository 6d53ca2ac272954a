/*
 * ks_rpc_server: the service side of ks_rpc (see ks_rpc.h for the model).
 *
 * One loop (ks_loop) speaks nng's rep protocol to every broker through ks_sp
 * dialers, which dial again whenever a connection is lost. A request is
 * read, decoded and checked on the loop; what can be refused at once (a
 * malformed envelope, an unknown method, a passed deadline, a full queue,
 * too many heavy calls, a draining replica) is answered there, and the rest
 * becomes a job on the bounded work queue. Workers are plain threads, so
 * handlers may block on PostgreSQL; a worker packs its reply, puts the job
 * on the done list and wakes the loop, which writes it to the pipe it came
 * from. A request thus costs one hand-off each way: the loop to a worker
 * and back (nng's contexts and task queues cost about 16 thread switches per
 * call; docs/performance.md).
 *
 * Calls run on the loop. Even those two hand-offs cost more than a short
 * read's handler on a virtual machine, where every sleep and wake-up of a
 * thread goes through the hypervisor (WhoAmI: auth's CPU per call 114 ->
 * 61 us, switches 3.5 -> 1.3, when every call ran on the loop). So the loop
 * runs calls itself when their method is a short read: idempotent, not
 * heavy, the service's workers hold no state of their own (worker_init),
 * whatever the handler must wait for is free now (inline_ready: a database
 * connection, which the loop must never queue for behind the workers),
 * and its handler measured, over at least INLINE_SAMPLES calls, to take
 * less than INLINE_MAX_NS on average (a moving average over about the last
 * eight calls: a method that turns slow goes to the workers again from its
 * next call). Of the calls one pass of the loop read, it keeps as many as
 * their averages say fit in INLINE_BUDGET_NS and hands the rest to the
 * workers first, so a replica under load still runs calls on every core,
 * and what arrives meanwhile (requests, the workers' replies to write)
 * waits about that long at most. The budget was measured: at 50
 * connections WhoAmI's p99 was 9–14 ms with 8 ms, 17–60 ms with 2 ms (more
 * calls spilt to the workers, whose replies then wait for the loop), and
 * keeping one call a pass was worse than either. The calls a pass runs send
 * their reads to PostgreSQL together when the service says how
 * (opts.batch_run; ks_pg.h, "Batched reads"): a round trip a pass instead
 * of one a call, each a wake-up of both processes.
 *
 * Tenants' turns (opts.tenant_writers): a worker takes the oldest queued
 * call it may run, and a write (a method not marked idempotent) of a
 * tenant that already has tenant_writers writes running is not one; it
 * stays queued, in its place, until one of them is done. Concurrent writes
 * of one tenant meet on its rows in the database anyway (billing's invoice
 * counter): taken in turn here, they cost no backend sleeping on a row lock
 * and no worker sleeping on them, and other tenants' calls go past them.
 *
 * Groups (opts.group_run, with the turns): a worker that takes a write of a
 * KS_M_GROUPED method also takes the same tenant's calls of that method
 * queued behind it (up to opts.group_max in all), and the service runs them
 * together, in one transaction, in that one turn: a tenant's burst of
 * writes costs one transaction and one hold of its rows instead of one
 * each. Each call is still answered on its own, with its own code; one
 * refused before its handler (its deadline passed, its permission) is not
 * handed on.
 *
 * A reply whose pipe is gone (its broker went away) is dropped: the client
 * resends what may be resent, or times out, as with a replica that dies.
 */
#include "ks_rpc.h"
#include "ks_perms.h"

#include <event2/event.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ks_broker_ctl.h"
#include "ks_fifo.h"
#include "ks_gate.h"
#include "ks_log.h"
#include "ks_loop.h"
#include "ks_metrics.h"
#include "ks_pg.h"
#include "ks_sp.h"
#include "ks_topology.h"

#define RPC_WORKERS_MAX    1024
#define RPC_INFLIGHT_MAX   65536
#define RPC_GROUP_MAX      256 /* calls of one group (group_max) */
#define RPC_RECV_MAX_BYTES ((size_t)KS_RPC_PAYLOAD_MAX + 65536)
/* A broker that does not read its replies: past this, a reply is dropped. */
#define RPC_SEND_MAX_BYTES ((size_t)64 << 20)
/*
 * Stopping drains first: the brokers are told to send nothing more (at
 * most KS_BROKER_CTL_WAIT_MS), then the calls queued or running finish and
 * their replies go out, for at most DRAIN_MS (together under
 * KS_SHUTDOWN_DEADLINE_MS, 15 s, which also covers the service's own stop
 * hook), looking every DRAIN_POLL_MS.
 */
#define DRAIN_MS      10000
#define DRAIN_POLL_MS 2
#define DRAIN_MESSAGE "replica stopping, retry"
/* Calls run on the loop: the methods' handlers measured first, and fast. */
#define INLINE_SAMPLES   8
#define INLINE_MAX_NS    (2 * 1000 * 1000)
#define INLINE_BUDGET_NS (8 * 1000 * 1000) /* of one pass's calls, by their averages */

typedef struct job {
        ks_fifo_link link; /* on the work queue or the done list */
        uint32_t pipe;     /* ks_sp pipe id the request came on */
        uint8_t backtrace[KS_SP_HOPS_MAX * 4];
        size_t backtrace_len;
        Keelson__Rpc__V1__Request *req; /* owned until the reply is packed */
        const ks_method *method;
        int64_t received_mono_ms; /* for the call's duration */
        ks_deadline deadline;     /* the caller's, moved onto the monotonic clock on receipt */
        uint8_t *reply;           /* the packed Reply */
        size_t reply_len;
        /* a write holding a turn: its tenant ("" for none), kept since req is freed once the
         * reply is packed */
        char turn_key[KS_GATE_KEY_MAX + 1];
        bool passed_over; /* a worker took a later call first: its tenant's turn was not yet */
} job;

static void jobs_push(ks_fifo *q, job *j)
{
        ks_fifo_push(q, &j->link);
}

static job *jobs_pop(ks_fifo *q)
{
        ks_fifo_link *l = ks_fifo_pop(q);
        return l != NULL ? KS_FIFO_ITEM(l, job, link) : NULL;
}

static void job_free(job *j)
{
        if (j->req != NULL) {
                keelson__rpc__v1__request__free_unpacked(j->req, NULL);
        }
        free(j->reply);
        free(j);
}

typedef struct method_metrics {
        _Atomic(ks_counter *) by_code[KS_CODE_COUNT];
        ks_histogram *duration;
        /* its handler's time: a moving average (1/8 per call) and the calls measured */
        atomic_llong handler_ns;
        atomic_int handler_runs;
} method_metrics;

struct ks_rpc_server {
        ks_rpc_server_options opts;
        /* the loop's own */
        ks_loop *loop;
        ks_sp *sp;
        ks_sp_dialer *dialers[KS_BROKERS_MAX];
        struct event *wake;     /* made active by a worker that put a job on done */
        struct event *flush;    /* while draining: measures the replies not yet written */
        struct event *dispatch; /* after a read: runs or queues what it brought (pending) */
        struct event *notice;   /* stop began: tells every broker "drain" (ks_broker_ctl.h) */
        uint32_t unacked[KS_BROKERS_MAX]; /* pipes told "drain" that have not said "drained" */
        atomic_bool leaving;              /* stop began: the brokers are being told */
        atomic_int awaiting;              /* of the pipes told, those not yet drained */
        atomic_bool told;                 /* the notice went to every broker connected then */
        atomic_int connected;
        atomic_int held;             /* received and not yet answered (max_inflight) */
        atomic_int heavy;            /* KS_M_HEAVY calls queued or running */
        atomic_bool draining;        /* stop began: new arrivals are answered unavailable */
        atomic_bool stopping;        /* drained: workers leave */
        atomic_int refused_draining; /* answered unavailable while draining */
        atomic_int dropped_replies;  /* their pipe gone or over its bound */
        atomic_size_t unflushed;     /* reply bytes the brokers have not taken (flush) */
        atomic_uint flush_looks;     /* times flush has measured */
        pthread_t *threads;
        int n_threads;
        /* the work queue and the done list, under mu */
        pthread_mutex_t mu;
        pthread_cond_t cv;
        ks_fifo queue;
        ks_fifo done;
        ks_fifo pending;    /* read by the loop in this pass, for dispatch to place */
        int running;        /* jobs a worker took and has not put on done yet */
        int replying;       /* jobs the loop took off done and is writing */
        method_metrics *mm; /* one per method */
        ks_counter *rejected_full;
        ks_counter *rejected_deadline;
        ks_counter *inline_calls;
        ks_counter *batched_reads;
        ks_counter *turn_waits;
        ks_counter *grouped_calls;
        ks_gauge *queue_depth;
        ks_gate *turns; /* opts.tenant_writers > 0: the tenants' writes running */
};

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

static method_metrics *metrics_of(const ks_rpc_server *srv, const ks_method *m)
{
        return &srv->mm[m - srv->opts.methods];
}

/* One more run of m's handler, took_ns long, into its moving average. */
static void note_handler_time(method_metrics *mm, long long took_ns)
{
        long long avg = atomic_load(&mm->handler_ns);
        atomic_store(&mm->handler_ns,
                     atomic_load(&mm->handler_runs) == 0 ? took_ns : avg + (took_ns - avg) / 8);
        atomic_fetch_add(&mm->handler_runs, 1);
}

static void count_call(ks_rpc_server *srv, const ks_method *m, int code, double seconds)
{
        if (m == NULL || code < 0 || code >= KS_CODE_COUNT) {
                return;
        }
        method_metrics *mm = metrics_of(srv, m);
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

/* Packs the Reply of j into j->reply, and lets its request go. */
static void pack_reply(job *j, int code, const char *message, const uint8_t *payload, size_t len,
                       bool replayed)
{
        Keelson__Rpc__V1__Reply rep = KEELSON__RPC__V1__REPLY__INIT;
        rep.code = (uint32_t)code;
        rep.replayed = replayed;
        rep.message = (char *)(message != NULL ? message : "");
        rep.request_id = (char *)(j->req != NULL ? j->req->request_id : "");
        rep.payload.data = (uint8_t *)payload;
        rep.payload.len = code == KS_OK ? len : 0;
        size_t size = keelson__rpc__v1__reply__get_packed_size(&rep);
        free(j->reply);
        j->reply = malloc(size > 0 ? size : 1);
        j->reply_len = 0;
        if (j->reply != NULL) {
                j->reply_len = keelson__rpc__v1__reply__pack(&rep, j->reply);
        } else {
                ks_log_error(rep.request_id, "rpc reply allocation failed", NULL);
        }
        if (j->req != NULL) {
                keelson__rpc__v1__request__free_unpacked(j->req, NULL);
                j->req = NULL;
        }
}

/* On the loop: writes j's reply to the pipe it came on, and frees j. */
static void send_reply(ks_rpc_server *srv, job *j)
{
        ks_sp_pipe *p = ks_sp_pipe_find(srv->sp, j->pipe);
        if (j->reply == NULL || p == NULL ||
            ks_sp_send(p, j->backtrace, j->backtrace_len, j->reply, j->reply_len) != 0) {
                /* the client times out or resends, as with a lost replica */
                atomic_fetch_add(&srv->dropped_replies, 1);
        }
        atomic_fetch_sub(&srv->held, 1);
        job_free(j);
}

/* On the loop: answers at once, no worker. */
static void answer_now(ks_rpc_server *srv, job *j, int code, const char *message)
{
        pack_reply(j, code, message, NULL, 0, false);
        send_reply(srv, j);
}

typedef enum queue_result { QUEUED, QUEUE_FULL, QUEUE_DRAINING } queue_result;

/*
 * Queues a checked request, unless the queue is full or the server drains
 * (checked under mu, which drain() sets it under: nothing joins the queue
 * after drain() has seen it empty).
 */
static queue_result enqueue(ks_rpc_server *srv, job *j)
{
        pthread_mutex_lock(&srv->mu);
        if (atomic_load(&srv->draining)) {
                pthread_mutex_unlock(&srv->mu);
                return QUEUE_DRAINING;
        }
        if (srv->queue.n >= (size_t)srv->opts.queue_max) {
                pthread_mutex_unlock(&srv->mu);
                return QUEUE_FULL;
        }
        jobs_push(&srv->queue, j);
        ks_gauge_set(srv->queue_depth, (int64_t)srv->queue.n);
        pthread_mutex_unlock(&srv->mu);
        /* After the unlock: a worker woken under it would only wait for mu again. */
        pthread_cond_signal(&srv->cv);
        return QUEUED;
}

/* Whether j's method may run on the loop (the top of this file). */
static bool inline_eligible(const ks_rpc_server *srv, const job *j)
{
        const ks_method *m = j->method;
        const method_metrics *mm = metrics_of(srv, m);
        return srv->opts.worker_init == NULL && (m->flags & KS_M_IDEMPOTENT) &&
               !(m->flags & KS_M_HEAVY) && atomic_load(&mm->handler_runs) >= INLINE_SAMPLES &&
               atomic_load(&mm->handler_ns) < INLINE_MAX_NS;
}

/* To the workers, or refused: a full queue, a draining replica. */
static void to_workers(ks_rpc_server *srv, job *j)
{
        queue_result q = enqueue(srv, j);
        if (q == QUEUE_FULL) {
                heavy_give(srv, j->method);
                ks_counter_inc(srv->rejected_full);
                count_call(srv, j->method, KS_RESOURCE_EXHAUSTED, 0);
                answer_now(srv, j, KS_RESOURCE_EXHAUSTED, "service overloaded, retry later");
        } else if (q == QUEUE_DRAINING) {
                heavy_give(srv, j->method);
                atomic_fetch_add(&srv->refused_draining, 1);
                count_call(srv, j->method, KS_UNAVAILABLE, 0);
                answer_now(srv, j, KS_UNAVAILABLE, DRAIN_MESSAGE);
        }
}

/*
 * Refuses at once what needs no worker to refuse (too many heavy calls),
 * holds what may run on the loop for dispatch, queues the rest.
 */
static void admit(ks_rpc_server *srv, job *j)
{
        const char *msg = srv->opts.heavy_message != NULL ? srv->opts.heavy_message
                                                          : "too many expensive calls, retry later";

        if (!heavy_take(srv, j->method)) {
                ks_counter_inc(srv->rejected_full);
                if (srv->opts.heavy_rejected != NULL) {
                        ks_counter_inc(srv->opts.heavy_rejected);
                }
                count_call(srv, j->method, KS_RESOURCE_EXHAUSTED, 0);
                answer_now(srv, j, KS_RESOURCE_EXHAUSTED, msg);
        } else if (inline_eligible(srv, j)) {
                pthread_mutex_lock(&srv->mu); /* drain() counts pending among what is held */
                jobs_push(&srv->pending, j);
                pthread_mutex_unlock(&srv->mu);
                event_active(srv->dispatch, EV_TIMEOUT, 0); /* once, after this read */
        } else {
                to_workers(srv, j);
        }
}

/* ---- leaving the brokers' rotation (ks_broker_ctl.h) ---------------------------------- */

/* On the loop: p is told "drain", and awaited until it says "drained" or goes. */
static void tell(ks_rpc_server *srv, ks_sp_pipe *p)
{
        uint32_t id = ks_sp_pipe_id(p);
        int free_at = -1;
        for (int i = 0; i < KS_BROKERS_MAX; i++) {
                if (srv->unacked[i] == id) {
                        return;
                }
                if (srv->unacked[i] == 0 && free_at < 0) {
                        free_at = i;
                }
        }
        if (free_at < 0 || ks_sp_send(p, NULL, 0, (const uint8_t *)KS_BROKER_CTL_DRAIN,
                                      KS_BROKER_CTL_DRAIN_LEN) != 0) {
                return; /* what it still sends is answered unavailable */
        }
        srv->unacked[free_at] = id;
        atomic_fetch_add(&srv->awaiting, 1);
}

/* On the loop: the pipe of id is no longer awaited (it said "drained", or it went). */
static void settle(ks_rpc_server *srv, uint32_t id)
{
        for (int i = 0; i < KS_BROKERS_MAX; i++) {
                if (srv->unacked[i] == id) {
                        srv->unacked[i] = 0;
                        atomic_fetch_sub(&srv->awaiting, 1);
                        return;
                }
        }
}

/* On the loop, once the stop began: every broker connected now is told "drain". */
static void on_notice(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_rpc_server *srv = arg;
        for (int i = 0; i < srv->opts.n_dial_urls; i++) {
                ks_sp_pipe *p = ks_sp_dialer_pipe(srv->dialers[i]);
                if (p != NULL) {
                        tell(srv, p);
                }
        }
        atomic_store(&srv->told, true);
}

/* On the loop: a control message from a broker; only "drained" is expected. */
static void on_control(ks_rpc_server *srv, ks_sp_pipe *p, const uint8_t *msg, size_t len)
{
        if (ks_broker_ctl_equal(msg, len, KS_BROKER_CTL_DRAINED, KS_BROKER_CTL_DRAINED_LEN)) {
                settle(srv, ks_sp_pipe_id(p));
        }
}

/* On the loop: a request from a broker, [backtrace][Request]. */
static void on_request(ks_sp_pipe *p, const uint8_t *msg, size_t len, void *arg)
{
        ks_rpc_server *srv = arg;
        if (ks_broker_ctl_is(msg, len)) {
                on_control(srv, p, msg, len);
                return;
        }
        size_t bt = ks_sp_backtrace(msg, len);
        if (bt == 0) {
                return; /* no request id to answer to: nng's rep drops it too */
        }
        job *j = calloc(1, sizeof(*j));
        if (j == NULL) {
                return; /* the client times out or resends */
        }
        int64_t received_unix_ms = ks_now_ms();
        j->received_mono_ms = ks_mono_ms();
        j->pipe = ks_sp_pipe_id(p);
        memcpy(j->backtrace, msg, bt);
        j->backtrace_len = bt;
        if (atomic_fetch_add(&srv->held, 1) >= srv->opts.max_inflight) {
                ks_counter_inc(srv->rejected_full);
                answer_now(srv, j, KS_RESOURCE_EXHAUSTED, "service overloaded, retry later");
                return;
        }
        j->req = keelson__rpc__v1__request__unpack(NULL, len - bt, msg + bt);
        if (j->req == NULL) {
                answer_now(srv, j, KS_INVALID_ARGUMENT, "malformed request envelope");
                return;
        }
        j->method = ks_method_find(srv->opts.methods, srv->opts.n_methods, j->req->method);
        if (j->method == NULL) {
                count_call(srv, NULL, KS_UNIMPLEMENTED, 0);
                answer_now(srv, j, KS_UNIMPLEMENTED, "unknown method");
                return;
        }
        if (atomic_load(&srv->draining)) {
                /* Nothing was done: the caller may send it again, to another replica. */
                atomic_fetch_add(&srv->refused_draining, 1);
                count_call(srv, j->method, KS_UNAVAILABLE, 0);
                answer_now(srv, j, KS_UNAVAILABLE, DRAIN_MESSAGE);
                return;
        }
        if (j->req->deadline_unix_ms != 0 && j->req->deadline_unix_ms <= received_unix_ms) {
                ks_counter_inc(srv->rejected_deadline);
                count_call(srv, j->method, KS_DEADLINE_EXCEEDED, 0);
                answer_now(srv, j, KS_DEADLINE_EXCEEDED, "deadline exceeded before handling");
                return;
        }
        j->deadline = ks_deadline_from_unix_ms(j->req->deadline_unix_ms);
        admit(srv, j);
}

static void on_pipe_added(ks_sp_pipe *p, void *arg)
{
        ks_rpc_server *srv = arg;
        atomic_fetch_add(&srv->connected, 1);
        if (atomic_load(&srv->leaving)) {
                tell(srv, p); /* a broker dialled again while this replica leaves */
        }
}

static void on_pipe_removed(ks_sp_pipe *p, void *arg)
{
        ks_rpc_server *srv = arg;
        atomic_fetch_sub(&srv->connected, 1);
        settle(srv, ks_sp_pipe_id(p));
}

/* On the loop: writes the replies the workers finished. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_rpc_server *srv = arg;
        pthread_mutex_lock(&srv->mu);
        ks_fifo done = ks_fifo_take(&srv->done);
        srv->replying += (int)done.n;
        pthread_mutex_unlock(&srv->mu);
        int written = (int)done.n;
        job *j;
        while ((j = jobs_pop(&done)) != NULL) {
                send_reply(srv, j);
        }
        pthread_mutex_lock(&srv->mu);
        srv->replying -= written;
        pthread_mutex_unlock(&srv->mu);
}

/* On the loop, while draining: what the brokers have not taken of the replies written. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_rpc_server *srv = arg;
        size_t bytes = 0;
        for (int i = 0; i < srv->opts.n_dial_urls; i++) {
                ks_sp_pipe *p = ks_sp_dialer_pipe(srv->dialers[i]);
                bytes += p != NULL ? ks_sp_pending(p) : 0;
        }
        atomic_store(&srv->unflushed, bytes);
        atomic_fetch_add(&srv->flush_looks, 1);
}

/*
 * The call of one job, made from its request: KS_OK when its handler may
 * run (the request unpacked into *in and call->in), else the code it is
 * refused with, its message set (a deadline passed in the queue, the
 * caller's permission, a malformed payload).
 */
static int call_open(ks_rpc_server *srv, job *j, void *worker_state, ks_call *call,
                     ProtobufCMessage **in)
{
        static const ks_caller anonymous = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
        const ks_method *m = j->method;
        int code;

        memset(call, 0, sizeof(*call));
        *in = NULL;
        call->method = m;
        call->request_id = j->req->request_id;
        call->caller = j->req->caller != NULL ? j->req->caller : &anonymous;
        call->deadline_unix_ms = j->req->deadline_unix_ms;
        call->worker_state = worker_state;
        call->service = srv->opts.service;
        call->idempotency_key = j->req->idempotency_key != NULL ? j->req->idempotency_key : "";
        if (ks_deadline_expired(j->deadline)) {
                return ks_call_fail(call, KS_DEADLINE_EXCEEDED, "deadline exceeded in queue");
        }
        if ((code = ks_method_admits(m, call->caller, call->message, sizeof(call->message))) !=
                KS_OK ||
            (srv->opts.role_permission &&
             (code = ks_role_admits(call->caller->authenticated ? call->caller->role : NULL,
                                    m->permission, call->message, sizeof(call->message))) !=
                 KS_OK)) {
                return code; /* refused before the handler: code and message are set */
        }
        if ((*in = protobuf_c_message_unpack(m->input, NULL, j->req->payload.len,
                                             j->req->payload.data)) == NULL) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "malformed request payload");
        }
        call->in = *in;
        return KS_OK;
}

/* The call's outcome counted and packed into its job as the reply; what it held freed. */
static void call_close(ks_rpc_server *srv, job *j, ks_call *call, ProtobufCMessage *in, int code)
{
        const ks_method *m = j->method;

        if (code < 0 || code >= KS_CODE_COUNT) {
                ks_log_error(call->request_id, "handler returned an invalid code", "{s:s,s:i}",
                             "method", m->name, "code", code);
                code = KS_INTERNAL;
        }
        if (code == KS_INTERNAL && call->message[0] == '\0') {
                snprintf(call->message, sizeof(call->message), "internal error");
        }
        heavy_give(srv, m);
        double seconds = (double)(ks_mono_ms() - j->received_mono_ms) / 1000.0;
        count_call(srv, m, code, seconds);
        pack_reply(j, code, code == KS_OK ? "" : call->message, call->out_payload, call->out_len,
                   call->replayed);
        if (in != NULL) {
                protobuf_c_message_free_unpacked(in, NULL);
        }
        free(call->out_payload);
        call->out_payload = NULL;
}

/*
 * Runs the handler of one job and packs its reply into it (a worker, or the
 * loop). extra_ns: time the call spent outside its handler on its behalf
 * (its share of a batched read), counted into the handler's average. false
 * when the handler only recorded its read for the loop's batch (ks_pg.h):
 * nothing is packed, and the job runs again after the batch.
 */
static bool run_call(ks_rpc_server *srv, job *j, void *worker_state, long long extra_ns)
{
        ks_call call;
        ProtobufCMessage *in = NULL;
        int code = call_open(srv, j, worker_state, &call, &in);

        if (code == KS_OK) {
                int64_t t0 = ks_mono_ns();
                code = j->method->handler(&call);
                if (code == KS_PG_DEFERRED) {
                        protobuf_c_message_free_unpacked(in, NULL);
                        free(call.out_payload);
                        return false;
                }
                note_handler_time(metrics_of(srv, j->method),
                                  (long long)(ks_mono_ns() - t0) + extra_ns);
        }
        call_close(srv, j, &call, in, code);
        return true;
}

/*
 * On a worker: the n jobs of one group (one tenant, one KS_M_GROUPED
 * method), each reply packed. Those refused before a handler would run are
 * answered so; the others go to the service's group_run together, each
 * counted a share of its time. Short of memory for the calls, each runs
 * alone.
 */
static void run_group(ks_rpc_server *srv, job **js, int n, void *worker_state)
{
        ks_call *calls = calloc((size_t)n, sizeof(*calls));
        ks_call **ready = calloc((size_t)n, sizeof(*ready));
        ProtobufCMessage **ins = calloc((size_t)n, sizeof(*ins));
        int *codes = calloc((size_t)n, sizeof(*codes));
        int *ready_codes = calloc((size_t)n, sizeof(*ready_codes));
        int k = 0;

        if (calls == NULL || ready == NULL || ins == NULL || codes == NULL || ready_codes == NULL) {
                for (int i = 0; i < n; i++) {
                        (void)run_call(srv, js[i], worker_state, 0);
                }
                goto out;
        }
        for (int i = 0; i < n; i++) {
                if ((codes[i] = call_open(srv, js[i], worker_state, &calls[i], &ins[i])) == KS_OK) {
                        ready[k++] = &calls[i];
                }
        }
        if (k > 0) {
                int64_t t0 = ks_mono_ns();
                srv->opts.group_run(srv->opts.service, ready, ready_codes, k);
                long long share = (long long)(ks_mono_ns() - t0) / k;
                for (int i = 0, r = 0; i < n; i++) {
                        if (r < k && ready[r] == &calls[i]) {
                                codes[i] = ready_codes[r++];
                                note_handler_time(metrics_of(srv, js[i]->method), share);
                        }
                }
                if (k > 1) {
                        ks_counter_add(srv->grouped_calls, (uint64_t)k);
                }
        }
        for (int i = 0; i < n; i++) {
                call_close(srv, js[i], &calls[i], ins[i], codes[i]);
        }
out:
        free(ready_codes);
        free(codes);
        free(ins);
        free(ready);
        free(calls);
}

/* On a worker: a finished job to the loop, which writes its reply. */
static void hand_back(ks_rpc_server *srv, job *j)
{
        pthread_mutex_lock(&srv->mu);
        bool first = srv->done.n == 0;
        jobs_push(&srv->done, j);
        srv->running--;
        pthread_mutex_unlock(&srv->mu);
        if (first) {
                event_active(srv->wake, EV_TIMEOUT, 0);
        }
}

/* On the loop: one call of here is done (answered, or handed to the workers). */
static void left_loop(ks_rpc_server *srv)
{
        pthread_mutex_lock(&srv->mu);
        srv->running--;
        pthread_mutex_unlock(&srv->mu);
}

/* Whether the loop may run a call now (inline_ready); else it goes to the workers. */
static bool loop_ready(ks_rpc_server *srv)
{
        return srv->opts.inline_ready == NULL || srv->opts.inline_ready(srv->opts.inline_ready_arg);
}

/* On the loop: the calls of here one after the other, each answered as soon as it ran. */
static void run_each(ks_rpc_server *srv, ks_fifo *here)
{
        job *j;
        while ((j = jobs_pop(here)) != NULL) {
                if (loop_ready(srv)) {
                        ks_counter_inc(srv->inline_calls);
                        (void)run_call(srv, j, NULL, 0); /* no batch step set: always packed */
                        send_reply(srv, j);
                } else {
                        to_workers(srv, j); /* counted there before it leaves running */
                }
                left_loop(srv);
        }
}

/* A pass's batched calls: those still to be answered, and the time the run spent in replays. */
typedef struct batch_pass {
        ks_rpc_server *srv;
        job **js; /* by call; NULL once answered (or never waiting) */
        int waiting;
        int64_t t0, t1;     /* the run's start and end (0 while it runs) */
        long long in_calls; /* ns of the run spent replaying the calls answered during it */
} batch_pass;

/* Call i, its read back from the batch: replayed, answered and its reply sent. */
static void answer_batched(batch_pass *p, ks_pg_batch *b, int i, bool ran)
{
        /* Its share of the run: the run's time without the replays, over its calls. */
        int64_t end = p->t1 != 0 ? p->t1 : ks_mono_ns();
        long long share = ((long long)(end - p->t0) - p->in_calls) / p->waiting;

        if (ran) {
                ks_pg_batch_replay(b, i);
        }
        (void)run_call(p->srv, p->js[i], NULL, share); /* replayed or alone: packed */
        ks_pg_batch_off();
        send_reply(p->srv, p->js[i]);
        left_loop(p->srv);
        p->js[i] = NULL;
}

/*
 * Call i's read is back while the run still waits for the later ones
 * (ks_pg_batch_on_ready): the call is answered now, its handler's work
 * beside PostgreSQL's on the later reads, when a connection is free for
 * the handler (the run holds one); else after the run, as the others.
 */
static void on_read_back(void *ctx, ks_pg_batch *b, int i)
{
        batch_pass *p = ctx;

        if (p->js[i] == NULL || !loop_ready(p->srv)) {
                return;
        }
        int64_t t = ks_mono_ns();
        answer_batched(p, b, i, true);
        p->in_calls += (long long)(ks_mono_ns() - t);
}

/*
 * On the loop: the calls of here with their reads in one round trip
 * (ks_pg.h, "Batched reads"). Each handler runs up to its read, which is
 * recorded (a call that reads nothing that way is answered at once); the
 * reads go to PostgreSQL together; each handler that recorded one runs
 * again and finds its results, as soon as they are back, while the server
 * runs the reads after it (on_read_back).
 */
static void run_batched(ks_rpc_server *srv, ks_fifo *here)
{
        int n = (int)here->n;
        batch_pass p = {.srv = srv, .js = calloc((size_t)n, sizeof(*p.js))};
        ks_pg_batch *b = NULL;

        if (p.js == NULL || ks_pg_batch_new(&b, n) != KS_OK) {
                free(p.js);
                run_each(srv, here);
                return;
        }
        for (int i = 0; i < n; i++) {
                job *j = jobs_pop(here);
                if (!loop_ready(srv)) {
                        to_workers(srv, j);
                        left_loop(srv);
                        continue;
                }
                ks_counter_inc(srv->inline_calls);
                ks_pg_batch_plan(b, i);
                bool packed = run_call(srv, j, NULL, 0);
                ks_pg_batch_off();
                if (packed) {
                        send_reply(srv, j);
                        left_loop(srv);
                } else {
                        p.js[i] = j;
                        p.waiting++;
                }
        }
        if (p.waiting > 0) {
                p.t0 = ks_mono_ns();
                ks_pg_batch_on_ready(b, on_read_back, &p);
                bool ran = srv->opts.batch_run(srv->opts.batch_run_arg, b) == KS_OK;
                p.t1 = ks_mono_ns();
                if (ran) {
                        ks_counter_add(srv->batched_reads, (uint64_t)ks_pg_batch_reads(b));
                }
                for (int i = 0; i < n; i++) {
                        if (p.js[i] != NULL) {
                                answer_batched(&p, b, i, ran);
                        }
                }
        }
        ks_pg_batch_free(b);
        free(p.js);
}

/*
 * On the loop, after a pass that read calls it may run: as many as their
 * handlers' averages say fit in INLINE_BUDGET_NS run here, each answered as
 * soon as it ran; the others go to the workers first, to run beside them.
 */
static void on_dispatch(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ks_rpc_server *srv = arg;
        ks_fifo here = {0};
        long long budget = INLINE_BUDGET_NS;
        job *j;

        pthread_mutex_lock(&srv->mu);
        ks_fifo batch = ks_fifo_take(&srv->pending);
        bool draining = atomic_load(&srv->draining);
        pthread_mutex_unlock(&srv->mu);
        while ((j = jobs_pop(&batch)) != NULL) {
                long long est = atomic_load(&metrics_of(srv, j->method)->handler_ns);
                if (!draining && est <= budget) {
                        budget -= est;
                        jobs_push(&here, j);
                } else {
                        to_workers(srv, j); /* refused there while draining */
                }
        }
        if (here.n == 0) {
                return;
        }
        pthread_mutex_lock(&srv->mu); /* held: drain() waits for them */
        srv->running += (int)here.n;
        pthread_mutex_unlock(&srv->mu);
        if (here.n > 1 && srv->opts.batch_run != NULL) {
                run_batched(srv, &here);
        } else {
                run_each(srv, &here);
        }
}

/* Whether j is a write of a tenant, kept to its tenant's turns. */
static bool takes_turn(const ks_rpc_server *srv, const job *j)
{
        const Keelson__Rpc__V1__CallerContext *c = j->req->caller;
        return srv->turns != NULL && (j->method->flags & KS_M_IDEMPOTENT) == 0 && c != NULL &&
               c->tenant_id != NULL && c->tenant_id[0] != '\0';
}

/*
 * Under mu: the oldest queued job a worker may run now, taken off the
 * queue, or NULL. A tenant's write whose turns are all running stays, in
 * its place, and the look goes on past it.
 */
static job *take_job(ks_rpc_server *srv)
{
        ks_fifo_link *prev = NULL;

        for (ks_fifo_link *l = srv->queue.head; l != NULL; prev = l, l = l->next) {
                job *j = KS_FIFO_ITEM(l, job, link);
                bool held = false;
                if (takes_turn(srv, j) &&
                    !ks_gate_try_enter(srv->turns, j->req->caller->tenant_id, &held)) {
                        j->passed_over = true;
                        continue;
                }
                if (held) {
                        snprintf(j->turn_key, sizeof(j->turn_key), "%s", j->req->caller->tenant_id);
                }
                ks_fifo_unlink(&srv->queue, prev, l);
                if (j->passed_over) {
                        ks_counter_inc(srv->turn_waits);
                }
                return j;
        }
        return NULL;
}

/*
 * Under mu: after j (a write holding its tenant's turn) was taken, the
 * calls of the same tenant and method queued behind it, oldest first, into
 * more (at most max), taken off the queue; how many. They run in j's turn,
 * in one group with it, when its method is KS_M_GROUPED and the service
 * runs groups.
 */
static int take_group(ks_rpc_server *srv, const job *j, job **more, int max)
{
        ks_fifo_link *prev = NULL, *l = srv->queue.head;
        int n = 0;

        if (j->turn_key[0] == '\0' || !(j->method->flags & KS_M_GROUPED) ||
            srv->opts.group_run == NULL) {
                return 0;
        }
        while (l != NULL && n < max) {
                job *g = KS_FIFO_ITEM(l, job, link);
                ks_fifo_link *next = l->next;
                if (g->method == j->method && takes_turn(srv, g) &&
                    strcmp(g->req->caller->tenant_id, j->turn_key) == 0) {
                        ks_fifo_unlink(&srv->queue, prev, l);
                        more[n++] = g;
                } else {
                        prev = l;
                }
                l = next;
        }
        return n;
}

/* A write's turn given back: a job of its tenant left queued may run now, on an idle worker. */
static void end_turn(ks_rpc_server *srv, job *j)
{
        if (j->turn_key[0] == '\0') {
                return;
        }
        pthread_mutex_lock(&srv->mu);
        ks_gate_leave(srv->turns, j->turn_key);
        j->turn_key[0] = '\0';
        if (srv->queue.n > 0) {
                pthread_cond_signal(&srv->cv);
        }
        pthread_mutex_unlock(&srv->mu);
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
        job **group = calloc((size_t)srv->opts.group_max + 1, sizeof(*group));
        if (group == NULL) {
                ks_log_error(NULL, "rpc worker initialisation failed", "{s:i}", "worker", wa.index);
                goto out;
        }
        for (;;) {
                job *j = NULL;
                pthread_mutex_lock(&srv->mu);
                while (!atomic_load(&srv->stopping) && (j = take_job(srv)) == NULL) {
                        pthread_cond_wait(&srv->cv, &srv->mu);
                }
                if (j == NULL) {
                        pthread_mutex_unlock(&srv->mu);
                        break;
                }
                group[0] = j;
                int n = 1 + take_group(srv, j, group + 1,
                                       srv->opts.group_max > 1 ? srv->opts.group_max - 1 : 0);
                srv->running += n;
                ks_gauge_set(srv->queue_depth, (int64_t)srv->queue.n);
                pthread_mutex_unlock(&srv->mu);
                if (n == 1) {
                        (void)run_call(srv, j, state, 0); /* no batch on a worker: always packed */
                } else {
                        run_group(srv, group, n, state);
                }
                end_turn(srv, j);
                for (int i = 0; i < n; i++) {
                        hand_back(srv, group[i]);
                }
        }
        free(group);
out:
        if (srv->opts.worker_fini != NULL) {
                srv->opts.worker_fini(srv->opts.service, state);
        }
        return NULL;
}

static int check_options(const ks_rpc_server_options *o)
{
        if (o->n_dial_urls < 1 || o->n_dial_urls > KS_BROKERS_MAX || o->n_methods < 1 ||
            o->workers < 1 || o->heavy_max < 0 || o->tenant_writers < 0 || o->group_max < 0 ||
            o->group_max > RPC_GROUP_MAX || (o->group_max > 1 && o->group_run == NULL) ||
            o->workers > RPC_WORKERS_MAX || o->queue_max < 1 ||
            o->max_inflight <= o->workers + o->queue_max || o->max_inflight > RPC_INFLIGHT_MAX) {
                ks_log_error(NULL, "rpc server options out of range", "{s:i,s:i,s:i,s:i}",
                             "workers", o->workers, "queue_max", o->queue_max, "max_inflight",
                             o->max_inflight, "dial_urls", o->n_dial_urls);
                return -1;
        }
        return 0;
}

/* The loop, its events and a dialer per broker; the loop does not run yet. */
static int open_loop(ks_rpc_server *srv)
{
        static const ks_sp_callbacks cb = {on_pipe_added, on_request, on_pipe_removed};
        if (ks_loop_new(&srv->loop) != KS_OK ||
            ks_sp_new(&srv->sp, ks_loop_base(srv->loop), RPC_RECV_MAX_BYTES, RPC_SEND_MAX_BYTES) !=
                KS_OK ||
            (srv->wake = event_new(ks_loop_base(srv->loop), -1, 0, on_wake, srv)) == NULL ||
            (srv->flush = event_new(ks_loop_base(srv->loop), -1, EV_PERSIST, on_flush, srv)) ==
                NULL ||
            (srv->dispatch = event_new(ks_loop_base(srv->loop), -1, 0, on_dispatch, srv)) == NULL ||
            (srv->notice = event_new(ks_loop_base(srv->loop), -1, 0, on_notice, srv)) == NULL) {
                return KS_INTERNAL;
        }
        for (int i = 0; i < srv->opts.n_dial_urls; i++) {
                int rv = ks_sp_dial(srv->sp, srv->opts.dial_urls[i], KS_SP_REP0, KS_SP_REQ0, &cb,
                                    srv, &srv->dialers[i]);
                if (rv != KS_OK) {
                        ks_log_error(NULL, "cannot dial broker", "{s:s}", "url",
                                     srv->opts.dial_urls[i]);
                        return rv;
                }
        }
        return KS_OK;
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
        srv->inline_calls = ks_counter_get(
            reg, "keelson_rpc_inline_total",
            "Calls run on the replica's I/O loop instead of a worker (short reads).", labels);
        srv->batched_reads = ks_counter_get(
            reg, "keelson_rpc_batched_reads_total",
            "Short reads whose database read went in one round trip with others of the same pass"
            " of the loop.",
            labels);
        srv->turn_waits = ks_counter_get(
            reg, "keelson_rpc_tenant_turn_waits_total",
            "Writes that stayed queued while later calls were taken, their tenant's turns"
            " (tenant_writers) all running.",
            labels);
        srv->grouped_calls = ks_counter_get(
            reg, "keelson_rpc_grouped_calls_total",
            "Writes of one tenant run together with others of the same method (a group of two or"
            " more).",
            labels);
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
        pthread_mutex_init(&srv->mu, NULL);
        pthread_cond_init(&srv->cv, NULL);
        srv->mm = calloc(opts->n_methods, sizeof(method_metrics));
        if (srv->mm == NULL) {
                ks_rpc_server_stop(srv);
                return KS_INTERNAL;
        }
        init_metrics(srv);
        if (opts->tenant_writers > 0 &&
            ks_gate_new(&srv->turns, opts->tenant_writers, (uint32_t)opts->workers) != KS_OK) {
                ks_rpc_server_stop(srv);
                return KS_INTERNAL;
        }
        int rv = open_loop(srv);
        if (rv != KS_OK) {
                ks_rpc_server_stop(srv);
                return rv;
        }
        if (start_workers(srv) != 0 || ks_loop_start(srv->loop) != KS_OK) {
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

/* No call queued, running, or waiting to be written. */
static bool idle(ks_rpc_server *srv)
{
        pthread_mutex_lock(&srv->mu);
        bool none = srv->queue.n == 0 && srv->running == 0 && srv->done.n == 0 &&
                    srv->replying == 0 && srv->pending.n == 0;
        pthread_mutex_unlock(&srv->mu);
        return none;
}

/*
 * The first part of a stop: every broker is told "drain" and answers
 * "drained" (ks_broker_ctl.h), after which it sends this replica no new
 * call; until then calls are served as ever, since the brokers still send
 * them. A broker that does not answer within KS_BROKER_CTL_WAIT_MS (one that
 * does not know the message) is waited for no longer.
 */
static void leave_rotation(ks_rpc_server *srv)
{
        int64_t until_ms = ks_mono_ms() + KS_BROKER_CTL_WAIT_MS;
        struct timespec pause = {0, DRAIN_POLL_MS * 1000000L};

        atomic_store(&srv->leaving, true);
        event_active(srv->notice, EV_TIMEOUT, 0);
        while (!atomic_load(&srv->told) || atomic_load(&srv->awaiting) > 0) {
                if (ks_mono_ms() >= until_ms) {
                        ks_log_warn(NULL, "rpc drain: a broker did not confirm the notice",
                                    "{s:i,s:i}", "brokers_unconfirmed", atomic_load(&srv->awaiting),
                                    "wait_ms", KS_BROKER_CTL_WAIT_MS);
                        return;
                }
                nanosleep(&pause, NULL);
        }
}

/*
 * The second part: what this replica holds is finished and answered (the
 * workers keep taking queued calls), while what still arrives (from a
 * broker that did not confirm, or one that dialled in since) is answered
 * unavailable at once, nothing done, so that its caller sends it again
 * instead of waiting out its deadline. Then the replies written must have
 * left: the flush timer measures what the brokers have not taken, and the
 * drain ends on a look taken after the last reply was written that finds
 * nothing.
 */
static void drain(ks_rpc_server *srv)
{
        int64_t until_ms = ks_mono_ms() + DRAIN_MS;
        struct timespec pause = {0, DRAIN_POLL_MS * 1000000L};
        struct timeval every = {0, DRAIN_POLL_MS * 1000};

        leave_rotation(srv);
        pthread_mutex_lock(&srv->mu);
        atomic_store(&srv->draining, true);
        pthread_mutex_unlock(&srv->mu);
        event_add(srv->flush, &every);
        unsigned since = 0;
        bool was_idle = false;
        for (;;) {
                if (!was_idle && idle(srv)) {
                        was_idle = true;
                        since = atomic_load(&srv->flush_looks);
                }
                if (was_idle && atomic_load(&srv->flush_looks) > since + 1 &&
                    atomic_load(&srv->unflushed) == 0) {
                        return;
                }
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
        bool served = srv->n_threads > 0 && srv->loop != NULL;
        int64_t drain_from_ms = ks_mono_ms(), drain_ms = 0;

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
        ks_loop_stop(srv->loop);
        if (served) {
                ks_log_info(NULL, "rpc server stopped", "{s:i, s:i, s:i}", "drain_ms",
                            (int)drain_ms, "refused_while_draining",
                            atomic_load(&srv->refused_draining), "dropped_at_close",
                            (int)(srv->queue.n + srv->done.n));
        }
        job *j;
        while ((j = jobs_pop(&srv->queue)) != NULL) {
                job_free(j);
        }
        while ((j = jobs_pop(&srv->done)) != NULL) {
                job_free(j);
        }
        while ((j = jobs_pop(&srv->pending)) != NULL) {
                job_free(j);
        }
        if (srv->dispatch != NULL) {
                event_free(srv->dispatch);
        }
        if (srv->notice != NULL) {
                event_free(srv->notice);
        }
        if (srv->flush != NULL) {
                event_free(srv->flush);
        }
        if (srv->wake != NULL) {
                event_free(srv->wake);
        }
        ks_sp_free(srv->sp);
        ks_loop_free(srv->loop);
        ks_gate_free(srv->turns); /* the workers are gone, and every turn with them */
        free(srv->threads);
        free(srv->mm);
        pthread_cond_destroy(&srv->cv);
        pthread_mutex_destroy(&srv->mu);
        free(srv);
}
