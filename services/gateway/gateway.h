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
 *   bucket.c    rate-limit specs and the in-process token buckets
 *   redis.c     the asynchronous Redis client running ratelimit.lua
 *   ratelimit.c scopes, keys, Redis or local decisions, RateLimit-* headers
 *   clientip.c  trusted proxies and the client address from X-Forwarded-For
 *   cache.c     the context cache: token hash -> caller, LRU + TTL
 *   events.c    auth.context_revoked events, from a thread onto the loop
 *   compress.c  gzip for large JSON replies
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
#include "ks_redis_url.h"
#include "ks_rpc.h"
#include "ks_topology.h"

/* ---- connect.c: the Connect protocol (unary) ---------------------------- */

#define GW_REQUEST_ID_MAX     64  /* X-Request-Id: [A-Za-z0-9._-]{1,64} */
#define GW_TOKEN_MAX          512 /* bearer tokens; longer ones are refused unread */
#define GW_TIMEOUT_DIGITS_MAX 10
#define GW_PATH_MAX           160 /* route paths, "/<package>.<Service>/<Method>" */

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

/* ---- bucket.c: rate-limit specs and in-process token buckets ------------ */

/*
 * A token bucket's parameters: capacity tokens at most, refill tokens added
 * every period_us. Tokens are counted in units of 1/period_us (integers),
 * exactly as ratelimit.lua does, which bounds capacity * period_us below
 * 2^53 (GW_LIMIT_UNITS_MAX).
 */
/*
 * Division by a divisor fixed at configuration time, as a multiply and a
 * shift (exact for every dividend below 2^GW_RECIP_BITS): the header numbers
 * of a decision are computed on every request, a 64-bit division costs tens
 * of cycles and the divisors are constants of the limit.
 */
typedef struct gw_recip {
        uint64_t mul; /* ceil(2^shift / d); 0: not made (plain division) */
        uint32_t shift;
        int64_t d;
} gw_recip;

#define GW_RECIP_BITS 54

gw_recip gw_recip_make(int64_t d);
/* floor(n / r.d), for 0 <= n < 2^GW_RECIP_BITS. */
static inline int64_t gw_recip_div(int64_t n, gw_recip r)
{
        if (r.mul == 0) {
                return n / r.d;
        }
        return (int64_t)(((unsigned __int128)(uint64_t)n * r.mul) >> r.shift);
}

typedef struct gw_limit {
        int64_t capacity;
        int64_t refill;
        int64_t period_us;
        gw_recip per_period, per_refill; /* made by gw_limit_make */
} gw_limit;

#define GW_LIMIT_CAPACITY_MAX  1000000
#define GW_LIMIT_PERIOD_MAX_US (24LL * 3600 * 1000000) /* one day */
#define GW_LIMIT_UNITS_MAX     (1LL << 53)
#define GW_LIMIT_KEY_MAX       96 /* bucket keys; longer ones are hashed down */
#define GW_LIMIT_SPEC_HELP     "CAPACITY:TOKENS/PERIOD (e.g. 5:1/5s, 500:500/1m) or off"

/* One decision, as the RateLimit-* headers carry it. */
typedef struct gw_decision {
        bool allowed;
        int64_t limit;     /* the bucket's capacity */
        int64_t remaining; /* whole tokens left after this request */
        int64_t retry_ms;  /* refused: when one token will be there; 0 when allowed */
        int64_t reset_ms;  /* when the bucket will be full again */
} gw_decision;

/*
 * Parses "CAPACITY:TOKENS/PERIOD" (PERIOD = [digits]unit, unit ms, s, m or h;
 * "5:1/5s", "500:500/1m", "10:1/s") or "off". Returns 0 with *out (and *off
 * false), 0 with *off true, or -1 with a message in err.
 */
