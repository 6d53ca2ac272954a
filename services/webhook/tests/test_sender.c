/*
 * Unit tests of the webhook sender (services/webhook/sender.c) against real
 * HTTP sinks on loopback: small servers in this file, a thread per
 * connection, that read each request whole (by Content-Length) and answer as
 * the test scripts them (a status, a redirect, silence, a close, an endless
 * body, a banner for a TLS client).
 *
 * Each test asserts what the scheduler would see, the outcome and its
 * fields, and what the endpoint saw: the bytes of the request, and for
 * refusals that no connection came. Nothing asserts speed: waits for what
 * must happen are bounded far above any machine's delay (WAIT_MS), and a
 * refusal is shown to be a refusal (no connection) rather than a timeout by
 * configuring timeouts longer than that bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ks_clock.h"
#include "ks_metrics.h"
#include "sender.h"

#define WAIT_MS         30000 /* for what must happen: only a hang gets near it */
#define LONG_TIMEOUT_MS 60000 /* longer than WAIT_MS: a wait that ends was no timeout */
#define SINK_CONNS_MAX  32
#define SINK_HEAD_MAX   16384
#define SINK_BODY_MAX   (1 << 20)
#define GOT_MAX         64
#define TEST_UA         "keelson-webhook/test"

/*
 * A check off the test's thread (a sink's, the sender's): cmocka's assertions
 * unwind the test's stack and must not run there, so a failure aborts.
 */
#define MUST(cond)                                                                                 \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);                 \
                        abort();                                                                   \
                }                                                                                  \
        } while (0)

/* ---- a scripted HTTP sink ------------------------------------------------------ */

typedef enum sink_mode {
        SINK_REPLY,  /* answers every request: status, extra header lines, body */
        SINK_SILENT, /* reads the request, never answers */
        SINK_CLOSE,  /* reads the request, closes without a byte */
        SINK_STREAM, /* answers 200 with no length and a body that never ends */
        SINK_BANNER, /* writes a response at once and reads nothing (garbage to TLS) */
} sink_mode;

typedef struct sink {
        int listen_fd;
        int port;
        int stop[2]; /* a pipe: readable once the sink stops */
        pthread_t acceptor;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        /* The script, set before any request. */
        sink_mode mode;
        int status;
        const char *extra; /* header lines, each ending in \r\n */
        const char *body;
        size_t body_len;
        /* What it saw (under mu). */
        int connections;
        int requests;
        char head[SINK_HEAD_MAX + 1]; /* the last request's head */
        char *seen_body;              /* the last request's body */
        size_t seen_body_len;
        pthread_t conns[SINK_CONNS_MAX];
        int n_conns;
} sink;

typedef struct conn {
        sink *k;
        int fd;
        char *buf;
        size_t have;
} conn;

/* Waits for fd to be ready for events, or the sink to stop: true when ready. */
static bool conn_wait(conn *c, short events)
{
        struct pollfd p[2] = {{.fd = c->fd, .events = events},
                              {.fd = c->k->stop[0], .events = POLLIN}};
        for (;;) {
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR) {
                                continue;
                        }
                        return false;
                }
                return p[1].revents == 0;
        }
}

static bool send_all(conn *c, const char *data, size_t len)
{
        while (len > 0) {
                if (!conn_wait(c, POLLOUT)) {
                        return false;
                }
                ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
                if (n <= 0) {
                        return false;
                }
                data += n, len -= (size_t)n;
        }
        return true;
}

/* Reads one request into c->buf; its length, or 0 (closed, stopped, too large). */
static size_t read_request(conn *c)
{
        size_t cap = SINK_HEAD_MAX + SINK_BODY_MAX;
        size_t head_len = 0, total = 0;
        for (;;) {
                if (head_len == 0) {
                        char *end = memmem(c->buf, c->have, "\r\n\r\n", 4);
                        if (end != NULL) {
                                head_len = (size_t)(end - c->buf) + 4;
                                c->buf[head_len - 1] = '\0'; /* for strcasestr; restored below */
                                const char *cl = strcasestr(c->buf, "\r\ncontent-length:");
                                total = head_len + (cl == NULL ? 0 : strtoul(cl + 17, NULL, 10));
                                c->buf[head_len - 1] = '\n';
                        }
                }
                if (head_len > SINK_HEAD_MAX || total - head_len > SINK_BODY_MAX) {
                        return 0; /* more than the sink keeps */
                }
                if (head_len != 0 && c->have >= total) {
                        return total;
                }
                if (c->have == cap || (head_len == 0 && c->have > SINK_HEAD_MAX) ||
                    !conn_wait(c, POLLIN)) {
                        return 0;
                }
                ssize_t n = recv(c->fd, c->buf + c->have, cap - c->have, 0);
                if (n <= 0) {
                        return 0;
                }
                c->have += (size_t)n;
        }
}

static void record(sink *k, const char *req, size_t len)
{
        const char *end = memmem(req, len, "\r\n\r\n", 4);
        size_t head_len = (size_t)(end - req) + 4;
        pthread_mutex_lock(&k->mu);
        k->requests++;
        memcpy(k->head, req, head_len);
        k->head[head_len] = '\0';
        k->seen_body_len = len - head_len;
        memcpy(k->seen_body, req + head_len, k->seen_body_len);
        pthread_cond_broadcast(&k->cv);
        pthread_mutex_unlock(&k->mu);
}

