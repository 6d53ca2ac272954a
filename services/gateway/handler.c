/*
 * One RPC from intake to reply: check the Connect headers and the body,
 * resolve the caller (ResolveContext on auth) unless the method is public,
 * call the method, translate the reply.
 *
 * Who owns what, and when (front.h):
 *
 * 1. The front calls gw_handler_serve once a request is complete, and reads
 *    no further request from that connection until this one is answered.
 *    The gw_req stays valid until gw_send (gw_req_reply), which frees it. So:
 *    every path calls gw_send at most once per request and sets g->req =
 *    NULL right after, and nothing touches g->req once it is NULL.
 *
 * 2. While an upstream call is in flight the connection may go away
 *    without our reply: the client closes it, a write fails, or the front is
 *    freed at shutdown. The front then runs the request's cancel callback,
 *    which points at g while g waits (set in wait_begin, cleared in finish
 *    before replying, so it can never see a freed g), and frees the gw_req.
 *    The callback sets g->req = NULL; when the upstream answers, the reply is
 *    dropped (counted as canceled) and g is freed.
 *
 * 3. g is freed only on the libevent thread and never while an upstream call
 *    is in flight: from a successful gw_upstream_call until the upstream
 *    hands the call back (gw_handler_complete), g->call belongs to the upstream.
 *    At shutdown the upstream hands back every call before it is freed.
 *
 * 4. The same holds while a rate-limit decision is in flight in Redis
 *    (GW_STAGE_LIMITING): g counts as in flight (inflight.c) with the cancel
 *    callback set, and the decision's completion (on the loop) continues or
 *    frees it. At shutdown every decision in flight completes (locally)
 *    before the rate limiter is freed.
 *
 * The path of a request (each step may end it with an error):
 *   header checks -> public method: rate limit (auth scope) -> body -> call
 *                   -> else bearer token -> context cache hit, or
 *                      rate limit (resolve scope, per client address)
 *                      -> ResolveContext (and fill the cache)
 *                   -> rate limit (api scope) -> body -> call -> reply (gzip)
 *
 * The body is decoded only at "body" (decode.c, within the messages'
 * limits): a caller without a valid token, or over its rate limit, costs
 * the gateway no decoding at all.
 *
 * Services never see a caller built from client input: the caller is either
 * unauthenticated (public methods, and a KS_M_CALLER_OPTIONAL method whose
 * token did not resolve) or copied field by field from the
 * ResolveContext reply (directly or through the cache); the only other
 * field, client_ip, is the socket peer or what trusted proxies vouch for.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cache.h"
#include "clientip.h"
#include "compress.h"
#include "config.h"
#include "connect.h"
#include "console_session.h"
#include "decode.h"
#include "decodepool.h"
#include "front.h"
#include "cors.h"
#include "grpc.h"
#include "grpcweb.h"
#include "handler.h"
#include "health.h"
#include "hub.h"
#include "grpc/health/v1/health.pb-c.h"
#include "keelson/events/v1/event_service.pb-c.h"
#include "ks_arena.h"
#include "ks_perms.h"
#include "inflight.h"
#include "intake.h"
#include "keelson/auth/v1/auth.pb-c.h"
#include "ks_clock.h"
#include "ks_crypto.h"
#include "ks_json.h"
#include "ks_log.h"
#include "ks_metrics.h"
#include "ks_topology.h"
#include "ratelimit.h"
#include "reflection.h"
#include "routes.h"
#include "rpcstream.h"
#include "upstream.h"
#include "watch.h"
#include "wire.h"

#define JSON_ERR_MAX     256
#define SUBSCRIBE_METHOD "keelson.events.v1.EventService/Subscribe"
#define WATCH_METHOD     "grpc.health.v1.Health/Watch"
/* A reflection stream's answers its client has not taken, at most (then it is reset). */
#define REFLECTION_PENDING_MAX (4u << 20)
#define NS_PER_S               1000000000.0
#define NS_PER_MS              1000000
#define XFF_LINES_MAX          16 /* X-Forwarded-For header lines considered (the last ones) */
#define UPSTREAM_ERRORS_NAME   "keelson_gateway_upstream_errors_total"
#define UPSTREAM_ERRORS_HELP   "Upstream calls that ended with a fault of the service or transport"

struct gw_handler {
        const gw_handler_env *env;
        ks_counter *slow_requests;
        ks_counter *upstream_errors[KS_SVC_COUNT][KS_CODE_COUNT]; /* made on first use */
};

typedef enum gw_stage {
        GW_STAGE_INTAKE,    /* checking headers and body, on the libevent thread */
        GW_STAGE_RESOLVING, /* ResolveContext in flight */
        GW_STAGE_LIMITING,  /* a rate-limit decision in flight (Redis) */
        GW_STAGE_DECODING,  /* the body on a decode thread (decodepool.c) */
        GW_STAGE_CALLING,   /* the method itself in flight */
} gw_stage;

/*
 * Everything one request needs from intake to reply, in one allocation that
 * every path frees exactly once (finish, or request_free at shutdown). See
 * the top for how it outlives, or not, the gw_req.
 */
typedef struct gw_request {
        gw_call call; /* the upstream call in flight */
        gw_handler *h;
        gw_req *req; /* NULL once answered, or once the client is gone */
        gw_route *route;
        gw_stage stage;
        gw_codec codec;
        bool grpc;                 /* framed messages, a status after them: the gRPC family, or
                                    * the Connect protocol's streaming (wire.h) */
        gw_wire wire;              /* which of them, when grpc */
        gw_grpc_encoding grpc_enc; /* the request's grpc-encoding */
        bool quiet;                /* no "request failed" line (rate-limit refusals) */
        int64_t start_ns;          /* CLOCK_MONOTONIC */
        int64_t deadline_unix_ms;
        char request_id[GW_REQUEST_ID_MAX + 1];
        char idempotency_key[GW_IDEMPOTENCY_KEY_MAX + 1]; /* "" when none */
        char client_ip[GW_IP_MAX];
        uint8_t *payload; /* the method's request message, packed */
        size_t payload_len;
        uint8_t *auth_payload; /* ResolveContextRequest: holds the token, wiped after use */
        size_t auth_payload_len;
        uint8_t token_sha[32];     /* SHA-256 of the bearer token: the cache key */
        uint64_t cache_generation; /* the cache's, when the token went to be resolved */
        gw_context ctx;            /* the resolved caller; caller's strings point here */
        ks_caller caller;
        gw_limit_wait limit;
        gw_decode_job decode;     /* the body, while a decode thread has it */
        struct refl_stream *refl; /* a reflection stream's state, while it is open */
        /* A method the gateway answers itself once the caller is known and limited,
         * in place of the upstream call (EventService/Subscribe). */
        void (*local)(struct gw_request *g);
} gw_request;

_Static_assert(offsetof(gw_request, call) == 0, "gw_handler_complete casts a call to its request");

static const uint8_t empty_bytes[1] = {0}; /* unpack wants a pointer even for 0 bytes */

/* The client address of a request: its peer, or X-Forwarded-For through trusted proxies. */
static void request_client_ip(const gw_proxies *p, const gw_req *req, char out[GW_IP_MAX])
{
        const char *xff[XFF_LINES_MAX];
        /* the last ones: the right end counts */
        size_t n = p->n > 0 ? gw_req_header_last(req, "X-Forwarded-For", xff, XFF_LINES_MAX) : 0;
        gw_client_ip(p, gw_req_peer(req), xff, (int)n, out);
}