int gw_limit_parse(const char *spec, gw_limit *out, bool *off, char *err, size_t err_len);
/* A limit with its divisions prepared; every gw_limit is made by this. */
gw_limit gw_limit_make(int64_t capacity, int64_t refill, int64_t period_us);
/* The same parameters for one of n replicas: capacity / n (at least 1), rate / n. */
gw_limit gw_limit_share(const gw_limit *lim, int64_t n);
/*
 * The clock of the in-process buckets: CLOCK_MONOTONIC_COARSE in us. Its
 * resolution is the kernel tick (1-4 ms), far below any bucket's period;
 * read once per decision, it costs a few ns where CLOCK_MONOTONIC costs
 * 30-70 ns in a VM (tools/bench_bucket.c measures both).
 */
int64_t gw_bucket_now_us(void);
/* That clock's resolution in ms, rounded up (what a reading may lag by). */
int64_t gw_bucket_clock_tick_ms(void);
/*
 * One decision on a bucket in units: *units is the bucket's content (updated),
 * *last_us its last refill (updated), now_us the clock. The arithmetic of
 * ratelimit.lua, in C. gw_limit_consume refills and takes one token (true
 * when there was one); gw_limit_describe adds what the headers say
 * (divisions, so only when a reply needs them); gw_limit_decide does both.
 */
bool gw_limit_consume(const gw_limit *lim, int64_t *units, int64_t *last_us, int64_t now_us);
void gw_limit_describe(const gw_limit *lim, int64_t units, bool allowed, gw_decision *out);
void gw_limit_decide(const gw_limit *lim, int64_t *units, int64_t *last_us, int64_t now_us,
                     gw_decision *out);

typedef struct gw_buckets gw_buckets;

/* An in-process table of at most max_keys buckets (least recently used evicted). */
int gw_buckets_new(gw_buckets **out, size_t max_keys);
void gw_buckets_free(gw_buckets *b);
/* Takes one token from key's bucket (a new key starts full); now_us is monotonic. */
void gw_buckets_take(gw_buckets *b, const char *key, size_t key_len, const gw_limit *lim,
                     int64_t now_us, gw_decision *out);
/* The same, answering only whether the token was there (no header numbers). */
bool gw_buckets_consume(gw_buckets *b, const char *key, size_t key_len, const gw_limit *lim,
                        int64_t now_us);
size_t gw_buckets_count(const gw_buckets *b);

/* ---- redis.c: the asynchronous Redis client -------------------------------- */

#define GW_REDIS_PREFIX_MAX 64

typedef struct gw_redis gw_redis;

typedef struct gw_redis_options {
        ks_redis_url url;   /* KEELSON_REDIS_URL (ks_redis_url.h) */
        const char *prefix; /* of every bucket key, at most GW_REDIS_PREFIX_MAX bytes */
        int timeout_ms;     /* a decision not answered by then: Redis is treated as gone */
        int retry_max_ms;   /* longest wait between connection attempts */
        int pending_max;    /* decisions in flight; more are refused */
        bool server_time;   /* the script reads Redis TIME (else it gets our clock) */
} gw_redis_options;

/* rc KS_OK with the decision, or KS_UNAVAILABLE (d NULL): decide locally. */
typedef void (*gw_redis_done_fn)(void *arg, int rc, const gw_decision *d);

/* Starts connecting (in the background: Redis may come later). */
int gw_redis_new(gw_redis **out, struct event_base *base, const gw_redis_options *o);
/* Every decision in flight ends (KS_UNAVAILABLE) before this returns. Accepts NULL. */
void gw_redis_free(gw_redis *r);
/* True while connected with the script loaded. */
bool gw_redis_up(const gw_redis *r);
/*
 * Sends one decision on key (the prefix is added). KS_OK: done runs once,
 * later, on the loop. Otherwise (KS_UNAVAILABLE: no connection;
 * KS_RESOURCE_EXHAUSTED: too many in flight) done never runs.
 */
int gw_redis_take(gw_redis *r, const char *key, size_t key_len, const gw_limit *lim,
                  gw_redis_done_fn done, void *arg);

/* ---- clientip.c: trusted proxies and X-Forwarded-For ---------------------- */