static void reply(conn *c)
{
        sink *k = c->k;
        char head[256];
        int n = snprintf(head, sizeof head, "HTTP/1.1 %d Scripted\r\nContent-Length: %zu\r\n",
                         k->status, k->body_len);
        (void)(send_all(c, head, (size_t)n) &&
               send_all(c, k->extra == NULL ? "" : k->extra,
                        k->extra == NULL ? 0 : strlen(k->extra)) &&
               send_all(c, "\r\n", 2) && send_all(c, k->body == NULL ? "" : k->body, k->body_len));
}

static void stream_forever(conn *c)
{
        static const char head[] = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
        char chunk[16384];
        memset(chunk, 'x', sizeof chunk);
        if (send_all(c, head, sizeof head - 1)) {
                while (send_all(c, chunk, sizeof chunk)) {
                }
        }
}

/* Until the peer closes or the sink stops. */
static void drain(conn *c)
{
        char scratch[4096];
        while (conn_wait(c, POLLIN) && recv(c->fd, scratch, sizeof scratch, 0) > 0) {
        }
}

static void *serve(void *arg)
{
        conn *c = arg;
        sink *k = c->k;
        if (k->mode == SINK_BANNER) {
                static const char banner[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
                (void)send_all(c, banner, sizeof banner - 1);
                drain(c);
        }
        size_t len;
        while (k->mode != SINK_BANNER && (len = read_request(c)) > 0) {
                record(k, c->buf, len);
                if (k->mode == SINK_SILENT) {
                        drain(c);
                        break;
                }
                if (k->mode == SINK_CLOSE) {
                        break;
                }
                if (k->mode == SINK_STREAM) {
                        stream_forever(c);
                        break;
                }
                reply(c);
                memmove(c->buf, c->buf + len, c->have - len);
                c->have -= len;
        }
        close(c->fd);
        free(c->buf);
        free(c);
        return NULL;
}

static void *accept_loop(void *arg)
{
        sink *k = arg;
        struct pollfd p[2] = {{.fd = k->listen_fd, .events = POLLIN},
                              {.fd = k->stop[0], .events = POLLIN}};
        while (poll(p, 2, -1) >= 0 && p[1].revents == 0) {
                int fd = accept(k->listen_fd, NULL, NULL);
                if (fd < 0) {
                        continue;
                }
                pthread_mutex_lock(&k->mu);
                k->connections++;
                conn *c = calloc(1, sizeof *c);
                MUST(k->n_conns < SINK_CONNS_MAX && c != NULL);
                MUST((c->buf = malloc(SINK_HEAD_MAX + SINK_BODY_MAX)) != NULL);
                c->k = k;
                c->fd = fd;
                MUST(pthread_create(&k->conns[k->n_conns++], NULL, serve, c) == 0);
                pthread_cond_broadcast(&k->cv);
                pthread_mutex_unlock(&k->mu);
        }
        return NULL;
}

static void sink_start(sink *k, sink_mode mode, int status)
{
        memset(k, 0, sizeof *k);
        k->mode = mode;
        k->status = status;
        k->seen_body = malloc(SINK_BODY_MAX);
        assert_non_null(k->seen_body);
        assert_int_equal(pthread_mutex_init(&k->mu, NULL), 0);
        assert_int_equal(ks_cond_init_monotonic(&k->cv), 0);
        assert_int_equal(pipe(k->stop), 0);
        k->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(k->listen_fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t alen = sizeof a;
        assert_int_equal(bind(k->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
        assert_int_equal(listen(k->listen_fd, 64), 0);
        assert_int_equal(getsockname(k->listen_fd, (struct sockaddr *)&a, &alen), 0);
        k->port = ntohs(a.sin_port);
        assert_int_equal(pthread_create(&k->acceptor, NULL, accept_loop, k), 0);
}

static void sink_stop(sink *k)
{
        assert_int_equal(write(k->stop[1], "x", 1), 1);
        pthread_join(k->acceptor, NULL);
        for (int i = 0; i < k->n_conns; i++) {
                pthread_join(k->conns[i], NULL);
        }
        close(k->listen_fd);
        close(k->stop[0]);
        close(k->stop[1]);
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cv);
        free(k->seen_body);
}

/* Waits until *counter (a field of k) reaches n; fails the test after WAIT_MS. */
static void sink_wait(sink *k, const int *counter, int n)
{
        ks_deadline d = ks_deadline_after_ms(WAIT_MS);
        struct timespec ts = ks_deadline_timespec(d);
        pthread_mutex_lock(&k->mu);
        while (*counter < n) {
                if (pthread_cond_timedwait(&k->cv, &k->mu, &ts) == ETIMEDOUT) {
                        pthread_mutex_unlock(&k->mu);
                        fail_msg("sink: waited %d ms for %d", WAIT_MS, n);
                }
        }
        pthread_mutex_unlock(&k->mu);
}

static int sink_count(sink *k, const int *counter)
{
        pthread_mutex_lock(&k->mu);
        int n = *counter;
        pthread_mutex_unlock(&k->mu);
        return n;
}

/* ---- what the callbacks received ------------------------------------------------- */

typedef struct collector collector;

typedef struct got {
        collector *c;
        int calls;
        int order; /* among the collector's completions, from 0 */
        wh_outcome outcome;
        int status;
        int64_t latency_us;
        int64_t retry_after_s;
        char excerpt[2048];
        size_t excerpt_len;
        char detail[512];
        pthread_t thread;
} got;

struct collector {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int done;
        got g[GOT_MAX];
};

static void collector_init(collector *c)
{
        memset(c, 0, sizeof *c);
        assert_int_equal(pthread_mutex_init(&c->mu, NULL), 0);
        assert_int_equal(ks_cond_init_monotonic(&c->cv), 0);
        for (int i = 0; i < GOT_MAX; i++) {
                c->g[i].c = c;
                c->g[i].order = -1;
        }
}

static void collector_fini(collector *c)
{
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
}

static void on_done(const wh_result *r, void *user)
{
        got *g = user;
        collector *c = g->c;
        MUST(r->detail != NULL && r->excerpt != NULL && r->excerpt[r->excerpt_len] == '\0');
        pthread_mutex_lock(&c->mu);
        g->calls++;
        g->order = c->done++;
        g->outcome = r->outcome;
        g->status = r->http_status;
        g->latency_us = r->latency_us;
        g->retry_after_s = r->retry_after_s;
        g->excerpt_len = r->excerpt_len < sizeof g->excerpt ? r->excerpt_len : sizeof g->excerpt;
        memcpy(g->excerpt, r->excerpt, g->excerpt_len);
        snprintf(g->detail, sizeof g->detail, "%s", r->detail);
        g->thread = pthread_self();
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
}

static void collector_wait(collector *c, int n)
{
        ks_deadline d = ks_deadline_after_ms(WAIT_MS);
        struct timespec ts = ks_deadline_timespec(d);
        pthread_mutex_lock(&c->mu);
        while (c->done < n) {
                if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT) {
                        pthread_mutex_unlock(&c->mu);
                        fail_msg("waited %d ms for %d results", WAIT_MS, n);
                }
        }
        pthread_mutex_unlock(&c->mu);
}

static int collector_done(collector *c)
{
        pthread_mutex_lock(&c->mu);
        int n = c->done;
        pthread_mutex_unlock(&c->mu);
        return n;
}

static void expect_outcome(const got *g, wh_outcome want)
{
        if (g->outcome != want) {
                fail_msg("outcome %s (%s), expected %s", wh_outcome_name(g->outcome), g->detail,
                         wh_outcome_name(want));
        }
}

/* ---- senders and attempts ------------------------------------------------------- */

static wh_addr_policy loopback_allowed;

static wh_sender_options options(bool allow_loopback)
{
        wh_sender_options o;
        wh_sender_options_init(&o);
        o.user_agent = TEST_UA;
        o.connect_timeout_ms = LONG_TIMEOUT_MS;
        o.timeout_ms = LONG_TIMEOUT_MS;
        if (allow_loopback) {
                char err[WH_ADDR_ERR_MAX];
                assert_int_equal(
                    wh_addr_policy_parse(&loopback_allowed, "127.0.0.1/32", err, sizeof err), 0);
                o.allow = &loopback_allowed;
        }
        return o;
}

static wh_sender *sender_of(const wh_sender_options *o)
{
        wh_sender *s = NULL;
        assert_int_equal(wh_sender_new(&s, o), KS_OK);
        assert_non_null(s);
        return s;
}

static const wh_header STD_HEADERS[] = {
    {"webhook-id", "msg_2mPq8fJ3"},
    {"webhook-timestamp", "1767225600"},
    {"webhook-signature", "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="},
    {"content-type", "application/json"},
};

static int submit_body(wh_sender *s, const char *url, const void *body, size_t len, got *g)
{
        wh_attempt a = {
            .url = url, .body = body, .body_len = len, .headers = STD_HEADERS, .headers_n = 4};
        return wh_sender_submit(s, &a, on_done, g);
}

static void submit(wh_sender *s, const char *url, got *g)
{
        static const char json[] = "{\"type\":\"invoice.paid\"}";
        assert_int_equal(submit_body(s, url, json, sizeof json - 1, g), KS_OK);
}

static const char *url_of(char *buf, size_t len, const char *host, int port, const char *path)
{
        snprintf(buf, len, "http://%s:%d%s", host, port, path);
        return buf;
}

/* One attempt to url, start to end, through a sender made from o. */
static void send_one(const wh_sender_options *o, const char *url, got *out)
{
        collector c;
        collector_init(&c);
        wh_sender *s = sender_of(o);
        submit(s, url, &c.g[0]);
        collector_wait(&c, 1);
        wh_sender_free(s);
        assert_int_equal(c.g[0].calls, 1);
        *out = c.g[0];
        collector_fini(&c);
}

/* ---- delivery --------------------------------------------------------------------- */

static void test_delivered(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_REPLY, 200);
        k.body = "ok";
        k.body_len = 2;
        ks_metrics *m = NULL;
        assert_int_equal(ks_metrics_new(&m), 0);
        wh_sender_options o = options(true);
        o.metrics = m;
        wh_sender *s = sender_of(&o);
        collector c;
        collector_init(&c);

        unsigned char body[1000]; /* every byte value, NUL, CR and LF included */
        for (size_t i = 0; i < sizeof body; i++) {
                body[i] = (unsigned char)(i * 7);
        }
        char url[128];
        url_of(url, sizeof url, "127.0.0.1", k.port, "/hooks/a?x=1");
        assert_int_equal(submit_body(s, url, body, sizeof body, &c.g[0]), KS_OK);
        collector_wait(&c, 1);

        got *g = &c.g[0];
        expect_outcome(g, WH_DELIVERED);
        assert_int_equal(g->status, 200);
        assert_int_equal(g->excerpt_len, 2);
        assert_memory_equal(g->excerpt, "ok", 2);
        assert_int_equal(g->retry_after_s, -1);
        assert_string_equal(g->detail, "HTTP 200");
        assert_true(g->latency_us > 0);
        assert_false(pthread_equal(g->thread, pthread_self())); /* the sender's thread */

        assert_int_equal(k.requests, 1);
        assert_non_null(strstr(k.head, "POST /hooks/a?x=1 HTTP/1.1\r\n"));
        assert_non_null(strstr(k.head, "\r\nwebhook-id: msg_2mPq8fJ3\r\n"));
        assert_non_null(strstr(k.head, "\r\nwebhook-timestamp: 1767225600\r\n"));
        assert_non_null(strstr(
            k.head, "\r\nwebhook-signature: v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=\r\n"));
        assert_non_null(strstr(k.head, "\r\ncontent-type: application/json\r\n"));
        assert_non_null(strstr(k.head, "\r\nUser-Agent: " TEST_UA "\r\n"));
        assert_non_null(strstr(k.head, "\r\nContent-Length: 1000\r\n"));
        assert_null(strcasestr(k.head, "\r\nExpect:"));
        assert_int_equal(k.seen_body_len, sizeof body);
        assert_memory_equal(k.seen_body, body, sizeof body);

        wh_sender_free(s);
        ks_counter *delivered =
            ks_counter_get(m, "keelson_webhook_attempts_total", "", "outcome=\"delivered\"");
        assert_int_equal(ks_counter_value(delivered), 1);
        ks_metrics_free(m);
        collector_fini(&c);
        sink_stop(&k);
}

/* Without a content-type of the caller's, none is sent (not libcurl's form type); an empty body. */
static void test_no_content_type_empty_body(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_REPLY, 204);
        wh_sender_options o = options(true);
        wh_sender *s = sender_of(&o);
        collector c;
        collector_init(&c);
        char url[128];
        wh_header h = {"webhook-id", "msg_1"};
        wh_attempt a = {.url = url_of(url, sizeof url, "127.0.0.1", k.port, "/"),
                        .headers = &h,
                        .headers_n = 1};
        assert_int_equal(wh_sender_submit(s, &a, on_done, &c.g[0]), KS_OK);
        collector_wait(&c, 1);
        expect_outcome(&c.g[0], WH_DELIVERED);
        assert_int_equal(c.g[0].status, 204);
        assert_null(strcasestr(k.head, "\r\ncontent-type:"));
        assert_non_null(strstr(k.head, "\r\nContent-Length: 0\r\n"));
        assert_int_equal(k.seen_body_len, 0);
        wh_sender_free(s);
        collector_fini(&c);
        sink_stop(&k);
}

