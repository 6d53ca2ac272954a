/*
 * ks_health: /healthz, /readyz and /metrics on a libevent evhttp listener
 * that runs on its own thread with its own event_base, so a busy or stuck
 * RPC worker never delays a liveness probe.
 *
 * Stopping: libevent is told to use pthreads locks once per process
 * (ks_loop_threads_init) before the first base is created, which makes
 * event_base_loopexit() from another thread safe and wakes the loop through
 * its notification pipe. loopexit also works when it lands before the loop
 * has started: it is queued as a timeout the loop runs first.
 */
#include "ks_health.h"

#include "ks_log.h"
#include "ks_loop.h"
#include "ks_metrics.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define CHECK_NAME_MAX 64
/* Probes and scrapers are tiny requests; anything bigger is not ours. */
#define HEADERS_MAX_BYTES 8192
#define BODY_MAX_BYTES    0
#define CONN_TIMEOUT_S    10

typedef struct check {
        char name[CHECK_NAME_MAX];
        ks_ready_fn fn;
        void *arg;
} check;

struct ks_health {
        struct event_base *base;
        struct evhttp *http;
        pthread_t thread;
        bool thread_started;
        int port;
        pthread_mutex_t mu; /* guards checks: added from the caller, read by the loop */
        check checks[KS_HEALTH_CHECKS_MAX];
        int n_checks;
};

typedef void (*route_fn)(ks_health *h, struct evhttp_request *req);

static void reply_text(struct evhttp_request *req, int status, const char *reason,
                       const char *content_type, const char *body, size_t len)
{
        struct evbuffer *buf = evbuffer_new();
        struct evkeyvalq *headers = evhttp_request_get_output_headers(req);
        evhttp_add_header(headers, "Content-Type", content_type);
        evhttp_add_header(headers, "Cache-Control", "no-store");
        if (buf == NULL) {
                evhttp_send_error(req, HTTP_INTERNAL, NULL);
                return;
        }
        if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
                /* evhttp 2.1 would send a HEAD reply's body: give the length, keep the body. */
                char clen[32];
                snprintf(clen, sizeof(clen), "%zu", len);
                evhttp_add_header(headers, "Content-Length", clen);
        } else {
                evbuffer_add(buf, body, len);
        }
        evhttp_send_reply(req, status, reason, buf);
        evbuffer_free(buf);
}

#define TEXT_PLAIN "text/plain; charset=utf-8"

static void route_healthz(ks_health *h, struct evhttp_request *req)
{
        (void)h;
        reply_text(req, HTTP_OK, "OK", TEXT_PLAIN, "ok\n", 3);
}

static void route_readyz(ks_health *h, struct evhttp_request *req)
{
        check checks[KS_HEALTH_CHECKS_MAX];
        int n;

        /* Copy, so a slow check never holds the lock. */
        pthread_mutex_lock(&h->mu);
        n = h->n_checks;
        memcpy(checks, h->checks, sizeof(checks));
        pthread_mutex_unlock(&h->mu);

        const char *failed = NULL;
        for (int i = 0; i < n; i++) {
                /* Every check runs, so each probe exercises every dependency. */
                if (checks[i].fn(checks[i].arg) != 0 && failed == NULL) {
                        failed = checks[i].name;
                }
        }
        if (failed == NULL) {
                reply_text(req, HTTP_OK, "OK", TEXT_PLAIN, "ok\n", 3);
                return;
        }
        char body[CHECK_NAME_MAX + 32];
        int len = snprintf(body, sizeof(body), "not ready: %s\n", failed);
        reply_text(req, HTTP_SERVUNAVAIL, "Service Unavailable", TEXT_PLAIN, body, (size_t)len);
}

static void route_metrics(ks_health *h, struct evhttp_request *req)
{
        (void)h;
        char *text = NULL;
        size_t len = 0;
        ks_metrics *m = ks_metrics_default();
        if (m == NULL || ks_metrics_render(m, &text, &len) != 0) {
                evhttp_send_error(req, HTTP_INTERNAL, NULL);
                return;
        }
        reply_text(req, HTTP_OK, "OK", "text/plain; version=0.0.4", text, len);
        free(text);
}

