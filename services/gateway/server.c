/*
 * The HTTP side of the gateway: the front (front.c) on one libevent thread,
 * the admin listener (/healthz, /readyz, /metrics: ks_health, on a port of
 * its own) and signals. RPC paths go to handler.c, /console/ to console.c.
 *
 * Limits. The front (front.c) enforces the body and head limits, the
 * whole-request deadline, the idle timeout and the connection caps, and
 * answers what breaks them itself; only complete, well-framed requests
 * reach on_request.
 *
 * Shutdown. The first SIGINT/SIGTERM stops accepting connections, turns
 * /readyz to 503 and lets calls in flight finish for up to
 * KEELSON_GATEWAY_DRAIN_MS; the second stops at once. gw_server_free then
 * tears down in the one order that is safe: the front first (its cancel
 * callbacks detach every waiting request from its connection), then the
 * decode pool (it hands back every body, freeing its request), the rate
 * limiter (every decision in flight in Redis completes, freeing its request), then
 * the upstream (which hands back every call still in flight, freeing its
 * request), the event subscriber, the context cache, then the event base.
 */
#include <event2/event.h>
#include <jansson.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "config.h"
#include "connect.h"
#include "console.h"
#include "decodepool.h"
#include "events.h"
#include "descriptor_set.h"
#include "front.h"
#include "hub.h"
#include "reflection.h"
#include "watch.h"
#include "tls.h"
#include "handler.h"
#include "inflight.h"
#include "ks_clock.h"
#include "ks_health.h"
#include "ks_log.h"
#include "ks_loop.h"
#include "ks_metrics.h"
#include "ks_topology.h"
#include "probe.h"
#include "ratelimit.h"
#include "routes.h"
#include "server.h"
#include "upstream.h"

struct gw_server {
        const gw_config *cfg;
        struct event_base *base;
        gw_front *front;
        gw_decodepool *decoder;
        struct event *sigint_ev;
        struct event *sigterm_ev;
        struct event *sighup_ev;   /* TLS: read the certificate and key again */
        gw_tls *tls;               /* NULL: cleartext */
        gw_reflection *reflection; /* NULL: off */
        gw_hub *hub;               /* EventService/Subscribe */
        gw_watches *watches;       /* Health/Watch */
        struct event *drain_ev;
        gw_routes *routes;
        gw_upstream *up;
        gw_probe *probe; /* whether a replica of each service answers (Health) */
        gw_ratelimit *rl;
        gw_cache *cache; /* NULL when KEELSON_GATEWAY_CACHE_ENTRIES is 0 */
        gw_events *events;
        gw_inflight *inflight; /* requests waiting; draining and closing */
        gw_handler_env env;    /* what the handler sees of all this */
        gw_handler *handler;
        ks_health *admin;     /* /healthz, /readyz, /metrics */
        atomic_bool draining; /* read by the admin listener's thread */
        int port;
};

/* ---- the admin listener --------------------------------------------------------- */

/*
 * /healthz, /readyz and /metrics are not on the public port: they are
 * ks_health's (as on every service), on KEELSON_GATEWAY_ADMIN_HOST:PORT,
 * loopback by default. Its checks run on its own thread: they read only
 * atomics (the draining flag here, the rpc client's connection state).
 */
static int check_not_draining(void *arg)
{
        gw_server *s = arg;
        return atomic_load(&s->draining) ? -1 : 0;
}

static int check_auth_connected(void *arg)
{
        const gw_server *s = arg;
        return gw_upstream_connected(s->up, KS_SVC_AUTH) > 0 ? 0 : -1;
}

static int admin_setup(gw_server *s)
{
        if (ks_health_start(&s->admin, s->cfg->admin_host, (int)s->cfg->admin_port) != 0 ||
            ks_health_add_check(s->admin, "not shutting down", check_not_draining, s) != 0 ||
            ks_health_add_check(s->admin, "broker connection for auth", check_auth_connected, s) !=
                0) {
                ks_log_error(NULL, "cannot start the admin listener", "{s:s,s:I}", "host",
                             s->cfg->admin_host, "port", (json_int_t)s->cfg->admin_port);
                return -1;
        }
        return 0;
}

/* ---- requests --------------------------------------------------------------- */

static void on_request(gw_req *req, void *arg)
{
        gw_server *s = arg;
        int64_t start_ns = ks_mono_ns();
        char rid[GW_REQUEST_ID_MAX + 1];
        gw_connect_request_id(gw_req_header(req, "X-Request-Id"), rid);
        if (gw_console_path(gw_req_path(req))) { /* the admin console's static files */
                gw_console_serve(req, rid);
                return;
        }
        gw_handler_serve(s->handler, req, gw_req_path(req), rid, start_ns);
}

/* ---- signals and drain ---------------------------------------------------------- */