static void test_http_error_excerpt(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_REPLY, 500);
        k.body = "internal error: the database is on fire, please retry later";
        k.body_len = strlen(k.body);
        wh_sender_options o = options(true);
        o.excerpt_bytes_max = 16;
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        expect_outcome(&g, WH_HTTP_ERROR);
        assert_int_equal(g.status, 500);
        assert_int_equal(g.excerpt_len, 16);
        assert_memory_equal(g.excerpt, "internal error: ", 16);
        assert_string_equal(g.detail, "HTTP 500");
        sink_stop(&k);
}

/* 410: the caller disables the endpoint; it must tell it from any other refusal. */
static void test_gone(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_REPLY, 410);
        wh_sender_options o = options(true);
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        expect_outcome(&g, WH_HTTP_ERROR);
        assert_int_equal(g.status, 410);
        sink_stop(&k);
}

static void expect_retry_after(int status, const char *header, int64_t lo, int64_t hi)
{
        sink k;
        sink_start(&k, SINK_REPLY, status);
        k.extra = header;
        wh_sender_options o = options(true);
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        expect_outcome(&g, WH_HTTP_ERROR);
        assert_int_equal(g.status, status);
        if (g.retry_after_s < lo || g.retry_after_s > hi) {
                fail_msg("%s: %lld, expected %lld..%lld", header, (long long)g.retry_after_s,
                         (long long)lo, (long long)hi);
        }
        sink_stop(&k);
}