static gw_request *request_new(gw_handler *h, gw_req *req, gw_route *route, const char *request_id,
                               int64_t start_ns)
{
        gw_request *g = calloc(1, sizeof(*g));
        if (g == NULL) {
                return NULL;
        }
        g->h = h;
        g->req = req;
        g->route = route;
        g->start_ns = start_ns;
        g->stage = GW_STAGE_INTAKE;
        snprintf(g->request_id, sizeof(g->request_id), "%s", request_id);
        request_client_ip(&h->env->cfg->rate.proxies, req, g->client_ip);
        keelson__rpc__v1__caller_context__init(&g->caller);
        g->caller.client_ip = g->client_ip;
        return g;
}

static void wipe_auth_payload(gw_request *g)
{
        if (g->auth_payload != NULL) {
                explicit_bzero(g->auth_payload, g->auth_payload_len); /* holds the token */
                free(g->auth_payload);
                g->auth_payload = NULL;
                g->auth_payload_len = 0;
        }
}

/* A reflection stream: its messages as they come, and what it was sent. */
typedef struct refl_stream {
        gw_grpc_reader *rd;
        gw_reflection_sent sent;
} refl_stream;

static void request_free(gw_request *g)
{
        if (g->refl != NULL) {
                gw_grpc_reader_free(g->refl->rd);
                free(g->refl);
        }
        wipe_auth_payload(g);
        free(g->payload);
        ks_rpc_result_clear(&g->call.result);
        explicit_bzero(g->token_sha, sizeof(g->token_sha));
        free(g);
}

/* Route pattern, status, code and duration only: never a token, body, query or id. */
static void log_failure(const gw_request *g, int status, int code, int64_t duration_ns)
{
        ks_log(status >= 500 ? KS_LOG_WARN : KS_LOG_INFO, g->request_id, "request failed",
               "{s:s,s:i,s:s,s:I}", "route", g->route->path, "status", status, "code",
               ks_code_name(code), "duration_us", (json_int_t)(duration_ns / 1000));
}

static void add_header(gw_request *g, const char *name, const char *value)
{
        if (g->req != NULL) {
                gw_req_add_header(g->req, name, value);
        }
}

/* Over the threshold: route pattern, status and duration only (no id of any kind). */
static void log_slow(const gw_request *g, int status, int64_t duration_ns)
{
        int64_t slow_ms = g->h->env->cfg->slow_ms;
        if (duration_ns < slow_ms * NS_PER_MS) {
                return;
        }
        ks_counter_inc(g->h->slow_requests);
        ks_log(KS_LOG_WARN, NULL, "slow request", "{s:s,s:i,s:I}", "route", g->route->path,
               "status", status, "duration_ms", (json_int_t)(duration_ns / NS_PER_MS));
}

/*
 * gzip for a JSON body over KEELSON_GATEWAY_GZIP_MIN_BYTES when the client
 * accepts it: *body and *len then describe the malloc'd *gz. Only when it
 * is actually smaller.
 */
static void maybe_gzip(gw_request *g, const char *content_type, const void **body, size_t *len,
                       uint8_t **gz)
{
        const gw_config *cfg = g->h->env->cfg;
        if (content_type == NULL || strcmp(content_type, "application/json") != 0 ||
            *len <= (size_t)cfg->gzip_min_bytes) {
                return;
        }
        add_header(g, "Vary", "Accept-Encoding");
        const char *ae = gw_req_header(g->req, "Accept-Encoding");
        size_t gz_len = 0;
        if (!gw_accepts_gzip(ae) || gw_gzip(*body, *len, (int)cfg->gzip_level, gz, &gz_len) != 0) {
                return;
        }
        if (gz_len >= *len) {
                free(*gz);
                *gz = NULL;
                return;
        }
        add_header(g, "Content-Encoding", "gzip");
        *body = *gz;
        *len = gz_len;
}

/* Replies (when the client is still there), counts, logs and frees g. */
/* An allowed Origin's answer: who may read it, and which headers (cors.h). */
static void cors_headers(gw_req *req, const gw_cors *cors)
{
        const char *origin = gw_req_header(req, "Origin");
        if (!gw_cors_allowed(cors, origin)) {
                return;
        }
        gw_req_add_header(req, "Access-Control-Allow-Origin", origin);
        gw_req_add_header(req, "Vary", "Origin");
        gw_req_add_header(req, "Access-Control-Expose-Headers", gw_cors_expose_headers);
}

static void finish(gw_request *g, int status, int code, const char *content_type, const void *body,
                   size_t len)
{
        if (g->req != NULL) {
                cors_headers(g->req, &g->h->env->cfg->cors);
                /* While draining, the front closes the connection after this reply:
                 * keep-alive clients move to another replica. */
                gw_req_on_cancel(g->req, NULL, NULL);
                uint8_t *gz = NULL;
                maybe_gzip(g, content_type, &body, &len, &gz);
                gw_send(g->req, status, content_type, body, len, g->request_id);
                free(gz);
                g->req = NULL;
        } else {
                status = ks_code_http_status(KS_CANCELED);
                code = KS_CANCELED; /* the client left before the reply */
        }
        int64_t duration_ns = ks_mono_ns() - g->start_ns;
        gw_route_observe(g->route, code, (double)duration_ns / NS_PER_S);
        if (code != KS_OK && !g->quiet) {
                log_failure(g, status, code, duration_ns);
        }
        log_slow(g, status, duration_ns);
        request_free(g);
}

/*
 * A framed reply (wire.h): msg (NULL for an error) and its status. gRPC:
 * the message framed and grpc-status in HTTP/2 trailers; an error is
 * Trailers-Only (HTTP 200, grpc-status and the percent-encoded
 * grpc-message in the one HEADERS frame, no body). gRPC-Web and Connect
 * streaming: both in the body, the status as its last frame.
 */
static void grpc_finish(gw_request *g, const uint8_t *msg, size_t len, int code,
                        const char *message)
{
        uint8_t *frame = NULL, *end = NULL, *body = NULL;
        size_t frame_len = 0, end_len = 0, body_len = 0;
        int rc = 0;
        if (msg != NULL) {
                rc = gw_wire_frame(g->wire, msg, len, &frame, &frame_len);
        }
        if (rc == 0) {
                rc = gw_wire_end(g->wire, code, message, &end, &end_len);
        }
        if (rc == 0 && (body = malloc(frame_len + end_len + 1)) == NULL) {
                rc = -1;
        }
        if (rc != 0) {
                free(frame);
                free(end);
                frame = end = NULL;
                frame_len = end_len = 0;
                code = KS_RESOURCE_EXHAUSTED;
                message = "out of memory";
        } else {
                if (frame_len > 0) {
                        memcpy(body, frame, frame_len);
                }
                if (end_len > 0) {
                        memcpy(body + frame_len, end, end_len);
                }
                body_len = frame_len + end_len;
        }
        if (g->req != NULL && (gw_wire_trailers(g->wire) || rc != 0)) {
                gw_rpcstream_trailers(g->req, code, message);
        }
        finish(g, 200, code, gw_wire_content_type(g->wire), body, body_len);
        free(frame);
        free(end);
        free(body);
}

static void grpc_fail(gw_request *g, int code, const char *message)
{
        grpc_finish(g, NULL, 0, code, message);
}

static void grpc_reply(gw_request *g, const uint8_t *msg, size_t len)
{
        grpc_finish(g, msg != NULL ? msg : empty_bytes, len, KS_OK, NULL);
}

