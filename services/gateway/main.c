/*
 * keelson-gateway: the HTTP front door. Speaks the Connect protocol's unary
 * RPCs over HTTP/1.1 and forwards each call through the broker. This file
 * wires configuration, logging and the server (README.md lists the rest).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "ratelimit.h"
#include "server.h"
#include "ks_process.h"
#include "ks_log.h"
#include "ks_shutdown.h"

static const ks_config_var config_vars[] = {
    KS_CFG_STR("KEELSON_GATEWAY_HOST", gw_config, host, "127.0.0.1", KS_CFG_NONEMPTY,
               "address to listen on for HTTP"),
    KS_CFG_INT("KEELSON_GATEWAY_PORT", gw_config, port, "8080", 0, 65535,
               "port to listen on (0 = any free port; the port bound is logged)"),
    KS_CFG_BOOL("KEELSON_GATEWAY_REUSE_PORT", gw_config, reuse_port, "false",
                "let several gateway processes of one host listen on the same "
                "KEELSON_GATEWAY_HOST:PORT (SO_REUSEPORT: the kernel spreads new connections "
                "over them, so a host's cores all serve); each needs an admin port of its own"),
    KS_CFG_STR("KEELSON_GATEWAY_ADMIN_HOST", gw_config, admin_host, "127.0.0.1", KS_CFG_NONEMPTY,
               "address of the /healthz, /readyz and /metrics listener (loopback: only this "
               "machine; 0.0.0.0 in a pod, for probes and scraping)"),
    KS_CFG_INT("KEELSON_GATEWAY_ADMIN_PORT", gw_config, admin_port, "7470", 0, 65535,
               "port of the /healthz, /readyz and /metrics listener (0 = any free port; the port "
               "bound is logged as admin_port)"),
    KS_CFG_STR("KEELSON_BROKER_URL", gw_config, broker_url, "tcp://127.0.0.1:7400", KS_CFG_NONEMPTY,
               "base address of every broker, tcp://host:port or ipc:///path, comma-separated"),
    KS_CFG_LOG_LEVEL(gw_config, log_level),
    KS_CFG_INT("KEELSON_GATEWAY_BODY_MAX_BYTES", gw_config, body_max_bytes, "1048576", 1024,
               67108864, "largest request body; bigger ones get 413 resource_exhausted"),
    KS_CFG_INT("KEELSON_GATEWAY_HEADERS_MAX_BYTES", gw_config, headers_max_bytes, "16384", 1024,
               1048576, "largest request line plus headers"),
    KS_CFG_INT("KEELSON_GATEWAY_TIMEOUT_MS", gw_config, timeout_ms, "10000", 10, 600000,
               "deadline of an upstream call: the default, and the maximum a "
               "Connect-Timeout-Ms header may ask for"),
    KS_CFG_INT("KEELSON_GATEWAY_MAX_INFLIGHT", gw_config, max_inflight, "1024", 1, 65536,
               "upstream calls in flight per service; more get resource_exhausted"),
    KS_CFG_INT("KEELSON_GATEWAY_IO_TIMEOUT_S", gw_config, io_timeout_s, "30", 1, 3600,
               "seconds to write a reply, and to keep an idle connection open before its "
               "next request"),
    KS_CFG_INT("KEELSON_GATEWAY_READ_TIMEOUT_MS", gw_config, read_timeout_ms, "10000", 100, 600000,
               "whole-request deadline: from a request's first byte to its last (head and "
               "body); a request not complete by then gets 408 and the connection is closed"),
    KS_CFG_INT("KEELSON_GATEWAY_MAX_CONNECTIONS", gw_config, max_connections, "10000", 1, 1000000,
               "open client connections; more are refused at accept with 503 (the "
               "descriptor limit is raised to fit, up to its hard limit)"),
    KS_CFG_INT("KEELSON_GATEWAY_MAX_CONNECTIONS_PER_ADDRESS", gw_config,
               max_connections_per_address, "256", 1, 1000000,
               "open connections per client address (the socket peer; trusted proxies "
               "are not counted); more are refused at accept with 503"),
    KS_CFG_STR("KEELSON_GATEWAY_TLS_CERT", gw_config, tls_cert, "", 0,
               "PEM certificate chain: the port speaks TLS only (ALPN h2 and http/1.1); empty "
               "= cleartext (TLS ends in front of the gateway). SIGHUP reads it again"),
    KS_CFG_STR("KEELSON_GATEWAY_TLS_KEY", gw_config, tls_key, "", KS_CFG_SECRET,
               "PEM private key of KEELSON_GATEWAY_TLS_CERT (a path; required with it)"),
    KS_CFG_STR("KEELSON_GATEWAY_TLS_MIN_VERSION", gw_config, tls_min_version, "1.2",
               KS_CFG_NONEMPTY, "oldest TLS version accepted: 1.2 or 1.3"),
    KS_CFG_BOOL("KEELSON_GATEWAY_REFLECTION", gw_config, reflection, "true",
                "serve grpc.reflection (v1 and v1alpha) over gRPC, without a token, so grpcurl "
                "and the like discover every public method; false answers it unimplemented"),
    KS_CFG_INT("KEELSON_GATEWAY_EVENTS_RETAIN", gw_config, events_retain, "10000", 0, 1000000,
               "EventService: events this gateway keeps so that a subscriber can resume from its "
               "cursor (0: none)"),
    KS_CFG_INT("KEELSON_GATEWAY_EVENTS_RETAIN_S", gw_config, events_retain_s, "600", 1, 86400,
               "EventService: the oldest event kept, in seconds"),
    KS_CFG_INT("KEELSON_GATEWAY_EVENTS_HEARTBEAT_MS", gw_config, events_heartbeat_ms, "15000", 100,
               300000, "EventService: a heartbeat to a stream that was sent nothing this long"),
    KS_CFG_INT("KEELSON_GATEWAY_EVENTS_BUFFER_BYTES", gw_config, events_buffer_bytes, "1048576",
               1024, 67108864,
               "EventService: a stream's reply not yet taken by its client, at most; past it "
               "the stream is reset (resource_exhausted to gRPC clients), which resume from "
               "their cursor"),
    KS_CFG_INT("KEELSON_GATEWAY_EVENTS_STREAMS_MAX", gw_config, events_streams_max, "1000", 0,
               1000000, "EventService: open streams on this gateway; more are refused"),
    KS_CFG_INT("KEELSON_GATEWAY_GRPC_MESSAGE_MAX_BYTES", gw_config, grpc_message_max_bytes,
               "4194304", 1024, 67108864,
               "largest gRPC request message over HTTP/2, on the wire and once inflated "
               "(gRPC's usual 4 MiB); a larger one is resource_exhausted. gRPC-Web over "
               "HTTP/1.1 stays within KEELSON_GATEWAY_BODY_MAX_BYTES"),
    KS_CFG_INT("KEELSON_GATEWAY_H2_MAX_STREAMS", gw_config, h2_max_streams, "100", 1, 10000,
               "HTTP/2: streams one connection may have open at once "
               "(SETTINGS_MAX_CONCURRENT_STREAMS); a stream over it is refused"),
    KS_CFG_INT("KEELSON_GATEWAY_H2_STREAM_WINDOW_BYTES", gw_config, h2_stream_window_bytes,
               "1048576", 65535, 2147483647,
               "HTTP/2: bytes of a request body a client may send on one stream before the "
               "gateway's WINDOW_UPDATE (SETTINGS_INITIAL_WINDOW_SIZE); given back as the body is "
               "taken in, so a 4 MiB gRPC message needs four round trips at the default"),
    KS_CFG_INT("KEELSON_GATEWAY_H2_CONNECTION_WINDOW_BYTES", gw_config, h2_connection_window_bytes,
               "4194304", 65535, 2147483647,
               "HTTP/2: the same for all the streams of one connection together (a WINDOW_UPDATE "
               "on stream 0 right after the SETTINGS)"),
    KS_CFG_INT("KEELSON_GATEWAY_HEALTH_PROBE_MS", gw_config, health_probe_ms, "2000", 100, 60000,
               "grpc.health.v1: every this many ms each service is sent a call no method "
               "answers, which a replica's loop refuses at once; a service whose call found no "
               "replica within this time is NOT_SERVING (so within twice this after its last "
               "replica stopped)"),
    KS_CFG_INT("KEELSON_GATEWAY_DRAIN_MS", gw_config, drain_ms, "10000", 0, 600000,
               "after SIGTERM/SIGINT: how long calls in flight may finish"),
    KS_CFG_INT("KEELSON_GATEWAY_RESEND_MS", gw_config, resend_ms, "1000", 0, 600000,
               "resend an unanswered call of an idempotent method (reads, Logout, token "
               "resolution: KS_M_IDEMPOTENT in methods.def) after this many ms, so a call caught "
               "by a replica that died is "
               "answered by another; 0 = never. A write is resent only when a repeat is answered "
               "as the first"),
    KS_CFG_INT("KEELSON_GATEWAY_DECODE_THREADS", gw_config, decode_threads, "1", 1, 64,
               "threads that decode request bodies over 16 KiB off the event loop (a batch of "
               "8,190 transfers as JSON takes tens of milliseconds)"),
    KS_CFG_INT("KEELSON_GATEWAY_DECODE_QUEUE_MAX", gw_config, decode_queue_max, "256", 1, 65536,
               "bodies waiting for a decode thread; more get 429 resource_exhausted"),
    /* rate limits */
    KS_CFG_STR("KEELSON_REDIS_URL", gw_config, redis_url, "redis://127.0.0.1:6379", KS_CFG_SECRET,
               "Redis for the shared rate limits, redis://[[user]:password@]host[:port][/db]; "
               "empty = in-process limits only"),
    KS_CFG_INT("KEELSON_GATEWAY_REPLICAS", gw_config, replicas, "1", 1, 1024,
               "gateway replicas sharing the limits: while Redis is unavailable each one "
               "enforces 1/N of every limit by itself"),
    KS_CFG_STR("KEELSON_GATEWAY_RATE_AUTH", gw_config, rate_auth, "5:1/5s", KS_CFG_NONEMPTY,
               "public methods (sign-up, login, ...) per client address and method: "
               "CAPACITY:TOKENS/PERIOD (PERIOD = [n]ms|s|m|h) or off"),
    KS_CFG_STR("KEELSON_GATEWAY_RATE_API", gw_config, rate_api, "500:500/1m", KS_CFG_NONEMPTY,
               "authenticated methods per tenant: CAPACITY:TOKENS/PERIOD or off"),
    KS_CFG_STR("KEELSON_GATEWAY_RATE_RESOLVE", gw_config, rate_resolve, "100:10/1s",
               KS_CFG_NONEMPTY,
               "bearer tokens the context cache does not know (each costs auth a "
               "ResolveContext), per client address: CAPACITY:TOKENS/PERIOD or off"),
    KS_CFG_STR("KEELSON_GATEWAY_RATE_INTAKE", gw_config, rate_intake, "400:200/1s", KS_CFG_NONEMPTY,
               "webhooks received (/webhooks/<provider>/<id>) per intake endpoint:"
               " CAPACITY:TOKENS/PERIOD or off"),
    KS_CFG_STR("KEELSON_GATEWAY_RATE_OVERRIDES", gw_config, rate_overrides, "", 0,
               "per-method limits, comma-separated package.Service/Method=CAPACITY:TOKENS/PERIOD "
               "or =off; each gets a bucket of its own"),
    KS_CFG_INT("KEELSON_GATEWAY_RATE_LEASE_MAX", gw_config, rate_lease_max, "100", 0, 1000,
               "most tokens of a bucket this gateway takes from Redis at once and spends "
               "itself, never over 1% of the bucket's capacity (0: every request decided in "
               "Redis; buckets under 200 always are)"),
    KS_CFG_INT("KEELSON_GATEWAY_RATE_LOCAL_KEYS", gw_config, rate_local_keys, "65536", 16, 1048576,
               "keys the in-process buckets hold (used while Redis is unavailable); "
               "the least recently used goes first"),
    KS_CFG_INT("KEELSON_GATEWAY_REDIS_TIMEOUT_MS", gw_config, redis_timeout_ms, "250", 1, 10000,
               "a rate-limit decision Redis has not answered by then is made locally, and the "
               "connection is dropped and made again"),
    KS_CFG_INT("KEELSON_GATEWAY_REDIS_RETRY_MS", gw_config, redis_retry_ms, "1000", 50, 60000,
               "longest wait between attempts to reach Redis again (from 50 ms, doubling)"),
    KS_CFG_INT("KEELSON_GATEWAY_REDIS_PENDING_MAX", gw_config, redis_pending_max, "4096", 1,
               1048576, "rate-limit decisions in flight in Redis; more are made locally"),
    KS_CFG_STR("KEELSON_GATEWAY_REDIS_PREFIX", gw_config, redis_prefix, "keelson:rl:", 0,
               "prefix of every rate-limit key in Redis (at most 64 bytes)"),
    KS_CFG_BOOL("KEELSON_GATEWAY_REDIS_SERVER_TIME", gw_config, redis_server_time, "true",
                "the bucket script reads Redis TIME, the clock every replica shares; false sends "
                "this gateway's clock instead (for managed Redis that refuses TIME in scripts)"),
    KS_CFG_STR("KEELSON_GATEWAY_TRUSTED_PROXIES", gw_config, trusted_proxies, "", 0,
               "addresses or CIDR blocks of proxies in front of the gateway, comma-separated: "
               "from them, the client address is the right-most X-Forwarded-For entry that is "
               "not a trusted proxy"),
    KS_CFG_STR("KEELSON_GATEWAY_CORS_ORIGINS", gw_config, cors_origins, "", 0,
               "browser origins whose pages may call the gateway (Connect, gRPC-Web), "
               "comma-separated \"https://app.example.com\"; \"*\" for any; empty for none. "
               "Tokens are bearer tokens: no request is allowed credentials"),
    /* context cache */
    KS_CFG_INT("KEELSON_GATEWAY_CACHE_ENTRIES", gw_config, cache_entries, "65536", 0, 4194304,
               "resolved callers cached by SHA-256 of their token (least recently used goes "
               "first); 0 = no cache"),
    KS_CFG_INT("KEELSON_GATEWAY_CACHE_SESSION_TTL_S", gw_config, cache_session_ttl_s, "30", 1, 3600,
               "longest a session's context is cached (revocation events evict sooner)"),
    KS_CFG_INT("KEELSON_GATEWAY_CACHE_API_KEY_TTL_S", gw_config, cache_api_key_ttl_s, "300", 1,
               86400, "longest an API key's context is cached (revocation events evict sooner)"),
    /* observability, replies */
    KS_CFG_INT("KEELSON_GATEWAY_SLOW_MS", gw_config, slow_ms, "300", 0, 3600000,
               "requests taking this long or longer are logged (route, status, duration only); "
               "0 = every request"),
    KS_CFG_INT("KEELSON_GATEWAY_GZIP_MIN_BYTES", gw_config, gzip_min_bytes, "1024", 0, 67108864,
               "JSON replies larger than this are gzip-compressed for clients that accept it"),
    KS_CFG_INT("KEELSON_GATEWAY_GZIP_LEVEL", gw_config, gzip_level, "6", 1, 9,
               "gzip compression level: 1 fastest, 9 smallest"),
};