static void test_retry_after(void **state)
{
        (void)state;
        expect_retry_after(429, "Retry-After: 120\r\n", 120, 120);
        expect_retry_after(503, "retry-after:0\r\n", 0, 0);
        char date[128];
        time_t later = time(NULL) + 3600;
        struct tm tm;
        gmtime_r(&later, &tm);
        strftime(date, sizeof date, "Retry-After: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        expect_retry_after(503, date, 3000, 3700); /* generous: the clock moves */
        expect_retry_after(503, "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n", 0, 0); /* past */
        expect_retry_after(429, "Retry-After: soon\r\n", -1, -1);
        expect_retry_after(429, "Retry-After: 99999999999999999999\r\n", 400LL * 86400,
                           400LL * 86400);
        expect_retry_after(500, "X-Other: 1\r\n", -1, -1);
}

/* A 3xx is an outcome; its Location is never fetched. */
static void test_redirect_not_followed(void **state)
{
        (void)state;
        sink target;
        sink_start(&target, SINK_REPLY, 200);
        sink k;
        sink_start(&k, SINK_REPLY, 302);
        char location[128];
        snprintf(location, sizeof location, "Location: http://127.0.0.1:%d/stolen\r\n",
                 target.port);
        k.extra = location;
        wh_sender_options o = options(true);
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        expect_outcome(&g, WH_HTTP_ERROR);
        assert_int_equal(g.status, 302);
        assert_int_equal(sink_count(&k, &k.requests), 1);
        assert_int_equal(sink_count(&target, &target.connections), 0);
        sink_stop(&k);
        sink_stop(&target);
}

/* ---- failures ------------------------------------------------------------------------ */

static void test_timeout(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_SILENT, 0);
        wh_sender_options o = options(true);
        o.connect_timeout_ms = 300;
        o.timeout_ms = 300;
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        expect_outcome(&g, WH_TIMEOUT);
        assert_int_equal(g.status, 0);
        assert_true(g.latency_us < 5 * 1000 * 1000); /* the 300 ms bound, not WAIT_MS */
        assert_int_equal(sink_count(&k, &k.requests), 1);
        sink_stop(&k);
}