static void request_fail(gw_request *g, int status, int code, const char *message)
{
        if (g->grpc) {
                grpc_fail(g, code, message);
                return;
        }
        if (status == 0) {
                status = ks_code_http_status(code);
        }
        char *json = NULL;
        size_t len = 0;
        if (gw_error_json(code, message, &json, &len) != 0) {
                static const char fallback[] = "{\"code\":\"internal\",\"message\":\"\"}";
                finish(g, 500, KS_INTERNAL, "application/json", fallback, sizeof(fallback) - 1);
                return;
        }
        finish(g, status, code, "application/json", json, len);
        free(json);
}

static void fail_unauthenticated(gw_request *g, const char *message)
{
        add_header(g, "WWW-Authenticate", "Bearer"); /* RFC 6750 §3 */
        request_fail(g, 401, KS_UNAUTHENTICATED, message);
}

/* Counts a call that ended with a fault of the service or the transport. */
static void upstream_error(gw_handler *h, int service, int code)
{
        if (service < 0 || service >= KS_SVC_COUNT || code < 0 || code >= KS_CODE_COUNT) {
                return;
        }
        if (h->upstream_errors[service][code] == NULL) {
                char labels[128];
                snprintf(labels, sizeof(labels), "service=\"%s\",code=\"%s\"",
                         ks_service_name((ks_service_id)service), ks_code_name(code));
                h->upstream_errors[service][code] = ks_counter_get(
                    ks_metrics_default(), UPSTREAM_ERRORS_NAME, UPSTREAM_ERRORS_HELP, labels);
        }
        ks_counter_inc(h->upstream_errors[service][code]);
}

/* Faults of a service or the transport, as opposed to answers about the request. */
static bool is_upstream_fault(int code)
{
        return code == KS_UNKNOWN || code == KS_DEADLINE_EXCEEDED ||
               code == KS_RESOURCE_EXHAUSTED || code == KS_INTERNAL || code == KS_UNAVAILABLE ||
               code == KS_DATA_LOSS;
}

/* Answers of ResolveContext that mean "this token does not authenticate anyone". */
static bool is_token_rejection(int code)
{
        return code == KS_UNAUTHENTICATED || code == KS_INVALID_ARGUMENT || code == KS_NOT_FOUND ||
               code == KS_PERMISSION_DENIED;
}

static const char *start_failure_message(int code)
{
        switch (code) {
        case KS_RESOURCE_EXHAUSTED:
                return "too many calls in flight";
        case KS_DEADLINE_EXCEEDED:
                return "deadline exceeded";
        default:
                return "the call could not be started";
        }
}

/* The client went away while its request waits upstream (see the top). */
static void on_client_gone(void *arg)
{
        gw_request *g = arg;
        g->req = NULL;
}

/* g waits for an upstream call or a rate-limit decision: see 2. to 4. at the top. */
static void wait_begin(gw_request *g, gw_stage stage)
{
        g->stage = stage;
        gw_inflight_begin(g->h->env->inflight);
        gw_req_on_cancel(g->req, on_client_gone, g);
}

/*
 * The body into g->payload, once the caller is known and has its token:
 * decode.c bounds what any body can cost, and a large one goes to a decode
 * thread (the call then starts in gw_handler_decoded). 0 when the payload
 * is ready; else -1: the request waits for its decode, or was answered.
 */
/*
 * The bound on one gRPC message: KEELSON_GATEWAY_GRPC_MESSAGE_MAX_BYTES over
 * HTTP/2, the body limit over HTTP/1.1 (gRPC-Web), whose front holds the
 * body to that.
 */
static size_t grpc_message_max(const gw_request *g)
{
        const gw_config *cfg = g->h->env->cfg;
        return gw_req_http2(g->req) ? (size_t)cfg->grpc_message_max_bytes
                                    : (size_t)cfg->body_max_bytes;
}

/* What a gRPC request's message may point into, freed after its decode. */
typedef struct grpc_in {
        gw_grpc_reader *rd;
        uint8_t *decoded; /* grpc-web-text: the body, base64-decoded */
} grpc_in;

static void grpc_in_free(grpc_in *in)
{
        gw_grpc_reader_free(in->rd);
        free(in->decoded);
}

/*
 * A unary gRPC call's one request message, out of the framed body: *data
 * and *len point into the body or into in (grpc_in_free after). 0, or -1
 * when answered: not exactly one message, over the body limit inflated,
 * not base64 (grpc-web-text), or malformed.
 */
static int grpc_message(gw_request *g, const uint8_t **data, size_t *len, grpc_in *in)
{
        const char *err = NULL;
        size_t used = 0;
        bool have = false;
        gw_grpc_msg msg = {0};
        if (g->wire == GW_WIRE_GRPC_WEB_TEXT) {
                gw_grpcweb_text st = {0};
                size_t cap = GW_GRPCWEB_TEXT_DECODED_MAX(*len);
                if ((in->decoded = malloc(cap)) == NULL) {
                        request_fail(g, 0, KS_RESOURCE_EXHAUSTED, "out of memory");
                        return -1;
                }
                ssize_t n =
                    gw_grpcweb_text_decode(&st, (const char *)*data, *len, in->decoded, cap);
                if (n < 0 || !gw_grpcweb_text_complete(&st)) {
                        request_fail(g, 0, KS_INVALID_ARGUMENT, "grpc-web-text body is not base64");
                        return -1;
                }
                *data = in->decoded;
                *len = (size_t)n;
        }
        if (gw_grpc_reader_new(&in->rd, g->grpc_enc, grpc_message_max(g)) != 0) {
                request_fail(g, 0, KS_RESOURCE_EXHAUSTED, "out of memory");
                return -1;
        }
        int rc = gw_grpc_reader_feed(in->rd, *data, *len, &used, &have, &msg, &err);
        if (rc != KS_OK) {
                request_fail(g, 0, rc, err);
                return -1;
        }
        if (!have) {
                request_fail(g, 0, KS_INTERNAL, "a unary call needs exactly one request message");
                return -1;
        }
        if (used < *len) { /* more after the message: a second one, or bytes of one */
                const uint8_t *rest = *data + used;
                size_t left = *len - used;
                uint64_t next = left >= GW_GRPC_PREFIX_BYTES
                                    ? (uint64_t)rest[1] << 24 | (uint64_t)rest[2] << 16 |
                                          (uint64_t)rest[3] << 8 | rest[4]
                                    : UINT64_MAX;
                if (next <= left - GW_GRPC_PREFIX_BYTES) {
                        request_fail(g, 0, KS_UNIMPLEMENTED,
                                     "more than one request message for a unary method");
                } else {
                        request_fail(g, 0, KS_INTERNAL,
                                     "the request ended inside a message (longer than its "
                                     "prefix says?)");
                }
                return -1;
        }
        *data = msg.data;
        *len = msg.len;
        return 0;
}

static int decode_body(gw_request *g)
{
        char err[JSON_ERR_MAX];
        size_t len = 0;
        const uint8_t *data = gw_req_body(g->req, &len);
        grpc_in in = {0};
        if (g->grpc && grpc_message(g, &data, &len, &in) != 0) {
                grpc_in_free(&in);
                return -1;
        }
        int rc = KS_OK;
        if (len > GW_DECODE_INLINE_BYTES && g->h->env->decoder != NULL) {
                gw_decode_job *j = &g->decode;
                j->desc = g->route->input;
                j->codec = g->codec;
                j->body_len = len;
                if ((j->body = malloc(len)) == NULL) {
                        grpc_in_free(&in);
                        request_fail(g, 0, KS_RESOURCE_EXHAUSTED, "out of memory");
                        return -1;
                }
                memcpy(j->body, data, len); /* the request may go while its body is decoded */
                grpc_in_free(&in);
                if (gw_decodepool_submit(g->h->env->decoder, j) != 0) {
                        free(j->body);
                        j->body = NULL;
                        request_fail(g, 0, KS_RESOURCE_EXHAUSTED,
                                     "too many requests being decoded");
                        return -1;
                }
                wait_begin(g, GW_STAGE_DECODING);
                return -1;
        }
        rc = gw_decode(g->route->input, g->codec, data, len, &g->payload, &g->payload_len, err,
                       sizeof(err));
        grpc_in_free(&in);
        if (rc != KS_OK) {
                request_fail(g, rc == KS_RESOURCE_EXHAUSTED ? 413 : 0, rc, err);
                return -1;
        }
        return 0;
}