#define GW_IP_MAX       64
#define GW_PROXIES_MAX  64 /* CIDR entries in KEELSON_GATEWAY_TRUSTED_PROXIES */
#define GW_XFF_HOPS_MAX 32 /* X-Forwarded-For entries examined, right to left */

typedef struct gw_cidr {
        uint8_t addr[16]; /* IPv6, or IPv4 mapped (::ffff:a.b.c.d) */
        int bits;         /* prefix length over those 128 bits */
} gw_cidr;

typedef struct gw_proxies {
        gw_cidr v[GW_PROXIES_MAX];
        int n;
} gw_proxies;

/*
 * Parses a comma-separated list of addresses and CIDR blocks, IPv4 or IPv6
 * ("10.0.0.0/8, 127.0.0.1, fd00::/8"); "" is the empty list. Returns 0 or -1
 * with a message in err.
 */
int gw_proxies_parse(const char *list, gw_proxies *out, char *err, size_t err_len);
/*
 * The client address: the socket peer, unless the peer is a trusted proxy;
 * then the right-most X-Forwarded-For entry that is not a trusted proxy
 * (xff: the header's values in arrival order). An entry that is not an
 * address stops the walk at the hop that sent it. Written in canonical form.
 */
void gw_client_ip(const gw_proxies *p, const char *peer, const char *const *xff, int n_xff,
                  char out[GW_IP_MAX]);

/* ---- ratelimit.c: scopes, keys, decisions --------------------------------- */

/*
 * auth: public methods (sign-up, login, ...) keyed by client address and
 * method; api: authenticated methods keyed by tenant; resolve: tokens the
 * context cache does not know (each costs a ResolveContext on auth), keyed
 * by client address, so that a flood of made-up tokens is bounded before it
 * reaches auth and PostgreSQL.
 */
typedef enum gw_scope { GW_SCOPE_AUTH, GW_SCOPE_API, GW_SCOPE_RESOLVE, GW_SCOPE_COUNT } gw_scope;

#define GW_OVERRIDES_MAX 64

typedef struct gw_override {
        char method[GW_PATH_MAX]; /* "keelson.auth.v1.AuthService/Login" */
        bool off;
        gw_limit limit;
} gw_override;

/* The rate-limit settings, parsed and checked from gw_config's strings. */
typedef struct gw_rate_config {
        bool scope_off[GW_SCOPE_COUNT];
        gw_limit scope[GW_SCOPE_COUNT];
        gw_override overrides[GW_OVERRIDES_MAX];
        int n_overrides;
        gw_proxies proxies;
        bool has_redis;
        ks_redis_url redis;
} gw_rate_config;

/* ---- cache.c: the context cache ------------------------------------------ */

#define GW_ID_MAX 64 /* user, tenant, session and API key ids, and the role */

/* A resolved caller, in buffers of its own (copied in and out of the cache). */
typedef struct gw_context {
        char user_id[GW_ID_MAX + 1];
        char tenant_id[GW_ID_MAX + 1];
        char role[GW_ID_MAX + 1];
        char session_id[GW_ID_MAX + 1];
        char api_key_id[GW_ID_MAX + 1];
        int64_t expires_at_unix_ms; /* when the session or key expires; 0 = not said */
} gw_context;

typedef struct gw_cache gw_cache;

/*
 * At most max_entries contexts (0: no cache, *out = NULL), kept for ttl_ms
 * (session_ttl_ms, or api_key_ttl_ms for a context with an api_key_id) and
 * never past their own expiry. Loop thread only.
 */
int gw_cache_new(gw_cache **out, size_t max_entries, int64_t session_ttl_ms,
                 int64_t api_key_ttl_ms);
void gw_cache_free(gw_cache *c);
/* A hit copies the context into *out and returns true. now_ms: monotonic. */
bool gw_cache_get(gw_cache *c, const uint8_t sha[32], int64_t now_ms, gw_context *out);
/*
 * Every eviction by event moves the generation on. Read it before resolving
 * a token and hand it to gw_cache_put: a fill that raced a revocation is
 * dropped, so a context revoked while it was being resolved is never cached.
 */