static void test_response_too_large(void **state)
{
        (void)state;
        static char big[200 * 1024];
        memset(big, 'y', sizeof big);
        wh_sender_options o = options(true);
        o.response_bytes_max = 64 * 1024;
        char url[128];
        got g;

        sink k; /* a declared length past the bound */
        sink_start(&k, SINK_REPLY, 200);
        k.body = big;
        k.body_len = sizeof big;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        expect_outcome(&g, WH_RESPONSE_TOO_LARGE);
        assert_int_equal(g.status, 200); /* the head came: the event was received */
        sink_stop(&k);

        sink_start(&k, SINK_STREAM, 0); /* no length, a body without end */
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        expect_outcome(&g, WH_RESPONSE_TOO_LARGE);
        assert_int_equal(g.excerpt_len, 1024);
        sink_stop(&k);

        static char flood[100 * 1000]; /* a head without end: 100 lines of 1000 bytes */
        size_t len = 0;
        for (int i = 0; i < 100; i++) {
                len += (size_t)snprintf(flood + len, sizeof flood - len, "X-Pad-%d: %0*d\r\n", i,
                                        988, 0);
        }
        sink_start(&k, SINK_REPLY, 200);
        k.extra = flood;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        expect_outcome(&g, WH_RESPONSE_TOO_LARGE);
        sink_stop(&k);
}

static void test_closed_without_answer(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_CLOSE, 0);
        wh_sender_options o = options(true);
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        expect_outcome(&g, WH_PROTOCOL_ERROR);
        assert_int_equal(g.status, 0);
        assert_int_equal(sink_count(&k, &k.requests), 1);
        sink_stop(&k);
}

static void test_connect_failed(void **state)
{
        (void)state;
        int fd = socket(AF_INET, SOCK_STREAM, 0); /* a port just free, nobody listening */
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t alen = sizeof a;
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
        close(fd);
        wh_sender_options o = options(true);
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", ntohs(a.sin_port), "/"), &g);
        expect_outcome(&g, WH_CONNECT_FAILED);
}

/* RFC 6761: .invalid never resolves. */
static void test_dns_failed(void **state)
{
        (void)state;
        wh_sender_options o = options(false);
        got g;
        send_one(&o, "http://no-such-host.invalid/hook", &g);
        expect_outcome(&g, WH_DNS_FAILED);
}

/* https to a server that speaks plain HTTP: TLS is attempted, and fails. */
static void test_tls_failed(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_BANNER, 0);
        wh_sender_options o = options(true);
        char url[128];
        snprintf(url, sizeof url, "https://127.0.0.1:%d/", k.port);
        got g;
        send_one(&o, url, &g);
        expect_outcome(&g, WH_TLS_FAILED);
        sink_stop(&k);
}

/* ---- the address policy, where libcurl connects ----------------------------------------- */

/*
 * No connection reached k from a refused attempt: an allowed attempt follows,
 * and k has seen exactly one connection once it is answered (a connection
 * made by the refused attempt would have been accepted first).
 */
static void expect_only_one_connection(sink *k)
{
        wh_sender_options o = options(true);
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k->port, "/"), &g);
        expect_outcome(&g, WH_DELIVERED);
        assert_int_equal(sink_count(k, &k->connections), 1);
        assert_int_equal(sink_count(k, &k->requests), 1);
}

static void test_loopback_refused_unless_allowed(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_REPLY, 200);
        wh_sender_options o = options(false);
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        expect_outcome(&g, WH_REFUSED_ADDRESS);
        assert_string_equal(g.detail, "127.0.0.1: loopback");
        assert_int_equal(g.status, 0);
        expect_only_one_connection(&k); /* and with 127.0.0.1/32 allowed: delivered */
        sink_stop(&k);
}

/* A name is judged by the addresses it resolves to: localhost is ::1 and 127.0.0.1. */
static void test_localhost_refused(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_REPLY, 200);
        wh_sender_options o = options(false);
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "localhost", k.port, "/"), &g);
        expect_outcome(&g, WH_REFUSED_ADDRESS);
        assert_non_null(strstr(g.detail, "loopback"));
        expect_only_one_connection(&k);
        /* With 127.0.0.1/32 allowed, ::1 is refused and 127.0.0.1 reached. */
        o = options(true);
        send_one(&o, url, &g);
        expect_outcome(&g, WH_DELIVERED);
        sink_stop(&k);
}

/*
 * Refused before any connection: the timeouts are longer than the wait, so
 * an attempt that tried to connect to these (most lead nowhere here) could
 * only end in time by failing in some other way, which the outcome shows.
 */
