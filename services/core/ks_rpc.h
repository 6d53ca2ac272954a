/*
 * ks_rpc: request/reply between the gateway and the services, protobuf in
 * messages of nng's wire protocol, through the broker.
 *
 * Server. A replica dials the back of its service on every broker, from a
 * loop of its own that speaks nng's rep protocol (ks_sp). Each request is
 * checked on that loop (envelope, method, deadline) and put on a bounded
 * work queue that a fixed pool of worker threads drains. A full queue is
 * answered at once with RESOURCE_EXHAUSTED, an expired deadline with
 * DEADLINE_EXCEEDED, an unknown method with UNIMPLEMENTED: nothing queues
 * without bound. Handlers run on the worker threads and may block
 * (PostgreSQL); each worker has its own state. A worker hands its reply
 * back to the loop, which writes it.
 *
 * Client. A loop of the client's own dials the front of a service on every
 * broker and speaks nng's req protocol there (ks_req.h); any number of
 * threads may call at once (bounded by max_inflight). A call carries a
 * deadline; it is resent only when the caller asks for it per call
 * (idempotent methods only: a resent write would be a duplicate), or when
 * the broker it went to is lost (as nng's req does).
 */
#ifndef KS_RPC_H
#define KS_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envelope.pb-c.h"
#include "ks_clock.h" /* ks_now_ms: the wall clock deadlines are read on */
#include "ks_code.h"
#include "ks_method.h"
#include "ks_metrics.h"

typedef struct ks_pg_batch ks_pg_batch; /* ks_pg.h */

#define KS_MESSAGE_MAX     512       /* reply message bytes */
#define KS_RPC_PAYLOAD_MAX (4 << 20) /* payload bytes, either way */
/*
 * Elements of any one repeated field of a request: the ledger's batch and
 * lookup maximum (TigerBeetle's 8,190). The gateway refuses a request past
 * it before decoding; a service may allow fewer (KEELSON_LEDGER_BATCH_MAX).
 */
#define KS_RPC_ITEMS_MAX 8190

/* What a handler sees. */
struct ks_call {
        const ks_method *method;
        const char *request_id;      /* never NULL */
        const ks_caller *caller;     /* never NULL; authenticated may be false */
        int64_t deadline_unix_ms;    /* 0 = none */
        const ProtobufCMessage *in;  /* the unpacked request, of method->input */
        void *worker_state;          /* from ks_rpc_server_options.worker_init */
        void *service;               /* ks_rpc_server_options.service */
        const char *idempotency_key; /* never NULL; "" when the client sent none */
        /* set by the handler: */
        char message[KS_MESSAGE_MAX];
        uint8_t *out_payload;
        size_t out_len;
        bool replayed; /* the reply is a stored one, for a repeated idempotency key */
};

/*
 * Packs the response (of method->output) into the call. Call it once before
 * returning KS_OK; a handler that returns KS_OK without it replies with an
 * empty message. Returns KS_OK or KS_INTERNAL.
 */
int ks_call_reply(ks_call *call, const ProtobufCMessage *response) KS_MUST_CHECK;

/*
 * An allocation failed: logged with the request id, answered
 * RESOURCE_EXHAUSTED "out of memory, retry later" (a replica short of memory
 * is a transient condition a client may retry, as gRPC's own memory quota
 * answers). Every service answers it so.
 */
int ks_call_oom(ks_call *call) KS_MUST_CHECK;