uint64_t gw_cache_generation(const gw_cache *c);
void gw_cache_put(gw_cache *c, const uint8_t sha[32], const gw_context *ctx, uint64_t generation,
                  int64_t now_ms, int64_t now_unix_ms);
/* Evictions; each returns how many entries went. */
size_t gw_cache_evict_token(gw_cache *c, const uint8_t sha[32]);
/* Every context of user_id in tenant_id, or in every tenant when tenant_id is "". */
size_t gw_cache_evict_user(gw_cache *c, const char *user_id, const char *tenant_id);
/* Every context authenticated by the API key api_key_id (a scan: revocations are rare). */
size_t gw_cache_evict_api_key(gw_cache *c, const char *api_key_id);
size_t gw_cache_clear(gw_cache *c);
size_t gw_cache_count(const gw_cache *c);

/* ---- events.c: auth.context_revoked --------------------------------------- */

#define GW_REVOKED_TOPIC      "auth.context_revoked"
#define GW_REVOKED_TOKENS_MAX 1024 /* per event; more: the whole cache goes */
#define GW_EVENTS_QUEUE_MAX   1024 /* events waiting for the loop; more: likewise */

typedef struct gw_events gw_events;

/*
 * Subscribes to auth.context_revoked on every broker (a thread of its own)
 * and applies each event to cache on base's thread. cache may be NULL (the
 * events are then only counted).
 */
int gw_events_new(gw_events **out, struct event_base *base, const char *broker_url,
                  gw_cache *cache);
/* Stops the thread, drops what is queued, frees. Accepts NULL. */
void gw_events_free(gw_events *e);

/* ---- compress.c ----------------------------------------------------------- */

/* True when an Accept-Encoding value lets us answer with gzip. */
bool gw_accepts_gzip(const char *accept_encoding);
/* gzip of in[0..len) into a malloc'd *out. Returns 0, or -1 (out of memory). */
int gw_gzip(const void *in, size_t len, int level, uint8_t **out, size_t *out_len);

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
        /* rate limits (ratelimit.c) */
        char *redis_url; /* "" = no Redis: in-process buckets only */
        int64_t replicas;
        char *rate_auth;
        char *rate_api;
        char *rate_resolve;
        char *rate_overrides;
        int64_t rate_local_keys;
        int64_t redis_timeout_ms;
        int64_t redis_retry_ms;
        int64_t redis_pending_max;
        char *redis_prefix;
        bool redis_server_time;
        char *trusted_proxies;
        /* context cache (cache.c) */
        int64_t cache_entries;
        int64_t cache_session_ttl_s;
        int64_t cache_api_key_ttl_s;
        /* observability and replies */
        int64_t slow_ms;
        int64_t gzip_min_bytes;
        int64_t gzip_level;
        gw_rate_config rate; /* parsed from the strings above by gw_rate_config_parse */
} gw_config;

/* ---- routes.c ----------------------------------------------------------- */

/* catalog.c: every routed service's method table (its methods.def). */
extern const ks_method_table gw_catalog[];
extern const size_t gw_catalog_n;