static void test_special_addresses_refused(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_REPLY, 200);
        char loop[6][128];
        const char *urls[] = {
            "http://10.0.0.1/hook",
            "http://169.254.169.254/latest/meta-data/",
            "http://100.100.100.200/latest/meta-data/",
            "http://[fd00::2]/hook",
            "http://[fe80::1]/hook",
            "http://[64:ff9b::a9fe:a9fe]/hook", /* NAT64 to the metadata service */
            "http://198.18.0.1/",
            url_of(loop[0], sizeof loop[0], "[::1]", k.port, "/"),
            url_of(loop[1], sizeof loop[1], "[::ffff:127.0.0.1]", k.port, "/"),
            url_of(loop[2], sizeof loop[2], "0.0.0.0", k.port, "/"),
            url_of(loop[3], sizeof loop[3], "2130706433", k.port,
                   "/"), /* 127.0.0.1 as one number */
            url_of(loop[4], sizeof loop[4], "0x7f.1", k.port, "/"),
            url_of(loop[5], sizeof loop[5], "127.1", k.port, "/"),
        };
        size_t n = sizeof urls / sizeof urls[0];
        wh_sender_options o = options(false);
        wh_sender *s = sender_of(&o);
        collector c;
        collector_init(&c);
        for (size_t i = 0; i < n; i++) {
                submit(s, urls[i], &c.g[i]);
        }
        collector_wait(&c, (int)n);
        for (size_t i = 0; i < n; i++) {
                if (c.g[i].outcome != WH_REFUSED_ADDRESS) {
                        fail_msg("%s: %s (%s)", urls[i], wh_outcome_name(c.g[i].outcome),
                                 c.g[i].detail);
                }
        }
        wh_sender_free(s);
        collector_fini(&c);
        expect_only_one_connection(&k);
        sink_stop(&k);
}

static void test_invalid_urls(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_REPLY, 200);
        char u[8][128];
        static char long_url[WH_URL_BYTES_MAX + 64];
        int n = snprintf(long_url, sizeof long_url, "http://127.0.0.1:%d/", k.port);
        memset(long_url + n, 'a', sizeof long_url - (size_t)n - 1);
        const char *urls[] = {
            url_of(u[0], sizeof u[0], "user:pass@127.0.0.1", k.port, "/"),
            url_of(u[1], sizeof u[1], "user@127.0.0.1", k.port, "/"),
            url_of(u[2], sizeof u[2], ":secret@127.0.0.1", k.port, "/"),
            url_of(u[3], sizeof u[3], "[fe80::1%25lo]", k.port, "/"),
            (snprintf(u[4], sizeof u[4], "ftp://127.0.0.1:%d/x", k.port), u[4]),
            (snprintf(u[5], sizeof u[5], "gopher://127.0.0.1:%d/", k.port), u[5]),
            (snprintf(u[6], sizeof u[6], "dict://127.0.0.1:%d/", k.port), u[6]),
            (snprintf(u[7], sizeof u[7], "127.0.0.1:%d/", k.port), u[7]),
            "file:///etc/passwd",
            "",
            "http://",
            "http://exa mple.com/",
            "http://example.com:99999/",
            long_url,
            NULL,
        };
        size_t count = sizeof urls / sizeof urls[0];
        wh_sender_options o = options(true);
        wh_sender *s = sender_of(&o);
        collector c;
        collector_init(&c);
        for (size_t i = 0; i < count; i++) {
                submit(s, urls[i], &c.g[i]);
        }
        collector_wait(&c, (int)count);
        for (size_t i = 0; i < count; i++) {
                if (c.g[i].outcome != WH_INVALID_URL || c.g[i].latency_us != 0) {
                        fail_msg("%.60s: %s (%s)", urls[i] == NULL ? "NULL" : urls[i],
                                 wh_outcome_name(c.g[i].outcome), c.g[i].detail);
                }
                assert_false(pthread_equal(c.g[i].thread, pthread_self()));
        }
        assert_string_equal(c.g[0].detail, "credentials in the URL");
        assert_string_equal(c.g[4].detail, "the scheme is not http or https");
        wh_sender_free(s);
        collector_fini(&c);
        expect_only_one_connection(&k);
        sink_stop(&k);
}

/* http_proxy and friends are ignored: the request goes straight to the endpoint. */
static void test_proxy_environment_ignored(void **state)
{
        (void)state;
        sink proxy;
        sink_start(&proxy, SINK_REPLY, 200);
        sink k;
        sink_start(&k, SINK_REPLY, 200);
        char p[128];
        url_of(p, sizeof p, "127.0.0.1", proxy.port, "");
        const char *vars[] = {"http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"};
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
                assert_int_equal(setenv(vars[i], p, 1), 0);
        }
        assert_int_equal(unsetenv("no_proxy"), 0);
        assert_int_equal(unsetenv("NO_PROXY"), 0);
        wh_sender_options o = options(true);
        char url[128];
        got g;
        send_one(&o, url_of(url, sizeof url, "127.0.0.1", k.port, "/"), &g);
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
                assert_int_equal(unsetenv(vars[i]), 0);
        }
        expect_outcome(&g, WH_DELIVERED);
        assert_int_equal(sink_count(&k, &k.requests), 1);
        assert_int_equal(sink_count(&proxy, &proxy.connections), 0);
        sink_stop(&k);
        sink_stop(&proxy);
}

/* ---- limits, queue, shutdown ---------------------------------------------------------- */

/*
 * Destination = host:port. Six attempts to a sink that never answers: four
 * run (the per-destination limit), two wait; an attempt to another sink
 * still gets a slot and is delivered while all six are pending.
 */