static void on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        gw_server *s = arg;
        ks_log_warn(NULL, "drain time is up: stopping with calls in flight", "{s:I}", "in_flight",
                    (json_int_t)gw_inflight_count(s->inflight));
        event_base_loopbreak(s->base);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
        (void)what;
        gw_server *s = arg;
        if (gw_inflight_draining(s->inflight)) {
                ks_log_info(NULL, "second signal: stopping now", "{s:i}", "signal", (int)sig);
                event_base_loopbreak(s->base);
                return;
        }
        ks_log_info(NULL, "draining", "{s:i,s:I}", "signal", (int)sig, "in_flight",
                    (json_int_t)gw_inflight_count(s->inflight));
        atomic_store(&s->draining, true);     /* /readyz: 503 */
        gw_front_drain(s->front);             /* no new connections; idle ones closed */
        gw_hub_drain(s->hub);                 /* event streams told to resume elsewhere */
        gw_watches_drain(s->watches);         /* health watchers: NOT_SERVING, then the end */
        if (gw_inflight_drain(s->inflight)) { /* requests wait: for drain_ms at most */
                struct timeval tv = {(time_t)(s->cfg->drain_ms / 1000),
                                     (suseconds_t)(s->cfg->drain_ms % 1000) * 1000};
                evtimer_add(s->drain_ev, &tv);
        }
}

/* ---- setup and teardown ------------------------------------------------------- */

static int http_setup(gw_server *s)
{
        const gw_config *cfg = s->cfg;
        gw_front_limits lim = {
            .head_max = (size_t)cfg->headers_max_bytes,
            .body_max = (size_t)cfg->body_max_bytes,
            .request_ms = cfg->read_timeout_ms,
            .idle_ms = cfg->io_timeout_s * 1000,
            .conns_max = cfg->max_connections,
            .conns_per_ip_max = cfg->max_connections_per_address,
            .h2_streams_max = cfg->h2_max_streams,
            .h2_stream_window = (int32_t)cfg->h2_stream_window_bytes,
            .h2_conn_window = (int32_t)cfg->h2_connection_window_bytes,
            /* one message and its 5-byte prefix */
            .grpc_body_max = (size_t)cfg->grpc_message_max_bytes + 5,
            .proxies = &cfg->rate.proxies,
            .reuse_port = cfg->reuse_port,
        };
        if (cfg->tls_cert[0] != '\0') {
                char why[512];
                if (gw_tls_new(&s->tls, cfg->tls_cert, cfg->tls_key, cfg->tls_min_version, why,
                               sizeof(why)) != 0) {
                        ks_log_error(NULL, "cannot set up TLS", "{s:s}", "error", why);
                        return -1;
                }
                lim.tls = s->tls;
        }
        if (gw_front_new(&s->front, s->base, cfg->host, (int)cfg->port, &lim, on_request, s) != 0) {
                return -1;
        }
        gw_front_set_streaming(s->front, gw_handler_wants_stream, s->handler);
        s->port = gw_front_port(s->front);
        return s->port > 0 ? 0 : -1;
}

/* SIGHUP: the TLS certificate and key again, for new connections; open ones keep theirs. */
static void on_hangup(evutil_socket_t sig, short what, void *arg)
{
        (void)sig;
        (void)what;
        gw_server *s = arg;
        char why[512];
        if (s->tls == NULL) {
                ks_log_info(NULL, "SIGHUP: no TLS configured, nothing to reload", NULL);
        } else if (gw_tls_reload(s->tls, why, sizeof(why)) != 0) {
                ks_log_error(NULL, "TLS reload failed: keeping the certificate in use", "{s:s}",
                             "error", why);
        } else {
                ks_log_info(NULL, "TLS certificate reloaded", "{s:s}", "cert", s->cfg->tls_cert);
        }
}

static int events_setup(gw_server *s)
{
        s->sigint_ev = evsignal_new(s->base, SIGINT, on_signal, s);
        s->sigterm_ev = evsignal_new(s->base, SIGTERM, on_signal, s);
        s->sighup_ev = evsignal_new(s->base, SIGHUP, on_hangup, s);
        s->drain_ev = evtimer_new(s->base, on_drain_timeout, s);
        if (s->sigint_ev == NULL || s->sigterm_ev == NULL || s->sighup_ev == NULL ||
            s->drain_ev == NULL || event_add(s->sigint_ev, NULL) != 0 ||
            event_add(s->sigterm_ev, NULL) != 0 || event_add(s->sighup_ev, NULL) != 0) {
                return -1;
        }
        return 0;
}

/* What grpc.health.v1.Health/Check reports: /readyz's view, and whether a replica answers. */
static bool probe_ready(void *arg)
{
        return check_not_draining(arg) == 0 && check_auth_connected(arg) == 0;
}

static bool probe_answers(void *arg, int service)
{
        const gw_server *s = arg;
        return gw_probe_answers(s->probe, service);
}