static void start_upstream(gw_request *g, gw_stage stage)
{
        bool resolving = stage == GW_STAGE_RESOLVING;
        if (!resolving && g->local != NULL) {
                g->local(g);
                return;
        }
        if (!resolving && g->req != NULL && g->payload == NULL && decode_body(g) != 0) {
                return;
        }
        const gw_route *route = resolving ? gw_routes_resolver(g->h->env->routes) : g->route;
        ks_rpc_call_args args = {
            .method = route->method,
            .request_id = g->request_id,
            .caller = &g->caller,
            .deadline_unix_ms = g->deadline_unix_ms,
            .payload = resolving ? g->auth_payload : g->payload,
            .payload_len = resolving ? g->auth_payload_len : g->payload_len,
            .idempotency_key = resolving ? NULL : g->idempotency_key,
            /* idempotent methods, token resolution among them, survive a replica's death */
            .resend_ms = gw_route_resendable(route) ? (int)g->h->env->cfg->resend_ms : 0,
        };
        int rc = gw_upstream_call(g->h->env->up, route->service, &args, &g->call);
        if (rc != KS_OK) {
                if (rc != KS_DEADLINE_EXCEEDED) { /* an expired deadline is the client's */
                        upstream_error(g->h, route->service, rc);
                }
                request_fail(g, 0, rc, start_failure_message(rc));
                return;
        }
        /* From here until gw_handler_complete, g->call belongs to the upstream. */
        wait_begin(g, stage);
}

/* ---- rate limit ------------------------------------------------------------- */

static void limit_headers(gw_request *g, const gw_decision *d)
{
        if (g->req != NULL) {
                gw_ratelimit_headers(d, g->req);
        }
}

static void refuse(gw_request *g)
{
        /* Counted (ratelimit_decisions_total), not logged: a flood of
         * refusals must not become a flood of log lines. */
        g->quiet = true;
        request_fail(g, 429, KS_RESOURCE_EXHAUSTED, "rate limit exceeded, retry later");
}

static void apply_limit(gw_request *g)
{
        const gw_decision *d = &g->limit.decision;
        if (g->limit.route->scope == GW_SCOPE_RESOLVE) {
                /* Before ResolveContext. Allowed: no headers, the api scope's
                 * follow; refused: this bucket's, which the 429 is about. */
                if (!d->allowed) {
                        limit_headers(g, d);
                        refuse(g);
                        return;
                }
                start_upstream(g, GW_STAGE_RESOLVING);
                return;
        }
        limit_headers(g, d);
        if (!d->allowed) {
                refuse(g);
                return;
        }
        start_upstream(g, GW_STAGE_CALLING);
}

/* A decision that Redis made (or that failed there and was made locally). */
static void on_limit_decided(gw_limit_wait *w)
{
        gw_request *g = (gw_request *)(void *)((char *)w - offsetof(gw_request, limit));
        gw_inflight *inflight = g->h->env->inflight;
        gw_inflight_end(inflight);
        if (gw_inflight_closing(inflight)) {
                request_free(g); /* the front is gone: see 4. at the top */
                return;
        }
        if (g->req == NULL) {
                finish(g, 0, KS_CANCELED, NULL, NULL, 0);
        } else {
                apply_limit(g);
        }
        gw_inflight_check(inflight);
}

/* After a take (GW_LIMIT_*): unlimited, on to next; decided, applied; else wait for it. */
static void after_take(gw_request *g, int taken, gw_stage next)
{
        switch (taken) {
        case GW_LIMIT_OFF:
                start_upstream(g, next);
                break;
        case GW_LIMIT_NOW:
                apply_limit(g);
                break;
        default:
                wait_begin(g, GW_STAGE_LIMITING);
                break;
        }
}

/* A token the cache does not know: its client address pays before auth does. */
static void limit_then_resolve(gw_request *g)
{
        g->limit.done = on_limit_decided;
        after_take(g, gw_ratelimit_take_resolve(g->h->env->rl, g->client_ip, &g->limit),
                   GW_STAGE_RESOLVING);
}

static void limit_then_call(gw_request *g, const char *subject)
{
        g->limit.done = on_limit_decided;
        after_take(g, gw_ratelimit_take(g->h->env->rl, g->route, subject, &g->limit),
                   GW_STAGE_CALLING);
}

/* The api scope's key: the tenant; a caller without one is limited on its own. */
static const char *api_subject(const gw_request *g)
{
        if (g->ctx.tenant_id[0] != '\0') {
                return g->ctx.tenant_id;
        }
        if (g->ctx.user_id[0] != '\0') {
                return g->ctx.user_id;
        }
        return g->ctx.api_key_id[0] != '\0' ? g->ctx.api_key_id : g->client_ip;
}

/* Packs ResolveContextRequest{token} into g->auth_payload. */
static int pack_resolve(gw_request *g, const char *tok, size_t tok_len)
{
        char token[GW_TOKEN_MAX + 1];
        memcpy(token, tok, tok_len);
        token[tok_len] = '\0';
        Keelson__Auth__V1__ResolveContextRequest rr =
            KEELSON__AUTH__V1__RESOLVE_CONTEXT_REQUEST__INIT;
        rr.token = token;
        size_t n = keelson__auth__v1__resolve_context_request__get_packed_size(&rr);
        g->auth_payload = malloc(n > 0 ? n : 1);
        if (g->auth_payload != NULL) {
                g->auth_payload_len =
                    keelson__auth__v1__resolve_context_request__pack(&rr, g->auth_payload);
        }
        explicit_bzero(token, sizeof(token));
        return g->auth_payload != NULL ? 0 : -1;
}

/* Points the caller's fields at g->ctx. */
static void set_caller(gw_request *g)
{
        g->caller.authenticated = true;
        g->caller.user_id = g->ctx.user_id;
        g->caller.tenant_id = g->ctx.tenant_id;
        g->caller.role = g->ctx.role;
        g->caller.session_id = g->ctx.session_id;
        g->caller.api_key_id = g->ctx.api_key_id;
        g->caller.client_ip = g->client_ip;
}

static int copy_id(char dst[GW_ID_MAX + 1], const char *src)
{
        size_t n = strlen(src);
        if (n > GW_ID_MAX) {
                return -1;
        }
        memcpy(dst, src, n + 1);
        return 0;
}

/* The context of a ResolveContext reply; -1 when a field is longer than we keep. */
static int ctx_from_reply(gw_context *ctx, const Keelson__Auth__V1__ResolveContextResponse *r)
{
        ctx->expires_at_unix_ms = r->expires_at_unix_ms;
        return copy_id(ctx->user_id, r->user_id) | copy_id(ctx->tenant_id, r->tenant_id) |
               copy_id(ctx->role, r->role) | copy_id(ctx->session_id, r->session_id) |
               copy_id(ctx->api_key_id, r->api_key_id);
}