static void test_stuck_destination_does_not_block_others(void **state)
{
        (void)state;
        sink stuck, fine;
        sink_start(&stuck, SINK_SILENT, 0);
        sink_start(&fine, SINK_REPLY, 200);
        wh_sender_options o = options(true);
        o.attempts_max = 8;
        o.destination_attempts_max = 4;
        wh_sender *s = sender_of(&o);
        collector c;
        collector_init(&c);
        char a[128], b[128];
        url_of(a, sizeof a, "127.0.0.1", stuck.port, "/");
        url_of(b, sizeof b, "127.0.0.1", fine.port, "/");
        for (int i = 0; i < 6; i++) {
                submit(s, a, &c.g[i]);
        }
        sink_wait(&stuck, &stuck.requests, 4);
        submit(s, b, &c.g[6]);
        collector_wait(&c, 1);
        expect_outcome(&c.g[6], WH_DELIVERED);
        assert_int_equal(c.g[6].order, 0);
        assert_int_equal(collector_done(&c), 1);
        assert_int_equal(sink_count(&stuck, &stuck.connections), 4);

        wh_sender_free(s); /* the six end now, each once */
        for (int i = 0; i < 6; i++) {
                assert_int_equal(c.g[i].calls, 1);
                expect_outcome(&c.g[i], WH_SHUTDOWN);
        }
        assert_int_equal(sink_count(&stuck, &stuck.connections), 4); /* the two never started */
        collector_fini(&c);
        sink_stop(&stuck);
        sink_stop(&fine);
}

static void test_queue_full(void **state)
{
        (void)state;
        sink stuck, other;
        sink_start(&stuck, SINK_SILENT, 0);
        sink_start(&other, SINK_REPLY, 200);
        wh_sender_options o = options(true);
        o.attempts_max = 1;
        o.destination_attempts_max = 1;
        o.queue_max = 2;
        wh_sender *s = sender_of(&o);
        collector c;
        collector_init(&c);
        char a[128], b[128];
        url_of(a, sizeof a, "127.0.0.1", stuck.port, "/");
        url_of(b, sizeof b, "127.0.0.1", other.port, "/");
        submit(s, a, &c.g[0]);
        sink_wait(&stuck, &stuck.requests, 1); /* running: out of the queue */
        submit(s, a, &c.g[1]);
        submit(s, b, &c.g[2]);
        static const char json[] = "{}";
        assert_int_equal(submit_body(s, a, json, 2, &c.g[3]), KS_RESOURCE_EXHAUSTED);
        assert_int_equal(submit_body(s, b, json, 2, &c.g[3]), KS_RESOURCE_EXHAUSTED);
        wh_sender_free(s);
        for (int i = 0; i < 3; i++) {
                assert_int_equal(c.g[i].calls, 1);
                expect_outcome(&c.g[i], WH_SHUTDOWN);
        }
        assert_int_equal(c.g[3].calls, 0);
        assert_int_equal(sink_count(&other, &other.connections), 0);
        collector_fini(&c);
        sink_stop(&stuck);
        sink_stop(&other);
}

/* Running, waiting and just submitted: each callback once, shutdown, before free returns. */
static void test_free_in_flight(void **state)
{
        (void)state;
        sink stuck;
        sink_start(&stuck, SINK_SILENT, 0);
        wh_sender_options o = options(true);
        o.attempts_max = 3;
        o.destination_attempts_max = 3;
        wh_sender *s = sender_of(&o);
        collector c;
        collector_init(&c);
        char a[128];
        url_of(a, sizeof a, "127.0.0.1", stuck.port, "/");
        for (int i = 0; i < 3; i++) {
                submit(s, a, &c.g[i]);
        }
        sink_wait(&stuck, &stuck.requests, 3);
        for (int i = 3; i < 20; i++) {
                submit(s, a, &c.g[i]);
        }
        wh_sender_free(s);
        assert_int_equal(c.done, 20);
        for (int i = 0; i < 20; i++) {
                assert_int_equal(c.g[i].calls, 1);
                expect_outcome(&c.g[i], WH_SHUTDOWN);
                assert_int_equal(c.g[i].latency_us > 0, i < 3); /* only the running had started */
        }
        collector_fini(&c);
        sink_stop(&stuck);
}

/* ---- the API's own refusals --------------------------------------------------------------- */

static void expect_submit_refused(wh_sender *s, const wh_header *h, size_t n, size_t body_len,
                                  int want)
{
        static char body[300 * 1024];
        wh_attempt a = {.url = "http://127.0.0.1:9/",
                        .body = body,
                        .body_len = body_len,
                        .headers = h,
                        .headers_n = n};
        got never = {0};
        assert_int_equal(wh_sender_submit(s, &a, on_done, &never), want);
}

static void test_submit_refusals(void **state)
{
        (void)state;
        wh_sender_options o = options(true);
        o.body_bytes_max = 1000;
        wh_sender *s = sender_of(&o);
        const wh_header bad[][1] = {
            {{"webhook-id", "a\r\nX-Injected: 1"}},
            {{"webhook-id", "a\nb"}},
            {{"webhook-id", "a\x01"}},
            {{"webhook-id", ""}},
            {{"webhook-id", " \t "}},
            {{"web hook", "a"}},
            {{"webhook-id:", "a"}},
            {{"", "a"}},
            {{"Host", "internal.example"}},
            {{"content-length", "5"}},
            {{"Transfer-Encoding", "chunked"}},
            {{"Expect", "100-continue"}},
            {{"user-agent", "x"}},
            {{NULL, "a"}},
            {{"webhook-id", NULL}},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                expect_submit_refused(s, bad[i], 1, 10, KS_INVALID_ARGUMENT);
        }
        wh_header many[WH_HEADERS_MAX + 1];
        for (size_t i = 0; i < WH_HEADERS_MAX + 1; i++) {
                many[i] = (wh_header){"x-n", "1"};
        }
        expect_submit_refused(s, many, WH_HEADERS_MAX + 1, 10, KS_INVALID_ARGUMENT);
        expect_submit_refused(s, STD_HEADERS, 4, 1001, KS_INVALID_ARGUMENT);
        wh_attempt no_body = {.url = "http://127.0.0.1:9/", .body = NULL, .body_len = 5};
        got never = {0};
        assert_int_equal(wh_sender_submit(s, &no_body, on_done, &never), KS_INVALID_ARGUMENT);
        wh_sender_free(s);
}