/* The handler first: the upstream hands its calls back to it. */
static int handler_setup(gw_server *s)
{
        s->env = (gw_handler_env){
            .cfg = s->cfg,
            .routes = s->routes,
            .rl = s->rl,
            .cache = s->cache,
            .inflight = s->inflight,
            .health = {.ready = probe_ready, .answers = probe_answers, .arg = s},
        };
        if (s->cfg->reflection) {
                if (gw_reflection_new(&s->reflection, gw_descriptor_set, gw_descriptor_set_len,
                                      gw_reflection_served, NULL) != 0) {
                        ks_log_error(NULL, "cannot load the embedded descriptors for reflection",
                                     NULL);
                        return -1;
                }
                s->env.reflection = s->reflection;
        }
        gw_hub_config hub = {.broker_url = s->cfg->broker_url,
                             .retain = (size_t)s->cfg->events_retain,
                             .retain_ms = s->cfg->events_retain_s * 1000,
                             .heartbeat_ms = s->cfg->events_heartbeat_ms,
                             .buffer_bytes = (size_t)s->cfg->events_buffer_bytes,
                             .subscribers_max = (size_t)s->cfg->events_streams_max};
        if (gw_hub_new(&s->hub, s->base, &hub) != 0) {
                return -1;
        }
        s->env.hub = s->hub;
        if (gw_watches_new(&s->watches, s->base, &s->env.health) != 0) {
                return -1;
        }
        s->env.watches = s->watches;
        if (gw_handler_new(&s->handler, &s->env) != 0 ||
            gw_upstream_new(&s->up, s->base, s->cfg, s->routes, gw_handler_complete, s->handler) !=
                0) {
                return -1;
        }
        s->env.up = s->up;
        if (gw_probe_new(&s->probe, s->base, s->cfg, s->routes, s->cfg->health_probe_ms) != 0) {
                return -1;
        }
        if (gw_decodepool_new(&s->decoder, s->base, (int)s->cfg->decode_threads,
                              (size_t)s->cfg->decode_queue_max, gw_handler_decoded,
                              s->handler) != 0) {
                return -1;
        }
        s->env.decoder = s->decoder;
        return 0;
}

int gw_server_new(gw_server **out, const gw_config *cfg)
{
        *out = NULL;
        /* Before any base exists: the decode pool's and the event bus's threads activate
         * events on the gateway's loop. */
        if (ks_loop_threads_init() != 0) {
                return -1;
        }
        gw_server *s = calloc(1, sizeof(*s));
        if (s == NULL) {
                return -1;
        }
        s->cfg = cfg;
        if ((s->base = event_base_new()) == NULL || gw_inflight_new(&s->inflight, s->base) != 0 ||
            gw_routes_new(&s->routes) != 0 ||
            gw_ratelimit_new(&s->rl, s->base, cfg, s->routes) != 0 ||
            gw_cache_new(&s->cache, (size_t)cfg->cache_entries, cfg->cache_session_ttl_s * 1000,
                         cfg->cache_api_key_ttl_s * 1000) != 0 ||
            gw_events_new(&s->events, s->base, cfg->broker_url, s->cache) != 0 ||
            handler_setup(s) != 0 || events_setup(s) != 0 || http_setup(s) != 0 ||
            admin_setup(s) != 0) {
                gw_server_free(s);
                return -1;
        }
        *out = s;
        return 0;
}

int gw_server_port(const gw_server *s)
{
        return s->port;
}

int gw_server_run(gw_server *s)
{
        ks_log_info(NULL, "gateway listening", "{s:s,s:i,s:s,s:i,s:I}", "host", s->cfg->host,
                    "port", s->port, "admin_host", s->cfg->admin_host, "admin_port",
                    ks_health_port(s->admin), "routes", (json_int_t)gw_routes_count(s->routes));
        return event_base_dispatch(s->base) < 0 ? -1 : 0;
}

void gw_server_free(gw_server *s)
{
        if (s == NULL) {
                return;
        }
        ks_health_stop(s->admin); /* its checks read the upstream */
        s->admin = NULL;
        if (s->inflight != NULL) {
                gw_inflight_close(s->inflight);
        }
        gw_front_free(s->front); /* runs the cancel callbacks: see handler.c */
        s->front = NULL;
        gw_decodepool_free(s->decoder); /* hands back every body it has */
        s->decoder = NULL;
        gw_ratelimit_free(s->rl); /* completes every decision in flight */
        s->rl = NULL;
        gw_upstream_free(s->up); /* hands back every call in flight */
        s->up = NULL;
        gw_probe_free(s->probe); /* its own calls, answered to nobody */
        s->probe = NULL;
        gw_events_free(s->events);
        s->events = NULL;
        gw_cache_free(s->cache);
        s->cache = NULL;
        if (s->inflight != NULL && gw_inflight_count(s->inflight) != 0) {
                ks_log_error(NULL, "requests left waiting at shutdown", "{s:I}", "count",
                             (json_int_t)gw_inflight_count(s->inflight));
        }
        struct event *evs[] = {s->sigint_ev, s->sigterm_ev, s->sighup_ev, s->drain_ev};
        for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
                if (evs[i] != NULL) {
                        event_free(evs[i]);
                }
        }
        gw_tls_free(s->tls); /* after the front: its connections held references */
        gw_reflection_free(s->reflection);
        gw_hub_free(s->hub); /* after the front: its streams were the front's requests */
        gw_watches_free(s->watches);
        gw_handler_free(s->handler);
        gw_routes_free(s->routes);
        gw_inflight_free(s->inflight);
        if (s->base != NULL) {
                event_base_free(s->base);
        }
        free(s);
}
