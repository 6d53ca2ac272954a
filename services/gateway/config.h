/*
 * The gateway's settings, filled by main.c from its configuration table
 * (one variable per field; the rate-limit strings parsed into rate by
 * gw_rate_config_parse, ratelimit.h) and read by the modules the server
 * makes. Nothing changes them once the server runs.
 */
#ifndef GW_CONFIG_H
#define GW_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "bucket.h"
#include "clientip.h"
#include "cors.h"
#include "ks_redis_url.h"
#include "routes.h"

/*
 * auth: public methods (sign-up, login, ...) keyed by client address and
 * method; api: authenticated methods keyed by tenant; resolve: tokens the
 * context cache does not know (each costs a ResolveContext on auth), keyed
 * by client address, so that a flood of made-up tokens is bounded before it
 * reaches auth and PostgreSQL.
 */
typedef enum gw_scope {
        GW_SCOPE_AUTH,
        GW_SCOPE_API,
        GW_SCOPE_RESOLVE,
        GW_SCOPE_INTAKE, /* webhooks received, keyed by intake endpoint */
        GW_SCOPE_COUNT
} gw_scope;

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

typedef struct gw_config {
        char *host;
        int64_t port;
        char *admin_host; /* /healthz, /readyz, /metrics */
        int64_t admin_port;
        char *broker_url;
        char *log_level;
        int64_t body_max_bytes;
        int64_t headers_max_bytes;
        int64_t timeout_ms;      /* default and maximum deadline of an upstream call */
        int64_t max_inflight;    /* per upstream service */
        int64_t io_timeout_s;    /* writing a reply, idle keep-alive */
        int64_t read_timeout_ms; /* one request, head and body, from its first byte */
        int64_t max_connections;
        int64_t max_connections_per_address;
        bool reuse_port;                    /* SO_REUSEPORT on the public listener */
        int64_t h2_max_streams;             /* HTTP/2: open streams per connection */
        int64_t h2_stream_window_bytes;     /* HTTP/2: SETTINGS_INITIAL_WINDOW_SIZE */
        int64_t h2_connection_window_bytes; /* HTTP/2: the connection's receive window */
        int64_t grpc_message_max_bytes; /* a gRPC message over HTTP/2, on the wire and inflated */
        int64_t decode_threads;         /* threads decoding large bodies off the loop */
        int64_t decode_queue_max;       /* bodies waiting for them; more get resource_exhausted */
        int64_t health_probe_ms;        /* a replica of each service asked this often */
        int64_t drain_ms;               /* after SIGTERM: how long in-flight calls may finish */
        int64_t resend_ms; /* resend an unanswered idempotent call after this; 0 = never */
        /* rate limits (ratelimit.c) */
        char *redis_url; /* "" = no Redis: in-process buckets only */
        int64_t replicas;
        char *rate_auth;
        char *rate_api;
        char *rate_resolve;
        char *rate_intake;
        char *rate_overrides;
        int64_t rate_lease_max;
        int64_t rate_local_keys;
        int64_t redis_timeout_ms;
        int64_t redis_retry_ms;
        int64_t redis_pending_max;
        char *redis_prefix;
        bool redis_server_time;
        char *trusted_proxies;
        char *cors_origins; /* parsed into cors */
        char *tls_cert;     /* "" = cleartext */
        char *tls_key;
        char *tls_min_version;
        bool reflection; /* grpc.reflection served */
        /* EventService (hub.c) */
        int64_t events_retain;
        int64_t events_retain_s;
        int64_t events_heartbeat_ms;
        int64_t events_buffer_bytes;
        int64_t events_streams_max;
        /* context cache (cache.c) */
        int64_t cache_entries;
        int64_t cache_session_ttl_s;
        int64_t cache_api_key_ttl_s;
        /* observability and replies */
        int64_t slow_ms;
        int64_t gzip_min_bytes;
        int64_t gzip_level;
        gw_rate_config rate; /* parsed from the strings above by gw_rate_config_parse */
        gw_cors cors;        /* parsed from cors_origins */
} gw_config;

#endif