/* Connect's own headers: its codecs, Content-Encoding, its version, Connect-Timeout-Ms. */
static int check_connect(gw_request *g, int64_t *timeout_ms, bool *has_timeout)
{
        const gw_req *in = g->req;
        if (gw_connect_codec(gw_req_header(in, "Content-Type"), &g->codec) != 0) {
                request_fail(g, 415, KS_UNIMPLEMENTED,
                             "unsupported content type: use application/json or "
                             "application/proto");
                return -1;
        }
        if (!gw_identity_encoding(gw_req_header(in, "Content-Encoding"))) {
                add_header(g, "Accept-Encoding", "identity");
                request_fail(g, 415, KS_UNIMPLEMENTED,
                             "unsupported content-encoding: only identity is accepted");
                return -1;
        }
        if (!gw_connect_version_ok(gw_req_header(in, "Connect-Protocol-Version"))) {
                request_fail(g, 400, KS_INVALID_ARGUMENT, "connect-protocol-version must be 1");
                return -1;
        }
        if (gw_connect_timeout(gw_req_header(in, "Connect-Timeout-Ms"), timeout_ms, has_timeout) !=
            0) {
                request_fail(g, 400, KS_INVALID_ARGUMENT,
                             "connect-timeout-ms must be 1 to 10 digits");
                return -1;
        }
        return 0;
}

/* gRPC's own headers: grpc-encoding (identity or gzip), grpc-timeout. */
static int check_grpc(gw_request *g, int64_t *timeout_ms, bool *has_timeout)
{
        const gw_req *in = g->req;
        g->codec = GW_CODEC_PROTO;
        if (gw_grpc_encoding_parse(gw_req_header(in, "grpc-encoding"), &g->grpc_enc) != 0) {
                add_header(g, "grpc-accept-encoding", GW_GRPC_ACCEPT_ENCODING);
                request_fail(g, 0, KS_UNIMPLEMENTED,
                             "unsupported grpc-encoding: use identity or gzip");
                return -1;
        }
        const char *t = gw_req_header(in, "grpc-timeout");
        *has_timeout = t != NULL;
        if (t != NULL && gw_grpc_timeout_parse(t, timeout_ms) != 0) {
                request_fail(g, 0, KS_INVALID_ARGUMENT,
                             "grpc-timeout must be 1 to 8 digits and one of H M S m u n");
                return -1;
        }
        return 0;
}

/*
 * The Connect protocol's streaming headers: Connect-Protocol-Version,
 * Connect-Timeout-Ms, and Connect-Content-Encoding for the messages
 * (identity or gzip, flagged per message as in gRPC).
 */
static int check_connect_stream(gw_request *g, int64_t *timeout_ms, bool *has_timeout)
{
        const gw_req *in = g->req;
        g->codec = g->wire == GW_WIRE_CONNECT_JSON ? GW_CODEC_JSON : GW_CODEC_PROTO;
        if (gw_grpc_encoding_parse(gw_req_header(in, "Connect-Content-Encoding"), &g->grpc_enc) !=
            0) {
                add_header(g, "Connect-Accept-Encoding", GW_GRPC_ACCEPT_ENCODING);
                request_fail(g, 0, KS_UNIMPLEMENTED,
                             "unsupported connect-content-encoding: use identity or gzip");
                return -1;
        }
        if (!gw_connect_version_ok(gw_req_header(in, "Connect-Protocol-Version"))) {
                request_fail(g, 0, KS_INVALID_ARGUMENT, "connect-protocol-version must be 1");
                return -1;
        }
        if (gw_connect_timeout(gw_req_header(in, "Connect-Timeout-Ms"), timeout_ms, has_timeout) !=
            0) {
                request_fail(g, 0, KS_INVALID_ARGUMENT,
                             "connect-timeout-ms must be 1 to 10 digits");
                return -1;
        }
        return 0;
}

/* The request's headers: returns 0, or replies with the error and returns -1. */
static int check_headers(gw_request *g)
{
        const gw_req *in = g->req;
        if (strcmp(gw_req_method(in), "POST") != 0) {
                add_header(g, "Allow", "POST");
                request_fail(g, 405, KS_UNIMPLEMENTED, "method not allowed: use POST");
                return -1;
        }
        int64_t timeout_ms = 0;
        bool has_timeout = false;
        if ((!g->grpc                   ? check_connect(g, &timeout_ms, &has_timeout)
             : gw_wire_connect(g->wire) ? check_connect_stream(g, &timeout_ms, &has_timeout)
                                        : check_grpc(g, &timeout_ms, &has_timeout)) != 0) {
                return -1;
        }
        if (gw_req_header_count(in, "Authorization") > 1) {
                /* A proxy that reads another one than we do would disagree on the caller. */
                request_fail(g, 400, KS_INVALID_ARGUMENT, "more than one Authorization header");
                return -1;
        }
        if (gw_req_header_count(in, "Idempotency-Key") > 1 ||
            gw_idempotency_key(gw_req_header(in, "Idempotency-Key"), g->idempotency_key) != 0) {
                request_fail(g, 400, KS_INVALID_ARGUMENT,
                             "idempotency-key must be one header of 1 to 255 printable ASCII "
                             "characters");
                return -1;
        }
        int64_t limit_ms = g->h->env->cfg->timeout_ms;
        if (has_timeout && timeout_ms < limit_ms) {
                limit_ms = timeout_ms;
        }
        g->deadline_unix_ms = ks_now_ms() + limit_ms;
        return 0;
}

static void rpc_begin(gw_request *g)
{
        if (check_headers(g) != 0) {
                return;
        }
        /* The body waits: nothing is decoded before the caller is known and limited. */
        if ((g->route->flags & KS_M_PUBLIC) != 0) {
                limit_then_call(g, g->client_ip); /* caller: unauthenticated + client_ip */
                return;
        }
        const char *tok = NULL;
        size_t tok_len = 0;
        /* The bearer token, or the console's session cookie (console_session.h). */
        int refusal = gw_console_caller_token(g->req, &tok, &tok_len);
        if (refusal != GW_CONSOLE_OK) {
                fail_unauthenticated(g, gw_console_refusal_message(refusal));
                return;
        }
        ks_sha256(tok, tok_len, g->token_sha);
        if (gw_cache_get(g->h->env->cache, g->token_sha, ks_mono_ms(), &g->ctx)) {
                set_caller(g);
                limit_then_call(g, api_subject(g));
                return;
        }
        g->cache_generation = gw_cache_generation(g->h->env->cache);
        /* Packed first: tok points into the request, which may go while Redis decides. */
        if (pack_resolve(g, tok, tok_len) != 0) {
                request_fail(g, 0, KS_INTERNAL, "out of memory");
                return;
        }
        limit_then_resolve(g);
}

/*
 * The token did not resolve. Most methods answer 401. A KS_M_CALLER_OPTIONAL
 * one (Logout) goes on with the unauthenticated caller request_new made,
 * limited by client address: the service answers "nothing to do" without
 * ever seeing the token, so no session or key of anyone can be touched.
 */
static void token_refused(gw_request *g)
{
        if ((g->route->flags & KS_M_CALLER_OPTIONAL) == 0) {
                /* Whatever auth disliked about the token, the client sees one answer. */
                fail_unauthenticated(g, "invalid or expired session");
                return;
        }
        ks_rpc_result_clear(&g->call.result);
        limit_then_call(g, g->client_ip);
}