typedef struct gw_route {
        char path[GW_PATH_MAX]; /* "/keelson.auth.v1.AuthService/Login", or "unmatched" */
        const char *method;     /* path + 1: the envelope's method name */
        int service;            /* ks_service_id; -1 for "unmatched" */
        unsigned flags;         /* KS_M_PUBLIC, ... */
        ks_revokes revokes;     /* what a success makes stale in the cache */
        /* Rate limit, set by gw_ratelimit_new: scope, parameters, key shape. */
        bool limited;
        int scope;       /* gw_scope */
        bool key_method; /* the method is part of the key (auth scope, overrides) */
        gw_limit limit;  /* shared by every replica, through Redis */
        gw_limit local;  /* this replica's share, while Redis is unavailable */
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
/* The method that turns a bearer token into a caller (KS_M_RESOLVER); never routed. */
const gw_route *gw_routes_resolver(const gw_routes *r);
/* Iteration, for wiring one upstream client per service that has routes. */
size_t gw_routes_count(const gw_routes *r);
const gw_route *gw_routes_at(const gw_routes *r, size_t i);
gw_route *gw_routes_at_mut(gw_routes *r, size_t i);
/* Counts one finished request of the route with its code and duration. */
void gw_route_observe(gw_route *route, int code, double seconds);

/* True when method ("keelson.auth.v1.AuthService/Login") is a routed method. */
bool gw_method_routed(const char *method);

/* ---- ratelimit.c (continued) --------------------------------------------- */

typedef struct gw_ratelimit gw_ratelimit;

/* A decision in progress: lives in the request that waits for it. */
typedef struct gw_limit_wait {
        gw_ratelimit *rl;
        const gw_route *route;
        char key[GW_LIMIT_KEY_MAX + 1];
        size_t key_len;
        gw_decision decision;
        void (*done)(struct gw_limit_wait *w); /* GW_LIMIT_LATER: runs once, on the loop */
} gw_limit_wait;

enum { GW_LIMIT_OFF, GW_LIMIT_NOW, GW_LIMIT_LATER };

/*
 * Parses and checks the rate-limit strings of cfg (scopes, overrides,
 * trusted proxies, KEELSON_REDIS_URL) into *out. Returns 0, or -1 with a
 * message naming the variable in err.
 */
int gw_rate_config_parse(const gw_config *cfg, gw_rate_config *out, char *err, size_t err_len);
/* Sets every route's limit from cfg->rate and starts the Redis client. */
int gw_ratelimit_new(gw_ratelimit **out, struct event_base *base, const gw_config *cfg,
                     gw_routes *routes);
/* Ends every decision in flight (they complete locally), frees. Accepts NULL. */
void gw_ratelimit_free(gw_ratelimit *rl);
/*
 * Takes one token for a request on route from subject (the client address
 * for the auth scope, the tenant for the api scope). GW_LIMIT_OFF: the route
 * is not limited. GW_LIMIT_NOW: w->decision is set. GW_LIMIT_LATER: w->done
 * runs later with w->decision set (from Redis, or locally if Redis failed).
 */
int gw_ratelimit_take(gw_ratelimit *rl, const gw_route *route, const char *subject,
                      gw_limit_wait *w);
/*
 * The same for the resolve scope: one token of client_ip's bucket for a
 * bearer token the cache does not know, taken before ResolveContext.
 * w->route->scope is then GW_SCOPE_RESOLVE.
 */
int gw_ratelimit_take_resolve(gw_ratelimit *rl, const char *client_ip, gw_limit_wait *w);
/* RateLimit-Limit, -Remaining, -Reset, and Retry-After when refused. */
void gw_ratelimit_headers(const gw_decision *d, struct evkeyvalq *headers);

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

typedef struct gw_server gw_server;

typedef enum gw_stage {
        GW_STAGE_INTAKE,    /* checking headers and body, on the libevent thread */
        GW_STAGE_RESOLVING, /* ResolveContext in flight */
        GW_STAGE_LIMITING,  /* a rate-limit decision in flight (Redis) */
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
        bool quiet;       /* no "request failed" line (rate-limit refusals) */
        int64_t start_ns; /* CLOCK_MONOTONIC */
        int64_t deadline_unix_ms;
        char request_id[GW_REQUEST_ID_MAX + 1];
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
        ks_counter *slow_requests;
        gw_ratelimit *rl;
        gw_cache *cache; /* NULL when KEELSON_GATEWAY_CACHE_ENTRIES is 0 */
        gw_events *events;
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
/* The client address of a request: its peer, or X-Forwarded-For through trusted proxies. */
void gw_request_client_ip(const gw_proxies *p, struct evhttp_request *req, char out[GW_IP_MAX]);

#endif
