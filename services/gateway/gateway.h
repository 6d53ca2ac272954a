/*
 * keelson-gateway internals: the HTTP front door speaking the Connect
 * protocol's unary RPCs over HTTP/1.1 (libevent 2.1 evhttp, one thread), and
 * forwarding each call through the broker with the asynchronous ks_rpc
 * client.
 *
 *   main.c      configuration, wiring, exit status
 *   server.c    evhttp setup, request intake, limits, own endpoints, signals
 *   handler.c   one RPC from intake to reply: resolve the caller, call, reply
 *   connect.c   Connect protocol rules: content types, headers, error JSON
 *   routes.c    the route table, built from protobuf-c service descriptors
 *   upstream.c  one rpc client per service and the hop from nng's threads
 *               back onto the libevent thread
 */
#ifndef GATEWAY_H
#define GATEWAY_H

#include <event2/event.h>
#include <event2/http.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"
#include "ks_metrics.h"
#include "ks_rpc.h"
#include "ks_topology.h"

/* ---- configuration ------------------------------------------------------ */

typedef struct gw_config {
        char *host;
        int64_t port;
        char *broker_url;
        char *log_level;
        int64_t body_max_bytes;
        int64_t headers_max_bytes;
        int64_t timeout_ms;   /* default and maximum deadline of an upstream call */
        int64_t max_inflight; /* per upstream service */
        int64_t io_timeout_s; /* reading a request, writing a reply, idle keep-alive */
        int64_t drain_ms;     /* after SIGTERM: how long in-flight calls may finish */
        int64_t resend_ms;    /* resend an unanswered idempotent call after this; 0 = never */
} gw_config;

/* ---- connect.c: the Connect protocol (unary) ---------------------------- */

#define GW_REQUEST_ID_MAX     64  /* X-Request-Id: [A-Za-z0-9._-]{1,64} */
#define GW_TOKEN_MAX          512 /* bearer tokens; longer ones are refused unread */
#define GW_TIMEOUT_DIGITS_MAX 10

typedef enum gw_codec { GW_CODEC_JSON, GW_CODEC_PROTO } gw_codec;

/* The codec of a Content-Type ("application/json; charset=utf-8"); -1 if none. */
int gw_connect_codec(const char *content_type, gw_codec *out);
/* The Content-Type a successful reply carries for a codec. */
const char *gw_codec_content_type(gw_codec codec);
/* Accepted: no Connect-Protocol-Version header, or exactly "1". */
bool gw_connect_version_ok(const char *value);
/*
 * Connect-Timeout-Ms: NULL -> 0 and *has = false; 1..10 ASCII digits -> the
 * value and *has = true. Returns 0, or -1 for anything else.
 */
int gw_connect_timeout(const char *value, int64_t *ms, bool *has);
/* Accepted: no Content-Encoding header, or "identity". */
bool gw_identity_encoding(const char *value);
/* True when s is [A-Za-z0-9._-]{1,64}. */
bool gw_request_id_valid(const char *s);
/* The client's X-Request-Id when valid, else a fresh uuid v4. */
void gw_connect_request_id(struct evhttp_request *req, char out[GW_REQUEST_ID_MAX + 1]);
/*
 * Finds the token of "Authorization: Bearer <token>" (RFC 6750 b64token, at
 * most GW_TOKEN_MAX bytes). Returns 0 with *tok pointing into value, or -1.
 */
int gw_bearer_token(const char *value, const char **tok, size_t *len);
/* {"code":"<name>","message":"<message>"}: malloc'd into *out. Returns 0 or -1. */
int gw_error_json(int code, const char *message, char **out, size_t *len);

/*
 * Writes a reply with X-Request-Id (request_id may be NULL) and hands the
 * request back to evhttp, which frees it once written: req must not be used
 * afterwards.
 */
void gw_send(struct evhttp_request *req, int status, const char *content_type, const void *body,
             size_t len, const char *request_id);
/* A Connect error reply: JSON body, Content-Type application/json. */
void gw_send_error(struct evhttp_request *req, int status, int code, const char *message,
                   const char *request_id);

/* ---- routes.c ----------------------------------------------------------- */

#define GW_PATH_MAX 160

typedef struct gw_route {
        char path[GW_PATH_MAX]; /* "/keelson.auth.v1.AuthService/Login", or "unmatched" */
        const char *method;     /* path + 1: the envelope's method name */
        int service;            /* ks_service_id; -1 for "unmatched" */
        unsigned flags;         /* KS_M_PUBLIC, ... */
        const ProtobufCMessageDescriptor *input;
        const ProtobufCMessageDescriptor *output;
        /* Metrics, owned by the default registry; counters are made on first use. */
        ks_histogram *latency;
        ks_counter *requests[KS_CODE_COUNT];
} gw_route;

typedef struct gw_routes gw_routes;

int gw_routes_new(gw_routes **out);
void gw_routes_free(gw_routes *r);
/* The route of an exact, case-sensitive path; NULL when none. */
gw_route *gw_routes_find(gw_routes *r, const char *path);
/* The pseudo-route every unknown path is counted under. */
gw_route *gw_routes_unmatched(gw_routes *r);
/* Iteration, for wiring one upstream client per service that has routes. */
size_t gw_routes_count(const gw_routes *r);
const gw_route *gw_routes_at(const gw_routes *r, size_t i);
/* Counts one finished request of the route with its code and duration. */
void gw_route_observe(gw_route *route, int code, double seconds);