static void on_resolved(gw_request *g)
{
        ks_rpc_result *res = &g->call.result;
        wipe_auth_payload(g);
        if (res->code != KS_OK) {
                if (is_token_rejection(res->code)) {
                        token_refused(g);
                } else if (is_upstream_fault(res->code)) {
                        upstream_error(g->h, KS_SVC_AUTH, res->code);
                        request_fail(g, 0, res->code, res->message);
                } else {
                        /* UNIMPLEMENTED and the like: auth and gateway disagree. */
                        upstream_error(g->h, KS_SVC_AUTH, res->code);
                        request_fail(g, 0, KS_INTERNAL, "cannot resolve the caller");
                }
                return;
        }
        Keelson__Auth__V1__ResolveContextResponse *r =
            keelson__auth__v1__resolve_context_response__unpack(
                NULL, res->payload_len, res->payload != NULL ? res->payload : empty_bytes);
        ks_rpc_result_clear(res);
        if (r == NULL) {
                upstream_error(g->h, KS_SVC_AUTH, KS_INTERNAL);
                request_fail(g, 0, KS_INTERNAL, "invalid reply from the auth service");
                return;
        }
        if (!r->authenticated) {
                keelson__auth__v1__resolve_context_response__free_unpacked(r, NULL);
                token_refused(g);
                return;
        }
        int rc = ctx_from_reply(&g->ctx, r);
        keelson__auth__v1__resolve_context_response__free_unpacked(r, NULL);
        if (rc != 0) {
                upstream_error(g->h, KS_SVC_AUTH, KS_INTERNAL);
                request_fail(g, 0, KS_INTERNAL, "invalid reply from the auth service");
                return;
        }
        gw_cache_put(g->h->env->cache, g->token_sha, &g->ctx, g->cache_generation, ks_mono_ms(),
                     ks_now_ms());
        set_caller(g);
        limit_then_call(g, api_subject(g));
}

/* The reply unpacked into an arena (ks_arena.h: no malloc per field), printed, dropped. */
static void reply_json(gw_request *g, const ks_rpc_result *res)
{
        ks_arena arena;
        ks_arena_init(&arena);
        ProtobufCMessage *msg = protobuf_c_message_unpack(
            g->route->output, ks_arena_allocator(&arena), res->payload_len,
            res->payload != NULL ? res->payload : empty_bytes);
        gw_console_reply(g->req, g->route->method, msg); /* a console's session: its cookie */
        char *json = NULL;
        size_t len = 0;
        int rc = msg != NULL ? ks_json_from_message(msg, &json, &len) : KS_INTERNAL;
        ks_arena_release(&arena);
        if (rc != KS_OK) {
                upstream_error(g->h, g->route->service, KS_INTERNAL);
                request_fail(g, 0, KS_INTERNAL, "invalid reply from the service");
                return;
        }
        finish(g, 200, KS_OK, gw_codec_content_type(GW_CODEC_JSON), json, len);
        free(json);
}

static void on_replied(gw_request *g)
{
        ks_rpc_result *res = &g->call.result;
        if (res->replayed) { /* an answer stored for the request's Idempotency-Key */
                add_header(g, "Idempotent-Replayed", "true");
        }
        if (res->code != KS_OK) {
                if (is_upstream_fault(res->code)) {
                        upstream_error(g->h, g->route->service, res->code);
                }
                request_fail(g, 0, res->code, res->message);
                return;
        }
        /* This replica at once; the others when auth's event arrives. */
        if (g->route->revokes == KS_REVOKES_TOKEN) {
                gw_cache_evict_token(g->h->env->cache, g->token_sha);
        } else if (g->route->revokes == KS_REVOKES_USER) {
                gw_cache_evict_token(g->h->env->cache, g->token_sha);
                gw_cache_evict_user(g->h->env->cache, g->ctx.user_id, "");
        }
        if (g->grpc) {
                grpc_reply(g, res->payload, res->payload_len);
                return;
        }
        if (g->codec == GW_CODEC_PROTO) {
                finish(g, 200, KS_OK, gw_codec_content_type(GW_CODEC_PROTO), res->payload,
                       res->payload_len);
                return;
        }
        reply_json(g, res);
}

void gw_handler_decoded(gw_decode_job *job, void *arg)
{
        gw_handler *h = arg;
        gw_inflight *inflight = h->env->inflight;
        gw_request *g = (gw_request *)(void *)((char *)job - offsetof(gw_request, decode));
        gw_inflight_end(inflight);
        g->payload = job->payload; /* freed with g */
        g->payload_len = job->payload_len;
        job->payload = NULL;
        if (gw_inflight_closing(inflight)) {
                request_free(g);
                return;
        }
        if (g->req == NULL) {
                finish(g, 0, KS_CANCELED, NULL, NULL, 0);
        } else if (job->rc != KS_OK) {
                request_fail(g, job->rc == KS_RESOURCE_EXHAUSTED ? 413 : 0, job->rc, job->err);
        } else {
                gw_req_on_cancel(g->req, NULL, NULL);
                start_upstream(g, GW_STAGE_CALLING);
        }
        gw_inflight_check(inflight);
}

void gw_handler_complete(gw_call *call, void *arg)
{
        gw_handler *h = arg;
        gw_inflight *inflight = h->env->inflight;
        gw_request *g = (gw_request *)(void *)call; /* call is g's first member */
        gw_inflight_end(inflight);
        if (gw_inflight_closing(inflight)) {
                /* Shutting down: the front is gone, g->req must not be touched. */
                request_free(g);
                return;
        }
        if (g->req == NULL) {
                finish(g, 0, KS_CANCELED, NULL, NULL, 0);
                gw_inflight_check(inflight);
                return;
        }
        if (g->stage == GW_STAGE_RESOLVING) {
                on_resolved(g); /* may start the second call: then g waits again */
        } else {
                on_replied(g);
        }
        gw_inflight_check(inflight);
}

/*
 * A webhook a provider sends to /webhooks/<provider>/<id> (intake.h): no
 * Connect headers, no caller; the body and the scheme's headers go to the
 * intake method as they came, limited per endpoint. Its reply is JSON, its
 * refusals Connect's error JSON (404 unknown endpoint, 400 refused, 503 not
 * stored: the provider sends it again).
 */
static void intake_begin(gw_request *g)
{
        gw_intake_target t;
        const char *values[GW_INTAKE_HEADERS_MAX];
        size_t n = 0, len = 0;

        g->codec = GW_CODEC_JSON;
        g->deadline_unix_ms = ks_now_ms() + g->h->env->cfg->timeout_ms;
        if (strcmp(gw_req_method(g->req), "POST") != 0) {
                add_header(g, "Allow", "POST");
                request_fail(g, 405, KS_UNIMPLEMENTED, "method not allowed: use POST");
                return;
        }
        if (gw_intake_target_of(gw_req_path(g->req), &t) != 0) {
                request_fail(g, 404, KS_NOT_FOUND, "unknown webhook endpoint");
                return;
        }
        const char *const *names = gw_intake_headers(t.provider);
        for (; names[n] != NULL && n < GW_INTAKE_HEADERS_MAX; n++) {
                if (gw_req_header_count(g->req, names[n]) > 1) {
                        char msg[96];
                        snprintf(msg, sizeof(msg), "webhook refused: %s sent twice", names[n]);
                        request_fail(g, 400, KS_INVALID_ARGUMENT, msg);
                        return;
                }
                values[n] = gw_req_header(g->req, names[n]);
        }
        const uint8_t *body = gw_req_body(g->req, &len);
        if (gw_intake_pack(&t, body, len, names, values, n, &g->payload, &g->payload_len) != 0) {
                request_fail(g, 0, KS_INTERNAL, "out of memory");
                return;
        }
        limit_then_call(g, t.endpoint_id); /* caller: unauthenticated + client_ip */
}