/* Sets call->message (printf-style) and returns code, for "return ks_call_fail(...)". */
int ks_call_fail(ks_call *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef struct ks_rpc_server ks_rpc_server;

typedef struct ks_rpc_server_options {
        const char *service_name;     /* for logs and metrics: "auth" */
        const char *const *dial_urls; /* the back of the service on each broker */
        int n_dial_urls;
        const ks_method *methods;
        size_t n_methods;
        int workers;      /* worker threads */
        int queue_max;    /* work queue capacity */
        int max_inflight; /* calls held at once (queued, running, reply not yet written);
                           * > workers + queue_max; more get RESOURCE_EXHAUSTED */
        /* KS_M_HEAVY calls queued or running at once; more are refused with
         * RESOURCE_EXHAUSTED on arrival (0: no bound of their own). */
        int heavy_max;
        const char *heavy_message;  /* the refusal's message (NULL: a generic one) */
        ks_counter *heavy_rejected; /* counts those refusals too (NULL: none) */
        /*
         * Check each method's permission (its methods.def row) against the
         * role in the caller context, before the handler: permission_denied
         * "your role (admin) lacks billing.manage". For a service that trusts
         * that role; auth reads the role again itself and leaves this off.
         */
        bool role_permission;
        void *service; /* handed to handlers as call->service */
        /* optional per-worker state, made on the worker's thread: */
        int (*worker_init)(void *service, int index, void **state);
        void (*worker_fini)(void *service, void *state);
        /*
         * Optional: asked on the loop before it runs a short read itself
         * (ks_rpc_server.c); false hands the call to a worker instead. For
         * what the loop must never wait for: a free database connection.
         */
        bool (*inline_ready)(void *arg);
        void *inline_ready_arg;
        /*
         * Optional: the reads of the calls one pass of the loop runs, sent
         * together (ks_pg.h, "Batched reads"): runs what they recorded, on a
         * connection of its own choosing; KS_OK, or each then reads alone.
         */
        int (*batch_run)(void *arg, ks_pg_batch *batch);
        void *batch_run_arg;
        /*
         * Optional (0: none): calls of one tenant (the caller context's
         * tenant_id) of a method not marked idempotent that the workers run
         * at once. The tenant's further writes stay queued, in the order
         * they came, while the workers take other calls
         * (ks_rpc_server.c, "Tenants' turns").
         */
        int tenant_writers;
        /*
         * Optional, with tenant_writers: runs calls of one tenant and one
         * KS_M_GROUPED method together (ks_rpc_server.c, "Groups"), calls[i]
         * answered with codes[i] as a handler's return would be. At most
         * group_max calls at once (< 2: no groups).
         */
        void (*group_run)(void *service, ks_call *const *calls, int *codes, int n);
        int group_max;
} ks_rpc_server_options;

int ks_rpc_server_start(ks_rpc_server **out, const ks_rpc_server_options *opts) KS_MUST_CHECK;
/* Connected pipes to brokers (readiness: > 0). */
int ks_rpc_server_connected(const ks_rpc_server *s);
/*
 * Drains, then stops: every call queued or running finishes and is answered
 * (at most 10 s), a call arriving meanwhile is answered unavailable at once
 * (nothing done); then joins the workers, closes the socket, frees.
 */
void ks_rpc_server_stop(ks_rpc_server *s);

typedef struct ks_rpc_client ks_rpc_client;

typedef struct ks_rpc_client_options {
        const char *const *dial_urls; /* the front of one service on each broker */
        int n_dial_urls;
        int max_inflight;       /* concurrent calls; more get RESOURCE_EXHAUSTED */
        int default_timeout_ms; /* when a call has no deadline */
} ks_rpc_client_options;

int ks_rpc_client_new(ks_rpc_client **out, const ks_rpc_client_options *opts) KS_MUST_CHECK;
/*
 * A client of one service (a ks_service_id) dialling its front on every
 * broker of broker_bases (n base URLs, "tcp://host:port" or "ipc:///path"). Returns KS_OK, or
 * KS_INVALID_ARGUMENT for a malformed base or service, or what
 * ks_rpc_client_new returns.
 */
int ks_rpc_client_of(ks_rpc_client **out, const char *const *broker_bases, int n, int service,
                     int max_inflight, int default_timeout_ms) KS_MUST_CHECK;
void ks_rpc_client_free(ks_rpc_client *c);
int ks_rpc_client_connected(const ks_rpc_client *c);

/* A reply as the caller receives it. ks_rpc_result_clear frees the payload. */
typedef struct ks_rpc_result {
        int code;
        char message[KS_MESSAGE_MAX];
        uint8_t *payload;
        size_t payload_len;
        bool replayed; /* Reply.replayed: a stored reply of an idempotency key */
} ks_rpc_result;

void ks_rpc_result_clear(ks_rpc_result *r);
/*
 * A Reply envelope's bytes into res (its payload malloc'd): a malformed
 * one, or no memory for its payload, is KS_INTERNAL with a message.
 */
void ks_rpc_reply_read(const uint8_t *p, size_t len, ks_rpc_result *res);

typedef struct ks_rpc_call_args {
        const char *method;
        const char *request_id;
        const ks_caller *caller;  /* may be NULL: unauthenticated */
        int64_t deadline_unix_ms; /* 0: now + default_timeout_ms */
        const uint8_t *payload;
        size_t payload_len;
        const char *idempotency_key; /* NULL or "": none */
        /*
         * 0: never resend (the default, right for writes). > 0: resend an
         * unanswered call after this many ms, so a call that was in flight to a
         * replica that died is answered by another: only for idempotent methods.
         */
        int resend_ms;
} ks_rpc_call_args;

/* The Request envelope of a call (pointing into a): what every client sends. */
void ks_rpc_request_of(const ks_rpc_call_args *a, int64_t deadline_unix_ms,
                       Keelson__Rpc__V1__Request *req);

/*
 * Blocking call from any thread. Transport failures become codes:
 * no broker connected -> UNAVAILABLE at once; timeout, or no replica behind
 * the broker within the deadline -> DEADLINE_EXCEEDED; too many calls in
 * flight -> RESOURCE_EXHAUSTED.
 * Always fills *res (clear it afterwards); returns res->code.
 */
int ks_rpc_call(ks_rpc_client *c, const ks_rpc_call_args *args, ks_rpc_result *res) KS_MUST_CHECK;

/*
 * Asynchronous call: done(arg, res) runs once on the client's loop thread (or,
 * for calls still held when the client is freed, on the freeing thread) when the reply
 * arrives or the call fails; res is only valid during done (take the payload
 * by setting res->payload = NULL after copying the pointer). Returns 0 when
 * the call was started, else a code (done is then not called): UNAVAILABLE
 * when no broker is connected, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED.
 */
typedef void (*ks_rpc_done_fn)(void *arg, ks_rpc_result *res);
int ks_rpc_call_async(ks_rpc_client *c, const ks_rpc_call_args *args, ks_rpc_done_fn done,
                      void *arg) KS_MUST_CHECK;

#endif