static void expect_options_refused(wh_sender_options o)
{
        wh_sender *s = (wh_sender *)&o; /* not NULL: new must clear it */
        assert_int_equal(wh_sender_new(&s, &o), KS_INVALID_ARGUMENT);
        assert_null(s);
}

static void test_options_bounds(void **state)
{
        (void)state;
        wh_sender_options d;
        wh_sender_options_init(&d);
        wh_sender_options o;
        o = d, o.attempts_max = 0, expect_options_refused(o);
        o = d, o.attempts_max = 5000, expect_options_refused(o);
        o = d, o.destination_attempts_max = 65, expect_options_refused(o); /* > attempts_max */
        o = d, o.queue_max = 0, expect_options_refused(o);
        o = d, o.connect_timeout_ms = 99, expect_options_refused(o);
        o = d, o.timeout_ms = 4000, expect_options_refused(o); /* < connect_timeout_ms */
        o = d, o.body_bytes_max = 0, expect_options_refused(o);
        o = d, o.excerpt_bytes_max = -1, expect_options_refused(o);
        o = d, o.response_bytes_max = 512, expect_options_refused(o);
        o = d, o.excerpt_bytes_max = 4096, o.response_bytes_max = 2048, expect_options_refused(o);
        o = d, o.user_agent = NULL, expect_options_refused(o);
        o = d, o.user_agent = "", expect_options_refused(o);
        o = d, o.user_agent = "x\r\nX-Injected: 1", expect_options_refused(o);
        wh_sender *s = NULL;
        assert_int_equal(wh_sender_new(&s, &d), KS_OK);
        wh_sender_free(s);
        wh_sender_free(NULL);
}

/* A callback may submit (the scheduler's next attempt); the chain runs to its end. */
typedef struct chain {
        wh_sender *s;
        char url[128];
        collector c;
        int next;
} chain;

static chain the_chain;

static void on_chain_done(const wh_result *r, void *user)
{
        on_done(r, user);
        if (the_chain.next < 5) {
                wh_attempt a = {.url = the_chain.url, .headers = STD_HEADERS, .headers_n = 4};
                got *g = &the_chain.c.g[the_chain.next++];
                MUST(wh_sender_submit(the_chain.s, &a, on_chain_done, g) == KS_OK);
        }
}

static void test_callback_submits(void **state)
{
        (void)state;
        sink k;
        sink_start(&k, SINK_REPLY, 200);
        wh_sender_options o = options(true);
        the_chain.s = sender_of(&o);
        collector_init(&the_chain.c);
        url_of(the_chain.url, sizeof the_chain.url, "127.0.0.1", k.port, "/");
        the_chain.next = 1;
        wh_attempt a = {.url = the_chain.url, .headers = STD_HEADERS, .headers_n = 4};
        assert_int_equal(wh_sender_submit(the_chain.s, &a, on_chain_done, &the_chain.c.g[0]),
                         KS_OK);
        collector_wait(&the_chain.c, 5);
        wh_sender_free(the_chain.s);
        for (int i = 0; i < 5; i++) {
                expect_outcome(&the_chain.c.g[i], WH_DELIVERED);
                assert_int_equal(the_chain.c.g[i].order, i);
        }
        assert_int_equal(sink_count(&k, &k.requests), 5);
        assert_int_equal(sink_count(&k, &k.connections), 1); /* kept alive and reused */
        collector_fini(&the_chain.c);
        sink_stop(&k);
}

static void test_outcome_names(void **state)
{
        (void)state;
        for (int i = 0; i < WH_OUTCOME_COUNT; i++) {
                const char *name = wh_outcome_name((wh_outcome)i);
                assert_string_not_equal(name, "unknown");
                for (int j = 0; j < i; j++) {
                        assert_string_not_equal(name, wh_outcome_name((wh_outcome)j));
                }
        }
        assert_string_equal(wh_outcome_name(WH_OUTCOME_COUNT), "unknown");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_delivered),
            cmocka_unit_test(test_no_content_type_empty_body),
            cmocka_unit_test(test_http_error_excerpt),
            cmocka_unit_test(test_gone),
            cmocka_unit_test(test_retry_after),
            cmocka_unit_test(test_redirect_not_followed),
            cmocka_unit_test(test_timeout),
            cmocka_unit_test(test_response_too_large),
            cmocka_unit_test(test_closed_without_answer),
            cmocka_unit_test(test_connect_failed),
            cmocka_unit_test(test_dns_failed),
            cmocka_unit_test(test_tls_failed),
            cmocka_unit_test(test_loopback_refused_unless_allowed),
            cmocka_unit_test(test_localhost_refused),
            cmocka_unit_test(test_special_addresses_refused),
            cmocka_unit_test(test_invalid_urls),
            cmocka_unit_test(test_proxy_environment_ignored),
            cmocka_unit_test(test_stuck_destination_does_not_block_others),
            cmocka_unit_test(test_queue_full),
            cmocka_unit_test(test_free_in_flight),
            cmocka_unit_test(test_submit_refusals),
            cmocka_unit_test(test_options_bounds),
            cmocka_unit_test(test_callback_submits),
            cmocka_unit_test(test_outcome_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