/*
 * The gRPC family by Content-Type: gRPC (application/grpc[+proto]) on an
 * HTTP/2 stream, gRPC-Web (application/grpc-web[-text][+proto]) on either.
 */
static void grpc_kind(gw_request *g)
{
        if (gw_wire_parse(gw_req_header(g->req, "Content-Type"), &g->wire) != 0) {
                return;
        }
        g->grpc = g->wire != GW_WIRE_GRPC || gw_req_http2(g->req);
}

/* grpc.reflection.v1 and v1alpha's one method (their messages are the same on the wire). */
static bool is_reflection(const char *method)
{
        return strcmp(method, "grpc.reflection.v1.ServerReflection/ServerReflectionInfo") == 0 ||
               strcmp(method, "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo") == 0;
}

bool gw_handler_wants_stream(const gw_req *r, void *arg)
{
        (void)arg;
        gw_grpc_protocol p;
        const char *path = gw_req_path(r);
        return gw_req_http2(r) &&
               gw_grpc_protocol_parse(gw_req_header(r, "Content-Type"), &p) == 0 && p == GW_GRPC &&
               path != NULL && path[0] == '/' && is_reflection(path + 1);
}

/* The end of a reflection stream: its status in the trailers, then g is done. */
static void refl_end(gw_request *g, int code, const char *message)
{
        if (g->req != NULL) {
                gw_rpcstream_end(g->req, GW_WIRE_GRPC, code, message);
                g->req = NULL;
        }
        gw_route_observe(g->route, code, (double)(ks_mono_ns() - g->start_ns) / NS_PER_S);
        request_free(g);
}

/* The client reset the stream or went away. */
static void refl_gone(void *arg)
{
        gw_request *g = arg;
        g->req = NULL;
        refl_end(g, KS_CANCELED, NULL);
}

/* A piece of the client's side: every whole request answered at once. */
static void refl_data(const uint8_t *data, size_t len, bool end, void *arg)
{
        gw_request *g = arg;
        refl_stream *rs = g->refl;
        while (len > 0) {
                size_t used = 0;
                bool have = false;
                gw_grpc_msg msg = {0};
                const char *err = NULL;
                int rc = gw_grpc_reader_feed(rs->rd, data, len, &used, &have, &msg, &err);
                if (rc != KS_OK) {
                        refl_end(g, rc, err);
                        return;
                }
                data += used;
                len -= used;
                if (!have) {
                        continue;
                }
                uint8_t *out = NULL;
                size_t out_len = 0;
                rc = gw_reflection_answer(g->h->env->reflection, &rs->sent, msg.data, msg.len, &out,
                                          &out_len);
                if (rc == KS_OK &&
                    gw_rpcstream_send_packed(g->req, GW_WIRE_GRPC, out, out_len) != 0) {
                        rc = KS_INTERNAL;
                }
                free(out);
                if (rc != KS_OK) {
                        refl_end(g, rc, rc == KS_INVALID_ARGUMENT ? "malformed request" : NULL);
                        return;
                }
                if (gw_req_stream_pending(g->req) > REFLECTION_PENDING_MAX) {
                        /* It asks faster than it reads: its status would wait behind the rest. */
                        gw_req_on_cancel(g->req, NULL, NULL);
                        gw_req_stream_abort(g->req);
                        g->req = NULL;
                        refl_end(g, KS_RESOURCE_EXHAUSTED, NULL);
                        return;
                }
        }
        if (end) {
                if (!gw_grpc_reader_idle(rs->rd)) {
                        refl_end(g, KS_INTERNAL, "the stream ended inside a message");
                        return;
                }
                refl_end(g, KS_OK, NULL);
        }
}

/*
 * grpc.reflection's ServerReflectionInfo: a bidirectional stream, each
 * request answered as it comes (reflection.c), public like the protos
 * themselves; off when KEELSON_GATEWAY_REFLECTION is false.
 */
static void refl_begin(gw_request *g)
{
        if (g->h->env->reflection == NULL) {
                request_fail(g, 0, KS_UNIMPLEMENTED, "reflection is turned off");
                return;
        }
        if (!gw_req_streaming(g->req)) {
                request_fail(g, 0, KS_UNIMPLEMENTED,
                             "reflection is served over gRPC (HTTP/2) only");
                return;
        }
        if ((g->refl = calloc(1, sizeof(*g->refl))) == NULL ||
            gw_grpc_reader_new(&g->refl->rd, g->grpc_enc, grpc_message_max(g)) != 0) {
                request_fail(g, 0, KS_RESOURCE_EXHAUSTED, "out of memory");
                return;
        }
        gw_req_on_cancel(g->req, refl_gone, g);
        gw_req_on_data(g->req, refl_data, g);
        gw_rpcstream_open(g->req, GW_WIRE_GRPC);
}

/*
 * The one request message of a method the gateway answers itself, out of
 * its framed body, in the codec of the request (protobuf, or JSON for
 * connect+json): *out is the caller's (protobuf_c_message_free_unpacked).
 * 0, or -1 when answered.
 */
static int own_request(gw_request *g, const ProtobufCMessageDescriptor *desc,
                       ProtobufCMessage **out)
{
        char err[JSON_ERR_MAX];
        size_t len = 0;
        const uint8_t *data = gw_req_body(g->req, &len);
        grpc_in in = {0};
        if (grpc_message(g, &data, &len, &in) != 0) {
                grpc_in_free(&in);
                return -1;
        }
        *out = NULL;
        if (g->codec == GW_CODEC_JSON) {
                if (ks_json_to_message(desc, (const char *)data, len, out, err, sizeof(err)) !=
                    KS_OK) {
                        grpc_in_free(&in);
                        request_fail(g, 0, KS_INVALID_ARGUMENT, err);
                        return -1;
                }
        } else {
                *out = protobuf_c_message_unpack(desc, NULL, len, data);
        }
        grpc_in_free(&in);
        if (*out == NULL) {
                snprintf(err, sizeof(err), "malformed %s", desc->name);
                request_fail(g, 0, KS_INVALID_ARGUMENT, err);
                return -1;
        }
        return 0;
}

/* A stream the gateway answers from here on: what every reply carries, then g's end. */
static void stream_handed_over(gw_request *g)
{
        g->req = NULL; /* the stream's owner's now */
        gw_route_observe(g->route, KS_OK, (double)(ks_mono_ns() - g->start_ns) / NS_PER_S);
        request_free(g);
}

/* Before a stream opens: the headers every reply of the gateway carries. */
static void stream_headers(gw_request *g)
{
        cors_headers(g->req, &g->h->env->cfg->cors);
        gw_req_add_header(g->req, "X-Request-Id", g->request_id);
}

/*
 * EventService/Subscribe, once the caller is resolved and within its rate
 * limit: billing.read (its topics are billing's), the request's topics and
 * cursor checked, then the stream is the hub's (hub.h), on the wire the
 * client spoke.
 */