static const struct route {
        const char *path;
        route_fn fn;
} routes[] = {
    {"/healthz", route_healthz},
    {"/readyz", route_readyz},
    {"/metrics", route_metrics},
};

static void on_request(struct evhttp_request *req, void *arg)
{
        ks_health *h = arg;
        enum evhttp_cmd_type method = evhttp_request_get_command(req);
        if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
                evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
                evhttp_send_error(req, 405, "Method Not Allowed");
                return;
        }
        const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
        const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
        for (size_t i = 0; path != NULL && i < sizeof(routes) / sizeof(routes[0]); i++) {
                if (strcmp(path, routes[i].path) == 0) {
                        routes[i].fn(h, req);
                        return;
                }
        }
        reply_text(req, HTTP_NOTFOUND, "Not Found", TEXT_PLAIN, "not found\n", 10);
}

static void *loop_main(void *arg)
{
        ks_health *h = arg;
        event_base_dispatch(h->base);
        return NULL;
}

int ks_health_bound_port(struct evhttp_bound_socket *sock)
{
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        evutil_socket_t fd = evhttp_bound_socket_get_fd(sock);
        if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
                return -1;
        }
        if (ss.ss_family == AF_INET) {
                return ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
        if (ss.ss_family == AF_INET6) {
                return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
        return -1;
}

/* Creates the base and listener; on failure the caller frees h. */
static int setup_listener(ks_health *h, const char *host, int port)
{
        if ((h->base = event_base_new()) == NULL || (h->http = evhttp_new(h->base)) == NULL) {
                return -1;
        }
        evhttp_set_max_headers_size(h->http, HEADERS_MAX_BYTES);
        evhttp_set_max_body_size(h->http, BODY_MAX_BYTES);
        evhttp_set_timeout(h->http, CONN_TIMEOUT_S);
        /* Every method reaches on_request, which answers 405 itself (evhttp would say 501). */
        evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                                EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                                EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
        evhttp_set_gencb(h->http, on_request, h);
        struct evhttp_bound_socket *sock =
            evhttp_bind_socket_with_handle(h->http, host, (ev_uint16_t)port);
        if (sock == NULL) {
                ks_log_error(NULL, "health listener cannot bind", "{s:s,s:i}", "host", host, "port",
                             port);
                return -1;
        }
        h->port = ks_health_bound_port(sock);
        return h->port > 0 ? 0 : -1;
}

static void health_free(ks_health *h)
{
        if (h->http != NULL) {
                evhttp_free(h->http);
        }
        if (h->base != NULL) {
                event_base_free(h->base);
        }
        pthread_mutex_destroy(&h->mu);
        free(h);
}

int ks_health_start(ks_health **out, const char *host, int port)
{
        if (out == NULL || host == NULL || port < 0 || port > 65535) {
                return -1;
        }
        if (ks_loop_threads_init() != 0) {
                return -1;
        }
        ks_health *h = calloc(1, sizeof(*h));
        if (h == NULL) {
                return -1;
        }
        if (pthread_mutex_init(&h->mu, NULL) != 0) {
                free(h);
                return -1;
        }
        if (setup_listener(h, host, port) != 0 ||
            pthread_create(&h->thread, NULL, loop_main, h) != 0) {
                health_free(h);
                return -1;
        }
        h->thread_started = true;
        *out = h;
        return 0;
}

int ks_health_port(const ks_health *h)
{
        return h != NULL ? h->port : -1;
}

int ks_health_add_check(ks_health *h, const char *name, ks_ready_fn fn, void *arg)
{
        if (h == NULL || name == NULL || fn == NULL || strlen(name) >= CHECK_NAME_MAX) {
                return -1;
        }
        pthread_mutex_lock(&h->mu);
        int rv = -1;
        if (h->n_checks < KS_HEALTH_CHECKS_MAX) {
                check *c = &h->checks[h->n_checks++];
                snprintf(c->name, sizeof(c->name), "%s", name);
                c->fn = fn;
                c->arg = arg;
                rv = 0;
        }
        pthread_mutex_unlock(&h->mu);
        return rv;
}

void ks_health_stop(ks_health *h)
{
        if (h == NULL) {
                return;
        }
        if (h->thread_started) {
                event_base_loopexit(h->base, NULL);
                pthread_join(h->thread, NULL);
        }
        health_free(h);
}