int main(int argc, char **argv)
{
        gw_config cfg;
        size_t n_vars = sizeof(config_vars) / sizeof(config_vars[0]);
        /* Signals are the server's (libevent's): only the configuration comes from ks_process. */
        ks_process_config("gateway", argc, argv,
                          "keelson-gateway: the Connect, gRPC and gRPC-Web front door", config_vars,
                          n_vars, &cfg);
        char err[512] = "";
        char why[256];
        if (gw_cors_parse(cfg.cors_origins, &cfg.cors, why, sizeof(why)) != 0) {
                snprintf(err, sizeof(err), "KEELSON_GATEWAY_CORS_ORIGINS: %s", why);
        }
        if ((cfg.tls_cert[0] == '\0') != (cfg.tls_key[0] == '\0')) {
                snprintf(err, sizeof(err),
                         "KEELSON_GATEWAY_TLS_CERT and KEELSON_GATEWAY_TLS_KEY go together");
        }
        if (err[0] != '\0' || gw_rate_config_parse(&cfg, &cfg.rate, err, sizeof(err)) != 0) {
                fprintf(stderr, "keelson-gateway: %s\n", err);
                ks_config_free(config_vars, n_vars, &cfg);
                return 2;
        }
        /* A client that hangs up mid-reply must cost an EPIPE, not the process. */
        signal(SIGPIPE, SIG_IGN);

        int status = 1;
        gw_server *server = NULL;
        if (gw_server_new(&server, &cfg) != 0) {
                ks_log_error(NULL, "cannot start the gateway", NULL);
                goto out;
        }
        status = gw_server_run(server) == 0 ? 0 : 1;
        /* drained (or out of drain time): what is left is closing sockets */
        ks_shutdown_deadline(KS_SHUTDOWN_DEADLINE_MS);
        gw_server_free(server);
        /* Last, with the exit status: the line says the teardown finished too. */
        ks_log_info(NULL, "gateway stopped", "{s:i}", "exit_status", status);
        ks_config_free(config_vars, n_vars, &cfg);
        return status;
out:
        gw_server_free(server);
        ks_config_free(config_vars, n_vars, &cfg);
        return status;
}