static void subscribe_local(gw_request *g)
{
        char why[160];
        const char *msg = NULL;
        if (g->h->env->hub == NULL) {
                request_fail(g, 0, KS_UNIMPLEMENTED, "the event stream is turned off");
                return;
        }
        if (ks_role_admits(g->ctx.role, KS_PERM_BILLING_READ, why, sizeof(why)) != KS_OK) {
                request_fail(g, 0, KS_PERMISSION_DENIED, why);
                return;
        }
        ProtobufCMessage *m = NULL;
        if (own_request(g, &keelson__events__v1__subscribe_request__descriptor, &m) != 0) {
                return;
        }
        Keelson__Events__V1__SubscribeRequest *r = (Keelson__Events__V1__SubscribeRequest *)m;
        int rc = KS_OK;
        if (r->n_topics > GW_HUB_TOPICS_MAX) {
                snprintf(why, sizeof(why), "topics: at most %d", GW_HUB_TOPICS_MAX);
                rc = KS_INVALID_ARGUMENT;
                msg = why;
        }
        for (size_t i = 0; rc == KS_OK && i < r->n_topics; i++) {
                if (!gw_hub_topic_ok(r->topics[i])) {
                        snprintf(why, sizeof(why),
                                 "topics: %.64s is not a topic one may subscribe to", r->topics[i]);
                        rc = KS_INVALID_ARGUMENT;
                        msg = why;
                }
        }
        if (rc == KS_OK) {
                stream_headers(g);
                rc = gw_hub_subscribe(g->h->env->hub, g->req, g->wire, g->ctx.tenant_id,
                                      (const char *const *)r->topics, r->n_topics, r->cursor, &msg);
        }
        protobuf_c_message_free_unpacked(m, NULL);
        if (rc != KS_OK) {
                request_fail(g, 0, rc, msg);
                return;
        }
        stream_handed_over(g);
}

/* grpc.health.v1.Health/Watch: a stream of the status asked for (watch.c). */
static void watch_begin(gw_request *g)
{
        if (g->h->env->watches == NULL) {
                request_fail(g, 0, KS_UNIMPLEMENTED, "Health/Watch is turned off");
                return;
        }
        ProtobufCMessage *m = NULL;
        if (own_request(g, &grpc__health__v1__health_check_request__descriptor, &m) != 0) {
                return;
        }
        stream_headers(g);
        int rc = gw_watch(g->h->env->watches, g->req, g->wire,
                          ((Grpc__Health__V1__HealthCheckRequest *)m)->service);
        protobuf_c_message_free_unpacked(m, NULL);
        if (rc != KS_OK) {
                request_fail(g, 0, rc, "cannot watch");
                return;
        }
        stream_handed_over(g);
}

/*
 * The gRPC services the gateway answers itself (grpc.h): Health/Check,
 * and Watch (a stream, watch.c), public and unlimited, as probes call them;
 * reflection, a stream; and the event subscription, a stream for a caller
 * resolved and limited as for any method.
 */
static void own_call(gw_request *g, const char *method)
{
        if (strcmp(method, SUBSCRIBE_METHOD) == 0) {
                g->local = subscribe_local;
                rpc_begin(g); /* the caller first, as for any method */
                return;
        }
        if (check_headers(g) != 0) {
                return;
        }
        if (is_reflection(method)) {
                refl_begin(g);
                return;
        }
        if (strcmp(method, WATCH_METHOD) == 0) {
                watch_begin(g);
                return;
        }
        if (strcmp(method, "grpc.health.v1.Health/Check") != 0) {
                request_fail(g, 0, KS_UNIMPLEMENTED, "unknown method");
                return;
        }
        size_t len = 0;
        const uint8_t *data = gw_req_body(g->req, &len);
        grpc_in in = {0};
        if (grpc_message(g, &data, &len, &in) != 0) {
                grpc_in_free(&in);
                return;
        }
        uint8_t *out = NULL;
        size_t out_len = 0;
        int rc = gw_health_check(&g->h->env->health, data, len, &out, &out_len);
        grpc_in_free(&in);
        if (rc != KS_OK) {
                request_fail(g, 0, rc, rc == KS_NOT_FOUND ? "unknown service" : "bad request");
                return;
        }
        grpc_reply(g, out, out_len);
        free(out);
}

/*
 * A CORS preflight (OPTIONS with Access-Control-Request-Method): 204 with
 * what a page of an allowed origin may send (POST, cors.h's headers), or
 * 403 for any other origin or method. No body is read, nothing upstream.
 */
static void preflight(gw_handler *h, gw_req *req, const char *request_id)
{
        const gw_cors *cors = &h->env->cfg->cors;
        const char *method = gw_req_header(req, "Access-Control-Request-Method");
        if (method == NULL || strcmp(method, "POST") != 0 ||
            !gw_cors_allowed(cors, gw_req_header(req, "Origin"))) {
                gw_send_error(req, 403, KS_PERMISSION_DENIED, "cross-origin request not allowed",
                              request_id);
                return;
        }
        gw_req_add_header(req, "Access-Control-Allow-Origin", gw_req_header(req, "Origin"));
        gw_req_add_header(req, "Access-Control-Allow-Methods", "POST");
        gw_req_add_header(req, "Access-Control-Allow-Headers", gw_cors_allow_headers);
        gw_req_add_header(req, "Access-Control-Max-Age", GW_CORS_MAX_AGE_S);
        gw_req_add_header(req, "Vary", "Origin");
        gw_send(req, 204, NULL, NULL, 0, request_id);
}

void gw_handler_serve(gw_handler *h, gw_req *req, const char *path, const char *request_id,
                      int64_t start_ns)
{
        if (strcmp(gw_req_method(req), "OPTIONS") == 0 &&
            gw_req_header(req, "Access-Control-Request-Method") != NULL) {
                preflight(h, req, request_id);
                return;
        }
        if (gw_intake_path(path)) {
                gw_route *intake = gw_routes_intake(h->env->routes);
                gw_request *g = request_new(
                    h, req, intake != NULL ? intake : gw_routes_unmatched(h->env->routes),
                    request_id, start_ns);
                if (g == NULL) {
                        gw_send_error(req, 500, KS_INTERNAL, "out of memory", request_id);
                } else if (intake == NULL) {
                        request_fail(g, 404, KS_NOT_FOUND, "unknown webhook endpoint");
                } else {
                        intake_begin(g);
                }
                return;
        }
        gw_route *route = gw_routes_find(h->env->routes, path);
        gw_request *g =
            request_new(h, req, route != NULL ? route : gw_routes_unmatched(h->env->routes),
                        request_id, start_ns);
        if (g == NULL) {
                gw_send_error(req, 500, KS_INTERNAL, "out of memory", request_id);
                return;
        }
        grpc_kind(g);
        if (g->grpc && gw_wire_connect(g->wire) && strcmp(path, "/" SUBSCRIBE_METHOD) != 0 &&
            strcmp(path, "/" WATCH_METHOD) != 0) {
                /* The Connect protocol's unary calls are application/proto and /json. */
                g->grpc = false;
                request_fail(g, 415, KS_UNIMPLEMENTED,
                             "application/connect+proto and +json are for streaming methods: "
                             "call a unary method with application/proto or application/json");
                return;
        }
        if (g->grpc && path[0] == '/' && gw_grpc_own_method(path + 1)) {
                own_call(g, path + 1);
                return;
        }
        if (route == NULL) {
                request_fail(g, 404, KS_UNIMPLEMENTED, "unknown method");
                return;
        }
        rpc_begin(g);
}

int gw_handler_new(gw_handler **out, const gw_handler_env *env)
{
        *out = NULL;
        gw_handler *h = calloc(1, sizeof(*h));
        if (h == NULL) {
                return -1;
        }
        h->env = env;
        h->slow_requests =
            ks_counter_get(ks_metrics_default(), "keelson_gateway_slow_requests_total",
                           "Requests slower than KEELSON_GATEWAY_SLOW_MS", NULL);
        *out = h;
        return 0;
}

void gw_handler_free(gw_handler *h)
{
        free(h);
}