/* ---- upstream.c --------------------------------------------------------- */

/*
 * One upstream call in flight. Embedded in the caller's request state; the
 * upstream writes result on an nng thread, then hands the call back on the
 * libevent thread through the completion function. Between a successful
 * gw_upstream_call and that hand-back the caller must not free the call.
 */
typedef struct gw_upstream gw_upstream;

typedef struct gw_call {
        struct gw_call *next; /* completion queue link */
        gw_upstream *owner;
        ks_rpc_result result;
} gw_call;

typedef void (*gw_complete_fn)(gw_call *call, void *arg);

/*
 * Makes one rpc client per service that has routes, plus auth (for
 * ResolveContext), dialling the front of that service on every broker.
 * complete(call, arg) runs on base's thread for every call started.
 */
int gw_upstream_new(gw_upstream **out, struct event_base *base, const gw_config *cfg,
                    const gw_routes *routes, gw_complete_fn complete, void *arg);
/*
 * Stops every client (calls in flight end with UNAVAILABLE), hands every
 * call still queued to complete, then frees. Accepts NULL.
 */
void gw_upstream_free(gw_upstream *u);
/* Starts a call; returns KS_OK (complete will run once), else a code. */
int gw_upstream_call(gw_upstream *u, int service, const ks_rpc_call_args *args, gw_call *call);
/* Connected broker pipes of a service's client (0 when it has none). */
int gw_upstream_connected(const gw_upstream *u, int service);

/* ---- server.c and handler.c: the server and one request's state -------- */

#define GW_IP_MAX 64

typedef struct gw_server gw_server;

typedef enum gw_stage {
        GW_STAGE_INTAKE,    /* checking headers and body, on the libevent thread */
        GW_STAGE_RESOLVING, /* ResolveContext in flight */
        GW_STAGE_CALLING,   /* the method itself in flight */
} gw_stage;

/*
 * Everything one request needs from intake to reply, in one allocation that
 * every path frees exactly once (gw_request_finish). See handler.c for how it
 * outlives, or not, the evhttp_request.
 */
typedef struct gw_request {
        gw_call call; /* the upstream call in flight */
        gw_server *srv;
        struct evhttp_request *req; /* NULL once evhttp has let go of it */
        gw_route *route;
        struct gw_request *prev, *next; /* the server's list of requests waiting upstream */
        gw_stage stage;
        gw_codec codec;
        int64_t start_ns; /* CLOCK_MONOTONIC */
        int64_t deadline_unix_ms;
        char request_id[GW_REQUEST_ID_MAX + 1];
        char client_ip[GW_IP_MAX];
        uint8_t *payload; /* the method's request message, packed */
        size_t payload_len;
        uint8_t *auth_payload; /* ResolveContextRequest: holds the token, wiped after use */
        size_t auth_payload_len;
        ProtobufCMessage *resolved; /* ResolveContextResponse, backing caller's strings */
        ks_caller caller;
} gw_request;

struct gw_server {
        const gw_config *cfg;
        struct event_base *base;
        struct evhttp *http;
        struct evhttp_bound_socket *bound;
        struct event *sigint_ev;
        struct event *sigterm_ev;
        struct event *drain_ev;
        gw_routes *routes;
        gw_upstream *up;
        gw_request *waiting; /* requests with an upstream call in flight */
        int64_t n_waiting;
        int port;
        bool draining; /* a signal came: no new connections, /readyz says 503 */
        bool closing;  /* tearing down: completions free their request, nothing more */
        ks_gauge *inflight;
        ks_counter *upstream_errors[KS_SVC_COUNT][KS_CODE_COUNT];
};

/* Binds host:port and sets everything up; gw_server_port tells the port bound. */
int gw_server_new(gw_server **out, const gw_config *cfg);
int gw_server_port(const gw_server *s);
/* Serves until SIGINT/SIGTERM (and the drain after it). Returns 0 or -1. */
int gw_server_run(gw_server *s);
void gw_server_free(gw_server *s);
/* Bookkeeping of requests waiting on an upstream call (handler.c calls these). */
void gw_server_wait_begin(gw_server *s, gw_request *g);
void gw_server_wait_end(gw_server *s, gw_request *g);
/* While draining: stops the loop (after a flush) once nothing waits upstream. */
void gw_server_drain_check(gw_server *s);
/* Counts a call that ended with a fault of the service or the transport. */
void gw_server_upstream_error(gw_server *s, int service, int code);

/* ---- handler.c ---------------------------------------------------------- */

/* Allocates the state of a request that is not one of the gateway's own pages. */
gw_request *gw_request_new(gw_server *s, struct evhttp_request *req, gw_route *route,
                           const char *request_id, int64_t start_ns);
/* Replies with a Connect error (status from the code unless given), counts, logs, frees. */
void gw_request_fail(gw_request *g, int status, int code, const char *message);
/* Checks the Connect headers and the body, then starts the upstream call(s). */
void gw_rpc_begin(gw_request *g);
/* The upstream completion function: runs on the libevent thread. */
void gw_rpc_complete(gw_call *call, void *arg);
/* Monotonic clock in nanoseconds. */
int64_t gw_now_ns(void);

#endif
